//! A server launched as a child process, driven over its stdin and stdout exactly as an MCP
//! host drives a stdio server. The child is always ended: closing stdin asks it to exit, and
//! after a bounded grace it is killed, whatever path (success, error, panic) drops the target.

use std::fs::File;
use std::io::Write;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::lines::LineReader;
use super::watchdog::{Marker, Watchdog};
use super::{Limits, StdioSpec, Target};

/// How much of the server's stderr an error message quotes.
const EXIT_POLL: Duration = Duration::from_millis(5);

pub struct StdioTarget {
    spec: StdioSpec,
    limits: Limits,
    /// Shared with the watchdog, which may kill it while this thread is blocked in I/O.
    child: Arc<Mutex<Child>>,
    pid: u32,
    stdin: Option<ChildStdin>,
    lines: LineReader<ChildStdout>,
    marker: Marker,
    watchdog: Watchdog,
}

impl StdioTarget {
    pub fn launch(spec: &StdioSpec, limits: Limits) -> Result<Self> {
        let log = File::create(&spec.log)
            .with_context(|| format!("cannot create {}", spec.log.display()))?;
        let mut command = Command::new(&spec.program);
        for (key, value) in &spec.env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let mut child = command
            .args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", spec.program.display()))?;
        let pid = child.id();
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let child = Arc::new(Mutex::new(child));
        let watched = Watchdog::spawn(Arc::clone(&child), limits.stall, limits.lifetime);
        let (watchdog, marker, stdout) = match (watched, stdout) {
            (Ok((watchdog, marker)), Some(stdout)) => (watchdog, marker, stdout),
            (watched, _) => {
                // Nothing owns the child yet, so end it here before reporting.
                end_child(&child, stdin, limits.exit_grace);
                let why = watched
                    .err()
                    .map_or("no stdout pipe".into(), |e| e.to_string());
                return Err(anyhow!("{}: cannot watch the child: {why}", spec.label));
            }
        };
        let lines = LineReader::new(stdout);
        Ok(Self {
            spec: spec.clone(),
            limits,
            child,
            pid,
            stdin,
            lines,
            marker,
            watchdog,
        })
    }

    /// Why the stream ended, with the end of the server's stderr.
    fn ended(&self, what: &str) -> anyhow::Error {
        let killed = self.watchdog.fired().then(|| {
            format!(
                "blocked longer than {:?} or lived too long",
                self.limits.stall
            )
        });
        super::failure(&self.spec.label, &self.spec.log, self.pid, what, killed)
    }
}

impl Target for StdioTarget {
    fn label(&self) -> &str {
        &self.spec.label
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(anyhow!("{}: stdin already closed", self.spec.label));
        };
        // ChildStdin is unbuffered: one write_all is one write(2) for a batch of lines.
        match self.marker.blocking(|| stdin.write_all(bytes)) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.ended(&format!("stopped reading its stdin ({e})"))),
        }
    }

    fn recv(&mut self) -> Result<&[u8]> {
        match self.lines.advance(&mut self.marker) {
            Ok(true) => Ok(self.lines.line()),
            Ok(false) => Err(self.ended("closed its stdout")),
            Err(e) => Err(self.ended(&format!("stdout read failed: {e}"))),
        }
    }

    fn server_pid(&self) -> Option<u32> {
        Some(self.pid)
    }
}

impl Drop for StdioTarget {
    fn drop(&mut self) {
        self.watchdog.stop();
        end_child(&self.child, self.stdin.take(), self.limits.exit_grace);
    }
}

/// Closes stdin (how a host asks a stdio server to exit), waits at most `grace`, then kills.
fn end_child(child: &Mutex<Child>, stdin: Option<ChildStdin>, grace: Duration) {
    drop(stdin);
    let mut child = child.lock().unwrap_or_else(PoisonError::into_inner);
    let start = Instant::now();
    let polls = grace.as_millis() / EXIT_POLL.as_millis() + 1;
    for _ in 0..polls {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if start.elapsed() >= grace => break,
            Ok(None) => std::thread::sleep(EXIT_POLL),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each test has its own log: tests run in parallel.
    fn spec(test: &str, program: &str, args: &[&str]) -> StdioSpec {
        let name = format!("manifold-load-{test}-{}.stderr", std::process::id());
        let log = std::env::temp_dir().join(name);
        StdioSpec {
            label: "unit".into(),
            program: program.into(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            log,
        }
    }

    fn limits() -> Limits {
        Limits {
            stall: Duration::from_millis(300),
            lifetime: Duration::from_secs(60),
            exit_grace: Duration::from_millis(200),
        }
    }

    #[test]
    fn a_server_that_never_answers_is_killed_and_reaped() {
        let mut target = StdioTarget::launch(&spec("stall", "sleep", &["30"]), limits()).unwrap();
        let pid = target.server_pid().unwrap();
        target.send(b"{}\n").unwrap();
        let err = target.recv().unwrap_err().to_string();
        assert!(err.contains("was killed"), "{err}");
        let log = target.spec.log.clone();
        drop(target);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn the_environment_changes_reach_the_child_only() {
        let script = r#"printf '%s %s\n' "$MANIFOLD_LOAD_SET" "${HOME-removed}""#;
        let mut spec = spec("env", "sh", &["-c", script]);
        spec.env = vec![
            ("MANIFOLD_LOAD_SET".into(), Some("set".into())),
            ("HOME".into(), None),
        ];
        let mut target = StdioTarget::launch(&spec, limits()).unwrap();
        assert_eq!(target.recv().unwrap(), b"set removed");
        assert!(std::env::var_os("MANIFOLD_LOAD_SET").is_none());
        let _ = std::fs::remove_file(&target.spec.log);
    }

    #[test]
    fn a_server_that_exits_is_reported_with_its_stderr() {
        let script = "echo boom >&2";
        let mut target =
            StdioTarget::launch(&spec("exit", "sh", &["-c", script]), limits()).unwrap();
        let err = target.recv().unwrap_err().to_string();
        assert!(
            err.contains("closed its stdout") && err.contains("boom"),
            "{err}"
        );
        let _ = std::fs::remove_file(&target.spec.log);
    }
}
