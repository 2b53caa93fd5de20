//! JSON-RPC error codes used by MCP and the error object written on the wire.

use serde::Serialize;
use serde_json::value::RawValue;

/// The JSON-RPC and MCP error codes Manifold sends or maps, in one place.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP: resource not found (legacy era).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// Manifold: the upstream that owns the request is unavailable, failed or timed out.
    /// Server-defined range (-32000..-32099) per JSON-RPC.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32010;
    pub const UPSTREAM_TIMEOUT: i64 = -32011;
    /// Manifold: the upstream's answer was over its size limit and was dropped.
    pub const UPSTREAM_ANSWER_TOO_LARGE: i64 = -32012;
    /// Manifold: a session has as many requests in progress as it may have.
    pub const TOO_MANY_REQUESTS: i64 = -32013;
    /// A tool call refused by a rate limit (`data.retryAfterMs` says when to retry).
    pub const RATE_LIMITED: i64 = -32020;
    /// A tool call refused by a quota (`data.retryAfterMs`: until the window ends).
    pub const QUOTA_EXCEEDED: i64 = -32021;
    /// A tool call refused because its limits could not be checked (the shared store is
    /// unreachable and `limits.fail_open` is false).
    pub const LIMIT_STORE_UNAVAILABLE: i64 = -32022;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<RawValue>>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data`, serialized; a value that cannot be serialized is left out.
    pub fn with_data(mut self, data: &impl Serialize) -> Self {
        self.data = serde_json::value::to_raw_value(data).ok();
        self
    }
}
