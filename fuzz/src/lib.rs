//! The properties Manifold's fuzz targets check, one module per target. Each module's
//! `check` takes the fuzzer's bytes and panics when a property fails; the libFuzzer entry
//! points under `fuzz_targets/` only call it, and the regression corpus under `regressions/`
//! is replayed through the same functions by `cargo test`, with no fuzzing engine.
//!
//! Every target asserts more than "no panic" where the code under test promises more:
//! decoders agree with an independent reading of the same bytes (serde_json, a reference
//! parser written from the standard, a model of the framing), incremental parsers give the
//! same result however the input is split, and mappings round-trip.
#![forbid(unsafe_code)]

pub mod canonical;
pub mod config;
pub mod host_envelope;
mod json;
pub mod line_buffer;
pub mod names;
pub mod sse;
pub mod upstream_envelope;
pub mod uris;

mod input;

/// A target's checks: panics when a property fails on the input.
pub type Check = fn(&[u8]);

/// Every target by name, for the regression replay.
pub const TARGETS: [(&str, Check); 8] = [
    ("host_envelope", host_envelope::check),
    ("upstream_envelope", upstream_envelope::check),
    ("sse", sse::check),
    ("line_buffer", line_buffer::check),
    ("config", config::check),
    ("names", names::check),
    ("uris", uris::check),
    ("canonical", canonical::check),
];

#[cfg(test)]
mod regressions;
