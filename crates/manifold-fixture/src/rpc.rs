//! JSON-RPC framing: error values and the single, locked stdout writer.

use std::io::{Stdout, Write};
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use serde_json::Value;

pub const INVALID_PARAMS: i64 = -32602;

#[derive(Debug, Serialize, PartialEq)]
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
struct Notification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a Value,
}

/// Every message leaves through here, one whole line per lock, so lines written by
/// concurrent call threads never interleave.
pub struct Output {
    stdout: Mutex<Stdout>,
}

impl Output {
    pub fn new() -> Self {
        Self {
            stdout: Mutex::new(std::io::stdout()),
        }
    }

    pub fn reply(&self, id: &Value, reply: Result<Value, RpcError>) {
        match reply {
            Ok(result) => self.result(id, &result),
            Err(err) => self.error(id, &err),
        }
    }

    pub fn result(&self, id: &Value, result: &Value) {
        self.send(&Response {
            jsonrpc: "2.0",
            id,
            result: Some(result),
            error: None,
        });
    }

    pub fn error(&self, id: &Value, error: &RpcError) {
        self.send(&Response {
            jsonrpc: "2.0",
            id,
            result: None,
            error: Some(error),
        });
    }

    pub fn notify(&self, method: &str, params: &Value) {
        self.send(&Notification {
            jsonrpc: "2.0",
            method,
            params,
        });
    }

    fn send<T: Serialize>(&self, msg: &T) {
        // Serialise outside the lock; compact serde_json output never contains a newline.
        match serde_json::to_vec(msg) {
            Ok(bytes) => self.raw(&bytes),
            Err(e) => eprintln!("manifold-fixture: cannot serialise message: {e}"),
        }
    }

    /// Writes one line verbatim (also used for the deliberate garbage lines).
    pub fn raw(&self, line: &[u8]) {
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

    /// Exits while holding the writer lock so no call thread is cut off mid-line.
    pub fn exit(&self, code: i32) -> ! {
        let _guard = self.stdout.lock().unwrap_or_else(PoisonError::into_inner);
        std::process::exit(code)
    }
}
