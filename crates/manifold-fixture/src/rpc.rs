//! JSON-RPC framing: error values, incoming messages, outgoing messages as bytes, and the
//! single, locked stdout writer of stdio mode.

use std::io::{Stdout, Write};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::exchange::{Sink, Transport};

pub const INVALID_PARAMS: i64 = -32602;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(-32601, format!("Method not found: {method}"))
    }

    /// The error for bytes that are not a JSON-RPC message: valid JSON of the wrong shape is
    /// an invalid request, anything else a parse error.
    pub fn unreadable(e: &serde_json::Error) -> Self {
        if e.is_data() {
            Self::new(-32600, format!("Invalid request: {e}"))
        } else {
            Self::new(-32700, format!("Parse error: {e}"))
        }
    }
}

/// One incoming message. Unknown members (`jsonrpc`, ...) are ignored on purpose: the
/// fixture is lenient about what it accepts and strict about what it sends.
#[derive(Deserialize)]
pub struct Incoming {
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Value,
    /// Set on the client's answers to the fixture's own requests (roots, sampling, ...),
    /// kept as the client wrote it so that a tool can hand it back byte for byte.
    #[serde(default)]
    pub result: Option<Box<RawValue>>,
    #[serde(default)]
    pub error: Option<Value>,
}

impl Incoming {
    pub fn parse(bytes: &[u8]) -> Result<Self, RpcError> {
        serde_json::from_slice(bytes).map_err(|e| RpcError::unreadable(&e))
    }
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

#[derive(Serialize)]
struct Message<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    method: &'a str,
    params: &'a Value,
}

/// A response as compact JSON (which never contains a newline).
pub fn response(id: &Value, reply: &Result<Value, RpcError>) -> Vec<u8> {
    let (result, error) = match reply {
        Ok(result) => (Some(result), None),
        Err(error) => (None, Some(error)),
    };
    encode(&Response {
        jsonrpc: "2.0",
        id,
        result,
        error,
    })
}

pub fn notification(method: &str, params: &Value) -> Vec<u8> {
    encode(&Message {
        jsonrpc: "2.0",
        id: None,
        method,
        params,
    })
}

/// A request from the fixture to its client (sampling, elicitation).
pub fn request(id: &Value, method: &str, params: &Value) -> Vec<u8> {
    encode(&Message {
        jsonrpc: "2.0",
        id: Some(id),
        method,
        params,
    })
}

fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).unwrap_or_else(|e| {
        // Values built from serde_json types always serialise; say so loudly if not.
        eprintln!("manifold-fixture: cannot serialise message: {e}");
        Vec::new()
    })
}

/// stdio mode's output: every message leaves through here, one whole line per lock, so
/// lines written by concurrent call threads never interleave.
pub struct Output {
    stdout: Mutex<Stdout>,
}

impl Output {
    pub fn new() -> Self {
        Self {
            stdout: Mutex::new(std::io::stdout()),
        }
    }

    /// Writes one line verbatim (also used for the deliberate garbage lines).
    pub fn raw(&self, line: &[u8]) {
        if line.is_empty() {
            return;
        }
        let mut out = self.stdout.lock().unwrap_or_else(PoisonError::into_inner);
        let written = out
            .write_all(line)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            // The client is gone; there is nobody left to serve.
            eprintln!("manifold-fixture: stdout write failed: {e}");
            std::process::exit(0);
        }
    }
}

/// Over stdio everything about a request, before and after its answer, is one more line.
impl Sink for Output {
    fn send(&self, line: Vec<u8>) {
        self.raw(&line);
    }

    fn answer(&self, line: Vec<u8>) {
        self.raw(&line);
    }

    fn client(&self) -> &str {
        ""
    }
}

impl Transport for Output {
    fn broadcast(&self, line: &[u8]) {
        self.raw(line);
    }

    /// stdio has one client, always there.
    fn send_to(&self, _client: &str, line: &[u8]) -> bool {
        self.raw(line);
        true
    }

    /// Exits while holding the writer lock so no call thread is cut off mid-line.
    fn exit(&self, code: i32) -> ! {
        let _guard = self.stdout.lock().unwrap_or_else(PoisonError::into_inner);
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn messages_are_single_lines() {
        let ok = response(&json!(1), &Ok(json!({ "text": "a\nb" })));
        assert!(!ok.contains(&b'\n'));
        assert_eq!(parsed(&ok)["result"]["text"], "a\nb");
        let err = response(&json!("x"), &Err(RpcError::invalid_params("bad")));
        assert_eq!(
            parsed(&err),
            json!({ "jsonrpc": "2.0", "id": "x", "error": { "code": -32602, "message": "bad" } })
        );
        let note = parsed(&notification("n", &json!({})));
        assert!(note.get("id").is_none());
        assert_eq!(parsed(&request(&json!(7), "m", &json!({})))["id"], 7);
    }

    #[test]
    fn unreadable_input_is_classified() {
        assert_eq!(Incoming::parse(b"{").err().unwrap().code, -32700);
        assert_eq!(Incoming::parse(b"\"text\"").err().unwrap().code, -32600);
        let answer = Incoming::parse(br#"{"id":3,"result":{"b": 1,"a":2}}"#).unwrap();
        assert!(answer.method.is_none());
        assert_eq!(answer.result.unwrap().get(), r#"{"b": 1,"a":2}"#);
    }
}
