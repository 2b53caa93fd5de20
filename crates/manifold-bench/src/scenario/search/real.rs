//! The real catalogs: the reference servers the interop tests install (server-everything,
//! server-memory and server-filesystem from npm, `mcp-server-time` from PyPI;
//! `bash tests/interop/install.sh`) and the in-repo fixture, each started over stdio and asked
//! for `tools/list` (every page) as a host would. Their tool descriptions are never stored in
//! the repository: they are read live.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::mcp::RequestLine;
use crate::session::Session;
use crate::setup::Setup;
use crate::target::TargetSpec;

/// Most `tools/list` pages read from one server.
const MAX_PAGES: usize = 100;

/// One real server's catalog.
pub struct Fetched {
    pub key: String,
    /// Each tool's JSON, as the server listed it.
    pub tools: Vec<String>,
    pub instructions: Option<String>,
}

/// What was fetched, and why any server was left out.
pub struct Real {
    pub servers: Vec<Fetched>,
    pub skipped: Vec<(String, String)>,
}

/// A server to start: its key in the catalog, the program (`None` when it cannot be run),
/// its arguments, and the file whose absence is reported when it is left out.
struct Candidate {
    key: &'static str,
    program: Option<PathBuf>,
    args: Vec<String>,
    needed: PathBuf,
}

/// Fetches every real catalog that can be had; a reference server that is not installed is
/// skipped with the reason (the fixture, built with the load tool, always is there).
pub fn fetch(setup: &Setup) -> Result<Real> {
    let mut real = Real {
        servers: Vec::new(),
        skipped: Vec::new(),
    };
    for candidate in candidates(setup) {
        let Candidate {
            key,
            program,
            args,
            needed,
        } = candidate;
        let Some(program) = program else {
            let why = format!(
                "not installed ({} or node missing): run `bash tests/interop/install.sh`",
                needed.display()
            );
            real.skipped.push((key.to_owned(), why));
            continue;
        };
        let mut spec = setup.stdio(&format!("search-{key}"), &program, args);
        if let (TargetSpec::Stdio(stdio), "memory") = (&mut spec, key) {
            // server-memory keeps its graph in a file beside its own code unless told
            // otherwise: listing writes nothing, but it is pointed at the run's directory.
            let graph = stdio.log.with_file_name("search-memory.jsonl");
            let graph = Some(graph.display().to_string());
            stdio.env.push(("MEMORY_FILE_PATH".into(), graph));
        }
        let mut session = Session::start(&spec, setup.limits)
            .with_context(|| format!("cannot start the {key} server"))?;
        let tools = list_tools(&mut session).with_context(|| format!("{key}: tools/list"))?;
        real.servers.push(Fetched {
            key: key.to_owned(),
            tools,
            instructions: session.instructions.clone(),
        });
    }
    Ok(real)
}

/// The real servers, in the order their catalogs are merged.
fn candidates(setup: &Setup) -> Vec<Candidate> {
    let root = repository_root();
    let npm = root.join("tests/interop/node_modules/@modelcontextprotocol");
    let node = find_on_path("node");
    let on_node = |package: &str, key: &'static str, extra: &[String]| {
        let entry = npm.join(package).join("dist/index.js");
        let mut args = vec![entry.display().to_string()];
        args.extend_from_slice(extra);
        Candidate {
            key,
            program: node.clone().filter(|_| entry.exists()),
            args,
            needed: entry,
        }
    };
    let time = root.join(".venv/bin/mcp-server-time");
    // server-filesystem serves the directories it is given; which one does not change its
    // tool list, and it only reads this one when asked to.
    let shared = root.join("bench/search").display().to_string();
    vec![
        on_node("server-everything", "everything", &["stdio".into()]),
        on_node("server-memory", "memory", &[]),
        on_node("server-filesystem", "files", &[shared]),
        Candidate {
            key: "time",
            program: time.exists().then(|| time.clone()),
            args: vec!["--local-timezone".into(), "UTC".into()],
            needed: time,
        },
        Candidate {
            key: "fixture",
            program: Some(setup.fixture.clone()),
            args: vec!["--name".into(), "fixture".into()],
            needed: setup.fixture.clone(),
        },
    ]
}

/// Every tool of every page of `tools/list`.
fn list_tools(session: &mut Session) -> Result<Vec<String>> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let result = session.result(&RequestLine::new("tools/list", &params))?;
        let Some(page) = result.get("tools").and_then(Value::as_array) else {
            bail!("no tools array in {}", super::super::excerpt(&result));
        };
        tools.extend(page.iter().map(Value::to_string));
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(tools),
        }
    }
    bail!("more than {MAX_PAGES} pages")
}

/// The repository this tool was built from (the interop peers are installed in it).
fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}
