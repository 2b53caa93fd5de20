//! `sse::Parser`: fed the stream in pieces the fuzzer chooses, it yields exactly the events
//! (and the last id and retry delay) it yields when fed the stream whole, and both are what
//! a reference reading of the WHATWG event-stream rules gives, with the parser's size limit
//! applied to each event's data (its first and last bytes kept, at character boundaries).

use manifold_protocol::sse::{Event, Parser, KEPT};

use crate::input::{pieces, Input};

pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let max = usize::from(input.byte()) * 4;
    let lengths = input.chunks();
    let stream = input.rest();

    let whole = run(&[stream], max);
    let split = run(&pieces(stream, &lengths), max);
    assert_eq!(split, whole, "split at {lengths:?}");
    assert_eq!(
        whole,
        reference(stream, max),
        "against the reference reading"
    );
}

/// Events, then the last id and the retry delay, as the parser gives them.
type Outcome = (Vec<Event>, Option<String>, Option<u64>);

fn run(chunks: &[&[u8]], max: usize) -> Outcome {
    let mut parser = Parser::new(max);
    let mut events = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, |e| events.push(e));
    }
    let last_id = parser.last_id().map(str::to_owned);
    (events, last_id, parser.retry_ms())
}

/// The stream read by the standard's rules, line by line (a line ends at CRLF, LF or CR;
/// what follows the last line break is discarded at the end of the stream; one UTF-8 byte
/// order mark at the very start is dropped).
fn reference(stream: &[u8], max: usize) -> Outcome {
    let stream = stream
        .strip_prefix(&[0xEF, 0xBB, 0xBF][..])
        .unwrap_or(stream);
    let mut state = Reference::default();
    let mut line = Vec::new();
    let mut i = 0;
    while i < stream.len() {
        match stream[i] {
            b'\r' | b'\n' => {
                if stream[i] == b'\r' && stream.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                state.line(&line, max);
                line.clear();
            }
            b => line.push(b),
        }
        i += 1;
    }
    (state.events, state.last_id, state.retry)
}

#[derive(Default)]
struct Reference {
    events: Vec<Event>,
    kind: String,
    /// The data lines so far, or `None` before the first.
    data: Option<String>,
    last_id: Option<String>,
    retry: Option<u64>,
}

impl Reference {
    fn line(&mut self, line: &[u8], max: usize) {
        if line.is_empty() {
            return self.dispatch(max);
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value.strip_prefix(b" ").unwrap_or(value));
        match field {
            b"event" => self.kind = value.into_owned(),
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            // "If the field value consists of only ASCII digits": anything else, a sign
            // included, is ignored. A number too large for the delay saturates.
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = Some(value.parse().unwrap_or(u64::MAX));
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, max: usize) {
        let kind = std::mem::take(&mut self.kind);
        let Some(full) = self.data.take() else { return };
        let mut event = Event {
            kind: if kind.is_empty() {
                "message".into()
            } else {
                kind
            },
            id: self.last_id.clone(),
            ..Event::default()
        };
        if full.len() <= max {
            event.data = full;
        } else {
            event.oversize = Some(full.len());
            event.data = longest_prefix(&full, KEPT).to_owned();
            event.tail = longest_suffix(&full, KEPT).to_owned();
        }
        self.events.push(event);
    }
}

/// The longest prefix of `s` of at most `n` bytes that ends on a character boundary.
fn longest_prefix(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest suffix of `s` of at most `n` bytes that starts on a character boundary.
fn longest_suffix(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}
