//! `manifold-fixture`: a fast, deterministic MCP server over stdio used by the integration
//! tests, the demo config and the benchmarks.
//!
//! It speaks newline-delimited JSON-RPC 2.0 on stdin/stdout with plain std threads: fast
//! requests are answered inline on the reader thread (benchmarks compare calls through the
//! aggregator with calls straight to this fixture, so the direct path must stay lean), slow
//! tool calls get their own thread so they never delay other requests.
#![forbid(unsafe_code)]

mod calls;
mod catalog;
mod methods;
mod paging;
mod rpc;
mod state;
mod tools;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use serde::Deserialize;
use serde_json::Value;

use crate::rpc::RpcError;
use crate::state::State;

/// Command-line flags; every behaviour a test needs to provoke is switched on here.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "manifold-fixture",
    version,
    about = "Deterministic fixture MCP server (stdio)"
)]
pub struct Args {
    /// Server name: used in serverInfo.name, descriptions and resource URIs.
    #[arg(long, default_value = "fixture")]
    pub name: String,
    /// Adds tools `tool_0` .. `tool_{N-1}` (each behaves like `echo`).
    #[arg(long, default_value_t = 0)]
    pub extra_tools: usize,
    /// Adds prompts `prompt_0` .. `prompt_{N-1}`.
    #[arg(long, default_value_t = 0)]
    pub extra_prompts: usize,
    /// Page size of every list method; 0 disables pagination.
    #[arg(long, default_value_t = 0)]
    pub page_size: usize,
    /// Protocol version to answer regardless of what the client asks for.
    #[arg(long)]
    pub protocol_version: Option<String>,
    /// Service time in microseconds added to every tools/call.
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Exit immediately with this code before reading anything ("fails to start").
    #[arg(long, allow_negative_numbers = true)]
    pub exit_on_start: Option<i32>,
    /// Write `this is not json` to stdout before anything else.
    #[arg(long)]
    pub garbage_on_start: bool,
    /// Omit the prompts capability and answer -32601 to prompts/*.
    #[arg(long)]
    pub no_prompts: bool,
    /// Omit the resources capability and answer -32601 to resources/*.
    #[arg(long)]
    pub no_resources: bool,
    /// Append own pid and a newline to this file at start (lets tests count launches).
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Instructions returned by initialize.
    #[arg(long)]
    pub instructions: Option<String>,
}

/// One incoming line. Unknown members (`jsonrpc`, `result`, ...) are ignored on purpose:
/// the fixture is lenient about what it accepts and strict about what it sends.
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Value,
}

fn main() {
    let args = Args::parse();
    let pid = std::process::id();
    // The pid file is written before --exit-on-start so restart tests can count launches
    // of a server that never comes up.
    if let Some(path) = &args.pid_file {
        append_pid(path, pid);
    }
    if let Some(code) = args.exit_on_start {
        eprintln!(
            "manifold-fixture {} exiting on start with code {code}",
            args.name
        );
        std::process::exit(code);
    }
    eprintln!("manifold-fixture {} started pid={pid}", args.name);
    let state = Arc::new(State::new(args, pid));
    if state.args.garbage_on_start {
        state.out.raw(b"this is not json");
    }
    read_loop(&state);
}

fn append_pid(path: &std::path::Path, pid: u32) {
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        // One write call: appends from several fixtures sharing a file must not interleave.
        .and_then(|mut f| f.write_all(format!("{pid}\n").as_bytes()));
    if let Err(e) = written {
        // A test asked for the pid file and would misread its absence; stop loudly.
        eprintln!(
            "manifold-fixture: cannot write pid file {}: {e}",
            path.display()
        );
        std::process::exit(1);
    }
}

/// Reads until EOF, then exits 0 at once (in-flight slow calls are abandoned: a closed
/// stdin is how an MCP client shuts a stdio server down).
fn read_loop(state: &Arc<State>) {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => state.out.exit(0),
            Ok(_) => {}
            Err(e) => {
                eprintln!("manifold-fixture: stdin read failed: {e}");
                state.out.exit(1);
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        handle_line(state, &line);
    }
}

fn handle_line(state: &Arc<State>, line: &[u8]) {
    let msg: Incoming = match serde_json::from_slice(line) {
        Ok(m) => m,
        Err(e) => {
            // Valid JSON of the wrong shape is an invalid request; anything else is a parse error.
            let err = if e.is_data() {
                RpcError::new(-32600, format!("Invalid request: {e}"))
            } else {
                RpcError::new(-32700, format!("Parse error: {e}"))
            };
            state.out.error(&Value::Null, &err);
            return;
        }
    };
    match (msg.method, msg.id) {
        (Some(method), Some(id)) => methods::request(state, &method, id, msg.params),
        (Some(method), None) => methods::notification(state, &method, &msg.params),
        // A response: the fixture never sends requests, so there is nothing to match it to.
        (None, _) => {}
    }
}
