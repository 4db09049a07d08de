//! px4-bridge: the gateway's path to a real PX4, over MAVLink 2.
//!
//! The offboard logic is a pure state machine ([`offboard::Offboard`]): time is passed in,
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

pub mod command;
pub mod gcs;
pub mod mode;
pub mod offboard;
pub mod setpoint;
pub mod shell;
pub mod signing;
pub mod telemetry;
pub mod time;
pub mod timesync;
pub mod transport;
pub mod url;

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
