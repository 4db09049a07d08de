//! Fuzz target `contract_workflow`: see `halo_eval::fuzzing::contract_workflow` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::contract_workflow(data);
});
