//! Loading a description: parsing, the version, Swagger 2.0 brought to the 3.x model, and
//! every external `$ref` fetched once (by URL, so documents that refer to each other load once).

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;
use url::Url;

use crate::error::LoadError;
use crate::{swagger, yaml};

/// How referenced documents are read; the caller decides what files and URLs may be read, and
/// bounds the time and size of each read.
pub trait Fetch {
    /// The bytes at `url` (without its fragment), or why they cannot be had.
    fn fetch(&self, url: &Url) -> Result<Vec<u8>, String>;
}

/// The version a description declared; Swagger 2.0 is held in the 3.0 model after loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    OpenApi30,
    OpenApi31,
    Swagger20,
}

/// A loaded description: the root document and every document its `$ref`s reach, by URL.
#[derive(Debug, Clone)]
pub struct Document {
    root: String,
    version: Version,
    docs: HashMap<String, Value>,
}

/// References followed in a row before giving up; a longer chain is a cycle in practice.
const MAX_HOPS: usize = 64;

/// Loads the description in `bytes` whose own location is `base` (a URL; `file://` for a file).
pub fn load(bytes: &[u8], base: &str, fetch: &dyn Fetch) -> Result<Document, LoadError> {
    let base = Url::parse(base).map_err(|e| LoadError::Invalid {
        url: base.to_string(),
        detail: format!("the description's location is not a URL: {e}"),
    })?;
    let root_key = doc_key(&base);
    let value = yaml::parse(bytes).map_err(|detail| LoadError::Parse {
        url: root_key.clone(),
        detail,
    })?;
    let version = version_of(&value, &root_key)?;
    let value = match version {
        Version::Swagger20 => swagger::to_openapi3(value),
        _ => value,
    };
    if !value.is_object() {
        return Err(LoadError::Invalid {
            url: root_key,
            detail: "the description is not an object".to_string(),
        });
    }
    let mut document = Document {
        root: root_key.clone(),
        version,
        docs: HashMap::from([(root_key, value)]),
    };
    document.fetch_external(fetch)?;
    document.check_refs()?;
    Ok(document)
}

fn version_of(value: &Value, url: &str) -> Result<Version, LoadError> {
    let text = |key: &str| {
        value
            .get(key)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    };
    let unknown = |found: String| LoadError::UnknownVersion {
        url: url.to_string(),
        found,
    };
    if let Some(found) = text("openapi") {
        return match found.as_str() {
            v if v.starts_with("3.0.") || v == "3.0" => Ok(Version::OpenApi30),
            v if v.starts_with("3.1.") || v == "3.1" => Ok(Version::OpenApi31),
            _ => Err(unknown(format!("openapi {found}"))),
        };
    }
    match text("swagger") {
        Some(found) if found == "2.0" => Ok(Version::Swagger20),
        Some(found) => Err(unknown(format!("swagger {found}"))),
        None => Err(unknown("no `openapi` or `swagger` field".to_string())),
    }
}

/// A document's key: its URL without the fragment.
fn doc_key(url: &Url) -> String {
    let mut url = url.clone();
    url.set_fragment(None);
    url.to_string()
}

/// Every `$ref` string in a value, wherever it sits.
fn refs_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                out.push(r.clone());
            }
            map.values().for_each(|v| refs_in(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs_in(v, out)),
        _ => {}
    }
}

impl Document {
    pub fn version(&self) -> Version {
        self.version
    }

    /// The root document's URL.
    pub fn url(&self) -> &str {
        &self.root
    }

    /// The root document (in the 3.x model).
    pub fn root(&self) -> &Value {
        &self.docs[&self.root]
    }

    /// The value at `pointer` (a JSON pointer, already decoded from the fragment) in a document.
    pub(crate) fn get(&self, doc: &str, pointer: &str) -> Option<&Value> {
        self.docs.get(doc)?.pointer(pointer)
    }

    /// The document and pointer a `$ref` written in document `ctx` names.
    pub(crate) fn target(&self, ctx: &str, reference: &str) -> Result<(String, String), LoadError> {
        let bad = |detail: String| LoadError::BadRef {
            url: ctx.to_string(),
            reference: reference.to_string(),
            detail,
        };
        let (file, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        let doc = if file.is_empty() {
            ctx.to_string()
        } else {
            let base = Url::parse(ctx).map_err(|e| bad(e.to_string()))?;
            doc_key(&base.join(file).map_err(|e| bad(e.to_string()))?)
        };
        let pointer = percent_decode(fragment).ok_or_else(|| bad("bad percent-encoding".into()))?;
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(bad("only JSON pointer fragments are supported".to_string()));
        }
        Ok((doc, pointer))
    }

    /// Follows `value` while it is a `$ref`, returning the document the result sits in.
    pub(crate) fn deref<'a>(
        &'a self,
        ctx: &str,
        value: &'a Value,
    ) -> Result<(String, &'a Value), LoadError> {
        let (mut doc, mut value) = (ctx.to_string(), value);
        for _ in 0..MAX_HOPS {
            let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
                return Ok((doc, value));
            };
            let (next, pointer) = self.target(&doc, reference)?;
            value = self
                .get(&next, &pointer)
                .ok_or_else(|| LoadError::MissingRef {
                    url: doc.clone(),
                    reference: reference.to_string(),
                })?;
            doc = next;
        }
        Err(LoadError::RefCycle {
            chain: format!("more than {MAX_HOPS} references in a row from {ctx}"),
        })
    }

    fn fetch_external(&mut self, fetch: &dyn Fetch) -> Result<(), LoadError> {
        let mut queue = VecDeque::from([self.root.clone()]);
        while let Some(key) = queue.pop_front() {
            let mut refs = Vec::new();
            refs_in(&self.docs[&key], &mut refs);
            for reference in refs.iter().filter(|r| !r.starts_with('#')) {
                let (target, _) = self.target(&key, reference)?;
                if self.docs.contains_key(&target) {
                    continue;
                }
                let value = self.read(fetch, &key, &target)?;
                self.docs.insert(target.clone(), value);
                queue.push_back(target);
            }
        }
        Ok(())
    }

    fn read(&self, fetch: &dyn Fetch, from: &str, target: &str) -> Result<Value, LoadError> {
        let failed = |detail: String| LoadError::Fetch {
            url: from.to_string(),
            target: target.to_string(),
            detail,
        };
        let url = Url::parse(target).map_err(|e| failed(e.to_string()))?;
        let bytes = fetch.fetch(&url).map_err(failed)?;
        yaml::parse(&bytes).map_err(|detail| LoadError::Parse {
            url: target.to_string(),
            detail,
        })
    }

    /// Every `$ref` must point to something, and no chain of bare references may loop (a
    /// schema that contains itself through a member is fine: it stays a `$defs` reference).
    fn check_refs(&self) -> Result<(), LoadError> {
        for (key, value) in &self.docs {
            let mut refs = Vec::new();
            refs_in(value, &mut refs);
            for reference in refs {
                self.check_chain(key, &reference)?;
            }
        }
        Ok(())
    }

    fn check_chain(&self, ctx: &str, reference: &str) -> Result<(), LoadError> {
        let mut seen = HashSet::new();
        let mut chain = vec![reference.to_string()];
        let (mut doc, mut reference) = (ctx.to_string(), reference.to_string());
        loop {
            let (next, pointer) = self.target(&doc, &reference)?;
            let value = self
                .get(&next, &pointer)
                .ok_or_else(|| LoadError::MissingRef {
                    url: doc.clone(),
                    reference: reference.clone(),
                })?;
            if !seen.insert((next.clone(), pointer)) {
                return Err(LoadError::RefCycle {
                    chain: chain.join(" -> "),
                });
            }
            match value.get("$ref").and_then(Value::as_str) {
                Some(r) => {
                    chain.push(r.to_string());
                    (doc, reference) = (next, r.to_string());
                }
                None => return Ok(()),
            }
        }
    }
}

/// Decodes the `%XX` escapes of a URI fragment; `None` when the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let decoded = percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()?;
    Some(decoded.into_owned())
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
