//! The real catalogs: the reference servers the interop tests install (server-everything
//! from npm, `mcp-server-time` from PyPI; `bash tests/interop/install.sh`) and the in-repo
//! fixture, each started over stdio and asked for `tools/list` (every page) as a host would.
//! Their tool descriptions are never stored in the repository: they are read live.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::mcp::RequestLine;
use crate::session::Session;
use crate::setup::Setup;

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

/// Fetches every real catalog that can be had; a reference server that is not installed is
/// skipped with the reason (the fixture, built with the load tool, always is there).
pub fn fetch(setup: &Setup) -> Result<Real> {
    let root = repository_root();
    let everything = root
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let time = root.join(".venv/bin/mcp-server-time");
    let mut real = Real {
        servers: Vec::new(),
        skipped: Vec::new(),
    };
    let node = find_on_path("node");
    let candidates: [(&str, Option<PathBuf>, Vec<String>, &Path); 3] = [
        (
            "everything",
            node.filter(|_| everything.exists()),
            vec![everything.display().to_string(), "stdio".into()],
            &everything,
        ),
        (
            "time",
            time.exists().then(|| time.clone()),
            vec!["--local-timezone".into(), "UTC".into()],
            &time,
        ),
        (
            "fixture",
            Some(setup.fixture.clone()),
            vec!["--name".into(), "fixture".into()],
            &setup.fixture,
        ),
    ];
    for (key, program, args, needed) in candidates {
        let Some(program) = program else {
            let why = format!(
                "not installed ({} or node missing): run `bash tests/interop/install.sh`",
                needed.display()
            );
            real.skipped.push((key.to_owned(), why));
            continue;
        };
        let spec = setup.stdio(&format!("search-{key}"), &program, args);
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
