//! crazyflie-bridge: the gateway's path to a Crazyflie 2.1 over a Crazyradio (or USB), on
//! bitcraze's `crazyflie-lib`.
//!
//! Two layers, as in the PX4 bridge:
//!
//! - [`pacer::Pacer`], a pure state machine (time passed in, outputs polled; in the
//!   `crazyflie-pacer` crate, which links no I/O runtime): one setpoint slot
//!   streamed at a fixed rate until shortly before the end of its certified interval, never a
//!   queue of old setpoints; the firmware's safe-stop order (stop streaming, notify-setpoint-stop,
//!   a high-level go_to or land, all in one step, well inside the commander watchdog's 500 ms);
//!   the supervisor's emergency-stop watchdog refreshed while armed; the link declared down when
//!   telemetry stops.
//! - [`shell`], the tokio side: connects by URI (`radio://0/80/2M/E7E7E7E7E7`, `usb://0`) with a
//!   timeout around the whole connect and a persistent TOC cache, contains the library's panic
//!   on a machine without USB (a typed "no radio" error), reads telemetry from log blocks,
//!   measures the link by ping latency, reconnects with back-off, and gives the gateway a
//!   [`shell::CfHandle`] whose `try_enqueue` never blocks.
//!
//! The bridge knows nothing of HALO: it takes an exact setpoint with an opaque binding id and the
//! end of its certified interval.
//!
//! Frame: the Crazyflie's world frame, x forward, y left, z up, metres; yaw in degrees,
//! counter-clockwise. The gateway's local NED maps to it as x = north, y = −east, z = −down,
//! yaw = −yaw_ned ([`Setpoint::from_ned`]).
//!
//! # Features
//!
//! This crate has no optional features.

#![warn(missing_docs, unreachable_pub)]

pub mod shell;
pub mod toc_cache;
pub mod uri;

// The sans-IO half, under the paths it had when it lived here.
pub use crazyflie_pacer::{pacer, setpoint, telemetry, time};

pub use pacer::{Config, EnqueueError, Event, HoldReason, Out, Pacer};
pub use setpoint::{Fingerprint, Setpoint};
pub use telemetry::{Telemetry, TelemetryUpdate};
pub use time::Mono;
