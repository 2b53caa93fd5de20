//! Runs the load tool briefly against the debug binaries to prove it works. It asserts the
//! shape and sanity of the output, never a timing threshold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_load_tool_measures_direct_and_through() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_manifold-load"))
        .parent()
        .unwrap()
        .to_path_buf();
    let (manifold, fixture) = (bin_dir.join("manifold"), bin_dir.join("manifold-fixture"));
    assert!(
        manifold.exists() && fixture.exists(),
        "build the workspace first (cargo build --workspace): {} / {}",
        manifold.display(),
        fixture.display()
    );
    let out = std::env::temp_dir().join(format!("manifold-load-smoke-{}.json", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_manifold-load"))
        .args(["latency", "--quick", "--out", out.to_str().unwrap()])
        .args([
            "--manifold",
            manifold.to_str().unwrap(),
            "--fixture",
            fixture.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out);
    let lat = &doc["scenarios"]["latency"];
    assert_eq!(lat["rounds"], 2);
    for side in ["direct", "through"] {
        for p in ["p50_us", "p90_us", "p99_us", "max_us"] {
            let v = lat[side][p]
                .as_f64()
                .unwrap_or_else(|| panic!("{side}.{p} missing: {lat}"));
            assert!(v > 0.0, "{side}.{p} = {v}");
        }
        assert!(lat[side]["p50_us"].as_f64() <= lat[side]["max_us"].as_f64());
    }
    assert!(doc["machine"]["nproc"].as_u64().unwrap() >= 1);
}
