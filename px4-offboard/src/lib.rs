//! px4-offboard: the sans-IO half of the gateway's PX4 bridge.
//!
//! [`offboard::Offboard`] is a pure state machine: time is passed in, received MAVLink messages
//! are fed in, and messages to send and events come out as values. It takes an exact setpoint
//! with an opaque binding id and the end of its certified interval, streams it until then
//! (never after), holds, and reports telemetry with generation times mapped through TIMESYNC
//! ([`timesync`]). The tokio shell that opens transports and moves the bytes is `px4-bridge`,
//! which re-exports every module here under its old path.
//!
//! This crate links no I/O runtime: the compiler keeps the machine pure. Its clock type is the
//! core's ([`time::Mono`] is [`halo_core::time::Nanos`]).
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod command;
pub mod mode;
pub mod offboard;
pub mod setpoint;
pub mod telemetry;
pub mod time;
pub mod timesync;

pub use command::{Command, CommandId, CommandOutcome};
pub use mavlink;
pub use mode::Px4Mode;
pub use offboard::{
    Config, EnqueueError, Event, HoldKind, HoldPolicy, HoldReason, Offboard, STATUSTEXT_LEN, Stats,
    StatusTextError,
};
pub use setpoint::{Fingerprint, Setpoint, TYPE_MASK_POSITION_YAW};
pub use telemetry::{LandedState, Telemetry, TelemetryUpdate, TimeSource};
pub use time::Mono;
