//! Reversible resource URI namespacing: `{uri prefix}+{original}`.
//!
//! The URI prefix is the upstream's prefix made into a valid URI scheme start (lowercase
//! letters, digits, `-`, `.`; first character a letter), and never contains `+`, so the first
//! `+` of an exposed URI always ends it. Templates are namespaced the same way, so an exposed
//! URI that matches an exposed template routes by its prefix alone. One upstream may have an
//! empty URI prefix: its URIs are exposed unchanged, and every URI without a known prefix is
//! routed to it.

/// Makes a URI prefix from an upstream's prefix (or key, when the prefix is empty).
pub fn uri_prefix(prefix_or_key: &str) -> String {
    let mut out: String = prefix_or_key
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert(0, 'u');
    }
    out
}

/// `{prefix}+{original}`; the original itself when the prefix is empty.
pub fn expose(uri_prefix: &str, original: &str) -> String {
    if uri_prefix.is_empty() {
        return original.to_owned();
    }
    let mut s = String::with_capacity(uri_prefix.len() + 1 + original.len());
    s.push_str(uri_prefix);
    s.push('+');
    s.push_str(original);
    s
}

/// Splits an exposed URI into its prefix and the original URI.
pub fn split(exposed: &str) -> Option<(&str, &str)> {
    let (prefix, original) = exposed.split_once('+')?;
    let scheme_safe = prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    scheme_safe.then_some((prefix, original))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let p = uri_prefix("everything");
        let exposed = expose(&p, "test://static/resource/1");
        assert_eq!(exposed, "everything+test://static/resource/1");
        assert_eq!(
            split(&exposed),
            Some(("everything", "test://static/resource/1"))
        );
        // An original that itself contains '+' survives: only the first '+' splits.
        assert_eq!(split("a+x+y://z"), Some(("a", "x+y://z")));
    }

    #[test]
    fn prefixes_are_scheme_safe() {
        assert_eq!(uri_prefix("My Server_2"), "my-server-2");
        assert_eq!(uri_prefix("9lives"), "u9lives");
        assert_eq!(uri_prefix(""), "u");
        assert_eq!(split("file:///etc/passwd"), None);
        assert_eq!(split("Bad_Prefix+x://y"), None);
    }
}
