//! Envelope decoding: one pass over a line that borrows the routing fields and keeps every
//! payload as a `&RawValue` slice of the input.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The top level of a JSON-RPC message. Fields are borrowed from the input line; anything
/// other than the five JSON-RPC members is ignored (the spec allows no others).
#[derive(Debug, Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow, default)]
    pub jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

/// What a decoded message is, by the JSON-RPC rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// Why a line is not a usable JSON-RPC message; each maps to one JSON-RPC error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not JSON at all (-32700).
    #[error("parse error: {0}")]
    Parse(String),
    /// JSON, but not a valid JSON-RPC 2.0 message (-32600).
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    /// A JSON array: batches were removed from MCP in 2025-06-18 and Manifold refuses them.
    #[error("invalid request: JSON-RPC batches are not supported")]
    Batch,
}

/// Keeps an explicit `"id": null` distinguishable from an absent id.
fn present<'de, D>(de: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&'de RawValue>::deserialize(de).map(Some)
}

impl<'a> Envelope<'a> {
    /// Decodes one line. Leading whitespace is allowed; a top-level array is a batch.
    pub fn decode(line: &'a [u8]) -> Result<Self, MessageError> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            // Still report malformed JSON as a parse error, as the spec orders the checks.
            return match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                Ok(_) => Err(MessageError::Batch),
                Err(e) => Err(MessageError::Parse(e.to_string())),
            };
        }
        match serde_json::from_slice::<Envelope<'a>>(line) {
            Ok(env) => Ok(env),
            Err(e) if e.is_data() => Err(MessageError::Invalid("not a JSON-RPC message object")),
            Err(e) => Err(MessageError::Parse(e.to_string())),
        }
    }

    /// Classifies the message, checking the JSON-RPC rules that matter for routing.
    pub fn kind(&self) -> Result<Kind, MessageError> {
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err(MessageError::Invalid("\"jsonrpc\" must be \"2.0\""));
        }
        // A null id is only legal on an error answering a message whose id could not be read.
        let id = self.id.filter(|id| id.get() != "null");
        if self.id.is_some() && id.is_none() && self.error.is_none() {
            return Err(MessageError::Invalid(
                "\"id\" must be a string or an integer",
            ));
        }
        if let Some(id) = id {
            if !is_valid_id(id) {
                return Err(MessageError::Invalid(
                    "\"id\" must be a string or an integer",
                ));
            }
        }
        match (
            &self.method,
            id,
            self.result.is_some() || self.error.is_some(),
        ) {
            (Some(_), Some(_), false) => Ok(Kind::Request),
            (Some(_), None, false) => Ok(Kind::Notification),
            (None, Some(_), true) => Ok(Kind::Response),
            (None, None, true) => Ok(Kind::Response),
            _ => Err(MessageError::Invalid(
                "not a request, notification or response",
            )),
        }
    }

    /// The routing fields of `params`, or empty ones when there are no params.
    pub fn routing_params(&self) -> Result<Params<'a>, MessageError> {
        match self.params {
            None => Ok(Params::default()),
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|_| MessageError::Invalid("\"params\" must be an object")),
        }
    }
}

/// MCP ids are strings or integers; `null`, floats, objects and arrays are refused.
pub fn is_valid_id(id: &RawValue) -> bool {
    let s = id.get();
    match s.as_bytes().first() {
        Some(b'"') => true,
        Some(b'-' | b'0'..=b'9') => s.bytes().all(|b| b == b'-' || b.is_ascii_digit()),
        _ => false,
    }
}

/// The `params` fields that routing reads. Everything else stays in the raw params.
#[derive(Debug, Default, Deserialize)]
pub struct Params<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub uri: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub cursor: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "ref")]
    pub reference: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    pub meta: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "protocolVersion")]
    pub protocol_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "requestId")]
    pub request_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "progressToken")]
    pub progress_token: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests;
