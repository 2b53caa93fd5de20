//! Every failure a host (or an upstream Manifold answers for its host) can be told of, and the
//! one place that turns any of them into a JSON-RPC error object and, for HTTP, a status.
//! [`RouteError::classify`] is the one classification every path asks: whose fault it is, whether
//! the same request may succeed later, its code in the request's era, its HTTP status and
//! `Retry-After`. Every error object Manifold makes says `retryable` in its `data`. The codes are
//! in `manifold_protocol::codes`, one documented table; no other module of the server crates
//! names one (a test reads their sources to hold that).

use manifold_catalog::Collision;
use manifold_policy::{Refusal, RefusalKind};
use manifold_protocol::version::Era;
use manifold_protocol::{codes, version, ErrorObject, MessageError, RawObject};
use manifold_telemetry::Outcome;
use manifold_upstream::UpstreamError;

/// Whose fault a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The host sent something Manifold cannot accept.
    Host,
    /// An upstream failed, was unavailable or too slow.
    Upstream,
    /// Manifold itself could not serve the request.
    Manifold,
    /// A policy said no: a rate limit, a quota, or the store that counts them.
    Policy,
}

impl Fault {
    pub fn label(self) -> &'static str {
        match self {
            Fault::Host => "host",
            Fault::Upstream => "upstream",
            Fault::Manifold => "manifold",
            Fault::Policy => "policy",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("{0}")]
    Message(#[from] MessageError),
    #[error("Method not found: {0}")]
    UnknownMethod(String),
    #[error("Manifold has not been initialized: send initialize first")]
    NotInitialized,
    #[error("Manifold is already initialized")]
    AlreadyInitialized,
    #[error("Invalid params: {0}")]
    InvalidParams(String),
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
    #[error("Unknown prompt: {0}")]
    UnknownPrompt(String),
    #[error(
        "{kind} name {name:?} is claimed by several upstreams ({owners}); rename one in the config"
    )]
    Ambiguous {
        kind: &'static str,
        name: String,
        owners: String,
    },
    /// A tool or prompt held back because its definition does not match its pin.
    #[error("{kind} {name:?} is held: {reason}; review it and run manifold pin")]
    Held {
        kind: &'static str,
        name: String,
        reason: String,
    },
    #[error("Resource not found: {0}")]
    UnknownResource(String),
    /// A skill file read through Manifold that does not match its skill's entry (its size,
    /// its digest or, for a SKILL.md, its frontmatter): the upstream's answer is withheld.
    #[error("skill file {uri:?} does not match its skill entry: its {} differed", differed.join(" and "))]
    Unverified {
        uri: String,
        differed: Vec<&'static str>,
    },
    #[error("Invalid cursor")]
    BadCursor,
    #[error("message of {len} bytes is over the limit of {max} bytes")]
    Oversize { len: usize, max: usize },
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Refused by a rate limit or quota; the upstream never saw the call.
    #[error("{} for {tool:?} ({}); retry in {} ms", match .refusal.kind { RefusalKind::RateLimited => "Rate limit exceeded", RefusalKind::QuotaExceeded => "Quota exceeded" }, .refusal.limit, retry_ms(.refusal))]
    Limited { tool: String, refusal: Refusal },
    /// The shared limit store could not be reached and `limits.fail_open` is false. Why is
    /// logged, not told to the host (it would name the store's address).
    #[error("Limits cannot be checked: the limit store is unreachable; retry later")]
    LimitStore,
    /// A name the caller's team may not see: the host gets exactly the error of an unknown
    /// name (the inner error); metrics and spans record it as denied.
    #[error(transparent)]
    Hidden(Box<RouteError>),
    /// HTTP: no valid credential (401; the transport adds the challenge).
    #[error("authentication required: {0}")]
    Unauthorized(String),
    /// HTTP: a browser origin that may not reach Manifold (403).
    #[error("origin {0:?} is not allowed (server.allowed_origins)")]
    Origin(String),
    /// HTTP: the request names no live session of this caller, or nothing is served there
    /// (404).
    #[error("{0}")]
    NotFound(String),
    /// HTTP: the request itself (not its JSON-RPC message) is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// HTTP: no message could be read from the body (400, as a parse error).
    #[error("{0}")]
    Body(String),
    /// HTTP: the body did not arrive within `server.client_timeout` (408).
    #[error("the body did not arrive within {}ms (server.client_timeout)", .0.as_millis())]
    SlowBody(std::time::Duration),
    /// HTTP: the body is over `server.max_message_bytes` (413).
    #[error("the body is over the limit of {0} bytes (server.max_message_bytes)")]
    BodyTooLarge(usize),
    /// HTTP: the method is not served on the path (405; the transport adds `Allow`).
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// HTTP: what the host accepts cannot carry the answer (406).
    #[error("{0}")]
    NotAcceptable(String),
    /// A session asked for more than it may have at once; retry in a second (429).
    #[error("{0}")]
    Busy(String),
    /// Manifold has as many sessions as it may; retry in a few seconds (503).
    #[error("{0}")]
    Full(String),
    /// Manifold cannot serve the request at all (500).
    #[error("{0}")]
    Internal(String),
    /// HTTP: Manifold is draining before it stops and takes no new requests (503 with
    /// `Retry-After: 1`, before anything of the request was done: safe to send again, which a
    /// load balancer does to another instance).
    #[error("Manifold is shutting down and takes no new requests; send it again (another instance will serve it)")]
    ShuttingDown,
    /// Stateless era: an HTTP header disagrees with the body, or a required one is missing
    /// (-32020, HTTP 400).
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    /// Stateless era: the request's revision is not one Manifold speaks (-32022, HTTP 400).
    #[error("unsupported protocol version {requested:?}; supported: {}", version::ALL.join(", "))]
    UnsupportedVersion { requested: String },
    /// Stateless era: the request needs a client capability the host did not declare with it
    /// (-32021, HTTP 400).
    #[error(
        "{what} needs the client capability {capability:?}, which the request did not declare"
    )]
    MissingCapability {
        capability: &'static str,
        what: String,
    },
    /// Stateless era: a method the 2026-07-28 revision removed.
    #[error("Method not found: {0} (removed in protocol revision 2026-07-28)")]
    Removed(String),
    /// A `requestState` that Manifold did not mint for this caller and request, or that
    /// expired or was used already.
    #[error("invalid requestState: {0}")]
    RequestState(String),
    /// An upstream's request to its client that Manifold does not pass to hosts.
    #[error("Manifold does not forward {0} to hosts")]
    NotForwarded(String),
    /// An upstream's request a session-era host did not declare the capability for.
    #[error("{method}: the host did not declare the {capability} capability")]
    Undeclared {
        method: String,
        capability: &'static str,
    },
    /// An upstream's request during a host request that has no session to ask it in.
    #[error("{0}: the host request this belongs to has no session to ask")]
    NoSessionToAsk(String),
    /// An upstream's request to its client given up on the host's side: the request it
    /// belonged to is over, the host went away, or it did not answer in time.
    #[error("{0}")]
    Abandoned(String),
    /// The caller must authorize an upstream in a browser: the link (-32042 with the URL
    /// elicitation for a host that declared URL elicitation, else -32018 with `data.url`).
    #[error("{}", .0.message)]
    Consent(Box<Consent>),
}

/// A consent a host is asked to have its user complete.
#[derive(Debug, Clone)]
pub struct Consent {
    pub upstream: String,
    /// The page on Manifold's listener that starts the authorization.
    pub url: String,
    /// The elicitation's id (reported complete once the callback arrived).
    pub id: String,
    /// What the user is told.
    pub message: String,
    /// Whether the host declared URL elicitation (it gets -32042).
    pub elicit: bool,
}

/// One failure, classified: what every path that reports a failure asks of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub fault: Fault,
    /// Whether the same request may succeed later (after a restart, a window, less load).
    pub retryable: bool,
    /// The JSON-RPC error code, in the request's era.
    pub code: i64,
    /// The HTTP status when the HTTP transport refuses a request with this failure: its own
    /// for a transport's refusal (401, 404, 413, 429, 503, ...), else 400.
    pub status: u16,
    /// The HTTP status of a response whose body answers a JSON-RPC request with this failure:
    /// in the stateless era the one that revision gives its code (see [`answer_status`]), else
    /// 200.
    pub answer_status: u16,
    /// Seconds after which the same request may succeed, for `Retry-After`.
    pub retry_after_secs: Option<u32>,
    /// How the request ended, for metrics and spans.
    pub outcome: Outcome,
}

impl RouteError {
    pub fn ambiguous(kind: &'static str, c: &Collision) -> Self {
        let owners = c
            .owners
            .iter()
            .map(|(u, n)| format!("{u}:{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        RouteError::Ambiguous {
            kind,
            name: c.exposed.clone(),
            owners,
        }
    }

    /// How a request refused with this error ended, for metrics and spans.
    fn outcome(&self) -> Outcome {
        match self {
            RouteError::Upstream(e) => upstream_outcome(e),
            RouteError::Hidden(_) | RouteError::Held { .. } | RouteError::Consent(_) => {
                Outcome::Denied
            }
            RouteError::Limited { refusal, .. } => match refusal.kind {
                RefusalKind::RateLimited => Outcome::RateLimited,
                RefusalKind::QuotaExceeded => Outcome::QuotaExceeded,
            },
            RouteError::LimitStore | RouteError::Abandoned(_) => Outcome::Unavailable,
            _ => Outcome::ProtocolError,
        }
    }

    /// The one classification of this failure, for a request of `era`.
    pub fn classify(&self, era: Era) -> Classified {
        let code = code_in(era, self.base_code());
        let answered = answer_status(era, code);
        Classified {
            fault: self.fault(),
            retryable: self.retryable(),
            code,
            status: self.http_status().unwrap_or(400),
            answer_status: answered,
            retry_after_secs: self.retry_after_secs(),
            outcome: self.outcome(),
        }
    }

    /// The JSON-RPC error object for this error, as a host of `era` gets it.
    pub fn error_object(&self, era: Era) -> ErrorObject {
        let mut obj = self.object();
        obj.code = code_in(era, obj.code);
        obj
    }

    /// The error object as JSON text, for an answer Manifold gives an upstream's request on its
    /// host's behalf (a session-era exchange between Manifold and the upstream).
    pub fn error_text(&self) -> String {
        serde_json::to_string(&self.object()).unwrap_or_default()
    }

    /// The JSON-RPC code, as the session era numbers it.
    fn base_code(&self) -> i64 {
        match self {
            RouteError::Message(MessageError::Parse(_)) | RouteError::Body(_) => codes::PARSE_ERROR,
            RouteError::Message(_)
            | RouteError::NotInitialized
            | RouteError::AlreadyInitialized
            | RouteError::Oversize { .. }
            | RouteError::Unauthorized(_)
            | RouteError::Origin(_)
            | RouteError::NotFound(_)
            | RouteError::BadRequest(_)
            | RouteError::BodyTooLarge(_)
            | RouteError::SlowBody(_)
            | RouteError::MethodNotAllowed { .. }
            | RouteError::NotAcceptable(_) => codes::INVALID_REQUEST,
            RouteError::UnknownMethod(_)
            | RouteError::Removed(_)
            | RouteError::NotForwarded(_)
            | RouteError::Undeclared { .. }
            | RouteError::NoSessionToAsk(_) => codes::METHOD_NOT_FOUND,
            RouteError::InvalidParams(_)
            | RouteError::UnknownTool(_)
            | RouteError::UnknownPrompt(_)
            | RouteError::Ambiguous { .. }
            | RouteError::Held { .. }
            | RouteError::BadCursor
            | RouteError::RequestState(_) => codes::INVALID_PARAMS,
            RouteError::UnknownResource(_) => codes::RESOURCE_NOT_FOUND,
            RouteError::Upstream(e) => upstream_code(e),
            RouteError::Busy(_) => codes::TOO_MANY_REQUESTS,
            RouteError::Full(_)
            | RouteError::Internal(_)
            | RouteError::ShuttingDown
            | RouteError::Abandoned(_)
            | RouteError::Unverified { .. } => codes::INTERNAL_ERROR,
            RouteError::Hidden(inner) => inner.base_code(),
            RouteError::HeaderMismatch(_) => codes::HEADER_MISMATCH,
            RouteError::UnsupportedVersion { .. } => codes::UNSUPPORTED_PROTOCOL_VERSION,
            RouteError::MissingCapability { .. } => codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
            RouteError::Limited { refusal, .. } => match refusal.kind {
                RefusalKind::RateLimited => codes::RATE_LIMITED,
                RefusalKind::QuotaExceeded => codes::QUOTA_EXCEEDED,
            },
            RouteError::LimitStore => codes::LIMIT_STORE_UNAVAILABLE,
            RouteError::Consent(c) if c.elicit => codes::URL_ELICITATION_REQUIRED,
            RouteError::Consent(_) => codes::UPSTREAM_AUTHORIZATION,
        }
    }

    /// The error object, with the codes of the session era.
    fn object(&self) -> ErrorObject {
        match self {
            RouteError::Upstream(e) => upstream_error_object(e),
            RouteError::Hidden(inner) => inner.object(),
            _ => ErrorObject::new(self.base_code(), self.to_string()).with_data(&self.data()),
        }
    }

    /// The `data` of the error object: what a host can act on, and always `retryable`.
    fn data(&self) -> serde_json::Value {
        let retryable = self.retryable();
        match self {
            RouteError::UnsupportedVersion { requested } => serde_json::json!({
                "supported": version::ALL,
                "requested": requested,
                "retryable": retryable,
            }),
            RouteError::MissingCapability { capability, .. } => {
                // An extension (a reverse-DNS name) is required under `extensions`.
                let required = match capability.contains('/') {
                    true => serde_json::json!({ "extensions": { *capability: {} } }),
                    false => serde_json::json!({ *capability: {} }),
                };
                serde_json::json!({ "requiredCapabilities": required, "retryable": retryable })
            }
            RouteError::Limited { refusal, .. } => serde_json::json!({
                "retryAfterMs": retry_ms(refusal),
                "limit": &*refusal.limit,
                "kind": refusal.kind.label(),
                "retryable": retryable,
            }),
            RouteError::LimitStore => serde_json::json!({
                "retryAfterMs": LIMIT_STORE_RETRY_MS,
                "retryable": retryable,
            }),
            RouteError::UnknownResource(uri) => {
                serde_json::json!({ "uri": uri, "retryable": retryable })
            }
            RouteError::Unverified { uri, differed } => {
                serde_json::json!({ "uri": uri, "differed": differed, "retryable": retryable })
            }
            RouteError::Consent(c) if c.elicit => serde_json::json!({
                "elicitations": [{
                    "mode": "url",
                    "elicitationId": c.id,
                    "url": c.url,
                    "message": c.message,
                }],
                "upstream": c.upstream,
                "retryable": retryable,
            }),
            RouteError::Consent(c) => serde_json::json!({
                "upstream": c.upstream,
                "url": c.url,
                "retryable": retryable,
            }),
            _ => serde_json::json!({ "retryable": retryable }),
        }
    }

    /// The HTTP status of a refusal made by the HTTP transport; `None` for a JSON-RPC error
    /// answering a request (see [`answer_status`]).
    fn http_status(&self) -> Option<u16> {
        Some(match self {
            RouteError::Unauthorized(_) => 401,
            RouteError::Origin(_) => 403,
            RouteError::NotFound(_) => 404,
            RouteError::BadRequest(_) | RouteError::Body(_) => 400,
            RouteError::HeaderMismatch(_)
            | RouteError::UnsupportedVersion { .. }
            | RouteError::MissingCapability { .. } => 400,
            RouteError::Message(_) => 400,
            RouteError::BodyTooLarge(_) => 413,
            RouteError::SlowBody(_) => 408,
            RouteError::MethodNotAllowed { .. } => 405,
            RouteError::NotAcceptable(_) => 406,
            RouteError::Busy(_) => 429,
            RouteError::Full(_) | RouteError::ShuttingDown => 503,
            RouteError::Internal(_) => 500,
            _ => return None,
        })
    }

    /// Seconds after which the same request may succeed, for `Retry-After`.
    fn retry_after_secs(&self) -> Option<u32> {
        match self {
            RouteError::Busy(_) | RouteError::ShuttingDown => Some(1),
            RouteError::Full(_) => Some(5),
            _ => None,
        }
    }

    /// Whose fault it is.
    fn fault(&self) -> Fault {
        match self {
            RouteError::Upstream(_) | RouteError::Unverified { .. } => Fault::Upstream,
            RouteError::Limited { .. } | RouteError::LimitStore => Fault::Policy,
            RouteError::Full(_) | RouteError::Internal(_) | RouteError::ShuttingDown => {
                Fault::Manifold
            }
            RouteError::Hidden(inner) => inner.fault(),
            _ => Fault::Host,
        }
    }

    /// Whether the same request may succeed later (after a restart, a window, less load).
    fn retryable(&self) -> bool {
        match self {
            RouteError::Upstream(e) => e.retryable(),
            RouteError::Limited { .. }
            | RouteError::LimitStore
            | RouteError::Consent(_)
            | RouteError::Busy(_)
            | RouteError::Full(_)
            | RouteError::ShuttingDown => true,
            _ => false,
        }
    }
}

/// The code `code` (of the session era) has in `era`: the stateless era retired -32002
/// (resource not found) and answers an unknown resource as invalid params.
pub fn code_in(era: Era, code: i64) -> i64 {
    match (era, code) {
        (Era::Stateless, codes::RESOURCE_NOT_FOUND) => codes::INVALID_PARAMS,
        _ => code,
    }
}

/// The HTTP status of a response whose JSON-RPC answer is an error with `code`: in the
/// stateless era 400 for a header mismatch, a missing client capability and an unsupported
/// revision, 404 for an unknown method; 200 otherwise, and always in the session era.
pub fn answer_status(era: Era, code: i64) -> u16 {
    match (era, code) {
        (
            Era::Stateless,
            codes::HEADER_MISMATCH
            | codes::MISSING_REQUIRED_CLIENT_CAPABILITY
            | codes::UNSUPPORTED_PROTOCOL_VERSION,
        ) => 400,
        (Era::Stateless, codes::METHOD_NOT_FOUND) => 404,
        _ => 200,
    }
}

/// Whether an upstream's error object (JSON text) says it does not know the method (-32601):
/// it did not run the request.
pub fn is_method_not_found(error: &str) -> bool {
    RawObject::parse(error)
        .ok()
        .and_then(|e| e.get("code").and_then(|c| c.trim().parse::<i64>().ok()))
        == Some(codes::METHOD_NOT_FOUND)
}

/// An upstream's error object (JSON text) as a host of `era` gets it: its code, and the
/// object renumbered for the era when its code changes there (`None`: send it as it is).
pub fn upstream_refusal(era: Era, error: &str) -> (Option<i64>, Option<String>) {
    let obj = RawObject::parse(error).ok();
    let code = obj
        .as_ref()
        .and_then(|e| e.get("code").and_then(|c| c.parse::<i64>().ok()));
    let Some((mut obj, code)) = obj.zip(code) else {
        return (code, None);
    };
    let renumbered = code_in(era, code);
    if renumbered == code {
        return (Some(code), None);
    }
    obj.set_raw("code", renumbered.to_string());
    (Some(renumbered), Some(obj.to_text()))
}

/// An upstream failure as the host sees it: which upstream, and whether retrying may help.
fn upstream_error_object(err: &UpstreamError) -> ErrorObject {
    let code = upstream_code(err);
    let data = match err {
        UpstreamError::CircuitOpen { retry_in, .. } => serde_json::json!({
            "upstream": err.upstream(), "retryable": true,
            // While a probe is under way: as soon as it is answered.
            "retryAfterMs": retry_in.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }),
        UpstreamError::AnswerTooLarge { len, max, .. } => serde_json::json!({
            "upstream": err.upstream(), "retryable": false, "size": len, "limit": max,
        }),
        _ => serde_json::json!({ "upstream": err.upstream(), "retryable": err.retryable() }),
    };
    ErrorObject::new(code, err.to_string()).with_data(&data)
}

/// The code of an upstream failure.
fn upstream_code(err: &UpstreamError) -> i64 {
    match err {
        UpstreamError::Timeout { .. } => codes::UPSTREAM_TIMEOUT,
        UpstreamError::Unavailable { .. }
        | UpstreamError::Closed { .. }
        | UpstreamError::Overloaded { .. }
        | UpstreamError::Cancelled { .. } => codes::UPSTREAM_UNAVAILABLE,
        UpstreamError::AnswerTooLarge { .. } => codes::UPSTREAM_ANSWER_TOO_LARGE,
        UpstreamError::CircuitOpen { .. } => codes::UPSTREAM_CIRCUIT_OPEN,
        UpstreamError::Unauthorized { .. } => codes::UPSTREAM_AUTHORIZATION,
    }
}

/// What a host is told to wait when the limit store is unreachable.
const LIMIT_STORE_RETRY_MS: u64 = 1000;

/// Milliseconds until the refused call may succeed, rounded up (never 0).
fn retry_ms(refusal: &Refusal) -> u64 {
    let micros = refusal.retry_after.as_micros();
    u64::try_from(micros.div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// How a request that failed at the upstream boundary ended.
pub fn upstream_outcome(e: &UpstreamError) -> Outcome {
    match e {
        UpstreamError::Timeout { .. } => Outcome::Timeout,
        UpstreamError::Cancelled { .. } => Outcome::Cancelled,
        UpstreamError::Unavailable { .. }
        | UpstreamError::Closed { .. }
        | UpstreamError::Overloaded { .. }
        | UpstreamError::CircuitOpen { .. } => Outcome::Unavailable,
        UpstreamError::AnswerTooLarge { .. } => Outcome::ProtocolError,
        UpstreamError::Unauthorized { .. } => Outcome::Denied,
    }
}

#[cfg(test)]
mod tests;
