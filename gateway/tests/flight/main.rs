//! The flight binary's integration tests, one test binary (each binary links the whole
//! gateway; one link instead of four): its command line, the service end to end, the faults
//! suite, and the vehicle sources' order.
//!
//! Suites that measure timing at the vehicle (the faults suite, the service's flights) take
//! [`common::exclusive`] so nothing else in this binary runs beside them; the rest take
//! [`common::shared`].

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests: every module of this test binary (clippy.toml's allow-*-in-tests covers only #[test] functions, not their helpers)"
)]

mod cli;
mod common;
mod console;
mod deploy;
mod docs_examples;
mod faults;
mod mcp;
mod network;
mod service;
mod supervisor_model;
mod supervisor_schedules;
mod vehicle_sources;
