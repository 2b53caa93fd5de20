//! Many sessions at once: limits, expiry, and hosts that misbehave without hurting the others.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

#[test]
fn idle_sessions_expire_and_free_their_place() {
    let server = Server::start(&format!(
        "[server]\nsession_idle_timeout_ms = 400\nmax_sessions = 2\n\n{}",
        named_fixture("alpha")
    ));
    let mut a = server.ready_host();
    let _b = server.ready_host();
    let mut c = server.host();
    let r = c.initialize("2025-06-18");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "5");
    // A session in use does not expire: a long call keeps it busy past the idle time.
    let r = a.call("alpha__sleep", json!({"ms": 700}));
    assert!(r.get("result").is_some(), "{r}");
    std::thread::sleep(Duration::from_millis(1200));
    let r = a
        .post_raw(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "idle past its time: gone"
    );
    let mut d = server.host();
    assert_eq!(
        d.initialize("2025-06-18").status(),
        StatusCode::OK,
        "places were freed"
    );
    eventually("the idle sessions' end is logged", || {
        server.stderr().contains("idle for more than")
    });
}

#[test]
fn a_thousand_hosts_share_one_upstream_process() {
    let dir = TempDir::new("thousand");
    let pids = dir.path().join("pids");
    let server = Server::start(&fixture_upstream(
        "alpha",
        &["--name", "alpha", "--pid-file", pids.to_str().unwrap()],
    ));
    let started = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let url = server.url("/mcp");
            std::thread::spawn(move || {
                let mut hosts = Vec::new();
                for i in 0..63 {
                    let mut host = Host {
                        client: client(),
                        url: url.clone(),
                        session: None,
                        next_id: 1,
                    };
                    assert_eq!(host.initialize("2025-06-18").status(), StatusCode::OK);
                    let text = format!("{t}-{i}");
                    assert_eq!(
                        text_of(&host.call("alpha__echo", json!({"text": text}))),
                        text
                    );
                    hosts.push(host);
                }
                // Every session is still open and still answers.
                for host in &mut hosts {
                    assert_eq!(host.request("ping", json!({}))["result"], json!({}));
                }
                hosts.len()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 1008);
    assert!(started.elapsed() < Duration::from_secs(120));
    assert_eq!(read_pids(&pids).len(), 1, "one shared upstream process");
}

#[test]
fn a_host_that_stops_reading_is_ended_and_the_others_go_on() {
    let server = Server::start(&format!(
        "[server]\nsession_queue_bytes = 1048576\n\n{}",
        named_fixture("alpha")
    ));
    let slow = server.ready_host();
    let token = slow.session.clone().unwrap();
    // The slow host opens its stream and never reads from it.
    let mut stuck = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        stuck,
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {token}\r\n\r\n"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Another host makes the shared upstream log a lot: every session hears it.
    let mut busy = server.ready_host();
    let message = "m".repeat(20_000);
    let started = Instant::now();
    for i in 0..400 {
        let r = busy.call("alpha__log", json!({"message": message}));
        assert_eq!(text_of(&r), "logged", "call {i}: {r}");
    }
    assert!(started.elapsed() < WAIT, "the busy host was held up");
    eventually("the stuck session is ended", || {
        server.stderr().contains("not reading its streams")
    });
    let r = slow
        .post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        text_of(&busy.call("alpha__echo", json!({"text": "fine"}))),
        "fine"
    );
    drop(stuck);
}

#[test]
fn listening_beyond_loopback_must_be_asked_for() {
    let dir = TempDir::new("remote");
    let path = dir.write("m.toml", &named_fixture("alpha"));
    let args = [
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ];
    let (code, _, err) = run_manifold(&args, &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("allow_remote") && err.contains("no authentication"),
        "{err}"
    );
}
