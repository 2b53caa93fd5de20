//! The machine the figures came from, the PERF.md goals checked against the figures, and the
//! human table. Everything is read back from the JSON document, so the table and the file
//! can never disagree.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// One line of the table.
struct Row {
    figure: String,
    direct: String,
    through: String,
    added: String,
    ratio: String,
    /// Min..max over rounds of the figure the goal is about.
    spread: String,
    goal: Option<(String, bool)>,
}

/// nproc, CPU model, kernel and load: the context any figure needs on a shared machine.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned());
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    json!({
        "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu": cpu,
        "kernel": read("/proc/sys/kernel/osrelease"),
        "loadavg": read("/proc/loadavg"),
    })
}

/// The one-line description of the machine used in the table and in BENCHMARKS.md.
pub fn machine_line(m: &Value) -> String {
    format!(
        "{} cores, {}, kernel {}, loadavg at start {}",
        m["nproc"],
        m["cpu"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?"),
        m["loadavg"].as_str().unwrap_or("?"),
    )
}

/// Every PERF.md goal that the document has a figure for.
pub fn goals(doc: &Value) -> Value {
    rows(&doc["scenarios"])
        .into_iter()
        .filter_map(|r| {
            r.goal
                .map(|(goal, met)| json!({ "figure": r.figure, "goal": goal, "met": met }))
        })
        .collect()
}

pub fn table(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "machine: {}", machine_line(&doc["machine"]));
    if doc["quick"] == true {
        out.push_str("QUICK RUN: small counts, figures are not to be quoted\n");
    }
    let header = [
        "figure (median of rounds)",
        "direct",
        "through",
        "added",
        "ratio",
        "spread",
        "goal",
    ];
    let _ = writeln!(
        out,
        "{:<40} {:>10} {:>10} {:>10} {:>6} {:>17}  {}",
        header[0], header[1], header[2], header[3], header[4], header[5], header[6]
    );
    for r in rows(&doc["scenarios"]) {
        let goal = r.goal.map_or(String::new(), |(g, met)| {
            format!("{g} {}", if met { "ok" } else { "MISSED" })
        });
        let _ = writeln!(
            out,
            "{:<40} {:>10} {:>10} {:>10} {:>6} {:>17}  {goal}",
            r.figure, r.direct, r.through, r.added, r.ratio, r.spread
        );
    }
    out
}

fn rows(s: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    paired_rows(
        &mut rows,
        &s["latency"],
        "small tools/call",
        &[(0, "<= 10 us", 10.0), (2, "<= 30 us", 30.0)],
    );
    cpu_rows(&mut rows, &s["latency"], "small tools/call");
    throughput_rows(&mut rows, &s["throughput"]);
    list_rows(&mut rows, &s["list"]);
    paired_rows(
        &mut rows,
        &s["big"],
        "1 MB result",
        &[(0, "<= 500 us", 500.0)],
    );
    rss_rows(&mut rows, &s["rss"]);
    rows
}

const PCT: [&str; 4] = ["p50", "p90", "p99", "max"];

/// Direct, through, added and ratio per percentile; `goals` are (percentile index, text,
/// limit on the added figure).
fn paired_rows(rows: &mut Vec<Row>, v: &Value, what: &str, goals: &[(usize, &str, f64)]) {
    if v.is_null() {
        return;
    }
    for (i, p) in PCT.iter().enumerate() {
        let key = format!("{p}_us");
        let added = num(&v["added"][&key]);
        let goal = goals
            .iter()
            .find(|g| g.0 == i)
            .map(|&(_, text, limit)| (format!("added {text}"), added <= limit));
        rows.push(Row {
            figure: format!("{what} {p}"),
            direct: us(num(&v["direct"][&key])),
            through: us(num(&v["through"][&key])),
            added: us(added),
            ratio: format!("{:.2}", num(&v["ratio"][*p])),
            spread: range(&v["added"]["spread"][&key], us),
            goal,
        });
    }
}

/// The server process's own CPU time and context switches per call (Manifold's excludes
/// its upstream's), from /proc: where the added latency is spent.
fn cpu_rows(rows: &mut Vec<Row>, v: &Value, what: &str) {
    let cpu = &v["server_cpu_per_call"];
    if cpu.is_null() {
        return;
    }
    for (key, name, f) in [
        ("cpu_us", "server CPU", us as fn(f64) -> String),
        ("switches", "server switches", two),
    ] {
        let (d, t) = (num(&cpu["direct"][key]), num(&cpu["through"][key]));
        rows.push(Row {
            figure: format!("{what} {name}/call"),
            direct: f(d),
            through: f(t),
            added: String::new(),
            ratio: String::new(),
            spread: String::new(),
            goal: None,
        });
    }
}

fn throughput_rows(rows: &mut Vec<Row>, v: &Value) {
    if v.is_null() {
        return;
    }
    let direct = num(&v["direct"]["calls_per_s"]["median"]);
    for (key, what, goal) in [
        ("through_1", "1 upstream", true),
        ("through_10", "10 upstreams", false),
    ] {
        let a = &v[key]["calls_per_s"];
        let through = num(&a["median"]);
        rows.push(Row {
            figure: format!("pipelined calls/s, {what}"),
            direct: rate(direct),
            through: rate(through),
            added: String::new(),
            ratio: format!("{:.2}", num(&v[&format!("ratio_{}", &key[8..])])),
            spread: format!("{}..{}", rate(num(&a["min"])), rate(num(&a["max"]))),
            goal: goal.then(|| (">= 150k/s".to_owned(), through >= 150_000.0)),
        });
    }
}

fn list_rows(rows: &mut Vec<Row>, v: &Value) {
    for (key, limit) in [("10x50", 100.0), ("100x50", 1000.0)] {
        let lat = &v[key]["latency"];
        if lat.is_null() {
            continue;
        }
        for p in ["p50", "p99"] {
            let k = format!("{p}_us");
            let through = num(&lat[&k]);
            let goal = (p == "p50").then(|| (format!("<= {}", us(limit)), through <= limit));
            rows.push(Row {
                figure: format!(
                    "tools/list {key} ({}) {p}",
                    size(num(&v[key]["answer_bytes"]))
                ),
                direct: String::new(),
                through: us(through),
                added: String::new(),
                ratio: String::new(),
                spread: range(&lat["spread"][&k], us),
                goal,
            });
        }
    }
}

fn rss_rows(rows: &mut Vec<Row>, v: &Value) {
    for (key, limit) in [("20x50", 15.0), ("100x50", 40.0)] {
        let e = &v[key];
        if e.is_null() {
            continue;
        }
        for (field, what) in [
            ("idle_mb", "idle"),
            ("after_list_mb", "after list"),
            ("load_peak_mb", "load peak"),
            ("hwm_mb", "peak (VmHWM)"),
        ] {
            let a = &e[field];
            let goal = (field == "idle_mb")
                .then(|| (format!("<= {limit} MB"), num(&a["median"]) <= limit));
            rows.push(Row {
                figure: format!("RSS {key}, {what}"),
                direct: String::new(),
                through: mb(num(&a["median"])),
                added: String::new(),
                ratio: String::new(),
                spread: format!("{}..{}", mb(num(&a["min"])), mb(num(&a["max"]))),
                goal,
            });
        }
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn range(v: &Value, f: fn(f64) -> String) -> String {
    format!("{}..{}", f(num(&v[0])), f(num(&v[1])))
}

fn us(x: f64) -> String {
    if x.is_nan() {
        return "n/a".into();
    }
    if x.abs() >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.1} us")
    }
}

fn size(bytes: f64) -> String {
    if bytes >= 1e6 {
        format!("{:.1} MB", bytes / 1e6)
    } else {
        format!("{:.0} kB", bytes / 1e3)
    }
}

fn two(x: f64) -> String {
    format!("{x:.2}")
}

fn rate(x: f64) -> String {
    format!("{:.0}k", x / 1000.0)
}

fn mb(x: f64) -> String {
    format!("{x:.1} MB")
}
