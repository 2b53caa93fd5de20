//! Tool descriptors (what tools/list shows). Behaviour lives in `calls.rs`.

use serde_json::{json, Value};

use crate::paging::paged;
use crate::rpc::RpcError;
use crate::state::State;
use crate::{client_tools, conformance, subscriptions, Args};

/// (name, what it does, JSON of the schema's properties, required) of every built-in tool.
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

const TEXT_PROP: &str = r#"{"text": {"type": "string", "description": "Text to echo back"}}"#;

#[rustfmt::skip]
const SPECS: [Spec; 16] = [
    ("echo", "Echoes `text` back as text and structuredContent", TEXT_PROP, &["text"]),
    ("add", "Adds two numbers", r#"{"a": {"type": "number"}, "b": {"type": "number"}}"#, &["a", "b"]),
    ("sleep", "Sleeps `ms` milliseconds (cancellable) then answers", r#"{"ms": {"type": "integer", "minimum": 0}}"#, &["ms"]),
    ("crash", "Exits the server process immediately with `code` (default 3)", r#"{"code": {"type": "integer"}}"#, &[]),
    ("garbage", "Writes a non-JSON line to stdout instead of a response", "{}", &[]),
    ("big", "Returns one text content of exactly `bytes` characters", r#"{"bytes": {"type": "integer", "minimum": 0}}"#, &["bytes"]),
    ("links", "Returns a resource_link and an embedded resource", "{}", &[]),
    ("fail", "Always returns a tool error (isError true)", "{}", &[]),
    ("whoami", "Returns the server name and pid", "{}", &[]),
    ("progress", "Sends `steps` progress notifications when given a progressToken, `interval_ms` apart (default 0)", r#"{"steps": {"type": "integer", "minimum": 0}, "interval_ms": {"type": "integer", "minimum": 0}}"#, &["steps"]),
    ("add_tool", "Adds an echo-like tool `name` and sends tools/list_changed; with `description`, gives it that description, replacing the definition of a run-time tool of that name; with `remove`, removes the run-time tool `name` instead", r#"{"name": {"type": "string"}, "description": {"type": "string"}, "remove": {"type": "boolean"}}"#, &["name"]),
    ("log", "Sends a notifications/message with `level` (default info) and `message`", r#"{"level": {"type": "string"}, "message": {"type": "string"}}"#, &["message"]),
    ("cancelled_count", "Returns how many in-flight calls were cancelled", "{}", &[]),
    ("call_count", "Returns how many times `what` happened: `tool:NAME` (calls of a tool) or `read:URI` (reads of a resource)", r#"{"what": {"type": "string"}}"#, &["what"]),
    ("null_id_error", "Answers with a parse error whose id is null, as a server that could not read the request would", "{}", &[]),
    ("trace_context", "Returns as text a JSON object: `meta`, the request's params._meta (or null), and `header`, the traceparent header of the HTTP request that carried it (or null)", "{}", &[]),
];

fn properties(json_text: &str) -> Value {
    // The texts are literals above; a typo is a fixture bug that its unit test catches.
    serde_json::from_str(json_text).unwrap_or_else(|_| json!({}))
}

pub fn is_builtin(name: &str) -> bool {
    SPECS.iter().any(|(n, ..)| *n == name)
}

/// True for every tool that exists from the start (built-in, extra, and those flags add).
pub fn is_static(state: &State, name: &str) -> bool {
    is_builtin(name)
        || is_extra(state, name)
        || (state.args.conformance && conformance::is_tool(name))
        || (state.args.client_tools && client_tools::is_tool(name))
        || (state.args.subscriptions && subscriptions::is_tool(name))
}

pub fn descriptor(name: &str, description: String, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": properties, "required": required },
        // Unknown member: lets tests check the aggregator passes tools through losslessly.
        "x-fixture": { "kept": true },
    })
}

/// The description `add_tool` gives a tool when it is not told one.
pub fn dynamic_description(name: &str, server: &str) -> String {
    format!("Dynamic tool {name} of fixture server {server}; echoes `text`.")
}

/// The run-time tools `--dynamic-tool` adds at start: `NAME`, `NAME=DESCRIPTION`, or
/// `NAME=@FILE` (the description read from FILE at each start, so that a test can make a
/// restarted server come back with another one).
pub fn initial_dynamic(args: &crate::Args) -> Vec<(String, Value)> {
    (args.dynamic_tools.iter())
        .map(|spec| {
            let (name, description) = match spec.split_once('=') {
                Some((name, given)) => (name, given_description(given)),
                None => (spec.as_str(), dynamic_description(spec, &args.name)),
            };
            (name.to_owned(), echo_descriptor(name, description))
        })
        .collect()
}

fn given_description(given: &str) -> String {
    match given.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file)
            .map(|text| text.trim_end().to_owned())
            .unwrap_or_else(|e| format!("(cannot read {file}: {e})")),
        None => given.to_owned(),
    }
}

pub fn echo_descriptor(name: &str, description: String) -> Value {
    let properties = json!({ "text": { "type": "string", "description": "Text to echo back" } });
    descriptor(name, description, properties, &["text"])
}

/// Read-only and closed-world: what a result cache may keep by annotations alone.
const READ_ONLY_CLOSED: &str = r#"{"readOnlyHint": true, "openWorldHint": false}"#;

/// (tool, JSON of its `annotations`) with --hints; tools not named get none.
#[rustfmt::skip]
const HINTS: [(&str, &str); 14] = [
    ("echo", READ_ONLY_CLOSED),
    ("sleep", READ_ONLY_CLOSED),
    ("big", READ_ONLY_CLOSED),
    ("fail", READ_ONLY_CLOSED),
    ("progress", READ_ONLY_CLOSED),
    ("links", READ_ONLY_CLOSED),
    // Read-only but reaching outside the server (its pid changes on restart).
    ("whoami", r#"{"readOnlyHint": true, "openWorldHint": true}"#),
    // No openWorldHint: open-world, the spec's default.
    ("add", r#"{"readOnlyHint": true}"#),
    ("crash", r#"{"readOnlyHint": false}"#),
    ("add_tool", r#"{"readOnlyHint": false}"#),
    ("log", r#"{"readOnlyHint": false}"#),
    // --client-tools: read-only, yet each call asks the client something.
    ("ask_roots", READ_ONLY_CLOSED),
    ("ask_sampling", READ_ONLY_CLOSED),
    ("ask_elicitation", READ_ONLY_CLOSED),
];

/// The `annotations` --hints gives tool `name`, if any.
pub fn hints(name: &str) -> Option<Value> {
    let (_, json_text) = HINTS.iter().find(|(n, _)| *n == name)?;
    Some(properties(json_text))
}

/// Built-in tools followed by `tool_0..tool_{N-1}`, then (--conformance) the tools the
/// conformance suite calls, (--client-tools) the client tools and (--subscriptions) the
/// subscription tools; with --hints, annotated (`hints`).
pub fn static_tools(args: &Args) -> Vec<Value> {
    let server = &args.name;
    let mut tools: Vec<Value> = SPECS
        .iter()
        .map(|(name, what, props, required)| {
            let description = format!("{what} (fixture server {server}).");
            descriptor(name, description, properties(props), required)
        })
        .collect();
    tools.extend(
        (0..args.extra_tools)
            .map(|i| echo_descriptor(&format!("tool_{i}"), extra_description(i, server))),
    );
    if args.conformance {
        tools.extend(conformance::tools());
    }
    if args.client_tools {
        tools.extend(client_tools::tools(args));
    }
    if args.subscriptions {
        tools.extend(subscriptions::tools(args));
    }
    if args.hints {
        for tool in &mut tools {
            if let Some(annotations) = tool["name"].as_str().and_then(hints) {
                tool["annotations"] = annotations;
            }
        }
    }
    tools
}

/// A 300 byte description, so catalogs with many extra tools have a realistic size.
fn extra_description(i: usize, server: &str) -> String {
    let mut text = format!(
        "Extra tool number {i} of fixture server {server}. It echoes its `text` argument back \
         unchanged as text content and as structuredContent. It exists to make catalogs large."
    );
    const FILLER: &str = " Padding keeps every extra tool description at three hundred bytes.";
    while text.len() < 300 {
        text.push_str(FILLER);
    }
    // Cut at a char boundary: a non-ASCII server name must not make this panic.
    let mut end = 300.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// True for `tool_N` with N below --extra-tools.
pub fn is_extra(state: &State, name: &str) -> bool {
    numbered(name, "tool_").is_some_and(|i| i < state.args.extra_tools)
}

/// N of `PREFIX{N}` written canonically (digits only, no leading zero), so exactly one
/// name maps to each extra tool or prompt.
pub fn numbered(name: &str, prefix: &str) -> Option<usize> {
    let digits = name.strip_prefix(prefix)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

pub fn list(state: &State, params: &Value) -> Result<Value, RpcError> {
    state.with_dynamic(|dynamic| {
        let len = state.tools.len() + dynamic.len();
        let all = state.tools.iter().chain(dynamic.iter().map(|(_, d)| d));
        paged(all, len, "tools", params, state.args.page_size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_names_are_canonical() {
        assert_eq!(numbered("tool_0", "tool_"), Some(0));
        assert_eq!(numbered("tool_12", "tool_"), Some(12));
        for bad in ["tool_", "tool_01", "tool_+1", "tool_x", "echo"] {
            assert_eq!(numbered(bad, "tool_"), None, "{bad}");
        }
    }

    #[test]
    fn extra_descriptions_are_about_300_bytes() {
        for i in [0, 7, 12345] {
            assert_eq!(extra_description(i, "srv").len(), 300);
        }
        assert!(extra_description(1, "ééééééééééééééééééééééééééééééééé").len() <= 300);
    }

    fn parse(flags: &[&str]) -> Args {
        <Args as clap::Parser>::parse_from(std::iter::once("fixture").chain(flags.iter().copied()))
    }

    #[test]
    fn hints_annotate_only_with_the_flag_and_change_nothing_else() {
        let flags = ["--client-tools", "--subscriptions", "--extra-tools", "2"];
        let plain = static_tools(&parse(&flags));
        assert!(plain.iter().all(|t| t.get("annotations").is_none()));
        let hinted = static_tools(&parse(&[&flags[..], &["--hints"]].concat()));
        let annotations = |name: &str| {
            let tool = hinted.iter().find(|t| t["name"] == name).unwrap();
            tool.get("annotations").cloned()
        };
        let closed = json!({ "readOnlyHint": true, "openWorldHint": false });
        for name in ["echo", "sleep", "big", "fail", "progress", "links"] {
            assert_eq!(annotations(name), Some(closed.clone()), "{name}");
        }
        for name in ["ask_roots", "ask_sampling", "ask_elicitation"] {
            assert_eq!(annotations(name), Some(closed.clone()), "{name}");
        }
        let open = json!({ "readOnlyHint": true, "openWorldHint": true });
        assert_eq!(annotations("whoami"), Some(open));
        assert_eq!(annotations("add"), Some(json!({ "readOnlyHint": true })));
        for name in ["crash", "add_tool", "log"] {
            assert_eq!(
                annotations(name),
                Some(json!({ "readOnlyHint": false })),
                "{name}"
            );
        }
        for name in ["call_count", "tool_0", "touch", "complete_elicitation"] {
            assert_eq!(annotations(name), None, "{name}");
        }
        // Apart from the annotations, the same tools in the same order.
        let stripped: Vec<Value> = hinted
            .iter()
            .cloned()
            .map(|mut t| {
                t.as_object_mut().unwrap().remove("annotations");
                t
            })
            .collect();
        assert_eq!(stripped, plain);
        // Every hinted name is a tool some flag adds.
        for (name, _) in HINTS {
            assert!(annotations(name).is_some(), "{name}");
        }
    }

    #[test]
    fn every_builtin_mentions_the_server() {
        let args = <crate::Args as clap::Parser>::parse_from([
            "fixture",
            "--name",
            "zed",
            "--extra-tools",
            "2",
        ]);
        let tools = static_tools(&args);
        assert_eq!(tools.len(), SPECS.len() + 2);
        for (name, _, props, _) in SPECS {
            assert!(
                serde_json::from_str::<Value>(props).unwrap().is_object(),
                "{name}"
            );
        }
        for t in &tools {
            assert!(t["description"].as_str().unwrap().contains("zed"));
            assert_eq!(t["x-fixture"]["kept"], true);
        }
    }
}
