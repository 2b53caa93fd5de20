//! Reading Manifold's `/metrics` (the Prometheus text format) in tests.

use std::collections::BTreeMap;

/// The value of every sample of `name` in `text` whose labels include `labels`, summed (0 if
/// none): a test names the labels it cares about and is not broken by labels added later.
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (sample, rest) = series.split_once('{').unwrap_or((series, "}"));
            if sample != name {
                return None;
            }
            let pairs: BTreeMap<&str, &str> = rest
                .trim_end_matches('}')
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            let wanted = labels.iter().all(|(k, v)| pairs.get(k) == Some(v));
            wanted.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// The value of the sample written exactly as `series` (`name{labels}`, labels in the order
/// Manifold writes them), summed over the expositions in `text` (one per scrape); `None` if
/// there is none. For a test that must tell a missing sample from a zero.
pub fn series(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.trim().parse::<f64>().ok()
        })
        .reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_whose_labels_include_the_ones_named_are_summed() {
        let text = "# TYPE x counter\n\
                    x{a=\"1\",b=\"2\"} 3\n\
                    x{a=\"1\",b=\"3\"} 4\n\
                    x{a=\"2\"} 5\n\
                    xy{a=\"1\"} 100\n\
                    y 6\n";
        assert_eq!(sum(text, "x", &[("a", "1")]), 7.0);
        assert_eq!(sum(text, "x", &[]), 12.0);
        assert_eq!(sum(text, "x", &[("a", "1"), ("b", "3")]), 4.0);
        assert_eq!(sum(text, "y", &[]), 6.0);
        assert_eq!(sum(text, "z", &[]), 0.0);
    }

    #[test]
    fn a_series_is_found_only_as_written_and_summed_over_expositions() {
        let text = "# TYPE x counter\n\
                    x{a=\"1\",b=\"2\"} 3\n\
                    x{a=\"1\"} 4\n\
                    x_total 8\n\
                    x{a=\"1\"} 5\n";
        assert_eq!(series(text, "x{a=\"1\"}"), Some(9.0));
        assert_eq!(series(text, "x{a=\"1\",b=\"2\"}"), Some(3.0));
        assert_eq!(series(text, "x"), None, "a name is not a prefix of another");
        assert_eq!(series(text, "x{a=\"2\"}"), None);
        assert_eq!(series(text, "x_total"), Some(8.0));
    }
}
