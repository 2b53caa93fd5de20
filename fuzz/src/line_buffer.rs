//! `LineBuffer`: fed the input in reads of the sizes the fuzzer chooses, it gives exactly
//! the frames a model of newline framing gives: lines split at `\n`, one `\r` before it
//! dropped, the unterminated rest a line of its own at the end, and a line longer than the
//! limit (terminator excluded) replaced by its length and its first and last `KEPT` bytes.

use manifold_protocol::framing::{Frame, LineBuffer, KEPT};

use crate::input::{pieces, Input};

/// A frame, owned.
#[derive(Debug, PartialEq, Eq)]
enum Owned {
    Line(Vec<u8>),
    Oversize {
        len: usize,
        head: Vec<u8>,
        tail: Vec<u8>,
    },
}

pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    // Limits around the kept ends matter most; a few are far larger than any input here.
    let max = match input.byte() {
        b @ 0..=239 => usize::from(b) * 3,
        b => usize::from(b) << 12,
    };
    let lengths: Vec<usize> = input.chunks().into_iter().filter(|&l| l > 0).collect();
    let stream = input.rest();

    let expected = model(stream, max);
    assert_eq!(run(&[stream], max), expected, "fed whole, limit {max}");
    let split = pieces(stream, &lengths);
    assert_eq!(
        run(&split, max),
        expected,
        "split at {lengths:?}, limit {max}"
    );
}

/// Feeds `chunks` one read each (a read may take less than offered when the buffer's free
/// space is smaller; the rest waits for the next read) and collects every frame.
fn run(chunks: &[&[u8]], max: usize) -> Vec<Owned> {
    let mut lb = LineBuffer::new(max);
    let mut out = Vec::new();
    for chunk in chunks {
        let mut rest = *chunk;
        while !rest.is_empty() {
            let read = lb.read_with(|spare| {
                let n = rest.len().min(spare.len());
                spare[..n].copy_from_slice(&rest[..n]);
                Ok::<_, ()>(n)
            });
            let n = read.unwrap_or_default();
            rest = &rest[n..];
            while let Some(frame) = lb.next_frame() {
                out.push(own(frame));
            }
        }
    }
    if let Some(frame) = lb.take_rest() {
        out.push(own(frame));
    }
    out
}

fn own(frame: Frame<'_>) -> Owned {
    match frame {
        Frame::Line(line) => Owned::Line(line.to_vec()),
        Frame::Oversize { len, head, tail } => Owned::Oversize {
            len,
            head: head.to_vec(),
            tail: tail.to_vec(),
        },
    }
}

fn model(stream: &[u8], max: usize) -> Vec<Owned> {
    let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    // Text after the last newline is a line only if there is some.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
        .into_iter()
        .map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.len() <= max {
                return Owned::Line(line.to_vec());
            }
            Owned::Oversize {
                len: line.len(),
                head: line[..KEPT.min(line.len())].to_vec(),
                tail: line[line.len() - KEPT.min(line.len())..].to_vec(),
            }
        })
        .collect()
}
