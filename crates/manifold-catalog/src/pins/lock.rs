//! The lock file: every pinned definition, by upstream key, kind and original name, as
//! pretty-printed JSON with sorted keys, so that re-pinning shows in a diff as exactly the
//! definitions that changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{canonical, Pin, UpstreamPins};

/// The layout version written into the file; others are refused.
const VERSION: u32 = 1;

/// A whole lock file.
#[derive(Debug, Clone, Default)]
pub struct Lock {
    pub upstreams: BTreeMap<String, UpstreamPins>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLock {
    version: u32,
    upstreams: BTreeMap<String, RawUpstream>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    #[serde(default)]
    tools: BTreeMap<String, RawPin>,
    #[serde(default)]
    prompts: BTreeMap<String, RawPin>,
    /// Skill entries by their upstream's own URI; left out while there are none, so that a
    /// lock file without skills reads and writes as before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    skills: BTreeMap<String, RawPin>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPin {
    digest: String,
    definition: Box<RawValue>,
}

impl Lock {
    /// Reads a lock file's text. The problem names the place (`upstreams.KEY.tools.NAME`) or
    /// the line and column.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: RawLock = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if raw.version != VERSION {
            return Err(format!(
                "version {} is not one this build reads (it reads {VERSION}); run manifold pin",
                raw.version
            ));
        }
        let mut upstreams = BTreeMap::new();
        for (key, entry) in raw.upstreams {
            let pins = UpstreamPins {
                tools: pins(&key, "tools", entry.tools)?,
                prompts: pins(&key, "prompts", entry.prompts)?,
                skills: pins(&key, "skills", entry.skills)?,
            };
            upstreams.insert(key, pins);
        }
        Ok(Self { upstreams })
    }

    /// The file's text: pretty-printed, keys sorted, ending in a newline.
    pub fn render(&self) -> Result<String, serde_json::Error> {
        let entries = |pins: &BTreeMap<String, Pin>| {
            pins.iter()
                .map(|(name, pin)| {
                    let raw = RawPin {
                        digest: pin.digest.clone(),
                        definition: pin.definition.clone(),
                    };
                    (name.clone(), raw)
                })
                .collect()
        };
        let raw = RawLock {
            version: VERSION,
            upstreams: self
                .upstreams
                .iter()
                .map(|(key, pins)| {
                    let entry = RawUpstream {
                        tools: entries(&pins.tools),
                        prompts: entries(&pins.prompts),
                        skills: entries(&pins.skills),
                    };
                    (key.clone(), entry)
                })
                .collect(),
        };
        let mut text = canonical::pretty(&serde_json::to_string(&raw)?)?;
        text.push('\n');
        Ok(text)
    }
}

fn pins(
    key: &str,
    kind: &str,
    raw: BTreeMap<String, RawPin>,
) -> Result<BTreeMap<String, Pin>, String> {
    raw.into_iter()
        .map(|(name, pin)| {
            if !canonical::is_digest(&pin.digest) {
                return Err(format!(
                    "upstreams.{key:?}.{kind}.{name:?}.digest: {:?} is not sha256:<64 lowercase hex digits>",
                    pin.digest
                ));
            }
            let pin = Pin {
                digest: pin.digest,
                definition: pin.definition,
            };
            Ok((name, pin))
        })
        .collect()
}
