//! Fuzz target `tls_pem`: see `halo_eval::fuzzing::tls_pem` for what it feeds and asserts.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    halo_eval::fuzzing::tls_pem(data);
});
