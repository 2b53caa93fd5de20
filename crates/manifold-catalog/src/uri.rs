//! Reversible resource URI namespacing: `{uri prefix}+{original}`, except for the schemes that
//! keep themselves ([`KEPT_SCHEMES`]): `ui://{rest}` (MCP Apps) is exposed as
//! `ui://{uri prefix}/{rest}`, because hosts render only `ui://` resources, and
//! `skill://{rest}` (the skills extension) as `skill://{uri prefix}/{rest}`, so that a skill's
//! name stays the last segment before `/SKILL.md` and its files stay under its directory. This
//! module is the one place either form is made or undone.
//!
//! The URI prefix is the upstream's prefix made into a valid URI scheme start (lowercase
//! letters, digits, `-`, `.`; first character a letter), and never contains `+`, so the first
//! `+` of an exposed URI always ends it. Templates are namespaced the same way, so an exposed
//! URI that matches an exposed template routes by its prefix alone. One upstream may have an
//! empty URI prefix: its URIs are exposed unchanged, and every URI without a known prefix is
//! routed to it.

use std::borrow::Cow;

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

/// The scheme of MCP Apps resources, kept when namespaced.
pub const UI_SCHEME: &str = "ui://";

/// The scheme of skills (the skills extension), kept when namespaced.
pub const SKILL_SCHEME: &str = "skill://";

/// The schemes a namespaced URI keeps: `{scheme}{rest}` is exposed as
/// `{scheme}{uri prefix}/{rest}`.
pub const KEPT_SCHEMES: [&str; 2] = [UI_SCHEME, SKILL_SCHEME];

/// The kept scheme `uri` starts with, and the rest of it.
fn kept_scheme(uri: &str) -> Option<(&'static str, &str)> {
    KEPT_SCHEMES
        .iter()
        .find_map(|scheme| uri.strip_prefix(scheme).map(|rest| (*scheme, rest)))
}

/// `{prefix}+{original}` (`{scheme}{prefix}/{rest}` for `{scheme}{rest}` of a kept scheme);
/// the original itself when the prefix is empty.
pub fn expose(uri_prefix: &str, original: &str) -> String {
    if uri_prefix.is_empty() {
        return original.to_owned();
    }
    if let Some((scheme, rest)) = kept_scheme(original) {
        return format!("{scheme}{uri_prefix}/{rest}");
    }
    let mut s = String::with_capacity(uri_prefix.len() + 1 + original.len());
    s.push_str(uri_prefix);
    s.push('+');
    s.push_str(original);
    s
}

/// Splits an exposed URI into its prefix and the original URI. Only what [`expose`] writes
/// is split: `{prefix}+ui://{rest}` (or `+skill://`) is not how such a URI is exposed, so it
/// is no exposed URI (else one resource would have two names, only one of them listed).
pub fn split(exposed: &str) -> Option<(&str, Cow<'_, str>)> {
    if let Some((scheme, rest)) = kept_scheme(exposed) {
        let (prefix, rest) = rest.split_once('/')?;
        return scheme_safe(prefix).then(|| (prefix, Cow::Owned(format!("{scheme}{rest}"))));
    }
    let (prefix, original) = exposed.split_once('+')?;
    (scheme_safe(prefix) && kept_scheme(original).is_none())
        .then_some((prefix, Cow::Borrowed(original)))
}

fn scheme_safe(prefix: &str) -> bool {
    prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
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
            Some(("everything", "test://static/resource/1".into()))
        );
        // An original that itself contains '+' survives: only the first '+' splits.
        assert_eq!(split("a+x+y://z"), Some(("a", "x+y://z".into())));
    }

    #[test]
    fn ui_uris_keep_their_scheme() {
        let exposed = expose("clock-a", "ui://clock/app.html");
        assert_eq!(exposed, "ui://clock-a/clock/app.html");
        assert_eq!(
            split(&exposed),
            Some(("clock-a", "ui://clock/app.html".into()))
        );
        // Two upstreams naming the same ui:// path get distinct URIs.
        assert_ne!(exposed, expose("clock-b", "ui://clock/app.html"));
        // Templates, a '+' in the path, and an empty rest round-trip too.
        let t = expose("p", "ui://widgets/{id}+x");
        assert_eq!(t, "ui://p/widgets/{id}+x");
        assert_eq!(split(&t), Some(("p", "ui://widgets/{id}+x".into())));
        assert_eq!(split(&expose("p", "ui://")), Some(("p", "ui://".into())));
        // Unchanged without a prefix; not a prefix when the host is not scheme-safe.
        assert_eq!(expose("", "ui://clock/app.html"), "ui://clock/app.html");
        assert_eq!(split("ui://Clock/app.html"), None);
        assert_eq!(split("ui://clock"), None);
    }

    /// Caught by the uris fuzz target: `p+ui://x` split into `p` and `ui://x`, a second
    /// spelling of the exposed `ui://p/x`, which no listing shows.
    #[test]
    fn a_ui_uri_has_one_exposed_spelling() {
        assert_eq!(expose("p", "ui://x/app.html"), "ui://p/x/app.html");
        assert_eq!(split("p+ui://x/app.html"), None);
        assert_eq!(
            split("ui://p/x/app.html"),
            Some(("p", "ui://x/app.html".into()))
        );
        // Other schemes that merely look alike keep the plus form.
        assert_eq!(split("p+uix://x"), Some(("p", "uix://x".into())));
    }

    #[test]
    fn skill_uris_keep_their_scheme() {
        let exposed = expose("alpha", "skill://pdf/SKILL.md");
        assert_eq!(exposed, "skill://alpha/pdf/SKILL.md");
        assert_eq!(
            split(&exposed),
            Some(("alpha", "skill://pdf/SKILL.md".into()))
        );
        // Two upstreams' skills of one name get distinct URIs, the name still last.
        assert_eq!(
            expose("beta", "skill://pdf/SKILL.md"),
            "skill://beta/pdf/SKILL.md"
        );
        // A file stays under its skill's directory.
        assert_eq!(
            expose("alpha", "skill://pdf/scripts/fill.py"),
            "skill://alpha/pdf/scripts/fill.py"
        );
        // One spelling only: the plus form of a skill URI is no exposed URI.
        assert_eq!(split("alpha+skill://pdf/SKILL.md"), None);
        assert_eq!(split("skill://Alpha/pdf/SKILL.md"), None);
        assert_eq!(split("skill://alpha"), None);
        assert_eq!(split("p+skills://x"), Some(("p", "skills://x".into())));
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
