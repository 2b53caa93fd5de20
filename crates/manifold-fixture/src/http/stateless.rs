//! Streamable HTTP of the stateless era (2026-07-28) at `/mcp`: POST only, no session.
//!
//! A POST carries one message. Before anything else its headers must match its body: the
//! `MCP-Protocol-Version` header is required, `Mcp-Method` must equal the body's method and,
//! for `tools/call`, `prompts/get` and `resources/read`, `Mcp-Name` must equal `params.name`
//! (`params.uri`), possibly as `=?base64?...?=`; the header's revision must equal the one
//! `_meta` names. Values are compared after trimming surrounding whitespace. A mismatch, or
//! a missing header, is HTTP 400 with the JSON-RPC error -32020. Then the request goes to
//! `modern` (which checks `_meta`). Its answer is JSON, whose status follows the error if
//! there is one (-32601: 404; -32600, -32602, -32020..-32022: 400; otherwise 200), or an SSE
//! stream (without event ids: such streams cannot be resumed) when something comes before
//! the answer. Closing that response, or the connection before a JSON answer came, cancels
//! the request; for `subscriptions/listen` it ends the subscription. Notifications get 202
//! and responses 400 (a stateless-era client sends none).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::http::header::{self, HeaderMap};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use manifold_protocol::codes;
use manifold_protocol::sse;
use manifold_protocol::version::SUPPORTED;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use super::{authorization, traceparent, Shared};
use crate::era::{self, EraFlag};
use crate::exchange::{request_key, traced, Sink};
use crate::modern;
use crate::rpc::{self, Incoming, RpcError};
use crate::state::State;

const SESSION_HEADER: &str = "mcp-session-id";
/// How often an open SSE stream gets a comment, so that idle streams (listen streams above
/// all) stay open through intermediaries.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Whether a POST is one of the stateless era (see `era` for how `--era dual` decides).
pub(super) fn applies(era: EraFlag, req: &HttpRequest, msg: &Incoming) -> bool {
    match era {
        EraFlag::Session => false,
        EraFlag::Stateless => true,
        EraFlag::Dual => {
            if req.headers().contains_key(SESSION_HEADER) {
                return false;
            }
            match header_value(req.headers(), "mcp-protocol-version") {
                Some(version) => !SUPPORTED.contains(&version),
                None => era::names_revision(&msg.params),
            }
        }
    }
}

pub(super) async fn post(
    req: HttpRequest,
    msg: Incoming,
    shared: web::Data<Shared>,
) -> HttpResponse {
    let id = msg.id.clone().unwrap_or(Value::Null);
    if let Err(e) = headers_match(req.headers(), &msg) {
        return refuse(&id, e);
    }
    if msg.method.is_none() {
        let e = RpcError::new(
            codes::INVALID_REQUEST,
            "a 2026-07-28 client sends no responses",
        );
        return refuse(&id, e);
    }
    let state = &shared.state;
    if msg.id.is_none() {
        modern::dispatch(state, msg, Arc::new(Nobody));
        return HttpResponse::Accepted().finish();
    }
    let n = shared.stateless_requests.fetch_add(1, Ordering::Relaxed);
    let (sink, first) = PostSink::new(format!("stateless-{n}"));
    let sink = Arc::new(sink);
    let hangup = Hangup {
        state: Arc::clone(state),
        key: request_key(sink.client(), &id),
        sink: Arc::clone(&sink),
    };
    let way_back = traced(
        Arc::clone(&sink) as Arc<dyn Sink>,
        traceparent(&req),
        authorization(&req),
    );
    modern::dispatch(state, msg, way_back);
    // Dropped here, unanswered, if the client goes away first (the server aborts connections
    // whose client closed its end): that cancels the request.
    match first.await {
        Ok(First::Answer(answer)) => HttpResponse::build(status_of(&answer))
            .content_type("application/json")
            .body(answer),
        Ok(First::Stream(events)) => stream(events, hangup),
        // No answer will come (the tool sent none).
        Err(_) => HttpResponse::Accepted().finish(),
    }
}

/// The value of header `name`, trimmed; None if it is missing or not text.
fn header_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn mismatch(message: String) -> RpcError {
    RpcError::new(codes::HEADER_MISMATCH, message)
}

/// Checks the headers that mirror the body (see the module doc).
fn headers_match(headers: &HeaderMap, msg: &Incoming) -> Result<(), RpcError> {
    let Some(version) = header_value(headers, "mcp-protocol-version") else {
        return Err(mismatch(
            "Header mismatch: the MCP-Protocol-Version header is required".into(),
        ));
    };
    if let (Some(method), Some(_)) = (&msg.method, &msg.id) {
        match header_value(headers, "mcp-method") {
            None => {
                return Err(mismatch(
                    "Header mismatch: the Mcp-Method header is required".into(),
                ))
            }
            Some(header) if header != method => {
                return Err(mismatch(format!(
                    "Header mismatch: Mcp-Method header value '{header}' does not match body \
                     value '{method}'"
                )))
            }
            Some(_) => {}
        }
        let field = match method.as_str() {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" => Some("uri"),
            _ => None,
        };
        let body = field
            .and_then(|f| msg.params.get(f))
            .and_then(Value::as_str);
        if let Some(body) = body {
            let Some(header) = header_value(headers, "mcp-name") else {
                return Err(mismatch(
                    "Header mismatch: the Mcp-Name header is required".into(),
                ));
            };
            let decoded = decode_name(header).ok_or_else(|| {
                mismatch(format!(
                    "Header mismatch: Mcp-Name header value '{header}' is not valid base64"
                ))
            })?;
            if decoded != body {
                return Err(mismatch(format!(
                    "Header mismatch: Mcp-Name header value '{header}' does not match body \
                     value '{body}'"
                )));
            }
        }
    }
    match era::revision_of(&msg.params) {
        Some(body) if body != version => Err(mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{version}' does not match \
             _meta value '{body}'"
        ))),
        _ => Ok(()),
    }
}

/// A header value as it was meant: `=?base64?B64?=` decoded (None if that is not valid
/// base64 of UTF-8), anything else as it is.
fn decode_name(value: &str) -> Option<String> {
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    String::from_utf8(base64_decode(encoded)?).ok()
}

/// Strict standard base64 (with padding).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, quad) in bytes.chunks(4).enumerate() {
        let last = i + 1 == bytes.len() / 4;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * pad as u32;
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}

/// The HTTP status of an answer: from its error, if it is one.
fn status_of(answer: &[u8]) -> StatusCode {
    #[derive(Deserialize)]
    struct Answer {
        error: Option<Code>,
    }
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    let code = serde_json::from_slice::<Answer>(answer)
        .ok()
        .and_then(|a| a.error)
        .map(|e| e.code);
    match code {
        Some(codes::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            codes::INVALID_REQUEST
            | codes::INVALID_PARAMS
            | codes::HEADER_MISMATCH
            | codes::MISSING_REQUIRED_CLIENT_CAPABILITY
            | codes::UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// A refusal before the request was handled: the error, with the request's id.
fn refuse(id: &Value, error: RpcError) -> HttpResponse {
    let answer = rpc::response(id, &Err(error));
    HttpResponse::build(status_of(&answer))
        .content_type("application/json")
        .body(answer)
}

/// An SSE response of `events` (no event ids), with a comment every [`KEEP_ALIVE`]; `hangup`
/// lives as long as the response.
fn stream(events: UnboundedReceiver<Bytes>, hangup: Hangup) -> HttpResponse {
    let start = tokio::time::Instant::now() + KEEP_ALIVE;
    let ticks = tokio::time::interval_at(start, KEEP_ALIVE);
    let body = futures::stream::unfold(
        (events, ticks, hangup),
        |(mut events, mut ticks, hangup)| async move {
            let event = tokio::select! {
                event = events.recv() => event?,
                _ = ticks.tick() => Bytes::from_static(b":\n\n"),
            };
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (events, ticks, hangup),
            ))
        },
    );
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body)
}

/// Cancels the request (or ends its subscription) when dropped before its answer: its
/// response went away with the client.
struct Hangup {
    state: Arc<State>,
    key: String,
    sink: Arc<PostSink>,
}

impl Drop for Hangup {
    fn drop(&mut self) {
        if !self.sink.answered() {
            self.state.cancel(&self.key);
            self.state.listens.end(&self.key);
        }
    }
}

/// How the POST handler answers: with the first thing the request sent.
enum First {
    /// The answer came first: a JSON response.
    Answer(Bytes),
    /// Something came before the answer: an SSE stream, ending with the answer.
    Stream(UnboundedReceiver<Bytes>),
}

/// One stateless request's way back: its POST's response.
struct PostSink {
    /// Names the request's client (each POST is a client of its own).
    name: String,
    flow: Mutex<Flow>,
}

enum Flow {
    /// Nothing sent yet: the handler waits to learn whether to answer JSON or SSE.
    Waiting(oneshot::Sender<First>),
    Streaming(UnboundedSender<Bytes>),
    /// The answer was sent: nothing more goes anywhere (there is no session stream).
    Answered,
}

impl PostSink {
    fn new(name: String) -> (Self, oneshot::Receiver<First>) {
        let (tx, rx) = oneshot::channel();
        let sink = Self {
            name,
            flow: Mutex::new(Flow::Waiting(tx)),
        };
        (sink, rx)
    }

    fn answered(&self) -> bool {
        let flow = self.flow.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(*flow, Flow::Answered)
    }
}

fn event(message: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(message.len() + 16);
    sse::write_event(&mut event, None, None, message);
    Bytes::from(event)
}

impl Sink for PostSink {
    fn send(&self, line: Vec<u8>) {
        let mut flow = self.flow.lock().unwrap_or_else(PoisonError::into_inner);
        match &*flow {
            Flow::Streaming(tx) => {
                let _ = tx.send(event(&line));
            }
            Flow::Answered => {}
            Flow::Waiting(_) => {
                let (tx, rx) = unbounded_channel();
                let _ = tx.send(event(&line));
                if let Flow::Waiting(first) = std::mem::replace(&mut *flow, Flow::Streaming(tx)) {
                    // The handler is gone only if its client went away; nothing to do then.
                    let _ = first.send(First::Stream(rx));
                }
            }
        }
    }

    fn answer(&self, line: Vec<u8>) {
        let mut flow = self.flow.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *flow, Flow::Answered) {
            Flow::Waiting(first) => {
                let _ = first.send(First::Answer(Bytes::from(line)));
            }
            // Dropping the sender after the answer ends the stream.
            Flow::Streaming(tx) => {
                let _ = tx.send(event(&line));
            }
            Flow::Answered => {}
        }
    }

    fn client(&self) -> &str {
        &self.name
    }
}

/// The way back of a notification: there is none.
struct Nobody;

impl Sink for Nobody {
    fn send(&self, _: Vec<u8>) {}
    fn answer(&self, _: Vec<u8>) {}
    fn client(&self) -> &str {
        "stateless-notification"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn msg(text: &str) -> Incoming {
        Incoming::parse(text.as_bytes()).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut req = TestRequest::default();
        for (k, v) in pairs {
            req = req.insert_header((*k, *v));
        }
        req.to_http_request().headers().clone()
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;

    #[test]
    fn headers_must_mirror_the_body() {
        let call = msg(CALL);
        let ok = [
            ("MCP-Protocol-Version", "2026-07-28"),
            ("mcp-method", " tools/call "),
            ("MCP-NAME", "echo"),
        ];
        assert!(headers_match(&headers(&ok), &call).is_ok());
        let encoded = [ok[0], ok[1], ("mcp-name", "=?base64?ZWNobw==?=")];
        assert!(headers_match(&headers(&encoded), &call).is_ok());
        for bad in [
            vec![ok[1], ok[2]],
            vec![ok[0], ok[2]],
            vec![ok[0], ok[1]],
            vec![ok[0], ("mcp-method", "TOOLS/CALL"), ok[2]],
            vec![ok[0], ok[1], ("mcp-name", "wrong")],
            vec![ok[0], ok[1], ("mcp-name", "=?base64?ZWNobw?=")],
            vec![("mcp-protocol-version", "2025-11-25"), ok[1], ok[2]],
        ] {
            let e = headers_match(&headers(&bad), &call).unwrap_err();
            assert_eq!(e.code, -32020, "{bad:?}");
        }
        // Without the value in the body, Mcp-Name is not required (the method says what is
        // wrong then); without a revision in _meta, there is nothing to compare.
        let list = msg(r#"{"id":2,"method":"tools/list","params":{}}"#);
        let list_headers = [("mcp-protocol-version", "v9"), ("mcp-method", "tools/list")];
        assert!(headers_match(&headers(&list_headers), &list).is_ok());
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(base64_decode("SGVsbG8="), Some(b"Hello".to_vec()));
        assert_eq!(base64_decode("SGVsbG8h"), Some(b"Hello!".to_vec()));
        assert_eq!(base64_decode(""), Some(Vec::new()));
        for bad in ["SGVsbG8", "SGVs!!!bG8=", "SG==bG8=", "S==="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
        assert_eq!(
            decode_name("=?base64?SGVsbG8=").as_deref(),
            Some("=?base64?SGVsbG8=")
        );
    }

    #[test]
    fn statuses_follow_the_error() {
        let answer = |code: i64| rpc::response(&Value::from(1), &Err(RpcError::new(code, "x")));
        assert_eq!(status_of(&answer(-32601)), StatusCode::NOT_FOUND);
        for code in [-32600, -32602, -32020, -32021, -32022] {
            assert_eq!(status_of(&answer(code)), StatusCode::BAD_REQUEST, "{code}");
        }
        assert_eq!(status_of(&answer(-32603)), StatusCode::OK);
        assert_eq!(status_of(br#"{"id":1,"result":{}}"#), StatusCode::OK);
    }

    #[test]
    fn dual_posts_choose_their_era() {
        let post = |pairs: &[(&str, &str)], body: &str| {
            let mut req = TestRequest::post();
            for (k, v) in pairs {
                req = req.insert_header((*k, *v));
            }
            applies(EraFlag::Dual, &req.to_http_request(), &msg(body))
        };
        let init = r#"{"id":1,"method":"initialize","params":{}}"#;
        assert!(!post(&[], init));
        assert!(!post(&[("mcp-protocol-version", "2025-11-25")], init));
        assert!(post(&[("mcp-protocol-version", "2026-07-28")], init));
        assert!(post(&[("mcp-protocol-version", "v999.0.0")], init));
        assert!(post(&[], CALL), "_meta names a revision");
        assert!(!post(
            &[
                ("mcp-session-id", "s"),
                ("mcp-protocol-version", "2026-07-28")
            ],
            CALL
        ));
        let get = TestRequest::post().to_http_request();
        assert!(applies(EraFlag::Stateless, &get, &msg(init)));
        assert!(!applies(EraFlag::Session, &get, &msg(CALL)));
    }

    #[test]
    fn a_post_answers_json_or_streams_then_ends() {
        let (sink, mut first) = PostSink::new("p".into());
        sink.answer(b"{}".to_vec());
        assert!(matches!(first.try_recv(), Ok(First::Answer(_))));
        assert!(sink.answered());
        let (sink, mut first) = PostSink::new("p".into());
        sink.send(b"{\"n\":1}".to_vec());
        let Ok(First::Stream(mut events)) = first.try_recv() else {
            panic!("a stream");
        };
        assert!(!sink.answered());
        sink.answer(b"{\"id\":1}".to_vec());
        sink.send(b"{\"late\":1}".to_vec());
        assert_eq!(&events.try_recv().unwrap()[..], b"data: {\"n\":1}\n\n");
        assert_eq!(&events.try_recv().unwrap()[..], b"data: {\"id\":1}\n\n");
        assert!(events.try_recv().is_err(), "nothing after the answer");
    }
}
