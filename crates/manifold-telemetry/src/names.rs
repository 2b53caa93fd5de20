//! Every metric, label and span attribute Manifold exports, named in one place. Metric names
//! follow the OpenTelemetry semantic conventions for MCP where they have one
//! (`mcp.server.operation.duration` becomes `mcp_server_operation_duration_seconds`); the
//! rest are Manifold's own, prefixed `manifold_`. The dashboards under `dashboards/` and the
//! test that evaluates them against a real Prometheus read these names.

/// A metric's name, its help text and its type, as the exposition states them.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

pub const SERVER_OPERATION_DURATION: Metric = Metric {
    name: "mcp_server_operation_duration_seconds",
    help: "Host-facing request duration, by method, tool, upstream, team, transport and outcome.",
    kind: Kind::Histogram,
};

pub const CLIENT_OPERATION_DURATION: Metric = Metric {
    name: "mcp_client_operation_duration_seconds",
    help: "Duration of each upstream hop, with the same labels (transport: the upstream's).",
    kind: Kind::Histogram,
};

pub const SERVER_SESSION_DURATION: Metric = Metric {
    name: "mcp_server_session_duration_seconds",
    help: "How long host sessions lasted, by transport.",
    kind: Kind::Histogram,
};

pub const SESSIONS: Metric = Metric {
    name: "manifold_sessions",
    help: "Open host sessions, by transport.",
    kind: Kind::Gauge,
};

pub const HOST_BYTES: Metric = Metric {
    name: "manifold_host_bytes_total",
    help: "Bytes of messages from and to hosts, by transport and direction.",
    kind: Kind::Counter,
};

pub const HOST_INFLIGHT: Metric = Metric {
    name: "manifold_host_inflight_requests",
    help: "Host requests read and not yet answered or cancelled, by transport (an open subscriptions/listen stream counts until it ends).",
    kind: Kind::Gauge,
};

pub const DRAINING: Metric = Metric {
    name: "manifold_draining",
    help: "1 from the signal that stops an HTTP Manifold until it exits (/readyz fails, then new requests are refused while those in flight finish), else 0.",
    kind: Kind::Gauge,
};

pub const LIMIT_STORE_ERRORS: Metric = Metric {
    name: "manifold_limit_store_errors_total",
    help: "Tool calls whose limits could not be checked because the shared limit store (Redis) was unreachable, by what the call got (allowed with fail_open, else refused).",
    kind: Kind::Counter,
};

pub const UPSTREAM_BYTES: Metric = Metric {
    name: "manifold_upstream_bytes_total",
    help: "Bytes of messages from and to upstreams, by upstream and direction.",
    kind: Kind::Counter,
};

pub const UPSTREAM_UP: Metric = Metric {
    name: "manifold_upstream_up",
    help: "1 while an upstream is connected and serving, else 0.",
    kind: Kind::Gauge,
};

pub const UPSTREAM_RESTARTS: Metric = Metric {
    name: "manifold_upstream_restarts_total",
    help: "Times an upstream was started again after it ended or failed.",
    kind: Kind::Counter,
};

pub const UPSTREAM_HEALTH_CHECKS: Metric = Metric {
    name: "manifold_upstream_health_checks_total",
    help: "Health pings sent to upstreams (ping, or server/discover in the stateless era), by upstream and outcome (ok, error, timeout).",
    kind: Kind::Counter,
};

pub const UPSTREAM_PING_DURATION: Metric = Metric {
    name: "manifold_upstream_ping_duration_seconds",
    help: "How long answered health pings took, by upstream.",
    kind: Kind::Histogram,
};

pub const UPSTREAM_BREAKER_STATE: Metric = Metric {
    name: "manifold_upstream_breaker_state",
    help: "An upstream's circuit breaker: 0 closed (calls pass), 1 half-open (one probe decides), 2 open (calls refused at once).",
    kind: Kind::Gauge,
};

pub const UPSTREAM_BREAKER_TRANSITIONS: Metric = Metric {
    name: "manifold_upstream_breaker_transitions_total",
    help: "Times an upstream's circuit breaker entered a state, by upstream and state (closed, half_open, open).",
    kind: Kind::Counter,
};

pub const UPSTREAM_BREAKER_REJECTIONS: Metric = Metric {
    name: "manifold_upstream_breaker_rejections_total",
    help: "Calls refused at once because the upstream's circuit breaker was open, by upstream.",
    kind: Kind::Counter,
};

pub const UPSTREAM_INFLIGHT: Metric = Metric {
    name: "manifold_upstream_inflight_requests",
    help: "Requests sent to an upstream and not yet answered.",
    kind: Kind::Gauge,
};

pub const CATALOG_ITEMS: Metric = Metric {
    name: "manifold_catalog_items",
    help: "Items an upstream contributes to the merged catalog, by kind.",
    kind: Kind::Gauge,
};

pub const PINNING_HELD: Metric = Metric {
    name: "manifold_pinning_held",
    help: "Tools, prompts and skills left out of every listing because their definition differs from its pin (reason changed) or has none (reason new), by upstream, kind and reason.",
    kind: Kind::Gauge,
};

pub const PINNING_CHANGED: Metric = Metric {
    name: "manifold_pinning_changed",
    help: "Tools and prompts whose definition differs from its pin, held or served (on_change = warn), by upstream and kind.",
    kind: Kind::Gauge,
};

pub const CACHE_HITS: Metric = Metric {
    name: "manifold_cache_hits_total",
    help: "Requests answered from a cache (also those that waited for an identical request's answer), by cache, upstream and tier (memory: this process's own; redis: the store shared by replicas).",
    kind: Kind::Counter,
};

pub const CACHE_MISSES: Metric = Metric {
    name: "manifold_cache_misses_total",
    help: "Cacheable requests that went to the upstream, by cache and upstream.",
    kind: Kind::Counter,
};

pub const CACHE_EVICTIONS: Metric = Metric {
    name: "manifold_cache_evictions_total",
    help: "Cache entries removed, by cache, upstream and cause (size: the byte budget; expired: the ttl; invalidated: the upstream changed).",
    kind: Kind::Counter,
};

pub const CACHE_STORE_ERRORS: Metric = Metric {
    name: "manifold_cache_store_errors_total",
    help: "What the result cache could not do in its shared store (Redis) because it failed, did not answer within redis_timeout_ms or was being left alone after a failure, by operation (lookup: the request went upstream; store: the answer stayed in this process; invalidate: retried each second).",
    kind: Kind::Counter,
};

pub const CACHE_BYTES: Metric = Metric {
    name: "manifold_cache_bytes",
    help: "Bytes of answers (and their keys) held in a cache, by cache and upstream.",
    kind: Kind::Gauge,
};

pub const CACHE_ENTRIES: Metric = Metric {
    name: "manifold_cache_entries",
    help: "Entries held in a cache, by cache and upstream.",
    kind: Kind::Gauge,
};

pub const BUILD_INFO: Metric = Metric {
    name: "manifold_build_info",
    help: "Always 1; its version label names the running build.",
    kind: Kind::Gauge,
};

pub const PROCESS_START: Metric = Metric {
    name: "process_start_time_seconds",
    help: "When the process started, in seconds since the Unix epoch (a restart resets every counter).",
    kind: Kind::Gauge,
};

/// Labels. Each has a bounded set of values: never ids, arguments or names a host made up.
pub mod label {
    /// The MCP method (`mcp.method.name`); methods Manifold does not know are `other`.
    pub const METHOD: &str = "method";
    /// The tool's name as hosts see it (`gen_ai.tool.name`); empty for other methods and
    /// for names that are not in the catalog.
    pub const TOOL: &str = "tool";
    /// The upstream's key in the config; empty for what Manifold answers itself.
    pub const UPSTREAM: &str = "upstream";
    /// Who asked: `anonymous` until hosts authenticate.
    pub const TEAM: &str = "team";
    /// `stdio`, `http` (Streamable HTTP) or `sse` (the 2024-11-05 HTTP+SSE transport).
    pub const TRANSPORT: &str = "transport";
    /// How the request ended; see `Outcome`.
    pub const OUTCOME: &str = "outcome";
    /// `in` (received by Manifold) or `out` (sent by it).
    pub const DIRECTION: &str = "direction";
    /// What a call got when its limits could not be checked: `allowed` or `refused`.
    pub const DECISION: &str = "decision";
    /// `tools`, `prompts`, `resources` or `resource_templates`.
    pub const KIND: &str = "kind";
    /// Why a tool or prompt is held: `changed` (it differs from its pin) or `new` (no pin).
    pub const REASON: &str = "reason";
    /// Which cache: `tools` (tool results) or `resources` (resource reads).
    pub const CACHE: &str = "cache";
    /// Why a cache entry went: `size`, `expired` or `invalidated`.
    pub const CAUSE: &str = "cause";
    /// Where a cache hit was found: `memory` (the process's own) or `redis` (shared).
    pub const TIER: &str = "tier";
    /// What the cache asked of its shared store: `lookup`, `store` or `invalidate`.
    pub const OPERATION: &str = "operation";
    /// A circuit breaker's state: `closed`, `half_open` or `open`.
    pub const STATE: &str = "state";
    /// The build's version.
    pub const VERSION: &str = "version";
    /// Which `tools/list` bytes: `served` (in search mode) or `full` (the whole view).
    pub const LISTING: &str = "listing";
}

pub const DISCOVERY_SEARCHES: Metric = Metric {
    name: "manifold_discovery_searches_total",
    help: "find_tools calls, by team.",
    kind: Kind::Counter,
};

pub const DISCOVERY_RESULTS: Metric = Metric {
    name: "manifold_discovery_results_total",
    help: "Tools find_tools returned, by team.",
    kind: Kind::Counter,
};

pub const DISCOVERY_ADDED: Metric = Metric {
    name: "manifold_discovery_tools_added_total",
    help: "Tools added to sessions' tools/list by find_tools, by team.",
    kind: Kind::Counter,
};

pub const DISCOVERY_EVICTED: Metric = Metric {
    name: "manifold_discovery_tools_evicted_total",
    help: "Found tools that left sessions' tools/list to keep it within its budget, by team.",
    kind: Kind::Counter,
};

pub const DISCOVERY_LIST_BYTES: Metric = Metric {
    name: "manifold_discovery_list_bytes_total",
    help: "Bytes of tools/list answers in search mode (served), and what listing the whole view would have sent (full), by team; (full - served) / 4 estimates the tokens saved.",
    kind: Kind::Counter,
};

pub const CREDENTIAL_CONSENTS: Metric = Metric {
    name: "manifold_credential_consents_total",
    help: "Consents to an upstream's authorization, by upstream and outcome (asked: a caller was given a consent link; completed: its callback brought a token; expired: consent_timeout ran out first).",
    kind: Kind::Counter,
};

pub const CREDENTIAL_REFRESHES: Metric = Metric {
    name: "manifold_credential_refreshes_total",
    help: "Tokens for upstreams refreshed (or exchanged again) before they expired, by upstream and outcome (ok, failed).",
    kind: Kind::Counter,
};

/// The `tracing` target of the spans that become OpenTelemetry spans (see `spans`); nothing
/// else is exported, so the exporter's own work is never traced.
pub const SPAN_TARGET: &str = "mcp";
