//! libFuzzer entry point of the `line_buffer` target; the checks live in `manifold_fuzz::line_buffer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifold_fuzz::line_buffer::check(data));
