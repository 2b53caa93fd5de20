//! libFuzzer entry point of the `config` target; the checks live in `manifold_fuzz::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::config::check(data));
