//! Fuzz target `envelope`: see `halo_gateway::fuzzing::envelope` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_gateway::fuzzing::envelope(data);
});
