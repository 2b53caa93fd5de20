//! The paths of the workspace's binaries, fixture upstream configs, the processes tests start
//! and wait for (the real `manifold` over stdio is [`Manifold`]), and what tests read in
//! answers. Every wait is bounded so that a broken build fails instead of hanging.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

// Tests import `process::*` for everything they do over stdio.
pub use crate::requests::Requests;
pub use crate::stdio::Manifold;

/// How long any single expected message may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The folder of the profile being tested (`target/<profile>/`, or
/// `target/<triple>/<profile>/` when cross-compiling), where cargo puts the workspace's
/// binaries: the parent of the `deps/` folder holding the running test executable.
pub fn profile_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the path of the running test executable");
        let mut dir = exe
            .parent()
            .unwrap_or_else(|| panic!("{} has no parent folder", exe.display()));
        // Test executables run from `deps/`; an executable run from the profile folder itself
        // (a binary of the workspace) already has its answer.
        if dir.file_name() == Some(std::ffi::OsStr::new("deps")) {
            dir = dir.parent().unwrap_or(dir);
        }
        dir.to_path_buf()
    })
}

/// The path of the workspace binary `name` in [`profile_dir`]; panics naming it, and the
/// command that builds it, when it is not there.
pub fn workspace_bin(name: &str) -> PathBuf {
    let path = profile_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the {name} binary is missing: expected at {}; build it first with `cargo build --bin {name}` \
         (with the profile of the tests)",
        path.display(),
    );
    path
}

/// The `manifold` binary. `cargo test -p manifold` builds it before the package's integration
/// tests run, so it is as fresh as the tests themselves.
pub fn manifold_bin() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| workspace_bin("manifold").to_string_lossy().into_owned())
}

/// The fixture server, a binary of its own crate built into the same folder as `manifold`.
/// Built here once per test process (a no-op when it is up to date), so that a plain
/// `cargo test` never runs a missing or stale fixture.
pub fn fixture_bin() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        // Cargo passes its own path to the processes it runs; the one that built this crate
        // is the fallback for a test executable started by hand.
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "manifold-fixture"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        // The fixture is built with the profile of the tests: `debug/` holds the dev profile,
        // any other folder the profile of its name.
        match profile_dir().file_name().and_then(std::ffi::OsStr::to_str) {
            Some("debug") | None => {}
            Some(profile) => {
                build.args(["--profile", profile]);
            }
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building manifold-fixture failed");
        workspace_bin("manifold-fixture")
            .to_string_lossy()
            .into_owned()
    })
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "manifold-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TOML `[upstreams.KEY]` section running the fixture with `args`.
pub fn fixture_upstream(key: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[upstreams.{key}]\ncommand = {:?}\nargs = [{}]\n",
        fixture_bin(),
        args.join(", ")
    )
}

/// A TOML `[upstreams.KEY]` section running the fixture under the name `key`.
pub fn named_fixture(key: &str) -> String {
    fixture_upstream(key, &["--name", key])
}

/// The usual pair of fixture upstreams, `alpha` and `beta`.
pub fn two_fixtures() -> String {
    format!("{}{}", named_fixture("alpha"), named_fixture("beta"))
}

/// The port of the admin listener on 127.0.0.1, once the log `stderr` returns names it.
pub fn admin_port_in(stderr: impl Fn() -> String) -> u16 {
    const MARK: &str = "admin listening on 127.0.0.1:";
    let mut port = 0;
    eventually("the admin port in the log", || {
        let stderr = stderr();
        let Some(rest) = stderr.split(MARK).nth(1) else {
            return false;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        port = digits.parse().unwrap();
        true
    });
    port
}

/// The text of the first content block of a tool result.
pub fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
        .to_owned()
}

pub fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

/// The JSON a tool answered as the text of its first content block (the fixture's
/// `trace_context`, for one).
pub fn text_json(response: &Value) -> Value {
    serde_json::from_str(&text_of(response)).unwrap_or_else(|e| panic!("{e}: {response}"))
}

/// The error `response` carries, with `name` replaced by `with`: the error of a hidden name
/// compared with that of an unknown one must not tell them apart.
pub fn error_renamed(response: &Value, name: &str, with: &str) -> String {
    response
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {response}"))
        .to_string()
        .replace(name, with)
}

/// How many lines of `text` (a log, say) contain `needle`.
pub fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Starts `manifold serve` on `config` (written into `dir`), logging at `log` (a
/// `MANIFOLD_LOG` directive) to `stderr`, with its stdin and stdout piped to the test, which
/// speaks to it byte for byte (see [`Manifold`] for a host that speaks JSON).
pub fn serve_piped(dir: &TempDir, config: &str, log: &str, stderr: Stdio) -> Child {
    let path = dir.write("manifold.toml", config);
    Command::new(manifold_bin())
        .args(["serve", "--config", path.to_str().unwrap()])
        .env("MANIFOLD_LOG", log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("manifold starts")
}

/// Runs the `manifold` binary with `args` and `env` to its end: (exit code, or -1 when a
/// signal ended it; stdout; stderr).
pub fn run_manifold(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out: Output = Command::new(manifold_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("manifold runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Sends `signal` (a name `kill` knows: `TERM`, `HUP`, `KILL`, `STOP`...) to process `pid`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("the kill command runs");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// Waits (at most `within`) for `child` to exit; its status, or `None` if it is still running.
pub fn exit_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port free on 127.0.0.1 a moment ago, where nothing listens (bound, then released).
pub fn free_port() -> u16 {
    crate::redis_server::free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// Whether a process with `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// The children of `pid` and their state letters (`Z` for a zombie), from /proc.
pub fn children(pid: u32) -> Vec<(u32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Bounded by the machine's process count.
    for entry in entries.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The fields after the command name, which is in parentheses and may hold spaces:
        // the state, then the parent's pid.
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push((
                child,
                rest.first().and_then(|s| s.chars().next()).unwrap_or('?'),
            ));
        }
    }
    out
}

/// Waits (bounded) until none of the processes `pids` is left running.
pub fn wait_gone(pids: &[u32]) {
    for &pid in pids {
        eventually(&format!("process {pid} exits"), || !process_alive(pid));
    }
}

/// Polls `cond` every few milliseconds for at most `limit`; how long it took to hold, or
/// `None` if it never did. For a wait that may end either way; [`eventually`] fails instead.
pub fn poll_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Polls `cond` until true or the deadline passes (a hang guard, not a timing assertion).
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for: {what}");
}

/// Pids written by fixtures started with `--pid-file`.
pub fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
