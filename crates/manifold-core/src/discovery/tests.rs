use manifold_catalog::{Catalog, Kind};
use manifold_config::{DiscoveryMode, DiscoverySettings};
use serde_json::{json, Value};

use super::*;

/// One upstream, `up`, with tools (name, description length).
fn catalog(tools: &[(&str, usize)]) -> Catalog {
    let tools = tools
        .iter()
        .map(|(name, pad)| json!({"name": name, "description": "x".repeat(*pad), "inputSchema": {"type": "object"}}))
        .collect();
    crate::testing::catalog(1, &[("up", tools)])
}

fn search(max_tools: usize, pinned: &[&str]) -> DiscoverySettings {
    DiscoverySettings {
        mode: DiscoveryMode::Search,
        pinned: pinned.iter().map(|p| (*p).to_owned()).collect(),
        max_tools,
        max_schema_bytes: None,
    }
}

fn names(found: &Found) -> Vec<String> {
    found.recent_first().iter().map(|t| t.to_string()).collect()
}

#[test]
fn found_tools_taken_from_another_replica_keep_their_order() {
    let found = Found::default();
    found.add(&["up__x"]);
    found.set(vec!["up__b".into(), "up__a".into()]);
    assert_eq!(names(&found), ["up__b", "up__a"]);
    found.touch("up__a");
    assert_eq!(names(&found), ["up__a", "up__b"]);
    found.set(Vec::new());
    assert!(names(&found).is_empty());
    found.touch("up__a");
    assert!(names(&found).is_empty());
}

#[test]
fn found_tools_are_kept_most_recently_used_first() {
    let found = Found::default();
    assert_eq!(found.add(&["up__a", "up__b"]), ["up__a", "up__b"]);
    assert_eq!(names(&found), ["up__b", "up__a"]);
    found.touch("up__a");
    assert_eq!(names(&found), ["up__a", "up__b"]);
    assert!(
        found.add(&["up__b"]).is_empty(),
        "already there: moved, not added"
    );
    assert_eq!(names(&found), ["up__b", "up__a"]);
    assert!(found.prune(|n| n != "up__b"));
    assert_eq!(names(&found), ["up__a"]);
    found.remove(&["up__a".to_owned()]);
    assert!(names(&found).is_empty());
    found.touch("up__a");
    assert!(names(&found).is_empty());
}

#[test]
fn pinned_tools_always_listed_and_found_ones_evicted_past_the_budget() {
    let c = catalog(&[("a", 10), ("b", 10), ("c", 10), ("d", 10)]);
    let listing = c.listing(Kind::Tools);
    let found: Vec<Box<str>> = vec!["up__d".into(), "up__c".into(), "up__b".into()];
    let (listed, evicted) = select(listing, &search(3, &["up__a"]), &found);
    let listed: Vec<&str> = listed.iter().map(|i| i.exposed.as_str()).collect();
    assert_eq!(listed, ["up__a", "up__d", "up__c"]);
    assert_eq!(evicted, ["up__b"]);
    // Pinned tools past the budget are all listed: found ones get no room.
    let (listed, evicted) = select(listing, &search(1, &["up__a", "up__b"]), &found);
    assert_eq!(listed.len(), 2);
    assert_eq!(evicted, ["up__d", "up__c"]);
    // A found tool that left the view is neither listed nor evicted (pruning does that).
    let gone: Vec<Box<str>> = vec!["up__zz".into()];
    let (listed, evicted) = select(listing, &search(5, &[]), &gone);
    assert!(listed.is_empty() && evicted.is_empty());
}

#[test]
fn a_schema_budget_evicts_by_bytes() {
    let c = catalog(&[("small", 10), ("big", 3000), ("mid", 500)]);
    let listing = c.listing(Kind::Tools);
    let found: Vec<Box<str>> = vec!["up__small".into(), "up__big".into(), "up__mid".into()];
    let mut settings = search(10, &[]);
    settings.max_schema_bytes = Some(1024);
    let (listed, evicted) = select(listing, &settings, &found);
    let listed: Vec<&str> = listed.iter().map(|i| i.exposed.as_str()).collect();
    assert_eq!(listed, ["up__small", "up__mid"]);
    assert_eq!(evicted, ["up__big"]);
}

#[test]
fn the_page_ends_with_find_tools_and_is_json() {
    let c = catalog(&[("a", 1)]);
    let listing = c.listing(Kind::Tools);
    for stateless in [false, true] {
        let page: Value = serde_json::from_str(&page(
            &listing.items().iter().collect::<Vec<_>>(),
            stateless,
        ))
        .unwrap();
        let tools = page["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[1]["name"], FIND_TOOLS);
        assert_eq!(tools[1]["inputSchema"]["required"], json!(["query"]));
    }
}

#[test]
fn queries_are_read_with_clear_errors() {
    assert_eq!(
        Query::parse(Some(r#"{"query":"send mail","k":3,"upstream":"gh"}"#)).unwrap(),
        Query {
            query: "send mail".into(),
            k: 3,
            upstream: Some("gh".into())
        }
    );
    assert_eq!(Query::parse(Some(r#"{"query":"x"}"#)).unwrap().k, 5);
    for (bad, says) in [
        (None, "query"),
        (Some(r#"{"query":"  "}"#), "query"),
        (Some(r#"{"query":"x","k":0}"#), "\"k\""),
        (Some(r#"{"query":"x","k":"3"}"#), "\"k\""),
        (Some(r#"{"query":"x","upstream":1}"#), "upstream"),
    ] {
        let e = Query::parse(bad).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn a_host_may_choose_its_own_settings_at_initialize() {
    let base = DiscoverySettings::default();
    assert_eq!(chosen(r#"{"other":1}"#, &base).unwrap(), None);
    let (c, asked) = chosen(
        r#"{"progressToken":1,"manifold/discovery":{"mode":"search","max_tools":7,"pinned":["gh__*"]}}"#,
        &base,
    )
    .unwrap()
    .unwrap();
    assert_eq!((c.mode, c.max_tools), (DiscoveryMode::Search, 7));
    assert_eq!(c.pinned, ["gh__*"]);
    // What was asked, alone, applies the same over the same base (another replica's).
    assert!(!asked.contains("progressToken"), "{asked}");
    assert_eq!(chosen(&asked, &base).unwrap().unwrap().0, c);
    let e = chosen(r#"{"manifold/discovery":{"mode":"all"}}"#, &base).unwrap_err();
    assert!(e.contains("mode"), "{e}");
}

#[test]
fn results_name_what_was_added_or_carry_definitions() {
    let c = catalog(&[("a", 1)]);
    let listing = c.listing(Kind::Tools);
    let hit = manifold_catalog::search::Hit {
        exposed: "up__a".into(),
        upstream: 0,
        score: 1.5,
        title: None,
        summary: "does a".into(),
    };
    let listed = Listed {
        added: vec!["up__a".into()],
        evicted: vec![],
    };
    let r: Value =
        serde_json::from_str(&result(std::slice::from_ref(&hit), listing, &listed, false)).unwrap();
    assert_eq!(r["structuredContent"]["added"], json!(["up__a"]));
    assert!(r["structuredContent"]["tools"][0]
        .get("definition")
        .is_none());
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("up__a: does a"));
    let r: Value =
        serde_json::from_str(&result(&[hit], listing, &Listed::default(), true)).unwrap();
    assert_eq!(
        r["structuredContent"]["tools"][0]["definition"]["name"],
        "up__a"
    );
}
