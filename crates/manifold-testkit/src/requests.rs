//! What a test asks Manifold as a host, the same over stdio ([`crate::process::Manifold`]) and
//! over Streamable HTTP (`http::Host`): each transport says how one request is answered, and
//! everything built on that is written once here.

use serde_json::{json, Value};

use crate::process::text_of;

/// A host's side of a session with Manifold. Implementors answer one request; the provided
/// methods are the calls, reads, lists and fixture counts the tests repeat.
pub trait Requests {
    /// Sends a request and returns its answer (a result or an error), waiting (bounded).
    fn request(&mut self, method: &str, params: Value) -> Value;

    /// Calls a tool and returns the whole response.
    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// Calls `tool`, a fixture's `echo`, with `text`; asserts the text came back, and
    /// returns the whole response.
    fn echo(&mut self, tool: &str, text: &str) -> Value {
        let r = self.call(tool, json!({"text": text}));
        assert_eq!(text_of(&r), text, "{r}");
        r
    }

    /// Reads the resource `uri`; asserts the answer holds contents, and returns it whole.
    fn read(&mut self, uri: &str) -> Value {
        let r = self.request("resources/read", json!({"uri": uri}));
        assert!(r["result"]["contents"].is_array(), "{r}");
        r
    }

    /// Every item of a paginated list, following nextCursor.
    fn list_all(&mut self, method: &str, key: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut params = json!({});
        for _ in 0..1000 {
            let r = self.request(method, params.clone());
            let result = r
                .get("result")
                .unwrap_or_else(|| panic!("{method} failed: {r}"));
            items.extend(result[key].as_array().unwrap().iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => params = json!({ "cursor": c }),
                None => return items,
            }
        }
        panic!("{method} never ended");
    }

    /// The `field` of every item of a paginated list (`names("tools/list", "tools", "name")`).
    fn names(&mut self, method: &str, key: &str, field: &str) -> Vec<String> {
        self.list_all(method, key)
            .iter()
            .map(|t| t[field].as_str().unwrap().to_owned())
            .collect()
    }

    /// The name of every tool, following nextCursor.
    fn all_tool_names(&mut self) -> Vec<String> {
        self.names("tools/list", "tools", "name")
    }

    /// How many times the fixture behind `upstream` (its prefix) did `what`: `tool:NAME` (calls
    /// of a tool) or `read:URI` (reads of a resource), in its own names. A cache hit never
    /// reaches it.
    fn call_count(&mut self, upstream: &str, what: &str) -> u64 {
        let r = self.call(&format!("{upstream}__call_count"), json!({"what": what}));
        text_of(&r)
            .parse()
            .unwrap_or_else(|e| panic!("call_count answered {r}: {e}"))
    }

    /// How many times the fixture behind `upstream` ran its tool `tool` (its own name).
    fn calls_of(&mut self, upstream: &str, tool: &str) -> u64 {
        self.call_count(upstream, &format!("tool:{tool}"))
    }

    /// How many times the fixture behind `upstream` read its resource `uri` (its own URI).
    fn reads_of(&mut self, upstream: &str, uri: &str) -> u64 {
        self.call_count(upstream, &format!("read:{uri}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `tools/list` in two pages and `fx__call_count` with the length of what it was
    /// asked, keeping every request it was sent.
    #[derive(Default)]
    struct Scripted {
        sent: Vec<(String, Value)>,
    }

    impl Requests for Scripted {
        fn request(&mut self, method: &str, params: Value) -> Value {
            self.sent.push((method.to_owned(), params.clone()));
            let result = match (method, params["cursor"].as_str()) {
                ("tools/list", None) => json!({"tools": [{"name": "a"}], "nextCursor": "2"}),
                ("tools/list", Some("2")) => json!({"tools": [{"name": "b"}]}),
                ("tools/call", _) => {
                    let what = params["arguments"]["what"].as_str().unwrap_or_default();
                    json!({"content": [{"type": "text", "text": what.len().to_string()}]})
                }
                _ => return json!({"error": {"code": -32601, "message": "unknown"}}),
            };
            json!({"result": result})
        }
    }

    #[test]
    fn lists_follow_every_cursor_and_counts_ask_the_fixture_in_its_own_names() {
        let mut host = Scripted::default();
        assert_eq!(host.names("tools/list", "tools", "name"), ["a", "b"]);
        assert_eq!(host.calls_of("fx", "echo"), "tool:echo".len() as u64);
        assert_eq!(host.reads_of("fx", "f://r"), "read:f://r".len() as u64);
        let (method, params) = &host.sent[2];
        assert_eq!(method, "tools/call");
        assert_eq!(
            params,
            &json!({"name": "fx__call_count", "arguments": {"what": "tool:echo"}})
        );
    }
}
