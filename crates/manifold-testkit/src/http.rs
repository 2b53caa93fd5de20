//! Runs the real `manifold` binary serving HTTP on a loopback port it picks, and speaks
//! Streamable HTTP and the HTTP+SSE transport to it the way a host does. Every wait is
//! bounded, so a broken build fails instead of hanging.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::process::{admin_port_in, fixture_bin, manifold_bin, TempDir, WAIT};

/// A running `manifold serve --listen 127.0.0.1:0`.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub stderr: Arc<Mutex<String>>,
    /// `https` when the config has `[server.tls]`.
    pub scheme: &'static str,
    /// Holds the config; removed when the server is dropped.
    _dir: TempDir,
}

impl Server {
    /// Starts Manifold on `config` (TOML text) with an HTTP listener on a free loopback port.
    pub fn start(config: &str) -> Server {
        Server::start_with(config, "info,manifold_upstream=debug", &[], "127.0.0.1")
    }

    /// The same, logging at `log` (`MANIFOLD_LOG`), with `env` set, listening on `ip` (a free
    /// port); reached on loopback all the same.
    pub fn start_with(config: &str, log: &str, env: &[(&str, &str)], ip: &str) -> Server {
        Server::launch(config, log, env, ip, "http")
    }

    /// Starts Manifold serving HTTPS on `ip` (a free port): `tls` is the `[server.tls]` table
    /// added to `config`. Hosts must trust the CA that signed its certificate (`host_using`).
    pub fn start_https(config: &str, tls: &str, ip: &str) -> Server {
        let config = format!("{config}\n{tls}");
        Server::launch(&config, "info,manifold_upstream=debug", &[], ip, "https")
    }

    fn launch(
        config: &str,
        log: &str,
        env: &[(&str, &str)],
        ip: &str,
        scheme: &'static str,
    ) -> Server {
        let dir = TempDir::new("http");
        let path = dir.write("manifold.toml", config);
        let mut cmd = Command::new(manifold_bin());
        cmd.args(["serve", "--config", path.to_str().unwrap()])
            .args(["--listen", &format!("{ip}:0")])
            .env("MANIFOLD_LOG", log)
            .envs(env.iter().copied());
        let (child, port, stderr) = spawn_listening(cmd, "manifold", ip);
        Server {
            child,
            port,
            stderr,
            scheme,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    /// The config file it serves (rewrite it, then reload).
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.path().join("manifold.toml")
    }

    /// Writes `config` over the file it serves and asks for a reload on the admin address
    /// (`server.admin = "127.0.0.1:0"`); returns the status and the answer.
    pub fn reload(&self, config: &str) -> (StatusCode, Value) {
        std::fs::write(self.config_path(), config).unwrap();
        let r = client().post(self.admin_url("/reload")).send().unwrap();
        let status = r.status();
        (status, r.json().unwrap_or(Value::Null))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `path` on the admin address (`server.admin = "127.0.0.1:0"` in the config).
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", admin_port_in(|| self.stderr()))
    }

    /// A host: a client with its own connection pool, not yet in a session.
    pub fn host(&self) -> Host {
        self.host_using(client())
    }

    /// A host sending its requests with `client` (default headers such as credentials).
    pub fn host_using(&self, client: Client) -> Host {
        Host {
            client,
            url: self.url("/mcp"),
            session: None,
            next_id: 1,
        }
    }

    /// A host that completed the handshake.
    pub fn ready_host(&self) -> Host {
        self.ready_host_using(client())
    }

    /// A host sending its requests with `client` that completed the handshake.
    pub fn ready_host_using(&self, client: Client) -> Host {
        let mut host = self.host_using(client);
        let init = host.initialize("2025-06-18");
        assert_eq!(init.status(), StatusCode::OK, "{}", self.stderr());
        host
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Unless a test stopped it already (its pid may be another process's by now).
        let running = self.child.try_wait().ok().flatten().is_none();
        if let Some(pid) = i32::try_from(self.child.id()).ok().filter(|_| running) {
            // SIGTERM: the shutdown a supervisor gives.
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `manifold serve` on `config` (TOML text), expecting it to refuse to start: it must
/// exit with a failure status (bounded wait); returns what it wrote to stderr.
pub fn serve_refused(config: &str) -> String {
    let dir = TempDir::new("refused");
    let path = dir.write("manifold.toml", config);
    let mut child = Command::new(manifold_bin())
        .args(["serve", "--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("manifold serve did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "exited with {status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// Spawns `cmd` with its stderr collected, and waits (bounded) for the port it reports
/// listening on at `ip`.
pub fn spawn_listening(mut cmd: Command, what: &str, ip: &str) -> (Child, u16, Arc<Mutex<String>>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = Arc::clone(&stderr);
    let pipe = child.stderr.take().unwrap();
    let marker = format!("listening on {ip}:");
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            // The admin address, when there is one, is not the one hosts use.
            let admin = line.contains("admin listening on");
            let port = listening_port(&line, &marker).filter(|_| !admin);
            // Kept before the port is told, so that a test reading the log once the server
            // listens finds the line that said so.
            {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
            if let Some(port) = port {
                let _ = tx.send(port);
            }
        }
    });
    let port = rx.recv_timeout(WAIT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("{what} did not listen; stderr:\n{}", stderr.lock().unwrap())
    });
    (child, port, stderr)
}

fn listening_port(line: &str, marker: &str) -> Option<u16> {
    let rest = line.split(marker).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub fn client() -> Client {
    Client::builder()
        .timeout(WAIT)
        .build()
        .expect("an HTTP client")
}

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

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// How many times the fixture behind `upstream` (its prefix) did `what`: `tool:NAME` or
    /// `read:URI`, in its own names (see `process::Manifold::call_count`).
    pub fn call_count(&mut self, upstream: &str, what: &str) -> u64 {
        let r = self.call(&format!("{upstream}__call_count"), json!({"what": what}));
        crate::process::text_of(&r)
            .parse()
            .unwrap_or_else(|e| panic!("call_count answered {r}: {e}"))
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

/// The fixture server in its HTTP mode, as an HTTP upstream.
pub struct FixtureHttp {
    pub child: Child,
    pub port: u16,
    pub stderr: Arc<Mutex<String>>,
    args: Vec<String>,
}

impl FixtureHttp {
    /// Starts `manifold-fixture --http 127.0.0.1:PORT ARGS` (port 0: a free one).
    pub fn start(port: u16, args: &[&str]) -> FixtureHttp {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut cmd = Command::new(fixture_bin());
        cmd.arg("--http")
            .arg(format!("127.0.0.1:{port}"))
            .args(&args);
        let (child, port, stderr) = spawn_listening(cmd, "the fixture", "127.0.0.1");
        FixtureHttp {
            child,
            port,
            stderr,
            args,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Kills the server (an upstream that becomes unreachable).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new server on the same port, which knows none of the old one's sessions.
    pub fn restart(&mut self) {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let until = Instant::now() + WAIT;
        loop {
            // The port may take a moment to be free again.
            let attempt = std::panic::catch_unwind(|| FixtureHttp::start(self.port, &args));
            match attempt {
                Ok(new) => {
                    *self = new;
                    return;
                }
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    }
}

impl Drop for FixtureHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
