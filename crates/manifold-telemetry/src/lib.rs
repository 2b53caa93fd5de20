//! Manifold's telemetry: metrics in the Prometheus exposition format, traces exported with
//! OpenTelemetry over OTLP, and structured logs. Metric and span names live in [`names`] and
//! [`spans`]; the router records, the HTTP server exposes `/metrics`, and the binary installs
//! logging and trace export with [`logs::init`].
#![forbid(unsafe_code)]

pub mod credentials;
pub mod discovery;
pub mod exposition;
pub mod histogram;
pub mod logs;
pub mod metrics;
pub mod names;
pub mod recent;
pub mod spans;
pub mod trace;

pub use credentials::{ConsentOutcome, RefreshOutcome};
pub use metrics::{
    metrics, BreakerState, CacheCounters, Direction, Eviction, HealthCheck, HostTransport,
    OpLabels, Outcome, StoreOp, Tier, UpstreamCounters,
};
