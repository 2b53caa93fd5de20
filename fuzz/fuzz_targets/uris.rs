//! libFuzzer entry point of the `uris` target; the checks live in `manifold_fuzz::uris`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::uris::check(data));
