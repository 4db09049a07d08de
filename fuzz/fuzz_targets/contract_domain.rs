//! Fuzz target `contract_domain`: see `halo_eval::fuzzing::contract_domain` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::contract_domain(data);
});
