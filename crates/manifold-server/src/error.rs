//! Errors a host can receive from routing, and the one function that turns any of them into
//! a JSON-RPC error object.

use manifold_catalog::Collision;
use manifold_policy::{Refusal, RefusalKind};
use manifold_protocol::{codes, ErrorObject, MessageError};
use manifold_telemetry::Outcome;
use manifold_upstream::UpstreamError;

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
            RouteError::Upstream(e) => return manifold_upstream::error_object(e),
            RouteError::Hidden(inner) => return inner.to_error_object(),
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
        | UpstreamError::Overloaded { .. } => Outcome::Unavailable,
        UpstreamError::AnswerTooLarge { .. } => Outcome::ProtocolError,
    }
}
