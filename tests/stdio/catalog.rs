//! The merged catalog as a host sees it: names, collisions, pagination, URIs, passthrough.

use serde_json::json;

use manifold_testkit::process::*;

#[test]
fn merges_every_kind_from_two_upstreams() {
    let mut m = Manifold::ready(&two_fixtures());
    let tools = m.all_tool_names();
    for t in ["alpha__echo", "alpha__add", "beta__echo", "beta__sleep"] {
        assert!(tools.contains(&t.to_owned()), "{t} missing from {tools:?}");
    }
    let prompts = m.names("prompts/list", "prompts", "name");
    assert!(
        prompts.contains(&"alpha__greet".into()) && prompts.contains(&"beta__greet".into()),
        "{prompts:?}"
    );
    let resources = m.names("resources/list", "resources", "uri");
    assert!(
        resources.contains(&"alpha+fixture://alpha/readme".into()),
        "{resources:?}"
    );
    assert!(
        resources.contains(&"beta+fixture://beta/data.json".into()),
        "{resources:?}"
    );
    let templates = m.names(
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    );
    assert_eq!(
        templates,
        [
            "alpha+fixture://alpha/items/{id}",
            "beta+fixture://beta/items/{id}"
        ]
    );
    let re = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    assert!(
        tools.iter().chain(&prompts).all(|n| re(n)),
        "a name hosts reject: {tools:?}"
    );
}

#[test]
fn unknown_fields_survive_both_ways() {
    let mut m = Manifold::ready(&two_fixtures());
    let tools = m.list_all("tools/list", "tools");
    let echo = tools.iter().find(|t| t["name"] == "alpha__echo").unwrap();
    assert_eq!(
        echo["x-fixture"],
        json!({"kept": true}),
        "unknown item field lost: {echo}"
    );
    let r = m.call("beta__echo", json!({"text": "hi"}));
    assert_eq!(
        r["result"]["x-fixture-result"],
        json!(1),
        "unknown result field lost: {r}"
    );
    assert_eq!(r["result"]["structuredContent"], json!({"text": "hi"}));
}

#[test]
fn names_follow_config_prefix_separator_renames_and_filters() {
    let config = format!(
        "[names]\nseparator = \"-\"\n\n{}prefix = \"A\"\n[upstreams.alpha.tools]\ninclude = [\"e*\", \"add\"]\nexclude = [\"echo\"]\nrename = {{ add = \"plus\" }}\n\n{}",
        named_fixture("alpha"),
        named_fixture("beta"),
    );
    let mut m = Manifold::ready(&config);
    let tools = m.all_tool_names();
    assert!(tools.contains(&"plus".into()), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t.starts_with("A-") && t != "A-plus"),
        "filters ignored: {tools:?}"
    );
    assert!(tools.contains(&"beta-echo".into()), "{tools:?}");
    assert_eq!(text_of(&m.call("plus", json!({"a": 2, "b": 3}))), "5");
}

#[test]
fn long_names_are_shortened_stably_and_do_not_depend_on_other_upstreams() {
    let long_prefix = "a_very_long_prefix_that_pushes_every_tool_name_past_the_host_limit";
    // Only the echo-like extra tools, so that any exposed name can be called.
    let alone = format!(
        "{}prefix = {long_prefix:?}\n[upstreams.alpha.tools]\ninclude = [\"tool_*\"]\n",
        fixture_upstream("alpha", &["--name", "alpha", "--extra-tools", "3"])
    );
    let with_more = format!("{alone}{}", named_fixture("zeta"));
    let mut a = Manifold::ready(&alone);
    let mut b = Manifold::ready(&with_more);
    let names_a = a.all_tool_names();
    let names_b: Vec<String> = b
        .all_tool_names()
        .into_iter()
        .filter(|n| !n.starts_with("zeta__"))
        .collect();
    assert_eq!(names_a.len(), 3, "{names_a:?}");
    assert_eq!(
        names_a, names_b,
        "names changed when another upstream was added"
    );
    assert!(
        names_a
            .iter()
            .all(|n| n.len() == 64 && n.starts_with("a_very_long_prefix")),
        "{names_a:?}"
    );
    let unique: std::collections::HashSet<_> = names_a.iter().collect();
    assert_eq!(unique.len(), 3, "shortening made duplicates: {names_a:?}");
    assert_eq!(
        text_of(&a.call(&names_a[0], json!({"text": "routed"}))),
        "routed"
    );
}

#[test]
fn collisions_are_withheld_and_explained() {
    let config = format!(
        "{}prefix = \"\"\n{}prefix = \"\"\n",
        named_fixture("alpha"),
        named_fixture("beta")
    );
    let mut m = Manifold::ready(&config);
    let tools = m.all_tool_names();
    assert!(
        !tools.contains(&"echo".into()),
        "a colliding name was served: {tools:?}"
    );
    let r = m.call("echo", json!({"text": "x"}));
    assert_eq!(error_code(&r), -32602);
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("alpha") && msg.contains("beta"), "{msg}");
    m.assert_logged("name collision");
}

#[test]
fn downstream_pagination_chains_and_refuses_bad_cursors() {
    let config = format!(
        "[server]\npage_size = 3\n\n{}",
        fixture_upstream("alpha", &["--name", "alpha", "--extra-tools", "10"])
    );
    let mut m = Manifold::ready(&config);
    let first = m.request("tools/list", json!({}));
    assert_eq!(first["result"]["tools"].as_array().unwrap().len(), 3);
    assert!(first["result"]["nextCursor"].is_string());
    let all = m.all_tool_names();
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len());
    assert!(all.contains(&"alpha__tool_9".into()) && all.contains(&"alpha__echo".into()));
    for bad in ["nope", "mf1.0.1", "mf1.0.999"] {
        let r = m.request("tools/list", json!({"cursor": bad}));
        assert_eq!(error_code(&r), -32602, "{bad}: {r}");
    }
}

#[test]
fn paginated_upstream_lists_are_fetched_whole() {
    let config = fixture_upstream(
        "alpha",
        &[
            "--name",
            "alpha",
            "--page-size",
            "2",
            "--extra-tools",
            "7",
            "--extra-prompts",
            "5",
        ],
    );
    let mut m = Manifold::ready(&config);
    let tools = m.all_tool_names();
    assert!(
        tools.contains(&"alpha__tool_6".into()) && tools.contains(&"alpha__echo".into()),
        "{tools:?}"
    );
    let prompts = m.names("prompts/list", "prompts", "name");
    assert!(prompts.contains(&"alpha__prompt_4".into()), "{prompts:?}");
}

#[test]
fn resource_uris_route_and_map_back() {
    let mut m = Manifold::ready(&two_fixtures());
    let r = m.request(
        "resources/read",
        json!({"uri": "beta+fixture://beta/readme"}),
    );
    assert_eq!(
        r["result"]["contents"][0]["uri"], "beta+fixture://beta/readme",
        "{r}"
    );
    assert!(r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .contains("beta"));
    // A URI matching an exposed template.
    let r = m.request(
        "resources/read",
        json!({"uri": "alpha+fixture://alpha/items/42"}),
    );
    assert_eq!(
        r["result"]["contents"][0]["uri"], "alpha+fixture://alpha/items/42",
        "{r}"
    );
    assert!(r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .contains("42"));
    // URIs inside tool results: resource links and embedded resources.
    let r = m.call("alpha__links", json!({}));
    let content = r["result"]["content"].as_array().unwrap();
    assert_eq!(content[0]["uri"], "alpha+fixture://alpha/readme", "{r}");
    assert_eq!(
        content[1]["resource"]["uri"], "alpha+fixture://alpha/data.json",
        "{r}"
    );
    // And inside prompt messages.
    let r = m.request("prompts/get", json!({"name": "beta__with_resource"}));
    assert_eq!(
        r["result"]["messages"][0]["content"]["resource"]["uri"], "beta+fixture://beta/readme",
        "{r}"
    );
    // Unknown resources.
    for uri in [
        "zzz+fixture://alpha/readme",
        "fixture://alpha/readme",
        "alpha+fixture://alpha/missing",
    ] {
        let r = m.request("resources/read", json!({"uri": uri}));
        assert_eq!(error_code(&r), -32002, "{uri}: {r}");
    }
}
