use super::*;
use crate::convert::tests::PETS;
use crate::testutil::doc;
use crate::{convert, Options};
use serde_json::json;

fn op(text: &str, name: &str) -> Operation {
    let c = convert(&doc(text), &Options::default()).unwrap();
    c.tools.into_iter().find(|t| t.name == name).unwrap()
}

const STYLES: &str = r#"
openapi: 3.1.0
servers: [{url: 'https://svc.example.com'}]
paths:
  /files/{path}:
    post:
      operationId: styles
      parameters:
        - {name: path, in: path, required: true, schema: {type: string}}
        - {name: ids, in: query, schema: {type: array, items: {type: integer}}}
        - {name: csv, in: query, explode: false, schema: {type: array, items: {type: string}}}
        - {name: sp, in: query, style: spaceDelimited, schema: {type: array}}
        - {name: pipe, in: query, style: pipeDelimited, schema: {type: array}}
        - {name: filter, in: query, style: deepObject, schema: {type: object}}
        - {name: X-Trace, in: header, schema: {type: string}}
        - {name: session, in: cookie, schema: {type: string}}
      requestBody:
        content: {application/x-www-form-urlencoded: {schema: {type: object}}}
      responses: {}
  /raw:
    put:
      operationId: raw
      requestBody: {content: {application/octet-stream: {}}}
      responses: {}
  /form:
    post:
      operationId: form
      requestBody: {content: {multipart/form-data: {schema: {type: object}}}}
      responses: {}
"#;

#[test]
fn path_values_are_escaped_and_query_styles_serialise() {
    let args = json!({
        "path": "a/b c", "ids": [1, 2], "csv": ["x", "y"], "sp": ["a", "b"], "pipe": ["a", "b"],
        "filter": {"color": "red"}, "X-Trace": "t1", "session": "s 1", "body": {"q": "a&b", "n": 2}
    });
    let req = op(STYLES, "styles").request(&args).unwrap();
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.url,
        "https://svc.example.com/files/a%2Fb%20c?ids=1&ids=2&csv=x,y&sp=a%20b&pipe=a|b&filter%5Bcolor%5D=red"
    );
    assert_eq!(
        req.headers,
        vec![
            ("X-Trace".into(), "t1".into()),
            ("Cookie".into(), "session=s%201".into())
        ]
    );
    assert_eq!(
        req.content_type.as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(req.body.as_deref(), Some(&b"n=2&q=a%26b"[..]));
}

#[test]
fn json_octet_stream_and_multipart_bodies() {
    let req = op(PETS, "createPet")
        .request(&json!({"body": {"name": "Rex"}}))
        .unwrap();
    assert_eq!(req.url, "https://api.example.com/v1/pets");
    assert_eq!(req.body.as_deref(), Some(&br#"{"name":"Rex"}"#[..]));
    let req = op(STYLES, "raw").request(&json!({"body": "aGk="})).unwrap();
    assert_eq!(
        (req.content_type.as_deref(), req.body.as_deref()),
        (Some("application/octet-stream"), Some(&b"hi"[..]))
    );
    let err = op(STYLES, "raw")
        .request(&json!({"body": "not base64!"}))
        .unwrap_err();
    assert_eq!(err.to_string(), "argument `body` must be base64 text");
    let req = op(STYLES, "form")
        .request(&json!({"body": {"note": "hi"}}))
        .unwrap();
    assert_eq!(
        req.content_type.as_deref(),
        Some("multipart/form-data; boundary=manifold-form-boundary")
    );
    let text = String::from_utf8(req.body.unwrap()).unwrap();
    assert!(
        text.contains("Content-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n"),
        "{text}"
    );
}

#[test]
fn wrong_arguments_are_refused_naming_the_parameter() {
    let show = op(PETS, "showPetById");
    let err = show.request(&json!({"petId__path": "seven"})).unwrap_err();
    assert_eq!(err.to_string(), "argument `petId__path` must be an integer");
    assert_eq!(
        show.request(&json!({})).unwrap_err(),
        ArgError::Missing("petId__path".into())
    );
    assert_eq!(
        show.request(&json!({"petId__path": 1, "nope": 1}))
            .unwrap_err(),
        ArgError::Unknown("nope".into())
    );
    assert_eq!(
        show.request(&json!([1])).unwrap_err(),
        ArgError::NotAnObject
    );
    let err = show
        .request(&json!({"petId__path": 1, "verbose": "maybe"}))
        .unwrap_err();
    assert_eq!(err.parameter(), Some("verbose"));
    let err = show
        .request(&json!({"petId__path": 1, "petId__header": "a\r\nb"}))
        .unwrap_err();
    assert_eq!(err.parameter(), Some("petId__header"));
    let create = op(PETS, "createPet");
    assert_eq!(
        create
            .request(&json!({"body": {"name": 5}}))
            .unwrap_err()
            .parameter(),
        Some("body.name")
    );
    let req = show
        .request(&json!({"petId__path": 7, "verbose": "yes"}))
        .unwrap();
    assert_eq!(req.url, "https://api.example.com/v1/pets/7?verbose=yes");
}
