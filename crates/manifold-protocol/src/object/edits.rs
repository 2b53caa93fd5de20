//! A request's params rebuilt for its upstream in one pass: the edits the forwarding path makes
//! (the upstream's own name or URI, the progress token mapped to the upstream request id, the
//! host's own stateless-era keys taken out of `_meta`, the trace context and the upstream's
//! request metadata put in) are gathered in an [`Edits`] first, then the params are scanned
//! once and written once, straight into the outgoing line ([`crate::write::request_edited`]).
//!
//! The rules, which hold whatever edits are combined:
//! - Members no edit names are copied byte for byte (key and value), in their order.
//! - A set of a member that exists replaces its value in place; a new member is appended,
//!   in the order the sets were made. Setting one key twice keeps the last value.
//! - Within `_meta`, edits apply as if one after the other: the capture, then the removals,
//!   then the sets. So a key both removed and set ends up appended with the set value, and
//!   the capture still reports a member that is then removed.
//! - A `_meta` the params lack is created, as their first member (see [`Edits::meta_set_str`]),
//!   only if something is set in it; a `_meta` of `null` counts as absent. A `_meta` that
//!   removals empty is dropped (one that was empty already is kept).
//! - Params that are absent or `null` become an object when a member is set; removals and the
//!   capture have nothing to act on there. Params that are not an object are refused, as is a
//!   `_meta` that is not an object when `_meta` is edited.
//! - Without edits the params are written as they are; with only `_meta` edits and no
//!   `"_meta"` in the text, the new `_meta` is put in front of the rest without a scan.
//!
//! Params are trusted to be JSON text (a slice of a decoded message, as every writer here
//! assumes); they are scanned, which validates them, whenever a member must be found. Keys
//! should appear once per object (I-JSON, which host input is held to); with duplicates, the
//! first member of a name is the one edited and the others are copied.

use std::borrow::Cow;

use crate::needle;
use crate::object::write_json_str;
use crate::scan::{self, Member, SyntaxError};
use crate::write::write_u64;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// The value an edit writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'e> {
    /// Written as a JSON string (quoted and escaped).
    Str(&'e str),
    /// JSON text, written as it is.
    Raw(&'e str),
    /// A number: a request id, written without formatting to a string first.
    Number(u64),
}

impl Value<'_> {
    fn write_to(self, out: &mut Vec<u8>) {
        match self {
            Value::Str(s) => write_json_str(out, s),
            Value::Raw(r) => out.extend_from_slice(r.as_bytes()),
            Value::Number(n) => write_u64(out, n),
        }
    }
}

/// The changes to make to a request's params on their way upstream; applied by
/// [`crate::write::request_edited`] (or [`write_params`]). Keys are given decoded (as they
/// read, not as escaped JSON); raw values must be valid JSON text, which is not checked.
///
/// ```
/// use manifold_protocol::{object::Edits, version::meta, write};
///
/// let mut edits = Edits::default();
/// edits.set_str("name", "echo");
/// edits.meta_replace_capture_id("progressToken", 17);
/// edits.meta_remove(&[meta::CLIENT_INFO]);
/// edits.meta_set_str("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
/// let params = r#"{"name":"alpha__echo","_meta":{"progressToken":"p1"}}"#;
/// let mut line = Vec::new();
/// let built = write::request_edited(&mut line, 17, "tools/call", Some(params), &edits).unwrap();
/// assert_eq!(built.captured, Some(r#""p1""#));
/// assert_eq!(
///     std::str::from_utf8(&line).unwrap(),
///     "{\"jsonrpc\":\"2.0\",\"id\":17,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\
///      \"_meta\":{\"progressToken\":17,\"traceparent\":\
///      \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}}\n"
/// );
/// ```
#[derive(Debug, Default, Clone)]
pub struct Edits<'e> {
    top: Vec<(&'e str, Value<'e>)>,
    meta_sets: Vec<(&'e str, Value<'e>)>,
    meta_removals: Vec<&'e str>,
    capture: Option<(&'e str, Value<'e>)>,
}

impl<'e> Edits<'e> {
    /// Sets the top-level member `key` to the string `value` (the upstream's own tool or
    /// prompt name, or resource URI). `key` must not be `_meta`: edit that with `meta_*`.
    pub fn set_str(&mut self, key: &'e str, value: &'e str) {
        set(&mut self.top, key, Value::Str(value));
    }

    /// Sets the top-level member `key` to `json`, JSON text (a `task` object, say). `key`
    /// must not be `_meta`.
    pub fn set_raw(&mut self, key: &'e str, json: &'e str) {
        set(&mut self.top, key, Value::Raw(json));
    }

    /// Sets the member `key` of `_meta` to the string `value` (a trace context member).
    ///
    /// A `_meta` created for it is put first in the params, as the trace context has been:
    /// whoever reads the line meets the request's metadata before a large `arguments` object,
    /// and params without `"_meta"` need no scan to get it (the usual case on a traced call).
    pub fn meta_set_str(&mut self, key: &'e str, value: &'e str) {
        set(&mut self.meta_sets, key, Value::Str(value));
    }

    /// Sets the member `key` of `_meta` to `json`, JSON text (a stateless upstream's protocol
    /// version, client capabilities, client info).
    pub fn meta_set_raw(&mut self, key: &'e str, json: &'e str) {
        set(&mut self.meta_sets, key, Value::Raw(json));
    }

    /// Removes these members from `_meta` (the keys a stateless host declared itself with).
    pub fn meta_remove(&mut self, keys: &[&'e str]) {
        self.meta_removals.extend_from_slice(keys);
    }

    /// If `_meta` has the member `key`, replaces its value in place with `json` (JSON text)
    /// and reports the value it had as [`Edited::captured`]; nothing is added if it has none.
    /// One capture per edits: a second call replaces the first.
    pub fn meta_replace_capture(&mut self, key: &'e str, json: &'e str) {
        self.capture = Some((key, Value::Raw(json)));
    }

    /// [`Edits::meta_replace_capture`] with a number, such as the upstream request id that
    /// replaces the host's progress token.
    pub fn meta_replace_capture_id(&mut self, key: &'e str, id: u64) {
        self.capture = Some((key, Value::Number(id)));
    }

    /// Whether there is nothing to change.
    pub fn is_empty(&self) -> bool {
        self.top.is_empty() && !self.edits_meta()
    }

    fn edits_meta(&self) -> bool {
        !self.meta_sets.is_empty() || !self.meta_removals.is_empty() || self.capture.is_some()
    }

    /// Whether the edits add something, so that absent params become an object.
    fn sets_any(&self) -> bool {
        !self.top.is_empty() || !self.meta_sets.is_empty()
    }
}

/// Sets `key` in `sets`: the last value given for a key wins, at the place of its first set.
fn set<'e>(sets: &mut Vec<(&'e str, Value<'e>)>, key: &'e str, value: Value<'e>) {
    debug_assert_ne!(key, "_meta", "set _meta's members with the meta_* edits");
    match sets.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 = value,
        None => sets.push((key, value)),
    }
}

/// What writing edited params tells the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Edited<'p> {
    /// The value the capture replaced (the host's progress token), as JSON text borrowed
    /// from the params; `None` when `_meta` had no such member.
    pub captured: Option<&'p str>,
}

/// Why params could not be edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("params must be an object")]
    NotAnObject,
    #[error("params._meta must be an object")]
    MetaNotAnObject,
    #[error("params are not valid JSON: {0}")]
    Syntax(#[from] SyntaxError),
}

/// Appends `,"params":` and the params with `edits` applied to `out` (nothing when params
/// stay absent). On `Err`, `out` may hold part of them: the caller truncates it.
pub fn write_params<'p>(
    out: &mut Vec<u8>,
    params: Option<&'p str>,
    edits: &Edits<'_>,
) -> Result<Edited<'p>, EditError> {
    let given = match params.map(str::trim) {
        None | Some("null") if edits.sets_any() => {
            out.extend_from_slice(b",\"params\":");
            write_new_object(out, edits);
            return Ok(Edited::default());
        }
        None => return Ok(Edited::default()),
        Some("null") => {
            out.extend_from_slice(b",\"params\":null");
            return Ok(Edited::default());
        }
        Some(p) if p.starts_with('{') => p,
        Some(_) => return Err(EditError::NotAnObject),
    };
    out.extend_from_slice(b",\"params\":");
    if edits.is_empty() {
        out.extend_from_slice(given.as_bytes());
        return Ok(Edited::default());
    }
    if edits.top.is_empty() && needle::META_MEMBER.find(given.as_bytes()).is_none() {
        prepend_meta(out, given, edits);
        return Ok(Edited::default());
    }
    write_edited_object(out, given, edits)
}

/// One member of a scanned object: its key decoded (to compare) and as written (to copy).
struct Entry<'p> {
    key: Cow<'p, str>,
    raw_key: &'p str,
    value: &'p str,
}

/// The members of the object `text`, in order; one scan, which validates it.
fn entries(text: &str) -> Result<Vec<Entry<'_>>, EditError> {
    let mut out = Vec::with_capacity(8);
    let mut bad_key = false;
    scan::for_each_member(text, |m: Member<'_>| match m.key_text() {
        Some(key) => out.push(Entry {
            key,
            raw_key: m.key,
            value: m.value,
        }),
        None => bad_key = true,
    })?;
    if bad_key {
        return Err(EditError::Syntax(SyntaxError {
            at: 0,
            problem: "a key is not a valid string",
        }));
    }
    Ok(out)
}

/// Whether `entries[i]` is the first member of its name: the one an edit of that name acts on.
fn first_of(entries: &[Entry<'_>], i: usize) -> bool {
    !entries[..i].iter().any(|e| e.key == entries[i].key)
}

/// Writes the commas between an object's members.
#[derive(Debug, Clone, Copy, Default)]
struct Members {
    started: bool,
}

impl Members {
    fn separate(&mut self, out: &mut Vec<u8>) {
        if self.started {
            out.push(b',');
        }
        self.started = true;
    }

    /// A member whose key is copied as it was written (escapes and all).
    fn copied_key(&mut self, out: &mut Vec<u8>, raw_key: &str, value: Value<'_>) {
        self.separate(out);
        out.push(b'"');
        out.extend_from_slice(raw_key.as_bytes());
        out.extend_from_slice(b"\":");
        value.write_to(out);
    }

    /// A member whose key comes from an edit (decoded text, escaped here).
    fn new_key(&mut self, out: &mut Vec<u8>, key: &str, value: Value<'_>) {
        self.separate(out);
        write_json_str(out, key);
        out.push(b':');
        value.write_to(out);
    }
}

/// `"_meta":{...}` holding the `_meta` sets alone, as a member of `members`.
fn write_new_meta(out: &mut Vec<u8>, members: &mut Members, edits: &Edits<'_>) {
    members.separate(out);
    out.extend_from_slice(b"\"_meta\":{");
    let mut meta = Members::default();
    for (key, value) in &edits.meta_sets {
        meta.new_key(out, key, *value);
    }
    out.push(b'}');
}

/// Params that were absent or `null`: an object of the sets alone.
fn write_new_object(out: &mut Vec<u8>, edits: &Edits<'_>) {
    out.push(b'{');
    let mut members = Members::default();
    if !edits.meta_sets.is_empty() {
        write_new_meta(out, &mut members, edits);
    }
    for (key, value) in &edits.top {
        members.new_key(out, key, *value);
    }
    out.push(b'}');
}

/// Params with no `"_meta"` in their text and no top-level edits: the new `_meta` goes in
/// front of the rest, which is copied without a scan (removals and the capture have nothing
/// to act on).
fn prepend_meta(out: &mut Vec<u8>, params: &str, edits: &Edits<'_>) {
    let rest = &params[1..];
    if edits.meta_sets.is_empty() {
        out.extend_from_slice(params.as_bytes());
        return;
    }
    out.push(b'{');
    let mut members = Members::default();
    write_new_meta(out, &mut members, edits);
    if !rest.trim_start().starts_with('}') {
        out.push(b',');
    }
    out.extend_from_slice(rest.as_bytes());
}

/// Params that must be scanned: every member copied or edited in its place, `_meta` first
/// when it is created, new top-level members last.
fn write_edited_object<'p>(
    out: &mut Vec<u8>,
    params: &'p str,
    edits: &Edits<'_>,
) -> Result<Edited<'p>, EditError> {
    let entries = entries(params)?;
    let meta_at = entries.iter().position(|e| e.key == "_meta");
    let mut members = Members::default();
    let mut edited = Edited::default();
    out.push(b'{');
    if meta_at.is_none() && !edits.meta_sets.is_empty() {
        write_new_meta(out, &mut members, edits);
    }
    for (i, entry) in entries.iter().enumerate() {
        if Some(i) == meta_at {
            edited.captured = write_meta(out, &mut members, entry, edits)?;
            continue;
        }
        let value = match edits.top.iter().find(|(k, _)| entry.key == *k) {
            Some((_, value)) if first_of(&entries, i) => *value,
            _ => Value::Raw(entry.value),
        };
        members.copied_key(out, entry.raw_key, value);
    }
    for (key, value) in &edits.top {
        if !entries.iter().any(|e| e.key == *key) {
            members.new_key(out, key, *value);
        }
    }
    out.push(b'}');
    Ok(edited)
}

/// The params' `_meta` member with the `_meta` edits applied, as a member of `members`;
/// nothing when removals empty it. Returns the captured value.
fn write_meta<'p>(
    out: &mut Vec<u8>,
    members: &mut Members,
    meta: &Entry<'p>,
    edits: &Edits<'_>,
) -> Result<Option<&'p str>, EditError> {
    if !edits.edits_meta() {
        members.copied_key(out, meta.raw_key, Value::Raw(meta.value));
        return Ok(None);
    }
    if meta.value == "null" {
        match edits.meta_sets.is_empty() {
            true => members.copied_key(out, meta.raw_key, Value::Raw(meta.value)),
            false => write_new_meta(out, members, edits),
        }
        return Ok(None);
    }
    if !meta.value.starts_with('{') {
        return Err(EditError::MetaNotAnObject);
    }
    let entries = entries(meta.value)?;
    let (mark, before) = (out.len(), *members);
    members.separate(out);
    out.push(b'"');
    out.extend_from_slice(meta.raw_key.as_bytes());
    out.extend_from_slice(b"\":{");
    let (captured, kept) = write_meta_members(out, &entries, edits);
    if kept == 0 && !entries.is_empty() {
        // Emptied by the removals: no `_meta` at all, as if the host had sent none.
        out.truncate(mark);
        *members = before;
    } else {
        out.push(b'}');
    }
    Ok(captured)
}

/// The members of `_meta` with the capture, the removals and the sets applied, in that
/// order; returns the captured value and how many members were written.
fn write_meta_members<'p>(
    out: &mut Vec<u8>,
    entries: &[Entry<'p>],
    edits: &Edits<'_>,
) -> (Option<&'p str>, usize) {
    let removed = |key: &str| edits.meta_removals.contains(&key);
    let mut meta = Members::default();
    let (mut captured, mut kept) = (None, 0);
    for (i, entry) in entries.iter().enumerate() {
        let first = first_of(entries, i);
        let capture = match edits.capture {
            Some((key, value)) if entry.key == key && first => {
                captured = Some(entry.value);
                Some(value)
            }
            _ => None,
        };
        if removed(&entry.key) {
            continue;
        }
        let set = match edits.meta_sets.iter().find(|(k, _)| entry.key == *k) {
            Some((_, value)) if first => Some(*value),
            _ => None,
        };
        let value = set.or(capture).unwrap_or(Value::Raw(entry.value));
        meta.copied_key(out, entry.raw_key, value);
        kept += 1;
    }
    for (key, value) in &edits.meta_sets {
        if !entries.iter().any(|e| e.key == *key && !removed(key)) {
            meta.new_key(out, key, *value);
            kept += 1;
        }
    }
    (captured, kept)
}
