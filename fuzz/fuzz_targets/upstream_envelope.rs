//! libFuzzer entry point of the `upstream_envelope` target; the checks live in `manifold_fuzz::upstream_envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::upstream_envelope::check(data));
