//! The conformance suite's stateless-era tools (2026-07-28): multi round-trip requests
//! (SEP-2322), the diagnostics of `server-stateless` (SEP-2575), and the triggers of list
//! changes. Every one of them also works in the session era.
//!
//! The tools that ask the client something (see `mrtr`), by key and method:
//!
//! | tool | asks | result |
//! |---|---|---|
//! | `test_input_required_result_elicitation` | `user_name`: elicitation | `Hello, NAME!` |
//! | `test_input_required_result_sampling` | `capital_question`: sampling | `The LLM answered: TEXT` |
//! | `test_input_required_result_list_roots` | `client_roots`: roots | `Roots: URI, ...` |
//! | `test_input_required_result_request_state` | `confirm`: elicitation | `state-ok: confirmed=OK` |
//! | `test_input_required_result_tampered_state` | `confirm`: elicitation | as request_state |
//! | `test_input_required_result_multiple_inputs` | `user_name`, `greeting`: sampling, `client_roots`, in one round | all three |
//! | `test_input_required_result_multi_round` | `step1` (a name), then `step2` (a colour): two rounds | both |
//! | `test_input_required_result_capabilities` | `user_choice`: elicitation and `suggestion`: sampling, each only if the client can | what it got |
//! | `test_missing_capability` | `needs_sampling`: sampling | `The LLM answered: TEXT` |
//! | `test_streaming_elicitation` | `proceed`: elicitation | `proceed: action=ACTION` |
//!
//! and the prompt `test_input_required_result_prompt`, which asks `user_context` (elicitation)
//! before it renders. In the stateless era each answers `input_required` until the retry
//! carries the answers (a `requestState` always comes along; a tampered one is -32602, a
//! client without the capability a required need asks for gets -32021). In the session era
//! each sends the requests to the client in turn on the call's own stream, each with its
//! key as JSON-RPC id (`user_name`, or `user_name-N` while one of that id is pending), waits,
//! and returns the same result; a refused need makes a tool error (`METHOD failed: CODE MESSAGE`)
//! and the prompt an error -32603, except for the optional needs of
//! `test_input_required_result_capabilities`, which are skipped, as are those its client did
//! not declare in `initialize`.
//!
//! The others: `test_logging_tool` sends three log messages (info) 50 ms apart, like
//! `test_tool_with_logging` (in the stateless era only if the request's `_meta` asked for
//! logs at that level); `test_trigger_tool_change` adds the echo tool `test_dynamic_tool`, or
//! removes it when it is there, and `test_trigger_prompt_change` does the same with the
//! prompt `test_dynamic_prompt`; both then announce the change as `add_tool` does (the
//! session's own stream, and the listen streams that asked for it).

use serde_json::{json, Value};

use crate::calls::text_result;
use crate::exchange::Call;
use crate::listen::Change;
use crate::mrtr::{self, sampled_text, take, Asker, Got, Need, Stop};
use crate::rpc::RpcError;
use crate::state::{CancelToken, State};
use crate::tools::{descriptor, echo_descriptor};

/// (name, description, slow: waits for the client or pauses).
const SPECS: [(&str, &str, bool); 13] = [
    ("test_input_required_result_elicitation", "Asks the user's name (elicitation `user_name`) and greets them", true),
    ("test_input_required_result_sampling", "Asks an LLM the capital of France (sampling `capital_question`) and returns its answer", true),
    ("test_input_required_result_list_roots", "Asks for the client's roots (`client_roots`) and lists them", true),
    ("test_input_required_result_request_state", "Asks for a confirmation (elicitation `confirm`); says state-ok once the request state came back intact", true),
    ("test_input_required_result_tampered_state", "Asks for a confirmation (elicitation `confirm`); a retry whose request state was altered is refused", true),
    ("test_input_required_result_multiple_inputs", "Asks for a name, a sampled greeting and the roots at once (`user_name`, `greeting`, `client_roots`)", true),
    ("test_input_required_result_multi_round", "Asks a name (`step1`), then a favourite colour (`step2`), in two rounds", true),
    ("test_input_required_result_capabilities", "Asks for an elicitation (`user_choice`) and a sampling (`suggestion`), each only if the client can answer it", true),
    ("test_missing_capability", "Needs a sampling (`needs_sampling`): a client without the sampling capability is refused", true),
    ("test_streaming_elicitation", "Asks whether to proceed (elicitation `proceed`)", true),
    ("test_logging_tool", "Sends three log messages (info) while it runs", true),
    ("test_trigger_tool_change", "Adds the tool test_dynamic_tool, or removes it if present, and announces the change", false),
    ("test_trigger_prompt_change", "Adds the prompt test_dynamic_prompt, or removes it if present, and announces the change", false),
];

/// The tool `test_trigger_tool_change` adds and removes.
const DYNAMIC_TOOL: &str = "test_dynamic_tool";
/// The prompt that asks the client something.
pub const PROMPT: &str = "test_input_required_result_prompt";
/// The prompt `test_trigger_prompt_change` adds and removes.
pub const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

pub fn tools() -> Vec<Value> {
    SPECS
        .iter()
        .map(|(name, what, _)| descriptor(name, format!("{what}."), json!({}), &[]))
        .collect()
}

pub fn is_tool(name: &str) -> bool {
    SPECS.iter().any(|(n, ..)| *n == name)
}

pub fn is_slow_tool(name: &str) -> bool {
    SPECS.iter().any(|(n, _, slow)| *n == name && *slow)
}

/// Runs tool `name` (`is_tool` said it is one of these).
pub fn call_tool(
    state: &State,
    call: &Call,
    name: &str,
    params: &Value,
    token: Option<&CancelToken>,
) -> Result<Value, RpcError> {
    match name {
        "test_logging_tool" => Ok(super::tools::with_logging(state, call, token)),
        "test_trigger_tool_change" => {
            let added = !state.remove_dynamic(DYNAMIC_TOOL);
            if added {
                let what = "Echoes `text`; test_trigger_tool_change adds and removes it.";
                state.add_dynamic(DYNAMIC_TOOL, echo_descriptor(DYNAMIC_TOOL, what.into()));
            }
            state.changed(&Change::Tools);
            Ok(text_result(toggled(DYNAMIC_TOOL, added)))
        }
        "test_trigger_prompt_change" => {
            let added = state.toggle_dynamic_prompt();
            state.changed(&Change::Prompts);
            Ok(text_result(toggled(DYNAMIC_PROMPT, added)))
        }
        _ => mrtr::outcome(ask(&mut Asker::new(state, call, params).naming(), name)),
    }
}

fn toggled(what: &str, added: bool) -> String {
    format!("{} {what}", if added { "added" } else { "removed" })
}

const ELICIT: &str = "elicitation/create";
const SAMPLE: &str = "sampling/createMessage";
const ROOTS: &str = "roots/list";

fn user_name(key: &'static str, message: &str) -> Need {
    Need::elicit(key, message, json!({ "name": { "type": "string" } }))
}

fn confirm() -> Need {
    Need::elicit(
        "confirm",
        "Please confirm",
        json!({ "ok": { "type": "boolean" } }),
    )
}

fn ask(asker: &mut Asker<'_>, name: &str) -> Result<Value, Stop> {
    let text = match name {
        "test_input_required_result_elicitation" => {
            let answer = take(
                asker.ask_one(user_name("user_name", "What is your name?"))?,
                ELICIT,
            )?;
            greeting(&answer)
        }
        "test_input_required_result_sampling" => {
            let need = Need::sample("capital_question", "What is the capital of France?", 100);
            sampled(&take(asker.ask_one(need)?, SAMPLE)?)
        }
        "test_input_required_result_list_roots" => {
            roots(&take(asker.ask_one(Need::roots("client_roots"))?, ROOTS)?)
        }
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => {
            let answer = take(asker.ask_one(confirm())?, ELICIT)?;
            match accepted(&answer) {
                Some(content) => format!("state-ok: confirmed={}", field(content, "ok")),
                None => format!("state-ok: not confirmed (action={})", action(&answer)),
            }
        }
        "test_input_required_result_multiple_inputs" => {
            let needs = vec![
                user_name("user_name", "What is your name?"),
                Need::sample("greeting", "Generate a greeting", 50),
                Need::roots("client_roots"),
            ];
            let mut got = asker.ask(needs)?.into_iter();
            let mut next = |method| take(got.next().unwrap_or(Got::Skipped), method);
            let (name, greeting, client_roots) = (next(ELICIT)?, next(SAMPLE)?, next(ROOTS)?);
            format!(
                "{} {}; {}",
                self::greeting(&name),
                sampled(&greeting),
                roots(&client_roots)
            )
        }
        "test_input_required_result_multi_round" => {
            let name = take(
                asker.ask_one(user_name("step1", "Step 1: What is your name?"))?,
                ELICIT,
            )?;
            let properties = json!({ "color": { "type": "string" } });
            let step2 = Need::elicit("step2", "Step 2: What is your favorite color?", properties);
            let color = take(asker.ask_one(step2)?, ELICIT)?;
            format!(
                "{}'s favourite colour is {}",
                accepted(&name).map_or_else(|| "Nobody".into(), |c| field(c, "name")),
                accepted(&color).map_or_else(|| "unknown".into(), |c| field(c, "color")),
            )
        }
        "test_input_required_result_capabilities" => {
            let choice = Need::elicit(
                "user_choice",
                "Which option do you prefer?",
                json!({ "choice": { "type": "string" } }),
            );
            let suggestion = Need::sample("suggestion", "Suggest an option", 50);
            let got = asker.ask(vec![choice.optional(), suggestion.optional()])?;
            let said = |got: &Got, what: &dyn Fn(&Value) -> String| match got {
                Got::Answer(answer) => what(answer),
                _ => "not asked".to_owned(),
            };
            if got.iter().all(|g| *g == Got::Skipped) {
                "The client can give neither an elicitation nor a sampling: nothing was asked."
                    .to_owned()
            } else {
                format!(
                    "elicitation: {}; sampling: {}",
                    said(&got[0], &|a| format!("action={}", action(a))),
                    said(&got[1], &sampled),
                )
            }
        }
        "test_missing_capability" => {
            let need = Need::sample("needs_sampling", "Say something", 20);
            sampled(&take(asker.ask_one(need)?, SAMPLE)?)
        }
        _ => {
            let proceed = Need::elicit(
                "proceed",
                "Proceed with the streaming test?",
                json!({ "proceed": { "type": "boolean" } }),
            );
            let answer = take(asker.ask_one(proceed)?, ELICIT)?;
            format!("proceed: action={}", action(&answer))
        }
    };
    Ok(text_result(text))
}

/// `test_input_required_result_prompt`: asks for the context, then renders with it.
pub fn asking_prompt(state: &State, call: &Call, params: &Value) -> Result<Value, RpcError> {
    let need = Need::elicit(
        "user_context",
        "What context should the prompt use?",
        json!({ "context": { "type": "string" } }),
    );
    let run = Asker::new(state, call, params)
        .naming()
        .ask_one(need)
        .and_then(|got| match got {
            Got::Answer(answer) => {
                let context =
                    accepted(&answer).map_or_else(|| "none".into(), |c| field(c, "context"));
                let text = format!("Use this context: {context}");
                Ok(json!({
                    "description": "A prompt rendered with the context the user gave",
                    "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
                }))
            }
            Got::Refused(e) => Err(Stop::Error(RpcError::new(
                -32603,
                mrtr::refused(ELICIT, &e),
            ))),
            Got::Skipped => Err(Stop::Error(RpcError::new(
                -32603,
                "elicitation/create was not asked",
            ))),
        });
    mrtr::outcome(run)
}

/// The prompts of this module: the one that asks, and (after `test_trigger_prompt_change`)
/// the dynamic one.
pub fn prompt_descriptor(name: &str) -> Value {
    let description = if name == PROMPT {
        "A prompt that asks the user for context (elicitation `user_context`) before it renders"
    } else {
        "A prompt that test_trigger_prompt_change adds and removes"
    };
    json!({ "name": name, "description": description, "arguments": [] })
}

pub fn dynamic_prompt() -> Value {
    let text = "This prompt exists until test_trigger_prompt_change removes it.";
    json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }] })
}

/// The content of an accepted elicitation.
fn accepted(answer: &Value) -> Option<&Value> {
    (answer.get("action").and_then(Value::as_str) == Some("accept"))
        .then(|| answer.get("content"))
        .flatten()
}

fn action(answer: &Value) -> &str {
    answer.get("action").and_then(Value::as_str).unwrap_or("")
}

/// A field of elicited content as text (strings as they are).
fn field(content: &Value, key: &str) -> String {
    match content.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => "(none)".to_owned(),
    }
}

fn greeting(answer: &Value) -> String {
    match accepted(answer) {
        Some(content) => format!("Hello, {}!", field(content, "name")),
        None => format!("No name given (action={}).", action(answer)),
    }
}

fn sampled(answer: &Value) -> String {
    format!(
        "The LLM answered: {}",
        sampled_text(answer).unwrap_or("(no text)")
    )
}

fn roots(answer: &Value) -> String {
    let uris: Vec<&str> = (answer.get("roots").and_then(Value::as_array))
        .map(|roots| {
            roots
                .iter()
                .filter_map(|r| r.get("uri")?.as_str())
                .collect()
        })
        .unwrap_or_default();
    if uris.is_empty() {
        "Roots: (none)".to_owned()
    } else {
        format!("Roots: {}", uris.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_make_the_same_texts_in_both_eras() {
        let alice = json!({ "action": "accept", "content": { "name": "Alice" } });
        assert_eq!(greeting(&alice), "Hello, Alice!");
        assert_eq!(
            greeting(&json!({ "action": "decline" })),
            "No name given (action=decline)."
        );
        let sampled_answer =
            json!({ "role": "assistant", "content": { "type": "text", "text": "Paris" } });
        assert_eq!(sampled(&sampled_answer), "The LLM answered: Paris");
        let r = json!({ "roots": [{ "uri": "file:///a" }, { "uri": "file:///b" }] });
        assert_eq!(roots(&r), "Roots: file:///a, file:///b");
        assert_eq!(roots(&json!({ "roots": [] })), "Roots: (none)");
        assert_eq!(field(&json!({ "ok": true }), "ok"), "true");
    }

    #[test]
    fn every_tool_is_listed_once() {
        let tools = tools();
        assert_eq!(tools.len(), SPECS.len());
        for tool in &tools {
            assert!(is_tool(tool["name"].as_str().unwrap()));
        }
        assert!(
            is_slow_tool("test_missing_capability") && !is_slow_tool("test_trigger_tool_change")
        );
        assert_eq!(prompt_descriptor(PROMPT)["name"], PROMPT);
    }
}
