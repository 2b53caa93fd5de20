//! The scenarios. Each starts its own targets, warms them up, runs interleaved rounds of
//! bounded loops, ends its processes (dropping a `Session` ends its stdio server, dropping the
//! last handle on an `HttpServer` ends that one) and returns JSON.

pub(crate) mod cache;
mod counted;
mod faults;
mod http_latency;
mod http_rss;
mod http_throughput;
mod latency;
mod list;
mod openapi;
pub(crate) mod policy;
pub(crate) mod replicas;
mod rss;
pub(crate) mod search;
pub(crate) mod soak;
mod telemetry;
mod throughput;

use std::sync::Arc;

use anyhow::{bail, Result};
use serde_json::Value;

pub use cache::cache;
pub use faults::faults;
pub use http_latency::http_latency;
pub use http_rss::http_rss;
pub use http_throughput::http_throughput;
pub use latency::{big, latency};
pub use list::list;
pub use openapi::openapi;
pub use policy::policy;
pub use replicas::replicas;
pub use rss::rss;
pub use search::search;
pub use soak::soak;
pub use telemetry::telemetry;
pub use throughput::throughput;

use crate::session::Session;
use crate::target::{HttpServer, HttpTarget};

/// A new Streamable HTTP session on `server`, on a connection of its own, initialized.
fn http_session(server: &Arc<HttpServer>, label: &str) -> Result<Session> {
    Session::over(Box::new(HttpTarget::connect(server, label)?))
}

/// A stateless host (revision 2026-07-28) on `server`, on a connection of its own: no
/// `initialize`, no session; its requests must be made from stateless lines
/// (`RequestLine::echo_stateless`).
fn http_stateless(server: &Arc<HttpServer>, label: &str) -> Result<Session> {
    let target = HttpTarget::stateless(server, label, crate::mcp::STATELESS_VERSION)?;
    Ok(Session::stateless(Box::new(target)))
}

/// Why the peer gateway has no stateless figures.
const PEER_SESSION_ONLY: &str = "the peer gateway (mcp-proxy 0.6) speaks only the session era \
     (it refuses revision 2026-07-28 with -32022): its figures, and every comparison with it, \
     are of the session-era path (initialize, then Mcp-Session-Id)";

/// Checks that a `tools/call` result is a stateless one (revision 2026-07-28): `resultType`
/// "complete" and Manifold's server info in `_meta`, beside the tool's own result. A session-era
/// answer has neither, so this proves the stateless path served the call.
fn expect_complete(label: &str, result: &Value) -> Result<()> {
    let info = result.pointer("/_meta/io.modelcontextprotocol~1serverInfo/name");
    match (result.get("resultType").and_then(Value::as_str), info) {
        (Some("complete"), Some(Value::String(_))) => Ok(()),
        _ => bail!(
            "{label}: expected a stateless result (resultType \"complete\", server info in \
             _meta), got {}",
            excerpt(result)
        ),
    }
}

/// Why a peer row is empty when no peer binary was given.
fn peer_missing() -> String {
    "not run: no peer binary given (--peer; bench/run.sh builds it)".into()
}

/// Checks that a `tools/call` result is one text content of `len` bytes (a wrong answer
/// would make every timing meaningless).
fn expect_text(label: &str, result: &Value, len: usize) -> Result<()> {
    let text = result.pointer("/content/0/text").and_then(Value::as_str);
    match text {
        Some(t) if t.len() == len && result.get("isError") != Some(&Value::Bool(true)) => Ok(()),
        _ => bail!(
            "{label}: expected a text of {len} bytes, got {}",
            excerpt(result)
        ),
    }
}

/// Checks that a `tools/list` result has exactly `count` tools.
fn expect_tools(label: &str, result: &Value, count: usize) -> Result<()> {
    let got = result
        .get("tools")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if got != count {
        bail!("{label}: tools/list gave {got} tools, expected {count}");
    }
    Ok(())
}

fn excerpt(v: &Value) -> String {
    crate::mcp::excerpt(v.to_string().as_bytes())
}
