//! `/healthz` (alive) and `/readyz` (every upstream marked required is up), and who may read
//! `/metrics`: on the address hosts use, nothing names an upstream to someone without a
//! credential.

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

#[test]
fn ready_only_when_required_upstreams_are_up() {
    let config = format!(
        "{}required = true\n\n{}required = false\n",
        named_fixture("alpha"),
        fixture_upstream("broken", &["--exit-on-start", "3"])
    );
    let server = Server::start(&config);
    let c = client();
    let r = c.get(server.url("/healthz")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    eventually("alpha is up", || {
        c.get(server.url("/readyz")).send().unwrap().status() == StatusCode::OK
    });
    let body: Value = c.get(server.url("/readyz")).send().unwrap().json().unwrap();
    assert_eq!(body["ready"], true);
    assert_eq!(body["required"], json!({"up": 1, "total": 1}), "{body}");
    assert_eq!(
        (body["up"].as_u64(), body["total"].as_u64()),
        (Some(1), Some(2))
    );
    // The host listener names no upstream: probes need the verdict, not the inventory.
    let text = body.to_string();
    assert!(
        !text.contains("alpha") && !text.contains("broken"),
        "{text}"
    );

    let config = format!(
        "{}required = true\n",
        fixture_upstream("broken", &["--exit-on-start", "3"])
    );
    let server = Server::start(&config);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = c.get(server.url("/readyz")).send().unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = r.json().unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(body["required"], json!({"up": 0, "total": 1}), "{body}");
}

#[test]
fn the_admin_address_names_each_upstream_and_its_state() {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}required = true\n\n{}",
        named_fixture("alpha"),
        fixture_upstream("broken", &["--exit-on-start", "3"])
    );
    let server = Server::start(&config);
    let admin = server.admin_url("/readyz");
    let c = client();
    eventually("alpha is up", || {
        c.get(&admin).send().unwrap().status() == StatusCode::OK
    });
    let body: Value = c.get(&admin).send().unwrap().json().unwrap();
    assert_eq!(body["upstreams"]["alpha"]["state"], "up", "{body}");
    assert_eq!(body["upstreams"]["alpha"]["required"], true);
    assert!(body["upstreams"]["broken"]["state"]
        .as_str()
        .unwrap()
        .starts_with("down"));
    // With an admin address, the host listener has no metrics at all.
    let r = c.get(server.url("/metrics")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().unwrap().contains("admin address"));
    let r = c.get(server.admin_url("/metrics")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().unwrap().contains("upstream=\"alpha\""));
}

const SCRAPE_TOKEN: &str = "scrape-token-0123456789";

/// One team with an API key, and alpha; `extra` goes into `[server]`.
fn authenticated(extra: &str) -> String {
    format!(
        "[server]\n{extra}\n\n[teams.red]\napi_keys = [\"red-key-0123456789abcdef\"]\n\n{}",
        named_fixture("alpha")
    )
}

#[test]
fn metrics_need_a_credential_when_hosts_do() {
    let c = client();
    // Authentication configured, no token: not served to anyone on the host listener, with
    // or without a team's key (a team must not read the others' names and figures).
    let server = Server::start(&authenticated(""));
    for key in [None, Some("red-key-0123456789abcdef")] {
        let mut req = c.get(server.url("/metrics"));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        let r = req.send().unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "key {key:?}");
        assert!(!r.text().unwrap().contains("alpha"));
    }
    let r = c.get(server.url("/healthz")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK, "probes stay open");
    eventually("ready", || {
        c.get(server.url("/readyz")).send().unwrap().status() == StatusCode::OK
    });
    // With server.metrics_token: a scraper sending it as a bearer token reads them.
    let server = Server::start(&authenticated(&format!(
        "metrics_token = \"{SCRAPE_TOKEN}\""
    )));
    for wrong in [None, Some("red-key-0123456789abcdef"), Some("scrape-token")] {
        let mut req = c.get(server.url("/metrics"));
        if let Some(token) = wrong {
            req = req.bearer_auth(token);
        }
        let r = req.send().unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{wrong:?}");
        assert!(r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
        assert!(!r.text().unwrap().contains("alpha"));
    }
    let r = c
        .get(server.url("/metrics"))
        .bearer_auth(SCRAPE_TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().unwrap().contains("manifold_upstream_up"));
}

#[test]
fn without_authentication_metrics_stay_open_on_loopback() {
    let server = Server::start(&named_fixture("alpha"));
    let r = client().get(server.url("/metrics")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
