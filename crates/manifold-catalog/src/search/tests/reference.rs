//! Searches over the reference servers' own tool lists: server-everything, server-memory,
//! server-filesystem and mcp-server-time, merged under the keys `everything`, `memory`,
//! `files` and `time`. `reference_tools.json` holds each tool's name, title, description,
//! annotations and input schema property names, and the instructions a server gives at its
//! handshake, as the pinned versions list them
//! (`tests/interop/package.json`, `tests/interop/requirements.txt`).

use super::*;

/// The four servers' tools, in the order the servers list them.
const REFERENCE_TOOLS: &str = include_str!("reference_tools.json");

fn reference_catalog() -> Catalog {
    let servers: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(REFERENCE_TOOLS).unwrap();
    let upstreams: Vec<(&str, Option<Arc<UpstreamSlice>>)> = servers
        .iter()
        .map(|(key, server)| {
            let tools: Vec<String> = (server["tools"].as_array().unwrap().iter())
                .map(|t| t.to_string())
                .collect();
            let instructions = server.get("instructions").and_then(|i| i.as_str());
            (key.as_str(), slice(&tools, instructions))
        })
        .collect();
    catalog(&upstreams)
}

/// The first five hits of `query` over the merged reference servers.
fn top5(index: &SearchIndex, query: &str) -> Vec<String> {
    (index.search(query, 5, &all).into_iter())
        .map(|h| h.exposed)
        .collect()
}

#[test]
fn one_verb_tasks_find_their_reference_tool() {
    let index = SearchIndex::build(&reference_catalog());
    assert_eq!(index.len(), 38);
    // "read" names the action here: the read-only hint most of these tools set must not make
    // it a word of theirs, nor may server-everything's instructions (which mention reading
    // and files) make it common, or "file" alone ranks the tools (file info, edits, every
    // tool of that server). The read tools lead: one in the first two, most of the five.
    for query in [
        "read a file",
        "read the contents of a file",
        "read file contents as text",
    ] {
        let hits = top5(&index, query);
        let read = |h: &String| h.starts_with("files__read_");
        assert!(hits[..2].iter().any(read), "{query}: {hits:?}");
        assert!(
            hits.iter().filter(|h| read(h)).count() >= 3,
            "{query}: {hits:?}"
        );
    }
    for (query, wanted) in [
        ("list a directory", "files__list_directory"),
        ("search files", "files__search_files"),
        ("create an entity", "memory__create_entities"),
        ("what time is it in Tokyo", "time__get_current_time"),
        ("delete an observation", "memory__delete_observations"),
    ] {
        let hits = top5(&index, query);
        assert!(hits.iter().any(|h| h == wanted), "{query}: {hits:?}");
    }
}
