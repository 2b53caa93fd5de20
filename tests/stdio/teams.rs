//! Teams over stdio (`--team`, `server.team`): a team's view of the catalog, hidden names
//! answered exactly like unknown ones, list_changed only when the view changed, and limits
//! counted per tool call before anything reaches the upstream.

use serde_json::{json, Value};

use manifold_testkit::process::{
    error_code, error_renamed, fixture_upstream, text_of, two_fixtures, Manifold, Requests, TempDir,
};

/// alpha and beta fixtures, and team `red`, which sees only alpha's tools (not `crash`, not
/// the `hidden_*` ones), none of its prompts, and one of its resources; pages of two items.
fn config(extra: &str) -> String {
    format!(
        r#"[server]
page_size = 2

[teams.red]
upstreams = ["alpha", "beta"]
tools = {{ include = ["alpha__*", "beta__add_tool", "beta__shown_*"], exclude = ["alpha__crash"] }}
prompts = {{ include = ["nothing"] }}
resources = {{ exclude = ["*beta*"] }}

[teams.blue]

{extra}
{}"#,
        two_fixtures()
    )
}

#[test]
fn a_team_sees_only_its_view_and_hidden_names_are_unknown() {
    let mut m = Manifold::ready_args(&config(""), &["--team", "red"]);
    let tools = m.all_tool_names();
    assert!(tools.contains(&"alpha__echo".to_owned()), "{tools:?}");
    assert!(tools.contains(&"beta__add_tool".to_owned()), "{tools:?}");
    for name in &tools {
        let beta_allowed = name == "beta__add_tool" || name.starts_with("beta__shown_");
        assert!(
            name.starts_with("alpha__") || beta_allowed,
            "{name} is not in red's view"
        );
        assert_ne!(name, "alpha__crash");
    }
    assert!(m.names("prompts/list", "prompts", "name").is_empty());
    let uris = m.names("resources/list", "resources", "uri");
    assert!(!uris.is_empty());
    assert!(uris.iter().all(|u| !u.contains("beta")), "{uris:?}");
    for template in m.names(
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    ) {
        assert!(!template.contains("beta"), "{template}");
    }

    // Calling, getting or reading a hidden name answers exactly as an unknown one does.
    let unknown = m.call("alpha__no_such_tool", json!({}));
    for hidden in ["alpha__crash", "beta__echo"] {
        let r = m.call(hidden, json!({"text": "x"}));
        assert_eq!(
            error_renamed(&r, hidden, "alpha__no_such_tool"),
            unknown["error"].to_string(),
            "{hidden}"
        );
    }
    let prompt_unknown = m.request("prompts/get", json!({"name": "alpha__nope"}));
    let prompt_hidden = m.request("prompts/get", json!({"name": "alpha__with_resource"}));
    assert_eq!(
        error_renamed(&prompt_hidden, "alpha__with_resource", "alpha__nope"),
        prompt_unknown["error"].to_string()
    );
    // A resource of beta's, as anyone else sees it.
    let mut blue = Manifold::ready_args(&config(""), &["--team", "blue"]);
    let beta_uri = blue
        .names("resources/list", "resources", "uri")
        .into_iter()
        .find(|u| u.contains("beta"))
        .expect("blue sees beta's resources");
    let read_hidden = m.request("resources/read", json!({"uri": beta_uri}));
    let fake = beta_uri.replace("beta", "gamma");
    let read_unknown = m.request("resources/read", json!({"uri": fake}));
    assert_eq!(error_code(&read_hidden), error_code(&read_unknown));
    assert_eq!(
        error_renamed(&read_hidden, &beta_uri, &fake),
        read_unknown["error"].to_string()
    );
    let sub = m.request("resources/subscribe", json!({"uri": beta_uri}));
    assert_eq!(error_code(&sub), error_code(&read_unknown));
    // What the team may see works as before.
    assert_eq!(text_of(&m.call("alpha__echo", json!({"text": "hi"}))), "hi");
    // The other team sees everything.
    assert!(blue.all_tool_names().contains(&"beta__echo".to_owned()));
}

#[test]
fn list_changed_reaches_a_team_only_when_its_view_changed() {
    let mut m = Manifold::ready_args(&config(""), &["--team", "red"]);
    m.all_tool_names();
    // beta gets a tool red may not see: red's view is the same, so red hears nothing.
    let r = m.call("beta__add_tool", json!({"name": "hidden_one"}));
    assert!(r.get("result").is_some(), "{r}");
    let heard = m.sees_within(std::time::Duration::from_millis(800), |msg| {
        msg["method"] == "notifications/tools/list_changed"
    });
    assert!(!heard, "red heard of a change outside its view");
    // Then one it may see.
    m.call("beta__add_tool", json!({"name": "shown_one"}));
    m.wait_for(|msg| msg["method"] == "notifications/tools/list_changed");
    let tools = m.all_tool_names();
    assert!(tools.contains(&"beta__shown_one".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"beta__hidden_one".to_owned()), "{tools:?}");
}

#[test]
fn quotas_and_rates_refuse_before_the_upstream() {
    let limits = r#"
[teams.blue.tool_limits.alpha__add]
quota = "3/day"

[teams.blue.upstream_limits.beta]
rate = "2/hour"

[limits.tools.alpha__echo]
rate = "1/hour"
burst = 2
"#;
    let mut m = Manifold::ready_args(&config(limits), &["--team", "blue"]);
    // 10 calls sent at once against a quota of 3: exactly 3 pass.
    let answers = m.calls_at_once("alpha__add", 10, |i| json!({"a": i, "b": 1}));
    let passed = answers.iter().filter(|a| a.get("result").is_some()).count();
    assert_eq!(passed, 3, "{answers:?}");
    let refused = answers.iter().find(|a| a.get("error").is_some()).unwrap();
    assert_eq!(error_code(refused), -32015, "{refused}");
    let data = &refused["error"]["data"];
    assert_eq!(data["kind"], "quota_exceeded");
    assert_eq!(data["limit"], "team:blue:tool:alpha__add");
    let retry = data["retryAfterMs"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 86_400_000, "{retry}");
    assert_eq!(m.call_count("alpha", "tool:add"), 3);

    // A (team, upstream) rate over all of beta's tools: 2 pass, then -32014.
    let answers = m.calls_at_once("beta__add", 4, |i| json!({"a": i, "b": 1}));
    assert_eq!(
        answers.iter().filter(|a| a.get("result").is_some()).count(),
        2
    );
    let refused = answers.iter().find(|a| a.get("error").is_some()).unwrap();
    assert_eq!(error_code(refused), -32014, "{refused}");
    assert_eq!(refused["error"]["data"]["kind"], "rate_limited");
    let retry = refused["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(
        retry > 1_000_000 && retry <= 1_800_000,
        "half an hour: {retry}"
    );
    // Other tools of other upstreams are not limited.
    assert!(m.call("alpha__whoami", json!({})).get("result").is_some());

    // A global per-tool rate with a burst of 2.
    let answers: Vec<Value> = (0..3)
        .map(|_| m.call("alpha__echo", json!({"text": "x"})))
        .collect();
    assert_eq!(
        answers.iter().filter(|a| a.get("result").is_some()).count(),
        2
    );
    assert_eq!(answers[2]["error"]["data"]["limit"], "tool:alpha__echo");
    assert_eq!(m.call_count("alpha", "tool:echo"), 2);
    m.assert_logged("tool call refused by a limit");
}

#[test]
fn the_team_is_on_the_log_lines_of_its_requests() {
    let dir = TempDir::new("teams");
    let path = dir.write("manifold.toml", &config(""));
    let args = ["serve", "--config", path.to_str().unwrap(), "--team", "red"];
    let mut m = Manifold::start_logging(&args, dir, "debug");
    m.initialize();
    let r = m.call("beta__echo", json!({"text": "x"}));
    assert!(r.get("error").is_some(), "{r}");
    let refused = m.logged_line(|l| l.contains("request refused") && l.contains("beta__echo"));
    assert!(refused.contains("manifold.team=\"red\""), "{refused}");
}

#[test]
fn the_team_comes_from_the_config_or_the_flag() {
    // server.team; no --team.
    let config = format!(
        "[server]\nteam = \"red\"\n\n[teams.red]\nupstreams = [\"alpha\"]\n\n{}",
        two_fixtures()
    );
    let mut m = Manifold::ready(&config);
    let tools = m.all_tool_names();
    assert!(tools.iter().all(|t| t.starts_with("alpha__")), "{tools:?}");
    // An unknown team is refused at start, naming it.
    let config = format!("[teams.red]\n\n{}", fixture_upstream("alpha", &[]));
    let mut bad = Manifold::start_args(&config, &["--team", "green"]);
    assert_ne!(bad.wait_exit(), Some(0));
    assert!(bad.stderr().contains("\"green\""), "{}", bad.stderr());
}

/// `secret` (tasks, and instructions an outsider must not read) and `public` (tools only);
/// team `a` uses secret, `b` public, and `c` may use both but sees only public's tools.
fn secret_and_public() -> String {
    format!(
        r#"[teams.a]
upstreams = ["secret"]

[teams.b]
upstreams = ["public"]

[teams.c]
tools = {{ include = ["public__*"] }}
prompts = {{ include = ["nothing"] }}
resources = {{ include = ["nothing"] }}

{}{}"#,
        fixture_upstream(
            "secret",
            &[
                "--name",
                "secret",
                "--tasks",
                "--instructions",
                "Internal: payroll DB at 10.0.0.5"
            ]
        ),
        fixture_upstream(
            "public",
            &["--name", "public", "--no-prompts", "--no-resources"]
        ),
    )
}

/// `manifold serve --team TEAM` on `config`, initialized; returns the initialize answer too.
fn initialized_as(team: &str, config: &str) -> (Manifold, Value) {
    let mut m = Manifold::start_args(config, &["--team", team]);
    let init = m.initialize();
    (m, init)
}

#[test]
fn initialize_tells_a_team_only_of_the_upstreams_in_its_view() {
    for team in ["b", "c"] {
        let (mut m, init) = initialized_as(team, &secret_and_public());
        let text = init.to_string();
        assert_eq!(
            init["result"]["serverInfo"]["title"], "Manifold (public)",
            "team {team}: {init}"
        );
        for leak in ["secret", "payroll", "10.0.0.5"] {
            assert!(!text.contains(leak), "team {team} learns {leak:?}: {text}");
        }
        let caps = &init["result"]["capabilities"];
        // Only secret offers these: a team that cannot see it is not offered them.
        for only_secret in ["tasks", "prompts", "resources"] {
            assert!(caps.get(only_secret).is_none(), "team {team}: {caps}");
        }
        assert!(caps.get("tools").is_some(), "{caps}");
        // What it may not see is unknown under every method that names an upstream's item.
        let r = m.call("secret__echo", json!({"text": "x"}));
        assert_eq!(r["error"]["message"], "Unknown tool: secret__echo", "{r}");
        let r = m.request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "secret__greet"}, "argument": {"name": "name", "value": "a"}}),
        );
        assert_eq!(
            r["error"]["message"], "Unknown prompt: secret__greet",
            "{r}"
        );
        let r = m.request(
            "resources/read",
            json!({"uri": "secret+fixture://secret/readme"}),
        );
        assert_eq!(error_code(&r), -32002, "{r}");
    }
    let (_m, init) = initialized_as("a", &secret_and_public());
    assert_eq!(init["result"]["serverInfo"]["title"], "Manifold (secret)");
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(instructions.contains("payroll"), "{instructions}");
    assert!(!instructions.contains("public"), "{instructions}");
    assert!(init["result"]["capabilities"].get("tasks").is_some());
}
