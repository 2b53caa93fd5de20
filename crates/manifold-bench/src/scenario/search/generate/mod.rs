//! The generated upstreams: realistic catalogs of the kinds of servers hosts connect (issue
//! trackers, mail, chat, databases, clouds...), several of each kind, so that near-duplicate
//! tools exist across upstreams as they do in real deployments (`create_issue` on GitHub,
//! GitLab and Gitea; `send_message` on five chat servers).
//!
//! The vocabulary lives in `catalog/*.txt`, one line per statement:
//!
//! - `group NAME` starts a group of operations; `nouns issue/issues | ticket/tickets` gives
//!   the nouns an upstream may call the group's object by (`{n}` and `{ns}` in what follows).
//! - `op ID NAME HINT` is an operation: `NAME` in snake case with `{n}`/`{ns}`, `HINT` one of
//!   `r` (read-only), `w` (writes) or `d` (destructive); then `d TEXT` lines are ways of
//!   describing it (`{V}` is the upstream's display name) and `p NAME TYPE TEXT` (`p!` when
//!   required) its parameters, `TYPE` one of `s`, `i`, `n`, `b`, `a`, `o`.
//! - `upstream KEY "Display" STYLE [ann]` is an upstream: `STYLE` is how it spells names
//!   (`snake`, `camel`, `kebab`, or `prefixed` with its key), `ann` that its tools carry
//!   titles and annotations; then `i TEXT` lines are its instructions and `use GROUP
//!   [noun=N] [only=ID,..] [skip=ID,..]` the groups it offers.
//!
//! A seeded generator picks each tool's description among its variants and sometimes adds a
//! sentence of the kind real servers add; [`scaled`] makes catalogs of any size from copies
//! of the upstreams (`jira2`, `jira3`...) that each drop some operations at random.

mod spec;

use std::collections::HashSet;

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use spec::{Op, Param, Spec, Style, UpstreamSpec};

const SOURCES: [(&str, &str); 6] = [
    ("code.txt", include_str!("../catalog/code.txt")),
    ("office.txt", include_str!("../catalog/office.txt")),
    ("data.txt", include_str!("../catalog/data.txt")),
    ("ops.txt", include_str!("../catalog/ops.txt")),
    ("business.txt", include_str!("../catalog/business.txt")),
    ("upstreams.txt", include_str!("../catalog/upstreams.txt")),
];

/// Sentences real servers append to descriptions; one is added to about a quarter of them.
const ASIDES: [&str; 6] = [
    "Results are paginated; pass the returned cursor to get more.",
    "Requires a {V} API token with the right scopes.",
    "Returns JSON.",
    "Dates are ISO 8601, in UTC.",
    "Subject to {V} rate limits.",
    "Acts on the account configured for this server.",
];

/// One generated tool and the operation it performs (`issue.create`), which its
/// near-duplicates on other upstreams share.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub op: String,
    pub json: String,
}

/// One generated upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub key: String,
    pub instructions: Option<String>,
    pub tools: Vec<Tool>,
}

/// Every upstream of the vocabulary once, with all the operations it declares.
pub fn catalog(seed: u64) -> Result<Vec<Upstream>> {
    let spec = Spec::parse()?;
    let mut rng = Rng(seed);
    Ok(spec
        .upstreams
        .iter()
        .map(|u| spec.make(u, &u.key, 0.0, &mut rng))
        .collect())
}

/// Exactly `total` tools: every upstream once, then copies (`{key}2`, `{key}3`, ...) that
/// each drop about a fifth of the operations, the last upstream cut to fit.
pub fn scaled(seed: u64, total: usize) -> Result<Vec<Upstream>> {
    let spec = Spec::parse()?;
    let mut rng = Rng(seed);
    let (mut out, mut count) = (Vec::new(), 0);
    // Bounded: each round adds tools, since every upstream offers at least one operation
    // that survives a fifth dropped at random often enough; the cap is a guard.
    for copy in 1..=1000 {
        for u in &spec.upstreams {
            if count >= total {
                return Ok(out);
            }
            let (key, drop) = match copy {
                1 => (u.key.clone(), 0.0),
                n => (format!("{}{n}", u.key), 0.2),
            };
            let mut made = spec.make(u, &key, drop, &mut rng);
            made.tools.truncate(total - count);
            count += made.tools.len();
            if !made.tools.is_empty() {
                out.push(made);
            }
        }
    }
    bail!("could not reach {total} tools")
}

impl Spec {
    /// Upstream `u` under `key`, each operation dropped with probability `drop`.
    fn make(&self, u: &UpstreamSpec, key: &str, drop: f64, rng: &mut Rng) -> Upstream {
        let mut tools = Vec::new();
        let mut names = HashSet::new();
        for using in &u.uses {
            let group = &self.groups[using.group];
            let (n, ns) = &group.nouns[using.noun];
            for op in &group.ops {
                let chosen = using.only.is_empty() || using.only.contains(&op.id);
                if !chosen || using.skip.contains(&op.id) || rng.chance(drop) {
                    continue;
                }
                let words = Words {
                    n,
                    ns,
                    v: &u.display,
                };
                let tool = make_tool(u, op, &words, rng);
                // Two groups may spell an operation alike: an upstream lists a name once.
                if names.insert(tool.name.clone()) {
                    tools.push(tool);
                }
            }
        }
        let instructions = (!u.instructions.is_empty()).then(|| u.instructions.join(" "));
        Upstream {
            key: key.to_owned(),
            instructions,
            tools,
        }
    }
}

/// What the placeholders of a text stand for.
struct Words<'a> {
    n: &'a str,
    ns: &'a str,
    v: &'a str,
}

impl Words<'_> {
    fn fill(&self, template: &str) -> String {
        let mut text = template.to_owned();
        for (placeholder, word) in [("{ns}", self.ns), ("{n}", self.n), ("{V}", self.v)] {
            // "a {n}" reads "an issue" or "a ticket" depending on the noun.
            let article = if takes_an(word) { "an" } else { "a" };
            for (before, after) in [(" a ", " "), (" an ", " ")] {
                let from = format!("{}{placeholder}", before);
                text = text.replace(&from, &format!(" {article}{after}{word}"));
            }
            for start in ["A ", "An "] {
                if let Some(rest) = text.strip_prefix(&format!("{start}{placeholder}")) {
                    text = format!("{} {word}{rest}", capitalized(article));
                }
            }
            text = text.replace(placeholder, word);
        }
        capitalized(&text)
    }
}

/// Whether `word` is read with "an": it starts with a vowel sound ("issue", "AWS", "IMAP"),
/// which "user" and "OneDrive" do not.
fn takes_an(word: &str) -> bool {
    let lower = word.to_lowercase();
    let vowel = lower.starts_with(['a', 'e', 'i', 'o', 'u']);
    vowel && !["one", "use", "uni"].iter().any(|p| lower.starts_with(p))
}

fn make_tool(u: &UpstreamSpec, op: &Op, words: &Words<'_>, rng: &mut Rng) -> Tool {
    let snake = op
        .name
        .replace("{ns}", &words.ns.replace(' ', "_"))
        .replace("{n}", &words.n.replace(' ', "_"));
    let name = spell(u.style, &u.key, &snake);
    let mut description = words.fill(&op.descriptions[rng.below(op.descriptions.len())]);
    if rng.chance(0.25) {
        description.push(' ');
        description.push_str(&words.fill(ASIDES[rng.below(ASIDES.len())]));
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in &op.params {
        let pname = spell_param(u.style, &p.name);
        properties.insert(pname.clone(), param_schema(p, words));
        if p.required {
            required.push(pname);
        }
    }
    let mut tool = json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": properties, "required": required },
    });
    if u.annotated {
        tool["title"] = json!(capitalized(&snake.replace('_', " ")));
        tool["annotations"] = match op.hint {
            'r' => json!({ "readOnlyHint": true, "openWorldHint": true }),
            'd' => json!({ "readOnlyHint": false, "destructiveHint": true }),
            _ => json!({ "readOnlyHint": false, "destructiveHint": false }),
        };
    }
    Tool {
        name,
        op: op.id.clone(),
        json: tool.to_string(),
    }
}

fn param_schema(p: &Param, words: &Words<'_>) -> Value {
    let kind = match p.kind {
        's' => "string",
        'i' => "integer",
        'n' => "number",
        'b' => "boolean",
        'a' => "array",
        _ => "object",
    };
    let mut schema = json!({ "type": kind, "description": words.fill(&p.text) });
    if p.kind == 'a' {
        schema["items"] = json!({ "type": "string" });
    }
    schema
}

/// A snake-case name in an upstream's style.
fn spell(style: Style, key: &str, snake: &str) -> String {
    match style {
        Style::Snake => snake.to_owned(),
        Style::Camel => camel(snake),
        Style::Kebab => snake.replace('_', "-"),
        Style::Prefixed => format!("{key}_{snake}"),
    }
}

fn spell_param(style: Style, snake: &str) -> String {
    match style {
        Style::Camel => camel(snake),
        _ => snake.to_owned(),
    }
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').enumerate() {
        if i == 0 {
            out.push_str(part);
        } else {
            out.push_str(&capitalized(part));
        }
    }
    out
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// SplitMix64: small, seeded and the same on every platform.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        p > 0.0 && unit < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_parses_and_makes_well_over_a_thousand_tools() {
        let ups = catalog(1).unwrap();
        let tools: usize = ups.iter().map(|u| u.tools.len()).sum();
        assert!(tools > 1_000, "{tools}");
        let keys: HashSet<&str> = ups.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys.len(), ups.len(), "keys are unique");
        let gh = ups.iter().find(|u| u.key == "github").unwrap();
        let create = gh.tools.iter().find(|t| t.name == "create_issue").unwrap();
        assert_eq!(create.op, "issue.create");
        let v: Value = serde_json::from_str(&create.json).unwrap();
        assert_eq!(v["inputSchema"]["required"][0], "project");
        assert_eq!(v["annotations"]["readOnlyHint"], false);
        let linear = ups.iter().find(|u| u.key == "linear").unwrap();
        assert!(linear.tools.iter().any(|t| t.name == "createIssue"));
        let jira = ups.iter().find(|u| u.key == "jira").unwrap();
        assert!(jira.tools.iter().any(|t| t.name == "jira_create_issue"));
        // The same seed makes the same catalog.
        assert_eq!(catalog(1).unwrap()[5].tools[3].json, ups[5].tools[3].json);
    }

    #[test]
    fn scaled_catalogs_have_exactly_the_size_asked() {
        for total in [10, 1_000, 5_000] {
            let ups = scaled(7, total).unwrap();
            assert_eq!(ups.iter().map(|u| u.tools.len()).sum::<usize>(), total);
        }
        let big = scaled(7, 5_000).unwrap();
        assert!(big.iter().any(|u| u.key == "jira2"));
    }
}
