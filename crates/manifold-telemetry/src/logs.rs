//! Logs: structured, to stderr (stdout belongs to the protocol), as text or one JSON object a
//! line, with the trace and span ids on every line logged inside an exported span. The level
//! comes from `MANIFOLD_LOG`, else `RUST_LOG`, else `telemetry.log_level`, else `info`.

use std::fmt;

use manifold_config::{LogFormat, TelemetryConfig};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, Layer, Registry};

use crate::names::SPAN_TARGET;
use crate::spans;
use crate::trace::{self, Tracing};

/// The filter directive in force, and where it came from.
pub fn level_of(cfg: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> String {
    env("MANIFOLD_LOG")
        .or_else(|| env("RUST_LOG"))
        .or_else(|| cfg.log_level.clone())
        .unwrap_or_else(|| "info".to_owned())
}

/// The log filter in force, for [`set_level`].
static FILTER: std::sync::OnceLock<reload::Handle<EnvFilter, Registry>> =
    std::sync::OnceLock::new();

/// Applies a reloaded configuration's `log_level` (the environment still wins, as at start);
/// returns the directive now in force. An invalid one is refused and the old one stays.
pub fn set_level(cfg: &TelemetryConfig) -> Result<String, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let directive = level_of(cfg, env);
    let filter = EnvFilter::try_new(&directive).map_err(|e| format!("{directive:?}: {e}"))?;
    let handle = FILTER.get().ok_or("logging is not set up")?;
    handle.reload(filter).map_err(|e| e.to_string())?;
    Ok(directive)
}

/// Whether `cfg`'s log level (or the environment's, which wins) is a valid filter.
pub fn check_level(cfg: &TelemetryConfig) -> Result<(), String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let directive = level_of(cfg, env);
    EnvFilter::try_new(&directive)
        .map(drop)
        .map_err(|e| format!("telemetry.log_level {directive:?}: {e}"))
}

/// Installs logging and, when an OTLP endpoint is configured, trace export. Keep what it
/// returns until the process ends: dropping it exports the last spans.
pub fn init(cfg: &TelemetryConfig) -> Option<Tracing> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let directive = level_of(cfg, env);
    let (filter, bad) = match EnvFilter::try_new(&directive) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(format!("{directive:?}: {e}"))),
    };
    // The filter can be swapped while running: a reloaded configuration's `log_level`.
    let (filter, handle) = reload::Layer::new(filter);
    let _ = FILTER.set(handle);
    let json = cfg.log_format == LogFormat::Json;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = vec![if json {
        fmt.fmt_fields(format::JsonFields::new())
            .event_format(WithTraceIds { json })
            .with_filter(filter)
            .boxed()
    } else {
        fmt.event_format(WithTraceIds { json })
            .with_filter(filter)
            .boxed()
    }];
    // Started before the subscriber exists, so its own set-up is not traced.
    let started = trace::start(cfg);
    if let Ok(Some((_, tracer))) = &started {
        layers.push(
            tracing_opentelemetry::layer()
                .with_tracer(tracer.clone())
                // Attributes the conventions do not ask for, and per-enter context
                // activation nothing here reads: each costs on every request.
                .with_tracked_inactivity(false)
                .with_threads(false)
                .with_location(false)
                .with_target(false)
                .with_context_activation(false)
                .with_filter(filter_fn(|m| m.is_span() && m.target() == SPAN_TARGET))
                .boxed(),
        );
    }
    let _ = tracing_subscriber::registry().with(layers).try_init();
    let tracing = match started {
        Ok(started) => started.map(|(t, _)| t),
        // Serving goes on without traces.
        Err(e) => {
            tracing::error!("traces are not exported: {e}");
            None
        }
    };
    if let Some(t) = &tracing {
        let endpoint = t.export.endpoint.as_deref();
        tracing::info!(
            protocol = ?t.export.protocol,
            endpoint = endpoint.unwrap_or("(from OTEL_EXPORTER_OTLP_*)"),
            "exporting traces over OTLP"
        );
    }
    if let Some(bad) = bad {
        tracing::warn!("the log level is not a valid filter, using info: {bad}");
    }
    tracing
}

/// The standard text or JSON line, with `trace_id` and `span_id` added when the event is
/// logged inside an exported span.
struct WithTraceIds {
    json: bool,
}

impl<S, N> FormatEvent<S, N> for WithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Read before formatting, which holds span extensions that this also needs.
        let ids = spans::current_ids();
        let mut line = String::new();
        if self.json {
            let json = format::format().json().flatten_event(true);
            json.format_event(ctx, Writer::new(&mut line), event)?;
        } else {
            let text = format::format().with_ansi(false);
            text.format_event(ctx, Writer::new(&mut line), event)?;
        }
        let Some((trace_id, span_id)) = ids else {
            return writer.write_str(&line);
        };
        let line = line.trim_end_matches('\n');
        if self.json {
            let body = line.strip_suffix('}').unwrap_or(line);
            writeln!(
                writer,
                "{body},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            )
        } else {
            writeln!(writer, "{line} trace_id={trace_id} span_id={span_id}")
        }
    }
}
