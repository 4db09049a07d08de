//! px4-bridge: the gateway's path to a real PX4, over MAVLink 2.
//!
//! The offboard logic is a pure state machine ([`offboard::Offboard`], in the `px4-offboard`
//! crate, which links no I/O runtime): time is passed in,
//! received messages are fed in, and messages to send and events come out as values. The tokio
//! shell ([`shell`]) only moves bytes: it opens the transport by URL (`udpin:`, `udpout:`,
//! `tcpout:`, `serial:DEV:BAUD`) through the `mavlink` crate's `connect_async`, runs the state
//! machine, and gives the gateway a [`shell::BridgeHandle`] whose `try_enqueue` never blocks.
//!
//! The bridge knows nothing of HALO: it takes an exact setpoint with an opaque binding id and
//! the end of its certified interval, streams it until then (never after), holds, and reports
//! telemetry with generation times mapped through TIMESYNC.
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod gcs;
pub mod shell;
pub mod signing;
pub mod transport;
pub mod url;

// The sans-IO half, under the paths it had when it lived here.
pub use px4_offboard::{command, mode, offboard, setpoint, telemetry, time, timesync};

pub use command::{Command, CommandId, CommandOutcome};
pub use mode::Px4Mode;
pub use offboard::{
    Config, EnqueueError, Event, HoldKind, HoldPolicy, HoldReason, Offboard, STATUSTEXT_LEN, Stats,
    StatusTextError,
};
pub use px4_offboard::mavlink;
pub use setpoint::{Fingerprint, Setpoint, TYPE_MASK_POSITION_YAW};
pub use telemetry::{LandedState, Telemetry, TelemetryUpdate, TimeSource};
pub use time::Mono;
