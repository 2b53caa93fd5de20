//! An HTTP answer as a `CallToolResult`.

use base64::Engine;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::convert::Operation;

/// The default cap on an answer's body, in bytes.
pub const DEFAULT_RESPONSE_CAP: usize = 1024 * 1024;

/// How much of an error answer's body is shown.
const ERROR_BODY: usize = 4 * 1024;

/// The URI of the embedded resource that carries a binary answer.
const BINARY_URI: &str = "openapi:response";

impl Operation {
    /// The `CallToolResult` for an answer, as JSON text: JSON as `structuredContent` (wrapped
    /// as `{ "result": ... }` when not an object) plus its text; text as text; images and audio
    /// as such; other bytes as an embedded resource; 4xx/5xx, HTML where JSON was promised, and
    /// bodies over `cap` as errors or cut with a note saying so.
    pub fn map_response(
        &self,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
        cap: usize,
    ) -> String {
        let media = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let json = media == "application/json" || media.ends_with("+json");
        if json && status < 400 && !body.is_empty() && body.len() <= cap {
            return json_result(body);
        }
        self.map_other(status, &media, body, cap).to_string()
    }

    /// Every answer but a JSON result (see [`json_result`]); `media` is the content type's
    /// essence, lowercased.
    fn map_other(&self, status: u16, media: &str, body: &[u8], cap: usize) -> Value {
        if status >= 400 {
            let text = format!(
                "HTTP {status} {}\n{}",
                reason(status),
                cut_text(body, ERROR_BODY)
            );
            return error(text);
        }
        if self.promises_json && media == "text/html" {
            let text = format!(
                "the service answered HTML where JSON was promised (HTTP {status}):\n{}",
                cut_text(body, ERROR_BODY)
            );
            return error(text);
        }
        if body.is_empty() {
            return text_result(format!("HTTP {status} {}", reason(status)));
        }
        if body.len() > cap && !is_binary(media) {
            return over_cap(media, body, cap);
        }
        if media.starts_with("text/")
            || media.ends_with("+xml")
            || media == "application/xml"
            || media.is_empty()
        {
            return text_result(String::from_utf8_lossy(body).into_owned());
        }
        if body.len() > cap {
            return error(format!(
                "the answer ({media}) is longer than the cap of {cap} bytes"
            ));
        }
        binary_result(media, body)
    }
}

fn is_binary(media: &str) -> bool {
    !(media.is_empty()
        || media.starts_with("text/")
        || media.contains("json")
        || media.contains("xml"))
}

/// Text cut at a character boundary within `max` bytes.
fn cut_text(body: &[u8], max: usize) -> String {
    let text = prefix(body, max);
    if body.len() > max {
        format!("{text}\n[cut: {} of {} bytes shown]", max, body.len())
    } else {
        text
    }
}

/// The first `max` bytes of `body` as text, without a character the cut split.
fn prefix(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(max)]);
    text.trim_end_matches('\u{fffd}').to_string()
}

/// A JSON answer cut could not be parsed, and would not match the output schema: an error.
/// Text is cut with a note and is still a result. The note gives no total: a caller reads at
/// most one byte past the cap, so the answer's full length is not known.
fn over_cap(media: &str, body: &[u8], cap: usize) -> Value {
    let note = format!("the answer is longer than the cap of {cap} bytes: cut to it");
    let shown = prefix(body, cap);
    if media.contains("json") {
        return error(format!("{note}\n{shown}"));
    }
    json!({"content": [{"type": "text", "text": format!("{shown}\n[{note}]")}]})
}

/// A JSON answer's result, written around the answer's own text: it is checked to be JSON
/// but never built as a tree (a tree costs tens of nanoseconds a byte, the check a few).
fn json_result(body: &[u8]) -> String {
    let raw = match serde_json::from_slice::<&RawValue>(body) {
        Ok(raw) => raw.get(),
        Err(e) => {
            let text = format!(
                "the service answered invalid JSON ({e}):\n{}",
                cut_text(body, ERROR_BODY)
            );
            return error(text).to_string();
        }
    };
    // The answer parsed, so it is UTF-8 and `raw` is the value without the space around it.
    let text = serde_json::to_string(raw).unwrap_or_default();
    let mut out = String::with_capacity(text.len() + raw.len() + 80);
    out.push_str(r#"{"content":[{"type":"text","text":"#);
    out.push_str(&text);
    out.push_str(r#"}],"structuredContent":"#);
    if raw.starts_with('{') {
        out.push_str(raw);
    } else {
        out.push_str(r#"{"result":"#);
        out.push_str(raw);
        out.push('}');
    }
    out.push('}');
    out
}

fn binary_result(media: &str, body: &[u8]) -> Value {
    let data = base64::engine::general_purpose::STANDARD.encode(body);
    let content = if media.starts_with("image/") {
        json!({"type": "image", "data": data, "mimeType": media})
    } else if media.starts_with("audio/") {
        json!({"type": "audio", "data": data, "mimeType": media})
    } else {
        let mime = if media.is_empty() {
            "application/octet-stream"
        } else {
            media
        };
        json!({"type": "resource", "resource": {"uri": BINARY_URI, "mimeType": mime, "blob": data}})
    };
    json!({"content": [content]})
}

fn text_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn error(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
