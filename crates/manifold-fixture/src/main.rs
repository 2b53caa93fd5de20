//! `manifold-fixture`: a fast, deterministic MCP server used by the integration tests, the
//! demo config, the benchmarks and the conformance harness.
//!
//! By default it speaks newline-delimited JSON-RPC 2.0 on stdin/stdout with plain std
//! threads: fast requests are answered inline on the reader thread (benchmarks compare calls
//! through the aggregator with calls straight to this fixture, so the direct path must stay
//! lean), slow tool calls get their own thread so they never delay other requests.
//!
//! With `--http ADDR` it serves the same behaviour over Streamable HTTP at `/mcp` and the
//! 2024-11-05 HTTP+SSE transport at `/sse` (see `http`). `--conformance` adds what the
//! official conformance suite's server scenarios call (see `conformance`). Opt-in features
//! for Manifold's own tests: `--client-tools` (tools that ask the client something, see
//! `client_tools`), `--tasks` (task-augmented tools/call, see `tasks`),
//! `--subscriptions` (resource subscriptions per client, see `subscriptions`) and `--hints`
//! (tool annotations, which decide what a result cache may keep, see `tools::hints`);
//! `--faults` (HTTP faults switched at run time: 500s, dropped connections, stalled
//! streams, see `http::fault`); `--no-get-stream` and `--refuse-first-version` (what some of
//! the conformance suite's client-mode mock servers do, see `http::mocks`).
//!
//! `--era` chooses the protocol era: the session era of 2024-11-05 .. 2025-11-25 (the
//! default), the stateless era of 2026-07-28, or both (see `era`; stateless-era routing in
//! `modern`, multi round-trip requests in `mrtr`, `subscriptions/listen` in `listen`).
#![forbid(unsafe_code)]

mod calls;
mod catalog;
mod client_tools;
mod conformance;
mod era;
mod exchange;
mod extension;
mod http;
mod listen;
mod methods;
mod modern;
mod mrtr;
mod paging;
mod rpc;
mod skills;
mod state;
mod subscriptions;
mod tasks;
mod tools;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use manifold_protocol::version::Era;
use serde_json::Value;

use crate::era::{CacheScope, EraFlag};
use crate::exchange::{Sink, Transport};
use crate::rpc::{Incoming, Output};
use crate::state::State;

/// Command-line flags; every behaviour a test needs to provoke is switched on here.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "manifold-fixture",
    version,
    about = "Deterministic fixture MCP server (stdio, or HTTP with --http)"
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
    /// Write `this is not json` to stdout before anything else (over HTTP: the first POST
    /// is answered with that body, or with that event on its HTTP+SSE stream).
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
    /// Serve MCP over HTTP on this address (Streamable HTTP at /mcp, HTTP+SSE at /sse)
    /// instead of stdio; port 0 picks a free port, printed once bound.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Add the tools, prompts, resources and methods the official MCP conformance suite's
    /// server scenarios call (test_simple_text, test://static-text, ...).
    #[arg(long)]
    pub conformance: bool,
    /// Add the tools `ask_roots`, `ask_sampling`, `ask_elicitation` (they ask the client
    /// and report its answer) and `complete_elicitation`.
    #[arg(long)]
    pub client_tools: bool,
    /// Support task-augmented tools/call and tasks/get, tasks/result, tasks/list and
    /// tasks/cancel (MCP 2025-11-25, experimental).
    #[arg(long)]
    pub tasks: bool,
    /// Accept resources/subscribe and unsubscribe, remembered per client, and add the tools
    /// `touch` (notifies a URI's subscribers) and `subscriptions`.
    #[arg(long)]
    pub subscriptions: bool,
    /// Add `annotations` to tools in tools/list: `readOnlyHint: true, openWorldHint: false`
    /// on echo, sleep, big, fail, progress, links (and, with --client-tools, ask_roots,
    /// ask_sampling, ask_elicitation); `readOnlyHint: true, openWorldHint: true` on whoami;
    /// `readOnlyHint: true` alone (open-world by default) on add; `readOnlyHint: false` on
    /// crash, add_tool, log. Other tools get none. Without it no tool has annotations.
    #[arg(long)]
    pub hints: bool,
    /// Start with a run-time tool already added, as `add_tool` adds it (so that `add_tool`
    /// can later change its description): `NAME`, `NAME=DESCRIPTION`, or `NAME=@FILE` to read
    /// the description from FILE at start.
    #[arg(long = "dynamic-tool")]
    pub dynamic_tools: Vec<String>,
    /// Protocol era: `session` (2024-11-05 .. 2025-11-25: initialize, then a session; what
    /// the fixture always spoke), `stateless` (2026-07-28 only: no handshake, `_meta` on every
    /// request) or `dual` (both: a stdio connection's first request chooses, and each HTTP
    /// POST does).
    #[arg(long, value_enum, default_value_t = EraFlag::Session)]
    pub era: EraFlag,
    /// Stateless era: the `ttlMs` caching hint of server/discover, tools/list, prompts/list,
    /// resources/list, resources/templates/list and resources/read results (0: stale at once).
    #[arg(long, default_value_t = 0)]
    pub ttl_ms: u64,
    /// Stateless era: the `cacheScope` of those results.
    #[arg(long, value_enum, default_value_t = CacheScope::Private)]
    pub cache_scope: CacheScope,
    /// Over HTTP: serve `POST /fault?mode=none|status500|reset|stall`, which makes every
    /// later POST carrying a request fail that way (see `http::fault`).
    #[arg(long)]
    pub faults: bool,
    /// With `--faults`: the fault on from the start.
    #[arg(long, value_enum, default_value_t = http::fault::Fault::None)]
    pub fault: http::fault::Fault,
    /// Over HTTP, as some conformance mock servers: never issue `Mcp-Session-Id`, serve every
    /// POST without one, answer GET and DELETE 404 (see `http::mocks`).
    #[arg(long)]
    pub no_get_stream: bool,
    /// Over HTTP, as the conformance suite's `request-metadata` mock: refuse the first
    /// request with 400 and -32022 (unsupported protocol version) listing the revisions
    /// spoken here, and log the revision the next request names (see `http::mocks`).
    #[arg(long)]
    pub refuse_first_version: bool,
    /// Declare an extension Manifold does not know: `NAME` or `NAME=SETTINGS` (a JSON
    /// object), under `capabilities.extensions` (see `extension`).
    #[arg(long, value_name = "NAME[=SETTINGS]")]
    pub extension: Option<String>,
    /// The method of that extension the fixture answers, echoing its params.
    #[arg(long, value_name = "METHOD")]
    pub extension_method: Option<String>,
    /// Declare the skills extension and serve its skills (see `skills`).
    #[arg(long)]
    pub skills: bool,
    /// With `--skills`: declare the extension without `directoryRead` (and answer -32601
    /// to `resources/directory/read`).
    #[arg(long)]
    pub skills_no_directory_read: bool,
    /// With `--skills`: serve `skill://pdf/scripts/fill.py` with bytes its entry does not
    /// announce.
    #[arg(long)]
    pub skills_tamper: bool,
    /// With `--skills`: the `pdf` skill's description.
    #[arg(long)]
    pub skill_description: Option<String>,
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
    if let Some(addr) = args.http {
        http::fault::set(args.fault);
        if let Err(e) = http::serve(args, pid, addr) {
            eprintln!("manifold-fixture: cannot serve HTTP on {addr}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let out = Arc::new(Output::new());
    let state = Arc::new(State::new(
        args,
        pid,
        Arc::clone(&out) as Arc<dyn Transport>,
    ));
    if state.args.garbage_on_start {
        out.raw(b"this is not json");
    }
    read_loop(&state, &out);
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
/// stdin is how an MCP client shuts a stdio server down; open listen streams are ended first,
/// as the stateless era asks).
fn read_loop(state: &Arc<State>, out: &Arc<Output>) {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => {
                state.listens.tear_down();
                out.exit(0)
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("manifold-fixture: stdin read failed: {e}");
                out.exit(1);
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match Incoming::parse(&line) {
            Ok(msg) => {
                let sink = Arc::clone(out) as Arc<dyn Sink>;
                match era::of_stdio_message(state, &msg) {
                    Era::Session => methods::dispatch(state, msg, sink),
                    Era::Stateless => modern::dispatch(state, msg, sink),
                }
            }
            Err(err) => out.raw(&rpc::response(&Value::Null, &Err(err))),
        }
    }
}
