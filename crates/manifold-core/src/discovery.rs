//! Tool discovery for huge catalogs (`[discovery] mode = "search"`). A session's `tools/list`
//! holds its pinned tools, the tools it found with `find_tools` (most recently used first,
//! within its budget: `max_tools`, `max_schema_bytes`), and `find_tools` itself. Found tools
//! are listed with their real names and schemas, so the host validates their arguments like
//! any listed tool's; the budget shapes what is listed, never what may be called. A request
//! without a session (the stateless era) gets the definitions in `find_tools`' result.
//!
//! The search index is built from the merged catalog on first use after each change,
//! reusing the documents of unchanged upstreams (`SearchIndex::update`); what a caller may find
//! is its team's view.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use arc_swap::ArcSwap;
use manifold_catalog::search::{Hit, SearchIndex};
use manifold_catalog::{Catalog, Item, Listing};
use manifold_config::{DiscoveryMode, DiscoverySettings, TeamConfig};
use serde_json::{json, Value};

/// The name of Manifold's own tool in a session's list.
pub const FIND_TOOLS: &str = "find_tools";
/// How many tools `find_tools` returns unless asked (`k`), and at most.
const DEFAULT_K: usize = 5;
const MOST_K: usize = 20;
/// The `_meta` member of `initialize` params with which a host chooses its own settings.
pub const META_KEY: &str = "manifold/discovery";

/// The router's part: the settings of callers without a team, and the index.
pub struct Discovery {
    /// `[discovery]`.
    settings: ArcSwap<DiscoverySettings>,
    /// Whether the configuration puts any caller in search mode.
    active: AtomicBool,
    /// Whether a host chose search mode for its session (kept across reloads).
    chosen: AtomicBool,
    /// The index of the latest catalog asked about, with its generation. Locked while it is
    /// brought up to date (a few milliseconds after a catalog change, once).
    index: Mutex<Option<(u64, Arc<SearchIndex>)>>,
}

impl Discovery {
    pub fn new(settings: DiscoverySettings, teams: &[TeamConfig]) -> Self {
        let discovery = Self {
            settings: ArcSwap::from_pointee(DiscoverySettings::default()),
            active: AtomicBool::new(false),
            chosen: AtomicBool::new(false),
            index: Mutex::new(None),
        };
        discovery.configure(settings, teams);
        discovery
    }

    /// The settings of a reloaded configuration.
    pub fn configure(&self, settings: DiscoverySettings, teams: &[TeamConfig]) {
        let search = |s: &DiscoverySettings| s.mode == DiscoveryMode::Search;
        let active = search(&settings) || teams.iter().any(|t| search(&t.discovery));
        self.settings.store(Arc::new(settings));
        self.active.store(active, Ordering::Relaxed);
    }

    /// Whether any caller may be in search mode: otherwise no request looks further (two
    /// relaxed loads).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed) || self.chosen.load(Ordering::Relaxed)
    }

    /// A host chose `settings` for its session.
    pub fn chosen(&self, settings: &DiscoverySettings) {
        if settings.mode == DiscoveryMode::Search {
            self.chosen.store(true, Ordering::Relaxed);
        }
    }

    /// The settings of callers without a team.
    pub fn anonymous(&self) -> Arc<DiscoverySettings> {
        self.settings.load_full()
    }

    /// The index of `catalog`.
    pub fn index(&self, catalog: &Catalog) -> Arc<SearchIndex> {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        match &*index {
            Some((generation, built)) if *generation == catalog.generation() => Arc::clone(built),
            previous => {
                let built = Arc::new(match previous {
                    Some((_, before)) => SearchIndex::update(before, catalog),
                    None => SearchIndex::build(catalog),
                });
                *index = Some((catalog.generation(), Arc::clone(&built)));
                built
            }
        }
    }
}

/// What one session found, most recently used last, and the settings its host chose.
#[derive(Default)]
pub struct Found {
    /// Whether `tools` holds anything: what every call looks at, without the lock.
    any: AtomicBool,
    /// Exposed names. Locked to add, touch, evict or read.
    tools: Mutex<Vec<Box<str>>>,
    /// Chosen by the host at `initialize` (`_meta["manifold/discovery"]`), over its team's,
    /// with what the host asked (the `_meta` member, as JSON text), which replicas sharing
    /// the session apply over their own base.
    chosen: OnceLock<(DiscoverySettings, Box<str>)>,
}

impl Found {
    fn tools(&self) -> MutexGuard<'_, Vec<Box<str>>> {
        self.tools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings the host chose, if any.
    pub fn chosen(&self) -> Option<&DiscoverySettings> {
        self.chosen.get().map(|(settings, _)| settings)
    }

    /// What the host asked for, as a `_meta` object's JSON text, if it chose anything.
    pub fn asked(&self) -> Option<&str> {
        self.chosen.get().map(|(_, asked)| &**asked)
    }

    /// Keeps the settings the host chose (once), with what it asked (`asked`: a `_meta`
    /// object's JSON text).
    pub fn choose(&self, settings: DiscoverySettings, asked: Box<str>) {
        let _ = self.chosen.set((settings, asked));
    }

    /// Takes `recent_first` as the found tools (another replica changed them).
    pub fn set(&self, recent_first: Vec<Box<str>>) {
        let mut tools = self.tools();
        *tools = recent_first.into_iter().rev().collect();
        self.any.store(!tools.is_empty(), Ordering::Relaxed);
    }

    /// The tool `name` was called: it becomes the most recently used.
    pub fn touch(&self, name: &str) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut tools = self.tools();
        if let Some(i) = tools.iter().position(|t| &**t == name) {
            let t = tools.remove(i);
            tools.push(t);
        }
    }

    /// Adds `names` as the most recently used; returns those that were not there.
    pub fn add(&self, names: &[&str]) -> Vec<String> {
        let mut tools = self.tools();
        let mut added = Vec::new();
        for name in names {
            match tools.iter().position(|t| &**t == *name) {
                Some(i) => {
                    let t = tools.remove(i);
                    tools.push(t);
                }
                None => {
                    tools.push((*name).into());
                    added.push((*name).to_owned());
                }
            }
        }
        self.any.store(!tools.is_empty(), Ordering::Relaxed);
        added
    }

    /// Removes `names`.
    pub fn remove(&self, names: &[String]) {
        let mut tools = self.tools();
        tools.retain(|t| !names.iter().any(|n| **n == **t));
        self.any.store(!tools.is_empty(), Ordering::Relaxed);
    }

    /// Keeps only the tools `keep` admits (an upstream's list changed); true if any went.
    pub fn prune(&self, keep: impl Fn(&str) -> bool) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let mut tools = self.tools();
        let before = tools.len();
        tools.retain(|t| keep(t));
        self.any.store(!tools.is_empty(), Ordering::Relaxed);
        tools.len() != before
    }

    /// The found tools, most recently used first.
    pub fn recent_first(&self) -> Vec<Box<str>> {
        self.tools().iter().rev().cloned().collect()
    }
}

/// What a session in search mode lists of `listing` (its view): every pinned tool, then the
/// found ones (`found`, most recently used first) while they fit the budget. Returns the
/// listed items and the found tools that did not fit (to evict).
pub fn select<'a>(
    listing: &'a Listing,
    settings: &DiscoverySettings,
    found: &[Box<str>],
) -> (Vec<&'a Item>, Vec<String>) {
    let mut listed: Vec<&Item> = listing
        .items()
        .iter()
        .filter(|i| settings.pins(&i.exposed))
        .collect();
    let mut bytes: usize = listed.iter().map(|i| i.raw.len()).sum();
    let mut evicted = Vec::new();
    for name in found {
        let Some(item) = listing.get(name) else {
            continue;
        };
        if settings.pins(&item.exposed) {
            continue;
        }
        let fits = listed.len() < settings.max_tools
            && settings
                .max_schema_bytes
                .is_none_or(|most| bytes + item.raw.len() <= most);
        if fits {
            bytes += item.raw.len();
            listed.push(item);
        } else {
            evicted.push(name.to_string());
        }
    }
    (listed, evicted)
}

/// The `tools/list` page of `listed`, with `find_tools` last.
pub fn page(listed: &[&Item], stateless: bool) -> String {
    let mut body = String::from("{\"tools\":[");
    for item in listed {
        body.push_str(&item.raw);
        body.push(',');
    }
    body.push_str(definition(stateless));
    body.push_str("]}");
    body
}

/// `find_tools` as a host sees it: for a session the tools found join its list; for a
/// request without one their definitions come in the result.
pub fn definition(stateless: bool) -> &'static str {
    static SESSION: OnceLock<String> = OnceLock::new();
    static STATELESS: OnceLock<String> = OnceLock::new();
    let (cell, then) = match stateless {
        false => (&SESSION, "The tools found are added to your tool list (you are notified that it changed): call them by name, with the arguments their schemas ask for."),
        true => (&STATELESS, "The result holds each tool found with its full definition, input schema included: call it by name, with the arguments its schema asks for."),
    };
    cell.get_or_init(|| {
        json!({
            "name": FIND_TOOLS,
            "title": "Find tools",
            "description": format!("Search every tool of the connected servers by what you want to do, in a few words. {then} A tool you know the name of can be called without searching."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What you want to do, in a few words"},
                    "k": {"type": "integer", "minimum": 1, "maximum": MOST_K, "description": "How many tools to return (default 5)"},
                    "upstream": {"type": "string", "description": "Only tools of this server (the prefix of its tools' names)"}
                },
                "required": ["query"]
            },
            "annotations": {"title": "Find tools", "readOnlyHint": true, "openWorldHint": false}
        })
        .to_string()
    })
}

/// The arguments of a `find_tools` call.
#[derive(Debug, PartialEq)]
pub struct Query {
    pub query: String,
    pub k: usize,
    pub upstream: Option<String>,
}

impl Query {
    /// From the call's `arguments` (JSON text, if any).
    pub fn parse(arguments: Option<&str>) -> Result<Self, String> {
        let args: Value = match arguments {
            Some(text) => serde_json::from_str(text).map_err(|e| e.to_string())?,
            None => Value::Null,
        };
        let query = args["query"]
            .as_str()
            .filter(|q| !q.trim().is_empty())
            .ok_or("find_tools needs \"query\": a non-empty string")?
            .to_owned();
        let k = match &args["k"] {
            Value::Null => DEFAULT_K,
            k => k
                .as_u64()
                .filter(|k| (1..=MOST_K as u64).contains(k))
                .ok_or(format!("\"k\" must be an integer from 1 to {MOST_K}"))?
                as usize,
        };
        let upstream = match &args["upstream"] {
            Value::Null => None,
            u => Some(
                u.as_str()
                    .ok_or("\"upstream\" must be a string")?
                    .to_owned(),
            ),
        };
        Ok(Self { query, k, upstream })
    }
}

/// What a `find_tools` call did to the session's list.
#[derive(Debug, Default)]
pub struct Listed {
    pub added: Vec<String>,
    pub evicted: Vec<String>,
}

/// The result of a `find_tools` call: a text for the model, and the same as structured
/// content; with `definitions` (no session), each tool's whole definition.
pub fn result(hits: &[Hit], listing: &Listing, listed: &Listed, definitions: bool) -> String {
    let mut text = match (hits.len(), definitions) {
        (0, _) => "No tool matches that; try other words.".to_owned(),
        (n, false) => format!("Found {n} tools; they are in your tool list now:"),
        (n, true) => format!("Found {n} tools (definitions in the structured result):"),
    };
    let mut tools = Vec::new();
    for hit in hits {
        let title = hit
            .title
            .as_deref()
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
        text.push_str(&format!("\n- {}{title}: {}", hit.exposed, hit.summary));
        let mut tool = json!({
            "name": hit.exposed,
            "title": hit.title,
            "description": hit.summary,
            "score": (f64::from(hit.score) * 1000.0).round() / 1000.0,
        });
        if definitions {
            if let Some(item) = listing.get(&hit.exposed) {
                tool["definition"] = serde_json::from_str(&item.raw).unwrap_or(Value::Null);
            }
        }
        tools.push(tool);
    }
    let mut structured = json!({ "tools": tools });
    if !definitions {
        structured["added"] = json!(listed.added);
        structured["evicted"] = json!(listed.evicted);
    }
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false,
    })
    .to_string()
}

/// The settings a host chose in `initialize` (`_meta` object `meta`), over `base`, with
/// what it asked (a `_meta` object holding only that member, as JSON text); an error names
/// what is wrong.
pub fn chosen(
    meta: &str,
    base: &DiscoverySettings,
) -> Result<Option<(DiscoverySettings, Box<str>)>, String> {
    let meta: Value = serde_json::from_str(meta).map_err(|e| e.to_string())?;
    let Some(asked) = meta.get(META_KEY) else {
        return Ok(None);
    };
    let text = serde_json::json!({ META_KEY: asked }).to_string().into();
    let bad = |what: &str| format!("_meta[\"{META_KEY}\"].{what}");
    let mut settings = base.clone();
    if let Some(mode) = asked.get("mode") {
        settings.mode = mode
            .as_str()
            .and_then(DiscoveryMode::parse)
            .ok_or_else(|| bad("mode must be \"off\" or \"search\""))?;
    }
    if let Some(n) = asked.get("max_tools") {
        settings.max_tools = n
            .as_u64()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| bad("max_tools must be an integer from 1 to 10000"))?
            as usize;
    }
    if let Some(n) = asked.get("max_schema_bytes") {
        settings.max_schema_bytes = Some(
            n.as_u64()
                .filter(|n| *n >= 1024)
                .ok_or_else(|| bad("max_schema_bytes must be an integer of at least 1024"))?
                as usize,
        );
    }
    if let Some(pinned) = asked.get("pinned") {
        settings.pinned = pinned
            .as_array()
            .and_then(|a| a.iter().map(|g| g.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| bad("pinned must be an array of strings"))?;
    }
    Ok(Some((settings, text)))
}

#[cfg(test)]
mod tests;
