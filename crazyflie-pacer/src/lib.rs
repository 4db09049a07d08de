//! crazyflie-pacer: the sans-IO half of the gateway's Crazyflie bridge.
//!
//! [`pacer::Pacer`] is a pure state machine (time passed in, outputs polled): one setpoint slot
//! streamed at a fixed rate until shortly before the end of its certified interval, never a
//! queue of old setpoints; the firmware's safe-stop order; the supervisor's emergency-stop
//! watchdog refreshed while armed; the link declared down when telemetry stops. The tokio shell
//! on bitcraze's `crazyflie-lib` is `crazyflie-bridge`, which re-exports every module here
//! under its old path.
//!
//! This crate links no I/O runtime: the compiler keeps the machine pure. Its clock type is the
//! core's ([`time::Mono`] is [`halo_core::time::Nanos`]).
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod pacer;
pub mod setpoint;
pub mod telemetry;
pub mod time;

pub use pacer::{Config, EnqueueError, Event, HoldReason, InvalidConfig, Out, Pacer};
pub use setpoint::{Fingerprint, Setpoint};
pub use telemetry::{Telemetry, TelemetryUpdate};
pub use time::Mono;
