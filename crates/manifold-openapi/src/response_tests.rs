use super::*;
use crate::convert::tests::PETS;
use crate::testutil::doc;
use crate::{convert, Options};

fn list_pets() -> Operation {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    c.tools.into_iter().find(|t| t.name == "listPets").unwrap()
}

#[test]
fn json_answers_are_structured_and_wrapped_when_not_an_object() {
    let r = list_pets().map_response(
        200,
        Some("application/json; charset=utf-8"),
        br#"[{"name":"Rex"}]"#,
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["structuredContent"], json!({"result": [{"name": "Rex"}]}));
    assert_eq!(r["content"][0]["text"], r#"[{"name":"Rex"}]"#);
    assert!(r.get("isError").is_none());
    let r = list_pets().map_response(
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
    let r = op.map_response(
        404,
        Some("text/plain"),
        "x".repeat(5000).as_bytes(),
        DEFAULT_RESPONSE_CAP,
    );
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("HTTP 404 Not Found\nxxx"), "{text}");
    assert!(text.ends_with("[cut: 4096 of 5000 bytes shown]"), "{text}");
    let r = op.map_response(
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
    let r = op.map_response(200, Some("application/json"), b"[1,2,3,4,5,6]", 4);
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("the answer is longer than the cap of 4 bytes: cut to it\n[1,2"));
    let r = op.map_response(200, Some("text/plain"), b"abcdefgh", 4);
    assert_eq!(
        r["content"][0]["text"],
        "abcd\n[the answer is longer than the cap of 4 bytes: cut to it]"
    );
    let r = op.map_response(
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
        op.map_response(200, Some("text/csv"), b"a,b", 100)["content"][0],
        json!({"type": "text", "text": "a,b"})
    );
    assert_eq!(
        op.map_response(200, Some("image/png"), b"hi", 100)["content"][0],
        json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})
    );
    assert_eq!(
        op.map_response(200, Some("audio/wav"), b"hi", 100)["content"][0]["type"],
        "audio"
    );
    assert_eq!(
        op.map_response(200, Some("application/pdf"), b"hi", 100)["content"][0],
        json!({"type": "resource", "resource": {"uri": "openapi:response", "mimeType": "application/pdf", "blob": "aGk="}})
    );
    assert_eq!(
        op.map_response(204, None, b"", 100)["content"][0]["text"],
        "HTTP 204 No Content"
    );
}
