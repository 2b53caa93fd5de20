//! Envelope decoding: one pass over a line that borrows the routing fields and keeps every
//! payload as a slice of the input.
//!
//! Two strengths: [`Envelope::decode_host`] holds a host's message to I-JSON (see
//! [`crate::scan`]) so that whatever Manifold routes by is exactly what the upstream will read;
//! [`Envelope::decode`] checks only the grammar, for upstream traffic (large results pass
//! through without the extra checks).

use std::borrow::Cow;
use std::ops::Range;

use crate::scan::{self, Violation};

/// The top level of a JSON-RPC message. Fields are borrowed from the input line; `id`,
/// `params`, `result` and `error` are JSON text exactly as written. Members other than the
/// five JSON-RPC ones are ignored (the spec allows no others).
#[derive(Debug, Default)]
pub struct Envelope<'a> {
    /// `Some` only when it is a string.
    pub jsonrpc: Option<Cow<'a, str>>,
    /// Present even when it is `null`, so an explicit null id stays distinguishable.
    pub id: Option<&'a str>,
    /// `Some` only when it is a string.
    pub method: Option<Cow<'a, str>>,
    /// `None` when absent or `null`, as for `result` and `error`.
    pub params: Option<&'a str>,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
    /// A JSON-RPC member of the wrong type, remembered so that [`Envelope::kind`] says so
    /// while the id stays readable for the answer.
    wrong_type: Option<&'static str>,
    /// The first I-JSON breach ([`Envelope::decode_host`] only), and whether it lies inside
    /// `params`.
    violation: Option<(Violation, Place)>,
}

/// Where in a message an I-JSON breach lies: it decides the error code and whether the
/// message's id can be trusted in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Params,
    Id,
    Elsewhere,
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
    Invalid(Cow<'static, str>),
    /// A JSON array: a batch, accepted only where the negotiated revision allows it.
    #[error("invalid request: JSON-RPC batches are not supported")]
    Batch,
}

impl MessageError {
    fn invalid(problem: &'static str) -> Self {
        MessageError::Invalid(Cow::Borrowed(problem))
    }
}

impl<'a> Envelope<'a> {
    /// Decodes one line from an upstream: the grammar is checked, nothing more. Leading
    /// whitespace is allowed; a top-level array is a batch.
    pub fn decode(line: &'a [u8]) -> Result<Self, MessageError> {
        Self::decode_as::<false>(line)
    }

    /// Decodes one line from a host, holding it to I-JSON as well. A breach does not fail the
    /// decode (the id is still wanted for the answer): [`Envelope::violation`] reports it.
    pub fn decode_host(line: &'a [u8]) -> Result<Self, MessageError> {
        Self::decode_as::<true>(line)
    }

    fn decode_as<const STRICT: bool>(line: &'a [u8]) -> Result<Self, MessageError> {
        let text = std::str::from_utf8(line).map_err(|e| {
            MessageError::Parse(format!("invalid UTF-8 at byte {}", e.valid_up_to()))
        })?;
        match text.trim_start().as_bytes().first() {
            Some(b'{') => {}
            // Malformed JSON is still a parse error, as the spec orders the checks.
            Some(b'[') => return Err(syntax(scan::validate(text)).unwrap_or(MessageError::Batch)),
            _ => {
                return Err(syntax(scan::validate(text))
                    .unwrap_or_else(|| MessageError::invalid("not a JSON-RPC message object")))
            }
        }
        let mut env = Envelope::default();
        let mut seen = 0u8;
        let mut twice = false;
        let mut ranges: [Option<Range<usize>>; 2] = [None, None];
        let base = text.as_ptr() as usize;
        let member = |m: scan::Member<'a>| {
            let key = if m.key_escaped {
                m.key_text().unwrap_or(Cow::Borrowed(m.key))
            } else {
                Cow::Borrowed(m.key)
            };
            let bit = match key.as_ref() {
                "jsonrpc" => 1,
                "id" => 2,
                "method" => 4,
                "params" => 8,
                "result" => 16,
                "error" => 32,
                _ => return,
            };
            twice |= seen & bit != 0;
            seen |= bit;
            let non_null = (m.value != "null").then_some(m.value);
            let at = m.value.as_ptr() as usize - base;
            match bit {
                1 => {
                    env.jsonrpc = scan::string_value(m.value);
                    if env.jsonrpc.is_none() {
                        env.wrong_type = Some("\"jsonrpc\" must be \"2.0\"");
                    }
                }
                2 => {
                    env.id = Some(m.value);
                    ranges[1] = Some(at..at + m.value.len());
                }
                4 => {
                    env.method = scan::string_value(m.value);
                    if env.method.is_none() && m.value != "null" {
                        env.wrong_type = Some("\"method\" must be a string");
                    }
                }
                8 => {
                    env.params = non_null;
                    ranges[0] = Some(at..at + m.value.len());
                }
                16 => env.result = non_null,
                _ => env.error = non_null,
            }
        };
        let violation = if STRICT {
            scan::for_each_member_strict(text, member)
        } else {
            scan::for_each_member(text, member).map(|()| None)
        }
        .map_err(|e| MessageError::Parse(e.to_string()))?;
        if twice {
            return Err(MessageError::invalid("a JSON-RPC member appears twice"));
        }
        env.violation = violation.map(|v| {
            let within = |r: &Option<Range<usize>>| r.as_ref().is_some_and(|r| r.contains(&v.at));
            let place = if within(&ranges[0]) {
                Place::Params
            } else if within(&ranges[1]) {
                Place::Id
            } else {
                Place::Elsewhere
            };
            (v, place)
        });
        Ok(env)
    }

    /// The first I-JSON breach of a host message, and where it lies.
    pub fn violation(&self) -> Option<&(Violation, Place)> {
        self.violation.as_ref()
    }

    /// Classifies the message, checking the JSON-RPC rules that matter for routing.
    pub fn kind(&self) -> Result<Kind, MessageError> {
        if let Some(problem) = self.wrong_type {
            return Err(MessageError::invalid(problem));
        }
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err(MessageError::invalid("\"jsonrpc\" must be \"2.0\""));
        }
        // A null id is only legal on an error answering a message whose id could not be read.
        let id = self.id.filter(|id| *id != "null");
        if self.id.is_some() && id.is_none() && self.error.is_none() {
            return Err(MessageError::invalid(
                "\"id\" must be a string or an integer",
            ));
        }
        if id.is_some_and(|id| !is_valid_id(id)) {
            return Err(MessageError::invalid(
                "\"id\" must be a string or an integer",
            ));
        }
        match (
            &self.method,
            id,
            self.result.is_some() || self.error.is_some(),
        ) {
            (Some(_), Some(_), false) => Ok(Kind::Request),
            (Some(_), None, false) => Ok(Kind::Notification),
            (None, _, true) => Ok(Kind::Response),
            _ => Err(MessageError::invalid(
                "not a request, notification or response",
            )),
        }
    }

    /// The routing fields of `params`, or empty ones when there are no params.
    pub fn routing_params(&self) -> Result<Params<'a>, ParamsError> {
        match self.params {
            None => Ok(Params::default()),
            Some(raw) => Params::read(raw),
        }
    }
}

fn syntax(checked: Result<(), scan::SyntaxError>) -> Option<MessageError> {
    checked.err().map(|e| MessageError::Parse(e.to_string()))
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

/// The form of an id (JSON text) that compares equal exactly when the ids are equal: a string
/// written with escapes is decoded and written back plainly. Borrows in the usual case.
pub fn canonical_id(id: &str) -> Cow<'_, str> {
    if id.starts_with('"') && id.contains('\\') {
        if let Some(text) = scan::string_value(id) {
            return Cow::Owned(crate::object::json_string(&text));
        }
    }
    Cow::Borrowed(id)
}

/// The `params` fields that routing reads, each checked for its type. Everything else stays
/// in the raw params.
#[derive(Debug, Default)]
pub struct Params<'a> {
    pub name: Option<Cow<'a, str>>,
    pub uri: Option<Cow<'a, str>>,
    pub cursor: Option<Cow<'a, str>>,
    /// JSON text of an object.
    pub reference: Option<&'a str>,
    /// JSON text of an object.
    pub meta: Option<&'a str>,
    pub protocol_version: Option<Cow<'a, str>>,
    /// JSON text of a string or an integer.
    pub request_id: Option<&'a str>,
    /// JSON text of a string or an integer.
    pub progress_token: Option<&'a str>,
    pub level: Option<Cow<'a, str>>,
    /// JSON text of an object.
    pub capabilities: Option<&'a str>,
}

/// Why `params` cannot be routed; a host gets -32602 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("params must be an object")]
    NotAnObject,
    #[error("\"{key}\" must be {expected}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
}

impl<'a> Params<'a> {
    /// Reads the routing fields of `raw`, the JSON text of `params`.
    pub fn read(raw: &'a str) -> Result<Self, ParamsError> {
        let mut p = Params::default();
        let mut wrong = None;
        let scanned = scan::for_each_member(raw, |m| {
            let key = match m.key_text() {
                Some(k) => k,
                None => return,
            };
            let first = m.value.as_bytes().first().copied();
            let string = || scan::string_value(m.value);
            let object = || (first == Some(b'{')).then_some(m.value);
            let id_like = || is_valid_id(m.value).then_some(m.value);
            let outcome = match key.as_ref() {
                "name" => set(&mut p.name, string(), "name", "a string"),
                "uri" => set(&mut p.uri, string(), "uri", "a string"),
                "cursor" => set(&mut p.cursor, string(), "cursor", "a string"),
                "ref" => set(&mut p.reference, object(), "ref", "an object"),
                "_meta" => set(&mut p.meta, object(), "_meta", "an object"),
                "protocolVersion" => set(
                    &mut p.protocol_version,
                    string(),
                    "protocolVersion",
                    "a string",
                ),
                "requestId" => set(
                    &mut p.request_id,
                    id_like(),
                    "requestId",
                    "a string or an integer",
                ),
                "progressToken" => set(
                    &mut p.progress_token,
                    id_like(),
                    "progressToken",
                    "a string or an integer",
                ),
                "level" => set(&mut p.level, string(), "level", "a string"),
                "capabilities" => set(&mut p.capabilities, object(), "capabilities", "an object"),
                _ => Ok(()),
            };
            if let Err(e) = outcome {
                wrong.get_or_insert(e);
            }
        });
        if scanned.is_err() {
            return Err(ParamsError::NotAnObject);
        }
        match wrong {
            Some(e) => Err(e),
            None => Ok(p),
        }
    }
}

fn set<T>(
    slot: &mut Option<T>,
    value: Option<T>,
    key: &'static str,
    expected: &'static str,
) -> Result<(), ParamsError> {
    match value {
        Some(v) => {
            *slot = Some(v);
            Ok(())
        }
        None => Err(ParamsError::WrongType { key, expected }),
    }
}

/// The id of a message that was too large to keep, from the parts of it that were kept: its
/// first and last bytes. Writers put the id near the start (`{"jsonrpc":"2.0","id":..`) or
/// last (`..,"jsonrpc":"2.0","id":7}`); an id is only taken where it is certain to belong to
/// the top-level object and to be whole.
pub fn id_of_fragments(head: &[u8], tail: &[u8]) -> Option<String> {
    id_in_head(head).or_else(|| id_in_tail(tail))
}

fn id_in_head(head: &[u8]) -> Option<String> {
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    let mut found = None;
    // The scan fails where the head was cut; members reported before that are whole, but the
    // last one's value may have been cut too, so it must be followed by more text.
    let _ = scan::for_each_member(text, |m| {
        let end = m.value.as_ptr() as usize - text.as_ptr() as usize + m.value.len();
        if m.key == "id" && end < text.len() && found.is_none() && is_valid_id(m.value) {
            found = Some(m.value.to_owned());
        }
    });
    found
}

/// `"id":VALUE}` at the very end: the object that closes there is the top-level one.
fn id_in_tail(tail: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(tail).ok().or_else(|| {
        // The first bytes may be a cut character; drop up to three of them.
        (1..4).find_map(|n| std::str::from_utf8(tail.get(n..)?).ok())
    })?;
    let body = text.trim_end().strip_suffix('}')?.trim_end();
    let value_start = if body.ends_with('"') {
        string_start(body)?
    } else {
        body.len()
            - body
                .bytes()
                .rev()
                .take_while(|b| b.is_ascii_digit() || *b == b'-')
                .count()
    };
    let value = &body[value_start..];
    let before = body[..value_start].trim_end().strip_suffix(':')?.trim_end();
    let before = before.strip_suffix("\"id\"")?.trim_end();
    let opens = before.ends_with(',') || before.ends_with('{');
    (opens && is_valid_id(value) && scan::validate(value).is_ok()).then(|| value.to_owned())
}

/// Where the string that ends `text` (with its closing quote) opens.
fn string_start(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = b.len() - 1;
    while i > 0 {
        i -= 1;
        if b[i] == b'"' {
            let backslashes = b[..i].iter().rev().take_while(|&&c| c == b'\\').count();
            if backslashes % 2 == 0 {
                return Some(i);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
