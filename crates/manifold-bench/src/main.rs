//! `manifold-load`: end-to-end load for Manifold over stdio, always against the same fixture
//! upstream called directly in the same run, so figures are ratios and differences rather
//! than lone absolute times. Every loop is bounded in count and in time.
#![forbid(unsafe_code)]

mod report;
mod scenarios;
mod setup;
mod stats;
mod target;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{json, Map, Value};

use crate::scenarios::Sizes;
use crate::setup::Setup;

/// One scenario's entry point.
type Run = fn(&Setup, Sizes) -> anyhow::Result<Value>;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    All,
    Latency,
    Throughput,
    List,
    Big,
    Rss,
}

#[derive(Parser)]
#[command(
    name = "manifold-load",
    about = "End-to-end load for Manifold against a direct baseline"
)]
struct Cli {
    #[arg(value_enum, default_value = "all")]
    scenario: Scenario,
    /// Small counts and few rounds: proves the tool works, measures little.
    #[arg(long)]
    quick: bool,
    /// Where the JSON results go.
    #[arg(long, default_value = "bench-results/latest.json")]
    out: PathBuf,
    /// The manifold binary (default: next to this one).
    #[arg(long)]
    manifold: Option<String>,
    /// The fixture binary (default: next to this one).
    #[arg(long)]
    fixture: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let setup = Setup::new(cli.manifold, cli.fixture)?;
    let sizes = if cli.quick {
        Sizes {
            rounds: 2,
            calls: 200,
            pipelined: 1000,
            limit: Duration::from_secs(10),
        }
    } else {
        Sizes {
            rounds: 7,
            calls: 5000,
            pipelined: 50_000,
            limit: Duration::from_secs(30),
        }
    };
    let mut results = Map::new();
    let all = cli.scenario == Scenario::All;
    let runs: [(Scenario, &str, Run); 5] = [
        (Scenario::Latency, "latency", scenarios::latency),
        (Scenario::Throughput, "throughput", scenarios::throughput),
        (Scenario::List, "list", scenarios::list),
        (Scenario::Big, "big", scenarios::big),
        (Scenario::Rss, "rss", scenarios::rss),
    ];
    for (which, name, run) in runs {
        if all || cli.scenario == which {
            eprintln!("manifold-load: running {name}...");
            results.insert(name.into(), run(&setup, sizes)?);
        }
    }
    let doc = json!({ "machine": report::machine(), "quick": cli.quick, "scenarios": results });
    if let Some(dir) = cli.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&cli.out, serde_json::to_string_pretty(&doc)?)?;
    print!("{}", report::table(&doc));
    eprintln!("manifold-load: wrote {}", cli.out.display());
    Ok(())
}
