//! Extensions Manifold does not know (`capabilities.extensions`): one declared by exactly one
//! upstream in a host's view is advertised with that upstream's settings and its methods are
//! forwarded there, URIs mapped; one declared by several is not advertised, its methods are
//! unknown, the log says so once and `manifold check` shows it.

use serde_json::{json, Value};

use manifold_testkit::http::code;
use manifold_testkit::process::*;

const WIDGETS: &str = "com.example/widgets";

/// A fixture upstream `key` declaring `extension` with `settings` and answering `method`.
fn declaring(key: &str, extension: &str, settings: &str, method: &str) -> String {
    fixture_upstream(
        key,
        &[
            "--name",
            key,
            "--extension",
            &format!("{extension}={settings}"),
            "--extension-method",
            method,
        ],
    )
}

/// `params` with a stateless host's `_meta`.
fn modern(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    params
}

#[test]
fn an_extension_one_upstream_declares_is_advertised_and_its_methods_reach_it() {
    let config = format!(
        "{}{}",
        declaring("alpha", WIDGETS, r#"{"color":"blue"}"#, "widgets/echo"),
        declaring("beta", "com.example/gadgets", "{}", "gadgets/echo"),
    );
    let mut m = Manifold::start(&config);
    let init = m.initialize();
    let extensions = &init["result"]["capabilities"]["extensions"];
    assert_eq!(extensions[WIDGETS], json!({"color": "blue"}), "{init}");
    assert_eq!(extensions["com.example/gadgets"], json!({}), "{init}");
    m.notify("notifications/initialized", json!({}));

    // The host's URI reaches the upstream as the upstream's own; the result's comes back
    // exposed, and a notification of the extension reached the same upstream first.
    m.notify("notifications/widgets/poked", json!({"n": 1}));
    let r = m.request("widgets/echo", json!({"uri": "alpha+widget://w/1", "n": 2}));
    assert_eq!(r["result"]["server"], "alpha", "{r}");
    assert_eq!(r["result"]["params"]["uri"], "widget://w/1", "{r}");
    assert_eq!(r["result"]["params"]["n"], 2, "{r}");
    assert_eq!(r["result"]["uri"], "alpha+widget://w/1", "{r}");
    let heard = r["result"]["heard"].as_array().unwrap();
    assert!(heard.contains(&json!("notifications/widgets/poked")), "{r}");

    // Two upstreams with extensions of their own: each method reaches the one that serves it.
    let r = m.request("gadgets/echo", json!({"x": true}));
    assert_eq!(r["result"]["server"], "beta", "{r}");
    let again = m.request("gadgets/echo", json!({"x": false}));
    assert_eq!(again["result"]["server"], "beta", "{again}");
    // A method neither serves is unknown, as before.
    let none = m.request("widgets/nothing", json!({}));
    assert_eq!(code(&none), -32601, "{none}");
}

#[test]
fn a_stateless_host_discovers_the_extension_and_calls_it() {
    let config = declaring("alpha", WIDGETS, "{}", "widgets/echo");
    let mut m = Manifold::start(&config);
    let d = m.request("server/discover", json!({}));
    assert_eq!(
        d["result"]["capabilities"]["extensions"][WIDGETS],
        json!({}),
        "{d}"
    );
    let r = m.request("widgets/echo", modern(json!({"uri": "alpha+widget://w/2"})));
    assert_eq!(r["result"]["server"], "alpha", "{r}");
    assert_eq!(r["result"]["params"]["uri"], "widget://w/2", "{r}");
    assert_eq!(r["result"]["uri"], "alpha+widget://w/2", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
}

#[test]
fn an_extension_two_upstreams_declare_is_not_advertised_logged_once_and_checked() {
    let config = format!(
        "[teams.solo]\nupstreams = [\"alpha\"]\n\n[teams.none]\nupstreams = [\"gamma\"]\n\n{}{}{}",
        declaring("alpha", WIDGETS, r#"{"v":1}"#, "widgets/echo"),
        declaring("beta", WIDGETS, r#"{"v":2}"#, "widgets/echo"),
        named_fixture("gamma"),
    );
    let dir = TempDir::new("ext");
    let path = dir.write("c.toml", &config);
    let path = path.to_str().unwrap().to_owned();
    let mut m = Manifold::start_logging(&["serve", "--config", &path], dir, "info");
    let init = m.initialize();
    let caps = &init["result"]["capabilities"];
    assert!(caps["extensions"].get(WIDGETS).is_none(), "{init}");
    m.notify("notifications/initialized", json!({}));
    for _ in 0..2 {
        let r = m.request("widgets/echo", json!({}));
        assert_eq!(code(&r), -32601, "{r}");
    }
    m.assert_logged(WIDGETS);
    let stderr = m.stderr();
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains(WIDGETS)).collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].contains("alpha") && warned[0].contains("beta"),
        "{stderr}"
    );

    // A team that sees one of the two: the extension is that upstream's alone.
    let dir = TempDir::new("ext-solo");
    let path = dir.write("c.toml", &config);
    let path = path.to_str().unwrap();
    let mut solo = Manifold::start_with(&["serve", "--config", path, "--team", "solo"], dir);
    let init = solo.initialize();
    assert_eq!(
        init["result"]["capabilities"]["extensions"][WIDGETS],
        json!({"v": 1}),
        "{init}"
    );
    solo.notify("notifications/initialized", json!({}));
    let r = solo.request("widgets/echo", json!({}));
    assert_eq!(r["result"]["server"], "alpha", "{r}");

    // A team that sees neither: no extension, no method.
    let dir = TempDir::new("ext-none");
    let path = dir.write("c.toml", &config);
    let path = path.to_str().unwrap();
    let mut none = Manifold::start_with(&["serve", "--config", path, "--team", "none"], dir);
    let init = none.initialize();
    assert!(
        init["result"]["capabilities"]["extensions"]
            .get(WIDGETS)
            .is_none(),
        "{init}"
    );
    none.notify("notifications/initialized", json!({}));
    let r = none.request("widgets/echo", json!({}));
    assert_eq!(code(&r), -32601, "{r}");
    let d = none.request("server/discover", json!({}));
    assert!(
        d["result"]["capabilities"]["extensions"]
            .get(WIDGETS)
            .is_none(),
        "{d}"
    );

    // check: one line per declared extension, saying what became of it.
    let dir = TempDir::new("ext-check");
    let both = format!(
        "{}{}",
        config,
        declaring("delta", "com.example/gadgets", "{}", "gadgets/echo")
    );
    let path = dir.write("c.toml", &both);
    let (status, out, err) = run_manifold(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "{WIDGETS}: not advertised (declared by alpha, beta: its methods cannot be routed)"
        )),
        "{out}"
    );
    assert!(
        out.contains("com.example/gadgets: passed through (from delta)"),
        "{out}"
    );
}
