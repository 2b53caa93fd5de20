//! Server-sent events: an incremental parser for the `text/event-stream` format (what both
//! MCP HTTP transports carry messages in) and the writer for one event. No I/O: the caller
//! feeds the bytes as they arrive and takes whole events.
//!
//! The format, as the HTML standard defines it: lines end in `\n`, `\r\n` or `\r`; a line
//! `field: value` (one space after the colon dropped) sets a field; `data` lines accumulate,
//! joined by `\n`; a line starting with `:` is a comment; an empty line ends the event. `id`
//! and `retry` persist across events. One byte order mark at the very start of the stream is
//! dropped.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event` field; `message` when absent.
    pub kind: String,
    pub data: String,
    /// The last event id seen on the stream so far (it carries over to later events).
    pub id: Option<String>,
    /// Set when the data grew past the parser's limit: the data's full length. `data` then
    /// holds only its first bytes and `tail` its last ones.
    pub oversize: Option<usize>,
    pub tail: String,
}

/// Bytes of an oversize event's data kept from each end.
pub const KEPT: usize = 256;

/// An incremental `text/event-stream` parser.
#[derive(Debug)]
pub struct Parser {
    /// The current line, not yet terminated.
    line: Vec<u8>,
    /// A `\r` ended the last line: a `\n` right after it belongs to the same line break.
    after_cr: bool,
    event: Event,
    has_data: bool,
    data_len: usize,
    last_id: Option<String>,
    retry_ms: Option<u64>,
    /// Largest data accepted whole.
    max: usize,
    /// How many bytes of a leading byte order mark were seen; [`PAST_START`] once the
    /// stream's first bytes are known not to be one (or it was dropped).
    bom: u8,
}

/// UTF-8's byte order mark, which the standard drops when a stream starts with it.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];
const PAST_START: u8 = u8::MAX;

impl Parser {
    /// A parser that keeps events of at most `max` bytes of data whole.
    pub fn new(max: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            event: Event::default(),
            has_data: false,
            data_len: 0,
            last_id: None,
            retry_ms: None,
            max,
            bom: 0,
        }
    }

    /// A parser for a stream picked up again after event `last_id`, keeping its retry delay.
    pub fn resumed(last_id: &str, retry_ms: Option<u64>, max: usize) -> Self {
        let mut p = Self::new(max);
        p.last_id = Some(last_id.to_owned());
        p.retry_ms = retry_ms;
        p
    }

    /// The id of the last event, for `Last-Event-ID` when reconnecting.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection delay the server asked for, if it did.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Feeds bytes; calls `each` for every event they complete.
    pub fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(Event)) {
        for &b in bytes {
            if self.bom != PAST_START {
                let seen = usize::from(self.bom);
                if b == BOM[seen] {
                    self.bom = if seen + 1 == BOM.len() {
                        PAST_START
                    } else {
                        self.bom + 1
                    };
                    continue;
                }
                // Not a byte order mark after all: what was held back is the line's start.
                self.bom = PAST_START;
                for &held in &BOM[..seen] {
                    self.byte(held, &mut each);
                }
            }
            self.byte(b, &mut each);
        }
    }

    fn byte(&mut self, b: u8, each: &mut impl FnMut(Event)) {
        match b {
            b'\n' if self.after_cr => self.after_cr = false,
            b'\n' | b'\r' => {
                self.after_cr = b == b'\r';
                let line = std::mem::take(&mut self.line);
                if let Some(event) = self.end_line(&line) {
                    each(event);
                }
                self.line = line;
                self.line.clear();
            }
            _ => {
                self.after_cr = false;
                self.line.push(b);
            }
        }
    }

    fn end_line(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => self.event.kind = value.into_owned(),
            b"data" => self.push_data(&value),
            // An id holding NUL is ignored, as the standard says.
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            // ASCII digits only, as the standard says: `parse` alone would take a `+` sign.
            // A delay too large to hold is the largest one.
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry_ms = Some(value.parse().unwrap_or(u64::MAX));
            }
            _ => {}
        }
        None
    }

    fn push_data(&mut self, value: &str) {
        let sep = if self.has_data { "\n" } else { "" };
        let before = self.data_len;
        self.has_data = true;
        self.data_len += sep.len() + value.len();
        if self.data_len <= self.max {
            self.event.data.push_str(sep);
            self.event.data.push_str(value);
            return;
        }
        let tail = &mut self.event.tail;
        let data = &mut self.event.data;
        if before <= self.max {
            // The limit is passed now: the last bytes so far start the tail, and the start is
            // kept as it is, up to KEPT bytes.
            let from = ceil_char_boundary(data, data.len().saturating_sub(KEPT));
            tail.push_str(&data[from..]);
            data.truncate(floor_char_boundary(data, KEPT.min(data.len())));
        }
        // While the kept start is all the data so far, it grows up to KEPT bytes (a limit
        // below KEPT is passed before that many arrived).
        if data.len() == before {
            let room = KEPT.saturating_sub(data.len());
            data.push_str(&sep[..room.min(sep.len())]);
            let room = KEPT.saturating_sub(data.len());
            data.push_str(&value[..floor_char_boundary(value, room.min(value.len()))]);
        }
        tail.push_str(sep);
        let from = ceil_char_boundary(value, value.len().saturating_sub(2 * KEPT));
        tail.push_str(&value[from..]);
        if tail.len() > 2 * KEPT {
            let cut = ceil_char_boundary(tail, tail.len() - KEPT);
            tail.drain(..cut);
        }
    }

    fn dispatch(&mut self) -> Option<Event> {
        if !self.has_data {
            self.event.kind.clear();
            return None;
        }
        let mut event = std::mem::take(&mut self.event);
        if event.kind.is_empty() {
            event.kind.push_str("message");
        }
        event.id.clone_from(&self.last_id);
        if self.data_len > self.max {
            event.oversize = Some(self.data_len);
            let keep = ceil_char_boundary(&event.tail, event.tail.len().saturating_sub(KEPT));
            event.tail.drain(..keep);
        }
        self.has_data = false;
        self.data_len = 0;
        Some(event)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Appends one event to `out`: `id` and `event` fields when given, the data (a JSON message,
/// which holds no line break), and the blank line that ends it.
pub fn write_event(out: &mut Vec<u8>, id: Option<&str>, kind: Option<&str>, data: &[u8]) {
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    if let Some(kind) = kind {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]], max: usize) -> (Vec<Event>, Parser) {
        let mut p = Parser::new(max);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |e| out.push(e));
        }
        (out, p)
    }

    #[test]
    fn events_across_any_chunking_and_line_ending() {
        let text = b": keep-alive\r\nid: 7\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nretry: 250\rdata:x\r\rdata: y\n\n";
        for size in [1, 2, 3, 5, 100] {
            let chunks: Vec<&[u8]> = text.chunks(size).collect();
            let (events, p) = parse(&chunks, 1 << 20);
            assert_eq!(events.len(), 3, "chunk {size}: {events:?}");
            assert_eq!(events[0].kind, "message");
            assert_eq!(events[0].data, "{\"a\":\n1}");
            assert_eq!(events[0].id.as_deref(), Some("7"));
            assert_eq!(events[1].data, "x");
            assert_eq!(events[1].id.as_deref(), Some("7"), "ids carry over");
            assert_eq!(events[2].data, "y");
            assert_eq!(p.retry_ms(), Some(250));
        }
    }

    #[test]
    fn named_events_and_empty_ones() {
        let (events, _) = parse(
            &[b"event: endpoint\ndata: /messages?sessionId=1\n\nevent: x\n\n"],
            1024,
        );
        assert_eq!(events.len(), 1, "an event without data is not dispatched");
        assert_eq!(events[0].kind, "endpoint");
        assert_eq!(events[0].data, "/messages?sessionId=1");
        assert_eq!(events[0].id, None);
    }

    #[test]
    fn oversize_data_keeps_its_ends() {
        let big = format!(
            "{{\"id\":3,\"x\":\"{}\",\"jsonrpc\":\"2.0\"}}",
            "z".repeat(5000)
        );
        let text = format!("data: {big}\n\ndata: small\n\n");
        let (events, _) = parse(&[text.as_bytes()], 1000);
        assert_eq!(events[0].oversize, Some(big.len()));
        assert_eq!(events[0].data, &big[..KEPT]);
        assert_eq!(events[0].tail, &big[big.len() - KEPT..]);
        assert_eq!(events[1].data, "small");
        assert_eq!(events[1].oversize, None);
    }

    #[test]
    fn oversize_data_over_many_lines_keeps_its_ends() {
        let text = format!(
            "data: {}\ndata: {}\ndata: end\n\n",
            "a".repeat(200),
            "b".repeat(900)
        );
        let (events, _) = parse(&[text.as_bytes()], 1000);
        let whole = format!("{}\n{}\nend", "a".repeat(200), "b".repeat(900));
        assert_eq!(events[0].oversize, Some(whole.len()));
        assert_eq!(events[0].data, &whole[..KEPT]);
        assert_eq!(events[0].tail, &whole[whole.len() - KEPT..]);
    }

    /// The event-stream rules take `retry` only when its value is ASCII digits; Rust's
    /// integer parsing also takes a leading `+`, so `retry: +5` set a delay.
    #[test]
    fn one_byte_order_mark_at_the_start_is_dropped_even_split() {
        let stream: &[u8] = b"\xEF\xBB\xBFevent: endpoint\ndata: /messages\n\n";
        for at in 0..4 {
            let (events, _) = parse(&[&stream[..at], &stream[at..]], 1024);
            assert_eq!(events.len(), 1, "split at {at}");
            assert_eq!(
                (events[0].kind.as_str(), events[0].data.as_str()),
                ("endpoint", "/messages")
            );
        }
        // Only at the start, and only one; a partial mark is the line's own bytes.
        let (events, _) = parse(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"], 1024);
        assert!(events.is_empty(), "the second mark makes an unknown field");
        let (events, _) = parse(&[b"\xEFdata: x\n\ndata: y\n\n"], 1024);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "y");
    }

    #[test]
    fn retry_is_digits_only() {
        let (_, p) = parse(&[b"retry: +5\nretry: -1\nretry: 1e3\nretry:\n\n"], 100);
        assert_eq!(p.retry_ms(), None);
        let (_, p) = parse(&[b"retry: 250\nretry: +5\n"], 100);
        assert_eq!(p.retry_ms(), Some(250), "an ignored field changes nothing");
        let (_, p) = parse(&[b"retry: 99999999999999999999999\n"], 100);
        assert_eq!(p.retry_ms(), Some(u64::MAX));
    }

    /// Found by the sse fuzz target: under a limit below KEPT, the kept start of an oversize
    /// event stopped at the data line that passed the limit, though later lines had room.
    #[test]
    fn a_small_limit_keeps_the_start_across_data_lines() {
        let (events, _) = parse(&[b"data: 0123456789\ndata: abc\n\n"], 8);
        assert_eq!(events[0].oversize, Some(14));
        assert_eq!(events[0].data, "0123456789\nabc");
        assert_eq!(events[0].tail, "0123456789\nabc");
    }

    #[test]
    fn written_events_parse_back() {
        let mut out = Vec::new();
        write_event(&mut out, Some("0-4"), Some("message"), b"{\"x\":1}");
        let (events, p) = parse(&[&out], 100);
        assert_eq!(events[0].data, "{\"x\":1}");
        assert_eq!(p.last_id(), Some("0-4"));
    }
}
