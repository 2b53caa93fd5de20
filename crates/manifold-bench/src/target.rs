//! What the load generator drives. A `Target` is one MCP session seen from the host's side:
//! complete messages go in, complete messages come out. Scenarios only talk to this trait, so
//! an HTTP client or a peer gateway slots in later as another implementation (and another
//! `TargetSpec` variant) without touching the measuring code.

mod lines;
mod stdio;
mod watchdog;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

pub use stdio::StdioTarget;

/// One host-side session with an MCP server.
pub trait Target {
    /// A short name for messages and reports ("direct", "through-10", ...).
    fn label(&self) -> &str;
    /// Writes one or more complete messages (each ending in `\n`) in one go.
    fn send(&mut self, bytes: &[u8]) -> Result<()>;
    /// The next message from the server, without its line ending; valid until the next call.
    fn recv(&mut self) -> Result<&[u8]>;
    /// The OS process serving this session, when there is one (RSS is read from it).
    fn server_pid(&self) -> Option<u32>;
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
