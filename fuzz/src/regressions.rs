//! Replays the checked-in regression inputs (`regressions/<target>/*`, inputs the fuzzers
//! once failed on, minimized) and the seed inputs (`seeds/<target>/*`) through the targets'
//! checks: a plain `cargo test`, no fuzzing engine needed.

use std::path::Path;

use crate::TARGETS;

fn replay(folder: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut replayed = 0;
    for (target, check) in TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).unwrap();
            eprintln!("{target}: {}", path.display());
            check(&bytes);
            replayed += 1;
        }
    }
    replayed
}

#[test]
fn regression_inputs_pass() {
    assert!(replay("regressions") > 0, "no regression inputs found");
}

#[test]
fn seed_inputs_pass() {
    assert!(replay("seeds") > 0, "no seed inputs found");
}
