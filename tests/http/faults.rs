//! Faults under load: upstreams killed, stopped, failing over HTTP, and hosts that trickle
//! their requests, while other hosts go on calling. Each test asserts outcomes with generous
//! bounds (machines running the tests are often slow) and prints what it measured, prefixed
//! `figures:` (`cargo test -p manifold --test http faults -- --nocapture` shows them).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::metrics::series;
use manifold_testkit::process::*;

/// Durations, summarized as their count, median and maximum.
#[derive(Default)]
struct Figures(Vec<Duration>);

impl Figures {
    fn add(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn p50(&self) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }

    fn max(&self) -> Duration {
        self.0.iter().max().copied().unwrap_or_default()
    }

    fn show(&self) -> String {
        format!(
            "n={} p50={:.1}ms max={:.1}ms",
            self.0.len(),
            self.p50().as_secs_f64() * 1e3,
            self.max().as_secs_f64() * 1e3
        )
    }
}

/// One host's call and how it ended.
struct Call {
    upstream: &'static str,
    start: Instant,
    end: Instant,
    /// The JSON-RPC error code, if it failed.
    code: Option<i64>,
    message: String,
}

/// Hosts calling in a loop until stopped: `per_upstream` hosts for each `(upstream, tool,
/// arguments)`, each with a session of its own.
struct Load {
    stop: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<Call>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(
        server: &Server,
        per_upstream: usize,
        targets: &[(&'static str, &str, Value)],
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for (upstream, tool, args) in targets {
            for _ in 0..per_upstream {
                let mut host = server.ready_host();
                let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
                let (upstream, tool, args) =
                    (*upstream, format!("{upstream}__{tool}"), args.clone());
                threads.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        let answer = host.call(&tool, args.clone());
                        let end = Instant::now();
                        let code = answer["error"]["code"].as_i64();
                        let message = answer["error"]["message"].as_str().unwrap_or("").to_owned();
                        calls.lock().unwrap().push(Call {
                            upstream,
                            start,
                            end,
                            code,
                            message,
                        });
                    }
                }));
            }
        }
        Load {
            stop,
            calls,
            threads,
        }
    }

    fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

/// The admin address's entry for `upstream` in `/readyz`.
fn upstream_state(c: &reqwest::blocking::Client, admin: &str, upstream: &str) -> Value {
    let body: Value = c.get(admin).send().unwrap().json().unwrap();
    body["upstreams"][upstream].clone()
}

/// kill -9 of a stdio upstream while 16 hosts call it and another upstream, ten times: every
/// call in flight to it is answered with -32010 naming it as soon as it dies, the other
/// upstream's calls all succeed, it is back quickly, and no process is left behind.
#[test]
fn a_stdio_upstream_killed_mid_call_fails_only_its_calls_at_once() {
    const KILLS: usize = 10;
    let dir = TempDir::new("kill9");
    let pids = dir.path().join("victim.pids");
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}restart_max_backoff_ms = 250\n\n{}",
        fixture_upstream(
            "victim",
            &["--name", "victim", "--pid-file", pids.to_str().unwrap()]
        ),
        named_fixture("steady"),
    );
    let server = Server::start_with(&config, "info", &[], "127.0.0.1");
    let admin = server.admin_url("/readyz");
    let c = client();
    eventually("both upstreams up", || {
        c.get(&admin).send().unwrap().status() == StatusCode::OK
            && upstream_state(&c, &admin, "victim")["state"] == "up"
            && upstream_state(&c, &admin, "steady")["state"] == "up"
    });
    let load = Load::start(
        &server,
        8,
        &[
            ("victim", "sleep", json!({"ms": 300})),
            ("steady", "echo", json!({"text": "hi"})),
        ],
    );
    let mut kills = Vec::new();
    let mut restarts = Figures::default();
    let mut killed = Vec::new();
    for _ in 0..KILLS {
        // Calls of 300 ms are in flight by now.
        std::thread::sleep(Duration::from_millis(200));
        let pid = *read_pids(&pids).last().unwrap();
        let at = Instant::now();
        send_signal(pid, "KILL");
        kills.push(at);
        killed.push(pid);
        let back = poll_for(WAIT, || {
            read_pids(&pids).last() != Some(&pid)
                && upstream_state(&c, &admin, "victim")["state"] == "up"
        });
        restarts.add(back.expect("the killed upstream came back"));
        eventually("the killed process is reaped", || !process_alive(pid));
    }
    let calls = load.finish();

    // A victim call in flight at a death: started before it, answered after it.
    let mut answered_after_death = Figures::default();
    let (mut in_flight_ok, mut victim_errors, mut steady_errors, mut steady_ok) = (0, 0, 0, 0);
    for call in &calls {
        match call.upstream {
            "steady" => match call.code {
                None => steady_ok += 1,
                Some(_) => steady_errors += 1,
            },
            _ => {
                victim_errors += usize::from(call.code.is_some());
                let death = kills.iter().rev().find(|k| **k <= call.end).copied();
                if let Some(death) = death.filter(|d| call.start < *d) {
                    match call.code {
                        Some(code) => {
                            assert_eq!(code, -32010, "{}", call.message);
                            assert!(call.message.contains("\"victim\""), "{}", call.message);
                            answered_after_death.add(call.end - death);
                        }
                        None => in_flight_ok += 1,
                    }
                }
            }
        }
    }
    // Every process but the live one is gone; Manifold has no other child.
    let children = children(server.child.id());
    let leaked: Vec<_> = killed.iter().filter(|p| process_alive(**p)).collect();
    println!(
        "figures: kill -9 x{KILLS} under 16 hosts: in-flight calls of the killed upstream answered after its death {} (answered before it died: {in_flight_ok}); its restart (kill to serving) {}; other upstream {steady_ok} ok / {steady_errors} errors; killed upstream errors {victim_errors} of {}; Manifold's children {children:?}; leaked {}",
        answered_after_death.show(),
        restarts.show(),
        calls.iter().filter(|c| c.upstream == "victim").count(),
        leaked.len(),
    );
    assert!(
        answered_after_death.0.len() >= KILLS,
        "calls were in flight at each death"
    );
    // Generous: the failure is immediate (the reader sees the pipe close); slow VMs vary.
    assert!(
        answered_after_death.max() < Duration::from_secs(2),
        "{}",
        answered_after_death.show()
    );
    assert!(
        restarts.max() < Duration::from_secs(10),
        "{}",
        restarts.show()
    );
    assert_eq!(steady_errors, 0, "the other upstream is unaffected");
    assert!(steady_ok > 0);
    assert!(leaked.is_empty(), "killed processes left: {leaked:?}");
    assert_eq!(children.len(), 2, "one process per upstream: {children:?}");
    assert!(
        children.iter().all(|(_, state)| *state != 'Z'),
        "{children:?}"
    );
}

/// Health settings that find a stopped upstream quickly.
const QUICK_HEALTH: &str = "health_interval = \"100ms\"\nhealth_timeout = \"200ms\"\nbreaker_failures = 3\nbreaker_cooldown = \"300ms\"\n";

/// SIGSTOP: no call is in flight, yet pings find it; its breaker opens, calls to it are
/// refused at once (-32017) while the other upstream serves, `/readyz` fails (it is
/// required); after SIGCONT the half-open probe closes the breaker and calls pass again.
#[test]
fn a_stopped_upstream_opens_its_breaker_and_a_probe_closes_it_after_it_continues() {
    let dir = TempDir::new("sigstop");
    let pids = dir.path().join("victim.pids");
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}{QUICK_HEALTH}restart_after = \"0s\"\nrequired = true\n\n{}",
        fixture_upstream("victim", &["--name", "victim", "--pid-file", pids.to_str().unwrap()]),
        named_fixture("steady"),
    );
    let server = Server::start_with(&config, "info", &[], "127.0.0.1");
    let admin = server.admin_url("/readyz");
    let c = client();
    eventually("ready", || {
        c.get(&admin).send().unwrap().status() == StatusCode::OK
    });
    let mut host = server.ready_host();
    assert!(host.call("victim__echo", json!({"text": "a"}))["result"].is_object());
    let pid = *read_pids(&pids).last().unwrap();

    send_signal(pid, "STOP");
    let stopped = Instant::now();
    let detected = poll_for(WAIT, || {
        upstream_state(&c, &admin, "victim")["breaker"]["state"] == "open"
    })
    .expect("the breaker opens");
    let r = c.get(&admin).send().unwrap();
    assert_eq!(
        r.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a required upstream's breaker is open"
    );
    let body: Value = r.json().unwrap();
    assert_eq!(body["breakers_open"]["required"], 1, "{body}");
    let breaker = &body["upstreams"]["victim"]["breaker"];
    assert!(
        breaker["reason"].as_str().unwrap().contains("ping"),
        "{body}"
    );

    let mut refused = Figures::default();
    for _ in 0..20 {
        let start = Instant::now();
        let answer = host.call("victim__echo", json!({"text": "b"}));
        refused.add(start.elapsed());
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(code(&answer), -32017, "{answer}");
        assert!(
            message.contains("\"victim\"") && message.contains("refused"),
            "{message}"
        );
        assert_eq!(answer["error"]["data"]["upstream"], "victim");
        assert!(answer["error"]["data"]["retryAfterMs"].is_u64(), "{answer}");
        let other = host.call("steady__echo", json!({"text": "c"}));
        assert!(other["result"].is_object(), "{other}");
    }
    let text = server.scrape();
    let state = series(
        &text,
        "manifold_upstream_breaker_state{upstream=\"victim\"}",
    );
    assert!(
        matches!(state, Some(s) if s >= 1.0),
        "not closed: {state:?}"
    );
    assert_eq!(
        series(
            &text,
            "manifold_upstream_breaker_state{upstream=\"steady\"}"
        ),
        Some(0.0)
    );

    send_signal(pid, "CONT");
    let continued = Instant::now();
    let closed = poll_for(WAIT, || {
        upstream_state(&c, &admin, "victim")["breaker"]["state"] == "closed"
    })
    .expect("the probe closes the breaker");
    assert!(host.call("victim__echo", json!({"text": "d"}))["result"].is_object());
    assert_eq!(c.get(&admin).send().unwrap().status(), StatusCode::OK);
    assert_eq!(
        read_pids(&pids),
        [pid],
        "not restarted (restart_after = 0s)"
    );
    let text = server.scrape();
    let entered = |state: &str| {
        let labels = format!("upstream=\"victim\",state=\"{state}\"");
        series(
            &text,
            &format!("manifold_upstream_breaker_transitions_total{{{labels}}}"),
        )
        .unwrap_or(0.0)
    };
    assert!(entered("open") >= 1.0 && entered("half_open") >= 1.0 && entered("closed") >= 1.0);
    let timeouts = series(
        &text,
        "manifold_upstream_health_checks_total{upstream=\"victim\",outcome=\"timeout\"}",
    );
    assert!(timeouts.unwrap_or(0.0) >= 3.0, "{timeouts:?}");
    let rejected = series(
        &text,
        "manifold_upstream_breaker_rejections_total{upstream=\"victim\"}",
    );
    assert!(rejected.unwrap_or(0.0) >= 20.0, "{rejected:?}");
    println!(
        "figures: SIGSTOP: breaker open {:.0}ms after the stop (100ms pings, 200ms timeout, 3 failures); refused calls {}; SIGCONT to closed {:.0}ms (cooldown 300ms); stopped for {:.0}ms",
        detected.as_secs_f64() * 1e3,
        refused.show(),
        closed.as_secs_f64() * 1e3,
        (continued - stopped).as_secs_f64() * 1e3,
    );
    assert!(
        refused.max() < Duration::from_secs(2),
        "refused at once: {}",
        refused.show()
    );
}

/// An upstream whose breaker stays open past `restart_after` is restarted: the stopped child
/// is killed (and reaped), a new one serves, and its breaker is closed.
#[test]
fn an_upstream_that_stays_stopped_is_restarted_after_restart_after() {
    let dir = TempDir::new("restart-after");
    let pids = dir.path().join("victim.pids");
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}{QUICK_HEALTH}restart_after = \"1s\"\n",
        fixture_upstream(
            "victim",
            &["--name", "victim", "--pid-file", pids.to_str().unwrap()]
        ),
    );
    let server = Server::start_with(&config, "info", &[], "127.0.0.1");
    let admin = server.admin_url("/readyz");
    let c = client();
    // Up first: a child stopped during its handshake fails at the request deadline instead.
    eventually("up", || {
        upstream_state(&c, &admin, "victim")["state"] == "up"
    });
    let pid = *read_pids(&pids).last().unwrap();
    send_signal(pid, "STOP");
    let back = poll_for(WAIT, || {
        read_pids(&pids).len() == 2
            && upstream_state(&c, &admin, "victim")["state"] == "up"
            && upstream_state(&c, &admin, "victim")["breaker"]["state"] == "closed"
    })
    .unwrap_or_else(|| panic!("restarted; log:\n{}", server.stderr()));
    eventually("the stopped process is gone", || !process_alive(pid));
    let mut host = server.ready_host();
    assert!(host.call("victim__echo", json!({"text": "a"}))["result"].is_object());
    assert!(
        server.stderr().contains("restart_after"),
        "{}",
        server.stderr()
    );
    println!(
        "figures: SIGSTOP with restart_after = 1s: serving again with a new process {:.0}ms after the stop",
        back.as_secs_f64() * 1e3
    );
}

/// An HTTP upstream that turns faulty (`mode`, see the fixture's `--faults`) while 8 hosts
/// call it and 8 others call a stdio upstream; then it heals.
fn http_upstream_fault(mode: &str) {
    let fixture = FixtureHttp::start(0, &["--name", "remote", "--faults"]);
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n[upstreams.remote]\nurl = {:?}\nrequest_timeout_ms = 1000\nrestart_max_backoff_ms = 500\n{QUICK_HEALTH}restart_after = \"0s\"\n\n{}",
        fixture.url("/mcp"),
        named_fixture("steady"),
    );
    let server = Server::start_with(&config, "info", &[], "127.0.0.1");
    let admin = server.admin_url("/readyz");
    let c = client();
    eventually("ready", || {
        c.get(&admin).send().unwrap().status() == StatusCode::OK
            && upstream_state(&c, &admin, "remote")["state"] == "up"
    });
    let load = Load::start(
        &server,
        8,
        &[
            ("remote", "echo", json!({"text": "r"})),
            ("steady", "echo", json!({"text": "s"})),
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    let switch = |mode: &str| {
        let r = c
            .post(fixture.url(&format!("/fault?mode={mode}")))
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    };
    switch(mode);
    let faulty = Instant::now();
    // Refused at once: by the breaker (-32017), or as down while it restarts (-32010).
    let refusing = poll_for(Duration::from_secs(10), || {
        let state = upstream_state(&c, &admin, "remote");
        state["breaker"]["state"] == "open" || state["state"] != "up"
    });
    std::thread::sleep(Duration::from_millis(1000));
    switch("none");
    let healed = Instant::now();
    let mut host = server.ready_host();
    let recovered = poll_for(WAIT, || {
        host.call("remote__echo", json!({"text": "h"}))["result"].is_object()
    })
    .expect("calls pass again once it heals");
    std::thread::sleep(Duration::from_millis(200));
    let calls = load.finish();

    let (mut steady_ok, mut steady_errors) = (0, 0);
    let (mut fast, mut first_failures) = (Figures::default(), Figures::default());
    let mut codes = std::collections::BTreeMap::new();
    for call in &calls {
        if call.upstream == "steady" {
            match call.code {
                None => steady_ok += 1,
                Some(_) => steady_errors += 1,
            }
            continue;
        }
        let Some(code) = call.code else { continue };
        *codes.entry(code).or_insert(0) += 1;
        assert!(call.message.contains("\"remote\""), "{}", call.message);
        if call.start >= faulty && call.end <= healed {
            let took = call.end - call.start;
            match code {
                -32017 | -32010 if refusing.is_some_and(|r| call.start >= faulty + r) => {
                    fast.add(took)
                }
                _ => first_failures.add(took),
            }
        }
    }
    println!(
        "figures: HTTP upstream fault {mode} under 16 hosts: refusing {:.0}ms after the fault; calls before that {}; calls refused at once after {}; error codes {codes:?}; healed to calls passing {:.0}ms; other upstream {steady_ok} ok / {steady_errors} errors",
        refusing.unwrap_or_default().as_secs_f64() * 1e3,
        first_failures.show(),
        fast.show(),
        recovered.as_secs_f64() * 1e3,
    );
    assert!(
        refusing.is_some(),
        "the faulty upstream is refused at once within 10 s"
    );
    assert!(!fast.0.is_empty());
    assert!(
        fast.p50() < Duration::from_millis(500),
        "refused at once: {}",
        fast.show()
    );
    assert!(
        codes.keys().all(|c| [-32010, -32011, -32017].contains(c)),
        "{codes:?}"
    );
    // Its breaker opened: calls were refused without being sent.
    assert!(codes.get(&-32017).is_some_and(|n| *n > 0), "{codes:?}");
    assert_eq!(steady_errors, 0, "the other upstream is unaffected");
    assert!(steady_ok > 0);
}

#[test]
fn an_http_upstream_answering_500_is_refused_at_once_until_it_heals() {
    http_upstream_fault("status500");
}

#[test]
fn an_http_upstream_dropping_connections_is_refused_at_once_until_it_heals() {
    http_upstream_fault("reset");
}

#[test]
fn an_http_upstream_stalling_its_streams_is_refused_at_once_until_it_heals() {
    http_upstream_fault("stall");
}

/// Reads from `stream` until the server closes it (or `limit` passes); returns what came and
/// when it closed.
fn until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => {
                return (
                    String::from_utf8_lossy(&got).into_owned(),
                    Some(start.elapsed()),
                )
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                return (
                    String::from_utf8_lossy(&got).into_owned(),
                    Some(start.elapsed()),
                )
            }
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), None)
}

/// Slow-loris hosts: a head trickled, a body trickled, a connection left idle. Each is cut
/// off by `server.client_timeout` or `server.keep_alive`, while another host's calls pass.
#[test]
fn hosts_that_trickle_or_idle_are_cut_off_while_others_are_served() {
    let config = format!(
        "[server]\nclient_timeout = \"1s\"\nkeep_alive = \"2s\"\n\n{}",
        named_fixture("steady"),
    );
    let server = Server::start(&config);
    let addr = format!("127.0.0.1:{}", server.port);
    eventually("listening", || {
        client()
            .get(server.url("/healthz"))
            .send()
            .is_ok_and(|r| r.status() == StatusCode::OK)
    });
    let stop = Arc::new(AtomicBool::new(false));
    // Each kind, 20 connections at once.
    let trickle_head = |addr: String, stop: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            let start = Instant::now();
            for b in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                .iter()
                .chain(b"a".repeat(1000).iter())
            {
                if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                if start.elapsed() > Duration::from_secs(8) {
                    break;
                }
            }
            let (text, closed) = until_closed(&mut s, Duration::from_secs(8));
            (closed.map(|_| start.elapsed()), text)
        })
    };
    let trickle_body = |addr: String, stop: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n";
            s.write_all(head.as_bytes()).unwrap();
            let start = Instant::now();
            for _ in 0..80 {
                if stop.load(Ordering::Relaxed) || s.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let (text, closed) = until_closed(&mut s, Duration::from_secs(8));
            (closed.map(|_| start.elapsed()), text)
        })
    };
    let idle = |addr: String| {
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .unwrap();
            let start = Instant::now();
            let (text, closed) = until_closed(&mut s, Duration::from_secs(10));
            (closed.map(|_| start.elapsed()), text)
        })
    };
    let mut heads = Vec::new();
    let mut bodies = Vec::new();
    let mut idles = Vec::new();
    for _ in 0..20 {
        heads.push(trickle_head(addr.clone(), Arc::clone(&stop)));
        bodies.push(trickle_body(addr.clone(), Arc::clone(&stop)));
        idles.push(idle(addr.clone()));
    }
    // Meanwhile another host calls as usual.
    let mut host = server.ready_host();
    let mut served = Figures::default();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let start = Instant::now();
        assert!(host.call("steady__echo", json!({"text": "x"}))["result"].is_object());
        served.add(start.elapsed());
    }
    let results = |threads: Vec<std::thread::JoinHandle<(Option<Duration>, String)>>| {
        let mut f = Figures::default();
        let mut statuses = std::collections::BTreeSet::new();
        for t in threads {
            let (closed, text) = t.join().unwrap();
            statuses.insert(text.lines().next().unwrap_or("(nothing)").to_owned());
            f.add(closed.expect("the server closed the connection"));
        }
        (f, statuses)
    };
    let (head, head_status) = results(heads);
    let (body, body_status) = results(bodies);
    let (idle, idle_status) = results(idles);
    stop.store(true, Ordering::Relaxed);
    println!(
        "figures: slow-loris x20 each (client_timeout 1s, keep_alive 2s): trickled head closed after {} {head_status:?}; trickled body closed after {} {body_status:?}; idle keep-alive closed after {} {idle_status:?}; another host's calls meanwhile {}",
        head.show(),
        body.show(),
        idle.show(),
        served.show(),
    );
    for (what, f) in [("head", &head), ("body", &body)] {
        assert!(f.max() < Duration::from_secs(6), "{what}: {}", f.show());
    }
    assert!(idle.max() < Duration::from_secs(8), "idle: {}", idle.show());
    assert!(
        body_status.iter().all(|s| s.contains("408")),
        "{body_status:?}"
    );
    assert!(served.0.len() > 10, "{}", served.show());
}

/// Pings reach upstreams of both eras (`server/discover` stands for `ping` in the stateless
/// one) over stdio and HTTP, and are counted and timed.
#[test]
fn every_upstream_is_pinged_in_its_own_era() {
    let remote = FixtureHttp::start(0, &["--name", "remote", "--era", "stateless"]);
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}health_interval = \"50ms\"\n\n{}health_interval = \"50ms\"\n\n[upstreams.remote]\nurl = {:?}\nhealth_interval = \"50ms\"\n\n{}health_interval = \"0s\"\n",
        named_fixture("session"),
        fixture_upstream("stateless", &["--name", "stateless", "--era", "stateless"]),
        remote.url("/mcp"),
        named_fixture("unwatched"),
    );
    let server = Server::start(&config);
    let checks = |upstream: &str, outcome: &str| {
        let text = server.scrape();
        let labels = format!("upstream=\"{upstream}\",outcome=\"{outcome}\"");
        series(
            &text,
            &format!("manifold_upstream_health_checks_total{{{labels}}}"),
        )
        .unwrap_or(0.0)
    };
    for upstream in ["session", "stateless", "remote"] {
        eventually(&format!("{upstream} answers pings"), || {
            checks(upstream, "ok") >= 3.0
        });
        assert_eq!(checks(upstream, "timeout") + checks(upstream, "error"), 0.0);
    }
    assert_eq!(
        checks("unwatched", "ok"),
        0.0,
        "health_interval = 0s: no pings"
    );
    let text = server.scrape();
    let answered = series(
        &text,
        "manifold_upstream_ping_duration_seconds_count{upstream=\"stateless\"}",
    );
    assert!(answered.unwrap_or(0.0) >= 3.0, "{answered:?}");
}
