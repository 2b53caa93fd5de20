//! The real `manifold` binary over pipes against fixture upstreams, with every wait bounded so
//! that a broken build fails instead of hanging; and the paths of the workspace's binaries.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

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

/// The usual pair of fixture upstreams, `alpha` and `beta`.
pub fn two_fixtures() -> String {
    format!(
        "{}{}",
        fixture_upstream("alpha", &["--name", "alpha"]),
        fixture_upstream("beta", &["--name", "beta"])
    )
}

/// A running `manifold serve` with its stdio.
pub struct Manifold {
    pub child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    /// Messages read while waiting for something else.
    backlog: VecDeque<Value>,
    /// The text of each response as it arrived, by id JSON, once `keep_raw_responses` asked.
    raw_responses: Option<HashMap<String, String>>,
    pub stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    next_id: u64,
    pub dir: TempDir,
}

impl Manifold {
    /// Starts `manifold serve` on `config` (TOML text).
    pub fn start(config: &str) -> Self {
        let dir = TempDir::new("serve");
        let path = dir.write("manifold.toml", config);
        Self::start_with(&["serve", "--config", path.to_str().unwrap()], dir)
    }

    pub fn start_with(args: &[&str], dir: TempDir) -> Self {
        Self::start_logging(args, dir, "info,manifold_upstream=debug")
    }

    /// [`Self::start_with`] logging at `level` (a `MANIFOLD_LOG` directive).
    pub fn start_logging(args: &[&str], dir: TempDir, level: &str) -> Self {
        let mut child = Command::new(manifold_bin())
            .args(args)
            .env("MANIFOLD_LOG", level)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("manifold starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr_text = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr_text);
        let stderr = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Manifold {
            child,
            stdin,
            rx,
            backlog: VecDeque::new(),
            raw_responses: None,
            stderr: stderr_text,
            stderr_reader: Some(stderr_reader),
            next_id: 1,
            dir,
        }
    }

    /// Starts and completes the handshake.
    pub fn ready(config: &str) -> Self {
        let mut m = Self::start(config);
        let init = m.initialize();
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        m
    }

    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        self.notify("notifications/initialized", json!({}));
        r
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends bytes that need not be UTF-8, as one line.
    pub fn send_raw_bytes(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its id without waiting.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and waits for its response (other messages are kept).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(&json!(id))
    }

    /// Waits for the response with `id`.
    pub fn response(&mut self, id: &Value) -> Value {
        self.wait_for(|m| m.get("id") == Some(id) && m.get("method").is_none())
    }

    /// The next message from Manifold, in order.
    pub fn recv(&mut self) -> Value {
        if let Some(m) = self.backlog.pop_front() {
            return m;
        }
        self.read_line(WAIT)
            .unwrap_or_else(|| panic!("no message within {WAIT:?}; stderr:\n{}", self.stderr()))
    }

    /// From now on keeps the text of every response as Manifold wrote it, for `raw_response`.
    pub fn keep_raw_responses(&mut self) {
        self.raw_responses.get_or_insert_with(HashMap::new);
    }

    /// Waits for the response with `id` and returns its text exactly as Manifold wrote it
    /// (`keep_raw_responses` must have been called before it arrived).
    pub fn raw_response(&mut self, id: &Value) -> String {
        self.response(id);
        self.raw_responses
            .as_mut()
            .and_then(|raw| raw.remove(&id.to_string()))
            .expect("keep_raw_responses() before the response arrived")
    }

    fn read_line(&mut self, wait: Duration) -> Option<Value> {
        match self.rx.recv_timeout(wait) {
            Ok(line) => {
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                if let (Some(raw), Some(id), None) = (
                    self.raw_responses.as_mut(),
                    message.get("id"),
                    message.get("method"),
                ) {
                    raw.insert(id.to_string(), line);
                }
                Some(message)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("manifold closed stdout; stderr:\n{}", self.stderr())
            }
        }
    }

    /// Waits for the first message matching `pred`; the others stay queued in order.
    pub fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos).unwrap();
        }
        let until = Instant::now() + WAIT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Some(m) = self.read_line(left) else {
                panic!(
                    "no matching message within {WAIT:?}; seen {:?}; stderr:\n{}",
                    self.backlog,
                    self.stderr()
                )
            };
            if pred(&m) {
                return m;
            }
            self.backlog.push_back(m);
        }
    }

    /// Whether a message matching `pred` arrives within `wait` (kept in the backlog if so).
    pub fn sees_within(&mut self, wait: Duration, pred: impl Fn(&Value) -> bool) -> bool {
        if self.backlog.iter().any(&pred) {
            return true;
        }
        let until = Instant::now() + wait;
        while let Some(m) = self.read_line(until.saturating_duration_since(Instant::now())) {
            let hit = pred(&m);
            self.backlog.push_back(m);
            if hit {
                return true;
            }
        }
        false
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for `text` on stderr: it is read on a thread of its own, so a line logged
    /// just before an answer may arrive just after it.
    pub fn assert_logged(&self, text: &str) {
        let until = Instant::now() + WAIT;
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < until,
                "never logged {text:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first line logged that `matches`, waiting (bounded) for it: the log is read by a
    /// thread of its own, so a line written just before an answer may not be in yet.
    pub fn logged_line(&self, matches: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + WAIT;
        loop {
            let stderr = self.stderr();
            if let Some(line) = stderr.lines().find(|l| matches(l)) {
                return line.to_owned();
            }
            assert!(
                Instant::now() < until,
                "never logged such a line:\n{stderr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every item of a paginated list, following nextCursor.
    pub fn list_all(&mut self, method: &str, key: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut params = json!({});
        for _ in 0..1000 {
            let r = self.request(method, params.clone());
            let result = r
                .get("result")
                .unwrap_or_else(|| panic!("{method} failed: {r}"));
            items.extend(result[key].as_array().unwrap().iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => params = json!({ "cursor": c }),
                None => return items,
            }
        }
        panic!("{method} never ended");
    }

    pub fn names(&mut self, method: &str, key: &str, field: &str) -> Vec<String> {
        self.list_all(method, key)
            .iter()
            .map(|t| t[field].as_str().unwrap().to_owned())
            .collect()
    }

    /// Calls a tool and returns the whole response.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// How many times the fixture behind `upstream` (its prefix) did `what`: `tool:NAME` (calls
    /// of a tool) or `read:URI` (reads of a resource), in its own names. A cache hit never
    /// reaches it.
    pub fn call_count(&mut self, upstream: &str, what: &str) -> u64 {
        let r = self.call(&format!("{upstream}__call_count"), json!({"what": what}));
        text_of(&r)
            .parse()
            .unwrap_or_else(|e| panic!("call_count answered {r}: {e}"))
    }

    /// Closes stdin and waits (bounded) for Manifold to exit; returns its exit code.
    pub fn close(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.wait_exit()
    }

    pub fn wait_exit(&mut self) -> Option<i32> {
        let until = Instant::now() + WAIT;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Everything it wrote to stderr has been read once the pipe ends; wait for that
                // briefly, in case something else still holds the pipe.
                let until = Instant::now() + Duration::from_secs(2);
                while self
                    .stderr_reader
                    .as_ref()
                    .is_some_and(|r| !r.is_finished())
                    && Instant::now() < until
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "manifold did not exit within {WAIT:?}; stderr:\n{}",
            self.stderr()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port of the admin listener (`--admin 127.0.0.1:0`), as Manifold logged it.
    pub fn admin_port(&self) -> u16 {
        admin_port_in(|| self.stderr())
    }
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

impl Drop for Manifold {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if self.child.try_wait().ok().flatten().is_none() {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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
