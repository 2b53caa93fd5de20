//! The HTTP transports to an upstream: Streamable HTTP (2025-03-26 and later) in its session
//! era and its stateless era (2026-07-28), and the 2024-11-05 HTTP+SSE transport, with the
//! fallback between them that the spec describes (an `initialize` POST refused with 400, 404
//! or 405 means: try a GET for an SSE stream).
//!
//! Each message to the upstream is one POST, sent from a task on the async runtime so that
//! callers never wait. Whatever the upstream sends back (a JSON body, events of a POST's SSE
//! stream, events of the session's GET stream) goes to [`Connection::receive`], the same path
//! stdio output takes. A transport failure (unreachable server, lost session, ended stream)
//! closes the connection once; the actor then restarts it with backoff, as for a crashed child.
//! The wire reads nothing of a message but the fields of its [`Outbound`] (a call of a tool
//! with `x-mcp-header` parameters excepted: its arguments give their headers).
//!
//! This file holds what every transport shares: the client and its state (mode, session,
//! era), the wire, the choice of transport for each message, the one close, and refusals.
//! `answers` reads what a POST or a stream carries back; `streamable` is the session era
//! (POST, the GET stream, resumption); `stateless` the stateless era (a POST per request with
//! its headers, cancellation by closing it); `legacy` the HTTP+SSE transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use arc_swap::ArcSwap;
use std::time::Duration;

use manifold_config::{HttpConfig, HttpKind};
use manifold_protocol::version::Era;
use manifold_telemetry::trace::Carrier;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::Url;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::connection::{Connection, Events, Timing, Wire};

/// How long an idle connection to an upstream is kept for reuse.
const POOL_IDLE: Duration = Duration::from_secs(4);
use crate::error::UpstreamError;
use crate::outbound::Outbound;
use crate::param_headers::ToolHeaders;
use crate::pipe::WriteError;

mod answers;
mod auth;
mod legacy;
mod stateless;
mod streamable;

pub(crate) use stateless::header_text;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// What the actor is told, once, when the connection ends.
type OnExit = Box<dyn FnOnce(String) + Send>;

/// What starting an HTTP upstream needs besides its config.
pub(crate) struct Settings {
    pub key: Arc<str>,
    pub timing: Timing,
    pub max_message_bytes: usize,
    pub runtime: tokio::runtime::Handle,
    /// Where the token of an upstream with `auth` comes from.
    pub credential: Option<Arc<dyn crate::Credential>>,
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
    /// The token source of an upstream with `auth`.
    credential: Option<Arc<dyn crate::Credential>>,
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
        // Idle connections are let go before the 5 s keep-alive many servers use (Node's
        // default, actix-web's): reusing one the server is closing at that moment fails the
        // request ("connection closed before message completed").
        .pool_idle_timeout(POOL_IDLE)
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
        credential: settings.credential,
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
            match self.credential.clone() {
                Some(credential) => {
                    self.runtime.spawn(async move {
                        if let Ok(token) = credential.token().await {
                            let _ = request.bearer_auth(token).send().await;
                        }
                    });
                }
                None => {
                    self.runtime.spawn(async move {
                        let _ = request.send().await;
                    });
                }
            }
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
/// A POST carrying one message: the body and the headers every such POST has (what the
/// answer may come as, the body's type, the trace context the message was sent under).
trait Carrying {
    fn carrying(self, msg: &Outbound) -> Self;
}

impl Carrying for reqwest::RequestBuilder {
    fn carrying(self, msg: &Outbound) -> Self {
        self.header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .headers(trace_headers(msg.trace.as_ref()))
            .body(msg.body())
    }
}

fn trace_headers(trace: Option<&Carrier>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (key, value) in trace.into_iter().flat_map(Carrier::iter) {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(key), value);
        }
    }
    headers
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

    pub(super) fn header_set(headers: &HeaderMap) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        all.sort();
        all
    }

    pub(super) fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        all.sort();
        all
    }

    /// A body that is not JSON at all: whatever headers a message gets, it gets from its
    /// fields.
    pub(super) const NOT_JSON: &[u8] = b"this is not JSON\n";

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
            auth: None,
        };
        let settings = Settings {
            key: "up".into(),
            timing: Timing {
                request: Duration::from_secs(5),
                max: Duration::from_secs(5),
            },
            max_message_bytes: 1 << 20,
            runtime: runtime.handle().clone(),
            credential: None,
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
}
