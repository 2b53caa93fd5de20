//! One merged list (tools, prompts, resources, templates or skills): items in a deterministic
//! order, a name index for routing, and page bodies serialized once and served as bytes.

use std::collections::HashMap;
use std::sync::OnceLock;

pub use crate::naming::NameOrigin;

/// The kinds of catalog entries: the four of the protocol, and the skills of the skills
/// extension (`io.modelcontextprotocol/skills`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
    Skills,
}

/// How many kinds there are: the length of per-kind arrays.
pub const KINDS: usize = 5;

impl Kind {
    pub const ALL: [Kind; KINDS] = [
        Kind::Tools,
        Kind::Prompts,
        Kind::Resources,
        Kind::ResourceTemplates,
        Kind::Skills,
    ];

    /// Its place in [`Kind::ALL`], for per-kind arrays.
    pub fn index(self) -> usize {
        match self {
            Kind::Tools => 0,
            Kind::Prompts => 1,
            Kind::Resources => 2,
            Kind::ResourceTemplates => 3,
            Kind::Skills => 4,
        }
    }

    /// The list method, e.g. `tools/list`.
    pub fn list_method(self) -> &'static str {
        match self {
            Kind::Tools => "tools/list",
            Kind::Prompts => "prompts/list",
            Kind::Resources => "resources/list",
            Kind::ResourceTemplates => "resources/templates/list",
            Kind::Skills => "skills/list",
        }
    }

    /// The member of the list result that holds the items.
    pub fn result_key(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources => "resources",
            Kind::ResourceTemplates => "resourceTemplates",
            Kind::Skills => "skills",
        }
    }

    /// The member of each item that Manifold namespaces.
    pub fn id_key(self) -> &'static str {
        match self {
            Kind::Tools | Kind::Prompts => "name",
            Kind::Resources | Kind::Skills => "uri",
            Kind::ResourceTemplates => "uriTemplate",
        }
    }

    /// The notification a server sends when this list changes (templates and skills share
    /// resources').
    pub fn list_changed(self) -> &'static str {
        match self {
            Kind::Tools => "notifications/tools/list_changed",
            Kind::Prompts => "notifications/prompts/list_changed",
            Kind::Resources | Kind::ResourceTemplates | Kind::Skills => {
                "notifications/resources/list_changed"
            }
        }
    }

    /// Whether its entries are named by URIs (namespaced with the upstream's URI prefix)
    /// rather than by names.
    pub fn by_uri(self) -> bool {
        matches!(
            self,
            Kind::Resources | Kind::ResourceTemplates | Kind::Skills
        )
    }
}

/// One exposed entry.
#[derive(Debug, Clone)]
pub struct Item {
    /// The name (tools, prompts) or URI (resources, templates, skills) the host sees.
    pub exposed: String,
    /// The upstream's own name or URI.
    pub original: String,
    /// Index of the owning upstream in the catalog's upstream list.
    pub upstream: usize,
    pub origin: NameOrigin,
    /// The item as the host sees it: the upstream's JSON with only `exposed` substituted.
    pub raw: Box<str>,
    /// A tool that runs only as a task (`execution.taskSupport: "required"`), read once here
    /// rather than on every call.
    pub task_required: bool,
}

/// Why a cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("invalid cursor")]
    BadCursor,
}

/// A position in a listing, opaque to hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub generation: u64,
    pub offset: usize,
}

impl Cursor {
    pub fn encode(self) -> String {
        format!("mf1.{:x}.{:x}", self.generation, self.offset)
    }

    pub fn decode(s: &str) -> Option<Self> {
        let mut parts = s.strip_prefix("mf1.")?.split('.');
        let generation = u64::from_str_radix(parts.next()?, 16).ok()?;
        let offset = usize::from_str_radix(parts.next()?, 16).ok()?;
        parts
            .next()
            .is_none()
            .then_some(Cursor { generation, offset })
    }
}

/// A merged list.
#[derive(Debug)]
pub struct Listing {
    kind: Kind,
    items: Vec<Item>,
    /// Exposed name -> index in `items`, for tools, prompts and skills (by their URI).
    by_name: HashMap<String, usize>,
    page_size: usize,
    generation: u64,
    /// Serialized result body of each page, filled on first request.
    pages: Vec<OnceLock<Box<str>>>,
    fingerprint: u64,
}

impl Listing {
    pub(crate) fn new(kind: Kind, items: Vec<Item>, page_size: usize, generation: u64) -> Self {
        let by_name = match kind {
            Kind::Tools | Kind::Prompts | Kind::Skills => items
                .iter()
                .enumerate()
                .map(|(i, it)| (it.exposed.clone(), i))
                .collect(),
            Kind::Resources | Kind::ResourceTemplates => HashMap::new(),
        };
        let page_count = if page_size == 0 {
            1
        } else {
            items.len().div_ceil(page_size).max(1)
        };
        let fingerprint = fingerprint(&items);
        let pages = (0..page_count).map(|_| OnceLock::new()).collect();
        Self {
            kind,
            items,
            by_name,
            page_size,
            generation,
            pages,
            fingerprint,
        }
    }

    /// The items `keep` admits, as a listing of their own (a team's view): same order, same
    /// generation, pages serialized on first use.
    pub fn filtered(&self, keep: impl Fn(&Item) -> bool) -> Listing {
        let items = self.items.iter().filter(|i| keep(i)).cloned().collect();
        Listing::new(self.kind, items, self.page_size, self.generation)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The item exposed under `name` (tools and prompts; a skill by its SKILL.md's URI).
    pub fn get(&self, name: &str) -> Option<&Item> {
        self.by_name.get(name).map(|&i| &self.items[i])
    }

    /// Changes whenever any exposed item changes; used to decide on list_changed.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The serialized result body for the page at `cursor` (the first page for `None`).
    pub fn page(&self, cursor: Option<&str>) -> Result<&str, PageError> {
        let index = match cursor {
            None => 0,
            Some(c) => self.page_index(Cursor::decode(c).ok_or(PageError::BadCursor)?)?,
        };
        let slot = self.pages.get(index).ok_or(PageError::BadCursor)?;
        Ok(slot.get_or_init(|| self.render(index)))
    }

    fn page_index(&self, cursor: Cursor) -> Result<usize, PageError> {
        // A cursor from an older generation still pages through the current list: hosts
        // restart listing on list_changed anyway, and refusing would fail the whole listing.
        if self.page_size == 0 || cursor.offset % self.page_size != 0 {
            return Err(PageError::BadCursor);
        }
        let index = cursor.offset / self.page_size;
        if index >= self.pages.len() {
            return Err(PageError::BadCursor);
        }
        Ok(index)
    }

    fn render(&self, index: usize) -> Box<str> {
        let (start, end) = if self.page_size == 0 {
            (0, self.items.len())
        } else {
            let start = index * self.page_size;
            (start, (start + self.page_size).min(self.items.len()))
        };
        let body: usize = self.items[start..end].iter().map(|i| i.raw.len() + 1).sum();
        let mut out = String::with_capacity(body + 64);
        out.push_str("{\"");
        out.push_str(self.kind.result_key());
        out.push_str("\":[");
        for (n, item) in self.items[start..end].iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(&item.raw);
        }
        out.push(']');
        if end < self.items.len() {
            let next = Cursor {
                generation: self.generation,
                offset: end,
            }
            .encode();
            out.push_str(",\"nextCursor\":\"");
            out.push_str(&next);
            out.push('"');
        }
        out.push('}');
        out.into_boxed_str()
    }
}

fn fingerprint(items: &[Item]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for item in items {
        for b in item.raw.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str) -> Item {
        Item {
            exposed: name.into(),
            original: name.into(),
            upstream: 0,
            origin: NameOrigin::Prefixed,
            raw: format!("{{\"name\":\"{name}\"}}").into(),
            task_required: false,
        }
    }

    fn listing(n: usize, page_size: usize) -> Listing {
        Listing::new(
            Kind::Tools,
            (0..n).map(|i| item(&format!("t{i}"))).collect(),
            page_size,
            7,
        )
    }

    #[test]
    fn pages_chain_through_every_item() {
        let l = listing(5, 2);
        let mut cursor: Option<String> = None;
        let mut names = Vec::new();
        loop {
            let body: serde_json::Value =
                serde_json::from_str(l.page(cursor.as_deref()).unwrap()).unwrap();
            for t in body["tools"].as_array().unwrap() {
                names.push(t["name"].as_str().unwrap().to_owned());
            }
            match body.get("nextCursor") {
                Some(c) => cursor = Some(c.as_str().unwrap().to_owned()),
                None => break,
            }
        }
        assert_eq!(names, ["t0", "t1", "t2", "t3", "t4"]);
    }

    #[test]
    fn unpaginated_and_empty_lists() {
        assert_eq!(
            listing(3, 0).page(None).unwrap(),
            r#"{"tools":[{"name":"t0"},{"name":"t1"},{"name":"t2"}]}"#
        );
        assert_eq!(listing(0, 2).page(None).unwrap(), r#"{"tools":[]}"#);
    }

    #[test]
    fn bad_cursors_are_refused() {
        let l = listing(5, 2);
        for bad in [
            "",
            "garbage",
            "mf1.7",
            "mf1.7.1",
            "mf1.7.6",
            "mf1.7.2.0",
            "mf1.zz.2",
        ] {
            assert_eq!(l.page(Some(bad)), Err(PageError::BadCursor), "{bad}");
        }
        assert!(
            l.page(Some("mf1.3.2")).is_ok(),
            "a cursor of another generation still pages"
        );
        assert_eq!(
            listing(3, 0).page(Some("mf1.7.0")),
            Err(PageError::BadCursor)
        );
    }

    #[test]
    fn routes_by_exposed_name() {
        let l = listing(3, 0);
        assert_eq!(l.get("t1").unwrap().original, "t1");
        assert!(l.get("t9").is_none());
    }
}
