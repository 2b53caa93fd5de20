//! Pinned tool and prompt definitions: what an operator approved, as digests in a lock file,
//! and the check of each definition an upstream lists against its pin, made once per catalog
//! build. A tool whose description or schema changed after it was approved (or one that was
//! never approved) is held back from every listing, or served with a warning, as
//! `[pinning]` says. Reading and writing the lock file is left to the caller: this crate does
//! no I/O.

mod canonical;
mod diff;
mod lock;

use std::collections::BTreeMap;

use manifold_config::{OnChange, OnNew};
use serde_json::value::RawValue;

use crate::listing::Kind;

pub use canonical::{compact as canonical_json, digest, is_digest, pretty};
pub use lock::Lock;

/// The members of a tool that are digested: what a model reads and what shapes a call. Other
/// members (`_meta`, `icons`, `execution`) may change without invalidating a pin.
pub const TOOL_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// The members of a prompt that are digested.
pub const PROMPT_FIELDS: [&str; 4] = ["name", "title", "description", "arguments"];

/// The members of a skill entry that are digested: its URI, its frontmatter (what a model
/// reads first) and its files with their digests (what it reads next), so that a change of
/// any byte of any file it lists changes its pin. `_meta` may change freely.
pub const SKILL_FIELDS: [&str; 3] = ["uri", "frontmatter", "resources"];

/// One pinned definition.
#[derive(Debug, Clone)]
pub struct Pin {
    /// `sha256:<hex>` of the canonical definition.
    pub digest: String,
    /// The definition as pinned, for review and for diffs. The digest is what is compared.
    pub definition: Box<RawValue>,
}

/// An upstream's pins, by the upstream's own (original) names, so that renames in the config
/// do not invalidate them; skills by their upstream's own URI.
#[derive(Debug, Clone, Default)]
pub struct UpstreamPins {
    pub tools: BTreeMap<String, Pin>,
    pub prompts: BTreeMap<String, Pin>,
    pub skills: BTreeMap<String, Pin>,
}

impl UpstreamPins {
    /// Pins every tool and prompt in the given lists (raw items as the upstream sent them).
    /// Items without a string name are skipped: the catalog reports them as malformed.
    pub fn of(tools: &[Box<RawValue>], prompts: &[Box<RawValue>]) -> Self {
        Self::with_skills(tools, prompts, &[])
    }

    /// Pins every tool, prompt and skill entry in the given lists.
    pub fn with_skills(
        tools: &[Box<RawValue>],
        prompts: &[Box<RawValue>],
        skills: &[Box<RawValue>],
    ) -> Self {
        let pin_all = |kind: Kind, items: &[Box<RawValue>]| {
            items
                .iter()
                .filter_map(|raw| {
                    let def = Definition::of(kind, raw.get()).ok()?;
                    Some((def.name?, def.pin))
                })
                .collect()
        };
        Self {
            tools: pin_all(Kind::Tools, tools),
            prompts: pin_all(Kind::Prompts, prompts),
            skills: pin_all(Kind::Skills, skills),
        }
    }

    fn get(&self, kind: Kind, name: &str) -> Option<&Pin> {
        match kind {
            Kind::Tools => self.tools.get(name),
            Kind::Skills => self.skills.get(name),
            _ => self.prompts.get(name),
        }
    }
}

/// One upstream's pins and what to do when a definition does not match them.
#[derive(Debug, Clone)]
pub struct Pinning {
    pub on_change: OnChange,
    pub on_new: OnNew,
    pub pins: UpstreamPins,
}

impl Pinning {
    /// How the item `original` of `kind` (its raw definition as listed) stands against its
    /// pin: `None` when it matches.
    pub(crate) fn check(
        &self,
        kind: Kind,
        upstream: usize,
        original: &str,
        exposed: &str,
        raw: &str,
    ) -> Result<Option<Drift>, serde_json::Error> {
        let current = Definition::of(kind, raw)?.pin;
        let pinned = self.pins.get(kind, original);
        if pinned.is_some_and(|p| p.digest == current.digest) {
            return Ok(None);
        }
        let held = match pinned {
            Some(_) => self.on_change == OnChange::Hold,
            None => self.on_new == OnNew::Hold,
        };
        Ok(Some(Drift {
            kind,
            upstream,
            original: original.to_owned(),
            exposed: exposed.to_owned(),
            held,
            digest: current.digest,
            pinned: pinned.map(|p| p.definition.clone()),
            current: current.definition,
        }))
    }
}

/// The digested part of one item, and its name.
struct Definition {
    name: Option<String>,
    pin: Pin,
}

impl Definition {
    fn of(kind: Kind, raw: &str) -> Result<Self, serde_json::Error> {
        let (fields, id): (&[&str], _) = match kind {
            Kind::Tools => (&TOOL_FIELDS, "name"),
            Kind::Skills => (&SKILL_FIELDS, "uri"),
            _ => (&PROMPT_FIELDS, "name"),
        };
        let mut members: BTreeMap<String, &RawValue> = serde_json::from_str(raw)?;
        members.retain(|name, _| fields.contains(&name.as_str()));
        let name = members
            .get(id)
            .and_then(|n| serde_json::from_str(n.get()).ok());
        let text = canonical::compact(&serde_json::to_string(&members)?)?;
        Ok(Self {
            name,
            pin: Pin {
                digest: canonical::digest(&text),
                definition: RawValue::from_string(text)?,
            },
        })
    }
}

/// A tool, prompt or skill whose definition does not match its pin, or that has none.
#[derive(Debug, Clone)]
pub struct Drift {
    pub kind: Kind,
    pub upstream: usize,
    /// Its name as the upstream knows it (the key of its pin).
    pub original: String,
    /// The name it is (or would be) exposed under.
    pub exposed: String,
    /// Left out of every listing (`hold`), rather than served (`warn`, or `allow` when new).
    pub held: bool,
    /// The digest of its definition as it is now.
    pub digest: String,
    /// The definition as pinned; `None` when it has no pin.
    pub pinned: Option<Box<RawValue>>,
    /// The definition as it is now, in canonical form.
    pub current: Box<RawValue>,
}

impl Drift {
    /// Whether `other` is the same change of the same item (to tell a change seen before,
    /// which is not logged again, from a new one).
    pub fn same_change(&self, other: &Drift) -> bool {
        self.kind == other.kind
            && self.upstream == other.upstream
            && self.original == other.original
            && self.digest == other.digest
            && self.held == other.held
    }

    /// The members whose value differs from the pinned definition; empty for an item with no
    /// pin, and for one whose pin's digest was edited.
    pub fn changed_fields(&self) -> Vec<String> {
        self.pinned.as_ref().map_or_else(Vec::new, |pinned| {
            let sides = diff::Sides::new(pinned.get(), self.current.get());
            sides.changed().into_iter().map(str::to_owned).collect()
        })
    }

    /// Why it does not match, as a clause: "its description changed since it was pinned".
    pub fn reason(&self) -> String {
        if self.pinned.is_none() {
            return "it is new since the lock file was written".to_owned();
        }
        let fields = self.changed_fields();
        match fields.as_slice() {
            [] => "its definition does not match the digest in the lock file".to_owned(),
            [one] => format!("its {one} changed since it was pinned"),
            [init @ .., last] => {
                format!(
                    "its {} and {last} changed since it was pinned",
                    init.join(", ")
                )
            }
        }
    }

    /// Each changed member with its removed and added lines; for an item with no pin, its
    /// whole definition.
    pub fn diff(&self) -> String {
        match &self.pinned {
            Some(pinned) => diff::Sides::new(pinned.get(), self.current.get()).render(),
            None => canonical::pretty(self.current.get())
                .map(|text| text.lines().map(|l| format!("  + {l}\n")).collect())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests;
