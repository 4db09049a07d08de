//! The evaluation crate's integration tests, one test binary: the demos end to end, the
//! Crazyflie sequence, the replay panel, the Git transfer study, the fuzz smoke run, the fast
//! envelope reader against serde_json, and the evaluation binary's command line.
//!
//! Flights in real time take [`common::exclusive`] so nothing else in this binary runs beside
//! them; the rest take [`common::shared`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests: every module of this test binary (clippy.toml's allow-*-in-tests covers only #[test] functions, not their helpers)"
)]

mod cli;
mod common;
mod crazyflie_sequence;
mod demo;
mod envelope_fast_path;
mod fuzz_smoke;
mod git_transfer;
mod px4_panels;
mod replay_panel;
