//! Exposed names for tools and prompts: prefix, separator, sanitizing and shortening.

use manifold_config::NameSettings;

/// How an exposed name came to differ from `{prefix}{separator}{original}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameOrigin {
    /// Exactly `{prefix}{separator}{original}` (or the original when there is no prefix).
    Prefixed,
    /// Characters hosts refuse were replaced with `_`.
    Sanitized,
    /// Too long: truncated, with a stable hash of the full name appended.
    Shortened,
    /// Set by a `rename` entry in the config.
    Renamed,
}

/// Replaces every character outside `[A-Za-z0-9_-]` with `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The exposed name of `original` from an upstream whose sanitized prefix is `prefix`.
pub fn exposed_name(
    settings: &NameSettings,
    prefix: &str,
    original: &str,
    rename: Option<&str>,
) -> (String, NameOrigin) {
    let (wanted, mut origin) = match rename {
        Some(renamed) => (renamed.to_owned(), NameOrigin::Renamed),
        None if prefix.is_empty() => (original.to_owned(), NameOrigin::Prefixed),
        None => (
            format!("{prefix}{}{original}", settings.separator),
            NameOrigin::Prefixed,
        ),
    };
    let mut name = sanitize(&wanted);
    if name != wanted && origin == NameOrigin::Prefixed {
        origin = NameOrigin::Sanitized;
    }
    if name.is_empty() {
        // Hosts refuse an empty name; the placeholder differs from what was wanted.
        name.push('_');
        if origin == NameOrigin::Prefixed {
            origin = NameOrigin::Sanitized;
        }
    }
    if name.len() > settings.max_length {
        name = shorten(&name, &wanted, settings.max_length);
        origin = NameOrigin::Shortened;
    }
    (name, origin)
}

/// Keeps the head of `name` and appends `_` and 8 hex digits of a hash of the unsanitized
/// full name, so that two long names sharing a head still differ.
fn shorten(name: &str, full: &str, max: usize) -> String {
    let hash = format!("{:08x}", stable_hash(full));
    if max <= hash.len() + 1 {
        return hash[..max.min(hash.len())].to_owned();
    }
    // `name` is ASCII after sanitizing, so byte slicing is on character boundaries.
    let keep = max - hash.len() - 1;
    format!("{}_{hash}", &name[..keep])
}

/// FNV-1a, folded to 32 bits: stable across builds and platforms, unlike `std`'s hasher.
pub fn stable_hash(s: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 32)) as u32
}

/// Whether `name` is one every common host accepts under the given length limit.
pub fn is_host_safe(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> NameSettings {
        NameSettings {
            separator: "__".into(),
            max_length: 64,
        }
    }

    #[test]
    fn prefixes_with_the_separator() {
        assert_eq!(
            exposed_name(&settings(), "time", "get_current_time", None),
            ("time__get_current_time".into(), NameOrigin::Prefixed)
        );
        assert_eq!(
            exposed_name(&settings(), "", "echo", None),
            ("echo".into(), NameOrigin::Prefixed)
        );
        let dash = NameSettings {
            separator: "-".into(),
            max_length: 64,
        };
        assert_eq!(exposed_name(&dash, "a", "b", None).0, "a-b");
    }

    #[test]
    fn sanitizes_what_hosts_refuse() {
        assert_eq!(
            exposed_name(&settings(), "fs", "read.file/v2 é", None),
            ("fs__read_file_v2__".into(), NameOrigin::Sanitized)
        );
        assert_eq!(sanitize("my server"), "my_server");
    }

    /// Found by fuzzing: an empty name (no prefix, an upstream tool named "") became `_`
    /// but was reported as exactly its original, so `check` did not mark it.
    #[test]
    fn an_empty_name_made_into_a_placeholder_is_marked_sanitized() {
        assert_eq!(
            exposed_name(&settings(), "", "", None),
            ("_".into(), NameOrigin::Sanitized)
        );
        assert_eq!(
            exposed_name(&settings(), "", "", Some("")),
            ("_".into(), NameOrigin::Renamed)
        );
    }

    #[test]
    fn renames_replace_the_whole_name() {
        assert_eq!(
            exposed_name(&settings(), "time", "get_current_time", Some("now")),
            ("now".into(), NameOrigin::Renamed)
        );
    }

    #[test]
    fn shortens_deterministically_and_distinctly() {
        let long_a = format!("{}_a", "x".repeat(80));
        let long_b = format!("{}_b", "x".repeat(80));
        let (a, origin) = exposed_name(&settings(), "srv", &long_a, None);
        let (b, _) = exposed_name(&settings(), "srv", &long_b, None);
        assert_eq!(origin, NameOrigin::Shortened);
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_eq!(a, exposed_name(&settings(), "srv", &long_a, None).0);
        assert!(is_host_safe(&a, 64));
        // The hash is part of the contract: names must not change between releases.
        assert_eq!(stable_hash("srv__abc"), stable_hash("srv__abc"));
        assert_eq!(stable_hash(""), 0x4fd0bfc1);
        assert_eq!(stable_hash("srv__abc"), 0x2f6c819d);
    }

    #[test]
    fn every_name_is_host_safe() {
        for original in ["", "a", "ü", "a b.c:d/e", &"z".repeat(200)] {
            for max in [1, 5, 9, 10, 64, 128] {
                let s = NameSettings {
                    separator: "__".into(),
                    max_length: max,
                };
                let (name, _) = exposed_name(&s, "p", original, None);
                assert!(
                    is_host_safe(&name, max),
                    "{original:?} max {max} gave {name:?}"
                );
            }
        }
    }
}
