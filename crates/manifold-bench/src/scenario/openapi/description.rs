//! What a large real description costs: GitHub's REST description loaded and converted in this
//! process (sizes, counts, wall time, peak memory, schema bytes with shared definitions kept
//! once as `$defs` against fully inlined), then served by a fresh Manifold per round (startup,
//! `tools/list` bytes, memory).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use manifold_openapi::{convert, load, Conversion, Fetch, Options};
use serde_json::{json, Map, Value};
use url::Url;

use crate::mcp::RequestLine;
use crate::procstat::status_kb;
use crate::session::Session;
use crate::setup::{Plan, Setup};
use crate::stats::{self, Across};

/// Lets startup work finish before "idle", as in the `rss` scenario.
const SETTLE: Duration = Duration::from_millis(300);
/// How deep a definition may be inlined inside its own expansion: a `$ref` to a definition
/// already being expanded on the way down stays a `$ref` (a cycle is cut at its first repeat).
pub const CYCLE_CUT: &str = "a $ref to a definition already being expanded on the path from the \
     schema's root stays a $ref (each cycle cut at its first repeat)";

/// Reads `file://` URLs only: GitHub's description has no external `$ref`s, and a bench reads
/// nothing from the network.
struct Files;

impl Fetch for Files {
    fn fetch(&self, url: &Url) -> Result<Vec<u8>, String> {
        let path = url
            .to_file_path()
            .map_err(|()| format!("not a file: {url}"))?;
        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

pub fn measure(setup: &Setup, plan: &Plan) -> Result<Value> {
    let path = std::fs::canonicalize(&setup.openapi_description).with_context(|| {
        format!(
            "{} not found: run bash tests/interop/install.sh from the repository root, or pass \
             --openapi-description",
            setup.openapi_description.display()
        )
    })?;
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let base = Url::from_file_path(&path)
        .map_err(|()| anyhow::anyhow!("{} is not an absolute path", path.display()))?;
    let mut out = in_process(&bytes, base.as_str(), plan)?;
    let conversion = convert_once(&bytes, base.as_str())?;
    out.insert("schemas".into(), schema_sizes(&conversion)?);
    out.insert(
        "manifold".into(),
        served(setup, plan, &path, conversion.tools.len())?,
    );
    out.insert("description".into(), json!(path.display().to_string()));
    Ok(Value::Object(out))
}

fn convert_once(bytes: &[u8], base: &str) -> Result<Conversion> {
    let doc = load(bytes, base, &Files).context("the description does not load")?;
    convert(&doc, &Options::default()).context("the description does not convert")
}

/// Rounds of load + convert in this process: wall times, and this process's memory before the
/// first round and at its peak (VmHWM), so the peak's growth is what one load and convert took.
fn in_process(bytes: &[u8], base: &str, plan: &Plan) -> Result<Map<String, Value>> {
    let me = std::process::id();
    let rss_before = status_kb(me, "VmRSS:")?;
    let (mut loads, mut converts, mut retained) = (Vec::new(), Vec::new(), Vec::new());
    let mut counts = None;
    for _ in 0..plan.rss_rounds.max(3) {
        let began = Instant::now();
        let doc = load(bytes, base, &Files).context("the description does not load")?;
        let loaded = Instant::now();
        let conversion =
            convert(&doc, &Options::default()).context("the description does not convert")?;
        converts.push(loaded.elapsed().as_secs_f64() * 1000.0);
        loads.push((loaded - began).as_secs_f64() * 1000.0);
        retained.push(status_kb(me, "VmRSS:")?.saturating_sub(rss_before) as f64 / 1024.0);
        counts.get_or_insert_with(|| counts_of(&conversion));
    }
    let hwm = status_kb(me, "VmHWM:")?;
    let mut out = counts.unwrap_or_default();
    out.insert("document_bytes".into(), json!(bytes.len()));
    out.insert(
        "load_ms".into(),
        Across::of(loads.iter().copied()).to_json(),
    );
    out.insert(
        "convert_ms".into(),
        Across::of(converts.iter().copied()).to_json(),
    );
    let total = loads.iter().zip(&converts).map(|(l, c)| l + c);
    out.insert("load_and_convert_ms".into(), Across::of(total).to_json());
    out.insert(
        "rss_before_mb".into(),
        json!(stats::round(rss_before as f64 / 1024.0)),
    );
    out.insert(
        "peak_growth_mb".into(),
        json!(stats::round(hwm.saturating_sub(rss_before) as f64 / 1024.0)),
    );
    out.insert("held_growth_mb".into(), Across::of(retained).to_json());
    out.insert("rounds".into(), json!(loads.len()));
    Ok(out)
}

/// Operations, tools, skipped (with how many for each reason) and the tool definitions' bytes.
fn counts_of(conversion: &Conversion) -> Map<String, Value> {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &conversion.skipped {
        *reasons.entry(s.reason.as_str()).or_default() += 1;
    }
    let definitions: usize = conversion.tools.iter().map(|t| t.tool.len()).sum();
    let mut out = Map::new();
    out.insert(
        "operations".into(),
        json!(conversion.tools.len() + conversion.skipped.len()),
    );
    out.insert("tools".into(), json!(conversion.tools.len()));
    out.insert("skipped".into(), json!(conversion.skipped.len()));
    out.insert("skipped_reasons".into(), json!(reasons));
    out.insert("tool_definition_bytes".into(), json!(definitions));
    out
}

/// The bytes of every tool's `inputSchema` and `outputSchema` as converted (shared definitions
/// once per tool, as `$defs`) and with every `$ref` inlined.
fn schema_sizes(conversion: &Conversion) -> Result<Value> {
    let (mut kept, mut inlined, mut with_defs) = (0usize, 0usize, 0usize);
    for op in &conversion.tools {
        let tool: Value = serde_json::from_str(&op.tool)?;
        let mut uses_defs = false;
        for key in ["inputSchema", "outputSchema"] {
            let Some(schema) = tool.get(key) else {
                continue;
            };
            kept += serde_json::to_vec(schema)?.len();
            let defs = schema.get("$defs").and_then(Value::as_object);
            uses_defs |= defs.is_some_and(|d| !d.is_empty());
            let mut expanded = schema.clone();
            if let Some(map) = expanded.as_object_mut() {
                map.remove("$defs");
            }
            let empty = Map::new();
            let expanded = inline(&expanded, defs.unwrap_or(&empty), &mut Vec::new());
            inlined += serde_json::to_vec(&expanded)?.len();
        }
        with_defs += usize::from(uses_defs);
    }
    Ok(json!({
        "defs_kept_once_bytes": kept,
        "inlined_bytes": inlined,
        "inlined_over_kept": stats::round2(inlined as f64 / kept.max(1) as f64),
        "tools_with_defs": with_defs,
        "cycles": CYCLE_CUT,
    }))
}

/// `value` with each `$ref` to `#/$defs/NAME` replaced by that definition, itself inlined; its
/// sibling members are kept beside the definition's.
fn inline<'a>(value: &'a Value, defs: &'a Map<String, Value>, stack: &mut Vec<&'a str>) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(|v| inline(v, defs, stack)).collect()),
        Value::Object(map) => {
            let target = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .filter(|name| !stack.contains(name))
                .and_then(|name| defs.get_key_value(name));
            let Some((name, def)) = target else {
                let members = map.iter().map(|(k, v)| (k.clone(), inline(v, defs, stack)));
                return Value::Object(members.collect());
            };
            stack.push(name);
            let mut expanded = inline(def, defs, stack);
            stack.pop();
            if let Value::Object(out) = &mut expanded {
                for (k, v) in map.iter().filter(|(k, _)| k.as_str() != "$ref") {
                    out.entry(k.clone())
                        .or_insert_with(|| inline(v, defs, stack));
                }
            }
            expanded
        }
        other => other.clone(),
    }
}

/// A fresh Manifold per round serving the description (requests would go to a closed port;
/// none is made): startup to `initialize` answered, `tools/list` bytes, memory.
fn served(setup: &Setup, plan: &Plan, path: &std::path::Path, tools: usize) -> Result<Value> {
    let table = format!(
        "[upstreams.github]\nopenapi = {}\nbase_url = \"http://127.0.0.1:9\"\n",
        Value::from(path.display().to_string())
    );
    let spec = setup.through_tuned("openapi-github", &[], &table, Vec::new())?;
    let names = [
        "startup_ms",
        "idle_mb",
        "after_list_mb",
        "hwm_mb",
        "list_bytes",
    ];
    let mut rounds: Vec<[f64; 5]> = Vec::new();
    for _ in 0..plan.rss_rounds {
        let mut session = Session::start(&spec, setup.limits)?;
        let pid = session.pid().context("memory needs a local process")?;
        std::thread::sleep(SETTLE);
        let idle = status_kb(pid, "VmRSS:")?;
        let listed = session.result(&RequestLine::new("tools/list", &json!({})))?;
        super::super::expect_tools(session.label(), &listed, tools)?;
        if listed.get("nextCursor").is_some() {
            bail!("tools/list came in pages; the config asks for one");
        }
        let mb = |kb: u64| kb as f64 / 1024.0;
        rounds.push([
            super::super::latency::ms(session.startup),
            mb(idle),
            mb(status_kb(pid, "VmRSS:")?),
            mb(status_kb(pid, "VmHWM:")?),
            serde_json::to_vec(&listed)?.len() as f64,
        ]);
    }
    let mut out = Map::new();
    for (f, name) in names.iter().enumerate() {
        out.insert(
            (*name).into(),
            Across::of(rounds.iter().map(|r| r[f])).to_json(),
        );
    }
    out.insert("rounds".into(), json!(rounds.len()));
    out.insert(
        "list_bytes_are".into(),
        json!("the tools/list result, one page, as compact JSON"),
    );
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_inlined_and_a_cycle_is_cut_at_its_first_repeat() {
        let defs = json!({
            "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"},
                                                       "tag": {"$ref": "#/$defs/tag"}}},
            "tag": {"type": "string"}
        });
        let defs = defs.as_object().unwrap();
        let schema = json!({"type": "object", "properties": {
            "head": {"$ref": "#/$defs/node", "description": "first"}}});
        let got = inline(&schema, defs, &mut Vec::new());
        assert_eq!(
            got,
            json!({"type": "object", "properties": {"head": {
                "type": "object", "description": "first",
                "properties": {"next": {"$ref": "#/$defs/node"}, "tag": {"type": "string"}}}}})
        );
    }
}
