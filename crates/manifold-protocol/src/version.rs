//! Protocol revisions Manifold speaks, their two eras, and version negotiation.
//!
//! The session era (2024-11-05 .. 2025-11-25) opens with the `initialize` handshake and keeps
//! what it negotiated for the session. The stateless era (2026-07-28) has no handshake: every
//! request names its revision and the client's capabilities in `params._meta` (the keys in
//! [`meta`]), and `server/discover` says what a server speaks.

/// Session-era revisions (the `initialize` handshake), oldest first.
pub const SUPPORTED: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The newest session-era revision Manifold speaks.
pub const LATEST: &str = "2025-11-25";

/// Stateless-era revisions, oldest first.
pub const MODERN: [&str; 1] = ["2026-07-28"];

/// The newest stateless-era revision Manifold speaks.
pub const MODERN_LATEST: &str = "2026-07-28";

/// Every revision Manifold speaks, oldest first (what `server/discover` lists, and the
/// `data.supported` of an unsupported-version error).
pub const ALL: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// The two eras of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2024-11-05 .. 2025-11-25: `initialize`, then a session.
    Session,
    /// 2026-07-28 on: no handshake, no session; `_meta` on every request.
    Stateless,
}

impl Era {
    pub fn name(self) -> &'static str {
        match self {
            Era::Session => "session",
            Era::Stateless => "stateless",
        }
    }
}

/// The era of a revision Manifold speaks; `None` for one it does not.
pub fn era_of(version: &str) -> Option<Era> {
    if SUPPORTED.contains(&version) {
        Some(Era::Session)
    } else if MODERN.contains(&version) {
        Some(Era::Stateless)
    } else {
        None
    }
}

/// The revision as a `'static` string, if Manifold speaks it (either era).
pub fn known(version: &str) -> Option<&'static str> {
    ALL.iter().copied().find(|v| *v == version)
}

/// Whether `version` is a session-era revision Manifold speaks.
pub fn is_supported(version: &str) -> bool {
    SUPPORTED.contains(&version)
}

/// The newest stateless-era revision Manifold speaks among `offered` (a server's
/// `supportedVersions`, or the `data.supported` of its unsupported-version error).
pub fn newest_modern<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered.into_iter().collect();
    MODERN.iter().rev().copied().find(|v| offered.contains(v))
}

/// The newest session-era revision Manifold speaks among `offered`.
pub fn newest_session<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered.into_iter().collect();
    SUPPORTED
        .iter()
        .rev()
        .copied()
        .find(|v| offered.contains(v))
}

/// The `_meta` keys of the stateless era.
pub mod meta {
    /// Request: the revision the request is spoken in (required).
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// Request: the client's capabilities for this request (required).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Request: the client's name and version (should be present).
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Request: the least severe log level the client wants to hear for this request; without
    /// it, no `notifications/message` may be sent for the request.
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// Result: the server's name and version.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// Notification (and the closing result of `subscriptions/listen`): the id of the
    /// `subscriptions/listen` request whose stream it belongs to.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
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

    #[test]
    fn picks_the_newest_common_revision_of_each_era() {
        let offered = ["2025-06-18", "2026-07-28", "2099-01-01"];
        assert_eq!(newest_modern(offered), Some("2026-07-28"));
        assert_eq!(newest_session(offered), Some("2025-06-18"));
        assert_eq!(newest_modern(["2025-11-25"]), None);
        assert_eq!(newest_session(["2026-07-28"]), None);
    }

    #[test]
    fn each_revision_belongs_to_one_era() {
        assert_eq!(era_of("2025-11-25"), Some(Era::Session));
        assert_eq!(era_of("2024-11-05"), Some(Era::Session));
        assert_eq!(era_of("2026-07-28"), Some(Era::Stateless));
        assert_eq!(era_of("2099-01-01"), None);
        for v in ALL {
            assert_eq!(known(v), Some(v));
            assert!(era_of(v).is_some());
        }
        assert_eq!(SUPPORTED.len() + MODERN.len(), ALL.len());
    }
}
