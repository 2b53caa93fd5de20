//! Newline-delimited framing (MCP's stdio transport) over a reusable buffer, with a size
//! limit. The caller reads bytes into the buffer with `read_with`, then takes frames.

/// One framing result.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete line without its terminator (`\n` or `\r\n`). May be empty.
    Line(&'a [u8]),
    /// A line longer than the limit was dropped whole; `len` is its length. Its first and
    /// last [`KEPT`] bytes are kept, so that the id of the message can often still be read
    /// (see [`crate::envelope::id_of_fragments`]). The next frame starts after its terminator.
    Oversize {
        len: usize,
        head: &'a [u8],
        tail: &'a [u8],
    },
}

/// How many bytes of each end of an oversize line are kept.
pub const KEPT: usize = 256;

/// A read buffer that yields lines and skips lines over `max` bytes without storing them.
#[derive(Debug)]
pub struct LineBuffer {
    /// Always fully initialized; bytes `start..end` are unconsumed input.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// `start..scanned` is known to hold no newline.
    scanned: usize,
    /// While dropping an oversize line: how many of its bytes were dropped so far.
    skipping: Option<usize>,
    /// The first bytes of the line being dropped, then of the last one dropped.
    head: Vec<u8>,
    /// The last bytes seen of the line being dropped (at most `2 * KEPT + 2`, trimmed to `KEPT`
    /// when the frame is handed out).
    tail: Vec<u8>,
    max: usize,
}

const MIN_READ: usize = 64 * 1024;

impl LineBuffer {
    /// A buffer for lines of at most `max` bytes (terminator excluded).
    pub fn new(max: usize) -> Self {
        Self {
            buf: vec![0; MIN_READ],
            start: 0,
            end: 0,
            scanned: 0,
            skipping: None,
            head: Vec::with_capacity(KEPT),
            tail: Vec::with_capacity(2 * KEPT),
            max,
        }
    }

    /// Reads once into free space with `read`, which returns how many bytes it wrote
    /// (0 at end of input). Returns that count.
    pub fn read_with<E>(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.make_room();
        let n = read(&mut self.buf[self.end..])?;
        self.end += n.min(self.buf.len() - self.end);
        Ok(n)
    }

    fn make_room(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            self.scanned = 0;
        }
        if self.buf.len() - self.end >= MIN_READ / 4 {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.scanned -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < MIN_READ / 4 {
            let grown = (self.buf.len() * 2).min(self.max.saturating_add(2 * MIN_READ));
            self.buf.resize(grown.max(self.end + MIN_READ), 0);
        }
    }

    /// The next complete frame, if the buffer holds one.
    pub fn next_frame(&mut self) -> Option<Frame<'_>> {
        if let Some(dropped) = self.skipping {
            let Some(pos) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) else {
                self.keep_ends(self.start, self.end);
                self.skipping = Some(dropped + (self.end - self.start));
                self.start = self.end;
                self.scanned = self.end;
                return None;
            };
            self.keep_ends(self.start, self.start + pos);
            self.skipping = None;
            self.start += pos + 1;
            self.scanned = self.start;
            return Some(self.oversize(dropped + pos));
        }
        let Some(pos) = memchr::memchr(b'\n', &self.buf[self.scanned..self.end]) else {
            self.scanned = self.end;
            if self.surely_over(self.start, self.end) {
                self.begin_skip(self.start, self.end);
                self.skipping = Some(self.end - self.start);
                self.start = self.end;
            }
            return None;
        };
        let line_start = self.start;
        let line_end = self.scanned + pos;
        self.start = line_end + 1;
        self.scanned = self.start;
        if trim_cr(&self.buf[line_start..line_end]).len() > self.max {
            self.begin_skip(line_start, line_end);
            return Some(self.oversize(line_end - line_start));
        }
        Some(Frame::Line(trim_cr(&self.buf[line_start..line_end])))
    }

    /// Whether the unterminated line in `buf[from..to]` is over the limit whatever follows:
    /// a last `\r` may yet turn out to be part of its terminator, which does not count.
    fn surely_over(&self, from: usize, to: usize) -> bool {
        let len = to - from;
        len > self.max && (len - 1 > self.max || self.buf[to - 1] != b'\r')
    }

    /// Keeps the first and last bytes of `buf[from..to]`, the start of an oversize line.
    fn begin_skip(&mut self, from: usize, to: usize) {
        self.head.clear();
        self.tail.clear();
        self.keep_ends(from, to);
    }

    /// Adds `buf[from..to]`, the next bytes of the line being dropped, to its kept ends. The
    /// head fills up across reads: a small limit can be passed before `KEPT` bytes arrived.
    fn keep_ends(&mut self, from: usize, to: usize) {
        let room = KEPT.saturating_sub(self.head.len());
        self.head
            .extend_from_slice(&self.buf[from..to.min(from.saturating_add(room))]);
        self.keep_tail(from, to);
    }

    /// Appends `buf[from..to]` to the kept tail, keeping only its last bytes.
    fn keep_tail(&mut self, from: usize, to: usize) {
        // One byte more than is handed out: a `\r` before the newline is not part of the line.
        let keep = KEPT + 1;
        let from = from.max(to.saturating_sub(keep));
        if self.tail.len() + (to - from) > 2 * keep {
            let drop = self.tail.len() + (to - from) - keep;
            self.tail.drain(..drop.min(self.tail.len()));
        }
        self.tail.extend_from_slice(&self.buf[from..to]);
    }

    /// The frame of a dropped line of `raw_len` bytes up to its newline: a `\r` before the
    /// newline is the terminator's, and counts neither in its length nor in its ends.
    fn oversize(&self, raw_len: usize) -> Frame<'_> {
        let cr = usize::from(self.tail.last() == Some(&b'\r'));
        let len = raw_len - cr;
        let tail = trim_cr(&self.tail);
        Frame::Oversize {
            len,
            head: &self.head[..self.head.len().min(len)],
            tail: &tail[tail.len().saturating_sub(KEPT)..],
        }
    }

    /// At end of input: the unterminated last line, if any bytes remain (a last `\r` is
    /// dropped, as before a newline).
    pub fn take_rest(&mut self) -> Option<Frame<'_>> {
        if let Some(dropped) = self.skipping.take() {
            let len = dropped + (self.end - self.start);
            self.keep_ends(self.start, self.end);
            self.start = self.end;
            return Some(self.oversize(len));
        }
        if self.start == self.end {
            return None;
        }
        let (s, e) = (self.start, self.end);
        self.start = self.end;
        self.scanned = self.end;
        if trim_cr(&self.buf[s..e]).len() > self.max {
            self.begin_skip(s, e);
            return Some(self.oversize(e - s));
        }
        Some(Frame::Line(trim_cr(&self.buf[s..e])))
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in chunks of `chunk` bytes and collects every frame.
    fn frames(input: &[u8], chunk: usize, max: usize) -> Vec<Result<String, usize>> {
        let mut lb = LineBuffer::new(max);
        let mut out = Vec::new();
        let mut rest = input;
        loop {
            let n = lb
                .read_with(|spare| {
                    let n = chunk.min(rest.len()).min(spare.len());
                    spare[..n].copy_from_slice(&rest[..n]);
                    Ok::<_, ()>(n)
                })
                .unwrap();
            rest = &rest[n..];
            while let Some(f) = lb.next_frame() {
                out.push(conv(f));
            }
            if n == 0 {
                if let Some(f) = lb.take_rest() {
                    out.push(conv(f));
                }
                return out;
            }
        }
    }

    fn conv(f: Frame<'_>) -> Result<String, usize> {
        match f {
            Frame::Line(l) => Ok(String::from_utf8(l.to_vec()).unwrap()),
            Frame::Oversize { len, .. } => Err(len),
        }
    }

    #[test]
    fn splits_lines_across_any_chunking() {
        let input = b"{\"a\":1}\r\n\n{\"b\":2}\nlast";
        for chunk in [1, 2, 3, 7, 100] {
            assert_eq!(
                frames(input, chunk, 1024),
                vec![
                    Ok("{\"a\":1}".into()),
                    Ok(String::new()),
                    Ok("{\"b\":2}".into()),
                    Ok("last".into())
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn drops_oversize_lines_whole_and_keeps_going() {
        let mut input = b"ok1\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend(b"\nok2\n");
        for chunk in [1, 10, 4096, 100_000] {
            assert_eq!(
                frames(&input, chunk, 100),
                vec![Ok("ok1".into()), Err(5000), Ok("ok2".into())],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn handles_lines_larger_than_the_initial_buffer() {
        let big = "y".repeat(300_000);
        let input = format!("{big}\nz\n");
        assert_eq!(
            frames(input.as_bytes(), 50_000, 1 << 20),
            vec![Ok(big), Ok("z".into())]
        );
    }

    #[test]
    fn oversize_lines_keep_their_first_and_last_bytes() {
        let line = format!("{{\"id\":1,\"x\":\"{}\",\"end\":2}}", "y".repeat(5000));
        let input = format!("{line}\r\nnext\n");
        for chunk in [1, 7, 300, 4096, 100_000] {
            let mut lb = LineBuffer::new(1024);
            let mut rest = input.as_bytes();
            let mut kept = None;
            while kept.is_none() {
                let n = lb
                    .read_with(|spare| {
                        let n = chunk.min(rest.len()).min(spare.len());
                        spare[..n].copy_from_slice(&rest[..n]);
                        Ok::<_, ()>(n)
                    })
                    .unwrap();
                rest = &rest[n..];
                assert!(n > 0, "chunk {chunk}: no frame");
                if let Some(Frame::Oversize { len, head, tail }) = lb.next_frame() {
                    kept = Some((len, head.to_vec(), tail.to_vec()));
                }
            }
            let (len, head, tail) = kept.unwrap();
            let b = line.as_bytes();
            assert_eq!(len, b.len(), "chunk {chunk}: the \\r is the terminator's");
            assert_eq!(head, &b[..KEPT], "chunk {chunk}");
            assert_eq!(tail, &b[b.len() - KEPT..], "chunk {chunk}");
        }
    }

    /// Reported by earlier fuzzing and confirmed by the line_buffer target (`\r\n` under a
    /// limit of 0): the `\r` of a CRLF terminator counted towards the limit, so a line of
    /// exactly the limit was dropped when it ended in `\r\n`.
    #[test]
    fn a_crlf_line_of_exactly_max_is_accepted() {
        for chunk in [1, 2, 3, 5, 100] {
            assert_eq!(
                frames(b"abcd\r\nabcde\r\n\r\nabcd\r", chunk, 4),
                vec![
                    Ok("abcd".into()),
                    Err(5),
                    Ok(String::new()),
                    Ok("abcd".into())
                ],
                "chunk {chunk}"
            );
        }
        assert_eq!(frames(b"\r\n", 1, 0), vec![Ok(String::new())]);
    }

    /// Found by fuzzing (limit 0, the line `\0\0\0` read a byte at a time): under a limit
    /// smaller than `KEPT`, the head of an oversize line held only the bytes read before the
    /// limit was passed.
    #[test]
    fn a_small_limit_keeps_the_whole_head_across_reads() {
        let line = b"{\"id\":7,\"x\":1}";
        for chunk in [1, 2, 3, 100] {
            let mut lb = LineBuffer::new(2);
            let mut kept = None;
            for piece in line.chunks(chunk).chain([&b"\r\n"[..]]) {
                lb.read_with(|spare| {
                    spare[..piece.len()].copy_from_slice(piece);
                    Ok::<_, ()>(piece.len())
                })
                .unwrap();
                if let Some(Frame::Oversize { len, head, tail }) = lb.next_frame() {
                    kept = Some((len, head.to_vec(), tail.to_vec()));
                }
            }
            assert_eq!(
                kept,
                Some((line.len(), line.to_vec(), line.to_vec())),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_line_of_exactly_max_is_accepted() {
        assert_eq!(
            frames(b"abcd\nabcde\n", 3, 4),
            vec![Ok("abcd".into()), Err(5)]
        );
    }
}
