//! `tools/list` through Manifold with 10 x 50 and 100 x 50 tools, one page, served from the
//! cached merged list (the first call, in the warmup, renders it). The figure includes the
//! host reading the whole answer, as a host must.

use anyhow::Result;
use serde_json::{json, Map, Value};

use crate::mcp::RequestLine;
use crate::session::Session;
use crate::setup::{Plan, Setup, Upstream};
use crate::stats::{self, Summary};

const TOOLS_EACH: usize = 50;
const SIZES: [usize; 2] = [10, 100];

pub fn list(setup: &Setup, plan: &Plan) -> Result<Value> {
    let line = RequestLine::new("tools/list", &json!({}));
    let mut sessions = Vec::new();
    for n in SIZES {
        let ups = Upstream::many("u", n, TOOLS_EACH);
        let spec = setup.through(&format!("list-{n}x{TOOLS_EACH}"), &ups)?;
        let mut session = Session::start(&spec, setup.limits)?;
        let result = session.result(&line)?;
        super::expect_tools(session.label(), &result, n * TOOLS_EACH)?;
        sessions.push(session);
    }
    for (session, calls) in sessions.iter_mut().zip(plan.list_calls) {
        session.timed_calls(&line, Plan::warmup(calls), plan.round_limit)?;
    }
    let mut rounds: [Vec<Summary>; 2] = Default::default();
    for round in 0..plan.rounds {
        // The two sizes alternate, and so does which goes first.
        for k in 0..2 {
            let i = (round + k) % 2;
            let calls = plan.list_calls[i];
            let mut samples = sessions[i].timed_calls(&line, calls, plan.round_limit)?;
            rounds[i].push(Summary::of(&mut samples));
        }
    }
    let mut out = Map::new();
    for (i, n) in SIZES.into_iter().enumerate() {
        out.insert(
            format!("{n}x{TOOLS_EACH}"),
            json!({
                "upstreams": n,
                "tools": n * TOOLS_EACH,
                "answer_bytes": sessions[i].last_answer_len,
                "calls_per_round": plan.list_calls[i],
                "startup_ms": super::latency::ms(sessions[i].startup),
                "latency": stats::medians(&rounds[i]),
            }),
        );
    }
    out.insert("rounds".into(), json!(plan.rounds));
    Ok(Value::Object(out))
}
