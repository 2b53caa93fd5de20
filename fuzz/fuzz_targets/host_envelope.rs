//! libFuzzer entry point of the `host_envelope` target; the checks live in `manifold_fuzz::host_envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::host_envelope::check(data));
