//! Skills (the skills extension, `io.modelcontextprotocol/skills`) in the catalog: a skill
//! entry is checked and exposed with every URI it names, and the files the entries list are
//! indexed by their exposed URIs, so that a relayed read of one can be verified against the
//! entry (its size, its digest and, for a SKILL.md, its frontmatter) without a search.

use std::collections::HashMap;

use manifold_protocol::{scan, RawObject};

use crate::build::UpstreamSlice;
use crate::listing::Item;
use crate::pins::Drift;
use crate::{pins, rewrite};

/// The extension's id under `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/skills";

/// The last segment of a skill's own URI.
pub const SKILL_FILE: &str = "SKILL.md";

/// What an upstream declared of the extension.
impl UpstreamSlice {
    /// Whether it declares the skills extension.
    pub fn declares_skills(&self) -> bool {
        self.extension(EXTENSION).is_some()
    }

    /// Whether it declares the skills extension with `directoryRead: true`.
    pub fn reads_skill_directories(&self) -> bool {
        self.extension(EXTENSION)
            .and_then(|s| {
                RawObject::parse(&s)
                    .ok()
                    .map(|o| o.get("directoryRead") == Some("true"))
            })
            .unwrap_or(false)
    }
}

/// A file a skill entry lists: what a relayed read of it must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The upstream that serves it.
    pub upstream: usize,
    /// The exposed URI of its skill's SKILL.md.
    pub skill: String,
    /// Its size in bytes.
    pub size: u64,
    /// `sha256:<64 lowercase hex digits>`.
    pub digest: String,
    /// The entry's `frontmatter` (JSON text), when the file is the skill's SKILL.md.
    pub frontmatter: Option<Box<str>>,
}

/// Checks a skill entry (an object) as the extension defines it: a string `uri` ending in
/// `/SKILL.md`, an object `frontmatter`, and `resources`, either `"dynamic"` or an array of
/// `{uri, digest, size}`. The problem says what is wrong.
pub(crate) fn check_entry(entry: &RawObject<'_>) -> Result<(), String> {
    let uri = entry
        .get_str("uri")
        .ok_or("a skills entry has no string \"uri\"")?;
    if !uri.ends_with(&format!("/{SKILL_FILE}")) {
        return Err(format!("the skill {uri:?} does not name its {SKILL_FILE}"));
    }
    let is_object = |v: &str| v.trim_start().starts_with('{');
    if !entry.get("frontmatter").is_some_and(is_object) {
        return Err(format!("the skill {uri:?} has no object \"frontmatter\""));
    }
    let resources = entry
        .get("resources")
        .ok_or_else(|| format!("the skill {uri:?} has no \"resources\""))?;
    if entry.get_str("resources").as_deref() == Some("dynamic") {
        return Ok(());
    }
    let files = scan::elements(resources)
        .map_err(|_| format!("the skill {uri:?} has \"resources\" that are not an array"))?;
    for file in files {
        file_of(file).ok_or_else(|| {
            format!(
                "the skill {uri:?} lists a file without a string uri, a sha256 digest and a size"
            )
        })?;
    }
    Ok(())
}

/// `(uri, digest, size)` of one element of a skill's `resources`.
fn file_of(file: &str) -> Option<(String, String, u64)> {
    let o = RawObject::parse(file).ok()?;
    let uri = o.get_str("uri")?.into_owned();
    let digest = o.get_str("digest")?.into_owned();
    let size = o.get("size")?.trim().parse().ok()?;
    pins::is_digest(&digest).then_some((uri, digest, size))
}

/// A skill entry with its `uri` and the `uri` of each of its `resources` exposed with
/// `uri_prefix` (`skill://{rest}` becomes `skill://{uri prefix}/{rest}`).
pub(crate) fn expose_entry(entry: &str, uri_prefix: &str) -> Option<String> {
    rewrite::skill_entry(entry, uri_prefix)
}

/// Every file the (exposed) skill entries list, by its exposed URI.
pub(crate) fn index(items: &[Item]) -> HashMap<String, SkillFile> {
    let mut files = HashMap::new();
    for item in items {
        let Ok(entry) = RawObject::parse(&item.raw) else {
            continue;
        };
        let Some(list) = entry.get("resources").and_then(|r| scan::elements(r).ok()) else {
            continue;
        };
        for (uri, digest, size) in list.into_iter().filter_map(file_of) {
            let frontmatter = (uri == item.exposed)
                .then(|| entry.get("frontmatter").map(Box::from))
                .flatten();
            let file = SkillFile {
                upstream: item.upstream,
                skill: item.exposed.clone(),
                size,
                digest,
                frontmatter,
            };
            files.insert(uri, file);
        }
    }
    files
}

/// The held skill whose directory holds `exposed` (its SKILL.md, any of its files, the
/// directory itself), if any.
pub(crate) fn held<'d>(drift: &'d [Drift], exposed: &str) -> Option<&'d Drift> {
    drift.iter().find(|d| {
        d.held
            && d.kind == crate::Kind::Skills
            && d.exposed
                .strip_suffix(SKILL_FILE)
                .is_some_and(|dir| exposed.starts_with(dir) || exposed == dir.trim_end_matches('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn entry(resources: &str) -> String {
        format!(
            r#"{{"uri":"skill://pdf/SKILL.md","frontmatter":{{"name":"pdf","description":"d"}},"resources":{resources}}}"#
        )
    }

    #[test]
    fn entries_are_checked() {
        let good = entry(&format!(
            r#"[{{"uri":"skill://pdf/SKILL.md","digest":"{DIGEST}","size":3}}]"#
        ));
        assert_eq!(check_entry(&RawObject::parse(&good).unwrap()), Ok(()));
        let dynamic = entry(r#""dynamic""#);
        assert_eq!(check_entry(&RawObject::parse(&dynamic).unwrap()), Ok(()));
        for bad in [
            entry(r#"[{"uri":"skill://pdf/SKILL.md","digest":"md5:x","size":3}]"#),
            entry(r#"[{"uri":"skill://pdf/SKILL.md","size":3}]"#),
            entry(r#""static""#),
            r#"{"uri":"skill://pdf/README.md","frontmatter":{},"resources":[]}"#.to_owned(),
            r#"{"uri":"skill://pdf/SKILL.md","resources":[]}"#.to_owned(),
        ] {
            assert!(
                check_entry(&RawObject::parse(&bad).unwrap()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn entries_are_exposed_with_their_files() {
        let raw = entry(&format!(
            r#"[{{"uri":"skill://pdf/SKILL.md","digest":"{DIGEST}","size":3}},{{"uri":"skill://pdf/a/b.py","digest":"{DIGEST}","size":1}}]"#
        ));
        let exposed = expose_entry(&raw, "alpha").unwrap();
        let want = format!(
            r#"{{"uri":"skill://alpha/pdf/SKILL.md","frontmatter":{{"name":"pdf","description":"d"}},"resources":[{{"uri":"skill://alpha/pdf/SKILL.md","digest":"{DIGEST}","size":3}},{{"uri":"skill://alpha/pdf/a/b.py","digest":"{DIGEST}","size":1}}]}}"#
        );
        assert_eq!(exposed, want);
        let item = Item {
            exposed: "skill://alpha/pdf/SKILL.md".into(),
            original: "skill://pdf/SKILL.md".into(),
            upstream: 1,
            origin: crate::NameOrigin::Prefixed,
            raw: exposed.into(),
            task_required: false,
        };
        let files = index(&[item]);
        assert_eq!(files.len(), 2);
        let md = &files["skill://alpha/pdf/SKILL.md"];
        assert_eq!((md.upstream, md.size), (1, 3));
        assert_eq!(
            md.frontmatter.as_deref(),
            Some(r#"{"name":"pdf","description":"d"}"#)
        );
        assert!(files["skill://alpha/pdf/a/b.py"].frontmatter.is_none());
    }
}
