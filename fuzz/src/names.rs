//! Exposed tool and prompt names (`manifold_catalog::naming`): every name is one hosts
//! accept (`^[A-Za-z0-9_-]{1,max}$`), it depends only on its own inputs, an unchanged name is
//! exactly `{prefix}{separator}{original}`, a shortened one is exactly as long as the limit
//! allows and ends with the hash of the wanted name, and a prefix only ever adds
//! `{prefix}{separator}` in front.

use manifold_catalog::naming::{exposed_name, is_host_safe, sanitize, stable_hash};
use manifold_catalog::NameOrigin;
use manifold_config::NameSettings;

use crate::input::Input;

pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let settings = NameSettings {
        separator: ["__", "_", "-", "x", "--z"][usize::from(input.byte()) % 5].to_owned(),
        // The range the config accepts.
        max_length: 1 + usize::from(input.byte()) % 128,
    };
    let prefix = sanitize(&input.text(40));
    let original = input.text(160);
    let rename = input.byte().is_multiple_of(4).then(|| input.text(80));

    one(&settings, &prefix, &original, rename.as_deref());
    // The same original with its own upstream's prefix only: the separator is never dropped.
    let bare = one(&settings, "", &original, None).0;
    if !prefix.is_empty()
        && !original.is_empty()
        && bare.len() + prefix.len() + settings.separator.len() <= settings.max_length
    {
        let (name, _) = one(&settings, &prefix, &original, None);
        assert_eq!(name, format!("{prefix}{}{bare}", settings.separator));
    }
}

/// Checks one name against its contract and returns it.
fn one(
    settings: &NameSettings,
    prefix: &str,
    original: &str,
    rename: Option<&str>,
) -> (String, NameOrigin) {
    let (name, origin) = exposed_name(settings, prefix, original, rename);
    let max = settings.max_length;
    assert!(is_host_safe(&name, max), "{name:?} (limit {max})");
    assert_eq!(
        exposed_name(settings, prefix, original, rename),
        (name.clone(), origin),
        "the same inputs twice"
    );
    let wanted = match rename {
        Some(r) => r.to_owned(),
        None => wanted(settings, prefix, original),
    };
    match origin {
        NameOrigin::Prefixed => assert_eq!(name, wanted),
        NameOrigin::Sanitized => {
            let sanitized = sanitize(&wanted);
            assert!(
                name == sanitized || (sanitized.is_empty() && name == "_"),
                "{name:?}"
            );
        }
        NameOrigin::Renamed => {
            assert!(rename.is_some());
            assert!(name == sanitize(&wanted) || (wanted.is_empty() && name == "_"));
        }
        NameOrigin::Shortened => {
            // Below ten characters only the hash is left, at most its eight digits.
            assert_eq!(
                name.len(),
                if max > 9 { max } else { max.min(8) },
                "{name:?}"
            );
            let full = sanitize(&wanted);
            if max > 9 {
                assert!(name.starts_with(&full[..max - 9]), "{name:?} from {full:?}");
                assert!(name.ends_with(&format!("_{:08x}", stable_hash(&wanted))));
            }
        }
    }
    (name, origin)
}

fn wanted(settings: &NameSettings, prefix: &str, original: &str) -> String {
    if prefix.is_empty() {
        original.to_owned()
    } else {
        format!("{prefix}{}{original}", settings.separator)
    }
}
