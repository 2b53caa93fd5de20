//! Which operations become tools, and under what names.

use std::collections::HashMap;

/// One way to pick operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// An exact `operationId`.
    OperationId(String),
    /// A tag the operation carries.
    Tag(String),
    /// An HTTP method, any case.
    Method(String),
    /// A path template glob: `*` matches within a segment, `**` across segments
    /// (`/repos/*/issues/**`).
    Path(String),
}

/// A filter reads as it is written in a config: `operationId:ID`, `tag:TAG`, `method:GET`,
/// `path:/glob`.
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::OperationId(id) => write!(f, "operationId:{id}"),
            Filter::Tag(tag) => write!(f, "tag:{tag}"),
            Filter::Method(method) => write!(f, "method:{method}"),
            Filter::Path(glob) => write!(f, "path:{glob}"),
        }
    }
}

/// How a description is converted.
#[derive(Debug, Clone)]
pub struct Options {
    /// When not empty, only operations matching one of these.
    pub include: Vec<Filter>,
    /// Operations matching one of these are skipped, even when included.
    pub exclude: Vec<Filter>,
    /// New tool names, by `operationId` or by the name the tool would have had.
    pub renames: HashMap<String, String>,
    /// Overrides the description's `servers` (resolved against the description's URL).
    pub base_url: Option<String>,
    /// Longest tool description, in characters.
    pub max_description: usize,
    /// Most tools from one description; operations past it are skipped, with the reason.
    pub max_tools: usize,
    /// Largest `inputSchema` plus `outputSchema` of one tool, in bytes of JSON.
    pub max_schema_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            include: Vec::new(),
            exclude: Vec::new(),
            renames: HashMap::new(),
            base_url: None,
            max_description: 1024,
            max_tools: 2000,
            max_schema_bytes: 256 * 1024,
        }
    }
}

/// What a filter looks at in an operation.
pub(crate) struct Facts<'a> {
    pub operation_id: Option<&'a str>,
    pub tags: Vec<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
}

impl Filter {
    pub(crate) fn matches(&self, op: &Facts<'_>) -> bool {
        match self {
            Filter::OperationId(id) => op.operation_id == Some(id.as_str()),
            Filter::Tag(tag) => op.tags.contains(&tag.as_str()),
            Filter::Method(m) => m.eq_ignore_ascii_case(op.method),
            Filter::Path(glob) => glob_match(glob.as_bytes(), op.path.as_bytes()),
        }
    }
}

impl Options {
    /// Why an operation is filtered out, if it is.
    pub(crate) fn rejects(&self, op: &Facts<'_>) -> Option<String> {
        if !self.include.is_empty() && !self.include.iter().any(|f| f.matches(op)) {
            return Some("not matched by `include`".to_string());
        }
        let hit = self.exclude.iter().find(|f| f.matches(op))?;
        Some(format!("excluded by \"{hit}\""))
    }
}

fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    match glob {
        [] => text.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        [b'*', rest @ ..] => {
            let segment = text.iter().position(|&c| c == b'/').unwrap_or(text.len());
            (0..=segment).any(|i| glob_match(rest, &text[i..]))
        }
        [c, rest @ ..] => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(path: &'a str, method: &'a str) -> Facts<'a> {
        Facts {
            operation_id: Some("listIssues"),
            tags: vec!["issues"],
            method,
            path,
        }
    }

    #[test]
    fn path_globs_keep_single_stars_within_a_segment() {
        let f = Filter::Path("/repos/*/issues".into());
        assert!(f.matches(&facts("/repos/{repo}/issues", "get")));
        assert!(!f.matches(&facts("/repos/a/b/issues", "get")));
        assert!(Filter::Path("/repos/**".into()).matches(&facts("/repos/a/b/issues", "get")));
    }

    #[test]
    fn exclude_wins_over_include_and_says_which_filter() {
        let options = Options {
            include: vec![Filter::Tag("issues".into())],
            exclude: vec![Filter::Method("DELETE".into())],
            ..Options::default()
        };
        assert_eq!(options.rejects(&facts("/i", "get")), None);
        assert_eq!(
            options.rejects(&facts("/i", "delete")).as_deref(),
            Some("excluded by \"method:DELETE\"")
        );
        let only = Options {
            include: vec![Filter::OperationId("other".into())],
            ..Options::default()
        };
        assert_eq!(
            only.rejects(&facts("/i", "get")).as_deref(),
            Some("not matched by `include`")
        );
    }
}
