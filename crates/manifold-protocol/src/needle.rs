//! Substring searches prebuilt for the few needles the forwarding path looks for in every
//! message (is there a progress token to map, a URI to expose?): building a searcher costs
//! more than searching a small message with one.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// `"uri"`: a member named `uri`, as results that name resources have.
pub static URI_MEMBER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"uri\""));

/// `progressToken`, in a request's `_meta`.
pub static PROGRESS_TOKEN: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"progressToken"));

/// `taskId`, in results and notifications about tasks.
pub static TASK_ID: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"taskId"));

/// `"data"`: an error's `data` member.
pub static DATA_MEMBER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"data\""));

/// A host's W3C trace context in `_meta` (looked for only while traces are exported).
pub static TRACEPARENT: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"traceparent\""));

/// `"_meta"`: a request's metadata member.
pub static META_MEMBER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"_meta\""));

/// A tool result's error flag.
pub static IS_ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"isError\""));

/// The `_meta` member by which a host steers Manifold's result cache.
pub static CACHE_META: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"manifold/cache\""));

/// The stateless era's protocol version key, in a request's `_meta`: a request that has it
/// already speaks that era.
pub static PROTOCOL_VERSION_META: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"io.modelcontextprotocol/protocolVersion\""));

/// The stateless era's subscription id key, in the `_meta` of what a `subscriptions/listen`
/// stream carries.
pub static SUBSCRIPTION_ID_META: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"io.modelcontextprotocol/subscriptionId\""));

/// `"resultType"`: what kind of result a stateless-era result is.
pub static RESULT_TYPE: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"resultType\""));

/// `input_required`: a multi round-trip request's interim result type.
pub static INPUT_REQUIRED: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"input_required"));

/// `"requestState"`: the state a multi round-trip request's retry carries.
pub static REQUEST_STATE: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"requestState\""));

/// `ui://`: an MCP Apps resource's URI scheme, which results may name outside a `uri` member
/// (in `_meta`).
pub static UI_SCHEME: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"ui://"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_it_names() {
        assert!(URI_MEMBER.find(br#"{"x":{"uri":"a"}}"#).is_some());
        assert!(URI_MEMBER.find(br#"{"uris":1}"#).is_none());
        assert!(PROGRESS_TOKEN
            .find(br#"{"_meta":{"progressToken":1}}"#)
            .is_some());
        assert!(DATA_MEMBER.find(br#"{"code":1,"data":{}}"#).is_some());
    }
}
