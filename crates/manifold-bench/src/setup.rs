//! Where the programs under test are, the scratch directory, the configs that put Manifold
//! (over stdio or Streamable HTTP) and the peer gateway in front of fixture upstreams, and how
//! big a run is.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::target::{Limits, ServerSpec, StdioSpec, TargetSpec};

/// Counts of a run; `--quick` shrinks them for the smoke test.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub rounds: usize,
    pub latency_calls: usize,
    pub pipelined_calls: u64,
    pub window: u64,
    pub list_calls: [usize; 2],
    pub big_calls: usize,
    pub rss_rounds: usize,
    /// Concurrent HTTP connections (one session each) of the HTTP throughput scenario.
    pub connections: usize,
    /// Calls per round of the HTTP throughput scenario, shared by the connections.
    pub http_calls: u64,
    /// Idle HTTP sessions opened in the HTTP RSS scenario.
    pub idle_sessions: usize,
    /// Calls per round and case of the replicas scenario, shared by the connections.
    pub replica_calls: u64,
    /// Calls per round and case of the replicas scenario on one connection alone.
    pub replica_single_calls: usize,
    /// Sessions per round that the replicas scenario moves to a replica that does not hold
    /// them (adoption).
    pub adopt_sessions: usize,
    /// Tools in the catalog the search scenario measures latency, build and memory over.
    pub search_tools: usize,
    /// Rounds of every query of the search scenario's set, for its latency.
    pub search_rounds: usize,
    /// Upper bound on the wall time of any one measuring loop.
    pub round_limit: Duration,
    /// How long the soak's measured part lasts, in seconds (a warm-up comes first).
    pub soak_seconds: u64,
    /// The soak's requests per second, over all its sessions.
    pub soak_rate: u64,
    /// The soak's host sessions, one connection and thread each.
    pub soak_sessions: usize,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            rounds: 7,
            latency_calls: 20_000,
            pipelined_calls: 100_000,
            window: 128,
            list_calls: [2_000, 200],
            big_calls: 200,
            rss_rounds: 3,
            connections: 16,
            http_calls: 40_000,
            idle_sessions: 1_000,
            replica_calls: 20_000,
            replica_single_calls: 2_000,
            adopt_sessions: 200,
            search_tools: 5_000,
            search_rounds: 25,
            round_limit: Duration::from_secs(30),
            soak_seconds: 30,
            soak_rate: 3_000,
            soak_sessions: 16,
        }
    }

    pub fn quick() -> Self {
        Self {
            rounds: 2,
            latency_calls: 300,
            pipelined_calls: 3_000,
            window: 64,
            list_calls: [20, 5],
            big_calls: 5,
            rss_rounds: 1,
            connections: 16,
            http_calls: 800,
            idle_sessions: 50,
            replica_calls: 800,
            replica_single_calls: 50,
            adopt_sessions: 10,
            search_tools: 1_000,
            search_rounds: 2,
            round_limit: Duration::from_secs(30),
            soak_seconds: 10,
            soak_rate: 400,
            soak_sessions: 16,
        }
    }

    /// Calls before measuring: fills caches, faults pages in, renders cached list pages.
    pub fn warmup(count: usize) -> usize {
        (count / 10).max(2)
    }
}

/// One fixture upstream behind Manifold.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub key: String,
    /// `--extra-tools N`, exposed alone through `include = ["tool_*"]` when non-zero.
    pub extra_tools: usize,
}

impl Upstream {
    pub fn plain(key: &str) -> Self {
        Self {
            key: key.into(),
            extra_tools: 0,
        }
    }

    /// `count` upstreams `{base}0..` with `tools` extra tools each.
    pub fn many(base: &str, count: usize, tools: usize) -> Vec<Self> {
        (0..count)
            .map(|i| Self {
                key: format!("{base}{i}"),
                extra_tools: tools,
            })
            .collect()
    }
}

/// GitHub's REST description as tests/interop/install.sh installs it, from the repository root.
pub const GITHUB_DESCRIPTION: &str =
    "tests/interop/node_modules/@octokit/openapi/generated/api.github.com.json";

/// Paths of the programs under test and a scratch directory, removed at the end.
pub struct Setup {
    pub manifold: PathBuf,
    pub fixture: PathBuf,
    /// The peer gateway (`mcp-proxy`), measured beside Manifold over HTTP when given.
    pub peer: Option<PathBuf>,
    /// An earlier Manifold build, measured over stdio beside this one when given.
    pub manifold_before: Option<PathBuf>,
    pub limits: Limits,
    /// `server.cpus` for every Manifold started; empty for none.
    pub manifold_cpus: Vec<usize>,
    /// Serve the web console (an admin address and its token) in every Manifold started, so
    /// that what a served console records on each request is measured.
    pub console: bool,
    /// The large real description the `openapi` scenario loads (GitHub's REST description).
    pub openapi_description: PathBuf,
    dir: PathBuf,
}

impl Setup {
    /// `needs_manifold`: false when no scenario of the run starts Manifold (`search`), so
    /// that its binary need not be built; its path is then kept as given or defaulted.
    pub fn new(
        manifold: Option<PathBuf>,
        fixture: Option<PathBuf>,
        limits: Limits,
        needs_manifold: bool,
    ) -> Result<Self> {
        let here = std::env::current_exe().context("cannot find this executable")?;
        let bin_dir = here.parent().map(Path::to_path_buf).unwrap_or_default();
        let pick = |given: Option<PathBuf>, name: &str| -> Result<PathBuf> {
            let path = given.unwrap_or_else(|| bin_dir.join(name));
            // Configs name the fixture by absolute path: Manifold runs them from elsewhere.
            std::fs::canonicalize(&path).with_context(|| {
                format!("{} not found (build it, or pass its path)", path.display())
            })
        };
        let manifold = match (needs_manifold, manifold) {
            (true, given) => pick(given, "manifold")?,
            (false, given) => given.unwrap_or_else(|| bin_dir.join("manifold")),
        };
        let fixture = pick(fixture, "manifold-fixture")?;
        let dir = std::env::temp_dir().join(format!("manifold-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self {
            manifold,
            fixture,
            peer: None,
            manifold_before: None,
            limits,
            manifold_cpus: Vec::new(),
            console: false,
            openapi_description: PathBuf::from(GITHUB_DESCRIPTION),
            dir,
        })
    }

    /// The fixture called directly, as `alpha` with `extra` flags.
    pub fn direct(&self, label: &str, extra: &[&str]) -> TargetSpec {
        let mut args = vec!["--name".to_owned(), "alpha".to_owned()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        self.stdio(label, &self.fixture, args)
    }

    /// Manifold serving `upstreams`, all fixtures, in one page.
    pub fn through(&self, label: &str, upstreams: &[Upstream]) -> Result<TargetSpec> {
        self.through_with(&self.manifold, label, upstreams)
    }

    /// The same with the earlier Manifold build; `None` when none was given.
    pub fn through_before(
        &self,
        label: &str,
        upstreams: &[Upstream],
    ) -> Result<Option<TargetSpec>> {
        self.manifold_before
            .as_ref()
            .map(|before| self.through_with(before, label, upstreams))
            .transpose()
    }

    fn through_with(
        &self,
        manifold: &Path,
        label: &str,
        upstreams: &[Upstream],
    ) -> Result<TargetSpec> {
        self.through_extra(manifold, label, upstreams, "", Vec::new(), &[])
    }

    /// Manifold over stdio with `tables` (TOML, e.g. a `[telemetry]` table) added to its
    /// config and `env` applied to the environment it inherits (see `StdioSpec::env`).
    pub fn through_tuned(
        &self,
        label: &str,
        upstreams: &[Upstream],
        tables: &str,
        env: Vec<(String, Option<String>)>,
    ) -> Result<TargetSpec> {
        self.through_extra(&self.manifold, label, upstreams, tables, env, &[])
    }

    /// Manifold over stdio with `tables` added to its config, serving as team `team`
    /// (`manifold serve --team`); `None` for no team.
    pub fn through_as(
        &self,
        label: &str,
        upstreams: &[Upstream],
        tables: &str,
        team: Option<&str>,
    ) -> Result<TargetSpec> {
        let flags: Vec<&str> = team.map(|t| vec!["--team", t]).unwrap_or_default();
        self.through_extra(&self.manifold, label, upstreams, tables, Vec::new(), &flags)
    }

    fn through_extra(
        &self,
        manifold: &Path,
        label: &str,
        upstreams: &[Upstream],
        tables: &str,
        env: Vec<(String, Option<String>)>,
        flags: &[&str],
    ) -> Result<TargetSpec> {
        let path = self.manifold_config(label, upstreams, tables)?;
        let mut args = vec![
            "serve".into(),
            "--config".into(),
            path.display().to_string(),
        ];
        args.extend(flags.iter().map(|f| (*f).to_owned()));
        Ok(self.stdio_with(label, manifold, args, env))
    }

    /// Manifold serving `upstreams` over Streamable HTTP on a free port of 127.0.0.1, with
    /// the default HTTP settings (2 workers, 4,096 sessions at most).
    pub fn manifold_http(&self, label: &str, upstreams: &[Upstream]) -> Result<ServerSpec> {
        self.manifold_http_tuned(label, upstreams, "")
    }

    /// The same with `tables` (TOML) added to its config.
    pub fn manifold_http_tuned(
        &self,
        label: &str,
        upstreams: &[Upstream],
        tables: &str,
    ) -> Result<ServerSpec> {
        let path = self.manifold_config(label, upstreams, tables)?;
        let args = vec![
            "serve".into(),
            "--config".into(),
            path.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        Ok(self.server(label, &self.manifold, args, "/mcp"))
    }

    /// The fixture (`alpha`) over Streamable HTTP at `/mcp`, on a free port of 127.0.0.1.
    pub fn fixture_http(&self, label: &str) -> ServerSpec {
        let args = ["--name", "alpha", "--http", "127.0.0.1:0"].map(str::to_owned);
        self.server(label, &self.fixture, args.to_vec(), "/mcp")
    }

    /// Manifold over Streamable HTTP on a free port of 127.0.0.1 in front of one upstream
    /// reached over Streamable HTTP at `url` (named `alpha`), with `tables` (TOML) added to
    /// its config: one replica of several.
    pub fn replica(&self, label: &str, url: &str, tables: &str) -> Result<ServerSpec> {
        let path = self.dir.join(format!("{label}.toml"));
        let mut text = server_table(&self.manifold_cpus);
        self.with_console(&mut text);
        let _ = write!(text, "\n[upstreams.alpha]\nurl = {}\n", toml_string(url));
        if !tables.is_empty() {
            text.push('\n');
            text.push_str(tables);
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        let args = vec![
            "serve".into(),
            "--config".into(),
            path.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        Ok(self.server(label, &self.manifold, args, "/mcp"))
    }

    /// HAProxy (`program`, run with `library_path` as `LD_LIBRARY_PATH` when given) in the
    /// foreground with the configuration `config`, written to the scratch directory, and `env`
    /// (the addresses it reads from the environment).
    pub fn haproxy(
        &self,
        label: &str,
        program: &Path,
        library_path: Option<&Path>,
        config: &str,
        env: Vec<(String, String)>,
    ) -> Result<ServerSpec> {
        let path = self.dir.join(format!("{label}.cfg"));
        std::fs::write(&path, config)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let args = vec!["-db".into(), "-f".into(), path.display().to_string()];
        let mut spec = self.server(label, program, args, "/mcp");
        spec.env = env;
        if let Some(lib) = library_path {
            spec.env
                .push(("LD_LIBRARY_PATH".into(), lib.display().to_string()));
        }
        Ok(spec)
    }

    /// Adds the console's admin address and token to the `[server]` table `text` opens with.
    fn with_console(&self, text: &mut String) {
        if self.console {
            *text = text.replacen(
                "[server]\n",
                "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"bench-console-token-0123456789abcdef\"\n",
                1,
            );
        }
    }

    /// Writes the Manifold config of `label`: `upstreams`, then `tables`.
    fn manifold_config(
        &self,
        label: &str,
        upstreams: &[Upstream],
        tables: &str,
    ) -> Result<PathBuf> {
        let path = self.dir.join(format!("{label}.toml"));
        let mut text = config(&self.fixture, upstreams, &self.manifold_cpus);
        self.with_console(&mut text);
        if !tables.is_empty() {
            text.push('\n');
            text.push_str(tables);
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// The peer gateway serving `upstreams` (stdio backends, the same fixture) on a free port
    /// of 127.0.0.1; `None` when no peer binary was given.
    pub fn peer_http(&self, label: &str, upstreams: &[Upstream]) -> Result<Option<ServerSpec>> {
        let Some(peer) = &self.peer else {
            return Ok(None);
        };
        let path = self.dir.join(format!("{label}.toml"));
        std::fs::write(&path, peer_config(&self.fixture, upstreams))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let args = vec!["--config".into(), path.display().to_string()];
        Ok(Some(self.server(label, peer, args, "/")))
    }

    /// The floor server (this executable with `--serve-floor`): the least any HTTP server can
    /// cost this client on this machine.
    pub fn floor(&self, label: &str) -> Result<ServerSpec> {
        let me = std::env::current_exe().context("cannot find this executable")?;
        Ok(self.server(label, &me, vec!["--serve-floor".into()], "/mcp"))
    }

    /// A file of the scratch directory (removed at the end).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `program` with `args`, a server listening on 127.0.0.1, its MCP endpoint at `path`.
    pub fn server(&self, label: &str, program: &Path, args: Vec<String>, path: &str) -> ServerSpec {
        ServerSpec {
            label: label.into(),
            program: program.into(),
            args,
            path: path.into(),
            env: Vec::new(),
            log: self.dir.join(format!("{label}.stderr")),
        }
    }

    /// `program` with `args` over stdio, its stderr kept in the scratch directory.
    pub fn stdio(&self, label: &str, program: &Path, args: Vec<String>) -> TargetSpec {
        self.stdio_with(label, program, args, Vec::new())
    }

    fn stdio_with(
        &self,
        label: &str,
        program: &Path,
        args: Vec<String>,
        env: Vec<(String, Option<String>)>,
    ) -> TargetSpec {
        let log = self.dir.join(format!("{label}.stderr"));
        TargetSpec::Stdio(StdioSpec {
            label: label.into(),
            program: program.into(),
            args,
            env,
            log,
        })
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Manifold config: one page per list, generous startup (100 upstreams on 2 cores), and a
/// short shutdown grace (fixtures exit at once on EOF).
fn config(fixture: &Path, upstreams: &[Upstream], cpus: &[usize]) -> String {
    let command = toml_string(&fixture.display().to_string());
    let mut text = server_table(cpus);
    for up in upstreams {
        let key = &up.key;
        let _ = write!(
            text,
            "\n[upstreams.{key}]\ncommand = {command}\nargs = [\"--name\", \"{key}\""
        );
        if up.extra_tools > 0 {
            let _ = writeln!(text, ", \"--extra-tools\", \"{}\"]", up.extra_tools);
            let _ = writeln!(text, "[upstreams.{key}.tools]\ninclude = [\"tool_*\"]");
        } else {
            text.push_str("]\n");
        }
    }
    text
}

/// The `[server]` table of every Manifold config (see `config`).
fn server_table(cpus: &[usize]) -> String {
    let mut text = String::from(
        "[server]\npage_size = 0\nstartup_timeout_ms = 60000\nshutdown_grace_ms = 1000\n",
    );
    if !cpus.is_empty() {
        let list: Vec<String> = cpus.iter().map(ToString::to_string).collect();
        let _ = writeln!(text, "cpus = [{}]", list.join(", "));
    }
    text
}

/// A config of the peer gateway (mcp-proxy 0.6) equivalent to `config`: the same fixtures as
/// stdio backends, the same exposed names (`{key}__{tool}`, only `tool_*` when extra tools
/// are asked for), listening on 127.0.0.1 with a port of the OS's choosing, and a short
/// shutdown. Everything else is left at its defaults (no middleware), as a user would start
/// it, except the log level: its documented default, "info", is only applied when the
/// `[observability]` table is present; without it every request is logged at debug level.
fn peer_config(fixture: &Path, upstreams: &[Upstream]) -> String {
    let command = toml_string(&fixture.display().to_string());
    let mut text = String::from(
        "[proxy]\nname = \"peer\"\nseparator = \"__\"\nshutdown_timeout_seconds = 1\n\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = 0\n\n[observability]\nlog_level = \"info\"\n",
    );
    for up in upstreams {
        let key = &up.key;
        let _ = write!(
            text,
            "\n[[backends]]\nname = \"{key}\"\ntransport = \"stdio\"\ncommand = {command}\nargs = [\"--name\", \"{key}\""
        );
        if up.extra_tools > 0 {
            let _ = writeln!(text, ", \"--extra-tools\", \"{}\"]", up.extra_tools);
            text.push_str("expose_tools = [\"tool_*\"]\n");
        } else {
            text.push_str("]\n");
        }
    }
    text
}

/// A TOML basic string (JSON string escaping is a subset TOML accepts).
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_the_fixture_and_filter_extra_tools() {
        let text = config(
            Path::new("/x/fix ture"),
            &[
                Upstream::plain("alpha"),
                Upstream::many("u", 1, 50).remove(0),
            ],
            &[],
        );
        assert!(text.contains(
            "[upstreams.alpha]\ncommand = \"/x/fix ture\"\nargs = [\"--name\", \"alpha\"]\n"
        ));
        assert!(text.contains("args = [\"--name\", \"u0\", \"--extra-tools\", \"50\"]\n[upstreams.u0.tools]\ninclude = [\"tool_*\"]\n"));
        assert!(text.starts_with("[server]\npage_size = 0\n"));
        assert!(!text.contains("cpus"));
        let text = config(Path::new("/f"), &[Upstream::plain("a")], &[0, 1]);
        assert!(text.contains("\ncpus = [0, 1]\n"), "{text}");
    }

    #[test]
    fn peer_configs_listen_on_loopback_and_name_tools_alike() {
        let text = peer_config(
            Path::new("/x/fix"),
            &[
                Upstream::plain("alpha"),
                Upstream::many("u", 1, 50).remove(0),
            ],
        );
        assert!(text.contains("separator = \"__\"\n"), "{text}");
        assert!(text.contains("[proxy.listen]\nhost = \"127.0.0.1\"\nport = 0\n"));
        assert!(text.contains("[observability]\nlog_level = \"info\"\n"));
        assert!(text.contains(
            "[[backends]]\nname = \"alpha\"\ntransport = \"stdio\"\ncommand = \"/x/fix\"\nargs = [\"--name\", \"alpha\"]\n"
        ));
        assert!(text.contains(
            "args = [\"--name\", \"u0\", \"--extra-tools\", \"50\"]\nexpose_tools = [\"tool_*\"]\n"
        ));
    }
}
