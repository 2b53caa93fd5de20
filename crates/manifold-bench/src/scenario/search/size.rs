//! What a host reads at the start of a session: `tools/list` of a 1,000-tool catalog whole,
//! against a list with discovery (a few pinned tools and `find_tools`), and what one search
//! adds. Sizes are of the result body (`{"tools":[...]}`, as Manifold serializes its pages);
//! tokens are estimated as bytes / 4.

use anyhow::{bail, Result};
use manifold_catalog::{Kind, SearchIndex};
use serde_json::{json, Value};

use super::corpus::Corpus;
use super::generate;

/// The tools pinned in every session's list in this estimate: a plausible handful.
const PINNED: [&str; 5] = [
    "github__search_issues",
    "slack__slack_send_message",
    "gmail__search_emails",
    "filesystem__read_file",
    "gdrive__search_files",
];

/// The search that stands for a host's first use of `find_tools`.
const FIRST_SEARCH: &str = "open a new issue for the login bug";

/// How many tools that search adds.
const FOUND: usize = 5;

/// A definition of the discovery tool, for its size: what the session integration ships may
/// word it differently.
pub fn find_tools_definition() -> Value {
    json!({
        "name": "find_tools",
        "description": "Search the tools of every connected server by what you want to do. \
            The best matches are added to your tool list and can be called right away.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "The task, in plain words" },
                "k": { "type": "integer", "description": "How many tools to add (default 5)", "minimum": 1, "maximum": 20 },
                "upstream": { "type": "string", "description": "Only tools of this server" },
            },
            "required": ["query"],
        },
    })
}

pub fn measure(seed: u64) -> Result<Value> {
    let generated = generate::scaled(seed, 1_000)?;
    let corpus = Corpus::of(&[], &generated)?;
    let listing = corpus.catalog.listing(Kind::Tools);
    let whole = listing
        .page(None)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .len();
    let mut pinned: Vec<Value> = Vec::new();
    for name in PINNED {
        let Some(item) = listing.get(name) else {
            bail!("pinned tool {name} is not in the 1,000-tool catalog");
        };
        pinned.push(serde_json::from_str(&item.raw)?);
    }
    pinned.push(find_tools_definition());
    let with_discovery = body(&pinned).len();
    let index = SearchIndex::build(&corpus.catalog);
    let hits = index.search(FIRST_SEARCH, FOUND, &|_| true);
    let answer: Vec<Value> = (hits.iter())
        .map(|h| json!({ "name": h.exposed, "title": h.title, "description": h.summary }))
        .collect();
    let answer =
        json!({ "content": [{ "type": "text", "text": Value::Array(answer).to_string() }] });
    for hit in &hits {
        if let Some(item) = listing.get(&hit.exposed) {
            pinned.push(serde_json::from_str(&item.raw)?);
        }
    }
    let after_search = body(&pinned).len();
    let tokens = |bytes: usize| bytes.div_ceil(4);
    Ok(json!({
        "tools": listing.items().len(),
        "token_estimate": "bytes / 4",
        "without_discovery": { "bytes": whole, "tokens": tokens(whole) },
        "with_discovery": {
            "pinned": PINNED,
            "bytes": with_discovery,
            "tokens": tokens(with_discovery),
        },
        "after_first_search": {
            "query": FIRST_SEARCH,
            "k": FOUND,
            "found": hits.iter().map(|h| h.exposed.as_str()).collect::<Vec<_>>(),
            "list_bytes": after_search,
            "list_tokens": tokens(after_search),
            "find_tools_result_bytes": answer.to_string().len(),
        },
        "find_tools_definition_bytes": find_tools_definition().to_string().len(),
    }))
}

fn body(tools: &[Value]) -> String {
    json!({ "tools": tools }).to_string()
}
