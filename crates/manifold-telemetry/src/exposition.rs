//! The Prometheus text exposition format (version 0.0.4): what `/metrics` answers.

use std::fmt::Write;

use crate::histogram::Snapshot;
use crate::names::{Kind, Metric};

/// The content type of the text this writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A scrape being written.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a metric: its help and type lines. Its samples follow.
    pub fn metric(&mut self, metric: &Metric) {
        let kind = match metric.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.text, "# HELP {} {}", metric.name, metric.help);
        let _ = writeln!(self.text, "# TYPE {} {kind}", metric.name);
    }

    /// One sample of a counter or gauge.
    pub fn sample(&mut self, metric: &Metric, labels: &[(&str, &str)], value: u64) {
        self.line(metric.name, "", labels, None, &value.to_string());
    }

    /// The bucket, sum and count samples of one histogram series.
    pub fn histogram(&mut self, metric: &Metric, labels: &[(&str, &str)], s: &Snapshot<'_>) {
        for (i, count) in s.cumulative.iter().enumerate() {
            let le = s
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), f64::to_string);
            self.line(
                metric.name,
                "_bucket",
                labels,
                Some(&le),
                &count.to_string(),
            );
        }
        let total = s.cumulative.last().copied().unwrap_or(0);
        self.line(
            metric.name,
            "_sum",
            labels,
            None,
            &s.sum_seconds.to_string(),
        );
        self.line(metric.name, "_count", labels, None, &total.to_string());
    }

    pub fn finish(self) -> String {
        self.text
    }

    fn line(
        &mut self,
        name: &str,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<&str>,
        value: &str,
    ) {
        let t = &mut self.text;
        t.push_str(name);
        t.push_str(suffix);
        let pairs = labels.iter().copied().chain(le.map(|le| ("le", le)));
        for (i, (key, val)) in pairs.enumerate() {
            t.push(if i == 0 { '{' } else { ',' });
            t.push_str(key);
            t.push_str("=\"");
            escape_into(t, val);
            t.push('"');
        }
        if !labels.is_empty() || le.is_some() {
            t.push('}');
        }
        t.push(' ');
        t.push_str(value);
        t.push('\n');
    }
}

/// A label value as the format quotes it: backslash, double quote and newline escaped.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use crate::names;

    #[test]
    fn samples_and_histograms_are_written_in_the_text_format() {
        let mut e = Exposition::new();
        e.metric(&names::UPSTREAM_UP);
        e.sample(&names::UPSTREAM_UP, &[("upstream", "a \"b\"\\c\nd")], 1);
        static BOUNDS: &[f64] = &[0.5, 1.0];
        let h = Histogram::new(BOUNDS);
        h.observe(std::time::Duration::from_millis(700));
        e.metric(&names::SERVER_SESSION_DURATION);
        e.histogram(
            &names::SERVER_SESSION_DURATION,
            &[("transport", "stdio")],
            &h.snapshot(),
        );
        let text = e.finish();
        assert!(
            text.contains("# TYPE manifold_upstream_up gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("manifold_upstream_up{upstream=\"a \\\"b\\\"\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        for line in [
            "mcp_server_session_duration_seconds_bucket{transport=\"stdio\",le=\"0.5\"} 0",
            "mcp_server_session_duration_seconds_bucket{transport=\"stdio\",le=\"1\"} 1",
            "mcp_server_session_duration_seconds_bucket{transport=\"stdio\",le=\"+Inf\"} 1",
            "mcp_server_session_duration_seconds_sum{transport=\"stdio\"} 0.7",
            "mcp_server_session_duration_seconds_count{transport=\"stdio\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
