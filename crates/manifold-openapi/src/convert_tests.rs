use super::*;
use crate::filter::Filter;
use crate::testutil::doc;
use serde_json::json;

pub(crate) const PETS: &str = r#"
openapi: 3.0.3
servers: [{url: /v1}]
paths:
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: integer}}
      - {name: verbose, in: query, schema: {type: boolean}}
    get:
      operationId: showPetById
      summary: Info for a pet
      description: Everything known about one pet.
      tags: [pets]
      parameters:
        - {name: verbose, in: query, description: More detail, schema: {type: string, enum: [yes, no]}}
        - {name: petId, in: header, schema: {type: string}}
      responses:
        '200':
          description: ok
          content: {application/json: {schema: {$ref: '#/components/schemas/Pet'}}}
    delete:
      responses: {'204': {description: gone}}
  /pets:
    get:
      operationId: listPets
      responses:
        '200':
          content: {application/json: {schema: {type: array, items: {$ref: '#/components/schemas/Pet'}}}}
    post:
      operationId: createPet
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: '#/components/schemas/Pet'}}}
      responses: {'201': {description: made}}
    put:
      operationId: uploadXml
      requestBody: {content: {application/xml: {schema: {type: object}}}}
      responses: {'200': {description: ok}}
components:
  schemas:
    Pet:
      type: object
      required: [id, name]
      properties:
        id: {type: integer, readOnly: true}
        name: {type: string, nullable: true}
        password: {type: string, writeOnly: true}
        friends: {type: array, items: {$ref: '#/components/schemas/Pet'}}
"#;

fn tool(conversion: &Conversion, name: &str) -> Value {
    let op = conversion.tools.iter().find(|t| t.name == name).unwrap();
    serde_json::from_str(&op.tool).unwrap()
}

#[test]
fn a_get_operation_becomes_a_tool_with_merged_parameters_and_hints() {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    let t = tool(&c, "showPetById");
    assert_eq!(t["title"], "Info for a pet");
    assert_eq!(
        t["description"],
        "Info for a pet\n\nEverything known about one pet."
    );
    assert_eq!(
        t["annotations"],
        json!({"readOnlyHint": true, "openWorldHint": true})
    );
    let input = &t["inputSchema"];
    assert_eq!(input["required"], json!(["petId__path"]));
    assert_eq!(
        input["properties"]["petId__path"],
        json!({"type": "integer"})
    );
    assert_eq!(
        input["properties"]["petId__header"],
        json!({"type": "string"})
    );
    assert_eq!(
        input["properties"]["verbose"],
        json!({"type": "string", "enum": ["yes", "no"], "description": "More detail"})
    );
    let op = c.tools.iter().find(|t| t.name == "showPetById").unwrap();
    assert_eq!(op.server_url, "https://api.example.com/v1");
    assert_eq!(
        (op.method.as_str(), op.path.as_str()),
        ("GET", "/pets/{petId}")
    );
}

#[test]
fn shared_schemas_are_defs_once_and_recursion_stays_a_reference() {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    let input = tool(&c, "createPet")["inputSchema"].clone();
    assert_eq!(input["properties"]["body"], json!({"$ref": "#/$defs/Pet"}));
    assert_eq!(input["required"], json!(["body"]));
    let pet = &input["$defs"]["Pet"];
    assert_eq!(
        pet["properties"]["friends"]["items"],
        json!({"$ref": "#/$defs/Pet"})
    );
    assert_eq!(pet["properties"]["name"]["type"], json!(["string", "null"]));
    assert!(
        pet["properties"].get("id").is_none(),
        "readOnly left out of input"
    );
    assert_eq!(pet["required"], json!(["name"]));
    let output = tool(&c, "showPetById")["outputSchema"].clone();
    assert_eq!(output["$ref"], "#/$defs/Pet");
    assert!(
        output["$defs"]["Pet"]["properties"]
            .get("password")
            .is_none(),
        "writeOnly left out of output"
    );
    assert!(output["$defs"]["Pet"]["properties"].get("id").is_some());
}

#[test]
fn an_array_result_is_wrapped_in_an_object_schema() {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    let output = tool(&c, "listPets")["outputSchema"].clone();
    assert_eq!(output["type"], "object");
    assert_eq!(output["required"], json!(["result"]));
    assert_eq!(
        output["properties"]["result"]["items"],
        json!({"$ref": "#/$defs/Pet"})
    );
}

#[test]
fn unnamed_operations_use_method_and_path_and_unsupported_bodies_are_skipped() {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    let t = tool(&c, "delete_pets_petId");
    assert_eq!(
        t["annotations"],
        json!({"idempotentHint": true, "destructiveHint": true, "openWorldHint": true})
    );
    assert_eq!(t["description"], "DELETE /pets/{petId}");
    assert_eq!(
        c.skipped,
        vec![Skipped {
            operation: "PUT /pets (uploadXml)".into(),
            reason: "request body media types not supported: application/xml".into()
        }]
    );
}

#[test]
fn filters_and_renames_apply_and_skips_say_why() {
    let options = Options {
        include: vec![Filter::Path("/pets".into())],
        exclude: vec![Filter::Method("post".into())],
        renames: [("listPets".to_string(), "all_pets".to_string())].into(),
        base_url: Some("http://127.0.0.1:4010".into()),
        ..Options::default()
    };
    let c = convert(&doc(PETS), &options).unwrap();
    let names: Vec<&str> = c.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["all_pets"]);
    assert_eq!(c.tools[0].server_url, "http://127.0.0.1:4010");
    let reasons: Vec<String> = c
        .skipped
        .iter()
        .map(|s| format!("{}: {}", s.operation, s.reason))
        .collect();
    assert!(
        reasons.contains(&"POST /pets (createPet): excluded by \"method:post\"".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"GET /pets/{petId} (showPetById): not matched by `include`".to_string()),
        "{reasons:?}"
    );
    let bad = Options {
        renames: [("listPets".to_string(), "all pets".to_string())].into(),
        ..Options::default()
    };
    assert!(matches!(
        convert(&doc(PETS), &bad),
        Err(ConvertError::BadRename { .. })
    ));
}

#[test]
fn duplicate_operation_ids_after_sanitizing_are_an_error_naming_both() {
    let d = doc("openapi: 3.1.0\npaths:\n  /a: {get: {operationId: 'get.item', responses: {}}}\n  /b: {get: {operationId: 'get item', responses: {}}}\n");
    let err = convert(&d, &Options::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "operations GET /a (get.item) and GET /b (get item) both become the tool `get_item`"
    );
}

#[test]
fn long_operation_ids_sharing_a_head_stay_distinct_tools() {
    // GitHub's description has two operationIds that agree on their first 64 characters
    // (the PATCH and PUT of an organization's custom property definitions).
    let head = "orgs/custom-properties-for-repos-create-or-update-organization-";
    let d = doc(&format!(
        "openapi: 3.0.3\npaths:\n  /a: {{patch: {{operationId: '{head}definitions', responses: {{}}}}}}\n  /b: {{put: {{operationId: '{head}definition', responses: {{}}}}}}\n"
    ));
    let conversion = convert(&d, &Options::default()).unwrap();
    let names: Vec<&str> = conversion.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1]);
    for name in names {
        assert_eq!(name.len(), 64, "{name}");
        assert!(
            name.starts_with("orgs_custom-properties-for-repos-create-or-"),
            "{name}"
        );
    }
}

#[test]
fn descriptions_are_bounded_and_caps_skip_with_a_reason() {
    let long = "é".repeat(2000);
    let d = doc(&format!("openapi: 3.1.0\npaths:\n  /a: {{get: {{summary: '{long}', responses: {{}}}}}}\n  /b: {{get: {{responses: {{}}}}}}\n"));
    let c = convert(
        &d,
        &Options {
            max_tools: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let text = tool(&c, "get_a")["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(text.chars().count(), 1024);
    assert!(text.ends_with('…'));
    assert_eq!(c.skipped[0].reason, "over the cap of 1 tools");
    let c = convert(
        &d,
        &Options {
            max_schema_bytes: 100,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(
        c.skipped[0].reason.contains("over the cap of 100"),
        "{:?}",
        c.skipped
    );
}

#[test]
fn relative_servers_resolve_against_the_description_url_with_variable_defaults() {
    let d = doc("openapi: 3.0.0\nservers: [{url: 'https://{region}.example.com/api', variables: {region: {default: eu}}}]\npaths:\n  /a:\n    servers: [{url: ../other}]\n    get: {responses: {}}\n  /b: {get: {responses: {}}}\n");
    let c = convert(&d, &Options::default()).unwrap();
    assert_eq!(c.tools[0].server_url, "https://api.example.com/other");
    assert_eq!(c.tools[1].server_url, "https://eu.example.com/api");
}

#[test]
fn a_shared_object_output_schema_says_type_object_beside_its_ref() {
    let c = convert(&doc(PETS), &Options::default()).unwrap();
    let output = tool(&c, "showPetById")["outputSchema"].clone();
    assert_eq!(output["type"], "object", "{output}");
    assert_eq!(output["$ref"], "#/$defs/Pet", "{output}");
    assert_eq!(output["$defs"]["Pet"]["type"], "object", "{output}");
}
