//! libFuzzer entry point of the `sse` target; the checks live in `manifold_fuzz::sse`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::sse::check(data));
