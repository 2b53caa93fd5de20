//! Protocol revisions Manifold speaks, and version negotiation.

/// Legacy-era revisions (the `initialize` handshake), oldest first.
pub const SUPPORTED: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The newest revision Manifold speaks.
pub const LATEST: &str = "2025-11-25";

/// Whether `version` is one Manifold speaks.
pub fn is_supported(version: &str) -> bool {
    SUPPORTED.contains(&version)
}

/// The server side of negotiation: the client's version if supported, else our latest.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|v| SUPPORTED.iter().copied().find(|s| *s == v))
        .unwrap_or(LATEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_like_the_spec_says() {
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate(Some("2099-01-01")), LATEST);
        assert_eq!(negotiate(None), LATEST);
        assert!(is_supported("2025-06-18"));
        assert!(!is_supported("2026-07-28"));
    }
}
