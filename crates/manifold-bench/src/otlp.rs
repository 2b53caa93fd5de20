//! A minimal OTLP/HTTP trace receiver on 127.0.0.1, so that the `telemetry` scenario can
//! export every span somewhere real and show that it did: HTTP/1.1 with keep-alive, each
//! `POST /v1/traces` body read whole (Content-Length or chunked) and answered `200` with an
//! empty `application/x-protobuf` body (an empty `ExportTraceServiceResponse`: all accepted).
//! It counts requests, body bytes and the spans in each body (a walk over the protobuf
//! fields, nothing decoded into types). Every thread is bounded by the stop flag and the
//! load generator's lifetime limit, and is joined when the sink is dropped.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// Connections accepted at most (the exporter keeps one or two open).
const MAX_CONNECTIONS: usize = 64;
/// Requests served on one connection at most.
const MAX_REQUESTS: u64 = 10_000_000;
/// Largest request head and body accepted.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How often a connection thread waiting for a request looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// The answer to every export: 200, an empty protobuf message.
const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";

/// What the receiver has seen so far.
#[derive(Debug, Default)]
struct Counts {
    connections: AtomicU64,
    /// `POST /v1/traces` requests answered 200.
    requests: AtomicU64,
    /// Their body bytes, as received (compressed, if the exporter compressed).
    bytes: AtomicU64,
    /// Spans in those bodies.
    spans: AtomicU64,
    /// Bodies whose spans could not be counted (compressed, or not an OTLP message).
    uncounted: AtomicU64,
    /// Requests for anything else (answered 404).
    other: AtomicU64,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    pub connections: u64,
    pub requests: u64,
    pub bytes: u64,
    pub spans: u64,
    pub uncounted: u64,
    pub other: u64,
}

impl Received {
    /// What arrived between `before` and `self`.
    pub fn since(self, before: Self) -> Self {
        Self {
            connections: self.connections - before.connections,
            requests: self.requests - before.requests,
            bytes: self.bytes - before.bytes,
            spans: self.spans - before.spans,
            uncounted: self.uncounted - before.uncounted,
            other: self.other - before.other,
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "connections": self.connections,
            "requests": self.requests,
            "bytes": self.bytes,
            "spans": self.spans,
            "uncounted_bodies": self.uncounted,
            "other_requests": self.other,
        })
    }
}

pub struct OtlpSink {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    handlers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl OtlpSink {
    /// Listens on a free port of 127.0.0.1; threads live at most `lifetime`.
    pub fn start(lifetime: Duration) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .context("the OTLP receiver cannot listen on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handlers = Arc::new(Mutex::new(Vec::new()));
        let deadline = Instant::now() + lifetime;
        let acceptor = {
            let (counts, stop, handlers) = (
                Arc::clone(&counts),
                Arc::clone(&stop),
                Arc::clone(&handlers),
            );
            std::thread::Builder::new()
                .name("otlp-accept".into())
                .spawn(move || accept(&listener, &counts, &stop, &handlers, deadline))
                .context("cannot start the OTLP receiver")?
        };
        Ok(Self {
            addr,
            counts,
            stop,
            acceptor: Some(acceptor),
            handlers,
        })
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter adds `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Received {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Received {
            connections: get(&c.connections),
            requests: get(&c.requests),
            bytes: get(&c.bytes),
            spans: get(&c.spans),
            uncounted: get(&c.uncounted),
            other: get(&c.other),
        }
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the acceptor blocked in accept(); it sees the flag and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let handlers =
            std::mem::take(&mut *self.handlers.lock().unwrap_or_else(PoisonError::into_inner));
        // Each returns within `POLL` of the flag.
        for h in handlers {
            let _ = h.join();
        }
    }
}

fn accept(
    listener: &TcpListener,
    counts: &Arc<Counts>,
    stop: &Arc<AtomicBool>,
    handlers: &Mutex<Vec<JoinHandle<()>>>,
    deadline: Instant,
) {
    for _ in 0..MAX_CONNECTIONS {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            return;
        }
        counts.connections.fetch_add(1, Ordering::Relaxed);
        let (counts, stop) = (Arc::clone(counts), Arc::clone(stop));
        let spawned = std::thread::Builder::new()
            .name("otlp-conn".into())
            .spawn(move || {
                let _ = serve(stream, &counts, &stop, deadline);
            });
        if let Ok(h) = spawned {
            handlers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(h);
        }
    }
}

/// One keep-alive connection: requests read whole and answered, until the peer closes it,
/// asks to close it, or the sink stops.
fn serve(
    stream: TcpStream,
    counts: &Counts,
    stop: &AtomicBool,
    deadline: Instant,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut conn = Conn {
        stream,
        buf: Vec::with_capacity(64 * 1024),
        stop,
        deadline,
    };
    for _ in 0..MAX_REQUESTS {
        let Some(head) = conn.head()? else {
            return Ok(());
        };
        let body = conn.body(&head)?;
        let traces = head.method == "POST" && head.path.split('?').next() == Some("/v1/traces");
        if traces {
            counts.requests.fetch_add(1, Ordering::Relaxed);
            counts.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
            let plain = head.encoding.as_deref().is_none_or(|e| e == "identity");
            match count_spans(&body).filter(|_| plain) {
                Some(n) => counts.spans.fetch_add(n, Ordering::Relaxed),
                None => counts.uncounted.fetch_add(1, Ordering::Relaxed),
            };
            conn.stream.write_all(OK)?;
        } else {
            counts.other.fetch_add(1, Ordering::Relaxed);
            conn.stream.write_all(NOT_FOUND)?;
        }
        if head.close {
            return Ok(());
        }
    }
    Ok(())
}

/// What the receiver needs from a request head.
#[derive(Debug, Default, PartialEq)]
struct Head {
    method: String,
    path: String,
    length: Option<usize>,
    chunked: bool,
    encoding: Option<String>,
    close: bool,
}

struct Conn<'a> {
    stream: TcpStream,
    /// Received and not yet consumed.
    buf: Vec<u8>,
    stop: &'a AtomicBool,
    deadline: Instant,
}

impl Conn<'_> {
    /// Reads more; `Ok(false)` at end of stream or when the sink stops.
    fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        // Bounded by the deadline: each pass waits at most `POLL`.
        while Instant::now() < self.deadline {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// The next request's head; `None` when the connection ended between requests.
    fn head(&mut self) -> io::Result<Option<Head>> {
        loop {
            if let Some(end) = memchr::memmem::find(&self.buf, b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 4);
                return parse_head(&text)
                    .map(Some)
                    .ok_or_else(|| invalid("bad head"));
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("head too long"));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// The body the head announces, read whole.
    fn body(&mut self, head: &Head) -> io::Result<Vec<u8>> {
        if head.chunked {
            return self.chunked();
        }
        let len = head.length.unwrap_or(0);
        if len > MAX_BODY {
            return Err(invalid("body too large"));
        }
        self.exactly(len)
    }

    fn exactly(&mut self, len: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < len {
            if !self.fill()? {
                return Err(invalid("body cut short"));
            }
        }
        Ok(self.buf.drain(..len).collect())
    }

    /// A line ending in CRLF, without it.
    fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = memchr::memmem::find(&self.buf, b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD || !self.fill()? {
                return Err(invalid("chunk line"));
            }
        }
    }

    fn chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        // At most MAX_BODY chunks of one byte or more each.
        for _ in 0..MAX_BODY {
            let line = self.line()?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("chunk size"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                for _ in 0..MAX_HEAD {
                    if self.line()?.is_empty() {
                        return Ok(body);
                    }
                }
                return Err(invalid("trailers"));
            }
            if body.len() + size > MAX_BODY {
                return Err(invalid("body too large"));
            }
            body.extend(self.exactly(size)?);
            if !self.line()?.is_empty() {
                return Err(invalid("chunk end"));
            }
        }
        Err(invalid("too many chunks"))
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("OTLP receiver: {what}"))
}

fn parse_head(text: &str) -> Option<Head> {
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let mut head = Head {
        method: first.next()?.to_owned(),
        path: first.next()?.to_owned(),
        ..Head::default()
    };
    let version = first.next()?;
    head.close = version == "HTTP/1.0";
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => head.length = Some(value.parse().ok()?),
            "transfer-encoding" => head.chunked = value.eq_ignore_ascii_case("chunked"),
            "content-encoding" => head.encoding = Some(value.to_ascii_lowercase()),
            "connection" => head.close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    Some(head)
}

/// Spans in an `ExportTraceServiceRequest`: field 1 holds `ResourceSpans`, whose field 2
/// holds `ScopeSpans`, whose field 2 holds each `Span`. `None` when it is not well formed.
pub fn count_spans(request: &[u8]) -> Option<u64> {
    let mut spans = 0;
    each_field(request, |field, resource| {
        if field != 1 {
            return Some(());
        }
        each_field(resource, |field, scope| {
            if field != 2 {
                return Some(());
            }
            each_field(scope, |field, _| {
                spans += u64::from(field == 2);
                Some(())
            })
        })
    })?;
    Some(spans)
}

/// Calls `f` with each length-delimited field of a protobuf message (other wire types are
/// skipped); `None` when the message is malformed or `f` says so.
fn each_field<'a>(mut msg: &'a [u8], mut f: impl FnMut(u64, &'a [u8]) -> Option<()>) -> Option<()> {
    // Every field takes at least one byte.
    for _ in 0..msg.len() {
        if msg.is_empty() {
            return Some(());
        }
        let key = varint(&mut msg)?;
        let field = key >> 3;
        match key & 7 {
            0 => {
                varint(&mut msg)?;
            }
            1 => msg = msg.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let value = msg.get(..len)?;
                msg = &msg[len..];
                f(field, value)?;
            }
            5 => msg = msg.get(4..)?,
            _ => return None,
        }
    }
    msg.is_empty().then_some(())
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn len_field(field: u64, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |mut v: u64| loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        };
        put(field << 3 | 2);
        put(value.len() as u64);
        out.extend_from_slice(value);
        out
    }

    fn request(spans_per_scope: &[usize]) -> Vec<u8> {
        let span = [len_field(1, &[7; 16]), vec![6 << 3, 2]].concat();
        let mut scopes = len_field(1, b"scope");
        for &n in spans_per_scope {
            let mut scope = len_field(1, b"manifold");
            for _ in 0..n {
                scope.extend(len_field(2, &span));
            }
            scopes.extend(len_field(2, &scope));
        }
        [len_field(1, &scopes), len_field(1, &len_field(2, &[]))].concat()
    }

    #[test]
    fn counts_spans_in_an_export_request() {
        assert_eq!(count_spans(&request(&[3, 0, 2])), Some(5));
        assert_eq!(count_spans(&[]), Some(0));
        let mut cut = request(&[1]);
        cut.pop();
        assert_eq!(count_spans(&cut), None);
    }

    #[test]
    fn parses_the_heads_it_needs() {
        let h = parse_head("POST /v1/traces HTTP/1.1\r\nContent-Length: 12\r\ncontent-type: application/x-protobuf").unwrap();
        assert_eq!((h.method.as_str(), h.path.as_str()), ("POST", "/v1/traces"));
        assert_eq!((h.length, h.chunked, h.close), (Some(12), false, false));
        let h = parse_head("POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nconnection: close\r\ncontent-encoding: gzip").unwrap();
        assert!(h.chunked && h.close);
        assert_eq!(h.encoding.as_deref(), Some("gzip"));
        assert!(parse_head("GET").is_none());
    }

    #[test]
    fn answers_exports_over_keep_alive_and_counts_them() {
        let sink = OtlpSink::start(Duration::from_secs(60)).unwrap();
        let mut c = TcpStream::connect(sink.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = request(&[2]);
        let mut reqs = format!(
            "POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        reqs.extend(&body);
        // The same spans again, chunked in two pieces.
        let (a, b) = body.split_at(3);
        reqs.extend(b"POST /v1/traces HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n");
        reqs.extend(format!("{:x}\r\n", a.len()).as_bytes());
        reqs.extend(a);
        reqs.extend(format!("\r\n{:x};x=y\r\n", b.len()).as_bytes());
        reqs.extend(b);
        reqs.extend(b"\r\n0\r\n\r\nGET /other HTTP/1.1\r\nconnection: close\r\n\r\n");
        c.write_all(&reqs).unwrap();
        let mut answers = String::new();
        c.read_to_string(&mut answers).unwrap();
        assert_eq!(
            answers.matches("HTTP/1.1 200 OK\r\n").count(),
            2,
            "{answers}"
        );
        assert!(answers.contains("content-type: application/x-protobuf\r\n"));
        assert!(answers.ends_with("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"));
        let got = sink.received();
        assert_eq!((got.requests, got.spans, got.other), (2, 4, 1));
        assert_eq!(got.bytes, 2 * body.len() as u64);
        assert_eq!((got.connections, got.uncounted), (1, 0));
        assert!(sink.endpoint().starts_with("http://127.0.0.1:"));
    }
}
