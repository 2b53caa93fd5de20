//! The readable part of the `search` scenario's output, read back from its JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// The search goal (BENCHMARKS.md), when the document has the figure.
pub fn goals(v: &Value) -> Vec<Value> {
    let cost = &v["cost"];
    let (Some(p50), Some(goal)) = (
        cost["search_us"]["p50_us"].as_f64(),
        cost["goal_p50_us"].as_f64(),
    ) else {
        return Vec::new();
    };
    let figure = format!("search over {} tools p50", cost["tools"]);
    vec![json!({ "figure": figure, "goal": format!("<= {goal} us"), "met": p50 <= goal })]
}

pub fn table(out: &mut String, v: &Value) {
    if v.is_null() {
        return;
    }
    let c = &v["catalog"];
    let _ = writeln!(
        out,
        "\nTool search: {} tools ({} real {}, {} generated in {} upstreams); {} queries ({} dev, {} held-out, {} left out)",
        c["tools"], total_real(&c["real_tools"]), c["real_tools"], c["generated_tools"],
        c["generated_upstreams"], v["queries"]["total"], v["queries"]["dev"],
        v["queries"]["held_out"], v["queries"]["excluded"],
    );
    for skipped in c["skipped"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  left out: {} ({})",
            skipped["server"],
            text(&skipped["why"])
        );
    }
    let _ = writeln!(
        out,
        "{:<34} {:>10} {:>10} {:>10}",
        "quality", "recall@1", "recall@5", "nDCG@10"
    );
    for (split, name) in [("dev", "dev"), ("held_out", "held-out")] {
        for side in ["manifold", "baseline"] {
            let q = &v["quality"][split][side];
            let _ = writeln!(
                out,
                "{:<34} {:>10.3} {:>10.3} {:>10.3}",
                format!("{name}, {side} ({} queries)", q["queries"]),
                num(&q["recall_at_1"]),
                num(&q["recall_at_5"]),
                num(&q["ndcg_at_10"]),
            );
        }
    }
    cost_table(out, &v["cost"]);
    size_table(out, &v["size"]);
}

fn cost_table(out: &mut String, k: &Value) {
    let _ = writeln!(
        out,
        "cost over {} tools in {} upstreams (CPUs {}): {} queries x {} rounds",
        k["tools"],
        k["upstreams"],
        text(&k["cpus_allowed"]),
        k["queries"],
        k["rounds"]
    );
    let sides = [
        ("search_us", "search, all tools visible"),
        ("search_half_view_us", "search, a view of half"),
        ("search_half_view_admission_us", "same view, admission kept"),
    ];
    for (key, what) in sides {
        let s = &k[key];
        let _ = writeln!(
            out,
            "  {what:<28} p50 {} us, p90 {} us, p99 {} us, max {} us (median of rounds; goal p50 <= {} us)",
            s["p50_us"], s["p90_us"], s["p99_us"], s["max_us"], k["goal_p50_us"]
        );
    }
    let _ = writeln!(
        out,
        "  build {} ms (median of {}), update after one upstream changed ({} tools) {} ms; heap {} kB, RSS +{} kB",
        k["build_ms"]["median"], k["build_rounds"], k["update_rebuilt_tools"],
        k["update_ms"]["median"], k["heap_bytes"].as_u64().unwrap_or(0) / 1024, k["rss_delta_kb"]
    );
}

fn size_table(out: &mut String, s: &Value) {
    let _ = writeln!(
        out,
        "tools/list of {} tools: {} bytes (~{} tokens, {}); with discovery ({} pinned + find_tools): {} bytes (~{} tokens); after one search adding {}: {} bytes",
        s["tools"], s["without_discovery"]["bytes"], s["without_discovery"]["tokens"],
        text(&s["token_estimate"]), s["with_discovery"]["pinned"].as_array().map_or(0, Vec::len),
        s["with_discovery"]["bytes"], s["with_discovery"]["tokens"],
        s["after_first_search"]["k"], s["after_first_search"]["list_bytes"]
    );
}

fn total_real(real: &Value) -> u64 {
    real.as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}
