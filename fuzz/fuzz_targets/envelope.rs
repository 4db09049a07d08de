//! Fuzz target `envelope`: see `halo_eval::fuzzing::envelope` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::envelope(data);
});
