//! `/healthz` (alive) and `/readyz` (every upstream marked required is up).

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;
use crate::harness::*;

#[test]
fn ready_only_when_required_upstreams_are_up() {
    let config = format!(
        "{}required = true\n\n{}required = false\n",
        fixture_upstream("alpha", &["--name", "alpha"]),
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
    assert_eq!(body["upstreams"]["alpha"]["state"], "up");
    assert!(body["upstreams"]["broken"]["state"]
        .as_str()
        .unwrap()
        .starts_with("down"));

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
    assert_eq!(body["upstreams"]["broken"]["required"], true);
}
