//! HTTP/1.1 responses read off a keep-alive connection, and SSE bodies split into the data of
//! their events. Only what a Streamable HTTP host needs: the status, the headers that frame
//! the body (`Content-Length`, chunked `Transfer-Encoding`, `Connection: close`), its type and
//! the session id. The floor server reads its requests with the same reader (heads and
//! `Content-Length` bodies only). Written by hand over a blocking reader so that a request costs the client
//! one write, a few reads and no allocation once the buffers have grown, and so that every
//! read is bounded by the socket's timeout rather than by a library's idea of one.

use std::io::{self, Read};

use anyhow::{bail, Context, Result};

/// Longest head (status line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest body accepted: a runaway server must not eat the machine's memory.
const MAX_BODY: usize = 256 * 1024 * 1024;
const INITIAL: usize = 16 * 1024;

/// What a response's head says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub content_length: Option<usize>,
    pub chunked: bool,
    /// The server closes the connection after this response.
    pub close: bool,
    /// `Content-Type: text/event-stream`.
    pub event_stream: bool,
    /// `Mcp-Session-Id`, when present (only the answer to `initialize` carries it).
    pub session: Option<String>,
}

/// A buffered reader of the messages on one connection.
pub struct HttpReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl<R: Read> HttpReader<R> {
    pub fn new(src: R) -> Self {
        Self {
            src,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.src
    }

    /// Reads one response: its head, and its body appended to `body`.
    pub fn read(&mut self, body: &mut Vec<u8>) -> Result<Head> {
        let head = self.head()?;
        // 1xx, 204 and 304 have no body whatever their headers say (RFC 9112, 6.3).
        if head.status < 200 || head.status == 204 || head.status == 304 {
            return Ok(head);
        }
        if head.chunked {
            self.chunked(body)?;
        } else if let Some(len) = head.content_length {
            if len > MAX_BODY {
                bail!("a body of {len} bytes is over the limit");
            }
            self.exact(len, body)?;
        } else if head.close {
            self.until_closed(body)?;
        } else {
            bail!("a response with neither Content-Length nor chunked coding on a kept connection");
        }
        Ok(head)
    }

    fn head(&mut self) -> Result<Head> {
        let Some(text) = self.raw_head()? else {
            bail!("the server closed the connection");
        };
        let head = parse_head(text)?;
        self.start += text.len() + 4;
        Ok(head)
    }

    /// Reads one request with a `Content-Length` body (or none) into `body`; returns its
    /// request line, or `None` when the client closed the connection between requests.
    pub fn read_request(&mut self, body: &mut Vec<u8>) -> Result<Option<String>> {
        let Some(text) = self.raw_head()? else {
            return Ok(None);
        };
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or("").to_owned();
        let mut len = 0;
        for line in lines {
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    len = value.trim().parse().context("bad Content-Length")?;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    bail!("chunked requests are not read here");
                }
            }
        }
        self.start += text.len() + 4;
        if len > MAX_BODY {
            bail!("a request body of {len} bytes is over the limit");
        }
        self.exact(len, body)?;
        Ok(Some(request_line))
    }

    /// The next head, without its final CRLF CRLF (not consumed); `None` if the connection
    /// ended cleanly before it.
    fn raw_head(&mut self) -> Result<Option<&str>> {
        // Bounded: each pass finds the end of the head or reads at least one byte into a
        // buffer that may not grow past MAX_HEAD.
        let end = loop {
            if let Some(i) = memchr::memmem::find(&self.buf[self.start..self.end], b"\r\n\r\n") {
                break self.start + i;
            }
            if self.end - self.start >= MAX_HEAD {
                bail!("head longer than {MAX_HEAD} bytes");
            }
            if self.fill()? == 0 {
                if self.start == self.end {
                    return Ok(None);
                }
                bail!("the connection ended in a head");
            }
        };
        let text = std::str::from_utf8(&self.buf[self.start..end]).context("head is not UTF-8")?;
        Ok(Some(text))
    }

    /// Appends `n` bytes of body.
    fn exact(&mut self, mut n: usize, out: &mut Vec<u8>) -> Result<()> {
        let have = (self.end - self.start).min(n);
        out.extend_from_slice(&self.buf[self.start..self.start + have]);
        self.start += have;
        n -= have;
        if n > 0 {
            // Straight into the caller's buffer: a large body is not copied twice.
            let at = out.len();
            out.resize(at + n, 0);
            self.src
                .read_exact(&mut out[at..])
                .context("the connection ended in a response body")?;
        }
        Ok(())
    }

    fn chunked(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let mut total = 0usize;
        // Bounded: every chunk is at least one byte, and the body at most MAX_BODY.
        loop {
            let line = self.line()?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .with_context(|| format!("bad chunk size {line:?}"))?;
            if size == 0 {
                // Trailers, if any, end at an empty line.
                for _ in 0..1000 {
                    if self.line()?.is_empty() {
                        return Ok(());
                    }
                }
                bail!("more than 1000 trailer lines");
            }
            total += size;
            if total > MAX_BODY {
                bail!("a chunked body over {MAX_BODY} bytes");
            }
            self.exact(size, out)?;
            if !self.line()?.is_empty() {
                bail!("a chunk not followed by CRLF");
            }
        }
    }

    /// The next line (without CRLF) of chunk framing.
    fn line(&mut self) -> Result<String> {
        let end = loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                break self.start + i;
            }
            if self.end - self.start >= MAX_HEAD {
                bail!("a chunk-size line longer than {MAX_HEAD} bytes");
            }
            if self.fill()? == 0 {
                bail!("the connection ended in chunked framing");
            }
        };
        let line = String::from_utf8_lossy(&self.buf[self.start..end])
            .trim_end_matches('\r')
            .to_owned();
        self.start = end + 1;
        Ok(line)
    }

    fn until_closed(&mut self, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(&self.buf[self.start..self.end]);
        self.start = self.end;
        let mut limited = (&mut self.src).take(MAX_BODY as u64);
        limited
            .read_to_end(out)
            .context("reading a body framed by the end of the connection")?;
        Ok(())
    }

    /// Reads more bytes after `end`, moving unconsumed bytes to the front or growing first.
    fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self.src.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }
}

fn parse_head(text: &str) -> Result<Head> {
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1.x response: {status_line:?}");
    }
    let mut head = Head {
        status: code
            .parse()
            .with_context(|| format!("bad status line {status_line:?}"))?,
        // HTTP/1.0 closes unless told otherwise; this client never asks it not to.
        close: version == "HTTP/1.0",
        ..Head::default()
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            bail!("bad header line {line:?}");
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value
                    .parse()
                    .with_context(|| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            head.close = value
                .split(',')
                .any(|v| v.trim().eq_ignore_ascii_case("close"));
        } else if name.eq_ignore_ascii_case("content-type") {
            head.event_stream = value
                .split(';')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"));
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            head.session = Some(value.to_owned());
        }
    }
    Ok(head)
}

/// Splits an SSE body into the data of its events, appended to `out`; returns each event's
/// range in `out`. Data lines of one event are joined by `\n`; events without data (comments,
/// keep-alives, retry hints) are skipped. Lines end in `\n` or `\r\n`.
pub fn sse_events(body: &[u8], out: &mut Vec<u8>, ranges: &mut Vec<(usize, usize)>) {
    let mut event: Option<usize> = None;
    let mut lines = body.split(|&b| b == b'\n').peekable();
    while let Some(raw) = lines.next() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        let last = lines.peek().is_none();
        if line.is_empty() {
            if let Some(from) = event.take() {
                ranges.push((from, out.len()));
            }
            continue;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            match event {
                Some(_) => out.push(b'\n'),
                None => event = Some(out.len()),
            }
            out.extend_from_slice(value);
        }
        // An event is dispatched at a blank line; a stream that ends without one still ends
        // the event (the server closed the stream after it).
        if last {
            if let Some(from) = event.take() {
                ranges.push((from, out.len()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its input a few bytes at a time, like a socket under load.
    struct Trickle(Vec<u8>, usize);

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = out.len().min(5).min(self.0.len() - self.1);
            out[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    fn responses(text: &str) -> HttpReader<Trickle> {
        HttpReader::new(Trickle(text.as_bytes().to_vec(), 0))
    }

    #[test]
    fn reads_length_and_chunked_bodies_on_one_connection() {
        let mut r = responses(concat!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nMcp-Session-Id: ab12\r\n",
            "content-length: 7\r\n\r\n{\"a\":1}",
            "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
            "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
        ));
        let mut body = Vec::new();
        let head = r.read(&mut body).unwrap();
        assert_eq!((head.status, head.session.as_deref()), (200, Some("ab12")));
        assert!(!head.event_stream && !head.close);
        assert_eq!(body, b"{\"a\":1}");
        body.clear();
        assert_eq!(r.read(&mut body).unwrap().status, 202);
        assert!(body.is_empty());
        let head = r.read(&mut body).unwrap();
        assert!(head.chunked && head.event_stream);
        assert_eq!(body, b"hello world");
        body.clear();
        assert_eq!(r.read(&mut body).unwrap().status, 204);
        let err = r.read(&mut body).unwrap_err().to_string();
        assert!(err.contains("closed the connection"), "{err}");
    }

    #[test]
    fn large_bodies_and_close_framing() {
        let big = "x".repeat(INITIAL * 3);
        let text = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{big}",
            big.len()
        );
        let mut body = Vec::new();
        responses(&text).read(&mut body).unwrap();
        assert_eq!(body.len(), big.len());
        let mut body = Vec::new();
        let head = responses("HTTP/1.0 500 Oops\r\n\r\nit broke")
            .read(&mut body)
            .unwrap();
        assert!(head.close);
        assert_eq!((head.status, body.as_slice()), (500, &b"it broke"[..]));
        assert!(responses("HTTP/1.1 200 OK\r\n\r\n")
            .read(&mut body)
            .is_err());
        assert!(responses("SSH-2.0\r\n\r\n").read(&mut body).is_err());
    }

    #[test]
    fn reads_requests() {
        let mut r = responses(concat!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}",
            "GET /healthz HTTP/1.1\r\n\r\n",
        ));
        let mut body = Vec::new();
        let line = r.read_request(&mut body).unwrap();
        assert_eq!(
            (line.as_deref(), body.as_slice()),
            (Some("POST /mcp HTTP/1.1"), &b"{}"[..])
        );
        body.clear();
        assert_eq!(
            r.read_request(&mut body).unwrap().as_deref(),
            Some("GET /healthz HTTP/1.1")
        );
        assert!(body.is_empty());
        assert_eq!(r.read_request(&mut body).unwrap(), None);
    }

    #[test]
    fn splits_sse_events() {
        let body = b"id: 1-0\nevent: message\ndata: {\"x\":1}\n\n: keep-alive\n\nretry: 10\n\r\ndata:a\r\ndata: b\r\n\r\ndata: last";
        let (mut out, mut ranges) = (Vec::new(), Vec::new());
        sse_events(body, &mut out, &mut ranges);
        let events: Vec<&[u8]> = ranges.iter().map(|&(a, b)| &out[a..b]).collect();
        assert_eq!(events, [&b"{\"x\":1}"[..], b"a\nb", b"last"]);
    }
}
