//! The router in process, over scripted upstreams (`manifold_upstream::scripted`): no child
//! process, no socket. A [`Harness`] builds a router from the same parts the binary gives it,
//! with the upstreams played by scripts; a [`Host`] is one session whose outlet collects what
//! its host would read. Every wait is bounded (10 s) and fails the test with what was seen.
//!
//! The transports' own behaviour (framing, pacing, HTTP statuses) is tested through the binary
//! in the `manifold` crate's integration tests; these tests are about routing.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod calls;
mod failures;
mod forwarding;
mod server_requests;
mod stateless;

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use manifold_upstream::scripted::{self, Script, Upstreams};
use serde_json::{json, Value};

use super::{releases, Parts, Router};
use crate::cache::Cache;
use crate::context::Origin;
use crate::outlet::Outlet;
use crate::policy::Teams;
use crate::replicas::InMemory;
use crate::session::{Session, Transport};
use crate::sessions::Sessions;

/// How long any wait lasts before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(5);

/// Runs a test's body in an actix system, as the binary runs the router.
pub(super) fn run(body: impl Future<Output = ()>) {
    actix::System::new().block_on(body);
}

/// A router over scripted upstreams.
pub(super) struct Harness {
    pub router: Arc<Router>,
    pub ups: Upstreams,
}

impl Harness {
    /// A router over `scripts` (upstream key, script), with default settings.
    pub async fn start(scripts: Vec<(&str, Script)>) -> Self {
        Self::configured(scripts, &[]).await
    }

    /// A router over `scripts` whose configuration adds `settings` (upstream key, TOML lines
    /// of its table, such as `tool_cache.echo = { ttl = "1m" }`). Keys must be given in
    /// alphabetical order: upstreams are indexed by sorted key, as in a configuration.
    pub async fn configured(scripts: Vec<(&str, Script)>, settings: &[(&str, &str)]) -> Self {
        let keys: Vec<&str> = scripts.iter().map(|(key, _)| *key).collect();
        assert!(keys.is_sorted(), "upstream keys in sorted order: {keys:?}");
        let config = configuration(&keys, settings);
        let ups = scripted::start(scripts).await.expect("the scripts started");
        for handle in &ups.handles {
            let started = handle.connected(PATIENCE).await;
            assert!(started.is_some(), "{} connected", handle.key_arc());
        }
        let (sessions, ending) = Sessions::new(16);
        let released = releases();
        let cache = Cache::new(&config.cache, &config.upstreams, &released.0, &InMemory);
        let router = Router::new(Parts {
            hub: Arc::clone(&ups.hub),
            upstreams: ups.handles.clone(),
            isolation: None,
            sessions,
            ending,
            settings: config.server.clone(),
            runtime: tokio::runtime::Handle::current(),
            layers: Vec::new(),
            teams: Arc::new(Teams::new(&config.teams)),
            stdio_team: None,
            cache,
            released,
            discovery: config.discovery.clone(),
        });
        Self { router, ups }
    }

    /// A new session whose host has not said anything yet.
    pub fn connect(&self) -> Host {
        let outlet = Arc::new(Collected::default());
        let session = Session::new(Transport::Stdio, outlet.clone());
        self.router
            .sessions()
            .add(Arc::clone(&session), None)
            .expect("room for the session");
        let origin = Origin::new(Some(Arc::clone(&session)), outlet.clone());
        Host {
            router: Arc::clone(&self.router),
            session,
            origin,
            outlet,
        }
    }

    /// A session whose host completed the handshake declaring `capabilities`.
    pub async fn initialized(&self, capabilities: Value) -> Host {
        let host = self.connect();
        let params = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "test", "version": "1"},
        });
        let init = host.request("init", "initialize", params).await;
        assert!(init.get("result").is_some(), "initialized: {init}");
        host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        host
    }

    /// Ends every session, then stops the upstreams.
    pub async fn stop(self) {
        for session in self.router.sessions().all() {
            self.router.end_session(session.id(), "the test is over");
        }
        self.ups.shutdown().await;
    }
}

/// The configuration the router is given: `keys` as upstreams (the scripted wire's own
/// configuration names them the same way), each with its `settings`.
fn configuration(keys: &[&str], settings: &[(&str, &str)]) -> manifold_config::Config {
    let mut text = String::new();
    for key in keys {
        text.push_str(&format!("[upstreams.{key}]\ncommand = \"scripted\"\n"));
        for (_, lines) in settings.iter().filter(|(k, _)| k == key) {
            text.push_str(lines);
            text.push('\n');
        }
    }
    manifold_config::parse_str(Path::new("/router-test.toml"), &text, &|_| None)
        .expect("the test configuration parses")
}

/// An outlet that keeps every message, as the host would read them.
#[derive(Default)]
struct Collected(Mutex<Vec<Value>>);

impl Collected {
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Outlet for Collected {
    fn answer(&self, parts: &[&[u8]]) {
        let line = parts.concat();
        let message = serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("the host got broken JSON ({e}): {line:?}"));
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }
}

/// One host session.
pub(super) struct Host {
    router: Arc<Router>,
    pub session: Arc<Session>,
    origin: Origin,
    outlet: Arc<Collected>,
}

impl Host {
    /// Sends one message, as its transport would hand it to the router.
    pub fn send(&self, message: Value) {
        self.router
            .handle_line(&self.origin, message.to_string().as_bytes());
    }

    /// Sends request `id` (a string id) and waits for its answer.
    pub async fn request(&self, id: &str, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id).await
    }

    /// Waits for the answer to request `id`.
    pub async fn answer(&self, id: &str) -> Value {
        self.wait_for(|m| m["id"] == id && m.get("method").is_none())
            .await
    }

    /// Waits for a message `pick` accepts, and returns the first one.
    pub async fn wait_for(&self, pick: impl Fn(&Value) -> bool) -> Value {
        let mut waited = Duration::ZERO;
        loop {
            if let Some(found) = self.seen().into_iter().find(|m| pick(m)) {
                return found;
            }
            assert!(
                waited < PATIENCE,
                "the host waited in vain; it saw {:?}",
                self.seen()
            );
            tokio::time::sleep(POLL).await;
            waited += POLL;
        }
    }

    /// Everything the host received, in order.
    pub fn seen(&self) -> Vec<Value> {
        self.outlet.all()
    }
}

/// A tool definition the scripts list.
pub(super) fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object"}})
}

/// An upstream with tools `echo` (answers with its `text` argument at once) and `slow` (never
/// answered). A call of any other name is answered as `echo`'s, so that a name sent wrong
/// shows in what the upstream received rather than as a timeout.
pub(super) fn echo_script() -> Script {
    Script::new()
        .tool(tool("echo"))
        .tool(tool("slow"))
        .on("tools/call", |msg, up| {
            let params = msg.params();
            if params["name"] != "slow" {
                let text = params["arguments"]["text"].clone();
                let result = json!({"content": [{"type": "text", "text": text}]});
                up.result(msg.id().unwrap(), result);
            }
        })
}

/// How many `tools/call` requests upstream `index` received.
pub(super) fn calls_received(ups: &Upstreams, index: usize) -> usize {
    ups.received(index)
        .iter()
        .filter(|m| m.method() == Some("tools/call"))
        .count()
}

/// Waits for upstream `index` to receive any message (an answer included) that `pick`
/// accepts, and returns it.
pub(super) async fn upstream_got(
    ups: &Upstreams,
    index: usize,
    pick: impl Fn(&scripted::Message) -> bool,
) -> scripted::Message {
    let mut waited = Duration::ZERO;
    loop {
        if let Some(found) = ups.received(index).into_iter().find(|m| pick(m)) {
            return found;
        }
        assert!(waited < PATIENCE, "the upstream waited in vain");
        tokio::time::sleep(POLL).await;
        waited += POLL;
    }
}
