//! Fuzz target `catalog`: see `halo_eval::fuzzing::catalog_text` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::catalog_text(data);
});
