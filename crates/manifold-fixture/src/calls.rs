//! tools/call: argument checks and the behaviour of every tool.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::exchange::{log_params, Call};
use crate::listen::Change;
use crate::rpc::RpcError;
use crate::state::{CancelToken, State};
use crate::{client_tools, conformance, subscriptions, tasks, tools};

/// Largest `big` answer; protects the test machine from a typo such as 1e12.
const MAX_BIG_BYTES: u64 = 256 * 1024 * 1024;

/// Answers a tools/call. Fast calls run inline on the thread that read the request (no
/// spawn cost on the benchmarked path); slow ones (`sleep`, the tools that wait or ask the
/// client something), and every call when --delay-us is set, run on their own thread so
/// they never hold up other requests, nor the reading of the client's answers. With
/// --tasks, a session-era call that asks for a task is answered at once and runs as one
/// (`tasks`).
pub fn call(state: &Arc<State>, call: Call, params: Value) {
    let task = params.get("task").is_some_and(Value::is_object);
    if state.args.tasks && task && call.modern().is_none() {
        return tasks::start(state, call, params);
    }
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    if name != "call_count" {
        state.count(format!("tool:{name}"));
    }
    let paced = progress_interval(&params) > 0;
    if !is_slow(state, name) && !paced && state.args.delay_us == 0 {
        if let Some(reply) = run(state, &call, &params, None) {
            call.reply(reply);
        }
        return;
    }
    let key = call.key();
    let token = state.register(&key);
    let shared = Arc::clone(state);
    spawn(state, move || {
        service_delay(&shared);
        let reply = run(&shared, &call, &params, Some(&token));
        // A cancelled request gets no response at all, as the spec asks.
        if shared.finish(&key, &token) {
            return;
        }
        if let Some(reply) = reply {
            call.reply(reply);
        }
    });
}

/// Runs `work` on a thread of its own.
pub fn spawn(state: &State, work: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("fixture-call".into())
        .spawn(work);
    if let Err(e) = spawned {
        // Without threads the fixture cannot keep its concurrency promise; stop loudly.
        eprintln!("manifold-fixture: cannot spawn call thread: {e}");
        state.exit(1);
    }
}

/// Waits --delay-us, the service time added to every tools/call run on its own thread.
pub fn service_delay(state: &State) {
    if state.args.delay_us > 0 {
        std::thread::sleep(Duration::from_micros(state.args.delay_us));
    }
}

fn is_slow(state: &State, name: &str) -> bool {
    name == "sleep"
        || (state.args.conformance && conformance::is_slow_tool(name))
        || (state.args.client_tools && client_tools::is_tool(name))
}

/// Runs one tool; None means "send no response" (garbage, crash).
pub fn run(
    state: &State,
    call: &Call,
    params: &Value,
    token: Option<&CancelToken>,
) -> Option<Result<Value, RpcError>> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Some(Err(RpcError::invalid_params("Missing tool name")));
    };
    let args = params.get("arguments").unwrap_or(&Value::Null);
    let result = match name {
        "echo" => echo(args),
        "add" => add(args),
        "sleep" => sleep(args, token),
        "crash" => crash(state, args),
        "garbage" => {
            call.raw_answer(b"}{ not json");
            return None;
        }
        "null_id_error" => {
            call.raw_answer(
                br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error (simulated by the fixture)"}}"#,
            );
            return None;
        }
        "big" => big(args),
        "links" => links(&state.args.name),
        "fail" => tool_error("it failed"),
        "whoami" => text_result(format!("{} {}", state.args.name, state.pid)),
        "progress" => progress(call, params, args, token),
        "add_tool" => add_tool(state, args),
        "log" => log(state, call, args),
        "cancelled_count" => text_result(state.cancelled_count().to_string()),
        "call_count" => {
            let what = args.get("what").and_then(Value::as_str).unwrap_or("");
            text_result(state.counted(what).to_string())
        }
        "trace_context" => trace_context(call, params),
        other if tools::is_extra(state, other) || is_dynamic(state, other) => echo(args),
        other => {
            let unknown = || Err(RpcError::invalid_params(format!("Unknown tool: {other}")));
            return Some(flagged_tool(state, call, other, params, token).unwrap_or_else(unknown));
        }
    };
    Some(Ok(result))
}

/// Runs one of the tools that only a flag adds; None if `name` is none of them.
fn flagged_tool(
    state: &State,
    call: &Call,
    name: &str,
    params: &Value,
    token: Option<&CancelToken>,
) -> Option<Result<Value, RpcError>> {
    let args = params.get("arguments").unwrap_or(&Value::Null);
    if state.args.conformance && conformance::is_tool(name) {
        Some(conformance::call_tool(state, call, name, params, token))
    } else if state.args.client_tools && client_tools::is_tool(name) {
        Some(client_tools::call_tool(state, call, name, params))
    } else if state.args.subscriptions && subscriptions::is_tool(name) {
        Some(Ok(subscriptions::call_tool(state, call, name, args)))
    } else {
        None
    }
}

fn is_dynamic(state: &State, name: &str) -> bool {
    state.with_dynamic(|dynamic| dynamic.iter().any(|(n, _)| n == name))
}

pub fn text_result(text: impl Into<String>) -> Value {
    // `x-fixture-result` is an unknown member the aggregator must pass through untouched.
    json!({ "content": [{ "type": "text", "text": text.into() }], "x-fixture-result": 1 })
}

pub fn tool_error(text: impl Into<String>) -> Value {
    json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true, "x-fixture-result": 1 })
}

pub fn arg_str<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing or non-string argument `{key}`"))
}

pub fn arg_f64(args: &Value, key: &str) -> Result<f64, String> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("missing or non-numeric argument `{key}`"))
}

pub fn arg_u64(args: &Value, key: &str) -> Result<u64, String> {
    args.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("missing or non-negative-integer argument `{key}`"))
}

fn echo(args: &Value) -> Value {
    match arg_str(args, "text") {
        Ok(text) => json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": { "text": text },
            "x-fixture-result": 1,
        }),
        Err(e) => tool_error(e),
    }
}

fn add(args: &Value) -> Value {
    match (arg_f64(args, "a"), arg_f64(args, "b")) {
        (Ok(a), Ok(b)) => {
            let sum = json!(a + b);
            // Integers print as integers ("3", not "3.0") when both inputs were integers.
            let sum = match (args["a"].as_i64(), args["b"].as_i64()) {
                (Some(a), Some(b)) => a.checked_add(b).map_or(sum, |s| json!(s)),
                _ => sum,
            };
            let mut result = text_result(sum.to_string());
            result["structuredContent"] = json!({ "sum": sum });
            result
        }
        (Err(e), _) | (_, Err(e)) => tool_error(e),
    }
}

fn sleep(args: &Value, token: Option<&CancelToken>) -> Value {
    let ms = match arg_u64(args, "ms") {
        Ok(ms) => ms,
        Err(e) => return tool_error(e),
    };
    let duration = Duration::from_millis(ms);
    match token {
        // Cancelled or not, the caller (`call`) decides whether to respond via `finish`.
        Some(token) => {
            token.sleep(duration);
        }
        None => std::thread::sleep(duration),
    }
    text_result(format!("slept {ms}"))
}

fn crash(state: &State, args: &Value) -> ! {
    let code = args.get("code").and_then(Value::as_i64).unwrap_or(3);
    let code = i32::try_from(code).unwrap_or(3);
    eprintln!(
        "manifold-fixture {} crashing with code {code}",
        state.args.name
    );
    state.exit(code)
}

fn big(args: &Value) -> Value {
    match arg_u64(args, "bytes") {
        Ok(n) if n > MAX_BIG_BYTES => tool_error(format!("bytes must be at most {MAX_BIG_BYTES}")),
        Ok(n) => text_result("x".repeat(n as usize)),
        Err(e) => tool_error(e),
    }
}

pub fn data_json(server: &str) -> String {
    json!({ "server": server, "items": [1, 2, 3] }).to_string()
}

fn links(server: &str) -> Value {
    json!({
        "content": [
            { "type": "resource_link", "uri": format!("fixture://{server}/readme"), "name": "readme" },
            { "type": "resource", "resource": {
                "uri": format!("fixture://{server}/data.json"),
                "mimeType": "application/json",
                "text": data_json(server),
            } },
        ],
        "x-fixture-result": 1,
    })
}

/// `progress`'s optional `interval_ms`: the pause before each step (0: none).
fn progress_interval(params: &Value) -> u64 {
    params
        .get("arguments")
        .and_then(|a| a.get("interval_ms"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn progress(call: &Call, params: &Value, args: &Value, token: Option<&CancelToken>) -> Value {
    let steps = match arg_u64(args, "steps") {
        Ok(steps) => steps,
        Err(e) => return tool_error(e),
    };
    let pause = Duration::from_millis(progress_interval(params));
    let progress_token = params.get("_meta").and_then(|m| m.get("progressToken"));
    for i in 1..=steps {
        if !pause.is_zero() {
            match token {
                Some(token) => {
                    token.sleep(pause);
                }
                None => std::thread::sleep(pause),
            }
        }
        if let Some(progress_token) = progress_token {
            let note = json!({ "progressToken": progress_token, "progress": i, "total": steps });
            call.notify("notifications/progress", &note);
        }
    }
    text_result(format!("progressed {steps}"))
}

fn add_tool(state: &State, args: &Value) -> Value {
    let name = match arg_str(args, "name") {
        Ok(name) => name,
        Err(e) => return tool_error(e),
    };
    if tools::is_static(state, name) {
        return tool_error(format!("tool {name} already exists"));
    }
    if args.get("remove").and_then(Value::as_bool) == Some(true) {
        if !state.remove_dynamic(name) {
            return tool_error(format!("there is no run-time tool {name}"));
        }
        state.changed(&Change::Tools);
        return text_result(format!("removed {name}"));
    }
    match args.get("description").and_then(Value::as_str) {
        Some(description) => {
            state.set_dynamic(name, tools::echo_descriptor(name, description.to_owned()));
        }
        None => {
            let description = tools::dynamic_description(name, &state.args.name);
            if !state.add_dynamic(name, tools::echo_descriptor(name, description)) {
                return tool_error(format!("tool {name} already exists"));
            }
        }
    }
    // Not about this call: every session's own stream (the standalone one over HTTP), and the
    // listen streams that asked for it.
    state.changed(&Change::Tools);
    text_result(format!("added {name}"))
}

/// What arrived of the caller's trace context: `params._meta` (where MCP carries it) and the
/// `traceparent` header of the HTTP request (where HTTP carries it); and the request's
/// `Authorization` header, so that tests can see which credentials a gateway sent.
fn trace_context(call: &Call, params: &Value) -> Value {
    let seen = json!({
        "meta": params.get("_meta").cloned().unwrap_or(Value::Null),
        "header": call.traceparent(),
        "authorization": call.authorization(),
    });
    text_result(seen.to_string())
}

fn log(state: &State, call: &Call, args: &Value) -> Value {
    let level = args.get("level").and_then(Value::as_str).unwrap_or("info");
    let message = match arg_str(args, "message") {
        Ok(message) => message,
        Err(e) => return tool_error(e),
    };
    let note = log_params(level, &state.args.name, message);
    call.notify("notifications/message", &note);
    text_result("logged")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_requires_text() {
        assert_eq!(
            echo(&json!({ "text": "hi" }))["structuredContent"]["text"],
            "hi"
        );
        assert_eq!(echo(&json!({}))["isError"], true);
        assert_eq!(echo(&json!({ "text": 5 }))["isError"], true);
    }

    #[test]
    fn add_sums_integers_and_floats() {
        let r = add(&json!({ "a": 1, "b": 2 }));
        assert_eq!(r["content"][0]["text"], "3");
        assert_eq!(r["structuredContent"]["sum"], 3);
        assert_eq!(
            add(&json!({ "a": 0.5, "b": 2 }))["structuredContent"]["sum"],
            2.5
        );
        assert_eq!(add(&json!({ "a": "1", "b": 2 }))["isError"], true);
    }

    #[test]
    fn argument_helpers_reject_wrong_types() {
        assert!(arg_u64(&json!({ "ms": -1 }), "ms").is_err());
        assert_eq!(arg_u64(&json!({ "ms": 7 }), "ms"), Ok(7));
        assert!(arg_str(&Value::Null, "text").is_err());
        assert!(arg_f64(&json!({ "a": null }), "a").is_err());
    }

    #[test]
    fn big_is_exact() {
        let r = big(&json!({ "bytes": 1000 }));
        assert_eq!(r["content"][0]["text"].as_str().unwrap().len(), 1000);
        assert_eq!(big(&json!({}))["isError"], true);
    }
}
