use super::changes;
use crate::tests::toml;

const BASE: &str = r#"
[upstreams.alpha]
command = "fixture"
args = ["--a"]

[upstreams.beta]
command = "fixture"

[teams.red]
api_keys = ["0123456789abcdef0123456789abcdef"]
"#;

fn diff(old: &str, new: &str) -> super::Changes {
    changes(&toml(old).unwrap(), &toml(new).unwrap())
}

#[test]
fn the_same_file_changes_nothing() {
    assert!(diff(BASE, BASE).is_empty());
}

#[test]
fn upstreams_added_removed_restarted_and_updated_are_told_apart() {
    let new = r#"
[upstreams.alpha]
command = "fixture"
args = ["--b"]

[upstreams.gamma]
command = "fixture"

[teams.red]
api_keys = ["0123456789abcdef0123456789abcdef"]
"#;
    let c = diff(BASE, new);
    assert_eq!(c.added, ["gamma"]);
    assert_eq!(c.removed, ["beta"]);
    assert_eq!(c.restarted, ["alpha"]);
    assert!(c.updated.is_empty() && !c.teams && c.at_restart.is_empty());
}

#[test]
fn names_filters_caches_and_required_apply_in_place() {
    for change in [
        "prefix = \"b\"",
        "required = true",
        "tool_timeouts = { slow = 5000 }",
        "cache = { ttl = \"10s\" }",
        "tools = { include = [\"x*\"] }",
    ] {
        let new = BASE.replace(
            "[upstreams.beta]\ncommand = \"fixture\"\n",
            &format!("[upstreams.beta]\ncommand = \"fixture\"\n{change}\n"),
        );
        let c = diff(BASE, &new);
        assert_eq!(c.updated, ["beta"], "{change}");
        assert!(c.restarted.is_empty(), "{change}");
    }
}

#[test]
fn connection_settings_restart_the_upstream() {
    for change in [
        "env = { X = \"1\" }",
        "request_timeout_ms = 5000",
        "health_interval = \"1s\"",
        "era = \"session\"",
        "restart_max_backoff_ms = 1000",
    ] {
        let new = BASE.replace(
            "[upstreams.beta]\ncommand = \"fixture\"\n",
            &format!("[upstreams.beta]\ncommand = \"fixture\"\n{change}\n"),
        );
        assert_eq!(diff(BASE, &new).restarted, ["beta"], "{change}");
    }
}

#[test]
fn teams_limits_and_cache_are_seen() {
    let new = format!("{BASE}\n[teams.blue]\n[limits.tools.alpha__x]\nrate = \"5/s\"\n[cache]\nmax_bytes = \"1MB\"\n");
    let c = diff(BASE, &new);
    assert!(c.teams && c.limits && c.cache, "{c:?}");
    assert!(c.at_restart.is_empty());
}

#[test]
fn server_and_trace_settings_wait_for_a_restart() {
    let new = format!("[server]\nlisten = \"127.0.0.1:9\"\npage_size = 10\n[telemetry]\nlog_level = \"debug\"\nservice_name = \"x\"\n{BASE}");
    let c = diff(BASE, &new);
    assert_eq!(
        c.at_restart,
        [
            "server.page_size",
            "server.listen",
            "telemetry (log format, trace export)"
        ]
    );
    assert!(c.telemetry, "the log level applies at once");
}

#[test]
fn an_openapi_upstream_rereads_its_description_and_restarts_on_its_own_keys() {
    let pets = "[upstreams.pets]\nopenapi = \"https://pets.example/openapi.json\"\n";
    let c = diff(pets, pets);
    assert_eq!(c.updated, ["pets"], "its description is read again");
    assert!(c.restarted.is_empty());
    for change in [
        "base_url = \"https://other.example\"",
        "exclude = [\"method:DELETE\"]",
        "renames = { a = \"b\" }",
        "timeout = \"5s\"",
        "max_response_bytes = 10",
        "headers = { X = \"1\" }",
    ] {
        let c = diff(pets, &format!("{pets}{change}\n"));
        assert_eq!(c.restarted, ["pets"], "{change}");
        assert!(c.updated.is_empty(), "{change}");
    }
}
