//! A stdio host that reads its output slowly, or not at all: the answers it is owed are kept
//! (its input is paced instead), a host that reads nothing for `server.stall_timeout_ms` is
//! let go with a log line saying so, and a host that closes its input without reading (paced
//! or not) never holds Manifold's exit.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Duration;

use manifold_testkit::process::*;

/// `manifold serve` with `server` settings over one fixture upstream that records its pid,
/// stdin and stdout piped to the test; its log is read as it comes (see [`Log`]).
fn serve(dir: &TempDir, server: &str) -> (Child, Log) {
    let pids = dir.path().join("pids");
    let config = format!(
        "[server]\n{server}\n\n{}",
        fixture_upstream(
            "alpha",
            &["--name", "alpha", "--pid-file", pids.to_str().unwrap()]
        )
    );
    let mut child = serve_piped(dir, &config, "info", Stdio::piped());
    let mut stderr = child.stderr.take().unwrap();
    let log = Log(std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    }));
    (child, log)
}

/// Manifold's stderr, read all along so that its logging never waits on the test.
struct Log(std::thread::JoinHandle<String>);

impl Log {
    /// Everything logged, once Manifold is gone (killed first if it is still running).
    fn text(self, child: &mut Child) -> String {
        let _ = child.kill();
        let _ = child.wait();
        self.0.join().unwrap()
    }
}

/// Initializes (reading only that answer) and returns the lines of `count` pipelined calls
/// whose answers are 100 kB each (ids 1..=count).
fn initialize_then_big_calls(
    stdin: &mut ChildStdin,
    stdout: &mut BufReader<ChildStdout>,
    count: usize,
) -> String {
    stdin
        .write_all(concat!(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n"
        ).as_bytes())
        .unwrap();
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("\"result\""), "initialize failed: {first}");
    (1..=count)
        .map(|id| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"alpha__big\",\"arguments\":{{\"bytes\":100000}}}}}}\n"))
        .collect()
}

fn upstreams_gone(dir: &TempDir) {
    wait_gone(&read_pids(&dir.path().join("pids")));
}

#[test]
fn a_host_that_reads_nothing_for_a_while_then_everything_loses_no_answer() {
    // 30 MB of answers against a 1 MiB queue: far past twice the limit while the host is
    // away, all of it owed to requests Manifold had read.
    let dir = TempDir::new("slow-host");
    let (mut child, log) = serve(&dir, "session_queue_bytes = 1048576");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let calls = 300;
    let input = initialize_then_big_calls(&mut stdin, &mut stdout, calls);
    // Written from a thread: Manifold stops reading while the host does not read.
    let writer = std::thread::spawn(move || {
        stdin.write_all(input.as_bytes()).unwrap();
        stdin
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(child.try_wait().unwrap().is_none(), "Manifold is serving");
    // Now the host reads everything (on a thread, so that a wait for a line is bounded).
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            if lines.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let next = |child: &mut Child| {
        let line = read.recv_timeout(WAIT).ok();
        if line.is_none() {
            // Output ended or stopped: nothing more will come.
            let _ = child.kill();
        }
        line
    };
    let mut answered = std::collections::HashSet::new();
    while answered.len() < calls {
        let Some(line) = next(&mut child) else {
            let n = answered.len();
            panic!(
                "output ended after {n} of {calls} answers:\n{}",
                log.text(&mut child)
            );
        };
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            text_of(&message).len(),
            100_000,
            "{}",
            &line[..200.min(line.len())]
        );
        assert!(answered.insert(message["id"].as_u64().unwrap()));
    }
    // The session goes on: a ping is answered, and closing the input ends it cleanly.
    let mut stdin = writer.join().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}\n")
        .unwrap();
    let line = next(&mut child).unwrap_or_default();
    assert!(
        line.contains("\"after\"") && line.contains("\"result\""),
        "{line}"
    );
    drop(stdin);
    let status = exit_within(&mut child, WAIT);
    let log = log.text(&mut child);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
    upstreams_gone(&dir);
}

#[test]
fn a_host_that_reads_nothing_for_the_stall_timeout_is_let_go_with_a_reason() {
    let dir = TempDir::new("stalled-host");
    let (mut child, log) = serve(
        &dir,
        "session_queue_bytes = 1048576\nstall_timeout_ms = 1000",
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let input = initialize_then_big_calls(&mut stdin, &mut stdout, 300);
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
        stdin
    });
    let status = exit_within(&mut child, WAIT);
    let stderr = log.text(&mut child);
    drop(stdout);
    drop(writer.join());
    assert!(
        status.is_some(),
        "the stalled session was not ended:\n{stderr}"
    );
    assert!(
        stderr.contains("read none of its output") && stderr.contains("stall_timeout_ms"),
        "{stderr}"
    );
    upstreams_gone(&dir);
}

/// A host that sends `initialize` and `calls` large calls, waits `pause`, closes its input
/// and never reads its output: whether Manifold exited within the wait, and its log.
fn close_without_reading(
    dir: &TempDir,
    server: &str,
    calls: usize,
    pause: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let (mut child, log) = serve(dir, server);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let input = initialize_then_big_calls(&mut stdin, &mut stdout, calls);
    stdin.write_all(input.as_bytes()).unwrap();
    std::thread::sleep(pause);
    drop(stdin);
    // The output stays open and unread until Manifold is gone.
    let status = exit_within(&mut child, WAIT);
    let stderr = log.text(&mut child);
    drop(stdout);
    (status, stderr)
}

#[test]
fn a_host_that_closes_its_input_and_never_reads_does_not_hold_the_exit() {
    let dir = TempDir::new("closed-unread");
    // A queue that holds the answers to every request in flight (128 of 100 kB) with room to
    // spare, so that the host is paced rather than let go. 400 calls are enough for Manifold
    // to pace the host (about 170 answers); what it leaves unread fits in the input pipe, so
    // the write returns and the host can close its input.
    let (status, stderr) = close_without_reading(
        &dir,
        "session_queue_bytes = 16777216\nshutdown_grace_ms = 500",
        400,
        Duration::from_millis(1000),
    );
    assert!(
        status.is_some(),
        "Manifold kept running behind a host that closed its input:\n{stderr}"
    );
    upstreams_gone(&dir);
}

#[test]
fn shutdown_never_waits_on_a_host_that_does_not_read() {
    let dir = TempDir::new("unread");
    // About 3 MB of answers: far more than the pipe holds, less than the queue limit.
    let (status, stderr) = close_without_reading(&dir, "", 30, Duration::from_millis(500));
    assert!(
        status.is_some(),
        "Manifold kept running behind a host that does not read:\n{stderr}"
    );
    upstreams_gone(&dir);
}
