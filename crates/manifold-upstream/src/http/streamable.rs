//! Streamable HTTP in the session era: a POST per message (JSON or SSE answers), the
//! `Mcp-Session-Id` the upstream issues at `initialize` and the negotiated
//! `MCP-Protocol-Version` on every later request, the session's GET stream for what the
//! upstream sends outside of answers (reopened with `Last-Event-ID`), a POST's stream resumed
//! the same way, and the fallback to the HTTP+SSE transport when `initialize` is refused.

use std::sync::Arc;
use std::time::Duration;

use manifold_config::HttpKind;
use manifold_protocol::sse::Parser;
use manifold_protocol::{Envelope, RawObject};
use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;

use super::auth::Sent;
use super::{error_chain, preview, Carrying, Client, Mode, SESSION_HEADER};
use crate::error::UpstreamError;
use crate::outbound::Outbound;

const LAST_EVENT_HEADER: &str = "last-event-id";
/// Consecutive failed attempts to (re)open the GET stream before the upstream counts as
/// unreachable.
const STREAM_ATTEMPTS: u32 = 3;

impl Client {
    pub(super) async fn post_streamable(self: Arc<Self>, msg: Outbound) {
        let initialize = msg.is("initialize");
        let had_session = self.state().session.is_some();
        let sent = self
            .send(
                self.request(reqwest::Method::POST, self.url.clone())
                    .carrying(&msg),
            )
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(Sent::Http(e)) if e.is_connect() || e.is_timeout() => {
                return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(Sent::Http(e)) => {
                return self.refuse(msg.id, &format!("POST failed: {}", error_chain(&e)))
            }
            Err(Sent::Unauthorized(why)) => return self.unauthorized(msg.id, why),
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
                .send(
                    self.request(reqwest::Method::GET, self.url.clone())
                        .header(ACCEPT, "text/event-stream")
                        .header(LAST_EVENT_HEADER, last.as_str()),
                )
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
                Err(Sent::Http(e)) => {
                    tracing::debug!(upstream = %self.key, "resuming a stream failed: {}", error_chain(&e))
                }
                Err(Sent::Unauthorized(why)) => return self.unauthorized(Some(id), why),
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

    /// Notes the protocol version of an initialize answer, for the header every later
    /// request carries.
    pub(super) fn learn_version(&self, message: &[u8]) {
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
    pub(super) async fn listen(self: Arc<Self>) {
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
            match self.send(request).await {
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
                Err(Sent::Unauthorized(why)) => {
                    tracing::debug!(upstream = %self.key, "GET stream not opened: {}", why.reason);
                    failures += 1;
                }
                Err(Sent::Http(e)) => {
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
}
