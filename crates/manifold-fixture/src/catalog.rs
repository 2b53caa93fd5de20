//! Prompts, resources, resource templates and completion.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::calls::{self, data_json};
use crate::exchange::Call;
use crate::paging::paged;
use crate::rpc::RpcError;
use crate::state::State;
use crate::{conformance, Args};

const GREET_NAMES: [&str; 3] = ["alice", "bob", "carol"];
const ITEM_IDS: [&str; 3] = ["1", "2", "3"];

pub fn prompts(args: &Args) -> Vec<Value> {
    let server = &args.name;
    let mut prompts = vec![
        json!({
            "name": "greet",
            "description": format!("Greets someone (fixture server {server})."),
            "arguments": [{ "name": "name", "description": "Who to greet", "required": true }],
        }),
        json!({
            "name": "with_resource",
            "description": format!("A message embedding the readme of fixture server {server}."),
        }),
    ];
    prompts.extend((0..args.extra_prompts).map(|i| {
        json!({
            "name": format!("prompt_{i}"),
            "description": format!("Extra prompt {i} of fixture server {server}."),
            "arguments": [{ "name": "topic", "description": "Optional topic", "required": false }],
        })
    }));
    if args.conformance {
        prompts.extend(conformance::prompts());
    }
    prompts
}

pub fn resources(args: &Args) -> Vec<Value> {
    let server = &args.name;
    let mut resources = vec![
        json!({
            "uri": format!("fixture://{server}/readme"),
            "name": "readme",
            "description": format!("Readme of fixture server {server}."),
            "mimeType": "text/plain",
        }),
        json!({
            "uri": format!("fixture://{server}/data.json"),
            "name": "data.json",
            "description": format!("JSON data of fixture server {server}."),
            "mimeType": "application/json",
        }),
    ];
    if args.conformance {
        resources.extend(conformance::resources());
    }
    resources
}

pub fn templates(args: &Args) -> Vec<Value> {
    let server = &args.name;
    let mut templates = vec![json!({
        "uriTemplate": item_template(server),
        "name": "item",
        "description": format!("Items of fixture server {server}."),
        "mimeType": "text/plain",
    })];
    if args.conformance {
        templates.extend(conformance::templates());
    }
    templates
}

fn item_template(server: &str) -> String {
    format!("fixture://{server}/items/{{id}}")
}

fn readme_text(server: &str) -> String {
    format!("readme of {server}")
}

/// prompts/list: the static prompts, then (--conformance, after `test_trigger_prompt_change`)
/// `test_dynamic_prompt`.
pub fn list_prompts(state: &State, params: &Value) -> Result<Value, RpcError> {
    let dynamic = (state.args.conformance && state.has_dynamic_prompt())
        .then(conformance::dynamic_prompt_descriptor);
    let len = state.prompts.len() + usize::from(dynamic.is_some());
    let all = state.prompts.iter().chain(dynamic.iter());
    paged(all, len, "prompts", params, state.args.page_size)
}

/// prompts/get. The conformance prompt that asks the client for context runs, in the session
/// era, on a thread of its own: it waits for the client's answer, which the thread that read
/// the request must stay free to read.
pub fn prompt_request(state: &Arc<State>, call: Call, params: Value) {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    if !(state.args.conformance && name == conformance::ASKING_PROMPT) {
        return call.reply(get_prompt(state, &params));
    }
    if call.modern().is_some() {
        return call.reply(conformance::asking_prompt(state, &call, &params));
    }
    let shared = Arc::clone(state);
    calls::spawn(state, move || {
        call.reply(conformance::asking_prompt(&shared, &call, &params));
    });
}

pub fn get_prompt(state: &State, params: &Value) -> Result<Value, RpcError> {
    let server = &state.args.name;
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("Missing prompt name"))?;
    let arguments = params.get("arguments").unwrap_or(&Value::Null);
    let (description, content) = match name {
        "greet" => {
            let who = arguments
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("Missing required argument: name"))?;
            (
                "Greeting",
                json!({ "type": "text", "text": format!("Hello, {who} from {server}") }),
            )
        }
        "with_resource" => {
            let resource = json!({ "uri": format!("fixture://{server}/readme"), "mimeType": "text/plain", "text": readme_text(server) });
            (
                "Embedded readme",
                json!({ "type": "resource", "resource": resource }),
            )
        }
        other if state.args.conformance && conformance::is_prompt(other) => {
            return conformance::get_prompt(other, arguments)
        }
        conformance::DYNAMIC_PROMPT if state.args.conformance && state.has_dynamic_prompt() => {
            return Ok(conformance::dynamic_prompt())
        }
        other if is_extra_prompt(state, other) => {
            let topic = arguments
                .get("topic")
                .and_then(Value::as_str)
                .unwrap_or("nothing");
            (
                "Extra prompt",
                json!({ "type": "text", "text": format!("{other} of {server} about {topic}") }),
            )
        }
        other => return Err(RpcError::invalid_params(format!("Unknown prompt: {other}"))),
    };
    Ok(json!({ "description": description, "messages": [{ "role": "user", "content": content }] }))
}

fn is_extra_prompt(state: &State, name: &str) -> bool {
    crate::tools::numbered(name, "prompt_").is_some_and(|i| i < state.args.extra_prompts)
}

/// resources/read: the conformance resources (--conformance), then the fixture's own.
pub fn read(state: &State, params: &Value) -> Result<Value, RpcError> {
    let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
    state.count(format!("read:{uri}"));
    if state.args.skills {
        if let Some(read) = crate::skills::read(state, uri) {
            return Ok(read);
        }
    }
    if state.args.conformance {
        if let Some(contents) = conformance::read_resource(uri) {
            return Ok(json!({ "contents": [contents] }));
        }
    }
    read_resource(&state.args.name, params)
}

pub fn read_resource(server: &str, params: &Value) -> Result<Value, RpcError> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("Missing uri"))?;
    let (mime, text) = resource_text(server, uri).ok_or_else(|| RpcError {
        code: -32002,
        message: "Resource not found".to_owned(),
        data: Some(json!({ "uri": uri })),
    })?;
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": mime, "text": text }] }))
}

/// (mimeType, text) of a resource URI this server knows, if any.
pub fn resource_text(server: &str, uri: &str) -> Option<(&'static str, String)> {
    let path = uri
        .strip_prefix("fixture://")?
        .strip_prefix(server)?
        .strip_prefix('/')?;
    match path {
        "readme" => Some(("text/plain", readme_text(server))),
        "data.json" => Some(("application/json", data_json(server))),
        _ => {
            let id = path.strip_prefix("items/").filter(|id| !id.is_empty())?;
            Some(("text/plain", format!("item {id} of {server}")))
        }
    }
}

pub fn complete(state: &State, params: &Value) -> Result<Value, RpcError> {
    let reference = params.get("ref").unwrap_or(&Value::Null);
    let argument = params.get("argument").unwrap_or(&Value::Null);
    let arg_name = argument.get("name").and_then(Value::as_str).unwrap_or("");
    let prefix = argument.get("value").and_then(Value::as_str).unwrap_or("");
    let (candidates, arguments) = completion_source(state, reference)
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown reference: {reference}")))?;
    // Only the arguments the reference actually has get suggestions.
    let values = if arguments.contains(&arg_name) {
        complete_values(candidates, prefix)
    } else {
        Vec::new()
    };
    Ok(json!({ "completion": { "total": values.len(), "values": values, "hasMore": false } }))
}

/// The candidates a reference completes from, and the arguments they are for.
fn completion_source(
    state: &State,
    reference: &Value,
) -> Option<(&'static [&'static str], &'static [&'static str])> {
    let kind = reference.get("type").and_then(Value::as_str);
    let name = reference.get("name").and_then(Value::as_str);
    let uri = reference.get("uri").and_then(Value::as_str);
    match kind {
        Some("ref/prompt") if state.prompts_enabled() && name == Some("greet") => {
            Some((&GREET_NAMES, &["name"]))
        }
        Some("ref/resource")
            if state.resources_enabled()
                && uri == Some(item_template(&state.args.name).as_str()) =>
        {
            Some((&ITEM_IDS, &["id"]))
        }
        _ if state.args.conformance => conformance::completion_source(kind?, name.or(uri)?),
        _ => None,
    }
}

pub fn complete_values<'a>(candidates: &[&'a str], prefix: &str) -> Vec<&'a str> {
    candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_filters_by_prefix() {
        assert_eq!(
            complete_values(&GREET_NAMES, ""),
            vec!["alice", "bob", "carol"]
        );
        assert_eq!(complete_values(&GREET_NAMES, "b"), vec!["bob"]);
        assert!(complete_values(&GREET_NAMES, "z").is_empty());
        assert_eq!(complete_values(&ITEM_IDS, "2"), vec!["2"]);
    }

    #[test]
    fn resource_lookup() {
        assert_eq!(
            resource_text("a", "fixture://a/readme").unwrap().1,
            "readme of a"
        );
        assert_eq!(
            resource_text("a", "fixture://a/items/42").unwrap().1,
            "item 42 of a"
        );
        assert_eq!(
            resource_text("a", "fixture://a/data.json").unwrap().0,
            "application/json"
        );
        assert!(resource_text("a", "fixture://a/items/").is_none());
        assert!(resource_text("a", "fixture://ab/readme").is_none());
        assert!(resource_text("a", "fixture://b/readme").is_none());
    }

    #[test]
    fn missing_resource_error_carries_uri() {
        let err = read_resource("a", &json!({ "uri": "fixture://a/nope" })).unwrap_err();
        assert_eq!(err.code, -32002);
        assert_eq!(err.data, Some(json!({ "uri": "fixture://a/nope" })));
    }
}
