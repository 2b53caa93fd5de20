//! What the load generator drives. A `Target` is one MCP session seen from the host's side:
//! complete messages go in, complete messages come out. Scenarios only talk to this trait, so
//! the same measuring code drives a stdio server (`StdioTarget`, launched from a
//! `TargetSpec`) and a session over Streamable HTTP (`HttpTarget`, one of many sessions a
//! running `HttpServer`, Manifold or the peer gateway, serves; or, in the stateless era, a
//! host that sends self-contained requests with no session at all).

mod http;
mod lines;
mod server;
mod stdio;
mod watchdog;
mod wire;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

pub use http::HttpTarget;
pub use server::{HttpServer, ServerSpec};
pub use stdio::StdioTarget;
pub use wire::HttpReader;

/// One host-side session with an MCP server. `Send`, so that concurrent sessions can each
/// run on a thread of their own.
pub trait Target: Send {
    /// A short name for messages and reports ("direct", "through-10", ...).
    fn label(&self) -> &str;
    /// Writes one or more complete messages (each ending in `\n`) in one go.
    fn send(&mut self, bytes: &[u8]) -> Result<()>;
    /// Writes one request made from a `RequestLine`; `headers` are the line's HTTP headers
    /// naming its method and tool, which only a stateless HTTP target sends (every other
    /// target sends the request as `send` would).
    fn send_request(&mut self, bytes: &[u8], headers: &str) -> Result<()> {
        let _ = headers;
        self.send(bytes)
    }
    /// The next message from the server, without its line ending; valid until the next call.
    fn recv(&mut self) -> Result<&[u8]>;
    /// The OS process serving this session, when there is one (RSS is read from it).
    fn server_pid(&self) -> Option<u32>;
    /// Bytes of the last request as written to the transport, framing included (an HTTP
    /// request's head and body), when the transport frames requests itself.
    fn last_request_len(&self) -> Option<usize> {
        None
    }
    /// Called before a timed loop, so that housekeeping (replacing an HTTP connection that
    /// sat idle) is not timed.
    fn ready(&mut self) -> Result<()> {
        Ok(())
    }
    /// Closes the transport's connection, when it has one apart from the session (HTTP):
    /// the session stays, and the next message opens a new connection.
    fn disconnect(&mut self) {}
    /// Goes on with the same session on a new connection to `server` (HTTP only): another
    /// replica of the one that made the session, or the same one.
    fn move_to(&mut self, server: &std::sync::Arc<HttpServer>) -> Result<()> {
        let _ = server;
        anyhow::bail!(
            "{}: only an HTTP session can move to another server",
            self.label()
        )
    }
}

/// How to launch a target. Each variant knows how to start one kind of transport.
#[derive(Debug, Clone)]
pub enum TargetSpec {
    Stdio(StdioSpec),
}

/// A server started as a child process speaking newline-delimited JSON-RPC on stdio.
#[derive(Debug, Clone)]
pub struct StdioSpec {
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Changes to the environment it inherits from the load generator: `Some` sets the
    /// variable, `None` removes it. Only this child (and what it starts) sees them.
    pub env: Vec<(String, Option<String>)>,
    /// The child's stderr goes here, so a failure can quote what the server said.
    pub log: PathBuf,
}

/// Bounds that apply to every target, whatever its transport.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A send or receive blocked this long means the server is stuck: it is killed.
    pub stall: Duration,
    /// Hard cap on a target's whole life, in case a scenario keeps a live server too long.
    pub lifetime: Duration,
    /// After stdin is closed, how long the server gets to exit before it is killed.
    pub exit_grace: Duration,
}

impl TargetSpec {
    /// Starts the server; the MCP handshake is the caller's (see `Session::start`).
    pub fn launch(&self, limits: Limits) -> Result<Box<dyn Target>> {
        match self {
            TargetSpec::Stdio(spec) => Ok(Box::new(StdioTarget::launch(spec, limits)?)),
        }
    }
}

/// How much of a server's stderr an error shows.
const STDERR_TAIL: u64 = 1500;

/// An error naming a server, why it failed (`killed`: why the watchdog killed it) and the end
/// of its stderr log.
fn failure(
    label: &str,
    log: &std::path::Path,
    pid: u32,
    what: &str,
    killed: Option<String>,
) -> anyhow::Error {
    let why = match killed {
        Some(why) => format!("was killed: {why}"),
        None => format!("{what} (pid {pid})"),
    };
    anyhow::anyhow!("{label} {why}; its stderr ends with:\n{}", stderr_tail(log))
}

/// The end of a server's stderr log, for an error that names why it failed.
fn stderr_tail(log: &std::path::Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(STDERR_TAIL)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}
