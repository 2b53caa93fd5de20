//! Verification of skill files relayed to hosts (the skills extension): a `resources/read`
//! answer for a file a catalog skill entry lists must match the entry's size and SHA-256
//! digest and, for the skill's SKILL.md, its YAML frontmatter must equal the entry's
//! `frontmatter` field by field. Only answers for listed files are parsed: every other read
//! costs one map lookup, and none when no skill is listed.

use base64::Engine as _;
use manifold_catalog::skills::SkillFile;
use manifold_catalog::{uri, Catalog};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};
use yaml_rust2::{Yaml, YamlLoader};

use crate::error::RouteError;

#[derive(Deserialize)]
struct ReadResult {
    #[serde(default)]
    contents: Vec<Content>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    blob: Option<String>,
}

/// Checks upstream `upstream`'s answer `result` to a read of its URI `original`: `Ok` when
/// no skill entry lists the file or it matches; else the error naming the exposed URI and
/// what differed (never the content).
pub(super) fn read(
    catalog: &Catalog,
    upstream: usize,
    original: &str,
    result: &str,
) -> Result<(), RouteError> {
    // Most catalogs have no skills: then a read costs no URI made and no lookup.
    if !catalog.has_skill_files() {
        return Ok(());
    }
    let Some(def) = catalog.defs().get(upstream) else {
        return Ok(());
    };
    let exposed = uri::expose(&def.uri_prefix, original);
    let Some(file) = catalog.skill_file(&exposed) else {
        return Ok(());
    };
    let differed = differences(file, original, result);
    if differed.is_empty() {
        return Ok(());
    }
    Err(RouteError::Unverified {
        uri: exposed,
        differed,
    })
}

/// What of the answer does not match `file`: `size`, `digest`, `frontmatter`.
fn differences(file: &SkillFile, original: &str, result: &str) -> Vec<&'static str> {
    let bytes = serde_json::from_str::<ReadResult>(result)
        .ok()
        .and_then(|r| bytes_of(r.contents, original));
    let Some(bytes) = bytes else {
        return vec!["size", "digest"];
    };
    let mut differed = Vec::new();
    if u64::try_from(bytes.len()).ok() != Some(file.size) {
        differed.push("size");
    }
    if digest(&bytes) != file.digest {
        differed.push("digest");
    }
    if let Some(entry) = &file.frontmatter {
        let entry: Option<Value> = serde_json::from_str(entry).ok();
        if entry.is_none() || frontmatter(&bytes) != entry {
            differed.push("frontmatter");
        }
    }
    differed
}

/// The bytes of the content for `original` (or the only one): a text's UTF-8, a blob
/// decoded from base64.
fn bytes_of(contents: Vec<Content>, original: &str) -> Option<Vec<u8>> {
    let single = contents.len() == 1;
    let content = contents
        .into_iter()
        .find(|c| single || c.uri.as_deref() == Some(original))?;
    match (content.text, content.blob) {
        (Some(text), _) => Some(text.into_bytes()),
        (None, Some(blob)) => base64::engine::general_purpose::STANDARD
            .decode(blob.as_bytes())
            .ok(),
        (None, None) => None,
    }
}

fn digest(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The YAML frontmatter of a SKILL.md (between a first line `---` and the next `---`), as
/// JSON; `None` when it has none or it is not a YAML mapping.
fn frontmatter(bytes: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    let mut yaml = String::new();
    for line in lines {
        if line.trim_end() == "---" {
            let docs = YamlLoader::load_from_str(&yaml).ok()?;
            return match docs.into_iter().next() {
                Some(doc @ Yaml::Hash(_)) => Some(json_of(doc)),
                _ => None,
            };
        }
        yaml.push_str(line);
    }
    None
}

/// A YAML value as JSON: keys of mappings as strings, numbers as JSON numbers.
fn json_of(yaml: Yaml) -> Value {
    match yaml {
        Yaml::String(s) => Value::String(s),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or(Value::String(r), Value::Number),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Array(items) => Value::Array(items.into_iter().map(json_of).collect()),
        Yaml::Hash(members) => {
            let mut map = Map::new();
            for (key, value) in members {
                let key = match json_of(key) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                map.insert(key, json_of(value));
            }
            Value::Object(map)
        }
        Yaml::Null | Yaml::Alias(_) | Yaml::BadValue => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(text: &str, frontmatter: Option<Value>) -> SkillFile {
        SkillFile {
            upstream: 0,
            skill: "skill://p/pdf/SKILL.md".into(),
            size: text.len() as u64,
            digest: digest(text.as_bytes()),
            frontmatter: frontmatter.map(|f| f.to_string().into()),
        }
    }

    fn read_of(text: &str) -> String {
        json!({"contents": [{"uri": "skill://pdf/SKILL.md", "text": text}]}).to_string()
    }

    const MD: &str = "---\nname: pdf\ndescription: Fill forms\nmetadata:\n  version: \"1\"\n  n: 2\n---\n# PDF\n";

    #[test]
    fn a_matching_skill_md_passes_and_each_difference_is_named() {
        let entry = json!({"name": "pdf", "description": "Fill forms", "metadata": {"version": "1", "n": 2}});
        let f = file(MD, Some(entry.clone()));
        assert!(differences(&f, "skill://pdf/SKILL.md", &read_of(MD)).is_empty());
        // Same size, other bytes.
        let other = MD.replace("PDF", "FDP");
        assert_eq!(
            differences(&f, "skill://pdf/SKILL.md", &read_of(&other)),
            ["digest"]
        );
        // A frontmatter that differs from the entry's, although the bytes match the digest.
        let mut entry = entry;
        entry["metadata"]["version"] = json!(1);
        let f = file(MD, Some(entry));
        assert_eq!(
            differences(&f, "skill://pdf/SKILL.md", &read_of(MD)),
            ["frontmatter"]
        );
    }

    #[test]
    fn blobs_are_decoded_and_unreadable_answers_fail() {
        let bytes = [0u8, 159, 146, 150];
        let f = SkillFile {
            upstream: 0,
            skill: String::new(),
            size: 4,
            digest: digest(&bytes),
            frontmatter: None,
        };
        let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
        let ok = json!({"contents": [{"uri": "skill://x/a.bin", "blob": blob}]}).to_string();
        assert!(differences(&f, "skill://x/a.bin", &ok).is_empty());
        assert_eq!(
            differences(&f, "skill://x/a.bin", r#"{"contents":[]}"#),
            ["size", "digest"]
        );
        assert_eq!(frontmatter(b"no frontmatter"), None);
    }
}
