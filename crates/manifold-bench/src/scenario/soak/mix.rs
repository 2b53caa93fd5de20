//! What the soak sends: the kinds of request, the order they come in, and what each answer
//! must be. Every request's expected answer is known before it is sent, so each one can be
//! judged on its own: a result that holds what the call asked for, a list page of the
//! length the checked first page had, or the documented refusal of a rate limit.

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use crate::mcp::{RequestLine, ECHO_TEXT};

/// The kinds of request, in the order of every table and JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `echo` on one of the upstreams, forwarded.
    Call,
    /// `add` with the same arguments every time, answered by the result cache.
    Hit,
    /// `tools/list`, `resources/list` or `prompts/list`, answered from Manifold's pages.
    List,
    /// A tool whose rate limit is spent: refused before it reaches the upstream.
    Refusal,
}

pub const KINDS: [Kind; 4] = [Kind::Call, Kind::Hit, Kind::List, Kind::Refusal];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Call => "call",
            Kind::Hit => "hit",
            Kind::List => "list",
            Kind::Refusal => "refusal",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The order of kinds within every 20 requests of a session: 12 calls, 4 hits, 2 lists and
/// 2 refusals, spread out so that no kind comes in long runs.
const PATTERN: [Kind; 20] = {
    use Kind::{Call as C, Hit as H, List as L, Refusal as R};
    [C, H, C, L, C, R, C, H, C, C, H, C, L, C, R, C, H, C, C, C]
};

/// The tool every refusal calls, and the rate limit that refuses it: one call a day, spent
/// by the call that primes the run, so that every later call is refused.
pub const REFUSED_TOOL: &str = "alpha0__whoami";
pub const REFUSED_RATE: &str = "1/day";

/// The code of a call refused by a rate limit (README, "Teams, authentication and limits").
pub const RATE_LIMITED: i64 = -32014;

/// The lists every list request cycles through.
pub const LISTS: [&str; 3] = ["tools/list", "resources/list", "prompts/list"];

/// One request of the mix and what its answer must be.
pub struct Request {
    pub kind: Kind,
    pub line: RequestLine,
    /// The upstream a call or a hit names, for the fixtures' own counts.
    pub upstream: Option<usize>,
    expect: Expect,
}

enum Expect {
    /// A result (not a tool error) holding these bytes.
    Holding(Vec<u8>),
    /// A result of exactly this many bytes besides the digits of its id.
    Length(usize),
    /// A JSON-RPC error holding these bytes (its code).
    Refused(Vec<u8>),
}

/// How a tool result says the tool failed, as Manifold and the fixture write it.
const TOOL_ERROR: &[u8] = br#""isError":true"#;

impl Request {
    /// Whether `text`, an answer to this request under id `id` (a result if `ok`), is the
    /// answer this request must get.
    pub fn accepts(&self, id: u64, ok: bool, text: &[u8]) -> bool {
        let holds = |needle: &[u8]| memchr::memmem::find(text, needle).is_some();
        match &self.expect {
            Expect::Holding(needle) => ok && holds(needle) && !holds(TOOL_ERROR),
            Expect::Length(len) => ok && text.len() == len + digits(id),
            Expect::Refused(needle) => !ok && holds(needle),
        }
    }
}

/// Every request of the mix, grouped by kind.
pub struct Mix {
    by_kind: [Vec<Request>; 4],
}

impl Mix {
    /// Calls and hits spread over `upstreams` fixtures (`alpha0..`); list requests expect the
    /// page lengths in `list_lengths` (see `Mix::list_length`), in the order of `LISTS`.
    pub fn new(upstreams: usize, list_lengths: [usize; 3]) -> Self {
        let calls = (0..upstreams).map(|i| Request {
            kind: Kind::Call,
            line: RequestLine::echo(&format!("alpha{i}__echo")),
            upstream: Some(i),
            expect: Expect::Holding(ECHO_TEXT.as_bytes().to_vec()),
        });
        let hits = (0..upstreams).map(|i| Request {
            kind: Kind::Hit,
            line: hit_line(i),
            upstream: Some(i),
            expect: Expect::Holding(format!("\"sum\":{}", hit_sum(i)).into_bytes()),
        });
        let lists = LISTS.iter().zip(list_lengths).map(|(method, len)| Request {
            kind: Kind::List,
            line: RequestLine::new(method, &json!({})),
            upstream: None,
            expect: Expect::Length(len),
        });
        let refusal = Request {
            kind: Kind::Refusal,
            line: RequestLine::tools_call(REFUSED_TOOL, &json!({})),
            upstream: None,
            expect: Expect::Refused(format!("\"code\":{RATE_LIMITED}").into_bytes()),
        };
        Self {
            by_kind: [
                calls.collect(),
                hits.collect(),
                lists.collect(),
                vec![refusal],
            ],
        }
    }

    /// The `n`-th request of session `j`: its kind from the pattern (each session starts at
    /// another place in it), then the next request of that kind (`counters`, per session).
    pub fn pick(&self, j: usize, n: u64, counters: &mut [usize; 4]) -> &Request {
        let slot = (n as usize + j) % PATTERN.len();
        let kind = PATTERN[slot].index();
        let of_kind = &self.by_kind[kind];
        let request = &of_kind[(counters[kind] + j) % of_kind.len()];
        counters[kind] += 1;
        request
    }

    /// The share of each kind in the mix, in the order of `KINDS`.
    pub fn shares() -> [f64; 4] {
        KINDS.map(|k| PATTERN.iter().filter(|p| **p == k).count() as f64 / PATTERN.len() as f64)
    }
}

/// The cached call to upstream `i`: `add` with arguments that never change.
pub fn hit_line(i: usize) -> RequestLine {
    RequestLine::tools_call(&format!("alpha{i}__add"), &json!({ "a": 1000, "b": i }))
}

fn hit_sum(i: usize) -> usize {
    1000 + i
}

/// The length a list answer must keep: the answer of the checked first page, less the
/// digits of its id (every later answer differs only in its id).
pub fn list_length(id: u64, text: &[u8]) -> usize {
    text.len().saturating_sub(digits(id))
}

/// Checks a list `result`: every one of `upstreams` fixtures contributes the same number of
/// items (by name prefix, or URI prefix for resources), at least one, and nothing else.
pub fn check_list(method: &str, result: &Value, upstreams: usize) -> Result<usize> {
    let member = method.trim_end_matches("/list");
    let items = result
        .get(member)
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("{method}: no {member} in {result}"))?;
    let owner = |item: &Value| {
        let name = item.get("name").and_then(Value::as_str).unwrap_or("");
        let uri = item.get("uri").and_then(Value::as_str).unwrap_or("");
        (0..upstreams).find(|i| {
            name.starts_with(&format!("alpha{i}__")) || uri.starts_with(&format!("alpha{i}+"))
        })
    };
    let mut each = vec![0usize; upstreams];
    for item in items {
        match owner(item) {
            Some(i) => each[i] += 1,
            None => bail!("{method}: an item of no upstream: {item}"),
        }
    }
    if each.iter().any(|n| *n == 0 || *n != each[0]) {
        bail!("{method}: items per upstream {each:?}");
    }
    Ok(items.len())
}

fn digits(id: u64) -> usize {
    id.checked_ilog10().map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_has_the_documented_shares() {
        assert_eq!(Mix::shares(), [0.6, 0.2, 0.1, 0.1]);
    }

    #[test]
    fn every_session_cycles_through_every_request() {
        let mix = Mix::new(10, [100, 50, 40]);
        let mut seen = std::collections::HashSet::new();
        let mut counters = [0; 4];
        for n in 0..400 {
            let r = mix.pick(3, n, &mut counters);
            seen.insert((r.kind.index(), r.upstream, r.line.headers.clone()));
        }
        // 10 calls, 10 hits, 3 lists, 1 refusal.
        assert_eq!(seen.len(), 24, "{seen:?}");
    }

    #[test]
    fn answers_are_judged_by_kind() {
        let mix = Mix::new(2, [30, 30, 30]);
        let (call, hit) = (&mix.by_kind[0][1], &mix.by_kind[1][1]);
        let echo = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{ECHO_TEXT}"}}]}}}}"#
        );
        assert!(call.accepts(7, true, echo.as_bytes()));
        assert!(!call.accepts(7, false, echo.as_bytes()));
        let failed = echo.replace("]}", r#"],"isError":true}"#);
        assert!(!call.accepts(7, true, failed.as_bytes()));
        let sum = br#"{"jsonrpc":"2.0","id":9,"result":{"structuredContent":{"sum":1001}}}"#;
        assert!(hit.accepts(9, true, sum));
        assert!(
            !mix.by_kind[1][0].accepts(9, true, sum),
            "another upstream's sum"
        );
        let page = br#"{"jsonrpc":"2.0","id":12,"result":{"tools":[]}}"#;
        let lists = Mix::new(2, [list_length(12, page), 0, 0]);
        let list = &lists.by_kind[2][0];
        assert!(list.accepts(12, true, page));
        let later = br#"{"jsonrpc":"2.0","id":345,"result":{"tools":[]}}"#;
        assert!(list.accepts(345, true, later));
        assert!(!list.accepts(345, true, page));
        let refusal = &mix.by_kind[3][0];
        let refused = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32014,"message":"rate"}}"#;
        assert!(refusal.accepts(5, false, refused));
        assert!(!refusal.accepts(5, true, refused));
        let other = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32015,"message":"quota"}}"#;
        assert!(!refusal.accepts(5, false, other));
    }

    #[test]
    fn lists_must_cover_every_upstream_alike() {
        let tools = json!({ "tools": [{ "name": "alpha0__echo" }, { "name": "alpha1__echo" }] });
        assert_eq!(check_list("tools/list", &tools, 2).unwrap(), 2);
        assert!(check_list("tools/list", &tools, 3).is_err());
        let uris = json!({ "resources": [{ "uri": "alpha0+x://a" }, { "uri": "beta+x://a" }] });
        assert!(check_list("resources/list", &uris, 1).is_err());
        assert!(check_list("prompts/list", &json!({}), 1).is_err());
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(12345), 5);
    }
}
