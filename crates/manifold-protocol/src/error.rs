//! JSON-RPC error codes used by MCP and the error object written on the wire.

use serde::Serialize;
use serde_json::value::RawValue;

/// The JSON-RPC and MCP error codes Manifold sends or maps, in one place.
///
/// JSON-RPC leaves -32000..-32099 to implementations. The protocol's 2026-07-28 revision takes
/// -32020..-32099 for codes the specification itself defines (-32020 header mismatch, -32021
/// missing required client capability, -32022 unsupported protocol version, allocated upwards
/// from -32020) and leaves -32000..-32019 to servers; it also retires -32002 (resource not
/// found, replaced by -32602) and -32042 (URL elicitation required, 2025-11-25 only). Manifold's
/// own codes are therefore in -32010..-32019, in every revision (the tests check this table
/// against every revision's definitions).
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP: resource not found (the session era's code; defined until 2025-11-25). Hosts of
    /// the stateless era get -32602 instead.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// MCP 2026-07-28: an HTTP header does not match the body, or a required one is missing or
    /// malformed (HTTP 400).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28: the request needs a client capability the client did not declare
    /// (`data.requiredCapabilities`).
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// MCP 2026-07-28: the request's revision is not one the server speaks (`data.supported`,
    /// `data.requested`).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// Manifold: the upstream that owns the request is unavailable, failed or was cancelled.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32010;
    /// Manifold: the upstream did not answer in time.
    pub const UPSTREAM_TIMEOUT: i64 = -32011;
    /// Manifold: the upstream's answer was over its size limit and was dropped.
    pub const UPSTREAM_ANSWER_TOO_LARGE: i64 = -32012;
    /// Manifold: a session has as many requests in progress, or as much unread output, as it
    /// may have.
    pub const TOO_MANY_REQUESTS: i64 = -32013;
    /// Manifold: a tool call refused by a rate limit (`data.retryAfterMs` says when to retry).
    pub const RATE_LIMITED: i64 = -32014;
    /// Manifold: a tool call refused by a quota (`data.retryAfterMs`: until the window ends).
    pub const QUOTA_EXCEEDED: i64 = -32015;
    /// Manifold: a tool call refused because its limits could not be checked (the shared
    /// store is unreachable and `limits.fail_open` is false).
    pub const LIMIT_STORE_UNAVAILABLE: i64 = -32016;
    /// Manifold: refused at once because the upstream's circuit breaker is open (it stopped
    /// answering); `data.retryAfterMs` says when it will be tried again.
    pub const UPSTREAM_CIRCUIT_OPEN: i64 = -32017;
    /// Manifold: no token for the upstream could be had for the caller (its authorization
    /// server failed or refused, or the caller must authorize: `data.url` is the link).
    pub const UPSTREAM_AUTHORIZATION: i64 = -32018;
    /// MCP 2025-11-25: URL elicitation required (`data.elicitations`); retired in 2026-07-28,
    /// whose hosts get an `input_required` result instead.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;

    /// Every code of Manifold's own (not JSON-RPC's or MCP's).
    pub const MANIFOLD_OWN: [i64; 9] = [
        UPSTREAM_UNAVAILABLE,
        UPSTREAM_TIMEOUT,
        UPSTREAM_ANSWER_TOO_LARGE,
        TOO_MANY_REQUESTS,
        RATE_LIMITED,
        QUOTA_EXCEEDED,
        LIMIT_STORE_UNAVAILABLE,
        UPSTREAM_CIRCUIT_OPEN,
        UPSTREAM_AUTHORIZATION,
    ];
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<RawValue>>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data`, serialized; a value that cannot be serialized is left out.
    pub fn with_data(mut self, data: &impl Serialize) -> Self {
        self.data = serde_json::value::to_raw_value(data).ok();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::codes::*;

    /// A revision, the error codes it defines beyond JSON-RPC's own, and the range it reserves
    /// for the specification, if any.
    type Revision = (&'static str, &'static [i64], Option<(i64, i64)>);

    /// What each revision's `schema.ts` defines.
    const REVISIONS: [Revision; 5] = [
        ("2024-11-05", &[], None),
        ("2025-03-26", &[], None),
        ("2025-06-18", &[], None),
        ("2025-11-25", &[-32042], None),
        (
            "2026-07-28",
            &[-32020, -32021, -32022],
            Some((-32099, -32020)),
        ),
    ];

    /// Codes a revision retired, which must not be given another meaning.
    const RETIRED: [i64; 2] = [-32002, -32042];

    #[test]
    fn manifold_codes_collide_with_no_revision() {
        for code in MANIFOLD_OWN {
            assert!(
                (-32019..=-32000).contains(&code),
                "{code} is outside what every revision leaves to implementations"
            );
            assert!(
                !RETIRED.contains(&code),
                "{code} was retired by the protocol"
            );
            for (revision, defined, reserved) in REVISIONS {
                assert!(!defined.contains(&code), "{code} is defined by {revision}");
                if let Some((low, high)) = reserved {
                    assert!(
                        !(low..=high).contains(&code),
                        "{code} is in the range {revision} reserves"
                    );
                }
            }
        }
        let mut unique = MANIFOLD_OWN.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            MANIFOLD_OWN.len(),
            "every code means one thing"
        );
    }

    #[test]
    fn the_stateless_eras_codes_are_its_own() {
        let (_, defined, _) = REVISIONS[4];
        assert_eq!(
            defined,
            [
                HEADER_MISMATCH,
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                UNSUPPORTED_PROTOCOL_VERSION
            ]
        );
    }

    #[test]
    fn json_rpc_codes_are_json_rpcs() {
        assert_eq!(
            [
                PARSE_ERROR,
                INVALID_REQUEST,
                METHOD_NOT_FOUND,
                INVALID_PARAMS,
                INTERNAL_ERROR
            ],
            [-32700, -32600, -32601, -32602, -32603]
        );
    }
}
