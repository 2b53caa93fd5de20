//! Tool names from operations.

/// The longest tool name hosts accept everywhere.
pub(crate) const MAX_NAME: usize = 64;

/// A tool's name: the `operationId` sanitized, else `{method}_{path}` sanitized.
pub(crate) fn tool_name(operation_id: Option<&str>, method: &str, path: &str) -> String {
    let from_id = operation_id.map(sanitize).filter(|n| !n.is_empty());
    from_id.unwrap_or_else(|| sanitize(&format!("{method}_{path}")))
}

/// Characters outside `[A-Za-z0-9_-]` become `_` (runs collapsed, none at the ends), cut at 64.
pub(crate) fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_end_matches('_');
    trimmed
        .chars()
        .take(MAX_NAME)
        .collect::<String>()
        .trim_end_matches('_')
        .to_string()
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
        assert_eq!(tool_name(Some(&"x".repeat(100)), "get", "/").len(), 64);
        assert!(is_valid("get_pets") && !is_valid("get pets") && !is_valid(""));
    }
}
