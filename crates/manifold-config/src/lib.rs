//! Manifold's configuration: the native TOML format and Claude Desktop style JSON
//! (`{"mcpServers": {...}}`), parsed with serde and validated once into the runtime types
//! below, which the rest of Manifold uses. Errors name the file, the key and the problem.
//!
//! Entry points: [`load`] (process environment), [`load_with_env`] and [`parse_str`] (an
//! environment lookup function, for tests and tools), [`resolve_command`], and the name
//! filtering helpers [`glob_match`] and [`NameFilter::admits`] used by the catalog.
//!
//! Long: the runtime types every other crate reads are defined together here, one place to
//! look a setting up; parsing and validation live in the child modules.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod cache;
mod claude_json;
mod command;
mod credentials;
mod discovery;
mod error;
mod glob;
mod interpolate;
mod openapi;
mod pinning;
mod policy;
pub mod redact;
pub mod reload;
mod schema;
mod sessions;
mod toml_format;
mod validate;

#[cfg(test)]
mod tests;

pub use cache::{
    parse_bytes, parse_duration, CacheBackend, CacheRule, CacheScope, CacheSettings, UpstreamCaches,
};
pub use command::resolve_command;
pub use credentials::{
    ClientCredentialsSettings, ClientSettings, CredentialsSettings, Identity,
    IdentityAssertionSettings, OAuthSettings, SealKey, Secret, SigningKey, TokenExchangeSettings,
    TokenStoreSettings, UpstreamAuth,
};
pub use discovery::{DiscoveryMode, DiscoverySettings, DEFAULT_MAX_TOOLS};
pub use glob::glob_match;
pub use openapi::{
    OpenApiConfig, OpenApiSource, OperationFilter, DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_OPENAPI_TIMEOUT,
};
pub use pinning::{lock_path, OnChange, OnNew, PinningSettings, DEFAULT_LOCK_FILE};
pub use policy::{
    auth_required, parse_per, redact_url, AuthConfig, JwtConfig, KeyHash, LimitBackend,
    LimitConfig, LimitsConfig, QuotaConfig, RateConfig, RedisConfig, TeamConfig, Visibility,
    ANONYMOUS,
};
pub use sessions::SessionStore;

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file this configuration was read from.
    pub source: PathBuf,
    pub server: ServerSettings,
    pub names: NameSettings,
    pub telemetry: TelemetryConfig,
    /// How HTTP hosts authenticate (`[auth]`).
    pub auth: AuthConfig,
    /// Teams, sorted by name (`[teams.NAME]`).
    pub teams: Vec<TeamConfig>,
    /// Rate limits and quotas (`[limits]`, and each team's own).
    pub limits: LimitsConfig,
    /// `[cache]`; each upstream's caches are on the upstream.
    pub cache: CacheSettings,
    /// `[sessions]`: where session-era HTTP sessions are kept.
    pub sessions: SessionStore,
    /// `[discovery]`: how much of the catalog a session without a team lists (each team's
    /// own is on the team).
    pub discovery: DiscoverySettings,
    /// `[pinning]`: checking tool and prompt definitions against a lock file; none when the
    /// section is absent.
    pub pinning: Option<PinningSettings>,
    /// `[credentials]`: where upstream tokens are kept and browsers reach Manifold.
    pub credentials: CredentialsSettings,
    /// Enabled upstreams, sorted by key so that everything derived from them is deterministic.
    pub upstreams: Vec<UpstreamConfig>,
    /// Entries that were skipped with the reason (`enabled = false`, `"disabled": true`).
    /// `manifold check` prints these.
    pub skipped: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// Downstream page size for list results; 0 means one page holding everything.
    pub page_size: usize,
    /// Largest downstream message accepted, in bytes.
    pub max_message_bytes: usize,
    /// How long a forwarded request may go without an answer (or progress) before the host
    /// gets a timeout error.
    pub request_timeout: Duration,
    /// The longest any forwarded request may take, however much progress it reports.
    pub max_request_timeout: Duration,
    /// How long `initialize` waits for upstreams' first start before answering.
    pub startup_timeout: Duration,
    /// How long a child gets to exit after its stdin closes, and again after SIGTERM.
    pub shutdown_grace: Duration,
    /// The CPUs Manifold and the upstreams it starts may run on; empty leaves placement to
    /// the operating system.
    pub cpus: Vec<usize>,
    /// Output that may wait for one host that reads slowly: past it the host is paced (stdio:
    /// its input is not read; HTTP: 429), and past twice it an HTTP session is ended and a
    /// stdio host's messages other than answers are dropped.
    pub session_queue_bytes: usize,
    /// How long a stdio host may take none of its output while some waits before its
    /// session is ended.
    pub stall_timeout: Duration,
    /// Serving hosts over HTTP (Streamable HTTP and the 2024-11-05 SSE transport).
    pub http: HttpSettings,
    /// Where `/metrics`, `/healthz` and `/readyz` are served apart from hosts (`--admin`).
    /// Without it they are served on the HTTP listener, and not at all over stdio.
    pub admin: Option<std::net::SocketAddr>,
    /// The bearer token `/metrics` asks for (kept as its SHA-256), wherever it is served.
    /// Without it, `/metrics` on the host listener is open only while hosts need no
    /// credentials; with authentication configured it is served on the admin address alone.
    pub metrics_token: Option<KeyHash>,
    /// The team a stdio host runs as (`--team` overrides it); none: anonymous.
    pub team: Option<String>,
    /// The key that authenticates the `requestState` Manifold hands stateless hosts
    /// (`server.request_state_key`); replicas that serve the same hosts share it. `None`: a
    /// random key of the process's own.
    pub request_state_key: Option<StateKey>,
    /// Whether the config file (and the files it names: the pinning lock file, the TLS
    /// certificate and key) is watched, and loaded again when it changes.
    pub watch_config: bool,
    /// The web console's OpenID Connect login (`[server.console]`); `None`: the admin token
    /// is the only way in.
    pub console: Option<ConsoleLogin>,
}

/// `[server.console]`: operators sign in to the web console at the `[auth.jwt]` issuer with
/// Manifold's console client; an ID token whose `admin_claim` (a string, or an array of
/// strings) holds `admin_value` opens a console login.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsoleLogin {
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub admin_claim: String,
    pub admin_value: String,
    /// The admin address as browsers reach it (the issuer sends them back there); `None`:
    /// the address the browser used.
    pub public_url: Option<String>,
}

/// A secret key, at least [`StateKey::MIN_LEN`] bytes; its `Debug` shows none of it.
#[derive(Clone, PartialEq, Eq)]
pub struct StateKey(pub std::sync::Arc<[u8]>);

impl StateKey {
    /// The fewest bytes a key may have (as many as the HMAC-SHA256 output).
    pub const MIN_LEN: usize = 32;
}

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateKey(<{} bytes, redacted>)", self.0.len())
    }
}

/// Logs, metrics and traces (`[telemetry]`). The standard environment variables
/// (`MANIFOLD_LOG`, `RUST_LOG`, `OTEL_*`) take precedence over these, so that a deployment can
/// change them without editing the file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TelemetryConfig {
    /// An env-filter directive such as `info` or `info,manifold_upstream=debug`.
    pub log_level: Option<String>,
    pub log_format: LogFormat,
    /// Whether metrics are recorded (on unless set to false).
    pub metrics: bool,
    /// Where traces are exported over OTLP; none: no traces (unless the environment names one).
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: Option<OtlpProtocol>,
    pub service_name: Option<String>,
    /// An `OTEL_TRACES_SAMPLER` value, such as `parentbased_traceidratio`.
    pub sampler: Option<String>,
    pub sampler_arg: Option<f64>,
    pub resource_attributes: Vec<(String, String)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The protocol an `OTEL_EXPORTER_OTLP_PROTOCOL` value names.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "grpc" => Some(Self::Grpc),
            "http/protobuf" => Some(Self::HttpProtobuf),
            _ => None,
        }
    }
}

/// The samplers `OTEL_TRACES_SAMPLER` may name, and so `telemetry.sampler`.
pub const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// The HTTP listener's settings. Hosts are served over HTTP only when `listen` is set (in
/// the file, or with `manifold serve --listen`).
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSettings {
    pub listen: Option<std::net::SocketAddr>,
    /// Allows a non-loopback `listen` address without authentication configured.
    pub allow_remote: bool,
    /// Browser origins allowed besides loopback ones (`Origin` is checked against DNS
    /// rebinding); `"*"` allows any.
    pub allowed_origins: Vec<String>,
    /// HTTP worker threads.
    pub workers: usize,
    /// An HTTP session the host has not used for this long is ended.
    pub session_idle_timeout: Duration,
    /// A comment is sent on an SSE stream that has been quiet this long.
    pub keepalive: Duration,
    /// Open HTTP sessions at most; past it new ones get 503.
    pub max_sessions: usize,
    /// Requests one HTTP session may have in progress at once; past it 429.
    pub max_requests_per_session: usize,
    /// Events kept per SSE stream for a host that reconnects with `Last-Event-ID`.
    pub replay_events: usize,
    /// TLS on the listener (`[server.tls]`); none: plain HTTP. The admin listener never uses
    /// it.
    pub tls: Option<TlsSettings>,
    /// On SIGTERM or SIGINT, how long `/readyz` fails while everything is still served, so
    /// that a load balancer stops sending before new requests are refused.
    pub drain_delay: Duration,
    /// Then, how long requests in progress may take to finish while new ones are refused;
    /// what is left is answered with an error.
    pub drain_timeout: Duration,
    /// A host's request head, and then its body, must arrive within this; a slower one is
    /// answered 408 and its connection closed.
    pub client_timeout: Duration,
    /// A connection idle between requests is closed after this.
    pub keep_alive: Duration,
}

/// The certificate chain and private key the HTTP listener serves TLS with (PEM files). Only
/// the paths are validated here; the files are read when the listener is set up, so that
/// `manifold check` and `serve` report their problems in one place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain, leaf first; relative paths are resolved against the config
    /// file's folder.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1), resolved the same way.
    pub key: PathBuf,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NameSettings {
    /// Between prefix and name. Only `[A-Za-z0-9_-]`, 1..=8 characters.
    pub separator: String,
    /// Longest exposed tool/prompt name (1..=128); longer ones are shortened with a hash.
    pub max_length: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamConfig {
    /// The key under `[upstreams.KEY]` (TOML) or `mcpServers.KEY` (JSON), verbatim.
    pub key: String,
    /// Raw prefix (defaults to the key; may be empty = no prefix). Sanitized by the catalog.
    pub prefix: String,
    /// Raw resource URI prefix (`None`: made from `prefix`, or the key when that is empty;
    /// empty: URIs are exposed unchanged). Sanitized by the catalog.
    pub uri_prefix: Option<String>,
    pub transport: Transport,
    pub tools: NameFilter,
    pub prompts: NameFilter,
    pub restart: RestartPolicy,
    /// Pings, the circuit breaker and the restart of an upstream that stopped answering.
    pub health: HealthPolicy,
    /// Overrides `server.request_timeout` for this upstream.
    pub request_timeout: Option<Duration>,
    /// Overrides of the request timeout for single tools, by the upstream's tool name.
    pub tool_timeouts: BTreeMap<String, Duration>,
    /// Largest message accepted from this upstream; a longer one is dropped and fails the
    /// request it answered.
    pub max_message_bytes: usize,
    /// Whether `/readyz` waits for this upstream.
    pub required: bool,
    pub isolation: Isolation,
    /// Which protocol era Manifold speaks to it (`era`).
    pub era: EraChoice,
    /// Which of its answers are cached, and how.
    pub caches: UpstreamCaches,
}

/// Which era of the protocol Manifold speaks to an upstream (`era = "auto" | "session" |
/// "stateless"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EraChoice {
    /// Probe with `server/discover`: an upstream that answers it with a stateless-era revision
    /// Manifold speaks is spoken to in that era (a dual-era one too); any error, no answer
    /// within a few seconds, or a child process that exits on it means the session era
    /// (`initialize`). The default.
    #[default]
    Auto,
    /// The session era only (`initialize`, no probe): for servers that misbehave on an
    /// unknown first request.
    Session,
    /// The stateless era only: the probe must succeed, or the upstream does not start (and is
    /// retried with backoff, with the reason logged).
    Stateless,
}

impl EraChoice {
    /// The value as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            EraChoice::Auto => "auto",
            EraChoice::Session => "session",
            EraChoice::Stateless => "stateless",
        }
    }
}

/// Whether an upstream's connection is shared by every host session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// One connection for every session (the default): one process, one HTTP session.
    Shared,
    /// Each host session gets a connection of its own, started on first use and ended with
    /// the session, at most `limit` at once; a shared one still serves the catalog.
    Session { limit: usize },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    Stdio(StdioConfig),
    Http(HttpConfig),
    /// An HTTP service described by OpenAPI, served as tools by Manifold itself.
    OpenApi(OpenApiConfig),
}

/// An upstream reached over HTTP.
#[derive(Clone, PartialEq)]
pub struct HttpConfig {
    /// `http://` or `https://`, after interpolation.
    pub url: String,
    pub kind: HttpKind,
    /// Sent with every request, after interpolation. Values may be secrets: the Debug impl
    /// redacts them, and they are never logged.
    pub headers: BTreeMap<String, String>,
    pub connect_timeout: Duration,
    /// A token Manifold obtains itself (`[upstreams.NAME.auth]`); `None`: the headers only.
    pub auth: Option<UpstreamAuth>,
}

/// Which HTTP transport an upstream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpKind {
    /// Streamable HTTP, falling back to the 2024-11-05 HTTP+SSE transport when the server
    /// refuses it (the fallback the spec describes).
    Auto,
    StreamableHttp,
    Sse,
}

#[derive(Clone, PartialEq)]
pub struct StdioConfig {
    /// After `${VAR}` interpolation. A bare name (no `/`) is looked up on PATH, then in the
    /// directory holding the running `manifold` executable (see `resolve_command`).
    pub command: String,
    pub args: Vec<String>,
    /// After interpolation. Values may be secrets: the Debug impl redacts them.
    pub env: BTreeMap<String, String>,
    /// Relative paths are resolved against the config file's directory.
    pub cwd: Option<PathBuf>,
}

/// Include/exclude globs (`*` matches any run of characters) and renames, all keyed by the
/// upstream's original name. A rename value is the full exposed name (no prefix added).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NameFilter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub rename: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

/// How an upstream's health is watched (`health_interval`, `health_timeout`,
/// `breaker_failures`, `breaker_cooldown`, `restart_after`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthPolicy {
    /// A `ping` (`server/discover` to a stateless-era upstream) is sent this long after the
    /// last one was answered; `None` (`"0s"`): no periodic ping.
    pub interval: Option<Duration>,
    /// A ping unanswered for this long failed.
    pub timeout: Duration,
    /// Consecutive failures (calls that timed out or were refused, pings that failed) that
    /// open the circuit breaker; `None` (0): no breaker.
    pub breaker_failures: Option<u32>,
    /// How long an open breaker refuses calls before one probe decides whether it closes.
    pub breaker_cooldown: Duration,
    /// An upstream whose breaker has stayed open this long is restarted; `None` (`"0s"`):
    /// never.
    pub restart_after: Option<Duration>,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(10)),
            timeout: Duration::from_secs(5),
            breaker_failures: Some(5),
            breaker_cooldown: Duration::from_secs(10),
            restart_after: Some(Duration::from_secs(60)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {problem}")]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted path of the offending key, e.g. `upstreams.time.args[1]`, or `(file)`.
    pub key: String,
    pub problem: String,
}

/// A listen address: `IP:PORT`, or a bare port, which means 127.0.0.1 (this machine only).
pub fn parse_listen(text: &str) -> Option<std::net::SocketAddr> {
    let text = text.trim();
    text.parse().ok().or_else(|| {
        let port: u16 = text.parse().ok()?;
        Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    })
}

/// Why Manifold will not listen on `addr`, if it will not: without authentication
/// (`authenticated` false), serving beyond this machine must be asked for by name
/// (`server.allow_remote`).
pub fn remote_refusal(
    addr: std::net::SocketAddr,
    allow_remote: bool,
    authenticated: bool,
) -> Option<String> {
    (!addr.ip().is_loopback() && !allow_remote && !authenticated).then(|| {
        format!(
            "{addr} is reachable from other machines, and no authentication is configured; \
             listen on 127.0.0.1, configure API keys or JWTs for teams, or set \
             server.allow_remote = true to accept that anyone who can reach it may use every \
             upstream"
        )
    })
}

/// Why serving on `addr` deserves a warning, if it does: hosts must present credentials, and
/// without TLS those travel in clear text to a listener other machines can reach.
pub fn cleartext_warning(
    addr: std::net::SocketAddr,
    authenticated: bool,
    tls: bool,
) -> Option<String> {
    (!addr.ip().is_loopback() && authenticated && !tls).then(|| {
        format!(
            "{addr} is reachable from other machines and serves plain HTTP: API keys and JWTs \
             travel in clear text; configure [server.tls] (cert and key) or put a TLS proxy in \
             front"
        )
    })
}

/// How `${VAR}` is looked up: `Some(value)` if the variable is set.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads a config file; `.toml` is native, `.json` is Claude Desktop style; other extensions
/// are an error. `${VAR}` is interpolated from the process environment, `$$` is a literal `$`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    // A value that is not valid Unicode cannot be put into a UTF-8 config string, so it counts
    // as unset rather than being mangled.
    load_with_env(path, &|name| std::env::var(name).ok())
}

/// [`load`] with `${VAR}` looked up through `env` instead of the process environment.
pub fn load_with_env(path: &Path, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    // The extension is checked first so that a wrong file is reported as such, not as
    // unreadable or as a syntax error.
    let format = Format::of(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| error::at(path, error::FILE_KEY, format!("cannot read the file: {e}")))?;
    format.parse(path, &text, env)
}

/// Parses `text` as if it had been read from `path`, whose extension picks the format; `path`
/// is also used in errors and to resolve relative `cwd` values. Nothing is read from disk.
pub fn parse_str(path: &Path, text: &str, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    Format::of(path)?.parse(path, text, env)
}

/// The supported file formats, chosen by extension.
#[derive(Clone, Copy)]
enum Format {
    Toml,
    ClaudeJson,
}

impl Format {
    fn of(path: &Path) -> Result<Format, ConfigError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if ext.eq_ignore_ascii_case("toml") {
            Ok(Format::Toml)
        } else if ext.eq_ignore_ascii_case("json") {
            Ok(Format::ClaudeJson)
        } else {
            Err(error::at(
                path,
                error::FILE_KEY,
                "unsupported file extension; supported are .toml (Manifold's native format) \
                 and .json (Claude Desktop style {\"mcpServers\": {...}})",
            ))
        }
    }

    fn parse(self, path: &Path, text: &str, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        let ctx = validate::Ctx { file: path, env };
        match self {
            Format::Toml => toml_format::parse(&ctx, text),
            Format::ClaudeJson => claude_json::parse(&ctx, text),
        }
    }
}
