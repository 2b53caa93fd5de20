//! The native TOML schema as serde structs. Every key is optional here (defaults are applied
//! in `validate`) and unknown keys are rejected, so a typo is an error instead of a silently
//! ignored setting. The Claude JSON reader fills the same structs so both formats share one
//! validation path.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cache::RawCacheRule;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawServer {
    pub(crate) page_size: Option<u64>,
    pub(crate) max_message_bytes: Option<u64>,
    pub(crate) request_timeout_ms: Option<u64>,
    pub(crate) startup_timeout_ms: Option<u64>,
    pub(crate) shutdown_grace_ms: Option<u64>,
    pub(crate) cpus: Option<Vec<u64>>,
    pub(crate) session_queue_bytes: Option<u64>,
    pub(crate) stall_timeout_ms: Option<u64>,
    pub(crate) max_request_timeout_ms: Option<u64>,
    pub(crate) listen: Option<String>,
    pub(crate) allow_remote: Option<bool>,
    pub(crate) allowed_origins: Option<Vec<String>>,
    pub(crate) http_workers: Option<u64>,
    pub(crate) session_idle_timeout_ms: Option<u64>,
    pub(crate) sse_keepalive_ms: Option<u64>,
    pub(crate) max_sessions: Option<u64>,
    pub(crate) max_requests_per_session: Option<u64>,
    pub(crate) replay_events: Option<u64>,
    pub(crate) drain_delay: Option<String>,
    pub(crate) drain_timeout: Option<String>,
    pub(crate) client_timeout: Option<String>,
    pub(crate) keep_alive: Option<String>,
    pub(crate) admin: Option<String>,
    pub(crate) metrics_token: Option<String>,
    pub(crate) team: Option<String>,
    pub(crate) tls: Option<RawTls>,
    pub(crate) console: Option<RawConsole>,
    pub(crate) request_state_key: Option<String>,
    pub(crate) watch_config: Option<bool>,
}

/// `[server.tls]`: both files are required once the table is there, so that a half-written
/// table is an error rather than a silently plain listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawTls {
    pub(crate) cert: String,
    pub(crate) key: String,
}

/// `[server.console]`: the web console's OpenID Connect login.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawConsole {
    pub(crate) login_client_id: String,
    pub(crate) login_client_secret: Option<String>,
    pub(crate) admin_claim: String,
    pub(crate) admin_value: String,
    pub(crate) public_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawTelemetry {
    pub(crate) log_level: Option<String>,
    pub(crate) log_format: Option<String>,
    pub(crate) metrics: Option<bool>,
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) otlp_protocol: Option<String>,
    pub(crate) service_name: Option<String>,
    pub(crate) sampler: Option<String>,
    pub(crate) sampler_arg: Option<f64>,
    #[serde(default)]
    pub(crate) resource_attributes: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawNames {
    pub(crate) separator: Option<String>,
    pub(crate) max_length: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawUpstream {
    pub(crate) command: Option<String>,
    pub(crate) url: Option<String>,
    pub(crate) openapi: Option<String>,
    pub(crate) base_url: Option<String>,
    #[serde(default)]
    pub(crate) include: Vec<String>,
    #[serde(default)]
    pub(crate) exclude: Vec<String>,
    #[serde(default)]
    pub(crate) renames: BTreeMap<String, String>,
    pub(crate) timeout: Option<String>,
    pub(crate) max_response_bytes: Option<u64>,
    pub(crate) transport: Option<String>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) auth: Option<crate::credentials::RawAuth>,
    #[serde(default)]
    pub(crate) security: BTreeMap<String, String>,
    pub(crate) connect_timeout_ms: Option<u64>,
    pub(crate) required: Option<bool>,
    pub(crate) isolation: Option<String>,
    pub(crate) isolation_limit: Option<u64>,
    pub(crate) era: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) uri_prefix: Option<String>,
    pub(crate) enabled: Option<bool>,
    pub(crate) request_timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) tool_timeouts: BTreeMap<String, u64>,
    pub(crate) max_message_bytes: Option<u64>,
    pub(crate) cache: Option<RawCacheRule>,
    #[serde(default)]
    pub(crate) tool_cache: BTreeMap<String, RawCacheRule>,
    pub(crate) resource_cache: Option<RawCacheRule>,
    pub(crate) restart_initial_backoff_ms: Option<u64>,
    pub(crate) restart_max_backoff_ms: Option<u64>,
    pub(crate) health_interval: Option<String>,
    pub(crate) health_timeout: Option<String>,
    pub(crate) breaker_failures: Option<u64>,
    pub(crate) breaker_cooldown: Option<String>,
    pub(crate) restart_after: Option<String>,
    #[serde(default)]
    pub(crate) tools: RawFilter,
    #[serde(default)]
    pub(crate) prompts: RawFilter,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawFilter {
    #[serde(default)]
    pub(crate) include: Vec<String>,
    #[serde(default)]
    pub(crate) exclude: Vec<String>,
    #[serde(default)]
    pub(crate) rename: BTreeMap<String, String>,
}
