//! The crates' layering, checked: the core knows no HTTP server, no TLS and no Redis; the HTTP
//! transport knows no Redis. The stores replicas share reach both only through the core's
//! traits (`manifold_core::replicas`), implemented in `manifold-redis`.

use std::path::Path;

/// The names of the normal dependencies `crate_dir`'s `Cargo.toml` declares (any
/// `[dependencies]` or `[target.*.dependencies]` table; not dev- or build-dependencies).
fn dependencies(crate_dir: &str) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", manifest.display()));
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if let Some(table) = line.strip_prefix('[') {
            let table = table.trim_end_matches(']');
            inside = table == "dependencies" || table.ends_with(".dependencies");
            if let Some(name) = table.strip_prefix("dependencies.") {
                names.push(name.to_owned());
                inside = false;
            }
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line.split(['=', '.']).next().unwrap_or_default().trim();
        names.push(name.trim_matches('"').to_owned());
    }
    names
}

fn breaches(crate_dir: &str, forbidden: &[&str]) -> Vec<String> {
    dependencies(crate_dir)
        .into_iter()
        .filter(|d| forbidden.contains(&d.as_str()))
        .collect()
}

#[test]
fn the_core_knows_no_http_server_tls_or_redis() {
    let deps = dependencies("manifold-core");
    assert!(deps.iter().any(|d| d == "manifold-policy"), "{deps:?}");
    let found = breaches(
        "manifold-core",
        &["actix-web", "actix-tls", "rustls", "redis"],
    );
    assert!(found.is_empty(), "manifold-core depends on {found:?}");
}

#[test]
fn the_http_transport_knows_no_redis() {
    let deps = dependencies("manifold-http");
    assert!(deps.iter().any(|d| d == "actix-web"), "{deps:?}");
    let found = breaches("manifold-http", &["redis"]);
    assert!(found.is_empty(), "manifold-http depends on {found:?}");
}

#[test]
fn the_policy_crate_knows_no_redis() {
    let found = breaches("manifold-policy", &["redis"]);
    assert!(found.is_empty(), "manifold-policy depends on {found:?}");
}
