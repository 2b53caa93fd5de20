//! Supervision: crashes, garbage, failed starts, restarts, and shutdown leaving no process.

use serde_json::{json, Value};

use manifold_testkit::process::*;

fn fast_restart(key: &str, args: &[&str]) -> String {
    format!(
        "{}restart_initial_backoff_ms = 50\nrestart_max_backoff_ms = 200\n",
        fixture_upstream(key, args)
    )
}

#[test]
fn a_crashed_upstream_fails_its_requests_and_comes_back() {
    let config = format!(
        "{}{}",
        fast_restart("alpha", &["--name", "alpha"]),
        named_fixture("beta")
    );
    let mut m = Manifold::ready(&config);
    let pid_before = text_of(&m.call("alpha__whoami", json!({})));
    let slow = m.send_request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 10000}}),
    );
    let r = m.call("alpha__crash", json!({"code": 7}));
    assert_eq!(error_code(&r), -32010, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("alpha"),
        "{r}"
    );
    let r = m.response(&json!(slow));
    assert_eq!(
        error_code(&r),
        -32010,
        "in-flight requests fail at once: {r}"
    );
    // The other upstream never noticed.
    assert_eq!(
        text_of(&m.call("beta__echo", json!({"text": "fine"}))),
        "fine"
    );
    eventually("alpha restarts", || {
        m.call("alpha__echo", json!({"text": "back"}))
            .get("result")
            .is_some()
    });
    assert_ne!(
        text_of(&m.call("alpha__whoami", json!({}))),
        pid_before,
        "a new process serves alpha"
    );
    m.assert_logged("restarting");
}

#[test]
fn an_upstream_that_sends_garbage_is_restarted() {
    let mut m = Manifold::ready(&fast_restart("alpha", &["--name", "alpha"]));
    let r = m.call("alpha__garbage", json!({}));
    assert_eq!(error_code(&r), -32010, "{r}");
    eventually("alpha restarts", || {
        m.call("alpha__echo", json!({"text": "ok"}))
            .get("result")
            .is_some()
    });
    m.assert_logged("not JSON-RPC");
}

#[test]
fn an_upstream_that_cannot_start_does_not_stop_the_others() {
    let config = format!(
        "{}{}[upstreams.missing]\ncommand = \"/nonexistent/manifold-no-such-server\"\n",
        fast_restart("broken", &["--name", "broken", "--exit-on-start", "2"]),
        named_fixture("beta"),
    );
    let mut m = Manifold::ready(&config);
    assert_eq!(text_of(&m.call("beta__echo", json!({"text": "up"}))), "up");
    let tools = m.all_tool_names();
    assert!(tools.iter().all(|t| t.starts_with("beta__")), "{tools:?}");
    let r = m.request(
        "resources/read",
        json!({"uri": "broken+fixture://broken/readme"}),
    );
    assert_eq!(error_code(&r), -32010, "a down upstream fails fast: {r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("broken"),
        "{r}"
    );
    m.assert_logged("manifold-no-such-server");
}

#[test]
fn a_down_upstream_keeps_its_names_and_fails_fast() {
    let config = format!(
        "{}restart_initial_backoff_ms = 60000\nrestart_max_backoff_ms = 60000\n",
        named_fixture("alpha")
    );
    let mut m = Manifold::ready(&config);
    m.call("alpha__crash", json!({}));
    eventually("alpha is marked down", || {
        let r = m.call("alpha__echo", json!({"text": "x"}));
        r.get("error").is_some()
            && r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unavailable")
    });
    assert!(
        m.all_tool_names().contains(&"alpha__echo".into()),
        "names stay stable while down"
    );
}

/// Two fixtures, each writing its pid to its own file (appends from two processes to one
/// file may interleave).
fn pid_config(dir: &TempDir) -> (String, Vec<std::path::PathBuf>) {
    let files: Vec<_> = ["alpha", "beta"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.pid")))
        .collect();
    let config = format!(
        "[server]\nshutdown_grace_ms = 300\n\n{}{}",
        fixture_upstream(
            "alpha",
            &["--name", "alpha", "--pid-file", files[0].to_str().unwrap()]
        ),
        fixture_upstream(
            "beta",
            &["--name", "beta", "--pid-file", files[1].to_str().unwrap()]
        ),
    );
    (config, files)
}

fn pids_of(files: &[std::path::PathBuf]) -> Vec<u32> {
    files.iter().flat_map(|f| read_pids(f)).collect()
}

fn assert_all_gone(pids: &[u32]) {
    assert_eq!(pids.len(), 2, "both fixtures wrote their pid: {pids:?}");
    wait_gone(pids);
}

#[test]
fn closing_stdin_stops_every_child() {
    let dir = TempDir::new("pids");
    let (config, pids) = pid_config(&dir);
    let mut m = Manifold::ready(&config);
    let pids = pids_of(&pids);
    assert!(pids.iter().all(|p| process_alive(*p)));
    assert_eq!(m.close(), Some(0));
    assert_all_gone(&pids);
}

#[test]
fn sigterm_and_sigint_stop_every_child() {
    for signal in ["TERM", "INT"] {
        let dir = TempDir::new("pids");
        let (config, pids) = pid_config(&dir);
        let mut m = Manifold::ready(&config);
        // A call in flight must not hold the shutdown up.
        m.send_request(
            "tools/call",
            json!({"name": "alpha__sleep", "arguments": {"ms": 30000}}),
        );
        let pids = pids_of(&pids);
        send_signal(m.pid(), signal);
        assert_eq!(m.wait_exit(), Some(0), "{signal}");
        assert_all_gone(&pids);
    }
}

#[test]
fn children_exit_even_when_manifold_is_killed() {
    // SIGKILL gives Manifold no chance to clean up; its children still see end of input on
    // their stdin, which every MCP stdio server treats as the end of the session.
    let dir = TempDir::new("pids");
    let (config, pids) = pid_config(&dir);
    let mut m = Manifold::ready(&config);
    let pids = pids_of(&pids);
    send_signal(m.pid(), "KILL");
    m.wait_exit();
    assert_all_gone(&pids);
}

fn allowed_cpus(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn server_cpus_pins_manifold_and_the_upstreams_it_starts() {
    // A CPU this test may use (a container can be limited to some CPUs only).
    let mine = allowed_cpus(std::process::id());
    let cpu: String = mine.chars().take_while(char::is_ascii_digit).collect();
    let config = format!("[server]\ncpus = [{cpu}]\n\n{}", named_fixture("alpha"));
    let mut m = Manifold::ready(&config);
    let who = text_of(&m.call("alpha__whoami", json!({})));
    let child: u32 = who.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(allowed_cpus(m.pid()), "0");
    assert_eq!(
        allowed_cpus(child),
        "0",
        "the upstream inherits the CPU set"
    );
    assert_eq!(
        text_of(&m.call("alpha__echo", json!({"text": "pinned"}))),
        "pinned"
    );
}

#[test]
fn server_cpus_that_do_not_exist_stop_serve_with_a_clear_error() {
    let config = format!("[server]\ncpus = [1023]\n\n{}", named_fixture("alpha"));
    let mut m = Manifold::start(&config);
    assert_ne!(m.wait_exit(), Some(0));
    let err = m.stderr();
    assert!(err.contains("server.cpus") && err.contains("1023"), "{err}");
}

/// Runs `manifold serve` on `config`, initializes, then writes `calls` pipelined calls of
/// `tool` (ids 1..=calls) to its stdin at once and closes stdin right after them, and reads
/// stdout to its end. Returns every answer to a call, by id, and the exit code.
fn pipelined_then_closed(
    dir: &TempDir,
    config: &str,
    calls: usize,
    tool: &str,
) -> (
    std::collections::HashMap<u64, Vec<serde_json::Value>>,
    Option<i32>,
) {
    use std::io::{BufRead, BufReader, Write};
    let mut child = serve_piped(dir, config, "warn", std::process::Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (initialized, init_seen) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut answers: std::collections::HashMap<u64, Vec<serde_json::Value>> =
            Default::default();
        for line in stdout.lines() {
            let message: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            match message["id"].as_u64() {
                Some(id) => answers.entry(id).or_default().push(message),
                None => {
                    let _ = initialized.send(());
                }
            }
        }
        answers
    });
    stdin
        .write_all(
            concat!(
                r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                "\n"
            )
            .as_bytes(),
        )
        .unwrap();
    init_seen.recv_timeout(WAIT).expect("initialize answered");
    let mut text = String::from("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    for id in 1..=calls {
        text.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{\"text\":\"n{id}\",\"ms\":30000}}}}}}\n"
        ));
    }
    stdin.write_all(text.as_bytes()).unwrap();
    // The host closes its input right after its last request.
    drop(stdin);
    let answers = reader.join().unwrap();
    let code = child.wait().unwrap().code();
    (answers, code)
}

#[test]
fn every_request_read_before_the_host_closes_its_input_is_answered() {
    let dir = TempDir::new("eof");
    let (config, pid_files) = pid_config(&dir);
    let config = config.replace("shutdown_grace_ms = 300", "shutdown_grace_ms = 60000");
    let (answers, code) = pipelined_then_closed(&dir, &config, 20_000, "alpha__echo");
    assert_eq!(code, Some(0));
    assert_eq!(answers.len(), 20_000, "every call answered");
    for (id, got) in &answers {
        assert_eq!(got.len(), 1, "call {id} answered once: {got:?}");
        assert_eq!(text_of(&got[0]), format!("n{id}"), "{:?}", got[0]);
    }
    assert_all_gone(&pids_of(&pid_files));
}

#[test]
fn requests_the_upstream_does_not_answer_in_the_grace_time_get_one_clear_error() {
    let dir = TempDir::new("eof-slow");
    let (config, pid_files) = pid_config(&dir);
    // `sleep` answers after 30 s (ms = 30000): far past the 300 ms of grace.
    let (answers, code) = pipelined_then_closed(&dir, &config, 50, "alpha__sleep");
    assert_eq!(code, Some(0));
    assert_eq!(answers.len(), 50, "every call answered");
    for (id, got) in &answers {
        assert_eq!(got.len(), 1, "call {id} answered once: {got:?}");
        assert_eq!(error_code(&got[0]), -32010, "{:?}", got[0]);
        let message = got[0]["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("closed its input") && message.contains("shutdown_grace_ms"),
            "{message}"
        );
    }
    assert_all_gone(&pids_of(&pid_files));
}

#[test]
fn a_host_that_reads_slowly_is_paced_and_loses_nothing() {
    use std::io::{BufRead, BufReader, Write};
    // 1,000 answers of 16 KiB (16 MiB) to a host that reads nothing for a while: far past
    // twice the 4 MiB limit, which would end its session if Manifold kept reading.
    let config = format!(
        "[server]\nsession_queue_bytes = 4194304\n\n{}",
        named_fixture("alpha")
    );
    let dir = TempDir::new("paced");
    let mut child = serve_piped(&dir, &config, "warn", std::process::Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
    .unwrap();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"result\""), "{line}");
    let calls = 1000;
    let writer = std::thread::spawn(move || {
        let mut text = String::new();
        for id in 1..=calls {
            text.push_str(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"alpha__big\",\"arguments\":{{\"bytes\":16384}}}}}}\n"
            ));
        }
        stdin.write_all(text.as_bytes()).unwrap();
        stdin
    });
    // The host is busy elsewhere: Manifold must stop reading rather than give up on it.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "Manifold is still serving"
    );
    let mut answered = std::collections::HashSet::new();
    while answered.len() < calls {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "output ended early"
        );
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            text_of(&message).len(),
            16384,
            "{}",
            &line[..200.min(line.len())]
        );
        assert!(answered.insert(message["id"].as_u64().unwrap()));
    }
    drop(writer.join().unwrap());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// An `[upstreams.KEY]` section running `script` with `sh` (`$0` is `file`, a path of the
/// test's own), where `FIXTURE` stands for the fixture with `args`.
fn fixture_behind(key: &str, script: &str, file: &std::path::Path, args: &[&str]) -> String {
    let fixture: Vec<String> = std::iter::once(fixture_bin().to_owned())
        .chain(args.iter().map(|a| (*a).to_owned()))
        .collect();
    let command = script.replace("FIXTURE", &fixture.join(" "));
    format!(
        "[upstreams.{key}]\ncommand = \"sh\"\nargs = [\"-c\", {:?}, {:?}]\n",
        command,
        file.to_str().unwrap()
    )
}

/// What Manifold wrote to the fixture (copied by `tee` on the way), one message a line.
fn sent_to(file: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_session_era_upstream_is_probed_then_initialized() {
    let dir = TempDir::new("era");
    let wire = dir.path().join("wire.jsonl");
    let config = fixture_behind(
        "alpha",
        "tee \"$0\" | exec FIXTURE",
        &wire,
        &["--name", "alpha"],
    );
    let mut m = Manifold::ready(&config);
    assert_eq!(text_of(&m.call("alpha__echo", json!({"text": "hi"}))), "hi");
    let sent = sent_to(&wire);
    // The probe first, in the stateless era's revision, with its `_meta`; refused (-32601),
    // then the session era's handshake, and no `_meta` from then on.
    assert_eq!(sent[0]["method"], "server/discover");
    let meta = &sent[0]["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        meta["io.modelcontextprotocol/clientInfo"]["name"],
        "manifold"
    );
    assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
    assert_eq!(sent[1]["method"], "initialize");
    assert_eq!(sent[2]["method"], "notifications/initialized");
    assert!(sent[3..].iter().all(|s| s["params"]
        .get("_meta")
        .is_none_or(|m| m.get("io.modelcontextprotocol/protocolVersion").is_none())));
    let ready = m.logged_line(|l| l.contains("ready") && l.contains("upstream=alpha"));
    assert!(ready.contains("era=\"session\""), "{ready}");
}

#[test]
fn era_session_skips_the_probe() {
    let dir = TempDir::new("era");
    let wire = dir.path().join("wire.jsonl");
    let config = format!(
        "{}era = \"session\"\n",
        fixture_behind(
            "alpha",
            "tee \"$0\" | exec FIXTURE",
            &wire,
            &["--name", "alpha"]
        )
    );
    let mut m = Manifold::ready(&config);
    assert_eq!(text_of(&m.call("alpha__echo", json!({"text": "hi"}))), "hi");
    let sent = sent_to(&wire);
    assert_eq!(sent[0]["method"], "initialize");
    assert!(sent.iter().all(|s| s["method"] != "server/discover"));
}

#[test]
fn era_stateless_on_a_session_era_upstream_fails_with_the_reason() {
    let config = format!(
        "{}era = \"stateless\"\nrestart_initial_backoff_ms = 60000\nrestart_max_backoff_ms = 60000\n{}",
        named_fixture("alpha"),
        named_fixture("beta"),
    );
    let mut m = Manifold::ready(&config);
    let line = m.logged_line(|l| l.contains("handshake failed") && l.contains("alpha"));
    assert!(
        line.contains("does not speak the stateless era")
            && line.contains("era = \"stateless\" requires")
            && line.contains("-32601"),
        "{line}"
    );
    let r = m.call("beta__echo", json!({"text": "fine"}));
    assert_eq!(text_of(&r), "fine");
    let tools = m.all_tool_names();
    assert!(tools.iter().all(|t| t.starts_with("beta__")), "{tools:?}");
}

#[test]
fn a_child_that_exits_on_the_probe_is_started_again_with_initialize() {
    // The first process reads the probe and exits (as a server that dies on an unknown
    // first request does); the next one, started at once, gets no probe.
    let dir = TempDir::new("era");
    let marker = dir.path().join("started-once");
    let config = fixture_behind(
        "alpha",
        "if [ ! -e \"$0\" ]; then : > \"$0\"; head -n 1 > /dev/null; exit 3; fi; exec FIXTURE",
        &marker,
        &["--name", "alpha"],
    );
    let mut m = Manifold::ready(&config);
    eventually("alpha is back", || {
        m.call("alpha__echo", json!({"text": "x"}))
            .get("result")
            .is_some()
    });
    m.assert_logged("exited before answering the server/discover probe");
    let ready = m.logged_line(|l| l.contains("ready") && l.contains("upstream=alpha"));
    assert!(ready.contains("era=\"session\""), "{ready}");
    assert!(
        !m.stderr().contains("restarting in"),
        "no backoff:\n{}",
        m.stderr()
    );
}

#[test]
fn an_upstream_silent_on_the_probe_gets_initialize_after_the_probe_timeout() {
    // The probe waits at most the upstream's request timeout (here 1 s; 5 s at most): this
    // one swallows it unanswered, as some session-era servers do with a request before
    // initialize.
    let dir = TempDir::new("era");
    let wire = dir.path().join("wire.jsonl");
    let config = format!(
        "{}request_timeout_ms = 1000\n",
        fixture_behind(
            "alpha",
            "tee \"$0\" | { head -n 1 > /dev/null; exec FIXTURE; }",
            &wire,
            &["--name", "alpha"]
        )
    );
    let started = std::time::Instant::now();
    let mut m = Manifold::ready(&config);
    eventually("alpha is up", || {
        m.call("alpha__echo", json!({"text": "x"}))
            .get("result")
            .is_some()
    });
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    let ready = m.logged_line(|l| l.contains("ready") && l.contains("upstream=alpha"));
    assert!(ready.contains("era=\"session\""), "{ready}");
    m.assert_logged("no answer to server/discover within 1s");
    // The probe is forgotten, not cancelled: the upstream hears nothing before initialize.
    let sent = sent_to(&wire);
    assert_eq!(sent[0]["method"], "server/discover");
    assert_eq!(sent[1]["method"], "initialize", "{sent:?}");
}
