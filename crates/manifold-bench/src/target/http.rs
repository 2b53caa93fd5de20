//! One Streamable HTTP session over one keep-alive HTTP/1.1 connection, seen as a `Target`:
//! each message sent is one POST, and the messages of its response (one JSON answer, the
//! events of an SSE stream, or nothing for a 202) are what `recv` hands out. The session id
//! and the negotiated protocol version are taken from the answer to `initialize` and sent on
//! every later request, as a host must.
//!
//! A stateless host (revision 2026-07-28) has no session: it sends no `initialize` and no
//! `Mcp-Session-Id`, and each request carries `MCP-Protocol-Version` and the headers naming
//! its method and tool (`Mcp-Method`, `Mcp-Name`, rendered once per request line), its body
//! `_meta` with the revision and the client's capabilities.
//!
//! The request head is rendered once per session, so a call costs a copy of the body, an
//! integer format, one `write` and usually one `read`: cheap beside what is measured (the
//! client's CPU time per call is reported with the figures).

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use super::server::HttpServer;
use super::wire::{self, HttpReader};
use super::Target;

/// A connection idle this long is replaced before the next request: servers close idle
/// keep-alive connections (actix-web after 5 s by default), and a host's connection pool does
/// not reuse a connection the server may have closed.
const IDLE_REUSE: Duration = Duration::from_secs(1);

pub struct HttpTarget {
    label: String,
    server: Arc<HttpServer>,
    conn: Option<HttpReader<TcpStream>>,
    last_used: Instant,
    /// Everything of a request's head but the headers naming its method and tool (stateless
    /// era) and its body's length.
    head: String,
    out: Vec<u8>,
    /// The bodies of this send's responses; messages are `inbox[from..to]`.
    inbox: Vec<u8>,
    scratch: Vec<u8>,
    messages: Vec<(usize, usize)>,
    next: usize,
    session: Option<String>,
    /// The protocol version sent on every request: the stateless revision, or the one the
    /// session negotiated.
    version: Option<String>,
    /// A stateless host: no session, the naming headers on every request.
    stateless: bool,
    /// Bytes of the last request written, head and body.
    last_request: usize,
}

impl HttpTarget {
    /// Connects to `server`; the session starts with the first message (`initialize`).
    pub fn connect(server: &Arc<HttpServer>, label: &str) -> Result<Self> {
        Self::open(server, label, None)
    }

    /// Connects to `server` as a host of the stateless revision `version`: requests only,
    /// sent with `send_request`, each one standing alone.
    pub fn stateless(server: &Arc<HttpServer>, label: &str, version: &str) -> Result<Self> {
        Self::open(server, label, Some(version))
    }

    fn open(server: &Arc<HttpServer>, label: &str, stateless: Option<&str>) -> Result<Self> {
        let mut target = Self {
            label: label.into(),
            server: Arc::clone(server),
            conn: None,
            last_used: Instant::now(),
            head: String::new(),
            out: Vec::new(),
            inbox: Vec::new(),
            scratch: Vec::new(),
            messages: Vec::new(),
            next: 0,
            session: None,
            version: stateless.map(str::to_owned),
            stateless: stateless.is_some(),
            last_request: 0,
        };
        target.render_head();
        target.reconnect()?;
        Ok(target)
    }

    fn reconnect(&mut self) -> Result<()> {
        let timeout = self.server.limits().stall;
        let stream = TcpStream::connect_timeout(&self.server.addr(), timeout)
            .map_err(|e| self.server.failed(&format!("refused a connection ({e})")))?;
        // A small request must leave at once, not wait for the previous one's ACK.
        stream.set_nodelay(true)?;
        // The stall bound of every blocking read and write on this connection.
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        self.conn = Some(HttpReader::new(stream));
        self.last_used = Instant::now();
        Ok(())
    }

    fn render_head(&mut self) {
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
            self.server.path(),
            self.server.addr()
        );
        if let Some(session) = &self.session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
        }
        if let Some(version) = &self.version {
            head.push_str(&format!("MCP-Protocol-Version: {version}\r\n"));
        }
        self.head = head;
    }

    /// One POST of `body`, with `headers` (whole lines) after the session's; the messages of
    /// its response are added to the inbox.
    fn post(&mut self, body: &[u8], headers: &str) -> Result<()> {
        if self.conn.is_none() || self.last_used.elapsed() >= IDLE_REUSE {
            self.reconnect()?;
        }
        self.out.clear();
        self.out.extend_from_slice(self.head.as_bytes());
        self.out.extend_from_slice(headers.as_bytes());
        self.out.extend_from_slice(b"Content-Length: ");
        crate::mcp::write_u64(&mut self.out, body.len() as u64);
        self.out.extend_from_slice(b"\r\n\r\n");
        self.out.extend_from_slice(body);
        self.last_request = self.out.len();
        let Some(conn) = self.conn.as_mut() else {
            bail!("{}: no connection", self.label);
        };
        let from = self.inbox.len();
        let mut stream: &TcpStream = conn.get_ref();
        let sent = stream.write_all(&self.out);
        let read = sent
            .context("writing the request")
            .and_then(|()| conn.read(&mut self.inbox));
        let head = match read {
            Ok(head) => head,
            Err(e) => {
                self.conn = None;
                return Err(self.server.failed(&format!("{}: {e:#}", self.label)));
            }
        };
        self.last_used = Instant::now();
        if head.close {
            self.conn = None;
        }
        match head.status {
            200 if head.event_stream => {
                self.scratch.clear();
                let mut ranges = Vec::new();
                wire::sse_events(&self.inbox[from..], &mut self.scratch, &mut ranges);
                self.inbox.truncate(from);
                self.inbox.extend_from_slice(&self.scratch);
                self.messages
                    .extend(ranges.into_iter().map(|(a, b)| (from + a, from + b)));
            }
            200 => self.messages.push((from, self.inbox.len())),
            202 => {}
            status => bail!(
                "{}: HTTP {status} to {}: {}",
                self.label,
                crate::mcp::excerpt(body),
                crate::mcp::excerpt(&self.inbox[from..])
            ),
        }
        if let Some(session) = head.session {
            if self.stateless {
                bail!(
                    "{}: a stateless request was answered with a session id: {}",
                    self.label,
                    crate::mcp::excerpt(body)
                );
            }
            self.start_session(session)?;
        }
        Ok(())
    }

    /// Starts a new send: the previous one's messages were all handed out.
    fn begin_send(&mut self) {
        if self.next == self.messages.len() {
            self.next = 0;
            self.inbox.clear();
            self.messages.clear();
        }
    }

    /// The answer to `initialize` carries the session id; later requests also carry the
    /// protocol version it negotiated.
    fn start_session(&mut self, session: String) -> Result<()> {
        let (from, to) = self.messages.last().copied().unwrap_or_default();
        let answer: Value = serde_json::from_slice(&self.inbox[from..to]).unwrap_or(Value::Null);
        let version = answer
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if version.is_none() {
            bail!(
                "{}: a session id came with no protocol version: {}",
                self.label,
                crate::mcp::excerpt(&self.inbox[from..to])
            );
        }
        self.session = Some(session);
        self.version = version;
        self.render_head();
        Ok(())
    }
}

impl Target for HttpTarget {
    fn label(&self) -> &str {
        &self.label
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        if self.stateless {
            // Nothing but requests made from request lines: a stateless host never answers
            // the server (its questions come back as results) and has no notification to send.
            bail!(
                "{}: a stateless host sends only requests (send_request): {}",
                self.label,
                crate::mcp::excerpt(bytes)
            );
        }
        self.begin_send();
        // Each message is one POST, one after the other: an HTTP host has no pipelining.
        for line in bytes.split(|&b| b == b'\n') {
            if !line.iter().all(u8::is_ascii_whitespace) {
                self.post(line, "")?;
            }
        }
        Ok(())
    }

    fn send_request(&mut self, bytes: &[u8], headers: &str) -> Result<()> {
        if !self.stateless {
            return self.send(bytes);
        }
        self.begin_send();
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if memchr::memchr(b'\n', body).is_some() {
            bail!("{}: one request per POST", self.label);
        }
        self.post(body, headers)
    }

    fn recv(&mut self) -> Result<&[u8]> {
        let Some(&(from, to)) = self.messages.get(self.next) else {
            // Every response was read whole: waiting for more would wait forever.
            return Err(anyhow!(
                "{}: the server answered without the message awaited",
                self.label
            ));
        };
        self.next += 1;
        Ok(&self.inbox[from..to])
    }

    fn server_pid(&self) -> Option<u32> {
        Some(self.server.pid())
    }

    fn last_request_len(&self) -> Option<usize> {
        (self.last_request > 0).then_some(self.last_request)
    }

    fn ready(&mut self) -> Result<()> {
        if self.last_used.elapsed() >= IDLE_REUSE {
            self.reconnect()?;
        }
        Ok(())
    }

    fn disconnect(&mut self) {
        self.conn = None;
    }

    fn move_to(&mut self, server: &Arc<HttpServer>) -> Result<()> {
        if self.messages.len() > self.next {
            bail!("{}: moved with messages not yet read", self.label);
        }
        self.server = Arc::clone(server);
        self.render_head();
        self.reconnect()
    }
}
