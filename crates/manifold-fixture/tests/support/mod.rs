//! What the tests that drive the fixture binary share: the fixture over HTTP and over stdio,
//! JSON-RPC messages, and an SSE reader. Every wait is bounded by [`WAIT`]; fixtures are
//! killed when dropped.

// Test code: a failed unwrap is a failed test, with its message. Not every test file uses
// every helper.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use manifold_protocol::sse::{Event, Parser};
use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};

pub const WAIT: Duration = Duration::from_secs(10);
pub const FIXTURE: &str = env!("CARGO_BIN_EXE_manifold-fixture");

/// A fixture serving HTTP on a free loopback port; killed when dropped.
pub struct HttpFixture {
    child: Child,
    pub base: String,
    pub client: Client,
}

impl HttpFixture {
    pub fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(FIXTURE)
            .args(["--http", "127.0.0.1:0", "--name", "web"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the fixture");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(WAIT)
            .expect("the fixture says where it listens");
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        let client = Client::builder().no_proxy().build().expect("client");
        Self {
            child,
            base: format!("http://{addr}"),
            client,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, session: Option<&str>, body: &Value) -> Response {
        self.post_text(session, body.to_string()).await
    }

    /// POSTs `body` as it is written (for answers whose key order matters).
    pub async fn post_text(&self, session: Option<&str>, body: String) -> Response {
        let mut request = self
            .client
            .post(self.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        bounded(request.send()).await.expect("POST")
    }

    /// Initializes a Streamable HTTP session; returns its id.
    pub async fn initialize(&self) -> String {
        let response = self.post(None, &initialize()).await;
        assert_eq!(response.status(), StatusCode::OK);
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .expect("ascii session id")
            .to_owned();
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let status = self.post(Some(&id), &initialized).await.status();
        assert_eq!(status, StatusCode::ACCEPTED);
        id
    }
}

impl HttpFixture {
    /// POSTs a 2026-07-28 request with the headers that mirror its body.
    pub async fn post_modern(&self, body: &Value) -> Response {
        self.post_modern_with(body, &[]).await
    }

    /// [`HttpFixture::post_modern`] with `headers` added or replacing the mirrored ones.
    pub async fn post_modern_with(&self, body: &Value, headers: &[(&str, &str)]) -> Response {
        let method = body["method"].as_str().unwrap_or_default();
        let version = body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
            .as_str()
            .unwrap_or("2026-07-28");
        let mut mirrored = vec![("mcp-protocol-version", version), ("mcp-method", method)];
        let name = body["params"]["name"]
            .as_str()
            .or(body["params"]["uri"].as_str());
        if let Some(name) = name {
            mirrored.push(("mcp-name", name));
        }
        let mut request = self
            .client
            .post(self.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        for (key, value) in mirrored {
            if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(key)) {
                request = request.header(key, value);
            }
        }
        for (key, value) in headers {
            request = request.header(*key, *value);
        }
        bounded(request.send()).await.expect("POST")
    }

    /// A 2026-07-28 request answered with plain JSON: its status and answer.
    pub async fn modern_json(&self, body: &Value) -> (StatusCode, Value) {
        let response = self.post_modern(body).await;
        let status = response.status();
        assert_eq!(response.headers()["content-type"], "application/json");
        let bytes = bounded(response.bytes()).await.expect("body");
        (
            status,
            serde_json::from_slice(&bytes).expect("a JSON answer"),
        )
    }

    /// Opens the session's own stream (GET), where messages that belong to no request go.
    pub async fn own_stream(&self, session: &str) -> Events {
        let get = self.client.get(self.url("/mcp"));
        let get = get
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session);
        Events::new(bounded(get.send()).await.expect("GET"))
    }

    /// POSTs a request that is answered with plain JSON; returns that answer.
    pub async fn request(&self, session: &str, body: &Value) -> Value {
        let response = self.post(Some(session), body).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/json");
        let bytes = bounded(response.bytes()).await.expect("body");
        serde_json::from_slice(&bytes).expect("a JSON answer")
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn initialize() -> Value {
    json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": { "sampling": {} },
        "clientInfo": { "name": "test", "version": "1" } } })
}

/// The `_meta` of a 2026-07-28 request from a client with `capabilities`.
pub fn modern_meta(capabilities: Value) -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "test", "version": "1" },
            "io.modelcontextprotocol/clientCapabilities": capabilities })
}

/// A 2026-07-28 request from a client that declares elicitation, sampling and roots.
pub fn modern(id: u64, method: &str, mut params: Value) -> Value {
    let everything = json!({ "elicitation": {}, "sampling": {}, "roots": {} });
    params["_meta"] = modern_meta(everything);
    rpc(id, method, params)
}

/// A 2026-07-28 tools/call.
pub fn modern_call(id: u64, name: &str, arguments: Value) -> Value {
    modern(
        id,
        "tools/call",
        json!({ "name": name, "arguments": arguments }),
    )
}

pub fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": name, "arguments": arguments } })
}

/// A JSON-RPC request.
pub fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// The client's answer to `request`, one of the fixture's requests.
pub fn reply(request: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"], "result": result })
}

/// The client's error answer to `request`, one of the fixture's requests.
pub fn reply_error(request: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"], "error": { "code": code, "message": message } })
}

/// The text of the first content of a tools/call answer.
pub fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {answer}"))
}

pub async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

/// Reads SSE events from a response.
pub struct Events {
    response: Response,
    parser: Parser,
    ready: std::collections::VecDeque<Event>,
}

impl Events {
    pub fn new(response: Response) -> Self {
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "an SSE response"
        );
        Self {
            response,
            parser: Parser::new(1 << 20),
            ready: Default::default(),
        }
    }

    /// The next event, or None when the stream ends.
    pub async fn next(&mut self) -> Option<Event> {
        while self.ready.is_empty() {
            let chunk = bounded(self.response.chunk()).await.expect("read")?;
            let ready = &mut self.ready;
            self.parser.feed(&chunk, |e| ready.push_back(e));
        }
        self.ready.pop_front()
    }

    /// The next event's data as JSON, skipping priming events.
    pub async fn next_message(&mut self) -> Option<Value> {
        loop {
            let event = self.next().await?;
            if !event.data.is_empty() {
                return Some(serde_json::from_str(&event.data).expect("JSON data"));
            }
        }
    }
}

/// The fixture over stdio; killed when dropped.
pub struct StdioFixture {
    child: Child,
    input: Option<ChildStdin>,
    output: std::sync::mpsc::Receiver<Value>,
}

impl StdioFixture {
    pub fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(FIXTURE)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the fixture");
        let input = child.stdin.take().expect("stdin");
        let stdout: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).expect("JSON line"));
            }
        });
        Self {
            child,
            input: Some(input),
            output,
        }
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_line(&msg.to_string());
    }

    /// Sends one line as it is written (for answers whose key order matters).
    pub fn send_line(&mut self, line: &str) {
        let input = self.input.as_mut().expect("stdin is open");
        writeln!(input, "{line}").expect("write");
    }

    /// Closes the fixture's stdin, as a client shutting it down does.
    pub fn close_input(&mut self) {
        self.input = None;
    }

    pub fn receive(&self) -> Value {
        self.output.recv_timeout(WAIT).expect("a message")
    }

    /// Sends request `msg` and reads until its answer: what came before it, and the answer.
    pub fn request(&mut self, msg: &Value) -> (Vec<Value>, Value) {
        self.send(msg);
        self.until_answer(&msg["id"])
    }

    /// Reads until the answer to request `id`: what came before it, and the answer.
    pub fn until_answer(&self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let msg = self.receive();
            // The fixture's own requests have ids too; answers have no method.
            if msg["id"] == *id && msg.get("method").is_none() {
                return (before, msg);
            }
            before.push(msg);
        }
    }

    /// Sends `initialize` and `notifications/initialized`; returns the initialize answer.
    pub fn initialize(&mut self) -> Value {
        let (_, answer) = self.request(&initialize());
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        answer
    }

    /// The names in a tools/list answer of one page.
    pub fn tool_names(&mut self, id: u64) -> Vec<String> {
        let (_, tools) = self.request(&rpc(id, "tools/list", json!({})));
        tools["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for StdioFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
