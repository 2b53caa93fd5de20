//! Building a catalog from the upstreams' slices, and routing lookups in it.
//!
//! One file: the merge (naming, collisions, pages) and the lookups it serves share the
//! catalog's layout, which changes in both places at once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_config::{NameFilter, NameSettings, UpstreamConfig};
use manifold_protocol::RawObject;
use serde_json::value::RawValue;

use crate::listing::{Item, Kind, Listing, NameOrigin, KINDS};
use crate::pins::{Drift, Pinning};
use crate::skills::{self, SkillFile};
use crate::{naming, rewrite, uri};

/// What the configuration says about an upstream's place in the catalog.
#[derive(Debug, Clone)]
pub struct UpstreamDef {
    pub key: String,
    /// Sanitized; empty means names are exposed without a prefix.
    pub prefix: String,
    pub uri_prefix: String,
    pub tools: NameFilter,
    pub prompts: NameFilter,
    /// Request timeouts of single tools, by original name.
    pub tool_timeouts: std::collections::BTreeMap<String, std::time::Duration>,
    /// Its pins, when `[pinning]` is configured: its tools and prompts are checked against
    /// them at every catalog build.
    pub pinning: Option<Arc<Pinning>>,
    /// Whether `/readyz` waits for it (`required`).
    pub required: bool,
    /// Removed by a configuration reload. Its place stays (an upstream's index never
    /// changes while Manifold runs), but it lists nothing and claims no prefix.
    pub retired: bool,
}

impl UpstreamDef {
    pub fn from_config(cfg: &UpstreamConfig) -> Self {
        let prefix = naming::sanitize(&cfg.prefix);
        let uri_prefix = match cfg.uri_prefix.as_deref() {
            Some("") => String::new(),
            Some(p) => uri::uri_prefix(p),
            None if cfg.prefix.is_empty() => uri::uri_prefix(&cfg.key),
            None => uri::uri_prefix(&cfg.prefix),
        };
        Self {
            key: cfg.key.clone(),
            prefix,
            uri_prefix,
            tools: cfg.tools.clone(),
            prompts: cfg.prompts.clone(),
            tool_timeouts: cfg.tool_timeouts.clone(),
            pinning: None,
            required: cfg.required,
            retired: false,
        }
    }

    /// An upstream keyed `key` with its defaults (prefix and URI prefix from the key, no
    /// filters, no pins): what tests and benchmarks build catalogs of.
    pub fn for_key(key: &str) -> Self {
        Self {
            key: key.to_owned(),
            prefix: naming::sanitize(key),
            uri_prefix: uri::uri_prefix(key),
            tools: NameFilter::default(),
            prompts: NameFilter::default(),
            tool_timeouts: Default::default(),
            pinning: None,
            required: false,
            retired: false,
        }
    }

    /// The same upstream, removed by a reload: it keeps its key (for logs and metrics) and
    /// nothing else.
    pub fn retire(&self) -> Self {
        Self {
            key: self.key.clone(),
            prefix: String::new(),
            uri_prefix: String::new(),
            tools: NameFilter::default(),
            prompts: NameFilter::default(),
            tool_timeouts: Default::default(),
            pinning: None,
            required: false,
            retired: true,
        }
    }

    /// Checks that no two upstreams share a name prefix or a URI prefix: either would make
    /// every name of one a possible collision with the other's.
    pub fn validate_all(defs: &[UpstreamDef]) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        for (i, a) in defs.iter().enumerate() {
            for b in &defs[i + 1..] {
                if !a.prefix.is_empty() && a.prefix == b.prefix {
                    problems.push(format!(
                        "upstreams {:?} and {:?} both use the name prefix {:?}; set `prefix` on one",
                        a.key, b.key, a.prefix
                    ));
                }
                if a.uri_prefix == b.uri_prefix && a.uri_prefix.is_empty() {
                    problems.push(format!(
                        "upstreams {:?} and {:?} both expose their resource URIs unchanged (uri_prefix = \"\"); only one may",
                        a.key, b.key
                    ));
                } else if a.uri_prefix == b.uri_prefix {
                    problems.push(format!(
                        "upstreams {:?} and {:?} both map to the resource URI prefix {:?}; set `prefix` or `uri_prefix` on one",
                        a.key, b.key, a.uri_prefix
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// What an upstream offered the last time its catalog was fetched.
#[derive(Debug, Default)]
pub struct UpstreamSlice {
    pub tools: Vec<Box<RawValue>>,
    pub prompts: Vec<Box<RawValue>>,
    pub resources: Vec<Box<RawValue>>,
    pub templates: Vec<Box<RawValue>>,
    /// Its skills (`skills/list`), when it declares the skills extension.
    pub skills: Vec<Box<RawValue>>,
    /// The `capabilities` object of its initialize result (session era) or of its
    /// `server/discover` result (stateless era).
    pub capabilities: Option<Box<RawValue>>,
    /// The revision Manifold speaks with it; its era is [`UpstreamSlice::era`].
    pub protocol_version: String,
    /// The `instructions` of its initialize or `server/discover` result, if any.
    pub instructions: Option<String>,
    /// Its name and version as it gave them (`serverInfo` of its initialize result, or the
    /// `io.modelcontextprotocol/serverInfo` of its `server/discover` result's `_meta`).
    pub server_info: Option<Box<RawValue>>,
    /// The caching hints of each list as the upstream gave them (by [`Kind::index`]): `None`
    /// when it gave none (every session-era upstream), or the list was not fetched.
    pub hints: [Option<CacheHint>; KINDS],
    /// When each list was fetched (by [`Kind::index`]; the time its first page was asked
    /// for), for its hint's freshness.
    pub fetched: [Option<Instant>; KINDS],
}

/// What a stateless-era upstream said about caching one of its lists (`ttlMs` and
/// `cacheScope`), over every page of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    /// The smallest `ttlMs` of its pages (a page without one counts as 0: immediately stale).
    pub ttl_ms: u64,
    /// Whether any page said `cacheScope: "private"`.
    pub private: bool,
}

impl CacheHint {
    /// The hint of a list made of pages with these hints, in order.
    pub fn combine(pages: impl IntoIterator<Item = CacheHint>) -> Option<CacheHint> {
        pages.into_iter().reduce(|a, b| CacheHint {
            ttl_ms: a.ttl_ms.min(b.ttl_ms),
            private: a.private || b.private,
        })
    }
}

impl UpstreamSlice {
    /// The caching hint of list `kind`, if the upstream gave one.
    pub fn hint(&self, kind: Kind) -> Option<CacheHint> {
        self.hints[kind.index()]
    }

    /// Until when list `kind` is fresh by its hint: `None` when it has no hint with a
    /// positive `ttlMs` (a list without a time to live is only fetched again when the
    /// upstream says it changed).
    pub fn fresh_until(&self, kind: Kind) -> Option<Instant> {
        let hint = self.hint(kind).filter(|h| h.ttl_ms > 0)?;
        let fetched = self.fetched[kind.index()]?;
        Some(fetched + Duration::from_millis(hint.ttl_ms))
    }

    /// The protocol era Manifold speaks with it (`None` before any handshake).
    pub fn era(&self) -> Option<manifold_protocol::version::Era> {
        manifold_protocol::version::era_of(&self.protocol_version)
    }

    /// Whether `other` offers the same lists with the same hints (what a catalog refresh
    /// that changes nothing finds).
    pub fn same_lists(&self, other: &UpstreamSlice) -> bool {
        fn same(a: &[Box<RawValue>], b: &[Box<RawValue>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.get() == y.get())
        }
        Kind::ALL
            .into_iter()
            .all(|k| same(self.items(k), other.items(k)))
            && self.hints == other.hints
    }

    fn items(&self, kind: Kind) -> &[Box<RawValue>] {
        match kind {
            Kind::Tools => &self.tools,
            Kind::Prompts => &self.prompts,
            Kind::Resources => &self.resources,
            Kind::ResourceTemplates => &self.templates,
            Kind::Skills => &self.skills,
        }
    }

    /// The settings object it declared for extension `id` (`capabilities.extensions`), as
    /// JSON text.
    pub fn extension(&self, id: &str) -> Option<String> {
        let caps = RawObject::parse(self.capabilities.as_deref()?.get()).ok()?;
        let extensions = RawObject::parse(caps.get("extensions")?).ok()?;
        extensions
            .get(id)
            .filter(|v| *v != "null")
            .map(str::to_owned)
    }

    /// Whether the upstream declared `name.feature` as true (e.g. `resources.subscribe`).
    pub fn has_feature(&self, name: &str, feature: &str) -> bool {
        self.capabilities
            .as_deref()
            .and_then(|c| RawObject::parse(c.get()).ok())
            .and_then(|c| {
                c.get(name)
                    .and_then(|v| RawObject::parse(v).ok())
                    .map(|o| o.get(feature) == Some("true"))
            })
            .unwrap_or(false)
    }

    /// Whether the upstream declared `name.feature` at all (an object, e.g. `tasks.list`).
    pub fn has_feature_object(&self, name: &str, feature: &str) -> bool {
        self.capabilities
            .as_deref()
            .and_then(|c| RawObject::parse(c.get()).ok())
            .and_then(|c| {
                c.get(name)
                    .and_then(|v| RawObject::parse(v).ok())
                    .map(|o| o.get(feature).is_some_and(|v| v != "null" && v != "false"))
            })
            .unwrap_or(false)
    }

    /// Whether the upstream declared capability `name` (e.g. "completions", "logging").
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities
            .as_deref()
            .and_then(|c| RawObject::parse(c.get()).ok())
            .is_some_and(|c| c.get(name).is_some_and(|v| v != "null"))
    }
}

/// Health of an upstream as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamState {
    Starting,
    Up,
    /// Not serving; calls to its entries fail at once with `reason`.
    Down {
        reason: String,
    },
}

/// Two or more entries wanting the same exposed name. None of them is exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub kind: Kind,
    pub exposed: String,
    /// (upstream key, original name) of every claimant.
    pub owners: Vec<(String, String)>,
}

/// The result of looking up an exposed name.
#[derive(Debug)]
pub enum Resolved<'a> {
    Found(&'a Item),
    Ambiguous(&'a Collision),
    /// Held back because its definition does not match its pin (or it has none).
    Held(&'a Drift),
    Unknown,
}

/// An immutable merged catalog.
#[derive(Debug)]
pub struct Catalog {
    generation: u64,
    defs: Arc<[UpstreamDef]>,
    states: Vec<UpstreamState>,
    slices: Vec<Option<Arc<UpstreamSlice>>>,
    lists: [Listing; KINDS],
    /// Every file a listed skill entry names, by its exposed URI.
    skill_files: HashMap<String, SkillFile>,
    uri_prefixes: HashMap<String, usize>,
    /// The upstream whose URIs are exposed unchanged, if any.
    unprefixed: Option<usize>,
    collisions: Vec<Collision>,
    /// Entries an upstream listed without their name or URI; reported by `check`.
    malformed: Vec<String>,
    /// Tools and prompts that do not match their pins, held or served.
    drift: Vec<Drift>,
}

/// What a build finds besides the items it lists.
#[derive(Default)]
struct Findings {
    malformed: Vec<String>,
    drift: Vec<Drift>,
}

impl Catalog {
    /// Merges `slices` (indexed like `defs`; `None` = never fetched) into a catalog.
    pub fn build(
        defs: Arc<[UpstreamDef]>,
        names: &NameSettings,
        page_size: usize,
        generation: u64,
        states: Vec<UpstreamState>,
        slices: Vec<Option<Arc<UpstreamSlice>>>,
    ) -> Self {
        let mut collisions = Vec::new();
        let mut found = Findings::default();
        let lists = Kind::ALL.map(|kind| {
            let items = merge_kind(kind, &defs, names, &slices, &mut found);
            let items = withhold_collisions(kind, items, &defs, &mut collisions);
            Listing::new(kind, items, page_size, generation)
        });
        let skill_files = skills::index(lists[Kind::Skills.index()].items());
        let uri_prefixes = defs
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.uri_prefix.is_empty() && !d.retired)
            .map(|(i, d)| (d.uri_prefix.clone(), i))
            .collect();
        let unprefixed = defs
            .iter()
            .position(|d| d.uri_prefix.is_empty() && !d.retired);
        Self {
            generation,
            defs,
            states,
            slices,
            lists,
            skill_files,
            uri_prefixes,
            unprefixed,
            collisions,
            malformed: found.malformed,
            drift: found.drift,
        }
    }

    /// An empty catalog for the given upstreams, all starting.
    pub fn empty(defs: Arc<[UpstreamDef]>, names: &NameSettings, page_size: usize) -> Self {
        let n = defs.len();
        Self::build(
            defs,
            names,
            page_size,
            0,
            vec![UpstreamState::Starting; n],
            vec![None; n],
        )
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn defs(&self) -> &Arc<[UpstreamDef]> {
        &self.defs
    }

    pub fn state(&self, upstream: usize) -> &UpstreamState {
        &self.states[upstream]
    }

    pub fn states(&self) -> &[UpstreamState] {
        &self.states
    }

    pub fn slice(&self, upstream: usize) -> Option<&Arc<UpstreamSlice>> {
        self.slices.get(upstream).and_then(Option::as_ref)
    }

    pub fn slices(&self) -> &[Option<Arc<UpstreamSlice>>] {
        &self.slices
    }

    pub fn listing(&self, kind: Kind) -> &Listing {
        &self.lists[kind as usize]
    }

    pub fn collisions(&self) -> &[Collision] {
        &self.collisions
    }

    pub fn malformed(&self) -> &[String] {
        &self.malformed
    }

    /// Tools and prompts whose definitions do not match their pins (or that have none), in
    /// listing order; those with `held` set are in no listing.
    pub fn drift(&self) -> &[Drift] {
        &self.drift
    }

    /// The file a listed skill entry names under exposed URI `exposed`, with what a read of
    /// it must match.
    pub fn skill_file(&self, exposed: &str) -> Option<&SkillFile> {
        self.skill_files.get(exposed)
    }

    /// Whether any listed skill entry names a file: when none does, no read needs verifying.
    pub fn has_skill_files(&self) -> bool {
        !self.skill_files.is_empty()
    }

    /// The held skill whose directory holds the exposed URI `exposed` (its SKILL.md, a file,
    /// the directory), if any: requests naming it are refused.
    pub fn held_skill(&self, exposed: &str) -> Option<&Drift> {
        skills::held(&self.drift, exposed)
    }

    /// Looks up an exposed tool or prompt name.
    pub fn resolve_name(&self, kind: Kind, exposed: &str) -> Resolved<'_> {
        if let Some(item) = self.listing(kind).get(exposed) {
            return Resolved::Found(item);
        }
        match self
            .collisions
            .iter()
            .find(|c| c.kind == kind && c.exposed == exposed)
        {
            Some(c) => Resolved::Ambiguous(c),
            None => self
                .drift
                .iter()
                .find(|d| d.held && d.kind == kind && d.exposed == exposed)
                .map_or(Resolved::Unknown, Resolved::Held),
        }
    }

    /// The name upstream `upstream` calls `original` is exposed under, if it is exposed.
    pub fn exposed_name(&self, kind: Kind, upstream: usize, original: &str) -> Option<&str> {
        self.listing(kind)
            .items()
            .iter()
            .find(|i| i.upstream == upstream && i.original == original)
            .map(|i| i.exposed.as_str())
    }

    /// The upstream and original URI behind an exposed URI (or URI template): by its
    /// prefix, or, without a known one, the upstream whose URIs are exposed unchanged.
    /// A `ui://` URI keeps its scheme: its original is made anew, hence the `Cow`.
    pub fn resolve_uri<'u>(&self, exposed: &'u str) -> Option<(usize, Cow<'u, str>)> {
        let prefixed = uri::split(exposed)
            .and_then(|(prefix, original)| self.uri_prefixes.get(prefix).map(|&i| (i, original)));
        prefixed.or_else(|| self.unprefixed.map(|i| (i, Cow::Borrowed(exposed))))
    }
}

fn merge_kind(
    kind: Kind,
    defs: &[UpstreamDef],
    names: &NameSettings,
    slices: &[Option<Arc<UpstreamSlice>>],
    found: &mut Findings,
) -> Vec<Item> {
    let mut items = Vec::new();
    for (upstream, (def, slice)) in defs.iter().zip(slices).enumerate() {
        let Some(slice) = slice.as_ref().filter(|_| !def.retired) else {
            continue;
        };
        for raw in slice.items(kind) {
            match expose_item(kind, def, names, raw) {
                Ok(Some((exposed, original, ..))) if shadowed(defs, def, &exposed) => {
                    found.malformed.push(format!(
                        "{}: its resource URI {original:?} starts with another upstream's URI \
                         prefix and would be routed there; give it a uri_prefix",
                        def.key
                    ));
                }
                Ok(Some((exposed, original, origin, text))) => {
                    let task_required = kind == Kind::Tools && requires_task(&text);
                    let item = Item {
                        exposed,
                        original,
                        upstream,
                        origin,
                        raw: text,
                        task_required,
                    };
                    if passes_pin(def, kind, &item, raw.get(), found) {
                        items.push(item);
                    }
                }
                Ok(None) => {}
                Err(problem) => found.malformed.push(format!("{}: {problem}", def.key)),
            }
        }
    }
    items
}

/// Whether `item` may be listed as far as its pin goes (`raw`: its definition as the upstream
/// listed it). A drift from its pin is recorded, held or not.
fn passes_pin(def: &UpstreamDef, kind: Kind, item: &Item, raw: &str, found: &mut Findings) -> bool {
    let Some(pinning) = def.pinning.as_deref() else {
        return true;
    };
    if !matches!(kind, Kind::Tools | Kind::Prompts | Kind::Skills) {
        return true;
    }
    match pinning.check(kind, item.upstream, &item.original, &item.exposed, raw) {
        Ok(None) => true,
        Ok(Some(drift)) => {
            let held = drift.held;
            found.drift.push(drift);
            !held
        }
        Err(e) => {
            let problem = format!("{}: {:?} cannot be digested: {e}", def.key, item.original);
            found.malformed.push(problem);
            false
        }
    }
}

/// Whether a URI exposed unchanged (the upstream has no URI prefix) would be taken for one
/// of another upstream's.
fn shadowed(defs: &[UpstreamDef], def: &UpstreamDef, exposed: &str) -> bool {
    def.uri_prefix.is_empty()
        && uri::split(exposed)
            .is_some_and(|(prefix, _)| defs.iter().any(|d| d.uri_prefix == prefix && !d.retired))
}

type Exposed = (String, String, NameOrigin, Box<str>);

/// Namespaces one item; `Ok(None)` when the config filters it out.
fn expose_item(
    kind: Kind,
    def: &UpstreamDef,
    names: &NameSettings,
    raw: &RawValue,
) -> Result<Option<Exposed>, String> {
    let key = kind.id_key();
    let mut obj = RawObject::parse(raw.get())
        .map_err(|_| format!("a {} entry is not an object", kind.result_key()))?;
    let original = obj
        .get_str(key)
        .ok_or_else(|| format!("a {} entry has no string {key:?}", kind.result_key()))?
        .into_owned();
    let (exposed, origin) = match kind {
        Kind::Tools | Kind::Prompts => {
            let filter = if kind == Kind::Tools {
                &def.tools
            } else {
                &def.prompts
            };
            if !filter.admits(&original) {
                return Ok(None);
            }
            let rename = filter.rename.get(&original).map(String::as_str);
            naming::exposed_name(names, &def.prefix, &original, rename)
        }
        Kind::Resources | Kind::ResourceTemplates | Kind::Skills => (
            uri::expose(&def.uri_prefix, &original),
            NameOrigin::Prefixed,
        ),
    };
    if kind == Kind::Skills {
        skills::check_entry(&obj)?;
        let text = skills::expose_entry(raw.get(), &def.uri_prefix);
        let text = text.unwrap_or_else(|| raw.get().to_owned());
        return Ok(Some((exposed, original, origin, text.into())));
    }
    obj.set_str(key, &exposed);
    // A tool bound to an app names the app's resource by the URI the host will read.
    let meta = (kind == Kind::Tools)
        .then(|| obj.get("_meta"))
        .flatten()
        .and_then(|meta| rewrite::ui_meta(meta, &def.uri_prefix));
    if let Some(meta) = meta {
        obj.set_raw("_meta", meta);
    }
    Ok(Some((exposed, original, origin, obj.to_text().into())))
}

/// Removes every item whose exposed name is claimed more than once and records why.
fn withhold_collisions(
    kind: Kind,
    items: Vec<Item>,
    defs: &[UpstreamDef],
    collisions: &mut Vec<Collision>,
) -> Vec<Item> {
    if kind.by_uri() {
        return items;
    }
    let mut count: HashMap<&str, usize> = HashMap::new();
    for item in &items {
        *count.entry(item.exposed.as_str()).or_default() += 1;
    }
    let mut clashing: Vec<String> = count
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(name, _)| name.to_owned())
        .collect();
    if clashing.is_empty() {
        return items;
    }
    clashing.sort();
    for exposed in &clashing {
        let owners = items
            .iter()
            .filter(|i| &i.exposed == exposed)
            .map(|i| (defs[i.upstream].key.clone(), i.original.clone()))
            .collect();
        collisions.push(Collision {
            kind,
            exposed: exposed.clone(),
            owners,
        });
    }
    items
        .into_iter()
        .filter(|i| clashing.binary_search(&i.exposed).is_err())
        .collect()
}

/// Whether a tool's definition (JSON text) says it runs only as a task
/// (`execution.taskSupport: "required"`).
fn requires_task(tool: &str) -> bool {
    if memchr::memmem::find(tool.as_bytes(), b"\"taskSupport\"").is_none() {
        return false;
    }
    let Ok(tool) = manifold_protocol::RawObject::parse(tool) else {
        return false;
    };
    tool.get("execution")
        .and_then(|e| manifold_protocol::RawObject::parse(e).ok())
        .and_then(|e| e.get_str("taskSupport").map(|s| s == "required"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests;
