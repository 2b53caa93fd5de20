//! libFuzzer entry point of the `names` target; the checks live in `manifold_fuzz::names`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::names::check(data));
