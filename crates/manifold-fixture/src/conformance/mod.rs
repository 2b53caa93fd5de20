//! What the official MCP conformance suite's server scenarios call, added by `--conformance`
//! (`@modelcontextprotocol/conformance`, run by `tests/conformance/run.sh`): tools named
//! `test_*`, resources under `test://`, prompts named `test_*`, completions for them, and
//! resources/subscribe. Names, texts and schemas follow the suite's own reference server,
//! so that a scenario that passes against it passes here.
//!
//! Tool behaviour lives in `tools.rs`, and for the tools and the prompt of the stateless era
//! (2026-07-28: multi round-trip requests and the like) in `asking.rs`; this file holds the
//! catalog.

mod asking;
mod tools;

use serde_json::{json, Value};

use crate::rpc::RpcError;

pub use asking::{asking_prompt, dynamic_prompt, DYNAMIC_PROMPT, PROMPT as ASKING_PROMPT};
pub use tools::{call_tool, is_slow_tool, is_tool, tools};

/// A 1x1 red PNG.
pub const IMAGE_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV file holding one silent sample.
pub const AUDIO_WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

const TEMPLATE: &str = "test://template/{id}/data";
/// (name, description, arguments as (name, description)); every argument is required.
type PromptSpec = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const PROMPTS: [PromptSpec; 4] = [
    (
        "test_simple_prompt",
        "A simple prompt without arguments",
        &[],
    ),
    (
        "test_prompt_with_arguments",
        "A prompt with required arguments",
        &[
            ("arg1", "First test argument"),
            ("arg2", "Second test argument"),
        ],
    ),
    (
        "test_prompt_with_embedded_resource",
        "A prompt that includes an embedded resource",
        &[("resourceUri", "URI of the resource to embed")],
    ),
    (
        "test_prompt_with_image",
        "A prompt that includes image content",
        &[],
    ),
];

/// Suggestions for the arguments of `test_prompt_with_arguments`.
const ARGUMENT_VALUES: [&str; 2] = ["testValue1", "testValue2"];
/// Suggestions for `{id}` of the template.
const TEMPLATE_IDS: [&str; 1] = ["123"];

/// The suite's prompts, then the one that asks the client for context.
pub fn prompts() -> Vec<Value> {
    let mut prompts: Vec<Value> = PROMPTS
        .iter()
        .map(|(name, description, arguments)| {
            let arguments: Vec<Value> = arguments
                .iter()
                .map(|(name, description)| {
                    json!({ "name": name, "description": description, "required": true })
                })
                .collect();
            json!({ "name": name, "description": description, "arguments": arguments })
        })
        .collect();
    prompts.push(asking::prompt_descriptor(asking::PROMPT));
    prompts
}

/// The descriptor of the prompt `test_trigger_prompt_change` adds.
pub fn dynamic_prompt_descriptor() -> Value {
    asking::prompt_descriptor(DYNAMIC_PROMPT)
}

/// A prompt `get_prompt` renders (not the one that asks: see `asking_prompt`).
pub fn is_prompt(name: &str) -> bool {
    PROMPTS.iter().any(|(n, ..)| *n == name)
}

pub fn get_prompt(name: &str, arguments: &Value) -> Result<Value, RpcError> {
    let arg = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params(format!("Missing required argument: {key}")))
    };
    let user = |content: Value| json!({ "role": "user", "content": content });
    let text = |text: &str| user(json!({ "type": "text", "text": text }));
    let messages = match name {
        "test_simple_prompt" => vec![text("This is a simple prompt for testing.")],
        "test_prompt_with_arguments" => {
            let (arg1, arg2) = (arg("arg1")?, arg("arg2")?);
            vec![text(&format!(
                "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
            ))]
        }
        "test_prompt_with_embedded_resource" => {
            let resource = json!({
                "uri": arg("resourceUri")?,
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            });
            vec![
                user(json!({ "type": "resource", "resource": resource })),
                text("Please process the embedded resource above."),
            ]
        }
        "test_prompt_with_image" => vec![
            user(json!({ "type": "image", "data": IMAGE_PNG_BASE64, "mimeType": "image/png" })),
            text("Please analyze the image above."),
        ],
        other => return Err(RpcError::invalid_params(format!("Unknown prompt: {other}"))),
    };
    Ok(json!({ "messages": messages }))
}

pub fn resources() -> Vec<Value> {
    let resource = |uri: &str, name: &str, description: &str, mime: &str| json!({ "uri": uri, "name": name, "description": description, "mimeType": mime });
    vec![
        resource(
            "test://static-text",
            "static-text",
            "A static text resource for testing",
            "text/plain",
        ),
        resource(
            "test://static-binary",
            "static-binary",
            "A static binary resource (image) for testing",
            "image/png",
        ),
        resource(
            "test://watched-resource",
            "watched-resource",
            "A resource to subscribe to",
            "text/plain",
        ),
    ]
}

pub fn templates() -> Vec<Value> {
    vec![json!({
        "uriTemplate": TEMPLATE,
        "name": "template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json",
    })]
}

/// The `contents` item of a conformance resource, if `uri` is one.
pub fn read_resource(uri: &str) -> Option<Value> {
    let text = |mime: &str, text: &str| json!({ "uri": uri, "mimeType": mime, "text": text });
    match uri {
        "test://static-text" => Some(text(
            "text/plain",
            "This is the content of the static text resource.",
        )),
        "test://static-binary" => {
            Some(json!({ "uri": uri, "mimeType": "image/png", "blob": IMAGE_PNG_BASE64 }))
        }
        "test://watched-resource" => Some(text("text/plain", "Watched resource content")),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")
                .filter(|id| !id.is_empty() && !id.contains('/'))?;
            let data =
                json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            Some(text("application/json", &data.to_string()))
        }
    }
}

/// The candidates a completion reference (`kind`, prompt name or template URI) completes
/// from, and the arguments they are for.
pub fn completion_source(
    kind: &str,
    target: &str,
) -> Option<(&'static [&'static str], &'static [&'static str])> {
    match (kind, target) {
        ("ref/prompt", "test_prompt_with_arguments") => Some((&ARGUMENT_VALUES, &["arg1", "arg2"])),
        ("ref/resource", TEMPLATE) => Some((&TEMPLATE_IDS, &["id"])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_substitute_their_arguments() {
        let args = json!({ "arg1": "testValue1", "arg2": "testValue2" });
        let text = get_prompt("test_prompt_with_arguments", &args)
            .unwrap()
            .to_string();
        assert!(text.contains("testValue1") && text.contains("testValue2"));
        let err = get_prompt("test_prompt_with_arguments", &json!({})).unwrap_err();
        assert_eq!(err.code, -32602);
        let embedded = json!({ "resourceUri": "test://x" });
        let r = get_prompt("test_prompt_with_embedded_resource", &embedded).unwrap();
        assert_eq!(r["messages"][0]["content"]["resource"]["uri"], "test://x");
        for (name, ..) in PROMPTS {
            assert!(is_prompt(name));
        }
        assert_eq!(prompts().len(), PROMPTS.len() + 1);
        assert!(!is_prompt(ASKING_PROMPT));
    }

    #[test]
    fn resources_and_the_template_read() {
        for r in resources() {
            let uri = r["uri"].as_str().unwrap();
            assert_eq!(read_resource(uri).unwrap()["uri"], uri);
        }
        let item = read_resource("test://template/123/data").unwrap();
        let data: Value = serde_json::from_str(item["text"].as_str().unwrap()).unwrap();
        assert_eq!(data["id"], "123");
        assert!(read_resource("test://template//data").is_none());
        assert!(read_resource("test://template/1/2/data").is_none());
        assert!(read_resource("test://nothing").is_none());
        assert!(read_resource("test://static-binary").unwrap()["blob"].is_string());
    }

    #[test]
    fn completion_sources() {
        let (values, args) = completion_source("ref/prompt", "test_prompt_with_arguments").unwrap();
        assert_eq!(values, ARGUMENT_VALUES);
        assert!(args.contains(&"arg1"));
        assert!(completion_source("ref/resource", TEMPLATE).is_some());
        assert!(completion_source("ref/prompt", "greet").is_none());
    }
}
