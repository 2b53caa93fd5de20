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
//! generated documents), except nesting deeper than [`MAX_DEPTH`], which it refuses.

use std::borrow::Cow;
use std::fmt;

/// Arrays and objects nested deeper than this are refused (the limit `serde_json` applies to
/// values it builds), so a hostile message cannot exhaust the stack.
pub const MAX_DEPTH: usize = 128;

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
pub fn for_each_member<'a>(
    text: &'a str,
    mut each: impl FnMut(Member<'a>),
) -> Result<(), SyntaxError> {
    let mut s = Scanner::new(text);
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(s.err("expected an object"));
    }
    s.object(1, &mut each)?;
    s.end()
}

/// The elements of the JSON array `text`, as JSON texts, in order.
pub fn elements(text: &str) -> Result<Vec<&str>, SyntaxError> {
    let mut s = Scanner::new(text);
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

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            b: text.as_bytes(),
            i: 0,
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
        while more {
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key"));
            }
            let key_start = self.i + 1;
            let key_escaped = self.string()?;
            let key = self.slice(key_start, self.i - 1)?;
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
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(false);
        }
        Ok(true)
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
                    let hex = self.b.get(self.i + 2..self.i + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return Err(self.err("invalid \\u escape"));
                    }
                    self.i += 6;
                }
                _ => return Err(self.err("invalid escape")),
            }
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
