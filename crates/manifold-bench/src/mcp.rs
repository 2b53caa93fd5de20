//! The MCP messages the load generator sends, and the little it must read from answers: the
//! id, and whether it is a result. Request lines are pre-split around the id so a call costs
//! two copies and an integer format, the same for every target.

use anyhow::{bail, Result};
use serde_json::Value;

pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The stateless revision: no `initialize`, no session; each request says in `params._meta`
/// which revision it speaks and what its client can do, and over Streamable HTTP its headers
/// repeat the revision, the method and the tool's name.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// What every echo call sends, and gets back as its text content.
pub const ECHO_TEXT: &str = "the quick brown fox jumps over the lazy dog";

/// Every request starts like this, and so does every answer Manifold and the fixture write
/// (the fast path of `classify`).
const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;

/// A request with everything but its id written out.
#[derive(Debug, Clone)]
pub struct RequestLine {
    /// The rest of the line after the id, ending in `\n`; or, when `again` is set, up to
    /// where the id is written a second time.
    tail: String,
    /// What follows the id's second appearance (inside the arguments), ending in `\n`.
    again: Option<String>,
    /// An answer shorter than this is wrong (e.g. a 1 MB result that is not 1 MB).
    pub min_answer: usize,
    /// The HTTP headers that name the request's method and, for a call, its tool
    /// (`Mcp-Method`, `Mcp-Name`), each ending in CRLF: only a stateless host sends them.
    pub headers: String,
}

impl RequestLine {
    pub fn new(method: &str, params: &Value) -> Self {
        let tail = format!(
            ",\"method\":{},\"params\":{params}}}\n",
            Value::from(method)
        );
        Self {
            tail,
            again: None,
            min_answer: 0,
            headers: naming_headers(method, params),
        }
    }

    pub fn tools_call(name: &str, arguments: &Value) -> Self {
        Self::new(
            "tools/call",
            &serde_json::json!({ "name": name, "arguments": arguments }),
        )
    }

    /// A small `tools/call` of an echo-like tool: about 150 bytes on the wire.
    pub fn echo(name: &str) -> Self {
        Self::tools_call(name, &serde_json::json!({ "text": ECHO_TEXT }))
    }

    /// The `echo` call as a stateless host makes it: the same arguments, and `params._meta`
    /// naming the revision and the client's capabilities (none), which a stateless request
    /// must carry in place of `initialize`.
    pub fn echo_stateless(name: &str) -> Self {
        Self::new(
            "tools/call",
            &serde_json::json!({
                "name": name,
                "arguments": { "text": ECHO_TEXT },
                "_meta": stateless_meta(),
            }),
        )
    }

    /// The `echo` call with a second argument, `n`, set to the request's id: the same answer
    /// as `echo`, but arguments that differ on every call (a result cache misses each time).
    pub fn echo_numbered(name: &str) -> Self {
        let tail = format!(
            ",\"method\":\"tools/call\",\"params\":{{\"name\":{},\"arguments\":{{\"text\":{},\"n\":",
            Value::from(name),
            Value::from(ECHO_TEXT)
        );
        Self {
            tail,
            again: Some("}}}\n".into()),
            min_answer: 0,
            headers: naming_headers("tools/call", &serde_json::json!({ "name": name })),
        }
    }

    pub fn write(&self, id: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(HEAD);
        write_u64(out, id);
        out.extend_from_slice(self.tail.as_bytes());
        if let Some(again) = &self.again {
            write_u64(out, id);
            out.extend_from_slice(again.as_bytes());
        }
    }

    /// Bytes of the request line for `id`.
    pub fn len_with(&self, id: u64) -> usize {
        let digits = id.to_string().len();
        let again = self.again.as_ref().map_or(0, |a| digits + a.len());
        HEAD.len() + digits + self.tail.len() + again
    }
}

/// `params._meta` of a stateless request: the revision, and a client that declares no
/// capability.
pub fn stateless_meta() -> Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `Mcp-Method`, and `Mcp-Name` for the methods that name something (the tool or prompt, or
/// the resource's URI), as HTTP header lines.
fn naming_headers(method: &str, params: &Value) -> String {
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        _ => None,
    };
    let mut headers = format!("Mcp-Method: {method}\r\n");
    if let Some(name) = named.and_then(Value::as_str) {
        headers.push_str("Mcp-Name: ");
        headers.push_str(name);
        headers.push_str("\r\n");
    }
    headers
}

/// Decimal digits of `n` without allocating: one per request, on the timed path.
pub fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// What one line from the server is.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// An answer to request `id`; `ok` is false for a JSON-RPC error.
    Answer {
        id: u64,
        ok: bool,
    },
    Notification,
    /// A request from the server to the host (e.g. ping); `id` is its raw JSON text.
    ServerRequest {
        id: String,
        method: String,
    },
}

/// Classifies a line: a prefix check for the usual shape, a full parse otherwise.
pub fn classify(line: &[u8]) -> Result<Incoming> {
    if let Some(rest) = line.strip_prefix(HEAD) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let after = &rest[digits..];
        let id = std::str::from_utf8(&rest[..digits])
            .ok()
            .and_then(|d| d.parse().ok());
        if let (Some(id), true) = (id, after.starts_with(b",\"result\":")) {
            return Ok(Incoming::Answer { id, ok: true });
        }
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => bail!("not JSON ({e}): {}", excerpt(line)),
    };
    let method = value.get("method").and_then(Value::as_str);
    match (method, value.get("id")) {
        (Some(_), None) => Ok(Incoming::Notification),
        (Some(m), Some(id)) => Ok(Incoming::ServerRequest {
            id: id.to_string(),
            method: m.into(),
        }),
        (None, Some(id)) => match id.as_u64() {
            Some(id) => Ok(Incoming::Answer {
                id,
                ok: value.get("result").is_some(),
            }),
            None => bail!(
                "an answer with an id this tool never sent: {}",
                excerpt(line)
            ),
        },
        (None, None) => bail!("neither a request nor an answer: {}", excerpt(line)),
    }
}

/// The start of a line, for error messages (a 1 MB line must not flood the terminal).
pub fn excerpt(line: &[u8]) -> String {
    let cut = line.len().min(300);
    let more = if line.len() > cut { "..." } else { "" };
    format!("{}{more}", String::from_utf8_lossy(&line[..cut]))
}

/// The initialize request (id 0) and the initialized notification, as one send.
pub fn handshake() -> Vec<u8> {
    let params = serde_json::json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": { "name": "manifold-load", "version": env!("CARGO_PKG_VERSION") },
    });
    let mut out = Vec::new();
    RequestLine::new("initialize", &params).write(0, &mut out);
    out
}

pub const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_valid_json_of_the_expected_size() {
        let line = RequestLine::echo("alpha__echo");
        let mut out = Vec::new();
        line.write(12345, &mut out);
        assert_eq!(out.len(), line.len_with(12345));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 12345);
        assert_eq!(v["params"]["name"], "alpha__echo");
        assert!((120..=180).contains(&out.len()), "{}", out.len());
    }

    #[test]
    fn stateless_lines_carry_meta_and_name_their_method_and_tool() {
        let line = RequestLine::echo_stateless("alpha__echo");
        let mut out = Vec::new();
        line.write(3, &mut out);
        assert_eq!(out.len(), line.len_with(3));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["params"]["name"], "alpha__echo");
        assert_eq!(v["params"]["arguments"]["text"], ECHO_TEXT);
        let meta = &v["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            STATELESS_VERSION
        );
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
        assert_eq!(
            line.headers,
            "Mcp-Method: tools/call\r\nMcp-Name: alpha__echo\r\n"
        );
        // The session era's call, without `_meta`, is shorter by a few dozen bytes.
        let plain = RequestLine::echo("alpha__echo").len_with(3);
        assert!((60..=140).contains(&(line.len_with(3) - plain)), "{plain}");
        let list = RequestLine::new("tools/list", &serde_json::json!({}));
        assert_eq!(list.headers, "Mcp-Method: tools/list\r\n");
        let numbered = RequestLine::echo_numbered("beta__echo");
        assert!(numbered.headers.ends_with("Mcp-Name: beta__echo\r\n"));
    }

    #[test]
    fn numbered_lines_carry_the_id_in_their_arguments() {
        let line = RequestLine::echo_numbered("alpha__echo");
        let mut out = Vec::new();
        line.write(907, &mut out);
        assert_eq!(out.len(), line.len_with(907));
        assert_eq!(out.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 907);
        assert_eq!(v["params"]["name"], "alpha__echo");
        assert_eq!(v["params"]["arguments"]["n"], 907);
        assert_eq!(v["params"]["arguments"]["text"], ECHO_TEXT);
    }

    #[test]
    fn classifies_answers_notifications_and_requests() {
        let ok = br#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        assert_eq!(classify(ok).unwrap(), Incoming::Answer { id: 7, ok: true });
        let err = br#"{"jsonrpc":"2.0","id":8,"error":{"code":1,"message":"x"}}"#;
        assert_eq!(
            classify(err).unwrap(),
            Incoming::Answer { id: 8, ok: false }
        );
        let reordered = br#"{"result":{},"id":9,"jsonrpc":"2.0"}"#;
        assert_eq!(
            classify(reordered).unwrap(),
            Incoming::Answer { id: 9, ok: true }
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#;
        assert_eq!(classify(note).unwrap(), Incoming::Notification);
        let ping = br#"{"jsonrpc":"2.0","id":"s1","method":"ping"}"#;
        let want = Incoming::ServerRequest {
            id: "\"s1\"".into(),
            method: "ping".into(),
        };
        assert_eq!(classify(ping).unwrap(), want);
        assert!(classify(b"nope").is_err());
    }
}
