//! Upstreams played by a script in the same process, for tests (the `scripted` feature; the
//! shipped binary does not carry it). The connection is the one every upstream has, started
//! by the actor like any other; only its wire differs: what Manifold sends goes to a thread
//! that records it and hands it to the script's handler for its method, and what the script
//! pushes back is read as if the upstream wrote it.
//!
//! ```ignore
//! let script = Script::new()
//!     .tool(json!({"name": "echo", "inputSchema": {"type": "object"}}))
//!     .on("tools/call", |msg, up| up.result(msg.id().unwrap(), json!({"content": []})));
//! let ups = scripted::start(vec![("up", script)]).await?; // inside an actix system
//! let conn = ups.handles[0].connection().unwrap();
//! ```
//!
//! The handshake is the session era's by default: `initialize` is answered with the
//! capabilities of the catalog given (tools always; prompts and resources when there are
//! some), and each list with the catalog. A handler given for `initialize`, a list or
//! `server/discover` (with [`Script::era`] `"auto"` or `"stateless"`) replaces the default.
//! A method without a handler is recorded and never answered; a handler may answer later (an
//! [`Upstream`] may be kept and used from any thread), or not at all.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use manifold_catalog::UpstreamDef;
use manifold_protocol::Envelope;
use serde_json::{json, Value};

use crate::connection::{Connection, Events, Timing, Wire};
use crate::outbound::Outbound;
use crate::pipe::WriteError;
use crate::{Hub, UpstreamHandle};

/// One message Manifold sent to a scripted upstream.
#[derive(Debug, Clone)]
pub struct Message {
    method: Option<String>,
    id: Option<String>,
    params: Option<String>,
    line: String,
}

impl Message {
    fn parse(line: &[u8]) -> Self {
        let text = String::from_utf8_lossy(line).trim_end().to_owned();
        let env = Envelope::decode(text.as_bytes()).ok();
        let part = |f: fn(&Envelope<'_>) -> Option<String>| env.as_ref().and_then(f);
        Self {
            method: part(|e| e.method.as_deref().map(str::to_owned)),
            id: part(|e| e.id.map(str::to_owned)),
            params: part(|e| e.params.map(str::to_owned)),
            line: text,
        }
    }

    /// The method, for a request or a notification.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// The id, as JSON text (`7`, `"a"`), for a request or an answer.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The params, parsed (`Null` when there are none).
    pub fn params(&self) -> Value {
        self.params
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or(Value::Null)
    }

    /// The whole message, as sent (without its newline).
    pub fn line(&self) -> &str {
        &self.line
    }
}

/// The way back from a script: every line is read by the connection as if the upstream wrote
/// it. Cheap to clone; usable from any thread, and after the connection ended (it then does
/// nothing).
#[derive(Clone)]
pub struct Upstream {
    conn: Weak<Connection>,
}

impl Upstream {
    /// Reads `line` as a message from the upstream; one that breaks the protocol ends the
    /// connection, as it would a real one's.
    pub fn push(&self, line: &str) {
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        if let Err(problem) = conn.receive(line.as_bytes(), None) {
            conn.close(&problem);
        }
    }

    /// Answers request `id` (JSON text) with `result`.
    pub fn result(&self, id: &str, result: Value) {
        self.push(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        ));
    }

    /// Answers request `id` (JSON text) with an error.
    pub fn error(&self, id: &str, code: i64, message: &str) {
        let error = json!({"code": code, "message": message});
        self.push(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#));
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.push(&message.to_string());
    }

    /// Reports progress on the request whose progress token is `token` (JSON text).
    pub fn progress(&self, token: &str, progress: f64) {
        let token: Value = serde_json::from_str(token).unwrap_or(Value::Null);
        let params = json!({"progressToken": token, "progress": progress});
        self.notify("notifications/progress", params);
    }

    /// Sends a request of the upstream's to its client (sampling, elicitation, roots).
    pub fn request(&self, id: &str, method: &str, params: Value) {
        self.push(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ));
    }

    /// Ends the connection, as a process that exits would; the actor restarts it.
    pub fn exit(&self, reason: &str) {
        if let Some(conn) = self.conn.upgrade() {
            conn.close(reason);
        }
    }
}

type Handler = Arc<dyn Fn(&Message, &Upstream) + Send + Sync>;

/// An upstream's script: its catalog, its era and its handlers by method.
#[derive(Clone)]
pub struct Script {
    era: &'static str,
    tools: Vec<Value>,
    prompts: Vec<Value>,
    resources: Vec<Value>,
    handlers: HashMap<String, Handler>,
}

impl Default for Script {
    fn default() -> Self {
        Self::new()
    }
}

impl Script {
    /// A session-era upstream with an empty catalog that answers only its handshake.
    pub fn new() -> Self {
        Self {
            era: "session",
            tools: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            handlers: HashMap::new(),
        }
    }

    /// The upstream's `era` setting (`session`, `auto`, `stateless`).
    pub fn era(mut self, era: &'static str) -> Self {
        self.era = era;
        self
    }

    /// Adds a tool to the catalog (a tool object, as `tools/list` lists it).
    pub fn tool(mut self, tool: Value) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a prompt to the catalog.
    pub fn prompt(mut self, prompt: Value) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// Adds a resource to the catalog.
    pub fn resource(mut self, resource: Value) -> Self {
        self.resources.push(resource);
        self
    }

    /// Handles `method` (a request or a notification) with `handler`, in place of the
    /// default (if any) or of silence.
    pub fn on(
        mut self,
        method: &str,
        handler: impl Fn(&Message, &Upstream) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.insert(method.to_owned(), Arc::new(handler));
        self
    }

    /// Plays `msg`: its handler, else the default handshake and lists, else nothing.
    fn play(&self, msg: &Message, up: &Upstream) {
        let Some(method) = msg.method() else { return };
        if let Some(handler) = self.handlers.get(method) {
            return handler(msg, up);
        }
        let Some(id) = msg.id() else { return };
        let list = |key: &str, items: &[Value]| {
            let mut list = serde_json::Map::new();
            list.insert(key.to_owned(), Value::from(items.to_vec()));
            Value::Object(list)
        };
        match method {
            "initialize" => up.result(id, self.initialize_result()),
            "ping" => up.result(id, json!({})),
            "tools/list" => up.result(id, list("tools", &self.tools)),
            "prompts/list" => up.result(id, list("prompts", &self.prompts)),
            "resources/list" => up.result(id, list("resources", &self.resources)),
            "resources/templates/list" => up.result(id, list("resourceTemplates", &[])),
            "server/discover" => up.error(id, -32601, "method not found"),
            _ => {}
        }
    }

    fn initialize_result(&self) -> Value {
        let mut capabilities = json!({"tools": {"listChanged": true}});
        if !self.prompts.is_empty() {
            capabilities["prompts"] = json!({"listChanged": true});
        }
        if !self.resources.is_empty() {
            capabilities["resources"] = json!({"listChanged": true});
        }
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "serverInfo": {"name": "scripted", "version": "1"},
        })
    }
}

/// A script as its connections share it: the script and what they received.
pub(crate) struct Played {
    script: Script,
    received: Mutex<Vec<Message>>,
}

impl Played {
    fn received(&self) -> Vec<Message> {
        self.received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The wire to a script: lines go to its thread.
struct ScriptWire {
    tx: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    reason: Arc<Mutex<Option<String>>>,
}

impl Wire for ScriptWire {
    fn send(&self, msg: Outbound) -> Result<(), WriteError> {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match tx.as_ref().map(|tx| tx.send(msg.line.to_vec())) {
            Some(Ok(())) => Ok(()),
            _ => Err(WriteError::Closed),
        }
    }

    fn close(&self, reason: &str) {
        let mut why = self
            .reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        why.get_or_insert_with(|| reason.to_owned());
        drop(why);
        // The thread ends once it has played what was sent before.
        self.tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// Starts a connection to `played` (the actor's start, in place of a transport's). `exited`
/// is called once, from the script's thread, when the connection has ended.
pub(crate) fn connect(
    played: &Arc<Played>,
    key: &str,
    timing: Timing,
    events: Box<dyn Events>,
    exited: Box<dyn FnOnce(String) + Send>,
) -> Result<Arc<Connection>, String> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reason = Arc::new(Mutex::new(None));
    let wire = ScriptWire {
        tx: Mutex::new(Some(tx)),
        reason: Arc::clone(&reason),
    };
    let conn = Arc::new(Connection::new(key, Box::new(wire), events, timing));
    let up = Upstream {
        conn: Arc::downgrade(&conn),
    };
    let played = Arc::clone(played);
    std::thread::Builder::new()
        .name(format!("scripted-{key}"))
        .spawn(move || {
            for line in rx {
                let msg = Message::parse(&line);
                played
                    .received
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(msg.clone());
                played.script.play(&msg, &up);
            }
            let why = reason
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            exited(why.unwrap_or_else(|| "the script ended".to_owned()));
        })
        .map_err(|e| format!("could not start the script's thread: {e}"))?;
    Ok(conn)
}

/// Scripted upstreams, started.
pub struct Upstreams {
    pub hub: Arc<Hub>,
    /// In the order given to [`start`].
    pub handles: Vec<UpstreamHandle>,
    played: Vec<Arc<Played>>,
}

impl Upstreams {
    /// Every message upstream `index` received, in order, across its connections.
    pub fn received(&self, index: usize) -> Vec<Message> {
        self.played
            .get(index)
            .map(|p| p.received())
            .unwrap_or_default()
    }

    /// Waits (up to 10 s) for upstream `index` to receive a message of `method` that `pick`
    /// accepts, and returns it.
    pub async fn wait_for(
        &self,
        index: usize,
        method: &str,
        pick: impl Fn(&Message) -> bool,
    ) -> Option<Message> {
        for _ in 0..1000 {
            let seen = self.received(index);
            let found = seen
                .into_iter()
                .find(|m| m.method() == Some(method) && pick(m));
            if found.is_some() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Stops every upstream.
    pub async fn shutdown(&self) {
        for handle in &self.handles {
            handle.shutdown().await;
        }
    }
}

/// Starts one upstream per script, named as given (names a configuration accepts as
/// upstream keys), behind one hub, and waits (up to 10 s) for their first starts. Must be
/// called within a running actix system.
pub async fn start(mut scripts: Vec<(&str, Script)>) -> Result<Upstreams, String> {
    // The configuration orders upstreams by key: the scripts are paired with them in that order.
    scripts.sort_by(|a, b| a.0.cmp(b.0));
    let mut text = String::new();
    for (name, script) in &scripts {
        text.push_str(&format!(
            "[upstreams.{name}]\ncommand = \"scripted\"\nera = \"{}\"\nrestart_initial_backoff_ms = 100\n",
            script.era
        ));
    }
    let config = manifold_config::parse_str(Path::new("/scripted.toml"), &text, &|_| None)
        .map_err(|e| format!("the scripted upstreams' configuration: {e}"))?;
    let defs: Arc<[UpstreamDef]> = config
        .upstreams
        .iter()
        .map(UpstreamDef::from_config)
        .collect();
    let hub = Hub::new(defs, config.names.clone(), 0);
    let timing = Timing {
        request: Duration::from_secs(10),
        max: Duration::from_secs(60),
    };
    let mut handles = Vec::new();
    let mut played = Vec::new();
    for (index, ((_, script), cfg)) in scripts.into_iter().zip(config.upstreams).enumerate() {
        let script = Arc::new(Played {
            script,
            received: Mutex::new(Vec::new()),
        });
        let grace = Duration::from_secs(1);
        let hub = Arc::clone(&hub);
        let dial = Arc::clone(&script);
        handles.push(UpstreamHandle::start_scripted(
            index, cfg, timing, grace, hub, dial,
        ));
        played.push(script);
    }
    hub.wait_settled(Duration::from_secs(10)).await;
    Ok(Upstreams {
        hub,
        handles,
        played,
    })
}

#[cfg(test)]
mod tests;
