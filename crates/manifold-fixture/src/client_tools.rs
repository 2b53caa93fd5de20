//! `--client-tools`: tools that ask the client something (`roots/list`,
//! `sampling/createMessage`, `elicitation/create`) and report its answer as plainly as
//! possible, so that tests of an aggregator can check what reached the client and what came
//! back. Unlike the conformance tools, their texts are terse and their errors carry the
//! client's code. They run on their own thread (`calls::call`): they wait for the client.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::calls::{arg_str, text_result, tool_error};
use crate::exchange::Call;
use crate::mrtr::{self, sampled_text, take, Asker, Need, Stop};
use crate::rpc::RpcError;
use crate::state::State;
use crate::tools::descriptor;
use crate::Args;

/// (name, what it does, JSON of the schema's properties, required).
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

#[rustfmt::skip]
const SPECS: [Spec; 4] = [
    ("ask_roots", "Asks the client for roots/list and returns the JSON text of its roots", "{}", &[]),
    ("ask_sampling", "Asks the client for sampling/createMessage with `prompt` and returns the text it sampled", r#"{"prompt": {"type": "string"}}"#, &["prompt"]),
    ("ask_elicitation", "Asks the client for elicitation/create with `message` and returns its action and answer", r#"{"message": {"type": "string"}}"#, &["message"]),
    ("complete_elicitation", "Sends notifications/elicitation/complete for `elicitationId`", r#"{"elicitationId": {"type": "string"}}"#, &["elicitationId"]),
];

pub fn tools(args: &Args) -> Vec<Value> {
    SPECS
        .iter()
        .map(|(name, what, props, required)| {
            let properties = serde_json::from_str(props).unwrap_or_else(|_| json!({}));
            let description = format!("{what} (fixture server {}).", args.name);
            descriptor(name, description, properties, required)
        })
        .collect()
}

pub fn is_tool(name: &str) -> bool {
    SPECS.iter().any(|(n, ..)| *n == name)
}

/// Runs client tool `name` (`is_tool` said it is one). In the stateless era the questions
/// are multi round-trip requests (see `mrtr`) under the keys `roots`, `sampling` and
/// `elicitation`, and `complete_elicitation` is a tool error: 2026-07-28 has no such
/// notification.
pub fn call_tool(
    state: &State,
    call: &Call,
    name: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    let args = params.get("arguments").unwrap_or(&Value::Null);
    let mut asker = Asker::new(state, call, params);
    let outcome = match name {
        "ask_roots" if call.modern().is_some() => Ok(stateless_roots(&mut asker)),
        "ask_roots" => Ok(ask_roots(state, call)),
        "ask_sampling" => arg_str(args, "prompt").map(|prompt| ask_sampling(&mut asker, prompt)),
        "ask_elicitation" => {
            arg_str(args, "message").map(|message| ask_elicitation(&mut asker, message))
        }
        _ if call.modern().is_some() => {
            Err("notifications/elicitation/complete does not exist in 2026-07-28".to_owned())
        }
        _ => arg_str(args, "elicitationId").map(|id| {
            // On the call's own way back, before its answer, as progress goes.
            let params = json!({ "elicitationId": id });
            call.notify("notifications/elicitation/complete", &params);
            Ok(text_result("sent"))
        }),
    };
    mrtr::outcome(outcome.unwrap_or_else(|e| Ok(tool_error(e))))
}

/// The JSON text of the client's `roots` (stateless era: as serde writes it).
fn stateless_roots(asker: &mut Asker<'_>) -> Result<Value, Stop> {
    let method = "roots/list";
    let answer = take(asker.ask_one(Need::roots("roots"))?, method)?;
    Ok(match answer.get("roots") {
        Some(roots) => text_result(roots.to_string()),
        None => tool_error(format!("{method} answered without roots: {answer}")),
    })
}

/// The JSON text of the client's `roots`, exactly as it sent it (no reordered keys).
fn ask_roots(state: &State, call: &Call) -> Result<Value, Stop> {
    ask_roots_text(state, call).or_else(|e| Ok(tool_error(e)))
}

fn ask_roots_text(state: &State, call: &Call) -> Result<Value, String> {
    #[derive(Deserialize)]
    struct Roots<'a> {
        #[serde(borrow)]
        roots: &'a RawValue,
    }
    let method = "roots/list";
    let raw = call
        .ask_raw(state, method, &json!({}))
        .map_err(|e| failed(method, &e))?;
    let answer: Roots<'_> = serde_json::from_str(raw.get())
        .map_err(|_| format!("{method} answered without roots: {}", raw.get()))?;
    Ok(text_result(answer.roots.get()))
}

fn ask_sampling(asker: &mut Asker<'_>, prompt: &str) -> Result<Value, Stop> {
    let method = "sampling/createMessage";
    let result = take(asker.ask_one(Need::sample("sampling", prompt, 16))?, method)?;
    Ok(match sampled_text(&result) {
        Some(text) => text_result(text),
        None => tool_error(format!("{method} answered without content.text: {result}")),
    })
}

fn ask_elicitation(asker: &mut Asker<'_>, message: &str) -> Result<Value, Stop> {
    let method = "elicitation/create";
    let properties = json!({ "answer": { "type": "string" } });
    let need = Need::elicit("elicitation", message, properties);
    let result = take(asker.ask_one(need)?, method)?;
    let action = result.get("action").and_then(Value::as_str).unwrap_or("");
    let answer = match result.pointer("/content/answer") {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Ok(text_result(format!("action={action} answer={answer}")))
}

/// The tool error text for a request the client refused or left unanswered.
fn failed(method: &str, e: &RpcError) -> String {
    mrtr::refused(method, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_requires_what_it_reads() {
        let args = <Args as clap::Parser>::parse_from(["fixture", "--name", "zed"]);
        let tools = tools(&args);
        assert_eq!(tools.len(), SPECS.len());
        for (tool, (name, _, props, required)) in tools.iter().zip(SPECS) {
            assert!(is_tool(name));
            let props: Value = serde_json::from_str(props).unwrap();
            for key in required {
                assert!(props.get(key).is_some(), "{name} {key}");
            }
            assert!(tool["description"].as_str().unwrap().contains("zed"));
        }
        assert!(!is_tool("echo"));
    }

    #[test]
    fn sampled_text_reads_one_block_or_a_list() {
        let one = json!({ "content": { "type": "text", "text": "a" } });
        assert_eq!(sampled_text(&one), Some("a"));
        let list = json!({ "content": [{ "type": "image" }, { "type": "text", "text": "b" }] });
        assert_eq!(sampled_text(&list), Some("b"));
        assert_eq!(sampled_text(&json!({})), None);
    }

    #[test]
    fn failures_name_the_method_code_and_message() {
        let e = RpcError::new(-32601, "no roots");
        assert_eq!(
            failed("roots/list", &e),
            "roots/list failed: -32601 no roots"
        );
    }
}
