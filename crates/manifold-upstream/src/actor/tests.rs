//! An upstream actor against a fake Streamable HTTP server of either era (std threads and
//! HTTP/1.1 by hand, so the test needs nothing the crate does not): the probe, the
//! stateless era's `_meta` and headers, errors carried by HTTP statuses, cancellation by
//! closing a POST, the `subscriptions/listen` stream and its resource subscriptions, list
//! refreshes by notification and by caching hint, and the fallback to `initialize`.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use manifold_catalog::{Catalog, Kind, UpstreamDef, UpstreamState};
use manifold_protocol::version::Era;
use serde_json::{json, Value};

use crate::pending::{Exchange, Finish, Forward, ServerRequest};
use crate::{Answer, Hub, Listener, Outbound, Timing, UpstreamHandle};

/// One request the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    verb: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn method(&self) -> &str {
        self.body["method"].as_str().unwrap_or("")
    }
}

#[derive(Default)]
struct FakeState {
    /// Answer like a session-era server: no `server/discover`, sessions.
    legacy: bool,
    seen: Vec<Seen>,
    tools: Vec<Value>,
    tools_ttl_ms: u64,
    /// Open listen streams: request id, filter, and where their events go.
    listens: Vec<(Value, Value, mpsc::Sender<String>)>,
    /// Ids of listen requests whose stream the client closed.
    closed: Vec<Value>,
    /// Tool calls whose POST the client closed before the answer.
    cancelled: Vec<Value>,
}

struct Fake {
    url: String,
    state: Arc<Mutex<FakeState>>,
}

impl Fake {
    fn start(legacy: bool, tools: &[&str], tools_ttl_ms: u64) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(FakeState {
            legacy,
            tools: tools.iter().map(|t| tool(t)).collect(),
            tools_ttl_ms,
            ..FakeState::default()
        }));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        Fake { url, state }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    fn seen_of(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method() == method)
            .collect()
    }

    /// Sends a notification on every open listen stream, tagged with its subscription id.
    fn notify(&self, method: &str, mut params: Value) {
        for (id, _, tx) in &self.state().listens {
            params["_meta"] = json!({"io.modelcontextprotocol/subscriptionId": id});
            let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
            let _ = tx.send(message.to_string());
        }
    }
}

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object", "properties": {
        "text": {"type": "string"},
        "region": {"type": "string", "x-mcp-header": "Region"}
    }}})
}

fn write_response(out: &mut TcpStream, status: &str, extra: &str, body: &str) -> bool {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    );
    out.write_all(head.as_bytes()).is_ok() && out.write_all(body.as_bytes()).is_ok()
}

fn result(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Serves one HTTP/1.1 connection until the client closes it.
fn serve(stream: TcpStream, state: &Mutex<FakeState>) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let verb = line.split(' ').next().unwrap_or("").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let seen = Seen {
            verb: verb.clone(),
            headers,
            body: body.clone(),
        };
        let legacy = {
            let mut st = state.lock().unwrap();
            st.seen.push(seen);
            st.legacy
        };
        if verb != "POST" {
            write_response(&mut out, "405 Method Not Allowed", "", "");
            continue;
        }
        let id = body["id"].clone();
        let method = body["method"].as_str().unwrap_or("").to_owned();
        if id.is_null() {
            write_response(&mut out, "202 Accepted", "", "");
            continue;
        }
        let tools = state.lock().unwrap().tools.clone();
        let ttl = state.lock().unwrap().tools_ttl_ms;
        let ok = match (legacy, method.as_str()) {
            (true, "initialize") => write_response(
                &mut out,
                "200 OK",
                "Mcp-Session-Id: s-1\r\n",
                &result(
                    &id,
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "fake-legacy", "version": "1"}}),
                ),
            ),
            (true, "tools/list") => write_response(
                &mut out,
                "200 OK",
                "",
                &result(&id, json!({"tools": tools})),
            ),
            // A session-era server refuses what comes without a session, without JSON-RPC.
            (true, _) => write_response(&mut out, "400 Bad Request", "", "no valid session"),
            (false, "server/discover") => write_response(
                &mut out,
                "200 OK",
                "",
                &result(
                    &id,
                    json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                           "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true}},
                           "instructions": "be kind",
                           "ttlMs": 0, "cacheScope": "public",
                           "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fake", "version": "2"}}}),
                ),
            ),
            (false, "tools/list") => write_response(
                &mut out,
                "200 OK",
                "",
                &result(
                    &id,
                    json!({"resultType": "complete", "tools": tools, "ttlMs": ttl, "cacheScope": "private"}),
                ),
            ),
            (false, "resources/list" | "resources/templates/list") => write_response(
                &mut out,
                "200 OK",
                "",
                &result(
                    &id,
                    json!({"resultType": "complete", "resources": [], "resourceTemplates": [], "ttlMs": 0, "cacheScope": "public"}),
                ),
            ),
            (false, "tools/call") => match body["params"]["name"].as_str() {
                Some("refuse") => write_response(
                    &mut out,
                    "400 Bad Request",
                    "",
                    &error(&id, -32020, "Header mismatch"),
                ),
                Some("slow") => {
                    // No answer: wait for the client to close the POST.
                    let mut buf = [0u8; 1];
                    let _ = reader.read(&mut buf);
                    state.lock().unwrap().cancelled.push(id);
                    return;
                }
                _ => write_response(
                    &mut out,
                    "200 OK",
                    "",
                    &result(
                        &id,
                        json!({"resultType": "complete", "content": [{"type": "text", "text": body["params"]["arguments"]["text"]}]}),
                    ),
                ),
            },
            (false, "subscriptions/listen") => {
                listen(&mut out, state, id, body["params"]["notifications"].clone());
                return;
            }
            (false, _) => write_response(
                &mut out,
                "404 Not Found",
                "",
                &error(&id, -32601, "Method not found"),
            ),
        };
        if !ok {
            return;
        }
    }
}

/// A listen stream: the acknowledgment, then what `Fake::notify` sends, until the client
/// closes it (found by writing keep-alive comments).
fn listen(out: &mut TcpStream, state: &Mutex<FakeState>, id: Value, filter: Value) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                     "params": {"notifications": filter, "_meta": {"io.modelcontextprotocol/subscriptionId": id}}});
    if out
        .write_all(format!("{head}event: message\ndata: {ack}\n\n").as_bytes())
        .is_err()
    {
        return;
    }
    let (tx, rx) = mpsc::channel();
    state.lock().unwrap().listens.push((id.clone(), filter, tx));
    loop {
        let chunk = match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(message) => format!("event: message\ndata: {message}\n\n"),
            Err(_) => ":\n\n".to_owned(),
        };
        if out.write_all(chunk.as_bytes()).is_err() {
            let mut st = state.lock().unwrap();
            st.listens.retain(|(i, _, _)| *i != id);
            st.closed.push(id);
            return;
        }
    }
}

/// What the hub tells the server.
#[derive(Default)]
struct Heard {
    lists: Mutex<Vec<Kind>>,
    notifications: Mutex<Vec<(String, Option<String>)>>,
}

impl Listener for Heard {
    fn lists_changed(&self, _before: &Catalog, _after: &Catalog, kinds: &[Kind]) {
        self.lists.lock().unwrap().extend_from_slice(kinds);
    }

    fn upstream_notification(
        &self,
        _upstream: usize,
        _session: Option<u64>,
        method: &str,
        params: Option<&str>,
    ) {
        self.notifications
            .lock()
            .unwrap()
            .push((method.to_owned(), params.map(str::to_owned)));
    }

    fn upstream_ready(&self, _upstream: usize) {}
}

/// A host's forwarded request: its outcome goes to a channel.
struct Host(Mutex<Option<mpsc::Sender<String>>>);

impl Exchange for Host {
    fn progress(&self, _params: &str) {}

    fn finish(self: Box<Self>, outcome: Finish<'_>) {
        let text = match outcome {
            Finish::Result(r) => r.to_owned(),
            Finish::Error(e) => format!("error {e}"),
            Finish::Failed(e) => format!("failed {e}"),
        };
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(text);
        }
    }

    fn session(&self) -> u64 {
        7
    }

    fn is(&self, session: u64, host_id: &str) -> bool {
        session == 7 && host_id == "\"h1\""
    }

    fn server_request(&self, _request: ServerRequest) {}

    fn related(&self, _line: &[u8]) {}
}

struct Running {
    hub: Arc<Hub>,
    heard: Arc<Heard>,
    handle: UpstreamHandle,
}

/// Starts an actor for the upstream at `url` (with `era`), and waits for its first start.
async fn start(url: &str, era: &str) -> Running {
    let text = format!("[upstreams.up]\nurl = \"{url}\"\nera = \"{era}\"\nprefix = \"\"\nuri_prefix = \"\"\nrestart_initial_backoff_ms = 60000\nrestart_max_backoff_ms = 60000\n");
    let config = manifold_config::parse_str(Path::new("/t/m.toml"), &text, &|_| None).unwrap();
    let defs: Arc<[UpstreamDef]> = config
        .upstreams
        .iter()
        .map(UpstreamDef::from_config)
        .collect();
    let hub = Hub::new(defs, config.names.clone(), 0);
    let heard = Arc::new(Heard::default());
    let weak: Weak<dyn Listener> = Arc::downgrade(&(Arc::clone(&heard) as Arc<dyn Listener>));
    hub.set_listener(weak);
    let timing = Timing {
        request: Duration::from_secs(5),
        max: Duration::from_secs(10),
    };
    let cfg = config.upstreams[0].clone();
    let handle = UpstreamHandle::start(0, cfg, timing, Duration::from_secs(1), Arc::clone(&hub));
    hub.wait_settled(Duration::from_secs(10)).await;
    Running { hub, heard, handle }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn tool_names(hub: &Hub) -> Vec<String> {
    let catalog = hub.catalog();
    let Some(slice) = catalog.slice(0) else {
        return Vec::new();
    };
    slice
        .tools
        .iter()
        .map(|t| {
            serde_json::from_str::<Value>(t.get()).unwrap()["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn result_text(answer: Answer) -> String {
    match answer {
        Answer::Result(r) => r,
        Answer::Error(e) => panic!("refused: {e}"),
    }
}

#[test]
fn a_stateless_http_upstream_is_spoken_to_in_its_era() {
    let fake = Fake::start(false, &["echo"], 300);
    actix::System::new().block_on(async move {
        let up = start(&fake.url, "auto").await;
        let conn = up.handle.connection().expect("connected");
        assert_eq!(up.handle.era(), Some(Era::Stateless));
        assert_eq!(conn.era(), Era::Stateless);
        assert!(matches!(up.hub.catalog().state(0), UpstreamState::Up));
        let slice = Arc::clone(up.hub.catalog().slice(0).unwrap());
        assert_eq!(slice.protocol_version, "2026-07-28");
        assert_eq!(slice.instructions.as_deref(), Some("be kind"));
        assert_eq!(slice.server_info.as_ref().unwrap().get(), r#"{"name":"fake","version":"2"}"#);
        assert!(slice.has_feature("resources", "subscribe"));
        let hint = slice.hint(Kind::Tools).unwrap();
        assert_eq!((hint.ttl_ms, hint.private), (300, true));
        assert_eq!(slice.hint(Kind::Resources).map(|h| h.ttl_ms), Some(0));
        assert_eq!(tool_names(&up.hub), ["echo"]);

        // The probe came first; every POST carried the era's headers and `_meta`, and no
        // session; nothing else was asked (no initialize, no GET stream).
        let seen = fake.seen();
        assert_eq!(seen[0].method(), "server/discover");
        for s in &seen {
            assert_eq!(s.verb, "POST", "{s:?}");
            assert_eq!(s.header("mcp-protocol-version"), Some("2026-07-28"), "{s:?}");
            assert_eq!(s.header("mcp-method"), Some(s.method()), "{s:?}");
            assert_eq!(s.header("mcp-session-id"), None, "{s:?}");
            let meta = &s.body["params"]["_meta"];
            assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
            assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "manifold");
            assert!(meta["io.modelcontextprotocol/clientCapabilities"]["elicitation"].is_object());
            assert!(!["initialize", "ping", "logging/setLevel"].contains(&s.method()));
        }

        // A call names its tool and mirrors the annotated parameter into a header.
        let answer = conn
            .request("tools/call", Some(r#"{"name":"echo","arguments":{"text":"hi","region":"eu west"}}"#))
            .await
            .unwrap();
        assert!(result_text(answer).contains("\"hi\""));
        let call = fake.seen_of("tools/call").pop().unwrap();
        assert_eq!(call.header("mcp-name"), Some("echo"));
        assert_eq!(call.header("mcp-param-region"), Some("eu west"));

        // An error carried by an HTTP status is the request's answer.
        match conn.request("tools/call", Some(r#"{"name":"refuse"}"#)).await.unwrap() {
            Answer::Error(e) => assert!(e.contains("-32020"), "{e}"),
            Answer::Result(r) => panic!("answered {r}"),
        }
        // A method the stateless era dropped is served without being sent.
        assert_eq!(result_text(conn.request("ping", None).await.unwrap()), "{}");
        assert_eq!(fake.seen_of("ping").len(), 0);
        let set = conn.request("logging/setLevel", Some(r#"{"level":"warning"}"#)).await;
        assert_eq!(result_text(set.unwrap()), "{}");
        conn.request("tools/call", Some(r#"{"name":"echo","arguments":{"text":"x"}}"#))
            .await
            .unwrap();
        let last = fake.seen_of("tools/call").pop().unwrap();
        assert_eq!(last.body["params"]["_meta"]["io.modelcontextprotocol/logLevel"], "warning");

        // A forwarded line without the era's `_meta` gets it.
        let (tx, rx) = mpsc::channel();
        let id = conn.next_id();
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"fwd\"}},\"_meta\":{{\"progressToken\":{id}}}}}}}\n"
        );
        let fwd = Forward {
            exchange: Box::new(Host(Mutex::new(Some(tx)))),
            progress_token: None,
            timeout: None,
        };
        let msg = Outbound::request(id, "tools/call", line).named(Some("echo".into()));
        conn.forward(msg, fwd);
        let outcome = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        assert!(outcome.contains("\"fwd\""), "{outcome}");
        let sent = fake.seen_of("tools/call").pop().unwrap();
        let meta = &sent.body["params"]["_meta"];
        assert_eq!(meta["progressToken"], id);
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28");

        // Cancelling a forwarded request closes its POST (no notifications/cancelled).
        let (tx, rx) = mpsc::channel();
        let id = conn.next_id();
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"slow\"}}}}\n");
        let fwd = Forward {
            exchange: Box::new(Host(Mutex::new(Some(tx)))),
            progress_token: None,
            timeout: None,
        };
        let msg = Outbound::request(id, "tools/call", line).named(Some("slow".into()));
        conn.forward(msg, fwd);
        eventually("the slow call reaches the server", || {
            fake.seen().iter().any(|s| s.body["params"]["name"] == "slow")
        })
        .await;
        assert!(conn.cancel_for(7, "\"h1\"", Some("the host gave up")));
        eventually("the server sees the POST closed", || {
            fake.state().cancelled.contains(&json!(id))
        })
        .await;
        drop(rx);
        assert!(fake.seen_of("notifications/cancelled").is_empty());
    });
}

#[test]
fn a_stateless_upstream_is_listened_to_and_refreshed_by_ttl() {
    let fake = Fake::start(false, &["echo"], 400);
    actix::System::new().block_on(async move {
        let up = start(&fake.url, "stateless").await;
        let conn = up.handle.connection().expect("connected");
        // It declared tools.listChanged (not prompts, not resources): that is asked for.
        eventually("a listen stream", || fake.state().listens.len() == 1).await;
        let (first, filter) = {
            let st = fake.state();
            (st.listens[0].0.clone(), st.listens[0].1.clone())
        };
        assert_eq!(filter, json!({"toolsListChanged": true}));

        // A list change it announces is fetched and heard.
        fake.state().tools.push(tool("second"));
        fake.notify("notifications/tools/list_changed", json!({}));
        eventually("the new tool", || tool_names(&up.hub).len() == 2).await;
        assert!(up.heard.lists.lock().unwrap().contains(&Kind::Tools));

        // Subscribing opens a stream for the resource, then closes the old one.
        let answer = conn
            .request("resources/subscribe", Some(r#"{"uri":"test://a"}"#))
            .await
            .unwrap();
        assert_eq!(result_text(answer), "{}");
        assert!(fake.seen_of("resources/subscribe").is_empty());
        eventually("a stream with the resource", || {
            fake.state().listens.iter().any(|(_, f, _)| {
                f == &json!({"toolsListChanged": true, "resourceSubscriptions": ["test://a"]})
            })
        })
        .await;
        eventually("the first stream closed", || {
            fake.state().closed.contains(&first)
        })
        .await;
        fake.notify(
            "notifications/resources/updated",
            json!({"uri": "test://a"}),
        );
        eventually("the update relayed", || {
            !up.heard.notifications.lock().unwrap().is_empty()
        })
        .await;
        let (method, params) = up.heard.notifications.lock().unwrap()[0].clone();
        assert_eq!(method, "notifications/resources/updated");
        // Without the upstream's subscription id.
        assert_eq!(params.as_deref(), Some(r#"{"uri":"test://a"}"#));

        // Tools go stale after 400 ms: before that, asking costs nothing.
        let lists_before = fake.seen_of("tools/list").len();
        fake.state().tools.retain(|t| t["name"] == "echo");
        up.handle.refresh_if_stale();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(fake.seen_of("tools/list").len(), lists_before);
        up.heard.lists.lock().unwrap().clear();
        eventually("the stale list fetched again", || {
            up.handle.refresh_if_stale();
            tool_names(&up.hub) == ["echo"]
        })
        .await;
        assert_eq!(*up.heard.lists.lock().unwrap(), [Kind::Tools]);
        // Stale again, unchanged: fetched, and nobody told.
        let lists_before = fake.seen_of("tools/list").len();
        eventually("fetched once more", || {
            up.handle.refresh_if_stale();
            fake.seen_of("tools/list").len() > lists_before
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*up.heard.lists.lock().unwrap(), [Kind::Tools]);

        // Unsubscribing from the last resource leaves the list changes only.
        conn.request("resources/unsubscribe", Some(r#"{"uri":"test://a"}"#))
            .await
            .unwrap();
        eventually("a stream without the resource", || {
            let st = fake.state();
            st.listens.len() == 1 && st.listens[0].1 == json!({"toolsListChanged": true})
        })
        .await;
    });
}

#[test]
fn a_session_era_http_upstream_gets_initialize_unless_the_stateless_era_is_required() {
    let fake = Fake::start(true, &["echo"], 0);
    actix::System::new().block_on(async move {
        let up = start(&fake.url, "auto").await;
        let conn = up.handle.connection().expect("connected");
        assert_eq!(conn.era(), Era::Session);
        let slice = Arc::clone(up.hub.catalog().slice(0).unwrap());
        assert_eq!(slice.protocol_version, "2025-06-18");
        assert_eq!(slice.hint(Kind::Tools), None);
        assert_eq!(
            slice.server_info.as_ref().unwrap().get(),
            r#"{"name":"fake-legacy","version":"1"}"#
        );
        let seen = fake.seen();
        assert_eq!(seen[0].method(), "server/discover");
        assert_eq!(seen[1].method(), "initialize");
        assert_eq!(seen[1].header("mcp-method"), None);
        let list = fake.seen_of("tools/list").pop().unwrap();
        assert_eq!(list.header("mcp-session-id"), Some("s-1"));
        assert!(list.body["params"].get("_meta").is_none(), "{list:?}");
        // A request that carries the stateless era's `_meta` (a host's, passed on) is still
        // sent in this connection's era.
        let params = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#;
        result_text(conn.request("tools/list", Some(params)).await.unwrap());
        let list = fake.seen_of("tools/list").pop().unwrap();
        assert_eq!(list.header("mcp-session-id"), Some("s-1"));
        assert_eq!(list.header("mcp-method"), None);
    });
    let fake = Fake::start(true, &["echo"], 0);
    actix::System::new().block_on(async move {
        let up = start(&fake.url, "session").await;
        assert_eq!(up.handle.era(), Some(Era::Session));
        assert_eq!(fake.seen()[0].method(), "initialize", "no probe");
    });
    let fake = Fake::start(true, &["echo"], 0);
    actix::System::new().block_on(async move {
        let up = start(&fake.url, "stateless").await;
        let catalog = up.hub.catalog();
        let UpstreamState::Down { reason } = catalog.state(0) else {
            panic!("up: {:?}", catalog.state(0));
        };
        assert!(
            reason.contains("does not speak the stateless era"),
            "{reason}"
        );
        assert!(fake.seen_of("initialize").is_empty());
    });
}
