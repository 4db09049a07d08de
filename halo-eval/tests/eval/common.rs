//! Shared fixtures for the evaluation crate's tests: the core's (included from
//! `halo-core/tests/core/common`) and the binaries' processes (included from the flight
//! binary's tests), run on `halo-eval`, which takes every flight command too.
#![allow(dead_code, reason = "each test uses a different subset")]

#[path = "../../../halo-core/tests/core/common/mod.rs"]
mod core_fixtures;
#[path = "../../../gateway/tests/flight/common/process.rs"]
pub mod process;

#[allow(unused_imports, reason = "each test uses a different subset")]
pub use core_fixtures::*;
pub use process::{Spawned, exclusive, shared};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_halo-eval");

/// Runs `halo-eval` (any flight command too); returns the exit code and standard output and
/// error.
pub fn halo(args: &[&str]) -> (i32, String) {
    process::run(BIN, args)
}
