//! Fuzz target `state_file`: see `halo_eval::fuzzing::state_file` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::state_file(data);
});
