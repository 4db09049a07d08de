//! Fuzz target `service_bodies`: see `halo_eval::fuzzing::service_bodies` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::service_bodies(data);
});
