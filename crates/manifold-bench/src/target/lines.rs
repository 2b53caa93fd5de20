//! Newline framing on top of a blocking reader, with each blocking read reported to the
//! watchdog. Written by hand rather than with `BufRead::read_until` so the reader knows exactly
//! when it is about to block, and so lines are handed out without copying them.

use std::io::{self, Read};

use super::watchdog::Marker;

/// Longest line accepted: a runaway server must not eat the machine's memory.
const MAX_LINE: usize = 256 * 1024 * 1024;
const INITIAL: usize = 64 * 1024;

pub struct LineReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The line handed out by the last successful `advance`.
    line: (usize, usize),
}

impl<R: Read> LineReader<R> {
    pub fn new(src: R) -> Self {
        Self {
            src,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
            line: (0, 0),
        }
    }

    /// The line found by the last `advance` that returned true.
    pub fn line(&self) -> &[u8] {
        &self.buf[self.line.0..self.line.1]
    }

    /// Moves to the next non-blank line (without `\n` or `\r\n`); false at end of stream.
    pub fn advance(&mut self, marker: &mut Marker) -> io::Result<bool> {
        let mut scanned = self.start;
        // Bounded: every pass returns, or reads at least one byte into a buffer that may not
        // grow past MAX_LINE, or meets the end of the stream.
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[scanned..self.end]) {
                let (from, mut to) = (self.start, scanned + i);
                self.start = to + 1;
                scanned = self.start;
                if to > from && self.buf[to - 1] == b'\r' {
                    to -= 1;
                }
                if self.buf[from..to].iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                self.line = (from, to);
                return Ok(true);
            }
            scanned = self.end;
            self.make_room(&mut scanned)?;
            let n = marker.blocking(|| self.src.read(&mut self.buf[self.end..]))?;
            if n == 0 {
                return Ok(false);
            }
            self.end += n;
        }
    }

    /// Ensures there is space after `end`: moves the partial line to the front, or grows.
    fn make_room(&mut self, scanned: &mut usize) -> io::Result<()> {
        if self.start == self.end {
            (self.start, self.end, *scanned) = (0, 0, 0);
        }
        if self.end < self.buf.len() {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            *scanned -= self.start;
            self.end -= self.start;
            self.start = 0;
            return Ok(());
        }
        if self.buf.len() >= MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "line longer than 256 MB",
            ));
        }
        self.buf.resize(self.buf.len() * 2, 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its input a few bytes at a time, like a pipe under load.
    struct Trickle(Vec<u8>, usize);

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = out.len().min(3).min(self.0.len() - self.1);
            out[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn splits_lines_across_reads_and_grows_for_long_ones() {
        let long = "x".repeat(INITIAL * 3);
        let input = format!("a\r\n\n  \nbc\n{long}\ntail-without-newline");
        let mut reader = LineReader::new(Trickle(input.into_bytes(), 0));
        let mut marker = Marker::detached();
        for want in [b"a".as_slice(), b"bc", long.as_bytes()] {
            assert!(reader.advance(&mut marker).unwrap());
            assert_eq!(reader.line(), want);
        }
        assert!(!reader.advance(&mut marker).unwrap());
    }
}
