//! Fuzz target `client_identity`: see `halo_eval::fuzzing::client_identity` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::client_identity(data);
});
