//! `manifold`: many MCP servers presented to a host as one.
//!
//! `manifold serve --config FILE [--listen ADDR]` serves the merged catalog over stdio, or
//! over HTTP;
//! `manifold check --config FILE` validates the config, starts the upstreams and prints the
//! merged catalog, every renamed or shortened name and every collision;
//! `manifold reload --admin ADDR` asks a running Manifold to load its configuration again;
//! `manifold pin --config FILE` starts the upstreams and writes the lock file of their tool and
//! prompt definitions, which `[pinning]` checks them against;
//! `manifold login UPSTREAM --config FILE` makes the shared login of an upstream;
//! `manifold connections` and `manifold revoke` list and forget the upstream connections a
//! running Manifold keeps.
#![forbid(unsafe_code)]

mod admin_client;
mod check;
mod connections;
mod credentials;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod layering;
mod operations;
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
    /// Make the shared login of an upstream (`identity = "shared"`, or `catalog =
    /// "shared_login"`): print the link to open. Asks the running Manifold at the config's
    /// admin address when it answers there; otherwise serves the login's callback on a
    /// loopback address itself, keeps the connection in the configured token store (not
    /// "memory") and waits until the login completes (at most `consent_timeout`).
    Login {
        /// The upstream's key.
        upstream: String,
        #[arg(long, short)]
        config: PathBuf,
        /// Also open the link in the desktop's browser (`xdg-open`).
        #[arg(long)]
        open: bool,
        /// `server.metrics_token`, when it is set (or MANIFOLD_METRICS_TOKEN).
        #[arg(long)]
        token: Option<String>,
    },
    /// List the upstream connections a running Manifold keeps (never a token), through its
    /// admin address.
    Connections {
        #[command(flatten)]
        admin: AdminArgs,
        /// Only this team's connections.
        #[arg(long)]
        team: Option<String>,
        /// Only this caller's (with --team): `key:NAME`, `jwt:ISS#SUB`, `local`.
        #[arg(long, requires = "team")]
        principal: Option<String>,
    },
    /// Forget a caller's upstream connections (or the shared login's), through a running
    /// Manifold's admin address: the caller is asked to authorize again.
    Revoke {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long, required_unless_present = "shared", requires = "principal")]
        team: Option<String>,
        #[arg(long, requires = "team")]
        principal: Option<String>,
        /// The shared login instead of a caller's.
        #[arg(long, conflicts_with_all = ["team", "principal"])]
        shared: bool,
        /// Only the connection to this upstream; default: all of them.
        #[arg(long)]
        upstream: Option<String>,
    },
}

/// Where a running Manifold's admin address is, and its token.
#[derive(clap::Args)]
struct AdminArgs {
    /// The admin address (IP:PORT, or a port alone for 127.0.0.1).
    #[arg(long, value_parser = listen_addr)]
    admin: Option<std::net::SocketAddr>,
    /// Or the config file whose `server.admin` it is.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// `server.metrics_token`, when it is set (or MANIFOLD_METRICS_TOKEN).
    #[arg(long)]
    token: Option<String>,
}

impl AdminArgs {
    fn resolve(self) -> anyhow::Result<(std::net::SocketAddr, Option<String>)> {
        let addr = connections::admin_address(self.admin, self.config.as_deref())?;
        Ok((addr, admin_token(self.token)))
    }
}

fn admin_token(token: Option<String>) -> Option<String> {
    token.or_else(|| std::env::var("MANIFOLD_METRICS_TOKEN").ok())
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
        Command::Reload { admin, token } => reload::ask(admin, admin_token(token).as_deref()),
        Command::Check { config, no_start } => {
            manifold_telemetry::logs::init(&Default::default());
            check::check(&config, no_start)
        }
        Command::Pin { config } => {
            manifold_telemetry::logs::init(&Default::default());
            pin::pin(&config)
        }
        Command::Login {
            upstream,
            config,
            open,
            token,
        } => connections::login(&config, &upstream, open, admin_token(token).as_deref()),
        Command::Connections {
            admin,
            team,
            principal,
        } => admin.resolve().and_then(|(addr, token)| {
            connections::list(
                addr,
                team.as_deref(),
                principal.as_deref(),
                token.as_deref(),
            )
        }),
        Command::Revoke {
            admin,
            team,
            principal,
            shared,
            upstream,
        } => {
            let whose = match (team, principal) {
                (Some(team), Some(principal)) if !shared => {
                    serde_json::json!({ "team": team, "principal": principal })
                }
                _ => serde_json::json!({ "shared": true }),
            };
            admin.resolve().and_then(|(addr, token)| {
                connections::revoke(addr, &whose, upstream.as_deref(), token.as_deref())
            })
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
