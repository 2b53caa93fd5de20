//! A host speaking Streamable HTTP to `manifold serve --listen`, and the SSE streams it reads.

use std::io::{BufRead, BufReader};

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::process::WAIT;
use crate::requests::Requests;

/// One host speaking Streamable HTTP.
pub struct Host {
    pub client: Client,
    pub url: String,
    pub session: Option<String>,
    pub next_id: u64,
}

impl Host {
    /// A POST carrying `body` with the headers a host sends.
    pub fn post_raw(&self, body: impl Into<reqwest::blocking::Body>) -> RequestBuilder {
        let mut r = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(s) = &self.session {
            r = r
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        r
    }

    pub fn initialize(&mut self, version: &str) -> Response {
        self.initialize_with_meta(version, Value::Null)
    }

    /// `initialize` whose params carry `meta` as `_meta` (unless null).
    pub fn initialize_with_meta(&mut self, version: &str, meta: Value) -> Response {
        let mut params = json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}});
        if !meta.is_null() {
            params["_meta"] = meta;
        }
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
        let r = self.post_raw(body.to_string()).send().unwrap();
        if let Some(s) = r.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_owned());
            let n = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let ack = self.post_raw(n.to_string()).send().unwrap();
            assert_eq!(ack.status(), StatusCode::ACCEPTED);
        }
        r
    }

    /// Sends a request; returns the response without reading it.
    pub fn send(&mut self, method: &str, params: Value) -> (u64, Response) {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, self.post_raw(body.to_string()).send().unwrap())
    }

    /// Sends a request and returns its answer, from a JSON body or the end of an SSE stream.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let (id, r) = self.send(method, params);
        assert_eq!(r.status(), StatusCode::OK, "{method}");
        let messages = messages_of(r);
        messages
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {method}"))
    }

    /// The names in the first page of `tools/list`.
    pub fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({}));
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {r}"))
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Opens the session's GET stream.
    pub fn listen(&self, last_event_id: Option<&str>) -> Response {
        let mut r = self
            .client
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header(
                "mcp-session-id",
                self.session.as_deref().unwrap_or_default(),
            )
            .timeout(WAIT);
        if let Some(id) = last_event_id {
            r = r.header("last-event-id", id);
        }
        r.send().unwrap()
    }

    pub fn delete(&self) -> Response {
        self.client
            .delete(&self.url)
            .header(
                "mcp-session-id",
                self.session.as_deref().unwrap_or_default(),
            )
            .send()
            .unwrap()
    }
}

/// Every message of a response: its JSON body, or the data of each SSE event.
pub fn messages_of(r: Response) -> Vec<Value> {
    let sse = content_type(&r).starts_with("text/event-stream");
    if !sse {
        let text = r.text().unwrap();
        return vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))];
    }
    let mut events = Events::new(r);
    let mut out = Vec::new();
    while let Some(e) = events.next_event() {
        out.push(serde_json::from_str(&e.data).unwrap());
    }
    out
}

pub fn content_type(r: &Response) -> String {
    r.headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// One SSE event as read (comments are kept, for keep-alive checks).
#[derive(Debug, Default, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub kind: Option<String>,
    pub data: String,
    pub comment: bool,
}

/// Reads SSE events from a response as they arrive.
pub struct Events {
    reader: BufReader<Response>,
}

impl Events {
    pub fn new(r: Response) -> Self {
        Self {
            reader: BufReader::new(r),
        }
    }

    /// `host`'s own stream (GET), once it is attached: its first keep-alive comment has come
    /// (set a short `server.sse_keepalive_ms`).
    pub fn attached(host: &Host) -> Self {
        let mut events = Self::new(host.listen(None));
        while !events.next_event().expect("the stream").comment {}
        events
    }

    /// The next event or comment; `None` at the end of the stream.
    pub fn next_event(&mut self) -> Option<Event> {
        let mut event = Event::default();
        let mut any = false;
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return any.then_some(event),
                Ok(_) => {}
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if any {
                    return Some(event);
                }
                continue;
            }
            any = true;
            if line.starts_with(':') {
                event.comment = true;
            } else if let Some(v) = line.strip_prefix("id: ") {
                event.id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event.kind = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                event.data.push_str(v);
            }
        }
    }

    /// The next event that is not a comment.
    pub fn next_message(&mut self) -> Option<(Option<String>, Value)> {
        loop {
            let e = self.next_event()?;
            if !e.comment || !e.data.is_empty() {
                return Some((e.id, serde_json::from_str(&e.data).unwrap()));
            }
        }
    }

    /// Drops the rest of the stream (the connection closes).
    pub fn close(self) {
        drop(self.reader.into_inner());
    }
}

/// The JSON-RPC error code of an answer.
pub fn code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {v}"))
}

impl Requests for Host {
    fn request(&mut self, method: &str, params: Value) -> Value {
        Host::request(self, method, params)
    }
}
