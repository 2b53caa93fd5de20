use std::path::PathBuf;
use std::time::Duration;

use crate::tests::{toml, toml_err};
use crate::{OpenApiConfig, OpenApiSource, OperationFilter, Transport};

fn openapi(text: &str) -> OpenApiConfig {
    let config = toml(text).unwrap_or_else(|e| panic!("{e}"));
    match &config.upstreams[0].transport {
        Transport::OpenApi(cfg) => cfg.clone(),
        other => panic!("not an OpenAPI upstream: {other:?}"),
    }
}

#[test]
fn a_relative_description_path_is_read_beside_the_config() {
    let cfg = openapi("[upstreams.pets]\nopenapi = \"specs/pets.yaml\"\n");
    let want = PathBuf::from("/etc/manifold/specs/pets.yaml");
    assert_eq!(cfg.source, OpenApiSource::File(want));
    assert_eq!(cfg.timeout, Duration::from_secs(30));
    assert_eq!(cfg.max_response_bytes, 1024 * 1024);
}

#[test]
fn every_key_of_an_openapi_upstream_is_read() {
    let cfg = openapi(
        r#"[upstreams.pets]
openapi = "https://example.com/openapi.json"
base_url = "https://api.example.com/v1"
include = ["tag:pets", "method:GET", "path:/pets/**"]
exclude = ["operationId:deletePet"]
renames = { listPets = "pets_list" }
timeout = "5s"
max_response_bytes = 4096
headers = { "X-Api-Key" = "k" }
"#,
    );
    assert_eq!(
        cfg.source,
        OpenApiSource::Url("https://example.com/openapi.json".into())
    );
    assert_eq!(cfg.base_url.as_deref(), Some("https://api.example.com/v1"));
    assert_eq!(
        cfg.include,
        vec![
            OperationFilter::Tag("pets".into()),
            OperationFilter::Method("GET".into()),
            OperationFilter::Path("/pets/**".into()),
        ]
    );
    assert_eq!(
        cfg.exclude,
        vec![OperationFilter::OperationId("deletePet".into())]
    );
    assert_eq!(cfg.renames["listPets"], "pets_list");
    assert_eq!(cfg.timeout, Duration::from_secs(5));
    assert_eq!(cfg.max_response_bytes, 4096);
    assert_eq!(cfg.headers["X-Api-Key"], "k");
    assert!(!format!("{cfg:?}").contains("\"k\""));
}

#[test]
fn openapi_is_exclusive_with_command_and_url() {
    let (key, problem) = toml_err("[upstreams.p]\nopenapi = \"a.json\"\ncommand = \"x\"\n");
    assert_eq!(key, "upstreams.p");
    assert!(problem.contains("`openapi`"), "{problem}");
    let (key, _) = toml_err("[upstreams.p]\nopenapi = \"a.json\"\nurl = \"http://h/\"\n");
    assert_eq!(key, "upstreams.p");
}

#[test]
fn a_malformed_filter_or_a_key_of_another_kind_is_an_error() {
    let (key, problem) = toml_err("[upstreams.p]\nopenapi = \"a.json\"\ninclude = [\"pets\"]\n");
    assert_eq!(key, "upstreams.p.include");
    assert!(problem.contains("operationId:ID"), "{problem}");
    let (key, _) = toml_err("[upstreams.p]\nopenapi = \"a.json\"\nargs = [\"x\"]\n");
    assert_eq!(key, "upstreams.p.args");
    let (key, problem) = toml_err("[upstreams.p]\ncommand = \"x\"\nbase_url = \"http://h\"\n");
    assert_eq!(key, "upstreams.p.base_url");
    assert!(problem.contains("OpenAPI"), "{problem}");
    let (key, _) = toml_err("[upstreams.p]\nopenapi = \"a.json\"\nbase_url = \"ftp://h\"\n");
    assert_eq!(key, "upstreams.p.base_url");
}
