//! halo-gateway: the runtime between an LLM agent and a flight controller.
//!
//! The agent returns structured responses: notices, sensor reports, refresh requests, flight
//! actions and status messages, with declared prerequisites. Conditions drift while it thinks.
//! The gateway keeps the greatest set of components that are still supported and whose
//! prerequisites are kept, rechecks each exact action at a final dispatch gate that spends a
//! one-use token right before the adapter publishes a setpoint, and lets a blocked action return
//! only as a fresh candidate.
//!
//! # Model
//!
//! ```text
//! response ─▶ validate ─▶ digest ─▶ LocalOK per footprint ─▶ A*_t ─▶ bindings + tokens
//! state events ─▶ re-evaluate only the affected footprints and their dependents
//! ready non-action ─▶ emit          ready action ─▶ final gate ─▶ adapter.try_enqueue
//! denial ─▶ obligation (recoverable) or end (terminal) ─▶ fresh candidate ─▶ admission
//! every decision ─▶ hash-linked receipt
//! ```
//!
//! The protocol core (the `halo-core` crate, [`halo_core`]) is sans-IO and deterministic: time is
//! passed in, inputs are values, outputs are polled. See [`halo_core::engine`] for the call order.
//! Around it:
//!
//! - the supervisor (the `halo-supervisor` crate, [`halo_supervisor`]): the shell's safety decisions (deny-hold, control and overrides, the
//!   operator hold, operator commands and their deadlines, arrival, the receipt log's failure,
//!   the shutdown), sans-IO too, with time passed in;
//! - [`vehicle`]: the bridges as the gate's adapter (closed while the supervisor says so; the
//!   gate's enqueue staged until its receipt is written) and their telemetry as vehicle sources;
//! - [`service`]: `halo-gateway run` — the HTTP interfaces, the service task that owns the core
//!   and the supervisor and carries out what they decide, the receipt log;
//! - [`cli`], [`audit`], [`io`]: the command line, the receipt log's tools, file reading;
//!   [`error`]: the shell's typed errors.
//!
//! This crate links no simulator and no judge: those are the evaluation crate's (`halo-eval`)
//! and `sitl`'s.
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod audit;
pub mod cli;
pub mod error;
pub mod io;
pub mod service;
pub mod vehicle;
