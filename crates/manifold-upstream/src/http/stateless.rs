//! Streamable HTTP in the stateless era (2026-07-28): no session, no GET stream and no
//! resumption. Each request is a POST of its own carrying the request metadata headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and the `Mcp-Param-*` of a tool's
//! annotated parameters), taken from the message's [`Outbound`] fields; its answer (JSON, or
//! an SSE stream of the request's own notifications and then the answer) ends it, an error
//! may come with a 4xx status, and closing the POST (aborting its task) is how a request is
//! cancelled.

use std::sync::Arc;

use manifold_protocol::Envelope;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::StatusCode;

use super::auth::Sent;
use super::{error_chain, preview, Carrying, Client, VERSION_HEADER};
use crate::error::UpstreamError;
use crate::outbound::{target_member, Outbound};
use crate::param_headers::ToolHeaders;

const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

impl Client {
    /// Sends one stateless-era message as a POST of its own: the request metadata headers, no
    /// session. Its answer (or the error a 4xx status carries) goes to the connection; a
    /// request whose answer does not come is lost (the revision resumes no stream).
    pub(super) async fn post_stateless(self: Arc<Self>, msg: Outbound) {
        let Some(id) = msg.id else {
            tracing::debug!(upstream = %self.key, "notification not sent: the stateless era defines none from client to server over HTTP");
            return;
        };
        let request = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone())
            .headers(metadata_headers(&msg, &self.tool_headers.load()))
            .carrying(&msg);
        let response = match self.send(request).await {
            Ok(r) => r,
            Err(Sent::Http(e)) if e.is_connect() => {
                return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(Sent::Http(e)) => {
                return self.lose(id, &format!("its POST failed: {}", error_chain(&e)));
            }
            Err(Sent::Unauthorized(why)) => return self.unauthorized(Some(id), why),
        };
        let status = response.status();
        if !status.is_success() {
            // A stateless-era server says why with a JSON-RPC error (400 for a version or a
            // header it refuses, 404 for an unknown method): that is the request's answer.
            let text = response.text().await.unwrap_or_default();
            let error = Envelope::decode(text.as_bytes())
                .ok()
                .and_then(|env| env.error.map(str::to_owned));
            return match (error, self.conn()) {
                (Some(error), Some(conn)) => conn.answer_error(id, &error),
                _ => self.lose(
                    id,
                    &format!("it refused the request (HTTP {status}: {})", preview(&text)),
                ),
            };
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            self.read_stream(response, false, Some(id)).await;
        } else if status != StatusCode::ACCEPTED {
            self.read_json(response, false, Some(id)).await;
        }
        // Answered by now, unless the stream ended first (or the answer's id was not this).
        self.lose(id, "its response stream ended before the answer");
    }

    /// Request `id` gets no answer, because of `reason` (no-op if it was answered).
    fn lose(&self, id: u64, reason: &str) {
        if let Some(conn) = self.conn() {
            conn.lost(
                id,
                UpstreamError::Closed {
                    upstream: self.key.to_string(),
                    reason: reason.to_owned(),
                },
            );
        }
    }
}

/// The stateless era's request metadata headers of a message, from what it says of itself:
/// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` (the tool or prompt name, or the
/// resource URI) for the methods that name something, and a tool call's `Mcp-Param-*`
/// (`tools`' annotations; only a call of an annotated tool has its arguments read).
fn metadata_headers(msg: &Outbound, tools: &ToolHeaders) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(method) = msg.method.as_deref() else {
        return headers;
    };
    if let Ok(value) = HeaderValue::from_str(method) {
        headers.insert(HeaderName::from_static(METHOD_HEADER), value);
    }
    if let Some(version) = msg.version.and_then(|v| HeaderValue::from_str(v).ok()) {
        headers.insert(HeaderName::from_static(VERSION_HEADER), version);
    }
    let name = msg
        .name
        .as_deref()
        .filter(|_| target_member(method).is_some());
    if let Some(value) = name.and_then(|n| HeaderValue::from_str(&header_text(n)).ok()) {
        headers.insert(HeaderName::from_static(NAME_HEADER), value);
    }
    if let (Some(tool), "tools/call") = (name, method) {
        for (header, value) in tools.call_headers(tool, &msg.line) {
            headers.insert(header, value);
        }
    }
    headers
}

/// A value as an MCP header carries it: as it is when it is plain visible ASCII (spaces and
/// tabs inside allowed), else (or when it looks like the encoded form) `=?base64?...?=`.
pub(crate) fn header_text(value: &str) -> String {
    let visible = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", base64(value.as_bytes()))
    }
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::tests::{header_set, pairs, NOT_JSON};

    #[test]
    fn stateless_headers_are_exactly_what_the_message_says_of_itself() {
        let none = ToolHeaders::default();
        let call = Outbound::request(3, "tools/call", NOT_JSON)
            .named(Some("get_time".into()))
            .in_revision(Some("2026-07-28"));
        assert_eq!(
            header_set(&metadata_headers(&call, &none)),
            pairs(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "get_time"),
            ])
        );
        let read = Outbound::request(4, "resources/read", NOT_JSON)
            .named(Some("file:///caf\u{e9}.txt".into()));
        assert_eq!(
            header_set(&metadata_headers(&read, &none)),
            pairs(&[
                ("mcp-method", "resources/read"),
                ("mcp-name", "=?base64?ZmlsZTovLy9jYWbDqS50eHQ=?="),
            ])
        );
        // A method that names nothing has no Mcp-Name, whatever it was given.
        let list = Outbound::request(5, "tools/list", NOT_JSON).named(Some("x".into()));
        assert_eq!(
            header_set(&metadata_headers(&list, &none)),
            pairs(&[("mcp-method", "tools/list")])
        );
        assert!(metadata_headers(&Outbound::answer(NOT_JSON), &none).is_empty());
    }

    #[test]
    fn header_values_are_base64_encoded_when_not_plain() {
        assert_eq!(header_text("us-west1"), "us-west1");
        assert_eq!(header_text("a b"), "a b");
        assert_eq!(
            header_text("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(header_text(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_text("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            header_text("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }
}
