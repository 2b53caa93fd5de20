use super::*;
use crate::testutil::{Files, NoFiles};

#[test]
fn openapi_30_31_and_swagger_20_are_recognised() {
    let doc = load(
        b"openapi: 3.0.3\npaths: {}\n",
        "file:///api/a.yaml",
        &NoFiles,
    )
    .unwrap();
    assert_eq!(doc.version(), Version::OpenApi30);
    let doc = load(
        br#"{"openapi": "3.1.0", "paths": {}}"#,
        "file:///api/a.json",
        &NoFiles,
    )
    .unwrap();
    assert_eq!(doc.version(), Version::OpenApi31);
    let doc = load(
        b"swagger: '2.0'\npaths: {}\n",
        "file:///api/a.yaml",
        &NoFiles,
    )
    .unwrap();
    assert_eq!(doc.version(), Version::Swagger20);
}

#[test]
fn an_unknown_version_is_an_error_naming_it() {
    let err = load(b"openapi: 4.0.0\npaths: {}\n", "file:///a.yaml", &NoFiles).unwrap_err();
    assert_eq!(
        err.to_string(),
        "file:///a.yaml: neither `openapi` 3.0/3.1 nor `swagger` 2.0 (found openapi 4.0.0)"
    );
    let err = load(b"info: {}\n", "file:///a.yaml", &NoFiles).unwrap_err();
    assert!(
        err.to_string().contains("no `openapi` or `swagger` field"),
        "{err}"
    );
}

#[test]
fn a_description_that_does_not_parse_is_an_error_naming_the_file() {
    let err = load(b"{\"openapi\": \"3.0.0\",", "file:///a.json", &NoFiles).unwrap_err();
    assert!(matches!(err, LoadError::Parse { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("file:///a.json: not a JSON or YAML document"),
        "{err}"
    );
}

#[test]
fn external_refs_are_fetched_once_relative_to_the_referring_document() {
    let files = Files::new(&[
        (
            "file:///api/schemas/pet.yaml",
            "Pet:\n  type: object\n  properties:\n    tag: {$ref: 'tag.yaml'}\n",
        ),
        ("file:///api/schemas/tag.yaml", "type: string\n"),
    ]);
    let root = "openapi: 3.0.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'schemas/pet.yaml#/Pet'}\n    B: {$ref: './schemas/pet.yaml#/Pet'}\n";
    let doc = load(root.as_bytes(), "file:///api/root.yaml", &files).unwrap();
    assert_eq!(
        files.reads(),
        vec![
            "file:///api/schemas/pet.yaml",
            "file:///api/schemas/tag.yaml"
        ]
    );
    let (at, value) = doc
        .deref(doc.url(), &doc.root()["components"]["schemas"]["A"])
        .unwrap();
    assert_eq!(at, "file:///api/schemas/pet.yaml");
    assert_eq!(value["type"], "object");
}

#[test]
fn a_ref_to_a_missing_file_is_an_error_naming_both_files() {
    let root =
        "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: 'missing.yaml'}\n";
    let err = load(root.as_bytes(), "file:///api/root.yaml", &NoFiles).unwrap_err();
    assert_eq!(
        err.to_string(),
        "file:///api/root.yaml: cannot fetch `$ref` target file:///api/missing.yaml: no such file"
    );
}

#[test]
fn a_ref_to_a_missing_member_is_an_error() {
    let root = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: '#/components/schemas/Nope'}\n";
    let err = load(root.as_bytes(), "file:///r.yaml", &NoFiles).unwrap_err();
    assert_eq!(
        err.to_string(),
        "file:///r.yaml: `$ref` #/components/schemas/Nope points to nothing"
    );
}

#[test]
fn a_cycle_of_bare_refs_is_an_error_and_a_recursive_schema_is_not() {
    let root = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    A: {$ref: '#/components/schemas/B'}\n    B: {$ref: '#/components/schemas/A'}\n";
    let err = load(root.as_bytes(), "file:///r.yaml", &NoFiles).unwrap_err();
    assert!(matches!(err, LoadError::RefCycle { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("#/components/schemas/A -> #/components/schemas/B"),
        "{err}"
    );
    let root = "openapi: 3.1.0\npaths: {}\ncomponents:\n  schemas:\n    Node:\n      type: object\n      properties:\n        children: {type: array, items: {$ref: '#/components/schemas/Node'}}\n";
    assert!(load(root.as_bytes(), "file:///r.yaml", &NoFiles).is_ok());
}

#[test]
fn documents_that_refer_to_each_other_load_once_each() {
    let files = Files::new(&[
        (
            "file:///a.yaml",
            "A: {type: object, properties: {b: {$ref: 'b.yaml#/B'}}}\n",
        ),
        (
            "file:///b.yaml",
            "B: {type: object, properties: {a: {$ref: 'a.yaml#/A'}}}\n",
        ),
    ]);
    let root = "openapi: 3.1.0\npaths: {}\ncomponents: {schemas: {A: {$ref: 'a.yaml#/A'}}}\n";
    load(root.as_bytes(), "file:///root.yaml", &files).unwrap();
    assert_eq!(files.reads(), vec!["file:///a.yaml", "file:///b.yaml"]);
}
