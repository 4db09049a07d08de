//! Shared fixtures for the flight binary's integration tests: the core's (included from
//! `halo-core/tests/core/common`), the binary's processes ([`process`], shared with the
//! evaluation crate's tests), and the service's end-to-end fixtures.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures"
)]

#[path = "../../../../halo-core/tests/core/common/mod.rs"]
mod core_fixtures;
pub mod process;
pub mod service;

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use core_fixtures::*;
pub use process::{Spawned, exclusive, shared};

/// The flight binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_halo-gateway");

/// Runs the flight binary; returns the exit code and standard output and error.
pub fn halo(args: &[&str]) -> (i32, String) {
    process::run(BIN, args)
}
