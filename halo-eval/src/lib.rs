//! halo-eval: the evaluation of halo-gateway, apart from the product it judges.
//!
//! The flight binary (`halo-gateway`, package `halo-gateway`) links no simulator and no oracle:
//! what a companion computer installs decides and dispatches, nothing else. Everything that
//! *measures* it lives here, with the simulated vehicles and the independent oracles of `sitl`:
//!
//! - [`embedded`]: the simulated PX4 (loopback UDP, a port pair of its own) and the simulated
//!   Crazyflie (an in-process link for bitcraze's crazyflie-lib) that `halo-eval run` and the
//!   demos fly the real service on;
//! - [`demo`], [`cf_sequence`]: the running example on the simulated PX4 and the Crazyflie
//!   sequence on the simulated Crazyflie, each through the service's own HTTP interfaces;
//! - [`replay`]: the replay panel over recorded agent responses, through every mechanism
//!   variant, judged by `sitl`'s independent oracle;
//! - [`px4_panels`], [`px4_profiles`], [`recovery_routes`], [`px4_mechanisms`]: the PX4 panels
//!   through the running service (deny-hold and latency, the support profiles, the recovery
//!   routes, the mechanism variants), against the simulated PX4 or a real one, with
//!   [`plots`] drawing each one's picture;
//! - [`transfer`]: the Git-merge transfer study (the core outside flight);
//! - [`fuzzing`]: the entry points the libFuzzer targets in `fuzz/` and the stable smoke run
//!   call.
//!
//! The binary `halo-eval` (its [`cli`]) offers `run`, `demo`, `replay`, `check --variant`,
//! `contract audit` and the four PX4 panels; docs/run.md says which binary provides each
//! command.
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

// The gateway's rooms under the names the evaluation code has always used.
use halo_gateway::{audit, io, service};

pub mod cf_sequence;
pub mod cli;
pub mod demo;
pub mod embedded;
pub mod fuzzing;
pub mod plots;
pub mod px4_mechanisms;
pub mod px4_panels;
pub mod px4_profiles;
pub mod recovery_routes;
pub mod replay;
pub mod transfer;
