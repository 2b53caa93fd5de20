use super::*;
use crate::testutil::{doc, Files};
use serde_json::json;

#[test]
fn external_definitions_get_their_own_names_and_collisions_a_suffix() {
    let files = Files::new(&[(
        "https://api.example.com/common.yaml",
        "Pet: {type: object, properties: {tag: {type: string}}}\n",
    )]);
    let root = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    Pet: {type: object, properties: {other: {$ref: 'common.yaml#/Pet'}}}\n";
    let d = crate::load(
        root.as_bytes(),
        "https://api.example.com/openapi.yaml",
        &files,
    )
    .unwrap();
    let mut defs = Defs::new(&d, Mode::Input);
    let schema = defs
        .schema(d.url(), &json!({"$ref": "#/components/schemas/Pet"}))
        .unwrap();
    assert_eq!(schema, json!({"$ref": "#/$defs/Pet"}));
    let defs = defs.finish().unwrap();
    assert_eq!(
        defs["Pet"]["properties"]["other"],
        json!({"$ref": "#/$defs/Pet_2"})
    );
    assert_eq!(
        defs["Pet_2"]["properties"]["tag"],
        json!({"type": "string"})
    );
}

#[test]
fn openapi_30_spellings_become_json_schema_and_extensions_go() {
    let d = doc("openapi: 3.0.0\npaths: {}\n");
    let mut defs = Defs::new(&d, Mode::Input);
    let s = json!({"type": "integer", "maximum": 10, "exclusiveMaximum": true, "x-internal": 1, "example": 3,
                   "enum": [1, 2], "nullable": true});
    assert_eq!(
        defs.schema(d.url(), &s).unwrap(),
        json!({"type": ["integer", "null"], "exclusiveMaximum": 10, "examples": [3], "enum": [1, 2, null]})
    );
}

#[test]
fn unreached_definitions_are_not_copied() {
    let d = doc("openapi: 3.1.0\npaths: {}\ncomponents: {schemas: {A: {type: string}, B: {type: integer}}}\n");
    let mut defs = Defs::new(&d, Mode::Output);
    defs.schema(
        d.url(),
        &json!({"items": {"$ref": "#/components/schemas/A"}}),
    )
    .unwrap();
    let defs = defs.finish().unwrap();
    assert_eq!(defs.keys().collect::<Vec<_>>(), vec!["A"]);
}
