//! Fuzz target `gateway_config`: see `halo_eval::fuzzing::gateway_config` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::gateway_config(data);
});
