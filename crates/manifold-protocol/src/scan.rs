//! A validating JSON scanner that builds nothing: one pass over the text checks the whole
//! grammar and reports where the members of an object start and end, as slices of the input.
//!
//! Manifold reads a few members of every message and forwards the rest as it came, so it needs
//! spans, not values. Scanning strings (nearly all the bytes of a large result) looks for the
//! next quote or backslash with `memchr` and checks for control characters a chunk at a time,
//! which the compiler turns into vector instructions; a general deserializer does far more work
//! per byte. The input is `&str`, so UTF-8 is already checked.
//!
//! It accepts what `serde_json` accepts for the same text (the tests compare the two on
//! generated documents), except nesting deeper than [`MAX_DEPTH`], which it refuses (the
//! strict scanner reads such nesting to its end without recursing, and reports a breach).
//!
//! Host input is also held to I-JSON (RFC 7493) by the `_strict` entry points: no member
//! name twice in one object (compared after unescaping), no lone surrogate in a `\u` escape,
//! every number finite as a double, and nesting at most [`HOST_MAX_DEPTH`] deep over the
//! whole message. Every upstream can parse such a message, and whatever member Manifold
//! routes by is the only one of its name, so the upstream reads exactly what Manifold read.
//! A breach of these rules is a [`Violation`]: the scan goes on past it (so that the id of a
//! request can still be read and answered), and only the first one is reported.
//!
//! One file: the scanner is one state machine over the text, and its hot
//! paths (strings, numbers, nesting) and the I-JSON checks on them read best side by side.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

/// Arrays and objects nested deeper than this are refused (the limit `serde_json` applies to
/// values it builds), so a hostile message cannot exhaust the stack.
pub const MAX_DEPTH: usize = 128;

/// The deepest nesting accepted from a host, counted over the whole message (the envelope is
/// level 1). Below common parsers' limits (`serde_json` stops at 128), so a message Manifold
/// accepts is never one an upstream cannot parse.
pub const HOST_MAX_DEPTH: usize = 64;

/// Where and how a syntactically valid text breaks the I-JSON rules host input is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Byte offset of the problem.
    pub at: usize,
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.problem, self.at)
    }
}

/// Where and why a text is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    /// Byte offset of the problem.
    pub at: usize,
    pub problem: &'static str,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.problem, self.at)
    }
}

impl std::error::Error for SyntaxError {}

/// One member of an object, exactly as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'a> {
    /// The key between its quotes, escapes not decoded.
    pub key: &'a str,
    /// Whether `key` holds escapes; if so, compare it through [`Member::key_text`].
    pub key_escaped: bool,
    /// The value's JSON text, without surrounding whitespace.
    pub value: &'a str,
}

impl<'a> Member<'a> {
    /// The decoded key.
    pub fn key_text(&self) -> Option<Cow<'a, str>> {
        if self.key_escaped {
            serde_json::from_str::<String>(&format!("\"{}\"", self.key))
                .ok()
                .map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(self.key))
        }
    }
}

/// Validates the JSON object `text` (whitespace around it allowed) and calls `each` for every
/// member, in order. Members before a syntax error may already have been reported when the
/// error is returned: callers discard what they gathered on `Err`.
pub fn for_each_member<'a>(text: &'a str, each: impl FnMut(Member<'a>)) -> Result<(), SyntaxError> {
    members_with::<false>(text, each).map(|_| ())
}

/// [`for_each_member`], holding the text to I-JSON as well: the first breach, if any, is
/// returned once the whole text was scanned.
pub fn for_each_member_strict<'a>(
    text: &'a str,
    each: impl FnMut(Member<'a>),
) -> Result<Option<Violation>, SyntaxError> {
    members_with::<true>(text, each)
}

fn members_with<'a, const STRICT: bool>(
    text: &'a str,
    mut each: impl FnMut(Member<'a>),
) -> Result<Option<Violation>, SyntaxError> {
    let mut s = Scanner::<STRICT>::new(text);
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(s.err("expected an object"));
    }
    s.object(1, &mut each)?;
    s.end()?;
    Ok(s.violation)
}

/// Validates that `text` is one JSON value (whitespace around it allowed).
pub fn validate(text: &str) -> Result<(), SyntaxError> {
    let mut s = Scanner::<false>::new(text);
    s.ws();
    s.value(0)?;
    s.end()
}

/// [`validate`], holding the text to I-JSON as well.
pub fn validate_strict(text: &str) -> Result<Option<Violation>, SyntaxError> {
    let mut s = Scanner::<true>::new(text);
    s.ws();
    s.value(0)?;
    s.end()?;
    Ok(s.violation)
}

/// The elements of the JSON array `text`, as JSON texts, in order.
pub fn elements(text: &str) -> Result<Vec<&str>, SyntaxError> {
    let mut s = Scanner::<false>::new(text);
    s.ws();
    if s.peek() != Some(b'[') {
        return Err(s.err("expected an array"));
    }
    let mut out = Vec::new();
    s.array(1, &mut |e| out.push(e))?;
    s.end()?;
    Ok(out)
}

/// Decodes `token`, the JSON text of one value, if it is a string. Borrows when the string
/// holds no escapes.
pub fn string_value(token: &str) -> Option<Cow<'_, str>> {
    let inner = token.strip_prefix('"')?.strip_suffix('"')?;
    match memchr::memchr2(b'"', b'\\', inner.as_bytes()) {
        None if !has_control(inner.as_bytes()) => Some(Cow::Borrowed(inner)),
        None => None,
        Some(_) => serde_json::from_str::<String>(token).ok().map(Cow::Owned),
    }
}

/// `STRICT` adds the I-JSON checks; the lax scanner compiles without them.
struct Scanner<'a, const STRICT: bool> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    /// The first I-JSON breach seen (strict scanning only).
    violation: Option<Violation>,
}

impl<'a, const STRICT: bool> Scanner<'a, STRICT> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            b: text.as_bytes(),
            i: 0,
            violation: None,
        }
    }

    /// Records an I-JSON breach at `at`; only the first one is kept.
    #[cold]
    fn violate(&mut self, at: usize, problem: impl FnOnce() -> String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                at,
                problem: problem(),
            });
        }
    }

    fn err(&self, problem: &'static str) -> SyntaxError {
        SyntaxError {
            at: self.i,
            problem,
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// Only whitespace may follow the value.
    fn end(&mut self) -> Result<(), SyntaxError> {
        self.ws();
        if self.i == self.b.len() {
            Ok(())
        } else {
            Err(self.err("trailing characters"))
        }
    }

    /// A slice of the text between two offsets that sit on ASCII delimiters.
    fn slice(&self, from: usize, to: usize) -> Result<&'a str, SyntaxError> {
        self.text
            .get(from..to)
            .ok_or_else(|| self.err("not on a character boundary"))
    }

    fn value(&mut self, depth: usize) -> Result<(), SyntaxError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1, &mut |_| {}),
            Some(b'[') => self.array(depth + 1, &mut |_| {}),
            Some(b'"') => self.string().map(|_| ()),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a value")),
            None => Err(self.err("unexpected end of input")),
        }
    }

    /// At `{`: scans the object, reporting each member.
    fn object(
        &mut self,
        depth: usize,
        each: &mut impl FnMut(Member<'a>),
    ) -> Result<(), SyntaxError> {
        let mut more = self.open(depth, b'}')?;
        let mut keys = KeySet::default();
        while more {
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key"));
            }
            let key_start = self.i + 1;
            let key_escaped = self.string()?;
            let key = self.slice(key_start, self.i - 1)?;
            if STRICT && !keys.insert(key, key_escaped) {
                self.violate(key_start - 1, || {
                    let shown = Member {
                        key,
                        key_escaped,
                        value: "",
                    }
                    .key_text()
                    .map_or_else(|| key.to_owned(), Cow::into_owned);
                    format!("member {shown:?} appears twice in one object")
                });
            }
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected ':'"));
            }
            self.i += 1;
            self.ws();
            let value_start = self.i;
            self.value(depth)?;
            each(Member {
                key,
                key_escaped,
                value: self.slice(value_start, self.i)?,
            });
            more = self.next_item(b'}', "expected ',' or '}'")?;
        }
        Ok(())
    }

    /// At `[`: scans the array, reporting each element's text.
    fn array(&mut self, depth: usize, each: &mut impl FnMut(&'a str)) -> Result<(), SyntaxError> {
        let mut more = self.open(depth, b']')?;
        while more {
            let start = self.i;
            self.value(depth)?;
            each(self.slice(start, self.i)?);
            more = self.next_item(b']', "expected ',' or ']'")?;
        }
        Ok(())
    }

    /// At `{` or `[`: steps in; false when `close` follows at once (an empty container).
    fn open(&mut self, depth: usize, close: u8) -> Result<bool, SyntaxError> {
        if STRICT && depth > HOST_MAX_DEPTH {
            self.violate(self.i, || {
                format!("nested more than {HOST_MAX_DEPTH} levels deep")
            });
        }
        if depth > MAX_DEPTH {
            if !STRICT {
                return Err(self.err("nested too deeply"));
            }
            // A host message this deep is refused anyway (the breach above), but only once
            // it has been read to the end: its id, and where the breach lies, are wanted for
            // the answer. The rest of this container is checked without recursion.
            self.deep_container()?;
            return Ok(false);
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// At `{` or `[` past [`MAX_DEPTH`]: checks the grammar of the whole container with a
    /// stack of its own instead of the call stack, and steps past it. Member names are not
    /// compared here: the message already breaks I-JSON, and only the first breach counts.
    #[cold]
    fn deep_container(&mut self) -> Result<(), SyntaxError> {
        let mut closers: Vec<u8> = Vec::new();
        loop {
            // At a value.
            match self.peek() {
                Some(b'{') | Some(b'[') => {
                    let close = if self.peek() == Some(b'{') {
                        b'}'
                    } else {
                        b']'
                    };
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(close) {
                        self.i += 1;
                    } else {
                        closers.push(close);
                        if close == b'}' {
                            self.deep_key()?;
                        }
                        continue;
                    }
                }
                _ => self.value(0)?,
            }
            // Past a value: close what ends here, or step to the next item.
            loop {
                let Some(&close) = closers.last() else {
                    return Ok(());
                };
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                        if close == b'}' {
                            self.deep_key()?;
                        }
                        break;
                    }
                    Some(c) if c == close => {
                        self.i += 1;
                        closers.pop();
                    }
                    _ if close == b'}' => return Err(self.err("expected ',' or '}'")),
                    _ => return Err(self.err("expected ',' or ']'")),
                }
            }
        }
    }

    /// A member's name and colon, inside [`Scanner::deep_container`]; stops at its value.
    fn deep_key(&mut self) -> Result<(), SyntaxError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a key"));
        }
        self.string()?;
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.err("expected ':'"));
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    /// After an item: true past a `,` (another item follows), false past `close`.
    fn next_item(&mut self, close: u8, problem: &'static str) -> Result<bool, SyntaxError> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                self.ws();
                Ok(true)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(self.err(problem)),
        }
    }

    /// At `"`: scans to just past the closing quote; returns whether there were escapes.
    fn string(&mut self) -> Result<bool, SyntaxError> {
        self.i += 1;
        let mut escaped = false;
        loop {
            let rest = &self.b[self.i..];
            let n = match short_run(rest) {
                Some(n) => n,
                None => match memchr::memchr2(b'"', b'\\', rest) {
                    // The first control character ends the run in either case.
                    Some(n) if !has_control(&rest[..n]) => n,
                    Some(_) => rest.iter().position(|&b| b < 0x20).unwrap_or_default(),
                    None => {
                        self.i = self.b.len();
                        return Err(self.err("unterminated string"));
                    }
                },
            };
            if rest[n] < 0x20 {
                self.i += n;
                return Err(self.err("control character in a string"));
            }
            self.i += n;
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Ok(escaped);
            }
            escaped = true;
            match self.b.get(self.i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 2,
                Some(b'u') => {
                    let Some(unit) = self.hex_unit(self.i) else {
                        return Err(self.err("invalid \\u escape"));
                    };
                    if STRICT {
                        self.check_surrogate(unit);
                    }
                    self.i += 6;
                }
                _ => return Err(self.err("invalid escape")),
            }
        }
    }

    /// The UTF-16 code unit of the `\u` escape (four hex digits) at `at`, if there is one.
    fn hex_unit(&self, at: usize) -> Option<u16> {
        let hex = self.b.get(at + 2..at + 6)?;
        if self.b.get(at..at + 2) != Some(&b"\\u"[..]) || !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        // Four ASCII hex digits.
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    }

    /// At a `\u` escape holding `unit`: a high surrogate must be followed at once by an
    /// escaped low one, and a low surrogate must follow a high one (which consumes it).
    fn check_surrogate(&mut self, unit: u16) {
        match unit {
            0xD800..=0xDBFF => match self.hex_unit(self.i + 6) {
                Some(0xDC00..=0xDFFF) => self.i += 6,
                _ => self.violate(self.i, || "lone surrogate in a \\u escape".to_owned()),
            },
            0xDC00..=0xDFFF => self.violate(self.i, || "lone surrogate in a \\u escape".to_owned()),
            _ => {}
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), SyntaxError> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.err("expected a value"))
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Result<(), SyntaxError> {
        let start = self.i;
        self.number_token()?;
        // Only a long mantissa or an exponent can leave the range of a double.
        let token = &self.b[start..self.i];
        if STRICT && (token.len() > 15 || token.iter().any(|&b| b == b'e' || b == b'E')) {
            let finite = std::str::from_utf8(token)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .is_some_and(f64::is_finite);
            if !finite {
                self.violate(start, || "number out of the range of a double".to_owned());
            }
        }
        Ok(())
    }

    fn number_token(&mut self) -> Result<(), SyntaxError> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Err(self.err("invalid number"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Err(self.err("invalid number"));
            }
            self.digits();
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }
}

/// The member names of one object, to find one that appears twice (strict scanning). Most
/// objects have a few plain keys, compared in place; past that, or when a key holds escapes
/// (compared decoded), a hash set takes over.
#[derive(Default)]
struct KeySet<'a> {
    small: [&'a str; 8],
    n: usize,
    big: Option<HashSet<Cow<'a, str>>>,
}

impl<'a> KeySet<'a> {
    /// Adds `key` (as written, `escaped` if it holds escapes); false if it was already there.
    fn insert(&mut self, key: &'a str, escaped: bool) -> bool {
        if !escaped && self.big.is_none() {
            if self.small[..self.n].contains(&key) {
                return false;
            }
            if self.n < self.small.len() {
                self.small[self.n] = key;
                self.n += 1;
                return true;
            }
        }
        let small = &self.small[..self.n];
        let big = self
            .big
            .get_or_insert_with(|| small.iter().map(|k| Cow::Borrowed(*k)).collect());
        let decoded = if escaped {
            let member = Member {
                key,
                key_escaped: true,
                value: "",
            };
            member.key_text().unwrap_or(Cow::Borrowed(key))
        } else {
            Cow::Borrowed(key)
        };
        big.insert(decoded)
    }
}

/// Where the first quote, backslash or control character is in the first [`SHORT`] bytes of
/// `s`, eight bytes at a time; `None` if there is none there. Most strings are short keys and
/// names, which this finds sooner than the set-up of a vector search would.
#[inline]
fn short_run(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    while at < SHORT {
        let Some(word) = s.get(at..at + 8) else {
            // Fewer than eight bytes left: look at them one by one.
            return s[at..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .map(|n| at + n);
        };
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        // Classic zero-byte tests: the lowest flagged byte is always exact.
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let found = found & HIGHS;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    None
}

/// How many bytes of a string [`short_run`] looks at before handing over to `memchr`.
const SHORT: usize = 32;

/// Whether `s` holds a byte below 0x20, which JSON strings may not contain unescaped. Works a
/// chunk at a time (a minimum over 32 bytes vectorizes) so long strings cost little.
#[inline]
fn has_control(s: &[u8]) -> bool {
    let mut chunks = s.chunks_exact(32);
    for chunk in &mut chunks {
        if chunk.iter().fold(u8::MAX, |m, &b| m.min(b)) < 0x20 {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| b < 0x20)
}

#[cfg(test)]
mod tests;
