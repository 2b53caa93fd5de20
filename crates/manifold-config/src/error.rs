//! Building `ConfigError`s: dotted key paths and readable versions of serde's messages.

use std::path::Path;

use crate::ConfigError;

/// The key used when a problem concerns the file as a whole.
pub(crate) const FILE_KEY: &str = "(file)";

pub(crate) fn at(file: &Path, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        key: key.into(),
        problem: problem.into(),
    }
}

/// `parent.key`, quoting `key` the way TOML would when it is not a bare key, so that a key
/// holding spaces or dots stays readable and unambiguous in messages.
pub(crate) fn child(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let segment = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() || parent == FILE_KEY {
        segment
    } else {
        format!("{parent}.{segment}")
    }
}

/// Joins a base path and a path relative to it, either of which may be empty.
pub(crate) fn join(base: &str, relative: &str) -> String {
    match (base.is_empty(), relative.is_empty()) {
        (true, true) => FILE_KEY.to_owned(),
        (true, false) => relative.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) => format!("{base}.{relative}"),
    }
}

/// Turns a serde message about the table at `path` into (key, problem). Serde names unknown
/// and missing fields only inside the message, so the field is moved into the key path.
pub(crate) fn from_serde(path: &str, message: &str) -> (String, String) {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((field, expected)) = rest.split_once('`') {
            return (join(path, field), unknown_key_problem(expected));
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some((field, _)) = rest.split_once('`') {
            return (join(path, field), "required key is missing".to_owned());
        }
    }
    (join(path, ""), message.to_owned())
}

/// `, expected one of `a`, `b`` (serde's tail) becomes `unknown key; expected one of a, b`.
fn unknown_key_problem(serde_tail: &str) -> String {
    let tail = serde_tail.trim_start_matches(',').trim().replace('`', "");
    if tail.is_empty() || tail == "there are no fields" {
        "unknown key".to_owned()
    } else {
        format!("unknown key; {tail}")
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_quotes_keys_that_are_not_bare() {
        assert_eq!(child("upstreams", "time"), "upstreams.time");
        assert_eq!(child("upstreams", "my server"), "upstreams.\"my server\"");
        assert_eq!(child("upstreams", "a.b"), "upstreams.\"a.b\"");
        assert_eq!(child("", "server"), "server");
    }

    #[test]
    fn serde_messages_move_the_field_into_the_key() {
        let (key, problem) = from_serde(
            "upstreams.time",
            "unknown field `comand`, expected one of `command`, `args`",
        );
        assert_eq!(key, "upstreams.time.comand");
        assert_eq!(problem, "unknown key; expected one of command, args");
        let (key, problem) = from_serde("", "unknown field `x`, there are no fields");
        assert_eq!((key.as_str(), problem.as_str()), ("x", "unknown key"));
        let (key, problem) = from_serde("upstreams.t", "missing field `command`");
        assert_eq!(
            (key.as_str(), problem.as_str()),
            ("upstreams.t.command", "required key is missing")
        );
        let (key, problem) = from_serde("server.page_size", "invalid type");
        assert_eq!(
            (key.as_str(), problem.as_str()),
            ("server.page_size", "invalid type")
        );
        assert_eq!(from_serde("", "bad").0, FILE_KEY);
    }

    #[test]
    fn line_col_counts_characters() {
        let text = "a = 1\nbé = \"x\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        // 'é' is two bytes but one column; an offset inside it counts as the character's start.
        assert_eq!(line_col(text, 9), (2, 3));
        assert_eq!(line_col(text, 8), (2, 2));
        assert_eq!(line_col(text, 1000), (3, 1));
    }
}
