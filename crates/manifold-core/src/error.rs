//! Every failure a host can be told of, and the one place that turns any of them into a
//! JSON-RPC error object and, for HTTP, a status. Each says whose fault it is ([`Fault`]) and
//! whether the same request may succeed later ([`RouteError::retryable`]). The codes are in
//! `manifold_protocol::codes`, one documented table.

use manifold_catalog::Collision;
use manifold_policy::{Refusal, RefusalKind};
use manifold_protocol::{codes, version, ErrorObject, MessageError};
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
    pub fn outcome(&self) -> Outcome {
        match self {
            RouteError::Upstream(e) => upstream_outcome(e),
            RouteError::Hidden(_) | RouteError::Held { .. } => Outcome::Denied,
            RouteError::Limited { refusal, .. } => match refusal.kind {
                RefusalKind::RateLimited => Outcome::RateLimited,
                RefusalKind::QuotaExceeded => Outcome::QuotaExceeded,
            },
            RouteError::LimitStore => Outcome::Unavailable,
            _ => Outcome::ProtocolError,
        }
    }

    /// The JSON-RPC error object for this error.
    pub fn to_error_object(&self) -> ErrorObject {
        let code = match self {
            RouteError::Message(MessageError::Parse(_)) => codes::PARSE_ERROR,
            RouteError::Message(_)
            | RouteError::NotInitialized
            | RouteError::AlreadyInitialized
            | RouteError::Oversize { .. } => codes::INVALID_REQUEST,
            RouteError::UnknownMethod(_) => codes::METHOD_NOT_FOUND,
            RouteError::InvalidParams(_)
            | RouteError::UnknownTool(_)
            | RouteError::UnknownPrompt(_)
            | RouteError::Ambiguous { .. }
            | RouteError::Held { .. }
            | RouteError::BadCursor => codes::INVALID_PARAMS,
            RouteError::UnknownResource(_) => codes::RESOURCE_NOT_FOUND,
            RouteError::Upstream(e) => return upstream_error_object(e),
            RouteError::Unauthorized(_)
            | RouteError::Origin(_)
            | RouteError::NotFound(_)
            | RouteError::BadRequest(_)
            | RouteError::BodyTooLarge(_)
            | RouteError::SlowBody(_)
            | RouteError::MethodNotAllowed { .. }
            | RouteError::NotAcceptable(_) => codes::INVALID_REQUEST,
            RouteError::Body(_) => codes::PARSE_ERROR,
            RouteError::Busy(_) => codes::TOO_MANY_REQUESTS,
            RouteError::Full(_) | RouteError::Internal(_) | RouteError::ShuttingDown => {
                codes::INTERNAL_ERROR
            }
            RouteError::Hidden(inner) => return inner.to_error_object(),
            RouteError::HeaderMismatch(_) => codes::HEADER_MISMATCH,
            RouteError::Removed(_) => codes::METHOD_NOT_FOUND,
            RouteError::RequestState(_) => codes::INVALID_PARAMS,
            RouteError::UnsupportedVersion { requested } => {
                return ErrorObject::new(codes::UNSUPPORTED_PROTOCOL_VERSION, self.to_string())
                    .with_data(&serde_json::json!({
                        "supported": version::ALL,
                        "requested": requested,
                    }));
            }
            RouteError::MissingCapability { capability, .. } => {
                // An extension (a reverse-DNS name) is required under `extensions`.
                let required = match capability.contains('/') {
                    true => serde_json::json!({ "extensions": { *capability: {} } }),
                    false => serde_json::json!({ *capability: {} }),
                };
                return ErrorObject::new(
                    codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    self.to_string(),
                )
                .with_data(&serde_json::json!({ "requiredCapabilities": required }));
            }
            RouteError::Limited { refusal, .. } => {
                let code = match refusal.kind {
                    RefusalKind::RateLimited => codes::RATE_LIMITED,
                    RefusalKind::QuotaExceeded => codes::QUOTA_EXCEEDED,
                };
                return ErrorObject::new(code, self.to_string()).with_data(&serde_json::json!({
                    "retryAfterMs": retry_ms(refusal),
                    "limit": &*refusal.limit,
                    "kind": refusal.kind.label(),
                }));
            }
            RouteError::LimitStore => {
                return ErrorObject::new(codes::LIMIT_STORE_UNAVAILABLE, self.to_string())
                    .with_data(&serde_json::json!({ "retryAfterMs": LIMIT_STORE_RETRY_MS }));
            }
        };
        let obj = ErrorObject::new(code, self.to_string());
        match self {
            RouteError::UnknownResource(uri) => obj.with_data(&serde_json::json!({ "uri": uri })),
            _ => obj,
        }
    }

    /// The HTTP status of a refusal made by the HTTP transport; a JSON-RPC error answering a
    /// request travels in a 200 (`None`).
    pub fn http_status(&self) -> Option<u16> {
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
    pub fn retry_after_secs(&self) -> Option<u32> {
        match self {
            RouteError::Busy(_) | RouteError::ShuttingDown => Some(1),
            RouteError::Full(_) => Some(5),
            _ => None,
        }
    }

    /// Whose fault it is.
    pub fn fault(&self) -> Fault {
        match self {
            RouteError::Upstream(_) => Fault::Upstream,
            RouteError::Limited { .. } | RouteError::LimitStore => Fault::Policy,
            RouteError::Full(_) | RouteError::Internal(_) | RouteError::ShuttingDown => {
                Fault::Manifold
            }
            RouteError::Hidden(inner) => inner.fault(),
            _ => Fault::Host,
        }
    }

    /// Whether the same request may succeed later (after a restart, a window, less load).
    pub fn retryable(&self) -> bool {
        match self {
            RouteError::Upstream(e) => e.retryable(),
            RouteError::Limited { .. }
            | RouteError::LimitStore
            | RouteError::Busy(_)
            | RouteError::Full(_)
            | RouteError::ShuttingDown => true,
            _ => false,
        }
    }
}

/// An upstream failure as the host sees it: which upstream, and whether retrying may help.
pub(crate) fn upstream_error_object(err: &UpstreamError) -> ErrorObject {
    let code = match err {
        UpstreamError::Timeout { .. } => codes::UPSTREAM_TIMEOUT,
        UpstreamError::Unavailable { .. }
        | UpstreamError::Closed { .. }
        | UpstreamError::Overloaded { .. }
        | UpstreamError::Cancelled { .. } => codes::UPSTREAM_UNAVAILABLE,
        UpstreamError::AnswerTooLarge { .. } => codes::UPSTREAM_ANSWER_TOO_LARGE,
        UpstreamError::CircuitOpen { .. } => codes::UPSTREAM_CIRCUIT_OPEN,
    };
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_says_whose_fault_it_is_and_whether_to_retry() {
        let upstream = RouteError::Upstream(UpstreamError::Closed {
            upstream: "a".into(),
            reason: "gone".into(),
        });
        let timeout = RouteError::Upstream(UpstreamError::Timeout {
            upstream: "a".into(),
            after: std::time::Duration::from_secs(1),
        });
        let hidden = RouteError::Hidden(Box::new(RouteError::UnknownTool("x".into())));
        for (e, fault, retry) in [
            (&upstream, Fault::Upstream, true),
            (&timeout, Fault::Upstream, false),
            (&RouteError::LimitStore, Fault::Policy, true),
            (&hidden, Fault::Host, false),
            (&RouteError::BadCursor, Fault::Host, false),
            (&RouteError::Busy("b".into()), Fault::Host, true),
            (&RouteError::Full("f".into()), Fault::Manifold, true),
            (&RouteError::ShuttingDown, Fault::Manifold, true),
            (&RouteError::Internal("i".into()), Fault::Manifold, false),
        ] {
            assert_eq!((e.fault(), e.retryable()), (fault, retry), "{e}");
        }
    }

    #[test]
    fn an_open_breaker_has_its_own_code_and_says_when_to_retry() {
        let open = RouteError::Upstream(UpstreamError::CircuitOpen {
            upstream: "a".into(),
            reason: "5 failures in a row, the last: timed out".into(),
            retry_in: Some(std::time::Duration::from_millis(1500)),
        });
        let obj = open.to_error_object();
        assert_eq!(obj.code, codes::UPSTREAM_CIRCUIT_OPEN);
        assert!(
            obj.message.contains("tried again in 1500ms"),
            "{}",
            obj.message
        );
        let data: serde_json::Value =
            serde_json::from_str(obj.data.as_ref().unwrap().get()).unwrap();
        assert_eq!(
            data,
            serde_json::json!({"upstream": "a", "retryable": true, "retryAfterMs": 1500})
        );
        assert_eq!((open.fault(), open.retryable()), (Fault::Upstream, true));
        assert_eq!(open.outcome(), Outcome::Unavailable);
        assert_eq!(open.http_status(), None);
    }

    #[test]
    fn http_refusals_have_their_status_code_and_retry_after() {
        let method = RouteError::MethodNotAllowed {
            method: "PUT".into(),
            path: "/mcp".into(),
        };
        for (e, status, code, retry) in [
            (
                RouteError::Unauthorized("no key".into()),
                401,
                codes::INVALID_REQUEST,
                None,
            ),
            (
                RouteError::Origin("http://x".into()),
                403,
                codes::INVALID_REQUEST,
                None,
            ),
            (
                RouteError::NotFound("n".into()),
                404,
                codes::INVALID_REQUEST,
                None,
            ),
            (
                RouteError::Body("empty body".into()),
                400,
                codes::PARSE_ERROR,
                None,
            ),
            (
                RouteError::BodyTooLarge(10),
                413,
                codes::INVALID_REQUEST,
                None,
            ),
            (
                RouteError::SlowBody(std::time::Duration::from_secs(10)),
                408,
                codes::INVALID_REQUEST,
                None,
            ),
            (method, 405, codes::INVALID_REQUEST, None),
            (
                RouteError::Busy("b".into()),
                429,
                codes::TOO_MANY_REQUESTS,
                Some(1),
            ),
            (
                RouteError::Full("f".into()),
                503,
                codes::INTERNAL_ERROR,
                Some(5),
            ),
            (
                RouteError::ShuttingDown,
                503,
                codes::INTERNAL_ERROR,
                Some(1),
            ),
            (
                RouteError::Internal("i".into()),
                500,
                codes::INTERNAL_ERROR,
                None,
            ),
        ] {
            assert_eq!(e.http_status(), Some(status), "{e}");
            assert_eq!(e.to_error_object().code, code, "{e}");
            assert_eq!(e.retry_after_secs(), retry, "{e}");
        }
        // A JSON-RPC error answering a request travels in a 200.
        assert_eq!(RouteError::UnknownTool("x".into()).http_status(), None);
        assert_eq!(
            RouteError::Unauthorized("bad key".into()).to_string(),
            "authentication required: bad key"
        );
    }
}
