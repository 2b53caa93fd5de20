//! `manifold-load`: end-to-end load for Manifold over stdio and Streamable HTTP. Every figure
//! through Manifold is taken beside a baseline in interleaved rounds of the same run (the
//! same fixture upstream called directly; over HTTP also a peer gateway in front of the same
//! fixture), so results are medians, spreads, differences and ratios rather than lone
//! absolute times. Every loop is bounded in count and in time, and every process started is
//! ended.
#![forbid(unsafe_code)]

mod floor;
mod mcp;
mod otlp;
mod procstat;
mod report;
mod rest;
mod scenario;
mod session;
mod setup;
mod stats;
mod target;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use serde_json::{json, Map, Value};

use crate::setup::{Plan, Setup};
use crate::target::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    All,
    Latency,
    Throughput,
    List,
    Big,
    Rss,
    /// What metrics and trace export cost a small call over stdio.
    Telemetry,
    /// What teams and limits (in memory, and in a Redis this tool starts) cost a small call
    /// over stdio.
    Policy,
    /// What the result cache costs and saves: hits, misses and plain forwarding of a small
    /// call over stdio, and hits/s against forwarded calls/s over HTTP.
    Cache,
    /// The three HTTP scenarios.
    Http,
    HttpLatency,
    HttpThroughput,
    HttpRss,
    /// Manifold as replicas behind HAProxy (the shipped config): one and three replicas,
    /// the in-memory and the Redis session store, with and without affinity, beside one
    /// replica and the fixture called directly; and what adopting a session costs. Needs
    /// HAProxy and redis-server; not part of `all`.
    Replicas,
    /// Upstreams killed (kill -9) and stopped (SIGSTOP) under 16 HTTP hosts; not in `all`.
    Faults,
    /// Tool search: its quality on the labelled query set beside a baseline, its latency,
    /// build and update time and memory, and the list sizes with and without discovery; not
    /// in `all`.
    Search,
    /// A steady paced load over Streamable HTTP for `--soak-seconds` (a mix of calls, lists,
    /// cache hits and refusals to 10 upstreams): every answer checked, Manifold's memory,
    /// descriptors, threads and children sampled each second. Fails on a lost, duplicated
    /// or unexpected answer, or on descriptors, threads or children that do not stay flat.
    /// Not part of `all`.
    Soak,
    /// OpenAPI upstreams: GitHub's REST description loaded, converted and served (sizes,
    /// time, memory, schema bytes), and a converted call beside a direct HTTP request to the
    /// same local service, over stdio and HTTP. Needs tests/interop/install.sh; not in `all`.
    Openapi,
}

impl Scenario {
    fn includes(self, one: Scenario) -> bool {
        let http = matches!(
            one,
            Scenario::HttpLatency | Scenario::HttpThroughput | Scenario::HttpRss
        );
        let all = self == Scenario::All
            && !matches!(
                one,
                Scenario::Replicas
                    | Scenario::Faults
                    | Scenario::Search
                    | Scenario::Soak
                    | Scenario::Openapi
            );
        all || self == one || (self == Scenario::Http && http)
    }
}

type Run = fn(&Setup, &Plan) -> Result<Value>;

const RUNS: [(Scenario, &str, Run); 16] = [
    (Scenario::Latency, "latency", scenario::latency),
    (Scenario::Throughput, "throughput", scenario::throughput),
    (Scenario::List, "list", scenario::list),
    (Scenario::Big, "big", scenario::big),
    (Scenario::Rss, "rss", scenario::rss),
    (Scenario::Telemetry, "telemetry", scenario::telemetry),
    (Scenario::Policy, "policy", scenario::policy),
    (Scenario::Cache, "cache", scenario::cache),
    (
        Scenario::HttpLatency,
        "http-latency",
        scenario::http_latency,
    ),
    (
        Scenario::HttpThroughput,
        "http-throughput",
        scenario::http_throughput,
    ),
    (Scenario::HttpRss, "http-rss", scenario::http_rss),
    (Scenario::Replicas, "replicas", scenario::replicas),
    (Scenario::Faults, "faults", scenario::faults),
    (Scenario::Search, "search", scenario::search),
    (Scenario::Soak, "soak", scenario::soak),
    (Scenario::Openapi, "openapi", scenario::openapi),
];

#[derive(Debug, Parser)]
#[command(
    name = "manifold-load",
    version,
    about = "End-to-end load for Manifold against a direct baseline"
)]
struct Cli {
    /// Which scenario to run (default: all).
    #[arg(value_enum)]
    scenario: Option<Scenario>,
    /// The same as the positional argument.
    #[arg(long = "scenario", value_enum, conflicts_with = "scenario")]
    scenario_flag: Option<Scenario>,
    /// Small counts and few rounds: proves the tool works, measures little.
    #[arg(long)]
    quick: bool,
    /// Where the JSON results go.
    #[arg(long, default_value = "bench-results/latest.json")]
    out: PathBuf,
    /// The manifold binary (default: `manifold` next to this executable).
    #[arg(long)]
    manifold: Option<PathBuf>,
    /// The fixture binary (default: `manifold-fixture` next to this executable).
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// The peer gateway's binary (`mcp-proxy` 0.6), measured beside Manifold in the HTTP
    /// scenarios; without it those rows say "not run".
    #[arg(long)]
    peer: Option<PathBuf>,
    /// An earlier manifold binary, measured over stdio beside this one in `http-latency`
    /// (is the stdio path as fast as before?).
    #[arg(long)]
    manifold_before: Option<PathBuf>,
    /// Rounds per target (default 7, quick 2).
    #[arg(long)]
    rounds: Option<usize>,
    /// Requests in flight in pipelined scenarios (default 128, quick 64).
    #[arg(long)]
    window: Option<u64>,
    /// Run Manifold (and so its upstreams) on these CPUs: `server.cpus` in its config, e.g.
    /// `--manifold-cpus 0`. The host and the direct fixture stay where the OS puts them.
    #[arg(long, value_delimiter = ',')]
    manifold_cpus: Vec<usize>,
    /// Serve the web console (an admin address with its token) in every Manifold started: a
    /// served console records each host request for its live calls.
    #[arg(long)]
    console: bool,
    /// The soak's measured time in seconds, after its warm-up (a tenth of it, 2 to 30 s)
    /// (default 30, quick 10).
    #[arg(long)]
    soak_seconds: Option<u64>,
    /// The soak's requests per second over all its sessions (default 3000, quick 400).
    #[arg(long)]
    soak_rate: Option<u64>,
    /// The soak's host sessions, one HTTP connection and thread each (default 16).
    #[arg(long)]
    soak_sessions: Option<usize>,
    /// A server blocked this many seconds in one send or receive is killed.
    #[arg(long, default_value_t = 60)]
    stall_secs: u64,
    /// The description the `openapi` scenario loads (default: GitHub's, as
    /// tests/interop/install.sh installs it, from the repository root).
    #[arg(long)]
    openapi_description: Option<PathBuf>,
    /// Run as the REST service of the `openapi` scenario instead (the load generator starts it).
    #[arg(long, hide = true)]
    serve_rest: bool,
    /// Run as the HTTP floor server instead (the load generator starts it; see `floor`).
    #[arg(long, hide = true)]
    serve_floor: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = if cli.serve_floor {
        floor::serve()
    } else if cli.serve_rest {
        rest::serve()
    } else {
        run(&cli)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One readable chain of causes; a backtrace would bury the server's stderr.
            eprintln!("manifold-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    let chosen = cli.scenario.or(cli.scenario_flag).unwrap_or(Scenario::All);
    let mut plan = if cli.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    plan.rounds = cli.rounds.unwrap_or(plan.rounds).max(1);
    plan.window = cli.window.unwrap_or(plan.window).max(1);
    plan.soak_seconds = cli.soak_seconds.unwrap_or(plan.soak_seconds).max(1);
    plan.soak_rate = cli.soak_rate.unwrap_or(plan.soak_rate).max(1);
    plan.soak_sessions = cli.soak_sessions.unwrap_or(plan.soak_sessions).max(1);
    let limits = Limits {
        stall: Duration::from_secs(cli.stall_secs.max(1)),
        // An hour is more than any scenario takes, but a soak may be told to run longer.
        lifetime: Duration::from_secs(3600 + plan.soak_seconds.saturating_mul(2)),
        exit_grace: Duration::from_secs(5),
    };
    let needs_manifold = chosen != Scenario::Search;
    let mut setup = Setup::new(
        cli.manifold.clone(),
        cli.fixture.clone(),
        limits,
        needs_manifold,
    )?;
    setup.manifold_cpus.clone_from(&cli.manifold_cpus);
    setup.console = cli.console;
    if let Some(path) = &cli.openapi_description {
        setup.openapi_description.clone_from(path);
    }
    if let Some(peer) = &cli.peer {
        let found = std::fs::canonicalize(peer)
            .with_context(|| format!("peer {} not found", peer.display()))?;
        setup.peer = Some(found);
    }
    if let Some(before) = &cli.manifold_before {
        let found = std::fs::canonicalize(before)
            .with_context(|| format!("{} not found", before.display()))?;
        setup.manifold_before = Some(found);
    }
    let (began, machine) = (Instant::now(), report::machine());
    let mut results = Map::new();
    for (which, name, run) in RUNS {
        if chosen.includes(which) {
            eprintln!("manifold-load: {name}...");
            let value = run(&setup, &plan).with_context(|| format!("scenario {name} failed"))?;
            results.insert(name.into(), value);
        }
    }
    let mut doc = document(cli, &setup, &plan, machine, results);
    doc["elapsed_s"] = json!(stats::round(began.elapsed().as_secs_f64()));
    doc["goals"] = report::goals(&doc);
    write(&cli.out, &doc)?;
    print!("{}", report::table(&doc));
    eprintln!("manifold-load: wrote {}", cli.out.display());
    verdicts(&doc)
}

/// A scenario that judges its own run (the soak) fails the command once its figures are
/// written, so that the JSON says why.
fn verdicts(doc: &Value) -> Result<()> {
    let soak = &doc["scenarios"]["soak"];
    if soak["passed"] == false {
        bail!("the soak failed: {}", soak["failures"]);
    }
    Ok(())
}

fn document(
    cli: &Cli,
    setup: &Setup,
    plan: &Plan,
    machine: Value,
    results: Map<String, Value>,
) -> Value {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "tool": "manifold-load",
        "version": env!("CARGO_PKG_VERSION"),
        "started_unix": started,
        "quick": cli.quick,
        "machine": machine,
        "binaries": {
            "manifold": setup.manifold,
            "fixture": setup.fixture,
            "peer": setup.peer,
            "manifold_before": setup.manifold_before,
        },
        "manifold_cpus": setup.manifold_cpus,
        "console": setup.console,
        "plan": {
            "rounds": plan.rounds,
            "latency_calls": plan.latency_calls,
            "pipelined_calls": plan.pipelined_calls,
            "window": plan.window,
            "list_calls": plan.list_calls,
            "big_calls": plan.big_calls,
            "rss_rounds": plan.rss_rounds,
            "connections": plan.connections,
            "http_calls": plan.http_calls,
            "idle_sessions": plan.idle_sessions,
            "replica_calls": plan.replica_calls,
            "replica_single_calls": plan.replica_single_calls,
            "adopt_sessions": plan.adopt_sessions,
            "search_tools": plan.search_tools,
            "search_rounds": plan.search_rounds,
            "round_limit_s": plan.round_limit.as_secs(),
            "soak_seconds": plan.soak_seconds,
            "soak_rate": plan.soak_rate,
            "soak_sessions": plan.soak_sessions,
        },
        "scenarios": results,
    })
}

fn write(path: &Path, doc: &Value) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(doc)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    if !path.exists() {
        bail!("{} was not written", path.display());
    }
    Ok(())
}
