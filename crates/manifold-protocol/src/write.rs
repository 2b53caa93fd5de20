//! Writers for outgoing messages. Each appends one complete line (ending in `\n`) to a
//! buffer; payloads are copied in as raw JSON text.

use crate::error::ErrorObject;
use crate::object::edits::{self, EditError, Edited, Edits};
use crate::object::write_json_str;

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}`; `id` and `result` are JSON text.
pub fn response(out: &mut Vec<u8>, id: &str, result: &str) {
    out.reserve(id.len() + result.len() + 40);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result.as_bytes());
    out.extend_from_slice(b"}\n");
}

/// The same line as [`response`], as parts to write in order without copying `result`.
pub fn response_parts<'a>(id: &'a str, result: &'a str) -> [&'a [u8]; 5] {
    [
        b"{\"jsonrpc\":\"2.0\",\"id\":",
        id.as_bytes(),
        b",\"result\":",
        result.as_bytes(),
        b"}\n",
    ]
}

/// An error response; `id` is JSON text, `None` writes `null` (the id could not be read).
pub fn error_response(out: &mut Vec<u8>, id: Option<&str>, error: &ErrorObject) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.unwrap_or("null").as_bytes());
    out.extend_from_slice(b",\"error\":");
    error_object(out, error);
    out.extend_from_slice(b"}\n");
}

/// An error response whose error object is already JSON text (forwarded from an upstream).
pub fn raw_error_response(out: &mut Vec<u8>, id: &str, error: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"error\":");
    out.extend_from_slice(error.as_bytes());
    out.extend_from_slice(b"}\n");
}

fn error_object(out: &mut Vec<u8>, error: &ErrorObject) {
    out.extend_from_slice(b"{\"code\":");
    out.extend_from_slice(error.code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    write_json_str(out, &error.message);
    if let Some(data) = &error.data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.get().as_bytes());
    }
    out.push(b'}');
}

/// A request with a numeric id; `params` is JSON text.
pub fn request(out: &mut Vec<u8>, id: u64, method: &str, params: Option<&str>) {
    out.reserve(method.len() + params.map_or(0, str::len) + 60);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write_u64(out, id);
    out.extend_from_slice(b",\"method\":");
    write_json_str(out, method);
    if let Some(params) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(params.as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

/// A request with a numeric id whose params (JSON text, `None` for none) are written with
/// `edits` applied, in one scan of them at most (see [`crate::object::edits`] for the rules):
/// how a forwarded request goes upstream, with the upstream's name for the tool, its own
/// request id for the host's progress token, and the metadata the upstream must hear.
/// On `Err` (params, or an edited `_meta`, that are not an object) `out` is left as it was.
pub fn request_edited<'p>(
    out: &mut Vec<u8>,
    id: u64,
    method: &str,
    params: Option<&'p str>,
    edits: &Edits<'_>,
) -> Result<Edited<'p>, EditError> {
    let start = out.len();
    out.reserve(method.len() + params.map_or(0, str::len) + 160);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write_u64(out, id);
    out.extend_from_slice(b",\"method\":");
    write_json_str(out, method);
    match edits::write_params(out, params, edits) {
        Ok(edited) => {
            out.extend_from_slice(b"}\n");
            Ok(edited)
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// A request whose id is given as JSON text (a string id, for requests to hosts).
pub fn request_with_id(out: &mut Vec<u8>, id: &str, method: &str, params: Option<&str>) {
    out.reserve(id.len() + method.len() + params.map_or(0, str::len) + 60);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"method\":");
    write_json_str(out, method);
    if let Some(params) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(params.as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

/// A notification; `params` is JSON text.
pub fn notification(out: &mut Vec<u8>, method: &str, params: Option<&str>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write_json_str(out, method);
    if let Some(params) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(params.as_bytes());
    }
    out.extend_from_slice(b"}\n");
}

/// Appends the decimal digits of `n` without allocating: an id is written for every
/// forwarded request.
pub fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_parts_make_the_response_line() {
        let mut line = Vec::new();
        response(&mut line, "\"a\"", "{\"x\":1}");
        assert_eq!(response_parts("\"a\"", "{\"x\":1}").concat(), line);
    }
    use crate::codes;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_complete_lines() {
        assert_eq!(
            text(|o| response(o, "\"a\"", "{}")),
            "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n"
        );
        assert_eq!(
            text(|o| request(o, 0, "ping", None)),
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n"
        );
        assert_eq!(
            text(|o| request(o, u64::MAX, "tools/call", Some("{\"name\":\"x\"}"))),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/call\",\"params\":{{\"name\":\"x\"}}}}\n", u64::MAX)
        );
        let err = ErrorObject::new(codes::INVALID_PARAMS, "Unknown tool: \"x\"").with_data(&[1]);
        assert_eq!(
            text(|o| error_response(o, None, &err)),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32602,\"message\":\"Unknown tool: \\\"x\\\"\",\"data\":[1]}}\n"
        );
        assert_eq!(
            text(|o| notification(o, "notifications/tools/list_changed", None)),
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n"
        );
    }

    #[test]
    fn written_messages_decode() {
        let line = text(|o| request(o, 42, "tools/call", Some("{\"name\":\"x\"}")));
        let env = crate::Envelope::decode(line.trim_end().as_bytes()).unwrap();
        assert_eq!(env.kind(), Ok(crate::Kind::Request));
        assert_eq!(env.id.unwrap(), "42");
    }
}
