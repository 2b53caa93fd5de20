use std::sync::Arc;

use manifold_config::NameSettings;
use serde_json::value::RawValue;

use super::*;
use crate::build::{UpstreamDef, UpstreamSlice, UpstreamState};

mod reference;

fn def(key: &str) -> UpstreamDef {
    UpstreamDef::for_key(key)
}

/// A tool's JSON: its name, description and, optionally, properties `(name, description)`.
fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> String {
    let properties: serde_json::Map<String, serde_json::Value> = params
        .iter()
        .map(|(p, d)| {
            (
                (*p).to_owned(),
                serde_json::json!({"type": "string", "description": d}),
            )
        })
        .collect();
    serde_json::json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
    })
    .to_string()
}

fn slice(tools: &[String], instructions: Option<&str>) -> Option<Arc<UpstreamSlice>> {
    Some(Arc::new(UpstreamSlice {
        tools: tools
            .iter()
            .map(|t| RawValue::from_string(t.clone()).unwrap())
            .collect(),
        instructions: instructions.map(str::to_owned),
        ..UpstreamSlice::default()
    }))
}

fn catalog(upstreams: &[(&str, Option<Arc<UpstreamSlice>>)]) -> Catalog {
    let defs: Vec<UpstreamDef> = upstreams.iter().map(|(k, _)| def(k)).collect();
    let names = NameSettings {
        separator: "__".into(),
        max_length: 64,
    };
    let n = defs.len();
    let slices = upstreams.iter().map(|(_, s)| s.clone()).collect();
    Catalog::build(
        defs.into(),
        &names,
        0,
        1,
        vec![UpstreamState::Up; n],
        slices,
    )
}

fn tracker() -> Option<Arc<UpstreamSlice>> {
    slice(
        &[
            tool(
                "create_issue",
                "Create a new issue in a repository",
                &[("title", "Issue title")],
            ),
            tool(
                "close_issue",
                "Close an issue",
                &[("number", "Issue number")],
            ),
            tool(
                "search_issues",
                "Search issues by text",
                &[("query", "Search text")],
            ),
            tool("list_repos", "List repositories you can see", &[]),
        ],
        Some("Issues and repositories of the tracker."),
    )
}

fn files() -> Option<Arc<UpstreamSlice>> {
    slice(
        &[
            tool(
                "readFile",
                "Read a file's contents",
                &[("path", "Path of the file")],
            ),
            tool(
                "writeFile",
                "Write text to a file, replacing it",
                &[("path", "Path")],
            ),
            tool("deleteFile", "Delete a file", &[("path", "Path")]),
            tool(
                "list-directory",
                "List the entries of a folder",
                &[("path", "Path")],
            ),
        ],
        None,
    )
}

fn names(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.exposed.as_str()).collect()
}

fn all(_: &Item) -> bool {
    true
}

#[test]
fn tokenizer_splits_folds_stems_and_drops_stop_words() {
    assert_eq!(text::terms_of("getS3Object"), ["get", "s3", "3", "object"]);
    assert_eq!(
        text::terms_of("HTTPServer list-files"),
        ["http", "server", "list", "fil"]
    );
    assert_eq!(text::terms_of("create_issue"), ["creat", "issu"]);
    assert_eq!(
        text::terms_of("jira.issues.search"),
        ["jira", "issu", "search"]
    );
    assert_eq!(
        text::terms_of("Close the issues of a repo"),
        ["clos", "issu", "repo"]
    );
    assert_eq!(
        text::terms_of("Résumé CAFÉ naïve"),
        ["resum", "caf", "naiv"]
    );
    assert_eq!(
        text::terms_of("sha256 of base64"),
        ["sha", "sha256", "256", "bas", "base64", "64"]
    );
    assert_eq!(text::terms_of("  --  "), Vec::<String>::new());
}

#[test]
fn stemmer_makes_forms_of_a_word_meet() {
    let same = |words: &[&str]| {
        let stems: Vec<String> = words.iter().map(|w| stem::stem(w)).collect();
        assert!(
            stems.windows(2).all(|w| w[0] == w[1]),
            "{words:?} -> {stems:?}"
        );
    };
    same(&["create", "creates", "created", "creating", "creation"]);
    same(&["issue", "issues"]);
    same(&["query", "queries", "queried"]);
    same(&["entry", "entries"]);
    same(&["stop", "stopped", "stopping", "stops"]);
    same(&["delete", "deleted", "deleting", "deletion"]);
    same(&["share", "shared", "sharing"]);
    same(&["branch", "branches"]);
    same(&["id", "ids"]);
    for kept in [
        "add", "added", "status", "string", "aws", "dns", "billing", "alias",
    ] {
        let s = stem::stem(kept);
        assert!(kept.starts_with(&s) && s.len() >= 3, "{kept} -> {s}");
    }
    assert_eq!(stem::stem("added"), "add");
    assert_eq!(stem::stem("billing"), "bill");
    assert_eq!(stem::stem("status"), "status");
    assert_eq!(stem::stem("aws"), "aws");
}

#[test]
fn stop_words_are_sorted_for_binary_search() {
    assert!(text::STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    assert!(text::is_stop_word("the") && text::is_stop_word("yourself"));
    assert!(!text::is_stop_word("list") && !text::is_stop_word("get"));
}

#[test]
fn ranks_by_name_then_description_with_deterministic_ties() {
    let c = catalog(&[("gh", tracker()), ("fs", files())]);
    let index = SearchIndex::build(&c);
    assert_eq!(index.len(), 8);
    let hits = index.search("open a new issue", 3, &all);
    assert_eq!(hits[0].exposed, "gh__create_issue", "{hits:?}");
    assert_eq!(hits[0].summary, "Create a new issue in a repository");
    assert_eq!(hits[0].upstream, 0);
    let hits = index.search("delete that file", 2, &all);
    assert_eq!(names(&hits)[0], "fs__deleteFile", "{hits:?}");
    let hits = index.search("what is in this folder", 1, &all);
    assert_eq!(names(&hits), ["fs__list-directory"]);
    // "path" is a parameter of all four file tools, with the same weight in each but for
    // their lengths; equal scores go by name.
    let hits = index.search("path", 10, &all);
    assert_eq!(hits.len(), 4);
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    for w in hits.windows(2).filter(|w| w[0].score == w[1].score) {
        assert!(w[0].exposed < w[1].exposed, "{hits:?}");
    }
    assert!(index.search("the of and", 5, &all).is_empty());
    assert!(index.search("issue", 0, &all).is_empty());
    assert!(index.search("kubernetes", 5, &all).is_empty());
}

#[test]
fn synonyms_and_joined_words_bridge_the_vocabulary() {
    let c = catalog(&[("gh", tracker()), ("fs", files()), ("rocketchat", files())]);
    let index = SearchIndex::build(&c);
    // No tool says "remove", "bug" or "folder" in its name.
    assert_eq!(
        index.search("remove a file", 1, &all)[0].exposed,
        "fs__deleteFile"
    );
    assert_eq!(
        index.search("log a new bug", 1, &all)[0].exposed,
        "gh__create_issue"
    );
    let hits = index.search("what is in this folder", 2, &all);
    assert_eq!(
        names(&hits),
        ["fs__list-directory", "rocketchat__list-directory"]
    );
    // "rocket chat" finds the upstream whose key writes it as one word.
    let hits = index.search("delete a file on rocket chat", 1, &all);
    assert_eq!(names(&hits), ["rocketchat__deleteFile"]);
    let own: Vec<String> = query::terms("remove the files")
        .into_iter()
        .map(|q| q.term)
        .collect();
    assert_eq!(own[..2], ["remov", "fil"]);
    assert!(own.contains(&"delet".to_owned()), "{own:?}");
}

#[test]
fn upstream_instructions_and_annotations_count() {
    let mut read =
        serde_json::from_str::<serde_json::Value>(&tool("fetch", "Fetch it", &[])).unwrap();
    read["annotations"] = serde_json::json!({"readOnlyHint": true, "title": "Fetch a page"});
    let mut write =
        serde_json::from_str::<serde_json::Value>(&tool("store", "Store it", &[])).unwrap();
    write["annotations"] = serde_json::json!({"destructiveHint": true, "readOnlyHint": false});
    let web = slice(
        &[read.to_string(), write.to_string()],
        Some("Browses the web: pages and links."),
    );
    let c = catalog(&[("web", web), ("fs", files())]);
    let index = SearchIndex::build(&c);
    let hits = index.search("destructive", 5, &all);
    assert_eq!(names(&hits), ["web__store"]);
    // "read-only" asks for the hint (and for "read", which `fs__readFile` says).
    for query in ["read-only", "read only", "readonly"] {
        let hits = index.search(query, 5, &all);
        let fetch = hits.iter().find(|h| h.exposed == "web__fetch");
        assert_eq!(
            fetch.unwrap().title.as_deref(),
            Some("Fetch a page"),
            "{query}"
        );
        assert!(!names(&hits).contains(&"web__store"), "{query}: {hits:?}");
    }
    // The hint's words are not the tool's: "only" alone finds nothing.
    assert!(index.search("only", 5, &all).is_empty());
    let hits = index.search("fetch a page", 1, &all);
    assert_eq!(names(&hits), ["web__fetch"]);
    // Both tools of `web` match "pages" through the instructions they share.
    let hits = index.search("pages", 5, &all);
    assert_eq!(names(&hits), ["web__fetch", "web__store"], "{hits:?}");
}

#[test]
fn hidden_tools_never_appear_and_leave_scores_unchanged() {
    let mut secret = tracker();
    Arc::get_mut(secret.as_mut().unwrap())
        .unwrap()
        .tools
        .push(RawValue::from_string(tool("payroll_export", "Export the payroll", &[])).unwrap());
    let with = SearchIndex::build(&catalog(&[("gh", secret), ("fs", files())]));
    let without = SearchIndex::build(&catalog(&[("gh", tracker()), ("fs", files())]));
    let hide = |item: &Item| item.exposed != "gh__payroll_export";
    // Even as the only match, a hidden tool is not returned.
    assert!(with.search("payroll", 5, &hide).is_empty());
    assert_eq!(
        names(&with.search("payroll", 5, &all)),
        ["gh__payroll_export"]
    );
    for query in [
        "export the payroll issues",
        "create issue",
        "list files in a folder",
        "path",
    ] {
        assert_eq!(
            with.search(query, 10, &hide),
            without.search(query, 10, &all),
            "{query}"
        );
    }
    // Hiding a whole upstream.
    let only_fs = |item: &Item| item.upstream == 1;
    let hits = with.search("issue file", 10, &only_fs);
    assert!(
        !hits.is_empty() && hits.iter().all(|h| h.upstream == 1),
        "{hits:?}"
    );
    assert!(with.search("anything", 5, &|_: &Item| false).is_empty());
    // A view's admission, made once, searches as the filter does; another index's finds
    // nothing.
    let view = with.admission(&hide);
    for query in ["export the payroll issues", "create issue", "payroll"] {
        assert_eq!(
            with.search_admitted(query, 10, &view),
            with.search(query, 10, &hide)
        );
    }
    assert!(without
        .search_admitted("create issue", 10, &view)
        .is_empty());
}

#[test]
fn update_reuses_unchanged_upstreams_and_equals_a_full_build() {
    let (gh, fs) = (tracker(), files());
    let first = catalog(&[("gh", gh.clone()), ("fs", fs.clone()), ("none", None)]);
    let old = SearchIndex::build(&first);
    let changed = slice(
        &[
            tool(
                "readFile",
                "Read a file's contents",
                &[("path", "Path of the file")],
            ),
            tool(
                "moveFile",
                "Move or rename a file",
                &[("from", "Old path"), ("to", "New path")],
            ),
        ],
        Some("Local files."),
    );
    let second = catalog(&[("gh", gh), ("fs", changed), ("none", None)]);
    let updated = SearchIndex::update(&old, &second);
    let full = SearchIndex::build(&second);
    assert!(
        Arc::ptr_eq(&old.segments[0], &updated.segments[0]),
        "gh reused"
    );
    assert!(
        !Arc::ptr_eq(&old.segments[1], &updated.segments[1]),
        "fs rebuilt"
    );
    assert_eq!(updated.len(), full.len());
    for query in [
        "rename a file",
        "read file",
        "create issue",
        "local",
        "path",
        "issues",
    ] {
        assert_eq!(
            updated.search(query, 10, &all),
            full.search(query, 10, &all),
            "{query}"
        );
    }
    // A new slice with the same content is a new `Arc`: rebuilt, with the same results.
    let third = catalog(&[("gh", tracker()), ("fs", fs), ("none", None)]);
    let again = SearchIndex::update(&updated, &third);
    assert!(!Arc::ptr_eq(&updated.segments[0], &again.segments[0]));
    assert_eq!(
        again.search("issue", 10, &all),
        old.search("issue", 10, &all)
    );
    assert!(again.heap_bytes() > 0);
}

#[test]
fn index_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SearchIndex>();
    check::<Hit>();
}
