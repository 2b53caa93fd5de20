//! The HTTP transports to an upstream: Streamable HTTP (2025-03-26 and later) and the
//! 2024-11-05 HTTP+SSE transport, with the fallback between them that the spec describes (an
//! `initialize` POST refused with 400, 404 or 405 means: try a GET for an SSE stream).
//!
//! Each message to the upstream is one POST, sent from a task on the async runtime so that
//! callers never wait. Whatever the upstream sends back (a JSON body, events of a POST's SSE
//! stream, events of the session's GET stream) goes to [`Connection::receive`], the same path
//! stdio output takes. A transport failure (unreachable server, lost session, ended stream)
//! closes the connection once; the actor then restarts it with backoff, as for a crashed child.
//!
//! In the stateless era (2026-07-28) there is no session, no GET stream and no resumption:
//! each request is a POST of its own carrying the request metadata headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), its answer (JSON, or an SSE stream
//! of the request's own notifications and then the answer) ends it, an error may come with a
//! 4xx status, and closing the POST's stream is how a request is cancelled.
//!
//! One file (about 850 lines): Streamable HTTP in both eras, the HTTP+SSE transport and the
//! fallback between them share the session, the streams and the one close, which splitting
//! would spread over modules that each see half of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use arc_swap::ArcSwap;
use std::time::Duration;

use manifold_config::{HttpConfig, HttpKind};
use manifold_protocol::sse::{Event, Parser};
use manifold_protocol::version::Era;
use manifold_protocol::{Envelope, RawObject};
use manifold_telemetry::trace::Carrier;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::connection::{Connection, Events, Timing, Wire};
use crate::error::UpstreamError;
use crate::outbound::{target_member, Outbound};
use crate::param_headers::ToolHeaders;
use crate::pipe::WriteError;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_HEADER: &str = "last-event-id";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// Consecutive failed attempts to (re)open the GET stream before the upstream counts as
/// unreachable.
const STREAM_ATTEMPTS: u32 = 3;
/// How often an open answer stream checks whether its request is still waiting.
const STREAM_CHECK: Duration = Duration::from_secs(1);

/// What the actor is told, once, when the connection ends.
type OnExit = Box<dyn FnOnce(String) + Send>;

/// What starting an HTTP upstream needs besides its config.
pub(crate) struct Settings {
    pub key: Arc<str>,
    pub timing: Timing,
    pub max_message_bytes: usize,
    pub runtime: tokio::runtime::Handle,
}

/// One connection's HTTP side. The actor holds it to open the session's stream once the
/// handshake is done.
pub(crate) struct Client {
    key: Arc<str>,
    http: reqwest::Client,
    url: Url,
    headers: HeaderMap,
    kind: HttpKind,
    runtime: tokio::runtime::Handle,
    max: usize,
    /// Locked only to read or change the mode and session fields, never across an await.
    state: Mutex<State>,
    conn: OnceLock<Weak<Connection>>,
    /// Told once, with the reason, when the transport fails or is closed.
    exited: Mutex<Option<OnExit>>,
    /// Becomes true when the connection closes; every task watches it and stops.
    closed: watch::Sender<bool>,
    /// The tasks of stateless-era requests in flight, by id: aborting one closes its POST,
    /// which cancels the request.
    requests: Mutex<HashMap<u64, AbortHandle>>,
    /// The tool parameters a stateless-era upstream wants mirrored into headers.
    tool_headers: ArcSwap<ToolHeaders>,
}

#[derive(Default)]
struct State {
    mode: Mode,
    /// `Mcp-Session-Id` the upstream gave in its initialize answer.
    session: Option<HeaderValue>,
    /// The negotiated protocol version, sent as `MCP-Protocol-Version` once known.
    version: Option<HeaderValue>,
    /// The era the upstream speaks, once known.
    era: Option<Era>,
}

#[derive(Default, Clone)]
enum Mode {
    /// Nothing answered yet (with `HttpKind::Auto` the first POST decides).
    #[default]
    Unknown,
    Streamable,
    /// The 2024-11-05 transport: messages are POSTed to `post`, answers come on the stream.
    Sse {
        post: Url,
    },
}

/// The connection's wire: every message is a POST.
struct HttpWire(Arc<Client>);

impl Wire for HttpWire {
    fn send(&self, msg: Outbound) -> Result<(), WriteError> {
        if *self.0.closed.borrow() {
            return Err(WriteError::Closed);
        }
        let client = Arc::clone(&self.0);
        // A stateless-era message: on a connection of that era, or the probe that finds it
        // (while the era is not known, only the probe names that era's revision).
        let stateless = match self.0.state().era {
            Some(era) => era == Era::Stateless,
            None => msg.version.is_some(),
        };
        if stateless {
            let id = msg.id;
            // Locked across the spawn, so that the task's removal of its entry comes after
            // the entry is made.
            let mut requests = self.0.requests();
            let task = self.0.runtime.spawn(async move {
                Arc::clone(&client).post_stateless(msg).await;
                if let Some(id) = id {
                    client.requests().remove(&id);
                }
            });
            if let Some(id) = id {
                requests.insert(id, task.abort_handle());
            }
            return Ok(());
        }
        self.0.runtime.spawn(async move { client.post(msg).await });
        Ok(())
    }

    fn close(&self, reason: &str) {
        self.0.close(reason);
    }

    fn era_chosen(&self, era: Era) {
        self.0.state().era = Some(era);
    }

    fn cancel(&self, id: u64) -> bool {
        if let Some(task) = self.0.requests().remove(&id) {
            task.abort();
        }
        true
    }
}

/// A started HTTP upstream.
pub(crate) struct Started {
    pub conn: Arc<Connection>,
    pub client: Arc<Client>,
}

/// Sets up the client; nothing is sent until the handshake's first request.
pub(crate) fn start(
    cfg: &HttpConfig,
    settings: Settings,
    events: Box<dyn Events>,
    exited: impl FnOnce(String) + Send + 'static,
) -> Result<Started, String> {
    let url = Url::parse(&cfg.url).map_err(|e| format!("its url {:?} is invalid: {e}", cfg.url))?;
    let mut headers = HeaderMap::new();
    for (name, value) in &cfg.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?} is not a valid header name"))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header {name} is not a valid header value"))?;
        // Never printed, by us or by the HTTP client's debug output.
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let http = reqwest::Client::builder()
        .connect_timeout(cfg.connect_timeout)
        .read_timeout(settings.timing.request.max(Duration::from_secs(60)))
        .build()
        .map_err(|e| format!("cannot set up its HTTP client: {e}"))?;
    let client = Arc::new(Client {
        key: Arc::clone(&settings.key),
        http,
        url,
        headers,
        kind: cfg.kind,
        runtime: settings.runtime,
        max: settings.max_message_bytes,
        state: Mutex::new(State::default()),
        conn: OnceLock::new(),
        exited: Mutex::new(Some(Box::new(exited))),
        closed: watch::channel(false).0,
        requests: Mutex::new(HashMap::new()),
        tool_headers: ArcSwap::from_pointee(ToolHeaders::default()),
    });
    let conn = Arc::new(Connection::new(
        &settings.key,
        Box::new(HttpWire(Arc::clone(&client))),
        events,
        settings.timing,
    ));
    let _ = client.conn.set(Arc::downgrade(&conn));
    Ok(Started { conn, client })
}

impl Client {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn requests(&self) -> MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn conn(&self) -> Option<Arc<Connection>> {
        self.conn.get().and_then(Weak::upgrade)
    }

    /// The upstream's tools, for the parameters their calls mirror into headers
    /// (`x-mcp-header`, stateless era).
    pub(crate) fn set_tools(&self, tools: &[Box<serde_json::value::RawValue>]) {
        self.tool_headers.store(Arc::new(ToolHeaders::of(tools)));
    }

    /// Once the handshake is done: listen for what the upstream sends outside of answers.
    pub(crate) fn ready(self: &Arc<Self>) {
        if matches!(self.state().mode, Mode::Streamable) {
            let client = Arc::clone(self);
            self.runtime.spawn(async move { client.listen().await });
        }
    }

    /// Ends the connection: the upstream is told (DELETE of its session) unless the
    /// connection was lost, every task stops, and the actor hears why.
    fn close(&self, reason: &str) {
        if self.closed.send_replace(true) {
            return;
        }
        for (_, task) in self.requests().drain() {
            task.abort();
        }
        let (session, mode) = {
            let st = self.state();
            (st.session.clone(), st.mode.clone())
        };
        if let (Some(session), Mode::Streamable) = (session, mode) {
            let request = self
                .http
                .delete(self.url.clone())
                .headers(self.headers.clone())
                .header(SESSION_HEADER, session)
                .timeout(Duration::from_secs(2));
            self.runtime.spawn(async move {
                let _ = request.send().await;
            });
        }
        self.exit(reason);
    }

    /// The transport failed: the connection closes (failing every request in flight) and the
    /// actor restarts it.
    fn fail(&self, reason: &str) {
        if self.closed.send_replace(true) {
            return;
        }
        for (_, task) in self.requests().drain() {
            task.abort();
        }
        tracing::warn!(upstream = %self.key, "{reason}");
        if let Some(conn) = self.conn() {
            conn.close(reason);
        }
        self.exit(reason);
    }

    fn exit(&self, reason: &str) {
        let exited = self
            .exited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(exited) = exited {
            exited(reason.to_owned());
        }
    }

    /// Sends one message.
    async fn post(self: Arc<Self>, msg: Outbound) {
        let mode = self.state().mode.clone();
        match mode {
            Mode::Sse { post } => self.post_legacy(post, msg).await,
            // Configured for the HTTP+SSE transport: the first message opens its stream.
            Mode::Unknown if self.kind == HttpKind::Sse => self.fall_back(msg).await,
            Mode::Unknown | Mode::Streamable => self.post_streamable(msg).await,
        }
    }

    fn request(&self, method: reqwest::Method, url: Url) -> reqwest::RequestBuilder {
        let st = self.state();
        let mut request = self.http.request(method, url).headers(self.headers.clone());
        if let Some(session) = &st.session {
            request = request.header(SESSION_HEADER, session.clone());
        }
        if let Some(version) = &st.version {
            request = request.header(VERSION_HEADER, version.clone());
        }
        request
    }

    async fn post_streamable(self: Arc<Self>, msg: Outbound) {
        let initialize = msg.is("initialize");
        let had_session = self.state().session.is_some();
        let sent = self
            .request(reqwest::Method::POST, self.url.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .headers(trace_headers(msg.trace.as_ref()))
            .body(msg.body())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() || e.is_timeout() => {
                return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(e) => return self.refuse(msg.id, &format!("POST failed: {}", error_chain(&e))),
        };
        let status = response.status();
        if initialize && matches!(status.as_u16(), 400 | 404 | 405) && self.kind == HttpKind::Auto {
            tracing::info!(upstream = %self.key, %status, "Streamable HTTP refused; trying the HTTP+SSE transport");
            return self.fall_back(msg).await;
        }
        if status == StatusCode::NOT_FOUND && had_session {
            return self.fail("the upstream lost its session (404); starting a new one");
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return self.refuse(msg.id, &format!("HTTP {status}: {}", preview(&text)));
        }
        if initialize {
            let mut st = self.state();
            st.mode = Mode::Streamable;
            if let Some(session) = response.headers().get(SESSION_HEADER) {
                st.session = Some(session.clone());
            }
        }
        if status == StatusCode::ACCEPTED {
            return;
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            let parser = self.read_stream(response, initialize, msg.id).await;
            self.resume(msg.id, parser).await;
        } else {
            self.read_json(response, initialize, msg.id).await;
        }
    }

    /// Sends one stateless-era message as a POST of its own: the request metadata headers, no
    /// session. Its answer (or the error a 4xx status carries) goes to the connection; a
    /// request whose answer does not come is lost (the revision resumes no stream).
    async fn post_stateless(self: Arc<Self>, msg: Outbound) {
        let Some(id) = msg.id else {
            tracing::debug!(upstream = %self.key, "notification not sent: the stateless era defines none from client to server over HTTP");
            return;
        };
        let sent = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone())
            .headers(metadata_headers(&msg, &self.tool_headers.load()))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .headers(trace_headers(msg.trace.as_ref()))
            .body(msg.body())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(e) => {
                return self.lose(id, &format!("its POST failed: {}", error_chain(&e)));
            }
        };
        let status = response.status();
        if !status.is_success() {
            // A stateless-era server says why with a JSON-RPC error (400 for a version or a
            // header it refuses, 404 for an unknown method): that is the request's answer.
            let text = response.text().await.unwrap_or_default();
            let error = Envelope::decode(text.as_bytes())
                .ok()
                .and_then(|env| env.error.map(str::to_owned));
            return match (error, self.conn()) {
                (Some(error), Some(conn)) => conn.answer_error(id, &error),
                _ => self.lose(
                    id,
                    &format!("it refused the request (HTTP {status}: {})", preview(&text)),
                ),
            };
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            self.read_stream(response, false, Some(id)).await;
        } else if status != StatusCode::ACCEPTED {
            self.read_json(response, false, Some(id)).await;
        }
        // Answered by now, unless the stream ended first (or the answer's id was not this).
        self.lose(id, "its response stream ended before the answer");
    }

    /// Request `id` gets no answer, because of `reason` (no-op if it was answered).
    fn lose(&self, id: u64, reason: &str) {
        if let Some(conn) = self.conn() {
            conn.lost(
                id,
                UpstreamError::Closed {
                    upstream: self.key.to_string(),
                    reason: reason.to_owned(),
                },
            );
        }
    }

    /// A POST's stream ended while its request still waits for the answer: the server either
    /// closed it on purpose (it may, after giving an event id and a `retry` delay) or lost the
    /// connection. Either way a GET with `Last-Event-ID` picks the stream up where it was; a
    /// stream without event ids cannot be resumed, and the request fails at once.
    async fn resume(&self, id: Option<u64>, mut parser: Parser) {
        let Some(id) = id else { return };
        // Attempts in a row that brought nothing new; the request's own timeout bounds the rest.
        let mut fruitless = 0;
        while fruitless < STREAM_ATTEMPTS {
            fruitless += 1;
            let Some(conn) = self.conn() else { return };
            if !conn.is_pending(id) || *self.closed.borrow() {
                return;
            }
            let Some(last) = parser.last_id().map(str::to_owned) else {
                break;
            };
            let delay = parser
                .retry_ms()
                .map_or(Duration::from_millis(100), Duration::from_millis);
            tokio::time::sleep(delay.min(Duration::from_secs(30))).await;
            let resumed = self
                .request(reqwest::Method::GET, self.url.clone())
                .header(ACCEPT, "text/event-stream")
                .header(LAST_EVENT_HEADER, last.as_str())
                .send()
                .await;
            match resumed {
                Ok(r) if r.status().is_success() => {
                    let retry = parser.retry_ms();
                    parser = self.read_stream(r, false, Some(id)).await;
                    match parser.last_id() {
                        Some(now) if now != last => fruitless = 0,
                        Some(_) => {}
                        // Nothing new came: keep the place we had.
                        None => parser = Parser::resumed(&last, retry, self.max),
                    }
                }
                Ok(r) => {
                    tracing::debug!(upstream = %self.key, status = %r.status(), "resuming a stream refused");
                    break;
                }
                Err(e) => {
                    tracing::debug!(upstream = %self.key, "resuming a stream failed: {}", error_chain(&e))
                }
            }
        }
        if let Some(conn) = self.conn() {
            conn.fail_request(
                id,
                UpstreamError::Closed {
                    upstream: self.key.to_string(),
                    reason: "its event stream ended before the answer and could not be resumed"
                        .into(),
                },
            );
        }
    }

    /// A JSON answer, read up to the size limit.
    async fn read_json(&self, mut response: reqwest::Response, initialize: bool, via: Option<u64>) {
        let mut body = Vec::new();
        let mut len = 0usize;
        let mut tail = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    len += chunk.len();
                    if len <= self.max {
                        body.extend_from_slice(&chunk);
                    } else {
                        body.truncate(256);
                        tail.extend_from_slice(&chunk);
                        let keep = tail.len().saturating_sub(256);
                        tail.drain(..keep);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return self.fail(&format!("reading an answer failed: {}", error_chain(&e)))
                }
            }
        }
        let Some(conn) = self.conn() else { return };
        if len > self.max {
            return conn.oversize(len, self.max, &body, &tail);
        }
        if initialize {
            self.learn_version(&body);
        }
        // A JSON-RPC batch is answered with an array; each element is a message.
        let messages = match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => std::str::from_utf8(&body)
                .ok()
                .and_then(|t| manifold_protocol::scan::elements(t).ok())
                .map(|e| e.into_iter().map(str::as_bytes).collect())
                .unwrap_or_default(),
            _ => vec![&body[..]],
        };
        for message in messages {
            if let Err(problem) = conn.receive(message, via) {
                return self.fail(&problem);
            }
        }
    }

    /// An SSE stream (a POST's, or the session's GET stream): every `message` event is a
    /// message. Returns the parser, for the last event id and the retry delay.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        initialize: bool,
        via: Option<u64>,
    ) -> Parser {
        let mut parser = Parser::new(self.max);
        let mut closed = self.closed.subscribe();
        // A request's stream is dropped once the request is over (answered, timed out,
        // cancelled) even if the upstream keeps it open: a stalled stream holds nothing
        // longer than its request's deadline and a check.
        let mut check = tokio::time::interval(STREAM_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        check.reset();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                _ = closed.wait_for(|c| *c) => return parser,
                _ = check.tick(), if via.is_some() && !initialize => {
                    let over = match (via, self.conn()) {
                        (Some(id), Some(conn)) => !conn.is_pending(id) && !conn.is_listen(id),
                        _ => true,
                    };
                    if over {
                        tracing::debug!(upstream = %self.key, "a request's stream dropped: the request is over");
                        return parser;
                    }
                    continue;
                }
            };
            match chunk {
                Ok(Some(bytes)) => {
                    let mut broken = None;
                    parser.feed(&bytes, |event| {
                        if broken.is_none() {
                            broken = self.event(event, initialize, via).err();
                        }
                    });
                    if let Some(problem) = broken {
                        self.fail(&problem);
                        return parser;
                    }
                }
                Ok(None) => return parser,
                Err(e) => {
                    tracing::debug!(upstream = %self.key, "stream broke: {}", error_chain(&e));
                    return parser;
                }
            }
        }
    }

    fn event(&self, event: Event, initialize: bool, via: Option<u64>) -> Result<(), String> {
        if event.kind != "message" {
            return Ok(());
        }
        let Some(conn) = self.conn() else {
            return Ok(());
        };
        if let Some(len) = event.oversize {
            conn.oversize(len, self.max, event.data.as_bytes(), event.tail.as_bytes());
            return Ok(());
        }
        if initialize {
            self.learn_version(event.data.as_bytes());
        }
        conn.receive(event.data.as_bytes(), via)
    }

    /// Notes the protocol version of an initialize answer, for the header every later
    /// request carries.
    fn learn_version(&self, message: &[u8]) {
        let version = Envelope::decode(message)
            .ok()
            .and_then(|env| env.result.and_then(|r| RawObject::parse(r).ok()))
            .and_then(|r| r.get_str("protocolVersion").map(|v| v.into_owned()));
        if let Some(v) = version.and_then(|v| HeaderValue::from_str(&v).ok()) {
            self.state().version = Some(v);
        }
    }

    /// The session's GET stream, reopened (with `Last-Event-ID`) whenever it ends, until the
    /// connection closes. A server that offers none answers 405 (or 404 without a session).
    async fn listen(self: Arc<Self>) {
        let mut last_id: Option<String> = None;
        let mut failures = 0u32;
        let mut closed = self.closed.subscribe();
        loop {
            if *closed.borrow() {
                return;
            }
            let mut request = self
                .request(reqwest::Method::GET, self.url.clone())
                .header(ACCEPT, "text/event-stream");
            if let Some(id) = &last_id {
                request = request.header(LAST_EVENT_HEADER, id.as_str());
            }
            let mut delay = Duration::from_secs(1) * 2u32.saturating_pow(failures.min(5));
            match request.send().await {
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
                Ok(r) if r.status() == StatusCode::NOT_FOUND => return self.no_stream(),
                Ok(r) if r.status().is_success() => {
                    failures = 0;
                    let parser = self.read_stream(r, false, None).await;
                    if let Some(id) = parser.last_id() {
                        last_id = Some(id.to_owned());
                    }
                    delay = parser
                        .retry_ms()
                        .map_or(Duration::from_millis(500), Duration::from_millis);
                }
                Ok(r) => {
                    tracing::debug!(upstream = %self.key, status = %r.status(), "GET stream refused");
                    failures += 1;
                }
                Err(e) => {
                    failures += 1;
                    if failures >= STREAM_ATTEMPTS {
                        return self.fail(&format!(
                            "cannot reach {}: {}",
                            self.url,
                            error_chain(&e)
                        ));
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = closed.wait_for(|c| *c) => return,
            }
        }
    }

    /// The GET stream was answered 404. With a session, the upstream no longer knows it, and
    /// the connection starts over. Without one nothing was lost: the upstream (one that keeps no
    /// session) simply offers no stream, and is served on without it.
    fn no_stream(&self) {
        let had_session = self.state().session.is_some();
        if had_session {
            return self.fail("the upstream lost its session (404); starting a new one");
        }
        tracing::debug!(upstream = %self.key, "it offers no GET stream (404, and it issued no session)");
    }

    /// The HTTP+SSE transport: a GET opens the stream, whose first event names the URL that
    /// messages are POSTed to; then the message that asked (`initialize`) goes there.
    async fn fall_back(self: Arc<Self>, first: Outbound) {
        let response = match self
            .request(reqwest::Method::GET, self.url.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                return self.fail(&format!(
                    "it refused both Streamable HTTP and the HTTP+SSE transport (GET: HTTP {})",
                    r.status()
                ))
            }
            Err(e) => return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e))),
        };
        let client = Arc::clone(&self);
        let (endpoint_tx, endpoint_rx) = tokio::sync::oneshot::channel();
        self.runtime
            .spawn(async move { client.legacy_stream(response, endpoint_tx).await });
        match endpoint_rx.await {
            Ok(post) => self.post_legacy(post, first).await,
            Err(_) => self.fail("its SSE stream ended before naming the endpoint for messages"),
        }
    }

    /// Reads the HTTP+SSE stream: the `endpoint` event first, then messages. The stream's end
    /// is the connection's end.
    async fn legacy_stream(
        self: Arc<Self>,
        mut response: reqwest::Response,
        endpoint: tokio::sync::oneshot::Sender<Url>,
    ) {
        let mut parser = Parser::new(self.max);
        let mut endpoint = Some(endpoint);
        let mut closed = self.closed.subscribe();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                _ = closed.wait_for(|c| *c) => return,
            };
            let bytes = match chunk {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return self.fail("its SSE stream ended"),
                Err(e) => return self.fail(&format!("its SSE stream broke: {}", error_chain(&e))),
            };
            let mut broken = None;
            parser.feed(&bytes, |event| {
                if broken.is_some() {
                    return;
                }
                if event.kind == "endpoint" {
                    match self.url.join(event.data.trim()) {
                        Ok(post) => {
                            self.state().mode = Mode::Sse { post: post.clone() };
                            if let Some(tx) = endpoint.take() {
                                let _ = tx.send(post);
                            }
                        }
                        Err(e) => broken = Some(format!("its endpoint event is not a URL: {e}")),
                    }
                } else {
                    broken = self.event(event, false, None).err();
                }
            });
            if let Some(problem) = broken {
                return self.fail(&problem);
            }
        }
    }

    async fn post_legacy(self: Arc<Self>, post: Url, msg: Outbound) {
        let sent = self
            .http
            .post(post)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .headers(trace_headers(msg.trace.as_ref()))
            .body(msg.body())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                self.refuse(msg.id, &format!("HTTP {status}: {}", preview(&text)));
            }
            Err(e) if e.is_connect() => {
                self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(e) => self.refuse(msg.id, &format!("POST failed: {}", error_chain(&e))),
        }
    }

    /// The upstream refused one message (request `id`, if it was one): that request fails now.
    fn refuse(&self, id: Option<u64>, reason: &str) {
        match (id, self.conn()) {
            (Some(id), Some(conn)) => conn.fail_request(
                id,
                UpstreamError::Unavailable {
                    upstream: self.key.to_string(),
                    reason: format!("it refused the request ({reason})"),
                },
            ),
            _ => tracing::warn!(upstream = %self.key, "a message was refused: {reason}"),
        }
    }
}

/// The W3C trace context Manifold wrote into a message's `params._meta`, as the HTTP headers
/// (`traceparent`, `tracestate`, `baggage`) where an HTTP server's own instrumentation looks
/// for it; none without one.
fn trace_headers(trace: Option<&Carrier>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (key, value) in trace.into_iter().flat_map(Carrier::iter) {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(key), value);
        }
    }
    headers
}

/// The stateless era's request metadata headers of a message, from what it says of itself:
/// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` (the tool or prompt name, or the
/// resource URI) for the methods that name something, and a tool call's `Mcp-Param-*`
/// (`tools`' annotations; only a call of an annotated tool has its arguments read).
fn metadata_headers(msg: &Outbound, tools: &ToolHeaders) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(method) = msg.method.as_deref() else {
        return headers;
    };
    if let Ok(value) = HeaderValue::from_str(method) {
        headers.insert(HeaderName::from_static(METHOD_HEADER), value);
    }
    if let Some(version) = msg.version.and_then(|v| HeaderValue::from_str(v).ok()) {
        headers.insert(HeaderName::from_static(VERSION_HEADER), version);
    }
    let name = msg
        .name
        .as_deref()
        .filter(|_| target_member(method).is_some());
    if let Some(value) = name.and_then(|n| HeaderValue::from_str(&header_text(n)).ok()) {
        headers.insert(HeaderName::from_static(NAME_HEADER), value);
    }
    if let (Some(tool), "tools/call") = (name, method) {
        for (header, value) in tools.call_headers(tool, &msg.line) {
            headers.insert(header, value);
        }
    }
    headers
}

/// A value as an MCP header carries it: as it is when it is plain visible ASCII (spaces and
/// tabs inside allowed), else (or when it looks like the encoded form) `=?base64?...?=`.
pub(crate) fn header_text(value: &str) -> String {
    let visible = value
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", base64(value.as_bytes()))
    }
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An error with its causes, which is where reqwest says what actually went wrong.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn preview(text: &str) -> String {
    let cut = text.char_indices().nth(200).map_or(text.len(), |(i, _)| i);
    text[..cut].trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_set(headers: &HeaderMap) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        all.sort();
        all
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        all.sort();
        all
    }

    /// A body that is not JSON at all: whatever headers a message gets, it gets from its
    /// fields.
    const NOT_JSON: &[u8] = b"this is not JSON\n";

    #[test]
    fn trace_headers_come_from_the_message_not_its_body() {
        let mut carrier = Carrier::default();
        carrier.set(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        );
        carrier.set("tracestate", "k=v".into());
        carrier.set("baggage", "a=b".into());
        let traced = Outbound::request(3, "tools/call", NOT_JSON).traced(Some(carrier));
        assert_eq!(
            header_set(&trace_headers(traced.trace.as_ref())),
            pairs(&[
                (
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                ),
                ("tracestate", "k=v"),
                ("baggage", "a=b"),
            ])
        );
        // A context in the body that Manifold did not write is no header.
        let foreign = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}"#;
        let plain = Outbound::request(4, "tools/call", &foreign[..]);
        assert!(trace_headers(plain.trace.as_ref()).is_empty());
    }

    #[test]
    fn stateless_headers_are_exactly_what_the_message_says_of_itself() {
        let none = ToolHeaders::default();
        let call = Outbound::request(3, "tools/call", NOT_JSON)
            .named(Some("get_time".into()))
            .in_revision(Some("2026-07-28"));
        assert_eq!(
            header_set(&metadata_headers(&call, &none)),
            pairs(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "get_time"),
            ])
        );
        let read = Outbound::request(4, "resources/read", NOT_JSON)
            .named(Some("file:///caf\u{e9}.txt".into()));
        assert_eq!(
            header_set(&metadata_headers(&read, &none)),
            pairs(&[
                ("mcp-method", "resources/read"),
                ("mcp-name", "=?base64?ZmlsZTovLy9jYWbDqS50eHQ=?="),
            ])
        );
        // A method that names nothing has no Mcp-Name, whatever it was given.
        let list = Outbound::request(5, "tools/list", NOT_JSON).named(Some("x".into()));
        assert_eq!(
            header_set(&metadata_headers(&list, &none)),
            pairs(&[("mcp-method", "tools/list")])
        );
        assert!(metadata_headers(&Outbound::answer(NOT_JSON), &none).is_empty());
    }

    /// Events that go nowhere, for a client under test.
    struct Unheard;

    impl Events for Unheard {
        fn notification(&self, _method: &str, _params: Option<&str>) {}
    }

    #[test]
    fn a_stateless_request_is_cancelled_by_the_id_it_was_sent_with() {
        // Not driven: the POST's task is spawned but never runs, so the test sees what
        // sending left behind.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cfg = HttpConfig {
            url: "http://127.0.0.1:9/mcp".into(),
            kind: HttpKind::Auto,
            headers: Default::default(),
            connect_timeout: Duration::from_secs(1),
        };
        let settings = Settings {
            key: "up".into(),
            timing: Timing {
                request: Duration::from_secs(5),
                max: Duration::from_secs(5),
            },
            max_message_bytes: 1 << 20,
            runtime: runtime.handle().clone(),
        };
        let started = start(&cfg, settings, Box::new(Unheard), |_| {}).unwrap();
        let wire = HttpWire(Arc::clone(&started.client));
        wire.era_chosen(Era::Stateless);
        let call = Outbound::request(7, "tools/call", NOT_JSON)
            .named(Some("slow".into()))
            .in_revision(Some("2026-07-28"));
        wire.send(call).unwrap();
        assert_eq!(
            started
                .client
                .requests()
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [7]
        );
        assert!(wire.cancel(7));
        assert!(started.client.requests().is_empty());
    }

    #[test]
    fn header_values_are_base64_encoded_when_not_plain() {
        assert_eq!(header_text("us-west1"), "us-west1");
        assert_eq!(header_text("a b"), "a b");
        assert_eq!(
            header_text("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(header_text(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_text("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            header_text("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }
}
