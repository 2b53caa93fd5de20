//! Added latency of a converted call: the local REST service (`crate::rest`) called directly
//! over one keep-alive connection, and the same request made by `tools/call` of its converted
//! operation through Manifold over stdio and over Streamable HTTP, in interleaved rounds of the
//! same run, one call in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::mcp::RequestLine;
use crate::rest::{self, RestClient};
use crate::session::Session;
use crate::setup::{Plan, Setup};
use crate::stats::{self, Across, Summary};
use crate::target::{HttpServer, ServerSpec};

const SIDES: [&str; 3] = ["direct", "stdio", "http"];

/// One way of making the call.
enum Caller {
    Direct(RestClient),
    Mcp(Session),
}

impl Caller {
    fn timed(&mut self, line: &RequestLine, calls: usize, limit: Duration) -> Result<Vec<u64>> {
        match self {
            Caller::Direct(client) => client.timed_calls(calls, limit),
            Caller::Mcp(session) => session.timed_calls(line, calls, limit),
        }
    }
}

pub fn measure(setup: &Setup, plan: &Plan) -> Result<Value> {
    let service = HttpServer::launch(&rest_spec(setup)?, setup.limits)?;
    let tables = upstream_table(setup, &service)?;
    let stdio = setup.through_tuned("openapi-call-stdio", &[], &tables, Vec::new())?;
    let http_spec = setup.manifold_http_tuned("openapi-call-http", &[], &tables)?;
    let manifold_http = HttpServer::launch(&http_spec, setup.limits)?;
    let line = RequestLine::tools_call("items__getItem", &serde_json::from_str(rest::ARGUMENTS)?);
    let mut callers = [
        Caller::Direct(RestClient::connect(service.addr(), setup.limits.stall)?),
        Caller::Mcp(Session::start(&stdio, setup.limits)?),
        Caller::Mcp(super::super::http_session(
            &manifold_http,
            "openapi-call-http",
        )?),
    ];
    for caller in &mut callers {
        if let Caller::Mcp(session) = caller {
            let result = session.result(&line)?;
            expect_item(session.label(), &result)?;
        }
        caller.timed(&line, Plan::warmup(plan.latency_calls), plan.round_limit)?;
    }
    let (summaries, rates) = rounds(&mut callers, &line, plan)?;
    let mut out = Map::new();
    for (i, name) in SIDES.iter().enumerate() {
        let mut v = stats::medians(&summaries[i]);
        v["calls_per_s"] = Across::of(rates[i].iter().copied()).to_json();
        out.insert((*name).into(), v);
    }
    out.insert(
        "stdio_vs_direct".into(),
        stats::compare(&summaries[0], &summaries[1]),
    );
    out.insert(
        "http_vs_direct".into(),
        stats::compare(&summaries[0], &summaries[2]),
    );
    out.insert("rounds".into(), json!(plan.rounds));
    out.insert("calls_per_round".into(), json!(plan.latency_calls));
    out.insert(
        "direct_request".into(),
        json!(format!("GET {}", rest::PATH)),
    );
    out.insert("tool_arguments".into(), json!(rest::ARGUMENTS));
    drop(callers);
    drop(manifold_http);
    drop(service);
    Ok(Value::Object(out))
}

/// Interleaved rounds, the side that goes first rotating; each round's percentiles and its
/// calls per second (one call in flight).
type Figures = ([Vec<Summary>; 3], [Vec<f64>; 3]);

fn rounds(callers: &mut [Caller; 3], line: &RequestLine, plan: &Plan) -> Result<Figures> {
    let (mut summaries, mut rates): Figures = Default::default();
    for round in 0..plan.rounds {
        for k in 0..callers.len() {
            let i = (round + k) % callers.len();
            let began = Instant::now();
            let mut samples = callers[i].timed(line, plan.latency_calls, plan.round_limit)?;
            rates[i].push(samples.len() as f64 / began.elapsed().as_secs_f64().max(1e-9));
            summaries[i].push(Summary::of(&mut samples));
        }
    }
    Ok((summaries, rates))
}

/// The REST service: this executable with `--serve-rest`.
fn rest_spec(setup: &Setup) -> Result<ServerSpec> {
    let me = std::env::current_exe().context("cannot find this executable")?;
    Ok(setup.server("openapi-rest", &me, vec!["--serve-rest".into()], "/"))
}

/// The OpenAPI upstream `items`: the service's description, written to the scratch directory,
/// and its base URL.
fn upstream_table(setup: &Setup, service: &Arc<HttpServer>) -> Result<String> {
    let path = setup.scratch("openapi-items.json");
    std::fs::write(&path, rest::DESCRIPTION)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(format!(
        "[upstreams.items]\nopenapi = {}\nbase_url = \"http://{}\"\n",
        Value::from(path.display().to_string()),
        service.addr()
    ))
}

/// The converted call's result is the service's item as `structuredContent`.
fn expect_item(label: &str, result: &Value) -> Result<()> {
    let item: Value = serde_json::from_str(rest::ITEM)?;
    if result.get("structuredContent") != Some(&item) || result.get("isError") == Some(&json!(true))
    {
        bail!(
            "{label}: expected the item as structuredContent, got {}",
            super::super::excerpt(result)
        );
    }
    Ok(())
}
