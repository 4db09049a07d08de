//! Fuzz target `receipt_lines`: see `halo_eval::fuzzing::receipt_lines` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::receipt_lines(data);
});
