//! Turning the parsed schema into the runtime types: defaults, range checks and `${VAR}`
//! interpolation, each failure reported with the dotted key it concerns.
//!
//! Long but flat: one short function per section or key of the schema, in
//! the schema's order, so that a key's rule is found where its neighbours' are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{self, child};
use crate::schema::{RawFilter, RawNames, RawServer, RawTelemetry, RawTls, RawUpstream};
use crate::{
    ConfigError, EnvLookup, EraChoice, HealthPolicy, HttpConfig, HttpKind, HttpSettings, Isolation,
    LogFormat, NameFilter, NameSettings, OtlpProtocol, RestartPolicy, ServerSettings, StdioConfig,
    TelemetryConfig, TlsSettings, Transport, UpstreamConfig, SAMPLERS,
};

pub(crate) const DEFAULT_PAGE_SIZE: u64 = 1000;
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: u64 = 4 * 1024 * 1024;
pub(crate) const MIN_MAX_MESSAGE_BYTES: u64 = 1024;
pub(crate) const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
pub(crate) const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;
pub(crate) const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 2_000;
pub(crate) const DEFAULT_MAX_REQUEST_TIMEOUT_MS: u64 = 600_000;
pub(crate) const DEFAULT_SESSION_QUEUE_BYTES: u64 = 64 * 1024 * 1024;
pub(crate) const MIN_SESSION_QUEUE_BYTES: u64 = 64 * 1024;
/// As long as a call may go unanswered by default: a host that takes nothing of its output
/// for that long is taken for gone.
pub(crate) const DEFAULT_STALL_TIMEOUT_MS: u64 = 60_000;
pub(crate) const DEFAULT_SEPARATOR: &str = "__";
pub(crate) const DEFAULT_MAX_LENGTH: u64 = 64;
pub(crate) const MAX_MAX_LENGTH: u64 = 128;
pub(crate) const MAX_SEPARATOR_CHARS: usize = 8;
/// Upstreams may legitimately return large results (file contents, images), so their limit is
/// well above the downstream default.
pub(crate) const DEFAULT_UPSTREAM_MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;
pub(crate) const DEFAULT_INITIAL_BACKOFF_MS: u64 = 250;
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub(crate) const DEFAULT_HTTP_WORKERS: u64 = 2;
pub(crate) const DEFAULT_SESSION_IDLE_TIMEOUT_MS: u64 = 30 * 60 * 1000;
pub(crate) const DEFAULT_SSE_KEEPALIVE_MS: u64 = 15_000;
pub(crate) const DEFAULT_MAX_SESSIONS: u64 = 4096;
pub(crate) const DEFAULT_MAX_REQUESTS_PER_SESSION: u64 = 128;
pub(crate) const DEFAULT_REPLAY_EVENTS: u64 = 256;
/// No delay: without a load balancer in front (the usual local case) nobody watches
/// `/readyz`, and a signal should stop Manifold as soon as its requests are answered.
pub(crate) const DEFAULT_DRAIN_DELAY: Duration = Duration::ZERO;
/// Long enough for most tool calls to finish; a Kubernetes pod's default grace period (30 s)
/// must then be raised to cover it with `drain_delay` and `shutdown_grace_ms`.
pub(crate) const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// actix-web's own default for the request head, applied to the body too: a host that
/// trickles either holds a connection no longer than this.
pub(crate) const DEFAULT_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Hosts pause between calls; a connection they keep should not be closed under them.
pub(crate) const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(75);
pub(crate) const DEFAULT_ISOLATION_LIMIT: u64 = 64;
pub(crate) const DEFAULT_MAX_BACKOFF_MS: u64 = 30_000;

/// The skip reason for `enabled = false` / `"disabled": true`.
pub(crate) const DISABLED: &str = "disabled";

/// What every validation step needs: the file (for errors and relative paths) and the
/// environment (for interpolation).
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a Path,
    pub(crate) env: EnvLookup<'a>,
}

impl Ctx<'_> {
    pub(crate) fn err(&self, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        error::at(self.file, key, problem)
    }

    pub(crate) fn interpolate(&self, key: &str, text: &str) -> Result<String, ConfigError> {
        let value =
            crate::interpolate::interpolate(text, self.env).map_err(|p| self.err(key, p))?;
        // A NUL byte cannot be passed to a process (argv, environment and paths are C
        // strings), so it is reported here rather than as an obscure spawn failure.
        if value.contains('\0') {
            return Err(self.err(key, "contains a NUL character"));
        }
        Ok(value)
    }
}

pub(crate) fn server(ctx: &Ctx<'_>, raw: RawServer) -> Result<ServerSettings, ConfigError> {
    let page_size = raw.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
    let max_message_bytes = raw.max_message_bytes.unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
    let request_timeout_ms = raw.request_timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    check_min(
        ctx,
        "server.max_message_bytes",
        max_message_bytes,
        MIN_MAX_MESSAGE_BYTES,
    )?;
    check_min(ctx, "server.request_timeout_ms", request_timeout_ms, 1)?;
    let stall_timeout_ms = raw.stall_timeout_ms.unwrap_or(DEFAULT_STALL_TIMEOUT_MS);
    check_min(ctx, "server.stall_timeout_ms", stall_timeout_ms, 1)?;
    let session_queue_bytes = raw
        .session_queue_bytes
        .unwrap_or(DEFAULT_SESSION_QUEUE_BYTES);
    check_min(
        ctx,
        "server.session_queue_bytes",
        session_queue_bytes,
        MIN_SESSION_QUEUE_BYTES,
    )?;
    let max_request_timeout_ms = raw
        .max_request_timeout_ms
        .unwrap_or(DEFAULT_MAX_REQUEST_TIMEOUT_MS.max(request_timeout_ms));
    if max_request_timeout_ms < request_timeout_ms {
        return Err(ctx.err(
            "server.max_request_timeout_ms",
            format!(
                "{max_request_timeout_ms} is less than server.request_timeout_ms ({request_timeout_ms})"
            ),
        ));
    }
    Ok(ServerSettings {
        max_request_timeout: Duration::from_millis(max_request_timeout_ms),
        page_size: to_usize(ctx, "server.page_size", page_size)?,
        max_message_bytes: to_usize(ctx, "server.max_message_bytes", max_message_bytes)?,
        request_timeout: Duration::from_millis(request_timeout_ms),
        startup_timeout: ms(raw.startup_timeout_ms, DEFAULT_STARTUP_TIMEOUT_MS),
        shutdown_grace: ms(raw.shutdown_grace_ms, DEFAULT_SHUTDOWN_GRACE_MS),
        cpus: cpus(ctx, raw.cpus.clone().unwrap_or_default())?,
        session_queue_bytes: to_usize(ctx, "server.session_queue_bytes", session_queue_bytes)?,
        stall_timeout: Duration::from_millis(stall_timeout_ms),
        http: http_settings(ctx, &raw)?,
        admin: admin_addr(ctx, &raw)?,
        metrics_token: raw
            .metrics_token
            .as_deref()
            .map(|t| crate::policy::secret_token(ctx, "server.metrics_token", t))
            .transpose()?,
        team: raw.team.clone(),
        watch_config: raw.watch_config.unwrap_or(false),
        console: raw
            .console
            .as_ref()
            .map(|c| console_login(ctx, c))
            .transpose()?,
        request_state_key: raw
            .request_state_key
            .as_deref()
            .map(|k| state_key(ctx, k))
            .transpose()?,
    })
}

/// `[server.console]`, interpolated; the claim and its value must name something.
fn console_login(
    ctx: &Ctx<'_>,
    raw: &crate::schema::RawConsole,
) -> Result<crate::ConsoleLogin, ConfigError> {
    let key = |name: &str| format!("server.console.{name}");
    for (name, value) in [
        ("login_client_id", &raw.login_client_id),
        ("admin_claim", &raw.admin_claim),
        ("admin_value", &raw.admin_value),
    ] {
        if value.trim().is_empty() {
            return Err(ctx.err(key(name), "must not be empty"));
        }
    }
    let public_url = raw
        .public_url
        .as_deref()
        .map(|u| ctx.interpolate(&key("public_url"), u))
        .transpose()?;
    if let Some(url) = &public_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ctx.err(
                key("public_url"),
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
    }
    Ok(crate::ConsoleLogin {
        client_id: ctx.interpolate(&key("login_client_id"), &raw.login_client_id)?,
        client_secret: raw
            .login_client_secret
            .as_deref()
            .map(|v| {
                ctx.interpolate(&key("login_client_secret"), v)
                    .map(crate::Secret::new)
            })
            .transpose()?,
        admin_claim: raw.admin_claim.clone(),
        admin_value: raw.admin_value.clone(),
        public_url,
    })
}

/// `[server.console]` signs operators in at `[auth.jwt]`'s issuer: without it there is none.
pub(crate) fn check_console(
    ctx: &Ctx<'_>,
    server: &ServerSettings,
    auth: &crate::AuthConfig,
) -> Result<(), ConfigError> {
    if server.console.is_some() && auth.jwt.is_none() {
        return Err(ctx.err(
            "server.console",
            "the console's OpenID Connect login needs [auth.jwt]: its issuer is where operators sign in",
        ));
    }
    Ok(())
}

/// `server.request_state_key`: usually `${ENV}`, at least 32 bytes once interpolated.
fn state_key(ctx: &Ctx<'_>, text: &str) -> Result<crate::StateKey, ConfigError> {
    let key = "server.request_state_key";
    let plain = ctx.interpolate(key, text)?;
    if plain.len() < crate::StateKey::MIN_LEN {
        return Err(ctx.err(
            key,
            format!(
                "the key must have at least {} bytes (it authenticates every requestState; \
                 share one key among replicas, e.g. from an environment variable)",
                crate::StateKey::MIN_LEN
            ),
        ));
    }
    Ok(crate::StateKey(plain.as_bytes().into()))
}

fn admin_addr(ctx: &Ctx<'_>, raw: &RawServer) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    let Some(text) = &raw.admin else {
        return Ok(None);
    };
    let addr = crate::parse_listen(text).ok_or_else(|| {
        ctx.err(
            "server.admin",
            format!("{text:?} is not an address; write it as IP:PORT or a port"),
        )
    })?;
    check_loopback(ctx, "server.admin", addr, raw.allow_remote.unwrap_or(false))?;
    Ok(Some(addr))
}

pub(crate) fn telemetry(ctx: &Ctx<'_>, raw: RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    let log_format = match raw.log_format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(ctx.err(
                "telemetry.log_format",
                format!("{other:?} is not a log format; use \"text\" or \"json\""),
            ))
        }
    };
    let otlp_protocol = match raw.otlp_protocol.as_deref() {
        None => None,
        Some(text) => Some(OtlpProtocol::parse(text).ok_or_else(|| {
            ctx.err(
                "telemetry.otlp_protocol",
                format!("{text:?} is not an OTLP protocol; use \"grpc\" or \"http/protobuf\""),
            )
        })?),
    };
    if let Some(endpoint) = &raw.otlp_endpoint {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(ctx.err(
                "telemetry.otlp_endpoint",
                format!("{endpoint:?} is not an http:// or https:// URL"),
            ));
        }
    }
    if let Some(sampler) = &raw.sampler {
        if !SAMPLERS.contains(&sampler.as_str()) {
            return Err(ctx.err(
                "telemetry.sampler",
                format!(
                    "{sampler:?} is not a sampler; use one of {}",
                    SAMPLERS.join(", ")
                ),
            ));
        }
    }
    if let Some(arg) = raw.sampler_arg {
        if !(0.0..=1.0).contains(&arg) {
            return Err(ctx.err(
                "telemetry.sampler_arg",
                format!("{arg} is not a ratio between 0 and 1"),
            ));
        }
    }
    Ok(TelemetryConfig {
        log_level: raw.log_level,
        log_format,
        metrics: raw.metrics.unwrap_or(true),
        otlp_endpoint: raw.otlp_endpoint,
        otlp_protocol,
        service_name: raw.service_name,
        sampler: raw.sampler,
        sampler_arg: raw.sampler_arg,
        resource_attributes: raw.resource_attributes.into_iter().collect(),
    })
}

fn http_settings(ctx: &Ctx<'_>, raw: &RawServer) -> Result<HttpSettings, ConfigError> {
    let listen = match &raw.listen {
        None => None,
        Some(text) => Some(listen_addr(ctx, text)?),
    };
    let allow_remote = raw.allow_remote.unwrap_or(false);
    let workers = raw.http_workers.unwrap_or(DEFAULT_HTTP_WORKERS);
    check_min(ctx, "server.http_workers", workers, 1)?;
    let idle = raw
        .session_idle_timeout_ms
        .unwrap_or(DEFAULT_SESSION_IDLE_TIMEOUT_MS);
    check_min(ctx, "server.session_idle_timeout_ms", idle, 1)?;
    let keepalive = raw.sse_keepalive_ms.unwrap_or(DEFAULT_SSE_KEEPALIVE_MS);
    check_min(ctx, "server.sse_keepalive_ms", keepalive, 1)?;
    let max_sessions = raw.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS);
    check_min(ctx, "server.max_sessions", max_sessions, 1)?;
    let per_session = raw
        .max_requests_per_session
        .unwrap_or(DEFAULT_MAX_REQUESTS_PER_SESSION);
    check_min(ctx, "server.max_requests_per_session", per_session, 1)?;
    let replay = raw.replay_events.unwrap_or(DEFAULT_REPLAY_EVENTS);
    let origins = raw.allowed_origins.clone().unwrap_or_default();
    for (i, origin) in origins.iter().enumerate() {
        let ok = origin == "*" || origin.starts_with("http://") || origin.starts_with("https://");
        if !ok || origin.ends_with('/') {
            return Err(ctx.err(
                format!("server.allowed_origins[{i}]"),
                format!("{origin:?} is not an origin; write it as scheme://host[:port], or \"*\""),
            ));
        }
    }
    Ok(HttpSettings {
        listen,
        allow_remote,
        allowed_origins: origins,
        workers: to_usize(ctx, "server.http_workers", workers)?,
        session_idle_timeout: Duration::from_millis(idle),
        keepalive: Duration::from_millis(keepalive),
        max_sessions: to_usize(ctx, "server.max_sessions", max_sessions)?,
        max_requests_per_session: to_usize(ctx, "server.max_requests_per_session", per_session)?,
        replay_events: to_usize(ctx, "server.replay_events", replay)?,
        tls: match &raw.tls {
            Some(tls) => Some(tls_settings(ctx, tls)?),
            None => None,
        },
        drain_delay: duration(ctx, "server.drain_delay", raw.drain_delay.as_deref())?
            .unwrap_or(DEFAULT_DRAIN_DELAY),
        drain_timeout: duration(ctx, "server.drain_timeout", raw.drain_timeout.as_deref())?
            .unwrap_or(DEFAULT_DRAIN_TIMEOUT),
        client_timeout: positive(ctx, "server.client_timeout", raw.client_timeout.as_deref())?
            .unwrap_or(DEFAULT_CLIENT_TIMEOUT),
        keep_alive: positive(ctx, "server.keep_alive", raw.keep_alive.as_deref())?
            .unwrap_or(DEFAULT_KEEP_ALIVE),
    })
}

/// A duration written as text (`"500ms"`, `"30s"`, `"2m"`); 0 is allowed.
pub(crate) fn duration(
    ctx: &Ctx<'_>,
    key: &str,
    text: Option<&str>,
) -> Result<Option<Duration>, ConfigError> {
    let Some(text) = text else {
        return Ok(None);
    };
    crate::parse_duration(text).map(Some).ok_or_else(|| {
        ctx.err(
            key,
            format!("{text:?} is not a duration: use a number and ms, s, m, h or d (\"30s\")"),
        )
    })
}

/// A duration written as text that must not be 0.
fn positive(ctx: &Ctx<'_>, key: &str, text: Option<&str>) -> Result<Option<Duration>, ConfigError> {
    let value = duration(ctx, key, text)?;
    if value.is_some_and(|d| d.is_zero()) {
        return Err(ctx.err(key, "must be greater than 0"));
    }
    Ok(value)
}

/// The paths of `[server.tls]`, interpolated and resolved like `cwd`. The files themselves are
/// read where the listener is set up.
fn tls_settings(ctx: &Ctx<'_>, raw: &RawTls) -> Result<TlsSettings, ConfigError> {
    let path = |key: &str, text: &str| -> Result<PathBuf, ConfigError> {
        let text = ctx.interpolate(key, text)?;
        if text.trim().is_empty() {
            return Err(ctx.err(key, "must name a PEM file"));
        }
        Ok(resolve_path(ctx.file, &text))
    };
    Ok(TlsSettings {
        cert: path("server.tls.cert", &raw.cert)?,
        key: path("server.tls.key", &raw.key)?,
    })
}

/// The listen address may be reachable from other machines when hosts must authenticate, or
/// when `server.allow_remote` says so. (The admin address is never authenticated, so it is
/// checked on its own, in `server`.)
pub(crate) fn check_listen(
    ctx: &Ctx<'_>,
    http: &HttpSettings,
    authenticated: bool,
) -> Result<(), ConfigError> {
    let Some(addr) = http.listen else {
        return Ok(());
    };
    match crate::remote_refusal(addr, http.allow_remote, authenticated) {
        None => Ok(()),
        Some(problem) => Err(ctx.err("server.listen", problem)),
    }
}

/// `server.team` must name a team.
pub(crate) fn check_team(
    ctx: &Ctx<'_>,
    server: &ServerSettings,
    teams: &[crate::TeamConfig],
) -> Result<(), ConfigError> {
    match &server.team {
        Some(team) if !teams.iter().any(|t| &t.name == team) => Err(ctx.err(
            "server.team",
            format!("{team:?} names no team under [teams]"),
        )),
        _ => Ok(()),
    }
}

fn listen_addr(ctx: &Ctx<'_>, text: &str) -> Result<std::net::SocketAddr, ConfigError> {
    crate::parse_listen(text).ok_or_else(|| {
        ctx.err(
            "server.listen",
            format!(
                "{text:?} is not an address; write it as IP:PORT (e.g. \"127.0.0.1:8080\") or a port"
            ),
        )
    })
}

fn check_loopback(
    ctx: &Ctx<'_>,
    key: &str,
    addr: std::net::SocketAddr,
    allow_remote: bool,
) -> Result<(), ConfigError> {
    match crate::remote_refusal(addr, allow_remote, false) {
        None => Ok(()),
        Some(problem) => Err(ctx.err(key, problem)),
    }
}

pub(crate) fn names(ctx: &Ctx<'_>, raw: RawNames) -> Result<NameSettings, ConfigError> {
    let separator = raw
        .separator
        .unwrap_or_else(|| DEFAULT_SEPARATOR.to_owned());
    let chars = separator.chars().count();
    let allowed = separator
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !(1..=MAX_SEPARATOR_CHARS).contains(&chars) || !allowed {
        return Err(ctx.err(
            "names.separator",
            format!(
                "{separator:?} is not allowed: use 1 to {MAX_SEPARATOR_CHARS} characters from \
                 A-Z, a-z, 0-9, '_' and '-' (hosts reject tool names containing '/', '.' or ':')"
            ),
        ));
    }
    let max_length = raw.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
    if !(1..=MAX_MAX_LENGTH).contains(&max_length) {
        return Err(ctx.err(
            "names.max_length",
            format!("{max_length} is out of range; must be between 1 and {MAX_MAX_LENGTH}"),
        ));
    }
    Ok(NameSettings {
        separator,
        max_length: to_usize(ctx, "names.max_length", max_length)?,
    })
}

/// Validates one enabled upstream; `path` is its dotted key (e.g. `upstreams.time`).
pub(crate) fn upstream(
    ctx: &Ctx<'_>,
    path: &str,
    key: &str,
    raw: RawUpstream,
) -> Result<UpstreamConfig, ConfigError> {
    let max_message_bytes = raw
        .max_message_bytes
        .unwrap_or(DEFAULT_UPSTREAM_MAX_MESSAGE_BYTES);
    check_min(
        ctx,
        &child(path, "max_message_bytes"),
        max_message_bytes,
        MIN_MAX_MESSAGE_BYTES,
    )?;
    if let Some(timeout) = raw.request_timeout_ms {
        check_min(ctx, &child(path, "request_timeout_ms"), timeout, 1)?;
    }
    let transport = transport(ctx, path, &raw)?;
    let isolation = isolation(ctx, path, &raw)?;
    let era = era(ctx, path, &raw, &transport)?;
    let mut tool_timeouts = BTreeMap::new();
    for (tool, ms) in &raw.tool_timeouts {
        check_min(ctx, &child(&child(path, "tool_timeouts"), tool), *ms, 1)?;
        tool_timeouts.insert(tool.clone(), Duration::from_millis(*ms));
    }
    let caches = crate::cache::upstream(
        ctx,
        path,
        crate::cache::RawUpstreamCaches {
            cache: raw.cache.as_ref(),
            tool_cache: &raw.tool_cache,
            resource_cache: raw.resource_cache.as_ref(),
        },
    )?;
    Ok(UpstreamConfig {
        key: key.to_owned(),
        prefix: raw.prefix.clone().unwrap_or_else(|| key.to_owned()),
        uri_prefix: raw.uri_prefix.clone(),
        restart: restart(ctx, path, &raw)?,
        health: health(ctx, path, &raw)?,
        request_timeout: raw.request_timeout_ms.map(Duration::from_millis),
        tool_timeouts,
        max_message_bytes: to_usize(ctx, &child(path, "max_message_bytes"), max_message_bytes)?,
        tools: filter(ctx, &child(path, "tools"), raw.tools)?,
        prompts: filter(ctx, &child(path, "prompts"), raw.prompts)?,
        required: raw.required.unwrap_or(false),
        isolation,
        era,
        caches,
        transport,
    })
}

fn era(
    ctx: &Ctx<'_>,
    path: &str,
    raw: &RawUpstream,
    transport: &Transport,
) -> Result<EraChoice, ConfigError> {
    let era = match raw.era.as_deref() {
        None | Some("auto") => EraChoice::Auto,
        Some("session") => EraChoice::Session,
        Some("stateless") => EraChoice::Stateless,
        Some(other) => {
            return Err(ctx.err(
                child(path, "era"),
                format!(
                    "{other:?} is not a protocol era; use \"auto\" (the default: probe, then \
                     the stateless era if the upstream speaks it), \"session\" or \"stateless\""
                ),
            ))
        }
    };
    // The in-process server of an OpenAPI upstream speaks the session era.
    if matches!(transport, Transport::OpenApi(_)) {
        return Ok(EraChoice::Session);
    }
    if let (EraChoice::Stateless, Transport::Http(http)) = (era, transport) {
        if http.kind == HttpKind::Sse {
            return Err(ctx.err(
                child(path, "era"),
                "the HTTP+SSE transport (transport = \"sse\") is of the session era only; \
                 a stateless-era upstream speaks Streamable HTTP",
            ));
        }
    }
    Ok(era)
}

fn isolation(ctx: &Ctx<'_>, path: &str, raw: &RawUpstream) -> Result<Isolation, ConfigError> {
    let limit = raw.isolation_limit.unwrap_or(DEFAULT_ISOLATION_LIMIT);
    check_min(ctx, &child(path, "isolation_limit"), limit, 1)?;
    match raw.isolation.as_deref() {
        None | Some("shared") => {
            if raw.isolation_limit.is_some() {
                return Err(ctx.err(
                    child(path, "isolation_limit"),
                    "applies to isolation = \"session\" only",
                ));
            }
            Ok(Isolation::Shared)
        }
        Some("session") => Ok(Isolation::Session {
            limit: to_usize(ctx, &child(path, "isolation_limit"), limit)?,
        }),
        Some(other) => Err(ctx.err(
            child(path, "isolation"),
            format!("{other:?} is not an isolation; use \"shared\" or \"session\""),
        )),
    }
}

/// `command` (a child process over stdio) or `url` (HTTP), exactly one.
fn transport(ctx: &Ctx<'_>, path: &str, raw: &RawUpstream) -> Result<Transport, ConfigError> {
    if let Some(source) = &raw.openapi {
        return crate::openapi::openapi(ctx, path, source, raw).map(Transport::OpenApi);
    }
    if let Some(key) = crate::openapi::stray_key(raw) {
        return Err(ctx.err(
            child(path, key),
            "applies to OpenAPI upstreams (`openapi`) only",
        ));
    }
    match (&raw.command, &raw.url) {
        (Some(_), Some(_)) => Err(ctx.err(
            path,
            "has both `command` and `url`; an upstream is either a process or an HTTP server",
        )),
        (None, None) => Err(ctx.err(
            child(path, "command"),
            "required key is missing (or give `url` for an HTTP upstream, or `openapi` for a \
             service an OpenAPI description describes)",
        )),
        (Some(command), None) => {
            for key in ["transport", "headers", "connect_timeout_ms", "auth"] {
                let set = match key {
                    "transport" => raw.transport.is_some(),
                    "headers" => !raw.headers.is_empty(),
                    "auth" => raw.auth.is_some(),
                    _ => raw.connect_timeout_ms.is_some(),
                };
                if set {
                    return Err(ctx.err(child(path, key), "applies to HTTP upstreams (`url`) only"));
                }
            }
            Ok(Transport::Stdio(stdio(
                ctx,
                path,
                command.clone(),
                raw.args.clone(),
                raw.env.clone(),
                raw.cwd.clone(),
            )?))
        }
        (None, Some(url)) => {
            for (key, set) in [
                ("args", !raw.args.is_empty()),
                ("env", !raw.env.is_empty()),
                ("cwd", raw.cwd.is_some()),
            ] {
                if set {
                    return Err(ctx.err(
                        child(path, key),
                        "applies to process upstreams (`command`) only",
                    ));
                }
            }
            Ok(Transport::Http(http(ctx, path, url, raw)?))
        }
    }
}

fn http(
    ctx: &Ctx<'_>,
    path: &str,
    url: &str,
    raw: &RawUpstream,
) -> Result<HttpConfig, ConfigError> {
    let url_key = child(path, "url");
    let url = ctx.interpolate(&url_key, url)?;
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    if !rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/')) {
        return Err(ctx.err(
            url_key,
            format!("{url:?} is not an http:// or https:// URL"),
        ));
    }
    let kind = match raw.transport.as_deref() {
        None => HttpKind::Auto,
        Some("streamable-http" | "http") => HttpKind::StreamableHttp,
        Some("sse") => HttpKind::Sse,
        Some(other) => {
            return Err(ctx.err(
                child(path, "transport"),
                format!("{other:?} is not a transport; use \"streamable-http\" or \"sse\" (or leave it out to try both)"),
            ))
        }
    };
    let headers = headers(ctx, path, &raw.headers)?;
    let connect = raw.connect_timeout_ms.unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS);
    check_min(ctx, &child(path, "connect_timeout_ms"), connect, 1)?;
    let auth = raw
        .auth
        .as_ref()
        .map(|auth| crate::credentials::upstream_auth(ctx, &child(path, "auth"), auth))
        .transpose()?;
    Ok(HttpConfig {
        url,
        kind,
        headers,
        connect_timeout: Duration::from_millis(connect),
        auth,
    })
}

/// Static headers of an HTTP or OpenAPI upstream, checked and interpolated.
pub(crate) fn headers(
    ctx: &Ctx<'_>,
    path: &str,
    raw: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let headers_key = child(path, "headers");
    raw.iter()
        .map(|(name, value)| {
            let key = child(&headers_key, name);
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !valid {
                return Err(ctx.err(key, "is not a valid HTTP header name"));
            }
            let value = ctx.interpolate(&key, value)?;
            if value.bytes().any(|b| b == b'\r' || b == b'\n') {
                return Err(ctx.err(key, "a header value must not contain a line break"));
            }
            Ok((name.clone(), value))
        })
        .collect()
}

fn restart(ctx: &Ctx<'_>, path: &str, raw: &RawUpstream) -> Result<RestartPolicy, ConfigError> {
    let initial = raw
        .restart_initial_backoff_ms
        .unwrap_or(DEFAULT_INITIAL_BACKOFF_MS);
    let max = raw.restart_max_backoff_ms.unwrap_or(DEFAULT_MAX_BACKOFF_MS);
    // The backoff doubles from the initial value, so zero would restart a crashing server in
    // a tight loop forever.
    check_min(ctx, &child(path, "restart_initial_backoff_ms"), initial, 1)?;
    if max < initial {
        return Err(ctx.err(
            child(path, "restart_max_backoff_ms"),
            format!("{max} is less than restart_initial_backoff_ms ({initial})"),
        ));
    }
    Ok(RestartPolicy {
        initial_backoff: Duration::from_millis(initial),
        max_backoff: Duration::from_millis(max),
    })
}

/// An upstream's health settings; a duration of `"0s"` turns its part off (but
/// `health_timeout` and `breaker_cooldown` must be positive).
fn health(ctx: &Ctx<'_>, path: &str, raw: &RawUpstream) -> Result<HealthPolicy, ConfigError> {
    let defaults = HealthPolicy::default();
    let interval = duration(
        ctx,
        &child(path, "health_interval"),
        raw.health_interval.as_deref(),
    )?;
    let timeout = positive(
        ctx,
        &child(path, "health_timeout"),
        raw.health_timeout.as_deref(),
    )?;
    let cooldown = positive(
        ctx,
        &child(path, "breaker_cooldown"),
        raw.breaker_cooldown.as_deref(),
    )?;
    let restart_after = duration(
        ctx,
        &child(path, "restart_after"),
        raw.restart_after.as_deref(),
    )?;
    let failures =
        match raw.breaker_failures {
            None => defaults.breaker_failures,
            Some(0) => None,
            Some(n) => Some(u32::try_from(n).map_err(|_| {
                ctx.err(child(path, "breaker_failures"), format!("{n} is too large"))
            })?),
        };
    let off = |d: Option<Duration>, default: Option<Duration>| match d {
        None => default,
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
    };
    Ok(HealthPolicy {
        interval: off(interval, defaults.interval),
        timeout: timeout.unwrap_or(defaults.timeout),
        breaker_failures: failures,
        breaker_cooldown: cooldown.unwrap_or(defaults.breaker_cooldown),
        restart_after: off(restart_after, defaults.restart_after),
    })
}

fn stdio(
    ctx: &Ctx<'_>,
    path: &str,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
) -> Result<StdioConfig, ConfigError> {
    let command_key = child(path, "command");
    let command = ctx.interpolate(&command_key, &command)?;
    if command.trim().is_empty() {
        return Err(ctx.err(command_key, "must not be empty"));
    }
    let args = args
        .iter()
        .enumerate()
        .map(|(i, arg)| ctx.interpolate(&format!("{path}.args[{i}]"), arg))
        .collect::<Result<_, _>>()?;
    let env = interpolate_env(ctx, &child(path, "env"), env)?;
    let cwd = match cwd {
        Some(cwd) => Some(resolve_path(
            ctx.file,
            &ctx.interpolate(&child(path, "cwd"), &cwd)?,
        )),
        None => None,
    };
    Ok(StdioConfig {
        command,
        args,
        env,
        cwd,
    })
}

fn interpolate_env(
    ctx: &Ctx<'_>,
    path: &str,
    env: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    env.into_iter()
        .map(|(name, value)| {
            let key = child(path, &name);
            // The OS splits `NAME=VALUE` at the first `=`, so such a name cannot be set.
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(ctx.err(key, "invalid variable name (empty, or contains '=' or NUL)"));
            }
            let value = ctx.interpolate(&key, &value)?;
            Ok((name, value))
        })
        .collect()
}

/// A relative path (`cwd`, TLS files) means relative to the config file, not to wherever
/// manifold was started, so that a config keeps working when the host launches manifold from
/// another directory.
pub(crate) fn resolve_path(file: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    match file.parent() {
        Some(dir) if path.is_relative() && !dir.as_os_str().is_empty() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

fn filter(ctx: &Ctx<'_>, path: &str, raw: RawFilter) -> Result<NameFilter, ConfigError> {
    for (original, exposed) in &raw.rename {
        if exposed.is_empty() {
            return Err(ctx.err(child(&child(path, "rename"), original), "must not be empty"));
        }
    }
    Ok(NameFilter {
        include: raw.include,
        exclude: raw.exclude,
        rename: raw.rename,
    })
}

fn check_min(ctx: &Ctx<'_>, key: &str, value: u64, min: u64) -> Result<(), ConfigError> {
    if value < min {
        let need = if min == 1 {
            "must be greater than 0".to_owned()
        } else {
            format!("must be at least {min}")
        };
        return Err(ctx.err(key, format!("{value} is too small; {need}")));
    }
    Ok(())
}

/// The kernel's CPU set holds CPUs 0 to 1023.
const MAX_CPU: u64 = 1023;

fn cpus(ctx: &Ctx<'_>, list: Vec<u64>) -> Result<Vec<usize>, ConfigError> {
    let mut out = Vec::with_capacity(list.len());
    for cpu in list {
        if cpu > MAX_CPU {
            return Err(ctx.err(
                "server.cpus",
                format!("{cpu} is not a CPU number; must be 0 to {MAX_CPU}"),
            ));
        }
        let cpu = to_usize(ctx, "server.cpus", cpu)?;
        if !out.contains(&cpu) {
            out.push(cpu);
        }
    }
    Ok(out)
}

fn to_usize(ctx: &Ctx<'_>, key: &str, value: u64) -> Result<usize, ConfigError> {
    usize::try_from(value).map_err(|_| ctx.err(key, format!("{value} is too large")))
}

fn ms(value: Option<u64>, default: u64) -> Duration {
    Duration::from_millis(value.unwrap_or(default))
}
