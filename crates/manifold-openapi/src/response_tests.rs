use super::*;
use crate::convert::tests::PETS;
use crate::testutil::doc;
use crate::{convert, Options};

impl Operation {
    /// The result `map_response` writes, parsed: it must be one JSON value.
    fn mapped(&self, status: u16, content_type: Option<&str>, body: &[u8], cap: usize) -> Value {
        let text = self.map_response(status, content_type, body, cap);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

fn list_pets() -> Operation {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    c.tools.into_iter().find(|t| t.name == "listPets").unwrap()
}

#[test]
fn json_answers_are_structured_and_wrapped_when_not_an_object() {
    let r = list_pets().mapped(
        200,
        Some("application/json; charset=utf-8"),
        br#"[{"name":"Rex"}]"#,
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["structuredContent"], json!({"result": [{"name": "Rex"}]}));
    assert_eq!(r["content"][0]["text"], r#"[{"name":"Rex"}]"#);
    assert!(r.get("isError").is_none());
    let r = list_pets().mapped(
        200,
        Some("application/json"),
        br#"{"a":1}"#,
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["structuredContent"], json!({"a": 1}));
}

#[test]
fn errors_html_and_oversized_bodies_say_so() {
    let op = list_pets();
    let r = op.mapped(
        404,
        Some("text/plain"),
        "x".repeat(5000).as_bytes(),
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("HTTP 404 Not Found\nxxx"), "{text}");
    assert!(text.ends_with("[cut: 4096 of 5000 bytes shown]"), "{text}");
    let r = op.mapped(
        200,
        Some("text/html"),
        b"<html>login</html>",
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("the service answered HTML where JSON was promised"));
    let r = op.mapped(200, Some("application/json"), b"[1,2,3,4,5,6]", 4);
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("the answer is longer than the cap of 4 bytes: cut to it\n[1,2"));
    let r = op.mapped(200, Some("text/plain"), b"abcdefgh", 4);
    assert_eq!(
        r["content"][0]["text"],
        "abcd\n[the answer is longer than the cap of 4 bytes: cut to it]"
    );
    let r = op.mapped(
        200,
        Some("application/json"),
        b"{nope",
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["isError"], true);
}

#[test]
fn text_images_audio_and_other_bytes_keep_their_kind() {
    let op = list_pets();
    assert_eq!(
        op.mapped(200, Some("text/csv"), b"a,b", 100)["content"][0],
        json!({"type": "text", "text": "a,b"})
    );
    assert_eq!(
        op.mapped(200, Some("image/png"), b"hi", 100)["content"][0],
        json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})
    );
    assert_eq!(
        op.mapped(200, Some("audio/wav"), b"hi", 100)["content"][0]["type"],
        "audio"
    );
    assert_eq!(
        op.mapped(200, Some("application/pdf"), b"hi", 100)["content"][0],
        json!({"type": "resource", "resource": {"uri": "openapi:response", "mimeType": "application/pdf", "blob": "aGk="}})
    );
    assert_eq!(
        op.mapped(204, None, b"", 100)["content"][0]["text"],
        "HTTP 204 No Content"
    );
}

#[test]
fn a_json_answer_is_written_around_its_own_text_escaped_once() {
    let body = b" \n{\"say\": \"a \\\"quoted\\\" line\\n\", \"n\": [1, 2.50]}\n";
    let r = list_pets().mapped(
        200,
        Some("application/problem+json"),
        body,
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(
        r["structuredContent"],
        json!({"say": "a \"quoted\" line\n", "n": [1, 2.50]})
    );
    assert_eq!(
        r["content"][0]["text"],
        "{\"say\": \"a \\\"quoted\\\" line\\n\", \"n\": [1, 2.50]}"
    );
    let r = list_pets().mapped(
        200,
        Some("application/json"),
        b"\"text\"",
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["structuredContent"], json!({"result": "text"}));
    let r = list_pets().mapped(
        200,
        Some("application/json"),
        b"{\"a\":1} x",
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("invalid JSON"),
        "{r}"
    );
}
