//! Fuzz target `last_event_id`: see `halo_eval::fuzzing::last_event_id` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::last_event_id(data);
});
