//! Envelope decoding: one pass over a line that borrows the routing fields and keeps every
//! payload as a slice of the input.
//!
//! The common case (an object whose JSON-RPC keys hold no escapes and appear once) is read by
//! the scanner in [`crate::scan`]. Anything else goes through `serde_json`, which gives the
//! same fields and its own error messages, so the two paths agree on every input.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::scan;

/// The top level of a JSON-RPC message. Fields are borrowed from the input line; `id`,
/// `params`, `result` and `error` are JSON text exactly as written. Members other than the
/// five JSON-RPC ones are ignored (the spec allows no others).
#[derive(Debug, Default)]
pub struct Envelope<'a> {
    pub jsonrpc: Option<Cow<'a, str>>,
    /// Present even when it is `null`, so an explicit null id stays distinguishable.
    pub id: Option<&'a str>,
    pub method: Option<Cow<'a, str>>,
    /// `None` when absent or `null`, as for `result` and `error`.
    pub params: Option<&'a str>,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// The same fields, for `serde_json` (the path for unusual but valid messages, and for
/// precise error messages).
#[derive(Deserialize)]
struct SerdeEnvelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
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
        if let Some(env) = std::str::from_utf8(line).ok().and_then(Self::scan) {
            return Ok(env);
        }
        Self::decode_with_serde(line)
    }

    /// The scanner's path: `None` sends the line to `serde_json` (invalid JSON, not an object,
    /// escaped keys, a duplicate member, a `jsonrpc` or `method` that is not a string).
    fn scan(text: &'a str) -> Option<Self> {
        let mut env = Envelope::default();
        let mut usual = true;
        let mut seen = 0u8;
        let scanned = scan::for_each_member(text, |m| {
            let bit = match m.key {
                _ if m.key_escaped => {
                    usual = false;
                    return;
                }
                "jsonrpc" => 1,
                "id" => 2,
                "method" => 4,
                "params" => 8,
                "result" => 16,
                "error" => 32,
                _ => return,
            };
            usual &= seen & bit == 0;
            seen |= bit;
            let non_null = (m.value != "null").then_some(m.value);
            match bit {
                1 => {
                    env.jsonrpc = scan::string_value(m.value);
                    usual &= env.jsonrpc.is_some();
                }
                2 => env.id = Some(m.value),
                4 => {
                    env.method = scan::string_value(m.value);
                    usual &= env.method.is_some();
                }
                8 => env.params = non_null,
                16 => env.result = non_null,
                _ => env.error = non_null,
            }
        });
        (scanned.is_ok() && usual).then_some(env)
    }

    fn decode_with_serde(line: &'a [u8]) -> Result<Self, MessageError> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            // Still report malformed JSON as a parse error, as the spec orders the checks.
            return match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                Ok(_) => Err(MessageError::Batch),
                Err(e) => Err(MessageError::Parse(e.to_string())),
            };
        }
        match serde_json::from_slice::<SerdeEnvelope<'a>>(line) {
            Ok(env) => Ok(Envelope {
                jsonrpc: env.jsonrpc,
                id: env.id.map(RawValue::get),
                method: env.method,
                params: env.params.map(RawValue::get),
                result: env.result.map(RawValue::get),
                error: env.error.map(RawValue::get),
            }),
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
        let id = self.id.filter(|id| *id != "null");
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
            Some(raw) => serde_json::from_str(raw)
                .map_err(|_| MessageError::Invalid("\"params\" must be an object")),
        }
    }
}

/// MCP ids are strings or integers; `null`, floats, objects and arrays are refused. `id` is
/// the id's JSON text.
pub fn is_valid_id(s: &str) -> bool {
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
