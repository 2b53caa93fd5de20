//! Errors a host can receive from routing, and the one function that turns any of them into
//! a JSON-RPC error object.

use manifold_catalog::Collision;
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
    #[error("Resource not found: {0}")]
    UnknownResource(String),
    #[error("Invalid cursor")]
    BadCursor,
    #[error("message of {len} bytes is over the limit of {max} bytes")]
    Oversize { len: usize, max: usize },
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
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
            | RouteError::BadCursor => codes::INVALID_PARAMS,
            RouteError::UnknownResource(_) => codes::RESOURCE_NOT_FOUND,
            RouteError::Upstream(e) => return manifold_upstream::error_object(e),
        };
        let obj = ErrorObject::new(code, self.to_string());
        match self {
            RouteError::UnknownResource(uri) => obj.with_data(&serde_json::json!({ "uri": uri })),
            _ => obj,
        }
    }
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
