//! Configuration reload (`POST /reload` on the admin address, `server.watch_config`): what
//! changed takes effect and nothing else, sessions stay, calls in flight finish, a broken file
//! is refused with the running configuration serving on; and calls that a reload does not
//! concern never fail while reloads of every kind happen under steady load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const HEAD: &str = "[server]\nadmin = \"127.0.0.1:0\"\nsse_keepalive_ms = 200\n\n";
const RED_KEY: &str = "reload-red-key-0123456789abcdef";
const BLUE_KEY: &str = "reload-blue-key-0123456789abcdef";
const LOAD_KEY: &str = "reload-load-key-0123456789abcdef";

fn config(upstreams: &[(&str, &[&str])], extra: &str) -> String {
    let mut text = HEAD.to_owned();
    for (key, args) in upstreams {
        let mut all = vec!["--name", key];
        all.extend_from_slice(args);
        text.push_str(&fixture_upstream(key, &all));
        text.push('\n');
    }
    text.push_str(extra);
    text
}

/// The fixture's pid behind `tool` (its `whoami`: "NAME PID").
fn pid_of(host: &mut Host, upstream: &str) -> u32 {
    let r = host.call(&format!("{upstream}__whoami"), json!({}));
    text_of(&r).rsplit(' ').next().unwrap().parse().unwrap()
}

/// The messages of `host`'s GET stream, as they arrive.
fn notifications(host: &Host) -> mpsc::Receiver<Value> {
    let mut events = Events::attached(host);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Some((_, m)) = events.next_message() {
            if tx.send(m).is_err() {
                return;
            }
        }
    });
    rx
}

/// Whether `method` arrives on `rx` within `wait`.
fn hears(rx: &mpsc::Receiver<Value>, method: &str, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(m) if m["method"] == method => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn upstreams_are_added_removed_restarted_and_updated_while_sessions_go_on() {
    let before = config(&[("alpha", &[]), ("beta", &[]), ("gamma", &[])], "");
    let server = Server::start(&before);
    let mut host = server.ready_host();
    let heard = notifications(&host);
    let (alpha, beta, gamma) = (
        pid_of(&mut host, "alpha"),
        pid_of(&mut host, "beta"),
        pid_of(&mut host, "gamma"),
    );
    // beta goes, delta comes, gamma gets new arguments, alpha a filter (in place).
    let after = config(
        &[("alpha", &[]), ("gamma", &["--no-prompts"]), ("delta", &[])],
        "[upstreams.alpha.tools]\nexclude = [\"crash\"]\n",
    );
    let (status, report) = server.reload(&after);
    assert_eq!(status, StatusCode::OK, "{report}\n{}", server.stderr());
    assert_eq!(report["upstreams"]["added"], json!(["delta"]), "{report}");
    assert_eq!(report["upstreams"]["removed"], json!(["beta"]), "{report}");
    assert_eq!(
        report["upstreams"]["restarted"],
        json!(["gamma"]),
        "{report}"
    );
    assert_eq!(report["upstreams"]["updated"], json!(["alpha"]), "{report}");
    assert!(hears(
        &heard,
        "notifications/tools/list_changed",
        Duration::from_secs(10)
    ));
    // The same session goes on, with the new catalog.
    eventually("delta's tools are listed and beta's gone", || {
        let names = host.tool_names();
        names.contains(&"delta__echo".to_owned())
            && !names.iter().any(|n| n.starts_with("beta__"))
            && !names.contains(&"alpha__crash".to_owned())
    });
    assert_eq!(
        pid_of(&mut host, "alpha"),
        alpha,
        "an unchanged upstream keeps its process"
    );
    eventually("gamma runs a new process", || {
        pid_of(&mut host, "gamma") != gamma
    });
    eventually("beta's process is gone", || !process_alive(beta));
    let r = host.call("beta__echo", json!({"text": "x"}));
    assert!(
        r["error"].is_object() || r["result"]["isError"] == true,
        "{r}"
    );
    let readyz: Value = client()
        .get(server.admin_url("/readyz"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        readyz["total"], 3,
        "a removed upstream is not counted: {readyz}"
    );
}

#[test]
fn calls_in_flight_finish_on_removed_and_restarted_upstreams() {
    let before = config(&[("alpha", &[]), ("beta", &[]), ("gamma", &[])], "");
    let server = Server::start(&before);
    let calls: Vec<_> = ["beta", "gamma"]
        .into_iter()
        .map(|up| {
            let mut host = server.ready_host();
            std::thread::spawn(move || host.call(&format!("{up}__sleep"), json!({"ms": 1500})))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let after = config(&[("alpha", &[]), ("gamma", &["--no-prompts"])], "");
    let (status, report) = server.reload(&after);
    assert_eq!(status, StatusCode::OK, "{report}");
    for call in calls {
        let r = call.join().unwrap();
        assert!(
            r["result"].is_object() && r["result"]["isError"] != true,
            "{r}"
        );
    }
}

#[test]
fn a_broken_file_is_refused_and_the_running_configuration_stays() {
    let before = config(&[("alpha", &[])], "");
    let server = Server::start(&before);
    let mut host = server.ready_host();
    for (broken, says) in [
        ("[upstreams.alpha\n", "TOML syntax error"),
        ("[upstreams.alpha]\ncommand = \"x\"\nbogus = 1\n", "bogus"),
        (
            &*config(
                &[("alpha", &[]), ("beta", &[])],
                "[upstreams.beta]\nprefix = \"alpha\"\n",
            ),
            "",
        ),
    ] {
        let (status, answer) = server.reload(broken);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["reloaded"], false, "{answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains("manifold.toml") && error.contains(says),
            "{error}"
        );
        assert_eq!(
            text_of(&host.call("alpha__echo", json!({"text": "on"}))),
            "on"
        );
    }
    assert!(server.stderr().contains("the running configuration stays"));
    // The command line asks the same way and exits non-zero on a refusal.
    let admin = server.admin_url("");
    let addr = admin.trim_start_matches("http://");
    let (code, out, _) = run_manifold(&["reload", "--admin", addr], &[]);
    assert_ne!(code, 0);
    assert!(out.contains("\"reloaded\":false"));
    std::fs::write(server.config_path(), &before).unwrap();
    let (code, out, _) = run_manifold(&["reload", "--admin", addr], &[]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn keys_views_and_limits_follow_a_reload_and_quotas_keep_their_counts() {
    let teams = |red_tools: &str, blue_key: &str| {
        format!(
            "[teams.red]\napi_keys = [\"{RED_KEY}\"]\ntools = {{ include = [{red_tools}] }}\n\
             tool_limits = {{ alpha__echo = {{ quota = \"3/hour\" }} }}\n\n\
             [teams.blue]\napi_keys = [\"{blue_key}\"]\n"
        )
    };
    let before = config(
        &[("alpha", &[])],
        &teams("\"alpha__echo\"", "old-blue-key-0123456789abcdef"),
    );
    let server = Server::start(&before);
    let mut red = server.ready_host_using(client_with(&Cred::bearer(RED_KEY)));
    let red_heard = notifications(&red);
    let blue = server.ready_host_using(client_with(&Cred::bearer("old-blue-key-0123456789abcdef")));
    let blue_heard = notifications(&blue);
    assert_eq!(red.tool_names(), ["alpha__echo"]);
    for _ in 0..2 {
        assert_eq!(text_of(&red.call("alpha__echo", json!({"text": "a"}))), "a");
    }
    // Red sees one more tool; blue's key is replaced; red's quota is unchanged.
    let after = config(
        &[("alpha", &[])],
        &teams("\"alpha__echo\", \"alpha__add\"", BLUE_KEY),
    );
    let (status, report) = server.reload(&after);
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["teams"], true, "{report}");
    assert!(hears(
        &red_heard,
        "notifications/tools/list_changed",
        Duration::from_secs(10)
    ));
    assert!(!hears(
        &blue_heard,
        "notifications/tools/list_changed",
        Duration::from_millis(700)
    ));
    assert_eq!(red.tool_names(), ["alpha__echo", "alpha__add"]);
    // The quota counted two calls before the reload: one more passes.
    assert_eq!(text_of(&red.call("alpha__echo", json!({"text": "b"}))), "b");
    let refused = red.call("alpha__echo", json!({"text": "c"}));
    assert_eq!(code(&refused), -32015, "the quota refuses: {refused}");
    // The old key opens nothing any more; the new one does.
    let r = blue
        .post_raw(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let mut blue = server.ready_host_using(client_with(&Cred::bearer(BLUE_KEY)));
    assert_eq!(
        text_of(&blue.call("alpha__echo", json!({"text": "x"}))),
        "x"
    );
}

#[test]
fn a_watched_file_is_loaded_again_when_it_changes() {
    let head = "[server]\nwatch_config = true\n\n";
    let before = format!("{head}{}", named_fixture("alpha"));
    let server = Server::start(&before);
    let mut host = server.ready_host();
    let after = format!("{before}\n{}", named_fixture("beta"));
    std::fs::write(server.config_path(), after).unwrap();
    eventually("beta is served", || {
        host.tool_names().contains(&"beta__echo".to_owned())
    });
    assert!(server
        .stderr()
        .contains("configuration reloaded (file change)"));
    // A broken write is refused, and alpha and beta serve on.
    std::fs::write(server.config_path(), "[upstreams.alpha\n").unwrap();
    eventually("the refusal is logged", || {
        server.stderr().contains("reload refused (file change)")
    });
    assert_eq!(
        text_of(&host.call("beta__echo", json!({"text": "on"}))),
        "on"
    );
}

/// Calls every `pace` to each of `tools` from `hosts` hosts until `stop`; counts answers and
/// failures per tool.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Per tool: (answered, failed).
    counts: Arc<Vec<(String, AtomicU64, AtomicU64)>>,
}

impl Load {
    fn start(server: &Server, hosts: usize, tools: &[&str], key: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<Vec<_>> = Arc::new(
            tools
                .iter()
                .map(|t| ((*t).to_owned(), AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        );
        let threads = (0..hosts)
            .map(|i| {
                let mut host = server.ready_host_using(client_with(&Cred::bearer(key)));
                let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
                std::thread::spawn(move || {
                    let mut n = i;
                    while !stop.load(Ordering::Relaxed) {
                        let (tool, answered, failed) = &counts[n % counts.len()];
                        n += 1;
                        let r = host.call(tool, json!({"text": "load"}));
                        let ok = text_of(&r) == "load";
                        let counter = if ok { answered } else { failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Load {
            stop,
            threads,
            counts,
        }
    }

    fn finish(self) -> Vec<(String, u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.counts
            .iter()
            .map(|(t, a, f)| {
                (
                    t.clone(),
                    a.load(Ordering::Relaxed),
                    f.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

#[test]
fn reloads_of_every_kind_under_load_fail_no_call_they_do_not_concern() {
    let teams = |extra: &str| {
        format!(
            "[teams.load]\napi_keys = [\"{LOAD_KEY}\"]\n\n[teams.red]\napi_keys = [\"{RED_KEY}\"]\n{extra}\n\n\
             [limits.tools.alpha__add]\nrate = \"100/s\"\n"
        )
    };
    let steps: Vec<(&str, String)> = vec![
        ("added", config(&[("alpha", &[]), ("beta", &[]), ("gamma", &[])], &teams(""))),
        ("restarted", config(&[("alpha", &[]), ("beta", &["--no-prompts"]), ("gamma", &[])], &teams(""))),
        ("removed", config(&[("alpha", &[]), ("beta", &["--no-prompts"])], &teams(""))),
        (
            "updated",
            config(&[("alpha", &[]), ("beta", &["--no-prompts"])], &format!("{}[upstreams.beta.tools]\nexclude = [\"crash\"]\n", teams(""))),
        ),
        ("teams", config(&[("alpha", &[]), ("beta", &["--no-prompts"])], &teams("tools = { exclude = [\"beta__*\"] }"))),
        ("limits and cache", config(&[("alpha", &[]), ("beta", &["--no-prompts"])], &format!("{}[limits.tools.alpha__sleep]\nrate = \"5/s\"\n[upstreams.beta.tool_cache.echo]\nttl = \"10s\"\n", teams("")))),
        ("nothing", String::new()),
    ];
    let before = config(&[("alpha", &[]), ("beta", &[])], &teams(""));
    let server = Server::start(&before);
    // alpha__echo is never concerned by any step; beta__echo by some.
    let load = Load::start(&server, 8, &["alpha__echo", "beta__echo"], LOAD_KEY);
    std::thread::sleep(Duration::from_millis(500));
    let mut last = before.clone();
    for (kind, text) in &steps {
        let text = if text.is_empty() { &last } else { text };
        let started = Instant::now();
        let (status, report) = server.reload(text);
        eprintln!("reload ({kind}) answered in {:?}", started.elapsed());
        assert_eq!(status, StatusCode::OK, "{kind}: {report}");
        last = text.clone();
        std::thread::sleep(Duration::from_millis(700));
    }
    let counts = load.finish();
    eprintln!("calls under {} reloads: {counts:?}", steps.len());
    let (_, answered, failed) = &counts[0];
    assert!(*answered > 100, "the load ran: {counts:?}");
    assert_eq!(
        *failed, 0,
        "alpha's calls are not concerned by any reload: {counts:?}"
    );
    let (_, beta_answered, beta_failed) = &counts[1];
    assert!(*beta_answered > 100, "{counts:?}");
    // beta is restarted make-before-break: its calls do not fail either.
    assert_eq!(*beta_failed, 0, "{counts:?}\n{}", server.stderr());
}

#[test]
fn cached_answers_stay_across_a_reload_unless_their_rules_changed() {
    let cached = |ttl: &str| format!("[upstreams.alpha.tool_cache.echo]\nttl = \"{ttl}\"\n");
    let before = config(&[("alpha", &[])], &cached("1h"));
    let server = Server::start(&before);
    let mut host = server.ready_host();
    let echo = |host: &mut Host| {
        let r = host.call("alpha__echo", json!({"text": "kept"}));
        assert_eq!(text_of(&r), "kept", "{r}");
    };
    echo(&mut host);
    echo(&mut host);
    assert_eq!(host.calls_of("alpha", "echo"), 1, "the second was a hit");
    // alpha with its rule's `ttl`, beta beside it with a cache of its own.
    let with_beta = |ttl: &str| {
        let caches = format!("{}{}", cached(ttl), cached("1h").replace("alpha", "beta"));
        config(&[("alpha", &[]), ("beta", &[])], &caches)
    };
    // Another upstream (and its own cache) come: alpha's entry stays.
    assert_eq!(server.reload(&with_beta("1h")).0, StatusCode::OK);
    echo(&mut host);
    assert_eq!(
        host.calls_of("alpha", "echo"),
        1,
        "still a hit after the reload"
    );
    // alpha's rule changes: its entries go.
    assert_eq!(server.reload(&with_beta("30m")).0, StatusCode::OK);
    echo(&mut host);
    assert_eq!(
        host.calls_of("alpha", "echo"),
        2,
        "a miss: the rule changed"
    );
}

#[test]
fn the_log_level_follows_a_reload() {
    let with_level = |level: &str| {
        format!(
            "[telemetry]\nlog_level = \"{level}\"\n\n{}",
            config(&[("alpha", &[])], "")
        )
    };
    // No MANIFOLD_LOG (which would win over the file).
    let server = Server::start_with(&with_level("info"), "", &[], "127.0.0.1");
    let mut host = server.ready_host();
    let refused = |host: &mut Host| {
        let r = host.call("alpha__nope", json!({}));
        assert_eq!(code(&r), -32602, "{r}");
    };
    refused(&mut host);
    assert!(
        !server.stderr().contains("request refused"),
        "debug lines at info"
    );
    let (status, report) = server.reload(&with_level("info,manifold_core=debug"));
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["telemetry"], true, "{report}");
    refused(&mut host);
    eventually("the refusal logged at debug", || {
        server.stderr().contains("request refused")
    });
}
