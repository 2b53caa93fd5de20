//! Traces: the OpenTelemetry SDK with an OTLP exporter (gRPC or HTTP/protobuf), configured by
//! the standard `OTEL_*` variables over `[telemetry]`, and W3C trace context carried in and
//! out of requests (`traceparent`, `tracestate`, `baggage`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use manifold_config::{OtlpProtocol, TelemetryConfig};
use opentelemetry::propagation::{Extractor, Injector, TextMapCompositePropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};
use opentelemetry_sdk::Resource;

/// Whether spans are exported: set once at start, read on every request to skip trace
/// context work when nothing would see it.
static ACTIVE: AtomicBool = AtomicBool::new(false);

pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The running trace pipeline. Dropping it exports what is still queued (bounded by the
/// exporter's timeout) and stops the exporter.
pub struct Tracing {
    provider: SdkTracerProvider,
    /// Where spans go (logged once logging is set up).
    pub(crate) export: Export,
    /// The gRPC exporter's I/O runs here, apart from the runtime that serves hosts.
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Tracing {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("exporting the last spans failed: {e}");
        }
    }
}

/// Where spans go, resolved from the environment over the config.
#[derive(Debug, PartialEq)]
pub struct Export {
    pub protocol: OtlpProtocol,
    /// The endpoint to set, or `None` when the environment names one (the exporter reads it).
    pub endpoint: Option<String>,
}

/// Where spans go: `None` when nothing names an endpoint, or when the SDK is disabled
/// (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`).
pub fn export_of(cfg: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> Option<Export> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none")
    {
        return None;
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .and_then(|p| OtlpProtocol::parse(&p))
        .or(cfg.otlp_protocol)
        // The specification's default.
        .unwrap_or(OtlpProtocol::HttpProtobuf);
    let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    if from_env {
        return Some(Export {
            protocol,
            endpoint: None,
        });
    }
    let base = cfg.otlp_endpoint.as_deref()?.trim_end_matches('/');
    let endpoint = match protocol {
        OtlpProtocol::Grpc => base.to_owned(),
        OtlpProtocol::HttpProtobuf if base.ends_with("/v1/traces") => base.to_owned(),
        OtlpProtocol::HttpProtobuf => format!("{base}/v1/traces"),
    };
    Some(Export {
        protocol,
        endpoint: Some(endpoint),
    })
}

/// Starts the trace pipeline if an endpoint is configured; returns it with the tracer for the
/// `tracing` layer. Call outside any async runtime (the HTTP exporter's client is blocking).
pub fn start(cfg: &TelemetryConfig) -> Result<Option<(Tracing, Tracer)>, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let Some(export) = export_of(cfg, env) else {
        return Ok(None);
    };
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    let timeout = Duration::from_secs(10);
    let (exporter, runtime) = match export.protocol {
        OtlpProtocol::Grpc => {
            // tonic needs a Tokio runtime for its connection; the batch processor's own
            // thread only waits on the export futures.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-export")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the OTLP exporter's runtime: {e}"))?;
            let _entered = runtime.enter();
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_timeout(timeout);
            if let Some(endpoint) = &export.endpoint {
                b = b.with_endpoint(endpoint);
            }
            (b.build(), Some(runtime))
        }
        OtlpProtocol::HttpProtobuf => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(timeout);
            if let Some(endpoint) = &export.endpoint {
                b = b.with_endpoint(endpoint);
            }
            (b.build(), None)
        }
    };
    let exporter = exporter.map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let mut builder = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource(cfg, env));
    // `OTEL_TRACES_SAMPLER` is read by the SDK itself and wins over the file.
    if env("OTEL_TRACES_SAMPLER").is_none() {
        if let Some(sampler) = cfg
            .sampler
            .as_deref()
            .and_then(|s| sampler(s, cfg.sampler_arg))
        {
            builder = builder.with_sampler(sampler);
        }
    }
    let provider = builder.build();
    let tracer = provider.tracer("manifold");
    ACTIVE.store(true, Ordering::Relaxed);
    Ok(Some((
        Tracing {
            provider,
            export,
            _runtime: runtime,
        },
        tracer,
    )))
}

/// `service.name` from `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`, else the config,
/// else `manifold`; the config's attributes under those of `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(cfg: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> Resource {
    let configured = cfg
        .resource_attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    let service = cfg.service_name.as_deref().unwrap_or("manifold").to_owned();
    let mut b = Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_service_name(service)
        .with_attributes(configured)
        .with_detector(Box::new(EnvResourceDetector::new()));
    if let Some(name) = env("OTEL_SERVICE_NAME") {
        b = b.with_service_name(name);
    }
    b.build()
}

fn sampler(name: &str, arg: Option<f64>) -> Option<Sampler> {
    let ratio = arg.unwrap_or(1.0);
    Some(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
        }
        _ => return None,
    })
}

/// W3C trace context as text: what a host sent (in HTTP headers or `params._meta`), or what
/// goes to an upstream.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Carrier {
    pairs: Vec<(&'static str, String)>,
}

impl Carrier {
    /// The keys it carries, as they are spelled in `_meta` and in HTTP headers.
    pub const KEYS: [&'static str; 3] = ["traceparent", "tracestate", "baggage"];

    pub fn set(&mut self, key: &str, value: String) {
        let Some(key) = Self::KEYS.iter().find(|k| k.eq_ignore_ascii_case(key)) else {
            return;
        };
        self.pairs.retain(|(k, _)| k != key);
        self.pairs.push((key, value));
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.pairs.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// The context it names, for a span's parent.
    pub fn extract(&self) -> opentelemetry::Context {
        opentelemetry::global::get_text_map_propagator(|p| p.extract(self))
    }

    /// The trace context of `cx`, for an upstream request.
    pub fn inject(cx: &opentelemetry::Context) -> Self {
        let mut carrier = Self::default();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(cx, &mut carrier));
        carrier
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.pairs.iter().map(|(k, _)| *k).collect()
    }
}

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        Carrier::set(self, key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn config(endpoint: Option<&str>, protocol: Option<OtlpProtocol>) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: endpoint.map(str::to_owned),
            otlp_protocol: protocol,
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        assert_eq!(export_of(&config(None, None), env_of(&[])), None);
        let disabled = env_of(&[
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ]);
        assert_eq!(export_of(&config(None, None), disabled), None);
    }

    #[test]
    fn the_config_endpoint_gets_the_signal_path_over_http_only() {
        let http = export_of(&config(Some("http://c:4318/"), None), env_of(&[])).unwrap();
        assert_eq!(http.protocol, OtlpProtocol::HttpProtobuf, "the default");
        assert_eq!(http.endpoint.as_deref(), Some("http://c:4318/v1/traces"));
        let grpc = export_of(
            &config(Some("http://c:4317"), Some(OtlpProtocol::Grpc)),
            env_of(&[]),
        )
        .unwrap();
        assert_eq!(grpc.endpoint.as_deref(), Some("http://c:4317"));
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let e = export_of(&config(Some("http://c:4318"), None), env).unwrap();
        assert_eq!(e.protocol, OtlpProtocol::Grpc);
        assert_eq!(e.endpoint, None, "the exporter reads the variable itself");
    }

    #[test]
    fn a_carrier_keeps_only_trace_context_keys() {
        let mut c = Carrier::default();
        c.set("TraceParent", "00-1-2-01".into());
        c.set("authorization", "secret".into());
        c.set("traceparent", "00-3-4-01".into());
        assert_eq!(c.iter().collect::<Vec<_>>(), [("traceparent", "00-3-4-01")]);
    }
}
