//! Asking the client something in the middle of a request, in both eras.
//!
//! A tool (or prompt) that needs input from the client says so with [`Asker::ask`], naming
//! each thing it needs with a key (`user_name`, `capital_question`, ...). How the question
//! travels depends on the era of the request:
//!
//! - Session era: each need becomes a request to the client (`elicitation/create`,
//!   `sampling/createMessage`, `roots/list`) sent on the call's own way back (stdout, or the
//!   POST's SSE stream), all the needs of one [`Asker::ask`] at once, and the tool waits for
//!   the answers (so such tools run on a thread of their own). The key travels only as the request's id, for an
//!   asker made [`Asker::naming`] (the conformance tools of the stateless era: a gateway that
//!   turns a session-era upstream's requests into `inputRequests` keyed by their ids then
//!   shows the keys the stateless era would have); otherwise the requests get the fixture's
//!   usual numeric ids.
//! - Stateless era (multi round-trip requests, 2026-07-28): the tool's run stops at the first
//!   [`Asker::ask`] whose answers are not in the request, and the request is answered with
//!   `{"resultType": "input_required", "inputRequests": {KEY: {method, params}}, "requestState"}`.
//!   The client retries the request with `inputResponses` (KEY: its result) and the
//!   `requestState`; the tool runs again from the start, and this time [`Asker::ask`] returns
//!   the answers. Answers of earlier rounds travel in the `requestState`, so a tool can ask
//!   in several rounds; the state is bound to the request (method, name, arguments) and
//!   sealed with a key of this process, and a state that fails either check is refused
//!   with -32602.
//!
//! Either way the tool then builds the same final result. A need the client did not declare
//! the capability for is, in the stateless era, -32021 (or skipped, if the tool marked it
//! optional); in the session era an optional need is skipped when `initialize` did not
//! declare its capability or the client refuses it, and a refused required need is reported
//! by the tool. Answers are checked for their shape in the stateless era (an `inputResponses`
//! that is not an object, or an answer of the wrong shape, is -32602); keys the tool never
//! asks for are ignored; keys it asks for and did not get are asked for again.

use serde_json::{json, Map, Value};

use crate::era;
use crate::exchange::{Asked, Call};
use crate::rpc::RpcError;
use crate::state::State;

/// One thing a tool needs from the client.
#[derive(Debug, Clone)]
pub struct Need {
    pub key: &'static str,
    pub method: &'static str,
    pub params: Value,
    /// Skipped rather than required when the client cannot give it.
    pub optional: bool,
}

impl Need {
    /// An `elicitation/create` form of one `message` and `properties`, all required.
    pub fn elicit(key: &'static str, message: &str, properties: Value) -> Self {
        let required: Vec<String> = properties
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let schema = json!({ "type": "object", "properties": properties, "required": required });
        Self::elicit_schema(key, message, schema)
    }

    /// An `elicitation/create` form with a schema as it is.
    pub fn elicit_schema(key: &'static str, message: &str, schema: Value) -> Self {
        Self {
            key,
            method: "elicitation/create",
            params: json!({ "message": message, "requestedSchema": schema }),
            optional: false,
        }
    }

    /// A `sampling/createMessage` of one user `prompt`.
    pub fn sample(key: &'static str, prompt: &str, max_tokens: u64) -> Self {
        Self {
            key,
            method: "sampling/createMessage",
            params: json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                "maxTokens": max_tokens,
            }),
            optional: false,
        }
    }

    pub fn roots(key: &'static str) -> Self {
        Self {
            key,
            method: "roots/list",
            params: json!({}),
            optional: false,
        }
    }

    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// The client capability the need's method requires.
    pub fn capability(&self) -> &'static str {
        capability_of(self.method)
    }
}

fn capability_of(method: &str) -> &'static str {
    match method {
        "elicitation/create" => "elicitation",
        "sampling/createMessage" => "sampling",
        _ => "roots",
    }
}

/// What became of one need.
#[derive(Debug, Clone, PartialEq)]
pub enum Got {
    /// The client's result.
    Answer(Value),
    /// The client answered with an error, or did not answer in time (session era only).
    Refused(RpcError),
    /// Not asked: optional, and the client cannot give it (or refused it).
    Skipped,
}

#[cfg(test)]
impl Got {
    pub fn answer(&self) -> Option<&Value> {
        match self {
            Got::Answer(answer) => Some(answer),
            _ => None,
        }
    }
}

/// Why a run stopped before its result.
#[derive(Debug)]
pub enum Stop {
    /// Stop and answer with this result: the `input_required` one (stateless era), or what a
    /// tool says of a need the client refused (session era).
    Answer(Value),
    /// The request is refused with this error.
    Error(RpcError),
}

impl From<RpcError> for Stop {
    fn from(e: RpcError) -> Self {
        Stop::Error(e)
    }
}

/// What a run that may stop answers: its result, the result it stopped with, or the error.
pub fn outcome(run: Result<Value, Stop>) -> Result<Value, RpcError> {
    match run {
        Ok(result) | Err(Stop::Answer(result)) => Ok(result),
        Err(Stop::Error(e)) => Err(e),
    }
}

/// Asks the client for what one request needs (see the module doc).
pub struct Asker<'a> {
    state: &'a State,
    call: &'a Call,
    params: &'a Value,
    replay: Option<Replay>,
    /// Session era: each request's id is its need's key.
    naming: bool,
}

/// A stateless request's answers: those of earlier rounds (from `requestState`) and those
/// it carries (`inputResponses`), read when first asked for.
#[derive(Default)]
struct Replay {
    loaded: bool,
    kept: Map<String, Value>,
    responses: Map<String, Value>,
}

impl<'a> Asker<'a> {
    /// `params`: the request's params (`inputResponses` and `requestState` are read there).
    pub fn new(state: &'a State, call: &'a Call, params: &'a Value) -> Self {
        let replay = call.modern().map(|_| Replay::default());
        Self {
            state,
            call,
            params,
            replay,
            naming: false,
        }
    }

    /// Session era: the request for each need has the need's key as its id (`KEY`, or
    /// `KEY-N` while a request of that id waits for its answer).
    pub fn naming(mut self) -> Self {
        self.naming = true;
        self
    }

    pub fn ask_one(&mut self, need: Need) -> Result<Got, Stop> {
        let mut got = self.ask(vec![need])?;
        Ok(got.pop().unwrap_or(Got::Skipped))
    }

    /// Asks for every need (at once in the stateless era: one round for all of them). The
    /// answers are in the order of `needs`.
    pub fn ask(&mut self, needs: Vec<Need>) -> Result<Vec<Got>, Stop> {
        if self.replay.is_some() {
            self.replay(needs)
        } else {
            Ok(self.ask_session(needs))
        }
    }

    /// Sends every request of the batch at once, as the stateless era asks for them in one
    /// round, then waits for each answer.
    fn ask_session(&self, needs: Vec<Need>) -> Vec<Got> {
        let client = self.call.client();
        let name = |need: &Need| self.naming.then_some(need.key);
        let asked: Vec<(Need, Option<Result<Asked, RpcError>>)> = needs
            .into_iter()
            .map(|need| {
                if need.optional && !self.state.declared(client, need.capability()) {
                    return (need, None);
                }
                let sent =
                    (self.call).send_request(self.state, name(&need), need.method, &need.params);
                (need, Some(sent))
            })
            .collect();
        asked
            .into_iter()
            .map(
                |(need, asked)| match asked.map(|a| a.and_then(|a| a.wait_value(self.state))) {
                    None => Got::Skipped,
                    Some(Ok(answer)) => Got::Answer(answer),
                    Some(Err(_)) if need.optional => Got::Skipped,
                    Some(Err(e)) => Got::Refused(e),
                },
            )
            .collect()
    }

    fn replay(&mut self, needs: Vec<Need>) -> Result<Vec<Got>, Stop> {
        self.load()?;
        let Some(modern) = self.call.modern() else {
            return Ok(Vec::new());
        };
        let replay = self.replay.get_or_insert_with(Replay::default);
        let mut got = Vec::with_capacity(needs.len());
        let mut missing = Map::new();
        for need in &needs {
            if !modern.declares(need.capability()) {
                if need.optional {
                    got.push(Got::Skipped);
                    continue;
                }
                return Err(Stop::Error(era::missing_capability(
                    need.capability(),
                    &format!("this request needs {} ({})", need.method, need.key),
                )));
            }
            let answer = (replay.kept.get(need.key))
                .or_else(|| replay.responses.get(need.key))
                .cloned();
            match answer {
                Some(answer) => {
                    check_answer(need.method, &answer).map_err(|why| {
                        RpcError::invalid_params(format!("inputResponses.{}: {why}", need.key))
                    })?;
                    replay.kept.insert(need.key.to_owned(), answer.clone());
                    got.push(Got::Answer(answer));
                }
                None => {
                    let request = json!({ "method": need.method, "params": need.params });
                    missing.insert(need.key.to_owned(), request);
                    got.push(Got::Skipped);
                }
            }
        }
        if missing.is_empty() {
            return Ok(got);
        }
        let state = seal(
            self.state,
            &binding(&modern.method, self.params),
            &replay.kept,
        );
        Err(Stop::Answer(json!({
            "resultType": "input_required",
            "inputRequests": missing,
            "requestState": state,
        })))
    }

    fn load(&mut self) -> Result<(), RpcError> {
        let Some(modern) = self.call.modern() else {
            return Ok(());
        };
        let Some(replay) = self.replay.as_mut() else {
            return Ok(());
        };
        if replay.loaded {
            return Ok(());
        }
        replay.loaded = true;
        match self.params.get("inputResponses") {
            None => {}
            Some(Value::Object(responses)) => replay.responses = responses.clone(),
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "inputResponses must be an object of the client's results by the keys of \
                     inputRequests, not {other}"
                )))
            }
        }
        match self.params.get("requestState") {
            None => {}
            Some(Value::String(text)) => {
                let (bound, answers) = open(self.state, text)?;
                if bound != binding(&modern.method, self.params) {
                    return Err(RpcError::invalid_params(
                        "requestState was issued for another request",
                    ));
                }
                replay.kept = answers;
            }
            Some(_) => return Err(RpcError::invalid_params("requestState must be a string")),
        }
        Ok(())
    }
}

/// What a request state is bound to: the method and the request's name and arguments.
fn binding(method: &str, params: &Value) -> String {
    let name = params.get("name").or_else(|| params.get("uri"));
    json!([method, name, params.get("arguments")]).to_string()
}

/// A request state: the hex of `{"b": binding, "a": answers}`, a dot, and its seal.
pub fn seal(state: &State, binding: &str, answers: &Map<String, Value>) -> String {
    let payload = json!({ "b": binding, "a": answers }).to_string();
    format!(
        "{}.{}",
        hex(payload.as_bytes()),
        state.seal(payload.as_bytes())
    )
}

/// The binding and answers of a request state this process sealed.
pub fn open(state: &State, text: &str) -> Result<(String, Map<String, Value>), RpcError> {
    let tampered = || RpcError::invalid_params("requestState failed its integrity check");
    let (body, seal) = text.split_once('.').ok_or_else(tampered)?;
    let payload = unhex(body).ok_or_else(tampered)?;
    if state.seal(&payload) != seal {
        return Err(tampered());
    }
    let value: Value = serde_json::from_slice(&payload).map_err(|_| tampered())?;
    let binding = value
        .get("b")
        .and_then(Value::as_str)
        .ok_or_else(tampered)?;
    let answers = value
        .get("a")
        .and_then(Value::as_object)
        .ok_or_else(tampered)?;
    Ok((binding.to_owned(), answers.clone()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Checks the shape of the client's result for a request of `method`.
fn check_answer(method: &str, answer: &Value) -> Result<(), String> {
    let Some(object) = answer.as_object() else {
        return Err(format!("expected the result of {method}, got {answer}"));
    };
    match method {
        "elicitation/create" => {
            let action = object.get("action").and_then(Value::as_str);
            if !matches!(action, Some("accept" | "decline" | "cancel")) {
                return Err("an elicitation result needs action accept, decline or cancel".into());
            }
            if object.get("content").is_some_and(|c| !c.is_object()) {
                return Err("an elicitation result's content must be an object".into());
            }
        }
        "sampling/createMessage" => {
            let content = object.get("content");
            if !object.get("role").is_some_and(Value::is_string)
                || !content.is_some_and(|c| c.is_object() || c.is_array())
            {
                return Err("a sampling result needs role and content".into());
            }
        }
        _ => {
            let roots = object.get("roots").and_then(Value::as_array);
            let valid = roots.is_some_and(|roots| {
                roots
                    .iter()
                    .all(|r| r.get("uri").is_some_and(Value::is_string))
            });
            if !valid {
                return Err("a roots result needs roots, each with a uri".into());
            }
        }
    }
    Ok(())
}

/// The text a sampling result carries: `content.text`, or the first text of a list.
pub fn sampled_text(result: &Value) -> Option<&str> {
    let content = result.get("content")?;
    let block = match content {
        Value::Array(blocks) => blocks.iter().find(|b| b.get("text").is_some())?,
        block => block,
    };
    block.get("text").and_then(Value::as_str)
}

/// The error text of a refused need.
pub fn refused(method: &str, e: &RpcError) -> String {
    format!("{method} failed: {} {}", e.code, e.message)
}

/// The answer a tool needs, or a stop with the tool error that says why there is none.
pub fn take(got: Got, method: &str) -> Result<Value, Stop> {
    match got {
        Got::Answer(answer) => Ok(answer),
        // A client that says it lacks the capability the request needs makes the request
        // fail with that error, as the stateless era has it.
        Got::Refused(e) if e.code == -32021 => Err(Stop::Error(e)),
        Got::Refused(e) => Err(Stop::Answer(crate::calls::tool_error(refused(method, &e)))),
        Got::Skipped => Err(Stop::Answer(crate::calls::tool_error(format!(
            "{method} was not asked: the client cannot answer it"
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use crate::era::accept;
    use crate::exchange::Sink;

    /// Keeps what is sent, as stdout would.
    #[derive(Default)]
    struct Kept(Mutex<Vec<Value>>);

    impl Sink for Kept {
        fn send(&self, line: Vec<u8>) {
            self.0
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&line).unwrap());
        }
        fn answer(&self, line: Vec<u8>) {
            self.send(line);
        }
        fn client(&self) -> &str {
            ""
        }
    }

    fn stateless_call(state: &State, params: &Value) -> Call {
        let ctx = accept(state, "tools/call", params).unwrap();
        Call::stateless(json!(1), Arc::new(Kept::default()), ctx)
    }

    fn params(caps: Value, extra: Value) -> Value {
        let mut p = json!({ "name": "t", "arguments": { "a": 1 }, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps } });
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    }

    fn name() -> Need {
        Need::elicit(
            "user_name",
            "Name?",
            json!({ "name": { "type": "string" } }),
        )
    }

    fn all() -> Value {
        json!({ "elicitation": {}, "sampling": {}, "roots": {} })
    }

    #[test]
    fn a_missing_answer_stops_the_run_with_input_required() {
        let state = crate::era::tests::state(&["--era", "stateless"]);
        let p = params(all(), json!({}));
        let call = stateless_call(&state, &p);
        let Err(Stop::Answer(irr)) =
            Asker::new(&state, &call, &p).ask(vec![name(), Need::roots("r")])
        else {
            panic!("expected input_required");
        };
        assert_eq!(irr["resultType"], "input_required");
        assert_eq!(
            irr["inputRequests"]["user_name"]["method"],
            "elicitation/create"
        );
        assert_eq!(
            irr["inputRequests"]["user_name"]["params"]["requestedSchema"]["required"],
            json!(["name"])
        );
        assert_eq!(
            irr["inputRequests"]["r"],
            json!({ "method": "roots/list", "params": {} })
        );
        assert!(irr["requestState"].is_string());
    }

    #[test]
    fn answers_carry_over_rounds_in_the_sealed_state() {
        let state = crate::era::tests::state(&["--era", "stateless"]);
        let accept_alice = json!({ "action": "accept", "content": { "name": "Alice" } });
        let p1 = params(
            all(),
            json!({ "inputResponses": { "user_name": accept_alice } }),
        );
        let call = stateless_call(&state, &p1);
        let mut asker = Asker::new(&state, &call, &p1);
        assert_eq!(
            asker.ask_one(name()).unwrap().answer().unwrap()["content"]["name"],
            "Alice"
        );
        let Err(Stop::Answer(round2)) = asker.ask_one(Need::roots("r")) else {
            panic!("the second need is asked for");
        };
        assert!(round2["inputRequests"].get("user_name").is_none());
        let roots = json!({ "roots": [{ "uri": "file:///x" }] });
        let p2 = params(
            all(),
            json!({ "inputResponses": { "r": roots }, "requestState": round2["requestState"] }),
        );
        let call = stateless_call(&state, &p2);
        let mut asker = Asker::new(&state, &call, &p2);
        let got = asker.ask(vec![name()]).unwrap();
        assert_eq!(
            got[0].answer().unwrap()["content"]["name"],
            "Alice",
            "from the state"
        );
        assert!(asker.ask_one(Need::roots("r")).is_ok());
        // Tampered, or bound to another call: refused.
        let tampered = format!("{}-TAMPERED", round2["requestState"].as_str().unwrap());
        let p3 = params(all(), json!({ "requestState": tampered }));
        let call = stateless_call(&state, &p3);
        let Err(Stop::Error(e)) = Asker::new(&state, &call, &p3).ask_one(name()) else {
            panic!("a tampered state is refused");
        };
        assert_eq!(e.code, -32602);
        let mut p4 = params(all(), json!({ "requestState": round2["requestState"] }));
        p4["arguments"]["a"] = json!(2);
        let call = stateless_call(&state, &p4);
        let Err(Stop::Error(e)) = Asker::new(&state, &call, &p4).ask_one(name()) else {
            panic!("a state of another call is refused");
        };
        assert!(e.message.contains("another request"), "{e:?}");
    }

    #[test]
    fn capabilities_and_shapes_are_checked() {
        let state = crate::era::tests::state(&["--era", "stateless"]);
        let p = params(json!({ "sampling": {} }), json!({}));
        let call = stateless_call(&state, &p);
        let Err(Stop::Error(e)) = Asker::new(&state, &call, &p).ask_one(name()) else {
            panic!("elicitation was not declared");
        };
        assert_eq!(e.code, -32021);
        assert_eq!(
            e.data.unwrap()["requiredCapabilities"],
            json!({ "elicitation": {} })
        );
        let mut asker = Asker::new(&state, &call, &p);
        let Err(Stop::Answer(irr)) = asker.ask(vec![
            name().optional(),
            Need::sample("s", "hi", 5).optional(),
        ]) else {
            panic!("sampling is asked for");
        };
        let keys: Vec<&String> = irr["inputRequests"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["s"]);
        for bad in [json!(null), json!(3), json!([])] {
            let p = params(all(), json!({ "inputResponses": bad }));
            let call = stateless_call(&state, &p);
            let Err(Stop::Error(e)) = Asker::new(&state, &call, &p).ask_one(name()) else {
                panic!("inputResponses {bad} is refused");
            };
            assert_eq!(e.code, -32602);
        }
        for bad in [
            json!(12345),
            json!({ "action": "maybe" }),
            json!({ "action": "accept", "content": 1 }),
        ] {
            let p = params(
                all(),
                json!({ "inputResponses": { "user_name": bad, "extra": 1 } }),
            );
            let call = stateless_call(&state, &p);
            let Err(Stop::Error(e)) = Asker::new(&state, &call, &p).ask_one(name()) else {
                panic!("answer {bad} is refused");
            };
            assert!(e.message.contains("user_name"), "{e:?}");
        }
        assert!(check_answer(
            "sampling/createMessage",
            &json!({ "role": "assistant", "content": { "type": "text", "text": "x" } })
        )
        .is_ok());
        assert!(check_answer("sampling/createMessage", &json!({ "content": {} })).is_err());
        assert!(check_answer("roots/list", &json!({ "roots": [{ "name": "x" }] })).is_err());
    }

    #[test]
    fn session_requests_are_named_after_their_keys_while_free() {
        let state = crate::era::tests::state(&[]);
        let (first, _rx1) = state.expect_named_answer("user_name");
        assert_eq!(first, json!("user_name"));
        let (second, _rx2) = state.expect_named_answer("user_name");
        assert!(
            second.as_str().unwrap().starts_with("user_name-"),
            "{second}"
        );
        state.forget_answer(&first);
        assert_eq!(state.expect_named_answer("user_name").0, json!("user_name"));
    }

    #[test]
    fn states_are_opaque_and_sealed() {
        let state = crate::era::tests::state(&[]);
        let mut answers = Map::new();
        answers.insert("k".into(), json!({ "v": 1 }));
        let sealed = seal(&state, "bound", &answers);
        assert_eq!(
            open(&state, &sealed).unwrap(),
            ("bound".to_owned(), answers)
        );
        assert!(open(&state, "zz.00").is_err());
        let mut forged = sealed.clone();
        let last = if forged.ends_with('0') { "1" } else { "0" };
        forged.replace_range(forged.len() - 1.., last);
        assert!(open(&state, &forged).is_err());
        let other = crate::era::tests::state(&[]);
        assert!(open(&other, &sealed).is_err(), "another process's key");
        assert_eq!(unhex(&hex(b"\x00\xffab")), Some(b"\x00\xffab".to_vec()));
        assert_eq!(unhex("abc"), None);
    }
}
