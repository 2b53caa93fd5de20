//! libFuzzer entry point of the `canonical` target; the checks live in `manifold_fuzz::canonical`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::canonical::check(data));
