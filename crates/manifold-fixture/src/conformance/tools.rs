//! The conformance suite's tools: descriptors and behaviour. The slow ones (they pause, or
//! wait for the client to answer a request) run on their own thread (`calls::call`).

use std::time::Duration;

use serde_json::{json, Value};

use super::{asking, AUDIO_WAV_BASE64, IMAGE_PNG_BASE64};
use crate::calls::{arg_str, text_result, tool_error};
use crate::exchange::{log_params, Call};
use crate::mrtr::{self, Asker, Got, Need, Stop};
use crate::rpc::RpcError;
use crate::state::{CancelToken, State};
use crate::tools::descriptor;

/// (name, description, JSON of the schema's properties, required, slow).
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
);

const PROMPT_PROP: &str =
    r#"{"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}"#;
const MESSAGE_PROP: &str =
    r#"{"message": {"type": "string", "description": "The message to show the user"}}"#;

/// The pause between the notifications of the logging and progress tools: the suite checks
/// that a client receives notifications spread over a call.
const PAUSE: Duration = Duration::from_millis(50);

#[rustfmt::skip]
const SPECS: [Spec; 13] = [
    ("test_simple_text", "Returns simple text content", "{}", &[], false),
    ("test_image_content", "Returns image content (a 1x1 PNG)", "{}", &[], false),
    ("test_audio_content", "Returns audio content (a tiny WAV)", "{}", &[], false),
    ("test_embedded_resource", "Returns an embedded resource", "{}", &[], false),
    ("test_multiple_content_types", "Returns text, image and resource content", "{}", &[], false),
    ("test_tool_with_logging", "Sends three log messages while it runs", "{}", &[], true),
    ("test_tool_with_progress", "Reports progress 0, 50, 100 of 100 when given a progressToken", "{}", &[], true),
    ("test_error_handling", "Always returns a tool error", "{}", &[], false),
    ("test_reconnection", "Closes its SSE stream before answering, so the client resumes it (SEP-1699)", "{}", &[], true),
    ("test_sampling", "Asks the client for an LLM completion (sampling/createMessage)", PROMPT_PROP, &["prompt"], true),
    ("test_elicitation", "Asks the client for user input (elicitation/create)", MESSAGE_PROP, &["message"], true),
    ("test_elicitation_sep1034_defaults", "Elicitation with a default for every primitive type (SEP-1034)", "{}", &[], true),
    ("test_elicitation_sep1330_enums", "Elicitation with every enum schema variant (SEP-1330)", "{}", &[], true),
];

/// The tool whose schema uses JSON Schema 2020-12 keywords (SEP-1613).
const SCHEMA_TOOL: &str = "json_schema_2020_12_tool";

pub fn tools() -> Vec<Value> {
    let mut tools: Vec<Value> = SPECS
        .iter()
        .map(|(name, what, props, required, _)| {
            let properties = serde_json::from_str(props).unwrap_or_else(|_| json!({}));
            descriptor(name, format!("{what}."), properties, required)
        })
        .collect();
    tools.push(json!({
        "name": SCHEMA_TOOL,
        "description": "Tool with JSON Schema 2020-12 features (SEP-1613).",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": { "street": { "type": "string" }, "city": { "type": "string" } },
                },
            },
            "properties": { "name": { "type": "string" }, "address": { "$ref": "#/$defs/address" } },
            "additionalProperties": false,
        },
        "x-fixture": { "kept": true },
    }));
    tools.extend(asking::tools());
    tools
}

pub fn is_tool(name: &str) -> bool {
    name == SCHEMA_TOOL || SPECS.iter().any(|(n, ..)| *n == name) || asking::is_tool(name)
}

pub fn is_slow_tool(name: &str) -> bool {
    SPECS.iter().any(|(n, .., slow)| *n == name && *slow) || asking::is_slow_tool(name)
}

/// Runs conformance tool `name` (`is_tool` said it is one).
pub fn call_tool(
    state: &State,
    call: &Call,
    name: &str,
    params: &Value,
    token: Option<&CancelToken>,
) -> Result<Value, RpcError> {
    let args = params.get("arguments").unwrap_or(&Value::Null);
    if let Some(result) = fixed_result(name) {
        return Ok(result);
    }
    if asking::is_tool(name) {
        return asking::call_tool(state, call, name, params, token);
    }
    let mut asker = Asker::new(state, call, params);
    let run = match name {
        "test_tool_with_logging" => Ok(with_logging(state, call, token)),
        "test_tool_with_progress" => Ok(with_progress(call, params, token)),
        "test_reconnection" => Ok(reconnection(call, token)),
        "test_sampling" => sampling(&mut asker, args),
        "test_elicitation" => match arg_str(args, "message") {
            Ok(message) => elicit(&mut asker, message, contact_schema(), "User response"),
            Err(e) => Ok(tool_error(e)),
        },
        "test_elicitation_sep1034_defaults" => elicit(
            &mut asker,
            "Please review and update the form fields with defaults",
            defaults_schema(),
            "Elicitation completed",
        ),
        "test_elicitation_sep1330_enums" => elicit(
            &mut asker,
            "Please select options from the enum fields",
            enums_schema(),
            "Elicitation completed",
        ),
        _ => Ok(text_result(format!(
            "JSON Schema 2020-12 tool called with: {args}"
        ))),
    };
    mrtr::outcome(run)
}

/// The result of a tool that always answers the same.
fn fixed_result(name: &str) -> Option<Value> {
    let result = match name {
        "test_simple_text" => text_result("This is a simple text response for testing."),
        "test_image_content" => content(vec![image()]),
        "test_audio_content" => content(vec![
            json!({ "type": "audio", "data": AUDIO_WAV_BASE64, "mimeType": "audio/wav" }),
        ]),
        "test_embedded_resource" => content(vec![embedded(
            "test://embedded-resource",
            "text/plain",
            "This is an embedded resource content.",
        )]),
        "test_multiple_content_types" => content(vec![
            json!({ "type": "text", "text": "Multiple content types test:" }),
            image(),
            embedded(
                "test://mixed-content-resource",
                "application/json",
                r#"{"test":"data","value":123}"#,
            ),
        ]),
        "test_error_handling" => tool_error("This tool intentionally returns an error for testing"),
        _ => return None,
    };
    Some(result)
}

fn content(items: Vec<Value>) -> Value {
    json!({ "content": items, "x-fixture-result": 1 })
}

fn image() -> Value {
    json!({ "type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png" })
}

fn embedded(uri: &str, mime: &str, text: &str) -> Value {
    json!({ "type": "resource", "resource": { "uri": uri, "mimeType": mime, "text": text } })
}

/// Waits `duration`, or less if the call is cancelled (the caller then sends no answer).
fn pause(token: Option<&CancelToken>, duration: Duration) {
    match token {
        Some(token) => {
            token.sleep(duration);
        }
        None => std::thread::sleep(duration),
    }
}

pub(super) fn with_logging(state: &State, call: &Call, token: Option<&CancelToken>) -> Value {
    let steps = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 {
            pause(token, PAUSE);
        }
        call.notify(
            "notifications/message",
            &log_params("info", &state.args.name, step),
        );
    }
    text_result("Tool with logging executed successfully")
}

fn with_progress(call: &Call, params: &Value, token: Option<&CancelToken>) -> Value {
    let progress_token = params.get("_meta").and_then(|m| m.get("progressToken"));
    for (i, progress) in [0, 50, 100].into_iter().enumerate() {
        if i > 0 {
            pause(token, PAUSE);
        }
        if let Some(progress_token) = progress_token {
            let note =
                json!({ "progressToken": progress_token, "progress": progress, "total": 100 });
            call.notify("notifications/progress", &note);
        }
    }
    text_result("Tool with progress executed successfully")
}

/// Ends the POST's SSE stream (after its priming event) and answers a little later, on the
/// stream the client resumes with `Last-Event-ID`. The stateless era has no resumable
/// streams: there it just answers, a little later.
fn reconnection(call: &Call, token: Option<&CancelToken>) -> Value {
    if call.modern().is_none() {
        call.close_stream();
    }
    pause(token, Duration::from_millis(100));
    text_result(
        "Reconnection test completed successfully. If you received this, the client properly \
         reconnected after stream closure.",
    )
}

/// Asks for a sampling of `prompt` (stateless era: input `sampling`).
fn sampling(asker: &mut Asker<'_>, args: &Value) -> Result<Value, Stop> {
    let prompt = match arg_str(args, "prompt") {
        Ok(prompt) => prompt,
        Err(e) => return Ok(tool_error(e)),
    };
    Ok(
        match asker.ask_one(Need::sample("sampling", prompt, 100))? {
            Got::Answer(result) => {
                let text = result
                    .pointer("/content/text")
                    .and_then(Value::as_str)
                    .unwrap_or("No response");
                text_result(format!("LLM response: {text}"))
            }
            // A client without sampling answers with an error; the suite wants a tool error then.
            Got::Refused(e) => {
                tool_error(format!("Sampling not supported or error: {}", e.message))
            }
            Got::Skipped => tool_error("Sampling not supported or error: not asked"),
        },
    )
}

/// Asks for an elicitation (stateless era: input `elicitation`).
fn elicit(asker: &mut Asker<'_>, message: &str, schema: Value, label: &str) -> Result<Value, Stop> {
    Ok(
        match asker.ask_one(Need::elicit_schema("elicitation", message, schema))? {
            Got::Answer(result) => {
                let action = result.get("action").and_then(Value::as_str).unwrap_or("");
                let content = result.get("content").cloned().unwrap_or_else(|| json!({}));
                text_result(format!("{label}: action={action}, content={content}"))
            }
            Got::Refused(e) => {
                tool_error(format!("Elicitation not supported or error: {}", e.message))
            }
            Got::Skipped => tool_error("Elicitation not supported or error: not asked"),
        },
    )
}

fn contact_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" },
        },
        "required": ["username", "email"],
    })
}

fn defaults_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true },
        },
        "required": [],
    })
}

fn enums_schema() -> Value {
    let titled = |prefix: &str, titles: [&str; 3]| -> Vec<Value> {
        (1..=3)
            .zip(titles)
            .map(|(i, title)| json!({ "const": format!("{prefix}{i}"), "title": title }))
            .collect()
    };
    let options = ["option1", "option2", "option3"];
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": { "type": "string", "description": "Select one option", "enum": options },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": titled("value", ["First Option", "Second Option", "Third Option"]),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": options },
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": { "anyOf": titled("value", ["First Choice", "Second Choice", "Third Choice"]) },
            },
        },
        "required": [],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_listed_once_with_an_object_schema() {
        let tools = tools();
        assert_eq!(tools.len(), SPECS.len() + 1 + asking::tools().len());
        for tool in &tools {
            let name = tool["name"].as_str().unwrap();
            assert!(is_tool(name), "{name}");
            assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
            assert!(!tool["description"].as_str().unwrap().is_empty());
        }
        for (name, _, props, ..) in SPECS {
            assert!(
                serde_json::from_str::<Value>(props).unwrap().is_object(),
                "{name}"
            );
        }
        assert!(is_slow_tool("test_sampling") && !is_slow_tool("test_simple_text"));
        assert!(!is_tool("echo"));
    }

    #[test]
    fn enum_schema_has_every_variant() {
        let schema = enums_schema();
        let p = &schema["properties"];
        assert_eq!(p["titledSingle"]["oneOf"][2]["const"], "value3");
        assert_eq!(
            p["titledMulti"]["items"]["anyOf"][0]["title"],
            "First Choice"
        );
        assert_eq!(p["legacyEnum"]["enumNames"].as_array().unwrap().len(), 3);
        assert_eq!(defaults_schema()["properties"]["score"]["default"], 95.5);
    }
}
