//! Telemetry as timestamped updates for the gateway's state.
//!
//! Each update carries its *generation* time on the companion's clock: the autopilot's
//! `time_boot_ms` mapped through TIMESYNC when the message has one and the offset is known,
//! otherwise the arrival time, and the update says which.

use serde::{Deserialize, Serialize};

use crate::mode::Px4Mode;
use crate::setpoint::Fingerprint;
use crate::time::Mono;

/// Where an update's generation time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeSource {
    /// The autopilot's own timestamp, mapped through TIMESYNC.
    Mapped,
    /// Arrival time: the message has no timestamp, or the autopilot does not answer TIMESYNC.
    Arrival,
}

/// Landed state from `EXTENDED_SYS_STATE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandedState {
    /// Unknown.
    Undefined,
    /// On the ground.
    OnGround,
    /// Flying.
    InAir,
    /// Taking off.
    Takeoff,
    /// Landing.
    Landing,
}

/// One decoded telemetry value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Telemetry {
    /// `HEARTBEAT` from the autopilot.
    Heartbeat {
        /// Armed.
        armed: bool,
        /// PX4 mode.
        mode: Px4Mode,
        /// `MAV_STATE`.
        system_status: u8,
    },
    /// `LOCAL_POSITION_NED`.
    LocalPosition {
        /// North, m.
        north_m: f32,
        /// East, m.
        east_m: f32,
        /// Down, m.
        down_m: f32,
        /// Velocity north, m/s.
        vn: f32,
        /// Velocity east, m/s.
        ve: f32,
        /// Velocity down, m/s.
        vd: f32,
    },
    /// `GLOBAL_POSITION_INT`.
    GlobalPosition {
        /// Latitude, degrees.
        lat_deg: f64,
        /// Longitude, degrees.
        lon_deg: f64,
        /// Altitude AMSL, m.
        alt_m: f32,
        /// Altitude above home, m.
        relative_alt_m: f32,
    },
    /// `ATTITUDE`.
    Attitude {
        /// Roll, rad.
        roll: f32,
        /// Pitch, rad.
        pitch: f32,
        /// Yaw, rad.
        yaw: f32,
    },
    /// `BATTERY_STATUS` or `SYS_STATUS`.
    Battery {
        /// Remaining, percent, when reported.
        remaining_pct: Option<f32>,
        /// Voltage, V, when reported.
        voltage_v: Option<f32>,
    },
    /// `HOME_POSITION`: the launch point PX4 returns to, in its local frame and globally.
    Home {
        /// North of the local origin, m.
        north_m: f32,
        /// East, m.
        east_m: f32,
        /// Down, m.
        down_m: f32,
        /// Latitude, degrees.
        lat_deg: f64,
        /// Longitude, degrees.
        lon_deg: f64,
        /// Altitude AMSL, m.
        alt_m: f32,
    },
    /// `GPS_GLOBAL_ORIGIN`: the EKF's local-frame origin (not the same as home).
    Origin {
        /// Latitude, degrees.
        lat_deg: f64,
        /// Longitude, degrees.
        lon_deg: f64,
        /// Altitude AMSL, m.
        alt_m: f32,
    },
    /// `EXTENDED_SYS_STATE`.
    Landed {
        /// Landed state.
        state: LandedState,
    },
    /// `POSITION_TARGET_LOCAL_NED`: the autopilot's echo of its active target.
    PositionTarget {
        /// North, m (NaN when unset).
        north_m: f32,
        /// East, m.
        east_m: f32,
        /// Down, m.
        down_m: f32,
        /// Yaw, degrees.
        yaw_deg: f32,
        /// Type mask as sent.
        type_mask: u16,
        /// `MAV_FRAME`.
        frame: u8,
        /// Fingerprint when the position is set.
        fingerprint: Option<Fingerprint>,
    },
}

/// A telemetry value with its times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TelemetryUpdate {
    /// Generation time on the companion clock.
    pub generated_at: Mono,
    /// Arrival time on the companion clock.
    pub received_at: Mono,
    /// How `generated_at` was obtained.
    pub time_source: TimeSource,
    /// How far `generated_at` may be off for a mapped time (the TIMESYNC fit's uncertainty),
    /// ns; 0 for arrival time. A consumer that must fail closed treats the sample as this much
    /// older.
    pub uncertainty_ns: u64,
    /// The value.
    pub data: Telemetry,
}
