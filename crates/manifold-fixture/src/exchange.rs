//! Where messages go. Every request is handled through a [`Call`], which carries the
//! request's id and the [`Sink`] of the transport it came in on: over stdio that is stdout;
//! over Streamable HTTP it is the POST that carried the request (its JSON answer, or its SSE
//! stream when something comes before the answer). Messages that belong to no request go
//! through the [`Transport`].

use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::era::Modern;
use crate::rpc::{self, RpcError};
use crate::state::{Answer, State};

/// How long the fixture waits for the client to answer one of its requests.
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The way back to the client for one request.
pub trait Sink: Send + Sync {
    /// A message about the request sent before its answer: progress, logging, a request to
    /// the client. After the answer, a message goes to the client's own stream instead.
    fn send(&self, line: Vec<u8>);
    /// The request's answer: the last message about it.
    fn answer(&self, line: Vec<u8>);
    /// Ends the request's stream before the answer, as a server does to make its client
    /// reconnect and resume (SEP-1699). Only Streamable HTTP has such streams.
    fn close_stream(&self) {}
    /// Names the client (empty over stdio), so that request ids of different HTTP sessions
    /// never clash in the fixture's process-wide tables.
    fn client(&self) -> &str;
    /// The `traceparent` header of the HTTP request that carried the request, if it had one
    /// (the `trace_context` tool reports it).
    fn traceparent(&self) -> Option<&str> {
        None
    }
    /// The `Authorization` header of the HTTP request that carried the request, if any (the
    /// `trace_context` tool reports it too).
    fn authorization(&self) -> Option<&str> {
        None
    }
}

/// A sink that also knows the `traceparent` header of the POST that carried its request;
/// everything else is the inner sink's. Only requests that came with the header get one.
struct Traced {
    inner: Arc<dyn Sink>,
    traceparent: Option<String>,
    authorization: Option<String>,
}

impl Sink for Traced {
    fn send(&self, line: Vec<u8>) {
        self.inner.send(line);
    }

    fn answer(&self, line: Vec<u8>) {
        self.inner.answer(line);
    }

    fn close_stream(&self) {
        self.inner.close_stream();
    }

    fn client(&self) -> &str {
        self.inner.client()
    }

    fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }
}

/// `sink`, knowing the `traceparent` and `Authorization` header values if there are any.
pub fn traced(
    sink: Arc<dyn Sink>,
    traceparent: Option<&str>,
    authorization: Option<&str>,
) -> Arc<dyn Sink> {
    if traceparent.is_none() && authorization.is_none() {
        return sink;
    }
    Arc::new(Traced {
        inner: sink,
        traceparent: traceparent.map(str::to_owned),
        authorization: authorization.map(str::to_owned),
    })
}

/// Messages that belong to no request, and leaving.
pub trait Transport: Send + Sync {
    /// Sends a notification to every client: stdout, or every HTTP session's own stream.
    fn broadcast(&self, line: &[u8]);
    /// Sends a notification to one client (as [`Sink::client`] names it): stdout, or that
    /// HTTP session's own stream. False if there is no such client (any more).
    fn send_to(&self, client: &str, line: &[u8]) -> bool;
    /// Exits the process without cutting a message in half.
    fn exit(&self, code: i32) -> !;
}

/// One request being handled.
pub struct Call {
    pub id: Value,
    sink: Arc<dyn Sink>,
    /// Set for a request of the stateless era (2026-07-28).
    modern: Option<Arc<Modern>>,
}

impl Call {
    pub fn new(id: Value, sink: Arc<dyn Sink>) -> Self {
        Self {
            id,
            sink,
            modern: None,
        }
    }

    /// A request of the stateless era: its results get `resultType`, the server's identity
    /// and caching hints, its log messages go out only as its `_meta` asked, and it cannot
    /// send requests to its client (see `era` and `mrtr`).
    pub fn stateless(id: Value, sink: Arc<dyn Sink>, modern: Modern) -> Self {
        Self {
            id,
            sink,
            modern: Some(Arc::new(modern)),
        }
    }

    /// What the stateless era says about this request; None in the session era.
    pub fn modern(&self) -> Option<&Modern> {
        self.modern.as_deref()
    }

    /// The way back to the request's client (what a listen stream keeps).
    pub fn sink(&self) -> Arc<dyn Sink> {
        Arc::clone(&self.sink)
    }

    /// The client that sent this request (see [`Sink::client`]).
    pub fn client(&self) -> &str {
        self.sink.client()
    }

    /// The `traceparent` HTTP header that came with this request (never over stdio).
    pub fn traceparent(&self) -> Option<&str> {
        self.sink.traceparent()
    }

    pub fn authorization(&self) -> Option<&str> {
        self.sink.authorization()
    }

    /// This request's key in the fixture's process-wide tables.
    pub fn key(&self) -> String {
        request_key(self.sink.client(), &self.id)
    }

    pub fn reply(&self, reply: Result<Value, RpcError>) {
        let reply = match (&self.modern, reply) {
            (Some(modern), Ok(result)) => Ok(modern.finish(result)),
            (_, reply) => reply,
        };
        self.sink.answer(rpc::response(&self.id, &reply));
    }

    pub fn result(&self, result: Value) {
        self.reply(Ok(result));
    }

    pub fn error(&self, error: RpcError) {
        self.reply(Err(error));
    }

    /// Answers with bytes as they are (the deliberate garbage of some tools).
    pub fn raw_answer(&self, bytes: &[u8]) {
        self.sink.answer(bytes.to_vec());
    }

    /// Sends a notification about this request before its answer. In the stateless era a
    /// `notifications/message` goes out only at or above the level the request's `_meta`
    /// asked for, and not at all without one.
    pub fn notify(&self, method: &str, params: &Value) {
        if let Some(modern) = &self.modern {
            let level = params.get("level").and_then(Value::as_str);
            if method == "notifications/message" && !modern.wants_log(level) {
                return;
            }
        }
        self.sink.send(rpc::notification(method, params));
    }

    pub fn close_stream(&self) {
        self.sink.close_stream();
    }

    /// Sends a request to the client and waits (bounded) for its answer: the `result` as the
    /// exact JSON text the client sent, or the client's `error` as an [`RpcError`]. Blocks,
    /// so only call threads may use it.
    pub fn ask_raw(
        &self,
        state: &State,
        method: &str,
        params: &Value,
    ) -> Result<Box<RawValue>, RpcError> {
        let asked = self.send_request(state, None, method, params)?;
        asked.wait(state)
    }

    /// Sends a request to the client without waiting for its answer (several may then be
    /// pending at once); its id is `name` if given (see [`State::expect_named_answer`]).
    pub fn send_request(
        &self,
        state: &State,
        name: Option<&str>,
        method: &str,
        params: &Value,
    ) -> Result<Asked, RpcError> {
        if self.modern.is_some() {
            // No request goes to a client in the stateless era: `mrtr` asks instead.
            return Err(RpcError::new(
                -32603,
                format!("a 2026-07-28 request cannot send {method} to its client"),
            ));
        }
        let (id, answer) = match name {
            Some(name) => state.expect_named_answer(name),
            None => state.expect_answer(),
        };
        self.sink.send(rpc::request(&id, method, params));
        Ok(Asked {
            id,
            method: method.to_owned(),
            answer,
        })
    }
}

/// A request sent to the client, waiting for its answer.
pub struct Asked {
    id: Value,
    method: String,
    answer: Receiver<Answer>,
}

impl Asked {
    /// Waits (bounded) for the answer: the `result` as the exact JSON text the client sent,
    /// or its `error`. Blocks, so only call threads may use it.
    pub fn wait(self, state: &State) -> Result<Box<RawValue>, RpcError> {
        let reply = self.answer.recv_timeout(CLIENT_ANSWER_TIMEOUT);
        state.forget_answer(&self.id);
        let method = &self.method;
        match reply {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(client_error(&error)),
            Err(_) => Err(RpcError::new(
                -32001,
                format!("the client did not answer {method} within {CLIENT_ANSWER_TIMEOUT:?}"),
            )),
        }
    }

    /// [`Asked::wait`], the result parsed.
    pub fn wait_value(self, state: &State) -> Result<Value, RpcError> {
        let method = self.method.clone();
        parse_answer(&method, &self.wait(state)?)
    }
}

fn parse_answer(method: &str, raw: &RawValue) -> Result<Value, RpcError> {
    // The text was parsed once already, so this only fails on a fixture bug.
    serde_json::from_str(raw.get())
        .map_err(|e| RpcError::new(-32603, format!("unreadable answer to {method}: {e}")))
}

/// Key of request `id` of `client` in the in-flight tables (the id's JSON text over stdio).
pub fn request_key(client: &str, id: &Value) -> String {
    if client.is_empty() {
        id.to_string()
    } else {
        format!("{client} {id}")
    }
}

/// A client's JSON-RPC error object as an [`RpcError`], whatever shape it came in.
fn client_error(error: &Value) -> RpcError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned);
    RpcError {
        code,
        message,
        data: error.get("data").cloned(),
    }
}

/// Notification params for one log message of `logger`.
pub fn log_params(level: &str, logger: &str, data: impl Into<Value>) -> Value {
    json!({ "level": level, "logger": logger, "data": data.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_clients() {
        assert_eq!(request_key("", &json!(1)), "1");
        assert_eq!(request_key("", &json!("1")), "\"1\"");
        assert_ne!(request_key("a", &json!(1)), request_key("b", &json!(1)));
    }

    #[test]
    fn client_errors_keep_code_and_message() {
        let e = client_error(&json!({ "code": -32601, "message": "no sampling" }));
        assert_eq!((e.code, e.message.as_str()), (-32601, "no sampling"));
        let odd = client_error(&json!("broken"));
        assert_eq!(odd.code, -32603);
        assert_eq!(odd.message, "\"broken\"");
    }
}
