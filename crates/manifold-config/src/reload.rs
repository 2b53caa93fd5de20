//! What a configuration reload changes: the running configuration compared with the new one,
//! key by key, so that only what changed takes effect. Pure: applying the changes is the
//! binary's and the server's business.

use crate::{Config, ServerSettings, TelemetryConfig, Transport, UpstreamConfig};

/// What differs between the running configuration and a new one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Upstreams in the new configuration only: started.
    pub added: Vec<String>,
    /// Upstreams in the running configuration only: their names leave the catalog at once,
    /// their calls in flight finish (up to a deadline), then they are stopped.
    pub removed: Vec<String>,
    /// Upstreams whose connection settings changed (command, URL, headers, timeouts, health,
    /// isolation, era, ...): a new connection is started, and once it is ready it takes the
    /// old one's place while the old one finishes its calls in flight.
    pub restarted: Vec<String>,
    /// Upstreams whose place in the catalog changed (prefixes, filters, renames, per-tool
    /// timeouts), or their caches or `required`: applied in place, the connection kept. And
    /// every OpenAPI upstream not restarted: its description is read again, in place.
    pub updated: Vec<String>,
    /// `[teams]`: views, API keys, claims, headers, limits, discovery.
    pub teams: bool,
    /// `[discovery]`.
    pub discovery: bool,
    /// `[auth]`.
    pub auth: bool,
    /// `[limits]`.
    pub limits: bool,
    /// `[cache]` (each upstream's own caches are counted in `updated`).
    pub cache: bool,
    /// `[pinning]` settings (the lock file's pins are compared when it is read again).
    pub pinning: bool,
    /// The telemetry settings a running process applies: `log_level` and `metrics`.
    pub telemetry: bool,
    /// Settings that changed but take effect only when Manifold starts again, by key.
    pub at_restart: Vec<String>,
}

impl Changes {
    /// Whether nothing at all changed.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// Compares the running configuration `old` with `new`.
pub fn changes(old: &Config, new: &Config) -> Changes {
    let mut changes = Changes::default();
    upstream_changes(&old.upstreams, &new.upstreams, &mut changes);
    changes.teams = old.teams != new.teams;
    changes.discovery = old.discovery != new.discovery;
    changes.auth = old.auth != new.auth;
    changes.limits = old.limits != new.limits;
    changes.cache = old.cache != new.cache;
    changes.pinning = old.pinning != new.pinning;
    changes.telemetry = old.telemetry.log_level != new.telemetry.log_level
        || old.telemetry.metrics != new.telemetry.metrics;
    let restart = &mut changes.at_restart;
    server_changes(&old.server, &new.server, restart);
    telemetry_changes(&old.telemetry, &new.telemetry, restart);
    if old.names.separator != new.names.separator {
        restart.push("names.separator".into());
    }
    if old.names.max_length != new.names.max_length {
        restart.push("names.max_length".into());
    }
    if old.sessions != new.sessions {
        restart.push("sessions".into());
    }
    changes
}

fn upstream_changes(old: &[UpstreamConfig], new: &[UpstreamConfig], changes: &mut Changes) {
    for n in new {
        match old.iter().find(|o| o.key == n.key) {
            None => changes.added.push(n.key.clone()),
            Some(o) if needs_restart(o, n) => changes.restarted.push(n.key.clone()),
            Some(o) if in_place(o, n) || rereads(n) => changes.updated.push(n.key.clone()),
            Some(_) => {}
        }
    }
    for o in old {
        if !new.iter().any(|n| n.key == o.key) {
            changes.removed.push(o.key.clone());
        }
    }
}

/// Whether a change of the upstream's settings needs a new connection: everything its
/// connection was started with.
pub fn needs_restart(old: &UpstreamConfig, new: &UpstreamConfig) -> bool {
    old.transport != new.transport
        || old.restart != new.restart
        || old.health != new.health
        || old.request_timeout != new.request_timeout
        || old.max_message_bytes != new.max_message_bytes
        || old.isolation != new.isolation
        || old.era != new.era
}

/// Whether a reload that keeps the upstream's connection has it read its description again:
/// an OpenAPI upstream's tools come from a document that may have changed since it was read.
pub fn rereads(upstream: &UpstreamConfig) -> bool {
    matches!(upstream.transport, Transport::OpenApi(_))
}

/// Whether the settings that apply without a new connection changed.
fn in_place(old: &UpstreamConfig, new: &UpstreamConfig) -> bool {
    old.prefix != new.prefix
        || old.uri_prefix != new.uri_prefix
        || old.tools != new.tools
        || old.prompts != new.prompts
        || old.tool_timeouts != new.tool_timeouts
        || old.required != new.required
        || old.caches != new.caches
}

/// `[server]` is fixed while Manifold runs: the listener, its TLS, the session limits and
/// the timeouts its parts were built with. Reported by key.
fn server_changes(old: &ServerSettings, new: &ServerSettings, out: &mut Vec<String>) {
    let mut differs = |key: &str, changed: bool| {
        if changed {
            out.push(format!("server.{key}"));
        }
    };
    differs("page_size", old.page_size != new.page_size);
    differs(
        "max_message_bytes",
        old.max_message_bytes != new.max_message_bytes,
    );
    differs(
        "request_timeout_ms",
        old.request_timeout != new.request_timeout,
    );
    differs(
        "max_request_timeout_ms",
        old.max_request_timeout != new.max_request_timeout,
    );
    differs(
        "startup_timeout_ms",
        old.startup_timeout != new.startup_timeout,
    );
    differs(
        "shutdown_grace_ms",
        old.shutdown_grace != new.shutdown_grace,
    );
    differs("cpus", old.cpus != new.cpus);
    differs(
        "session_queue_bytes",
        old.session_queue_bytes != new.session_queue_bytes,
    );
    differs("stall_timeout_ms", old.stall_timeout != new.stall_timeout);
    differs("admin", old.admin != new.admin);
    differs("metrics_token", old.metrics_token != new.metrics_token);
    differs("team", old.team != new.team);
    differs(
        "request_state_key",
        old.request_state_key != new.request_state_key,
    );
    differs("watch_config", old.watch_config != new.watch_config);
    differs("console", old.console != new.console);
    let (o, n) = (&old.http, &new.http);
    differs("listen", o.listen != n.listen);
    differs("allow_remote", o.allow_remote != n.allow_remote);
    differs("allowed_origins", o.allowed_origins != n.allowed_origins);
    differs("http_workers", o.workers != n.workers);
    differs(
        "session_idle_timeout_ms",
        o.session_idle_timeout != n.session_idle_timeout,
    );
    differs("sse_keepalive_ms", o.keepalive != n.keepalive);
    differs("max_sessions", o.max_sessions != n.max_sessions);
    differs(
        "max_requests_per_session",
        o.max_requests_per_session != n.max_requests_per_session,
    );
    differs("replay_events", o.replay_events != n.replay_events);
    differs("drain_delay", o.drain_delay != n.drain_delay);
    differs("drain_timeout", o.drain_timeout != n.drain_timeout);
    differs("client_timeout", o.client_timeout != n.client_timeout);
    differs("keep_alive", o.keep_alive != n.keep_alive);
    // The TLS files are read again at every reload (from where the new file says); only
    // whether the listener speaks TLS at all is fixed.
    differs("tls", o.tls.is_some() != n.tls.is_some());
}

fn telemetry_changes(old: &TelemetryConfig, new: &TelemetryConfig, out: &mut Vec<String>) {
    let live = |t: &TelemetryConfig| TelemetryConfig {
        log_level: None,
        metrics: true,
        ..t.clone()
    };
    if live(old) != live(new) {
        out.push("telemetry (log format, trace export)".into());
    }
}

#[cfg(test)]
mod tests;
