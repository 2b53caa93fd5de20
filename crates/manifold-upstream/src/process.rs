//! Child processes: spawning in their own process group, relaying stderr to our log, and
//! making sure every process of the group is gone when the upstream stops.

use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_config::StdioConfig;
use rustix::process::{Pid, Signal};

/// Starts the upstream's command with piped stdio in a new process group.
pub(crate) fn spawn(cfg: &StdioConfig) -> io::Result<Child> {
    let program = manifold_config::resolve_command(&cfg.command, cfg.cwd.as_deref());
    let mut cmd = Command::new(program);
    cmd.args(&cfg.args)
        .envs(&cfg.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that stopping it reaches whatever it started (npx -> node, sh -> ...).
        .process_group(0);
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn()
}

/// Sends `signal` to the whole process group led by `pid`.
pub(crate) fn signal_group(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// Relays the child's stderr into our log, one event per line, tagged with the upstream.
pub(crate) fn relay_stderr(upstream: Arc<str>, stderr: ChildStderr) {
    let name = Arc::clone(&upstream);
    let spawned = std::thread::Builder::new().name(format!("stderr-{upstream}")).spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    tracing::info!(target: "manifold::upstream::stderr", upstream = %upstream, "{}", text.trim_end());
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(upstream = %name, "cannot start the stderr relay: {e}");
    }
}

/// After the child's stdout closed: give it a moment to exit by itself, then stop its whole
/// group (TERM, then KILL after `grace`) and reap it. Returns how it ended.
pub(crate) fn reap(child: &mut Child, grace: Duration) -> String {
    let pid = child.id();
    if let Some(status) = wait_for(child, Duration::from_millis(100)) {
        // The leader is reaped; stragglers in its group still get a TERM.
        signal_group(pid, Signal::TERM);
        return status;
    }
    signal_group(pid, Signal::TERM);
    if let Some(status) = wait_for(child, grace) {
        return status;
    }
    signal_group(pid, Signal::KILL);
    match child.wait() {
        Ok(status) => format!("{status} (killed after {}ms)", grace.as_millis()),
        Err(e) => format!("could not be reaped: {e}"),
    }
}

fn wait_for(child: &mut Child, limit: Duration) -> Option<String> {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.to_string()),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return None,
            Err(e) => return Some(format!("could not be waited for: {e}")),
        }
    }
}
