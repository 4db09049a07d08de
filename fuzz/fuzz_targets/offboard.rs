//! Fuzz target `offboard`: see `halo_eval::fuzzing::offboard` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = halo_eval::fuzzing::offboard(data);
});
