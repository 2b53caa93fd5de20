//! Tool names from operations.

/// The longest tool name hosts accept everywhere.
pub(crate) const MAX_NAME: usize = 64;

/// A tool's name: the `operationId` sanitized, else `{method}_{path}` sanitized; a name over 64
/// characters is shortened (see [`shorten`]).
pub(crate) fn tool_name(operation_id: Option<&str>, method: &str, path: &str) -> String {
    let from_id = operation_id
        .map(|id| (sanitize(id), id.to_string()))
        .filter(|(n, _)| !n.is_empty());
    let (name, source) = from_id.unwrap_or_else(|| {
        let source = format!("{method}_{path}");
        (sanitize(&source), source)
    });
    if name.len() > MAX_NAME {
        shorten(&name, &source)
    } else {
        name
    }
}

/// Characters outside `[A-Za-z0-9_-]` become `_` (runs collapsed, none at the ends).
pub(crate) fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

/// The head of a name too long for hosts, `_` and 8 hex digits of a hash of the text it was
/// made from: real descriptions hold long operationIds that agree on their first 64
/// characters, and a plain cut would give them one name. The same rule as Manifold's own
/// shortening of exposed names, so a name is stable across loads and builds.
fn shorten(name: &str, source: &str) -> String {
    let hash = format!("{:08x}", stable_hash(source));
    // `name` is ASCII after sanitizing, so byte slicing is on character boundaries.
    let head = name[..MAX_NAME - hash.len() - 1].trim_end_matches('_');
    format!("{head}_{hash}")
}

/// FNV-1a, folded to 32 bits: stable across builds and platforms, unlike `std`'s hasher.
fn stable_hash(text: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 32)) as u32
}

/// Whether a chosen name (a rename) is already a valid tool name.
pub(crate) fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_operation_id_else_method_and_path() {
        assert_eq!(tool_name(Some("listPets"), "get", "/pets"), "listPets");
        assert_eq!(
            tool_name(Some("pets.list v2"), "get", "/pets"),
            "pets_list_v2"
        );
        assert_eq!(
            tool_name(None, "get", "/pets/{petId}/toys"),
            "get_pets_petId_toys"
        );
        assert_eq!(tool_name(Some("..."), "delete", "/a"), "delete_a");
        let long = tool_name(Some(&"x".repeat(100)), "get", "/");
        assert_eq!(long.len(), 64);
        assert!(
            long.starts_with(&"x".repeat(55)) && long.as_bytes()[55] == b'_',
            "{long}"
        );
        assert_eq!(long, tool_name(Some(&"x".repeat(100)), "post", "/b"));
        assert_ne!(long, tool_name(Some(&"x".repeat(101)), "get", "/"));
        assert!(is_valid("get_pets") && !is_valid("get pets") && !is_valid(""));
    }
}
