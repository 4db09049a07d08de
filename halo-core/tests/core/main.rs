//! The core's test binary: every conformance suite of the protocol core and the mission
//! contract, one module each (one binary links the crate once; `cargo test -p halo-core --test
//! core MODULE` runs one suite).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

mod common;

mod admission_oracle;
mod contract_audit;
mod contract_explorer;
mod contract_pairs;
mod contract_protocol;
mod contract_scale;
mod graph_oracle;
mod mechanisms;
mod model_check;
mod protocol_cases;
mod receipt_policy;
mod running_example;
mod schedules;
