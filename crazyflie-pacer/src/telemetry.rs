//! Telemetry from the Crazyflie's log blocks, timestamped on the companion's clock.

use serde::Serialize;

use crate::time::Mono;

/// `supervisor.info` bits (the firmware's supervisor state).
pub mod sup {
    /// Can be armed.
    pub const CAN_BE_ARMED: u16 = 1 << 0;
    /// Armed.
    pub const IS_ARMED: u16 = 1 << 1;
    /// Can fly.
    pub const CAN_FLY: u16 = 1 << 3;
    /// Flying.
    pub const IS_FLYING: u16 = 1 << 4;
    /// Tumbled.
    pub const IS_TUMBLED: u16 = 1 << 5;
    /// Locked until reboot.
    pub const IS_LOCKED: u16 = 1 << 6;
    /// Crashed.
    pub const IS_CRASHED: u16 = 1 << 7;
}

/// `pm.state` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    /// On battery.
    Battery,
    /// Charging.
    Charging,
    /// Charged.
    Charged,
    /// Low power: land now.
    LowPower,
    /// Shutting down.
    Shutdown,
    /// A value the firmware documents no meaning for.
    Unknown,
}

impl PowerState {
    /// From `pm.state`.
    pub fn from_raw(v: i8) -> PowerState {
        match v {
            0 => PowerState::Battery,
            1 => PowerState::Charging,
            2 => PowerState::Charged,
            3 => PowerState::LowPower,
            4 => PowerState::Shutdown,
            _ => PowerState::Unknown,
        }
    }
}

/// One telemetry sample.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Telemetry {
    /// `stateEstimate.x/y/z/vx/vy/vz`: the estimator's position (m) and velocity (m/s).
    State {
        /// Position x, y, z, m.
        position_m: [f32; 3],
        /// Velocity, m/s.
        velocity_mps: [f32; 3],
    },
    /// `stateEstimate.yaw`, degrees.
    Yaw {
        /// Degrees, counter-clockwise.
        yaw_deg: f32,
    },
    /// `range.zrange` (mm on the wire), the downward range; `None` when out of range.
    Range {
        /// Metres.
        z_range_m: Option<f32>,
    },
    /// `pm.vbat`, `pm.state`.
    Power {
        /// Battery voltage, V.
        vbat_v: f32,
        /// Power state.
        state: PowerState,
    },
    /// `supervisor.info`.
    Supervisor {
        /// The bits ([`sup`]).
        bits: u16,
    },
    /// A ping's round trip.
    Ping {
        /// Round trip, ms.
        latency_ms: f64,
    },
    /// The radio's link statistics (Crazyradio only; `None` over USB). Reported, not used to
    /// judge the link: the ACK ratio says little about latency.
    LinkStats {
        /// Average retries per acknowledged packet.
        avg_retries: Option<f32>,
        /// Average RSSI of the acknowledgements, dBm.
        rssi_dbm: Option<f32>,
        /// Data packets sent per second.
        uplink_rate: Option<f32>,
    },
}

/// A sample with its time on the companion's monotonic clock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TelemetryUpdate {
    /// When it was taken, at the latest (the arrival time; the radio adds a few ms).
    pub generated_at: Mono,
    /// How much earlier it may have been taken, ns (the newest ping round trip plus the log
    /// period): consumers that fail closed subtract this.
    pub uncertainty_ns: u64,
    /// The sample.
    pub data: Telemetry,
}

/// The largest reading the Flow deck's VL53L1x reports as a distance, mm; larger values mean
/// nothing in range.
pub const ZRANGE_MAX_MM: u16 = 4000;

/// `range.zrange` in metres, `None` out of range.
pub fn z_range_m(mm: u16) -> Option<f32> {
    (mm <= ZRANGE_MAX_MM).then(|| f32::from(mm) / 1000.0)
}
