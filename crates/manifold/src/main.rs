//! `manifold`: many MCP servers presented to a host as one.
//!
//! `manifold serve --config FILE [--listen ADDR]` serves the merged catalog over stdio, or
//! over HTTP;
//! `manifold check --config FILE` validates the config, starts the upstreams and prints the
//! merged catalog, every renamed or shortened name and every collision;
//! `manifold reload --admin ADDR` asks a running Manifold to load its configuration again;
//! `manifold pin --config FILE` starts the upstreams and writes the lock file of their tool and
//! prompt definitions, which `[pinning]` checks them against.
#![forbid(unsafe_code)]

mod admin_client;
mod check;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod layering;
mod pin;
mod reload;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "manifold",
    version,
    about = "Many MCP servers presented to a host as one"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the merged catalog: to one host over stdio, or with `--listen` to any number of
    /// hosts over HTTP.
    Serve {
        /// Config file: `.toml` (native) or `.json` (Claude Desktop `mcpServers` format).
        #[arg(long, short)]
        config: PathBuf,
        /// Serve over HTTP on this address instead of stdio: IP:PORT, or a port alone for
        /// 127.0.0.1. Streamable HTTP at /mcp, the HTTP+SSE transport at /sse. Overrides
        /// `server.listen`.
        #[arg(long, value_parser = listen_addr)]
        listen: Option<std::net::SocketAddr>,
        /// Serve /metrics, /healthz and /readyz on this address (IP:PORT, or a port alone for
        /// 127.0.0.1), apart from hosts; over stdio this is the only way to reach them.
        /// Overrides `server.admin`.
        #[arg(long, value_parser = listen_addr)]
        admin: Option<std::net::SocketAddr>,
        /// The team a stdio host runs as (its view and limits). Overrides `server.team`.
        #[arg(long)]
        team: Option<String>,
    },
    /// Ask a running Manifold to load its configuration again (as SIGHUP does), through its
    /// admin address, and print what changed; exits non-zero when the new configuration was
    /// refused (the running one stays).
    Reload {
        /// The admin address of the running Manifold (`server.admin`, `--admin`): IP:PORT,
        /// or a port alone for 127.0.0.1.
        #[arg(long, value_parser = listen_addr)]
        admin: std::net::SocketAddr,
        /// `server.metrics_token`, when it is set (or MANIFOLD_METRICS_TOKEN).
        #[arg(long)]
        token: Option<String>,
    },
    /// Validate a config, start its upstreams and print the merged catalog; with
    /// `[pinning]`, also every tool and prompt that differs from its pin (exits non-zero when
    /// any would be held).
    Check {
        #[arg(long, short)]
        config: PathBuf,
        /// Only validate the file and the naming rules; do not start the upstreams.
        #[arg(long)]
        no_start: bool,
    },
    /// Start the upstreams and write the lock file of their tool and prompt definitions: the
    /// file `[pinning] lock` names, else manifold.lock beside the config. Nothing is written
    /// when an upstream fails to start.
    Pin {
        /// Config file; a relative `[pinning] lock` is resolved against its folder.
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn listen_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    manifold_config::parse_listen(text).ok_or_else(|| format!("{text:?} is not IP:PORT or a port"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            listen,
            admin,
            team,
        } => run::serve(
            &config,
            run::Overrides {
                listen,
                admin,
                team,
            },
        ),
        Command::Reload { admin, token } => {
            let token = token.or_else(|| std::env::var("MANIFOLD_METRICS_TOKEN").ok());
            reload::ask(admin, token.as_deref())
        }
        Command::Check { config, no_start } => {
            manifold_telemetry::logs::init(&Default::default());
            check::check(&config, no_start)
        }
        Command::Pin { config } => {
            manifold_telemetry::logs::init(&Default::default());
            pin::pin(&config)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("manifold: {e:#}");
            ExitCode::FAILURE
        }
    }
}
