//! Resource URI namespacing (`manifold_catalog::uri`): a URI prefix made from any key is
//! scheme-safe and holds no `+`; exposing then splitting gives back the prefix and the
//! original, for `ui://` and `skill://` URIs and any other; and every exposed URI has one
//! spelling only: whatever `split` accepts, `expose` writes back exactly.

use manifold_catalog::uri::{expose, split, uri_prefix, KEPT_SCHEMES};

use crate::input::Input;

pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let key = input.text(40);
    let prefix = uri_prefix(&key);
    assert!(
        prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'),
        "{prefix:?} from {key:?}"
    );
    let mut original = input.text(120);
    // Half the originals start with a scheme that keeps itself (`ui://`, `skill://`).
    let pick = usize::from(input.byte());
    if pick.is_multiple_of(2) {
        original.insert_str(0, KEPT_SCHEMES[(pick / 2) % KEPT_SCHEMES.len()]);
    }
    let exposed = expose(&prefix, &original);
    assert_eq!(
        split(&exposed),
        Some((prefix.as_str(), original.as_str().into())),
        "{original:?} exposed as {exposed:?}"
    );
    assert_eq!(expose("", &original), original);

    // Any text the fuzzer makes up: if it splits, it is the one spelling of what it splits to.
    let made_up = String::from_utf8_lossy(input.rest());
    if let Some((p, o)) = split(&made_up) {
        assert_eq!(expose(p, &o), made_up, "split into {p:?} and {o:?}");
    }
}
