//! A simulated Crazyflie 2.1, sans-IO, speaking CRTP as the firmware does, and a
//! [`crazyflie_link::ConnectionTrait`] link ([`SimLink`]) so bitcraze's `crazyflie-lib` runs
//! unchanged against it.
//!
//! # What it answers
//!
//! The connect handshake (platform protocol version, firmware version), the log and parameter
//! tables of contents, log-block control (reset, create, append, start, stop, delete) and the
//! blocks' data at their periods, the memory count (none), link echo.
//!
//! # What it decodes, per the firmware's packet layouts
//!
//! - generic commander (port 7, channel 0): stop (type 0), position (7), velocity in the world
//!   frame (8), hover (10); channel 1 meta command 0, notify-setpoint-stop;
//! - the legacy roll/pitch/yaw-rate/thrust commander (port 3);
//! - high-level commander (port 8): takeoff (7), land (8), stop (3), go_to (12), set group mask
//!   (0);
//! - supervisor (port 9, channel 1): arm/disarm (1), crash recovery (2), emergency stop (3),
//!   emergency-stop watchdog (4).
//!
//! Anything else is counted in [`CfSim::unknown_packets`] and otherwise ignored.
//!
//! # The firmware behaviour it models
//!
//! - Priority: any streamed setpoint stops the high-level planner and blocks it until a
//!   notify-setpoint-stop; a high-level command while blocked is ignored (counted).
//! - The commander watchdog: 500 ms after the last streamed setpoint (or after the time a
//!   notify-setpoint-stop said it stays valid) the vehicle is levelled (it stops tracking and
//!   sinks slowly); after 2 s the motors are cut and the supervisor latches Locked until reboot.
//! - The supervisor's emergency-stop watchdog: once refreshed, a gap over 1000 ms cuts the motors
//!   and latches Locked.
//! - Arming: setpoints move the vehicle only while armed and not locked.
//!
//! Every setpoint the controller applies is recorded ([`CfSetpointRecord`]), with the rounded
//! fingerprint written here independently of the bridge, so tests count what the vehicle took.
//!
//! Frame: x forward, y left, z up (the Crazyflie's world frame), metres; yaw in degrees,
//! counter-clockwise from x.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crazyflie_link::{ConnectionStatus, ConnectionTrait, Packet, RadioLinkStatistics};
use serde::Serialize;
use tokio::sync::{Notify, mpsc};

/// CRTP ports the simulator answers.
pub mod port {
    /// Console.
    pub const CONSOLE: u8 = 0;
    /// Parameters.
    pub const PARAM: u8 = 2;
    /// Legacy commander (roll, pitch, yaw rate, thrust).
    pub const COMMANDER: u8 = 3;
    /// Memory.
    pub const MEMORY: u8 = 4;
    /// Log.
    pub const LOG: u8 = 5;
    /// Generic commander.
    pub const GENERIC_SETPOINT: u8 = 7;
    /// High-level commander.
    pub const HL_COMMANDER: u8 = 8;
    /// Supervisor.
    pub const SUPERVISOR: u8 = 9;
    /// Platform.
    pub const PLATFORM: u8 = 13;
    /// Link layer (echo).
    pub const LINK: u8 = 15;
}

/// The CRTP protocol version the simulator reports (crazyflie-lib 0.8 accepts 12 and 13).
pub const PROTOCOL_VERSION: u8 = 12;
/// The commander watchdog: levelled after this long without a setpoint, ms.
pub const WDT_STABILIZE_MS: u64 = 500;
/// The commander watchdog: motors cut and Locked after this long, ms.
pub const WDT_SHUTDOWN_MS: u64 = 2000;
/// The supervisor's emergency-stop watchdog, ms.
pub const ESTOP_WATCHDOG_MS: u64 = 1000;
/// Largest log block payload (a CRTP packet's 30 data bytes less the block id and the 3-byte
/// timestamp), bytes.
pub const LOG_BLOCK_MAX: usize = 26;

/// Log variable types, as the firmware numbers them.
mod log_type {
    pub(super) const U8: u8 = 1;
    pub(super) const U16: u8 = 2;
    pub(super) const I8: u8 = 4;
    pub(super) const F32: u8 = 7;
}

/// The log table of contents: name and firmware type. The ids are the indices.
const LOG_TOC: &[(&str, &str, u8)] = &[
    ("stateEstimate", "x", log_type::F32),
    ("stateEstimate", "y", log_type::F32),
    ("stateEstimate", "z", log_type::F32),
    ("stateEstimate", "vx", log_type::F32),
    ("stateEstimate", "vy", log_type::F32),
    ("stateEstimate", "vz", log_type::F32),
    ("stateEstimate", "yaw", log_type::F32),
    ("range", "zrange", log_type::U16),
    ("pm", "vbat", log_type::F32),
    ("pm", "state", log_type::I8),
    ("supervisor", "info", log_type::U16),
    ("radio", "rssi", log_type::U8),
];

/// The parameter table of contents (type byte as the firmware sends it: 0x08 = u8, 0x06 = f32).
const PARAM_TOC: &[(&str, &str, u8)] = &[
    ("commander", "enHighLevel", 0x08),
    ("stabilizer", "estimator", 0x08),
    ("stabilizer", "controller", 0x08),
    ("deck", "bcFlow2", 0x08 | 0x40),
    ("flightmode", "stabModeYaw", 0x08),
];

/// Supervisor bits (`supervisor.info`).
pub mod sup {
    /// Can be armed.
    pub const CAN_BE_ARMED: u16 = 1 << 0;
    /// Armed.
    pub const IS_ARMED: u16 = 1 << 1;
    /// Can fly.
    pub const CAN_FLY: u16 = 1 << 3;
    /// Flying.
    pub const IS_FLYING: u16 = 1 << 4;
    /// Locked until reboot.
    pub const IS_LOCKED: u16 = 1 << 6;
    /// The high-level planner is flying a trajectory.
    pub const HL_CONTROL_ACTIVE: u16 = 1 << 8;
    /// The high-level planner is blocked by streamed setpoints.
    pub const HL_CONTROL_DISABLED: u16 = 1 << 10;
}

/// Where a setpoint came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetpointSource {
    /// A streamed position setpoint (generic commander type 7).
    Position,
    /// A streamed world-frame velocity setpoint (type 8).
    Velocity,
    /// A streamed hover setpoint (type 10).
    Hover,
    /// A streamed stop (type 0) or a zero-thrust legacy setpoint.
    Stop,
    /// High-level takeoff.
    HlTakeoff,
    /// High-level land.
    HlLand,
    /// High-level go_to.
    HlGoTo,
    /// High-level stop.
    HlStop,
}

/// One setpoint the vehicle took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CfSetpointRecord {
    /// Simulation time, ms.
    pub t_ms: u64,
    /// Its source.
    pub source: SetpointSource,
    /// x, m.
    pub x: f32,
    /// y, m.
    pub y: f32,
    /// z, m.
    pub z: f32,
    /// Yaw, degrees.
    pub yaw_deg: f32,
    /// `x{cm}_y{cm}_z{cm}_w{deci-degrees}` (empty for sources without a position).
    pub fingerprint: String,
}

/// The Crazyflie fingerprint rule, written here independently of the bridge: centimetres and
/// tenths of a degree, yaw normalised to (-180, 180] (the PX4 simulator's rounding).
pub fn fingerprint(x: f32, y: f32, z: f32, yaw_deg: f32) -> String {
    let [a, b, c, w] = crate::sim::px4::rounded(x, y, z, yaw_deg);
    format!("x{a}_y{b}_z{c}_w{w}")
}

/// Things that happened at the vehicle, for tests.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CfEvent {
    /// The commander watchdog levelled the vehicle.
    Levelled {
        /// ms.
        t_ms: u64,
    },
    /// Motors cut, Locked until reboot.
    Locked {
        /// ms.
        t_ms: u64,
        /// Why.
        reason: String,
    },
    /// A high-level command arrived while streamed setpoints blocked the planner.
    HlIgnored {
        /// ms.
        t_ms: u64,
    },
    /// Armed or disarmed.
    Armed {
        /// ms.
        t_ms: u64,
        /// State.
        armed: bool,
    },
    /// On the ground after flying.
    Landed {
        /// ms.
        t_ms: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Control {
    /// Motors idle or off.
    Idle,
    /// Tracking a streamed setpoint.
    Stream { target: [f32; 3], yaw: f32 },
    /// Tracking a streamed velocity (world frame).
    Velocity { v: [f32; 3] },
    /// The high-level planner flies to `target` (a takeoff, go_to or land).
    Planner {
        target: [f32; 3],
        yaw: f32,
        land: bool,
    },
    /// Levelled by the watchdog: no position control, slow sink.
    Levelled,
}

#[derive(Clone, Debug)]
struct LogBlock {
    vars: Vec<u16>,
    period_ms: u64,
    next_ms: Option<u64>,
}

/// Knobs tests turn.
#[derive(Clone, Debug, PartialEq)]
pub struct CfSimConfig {
    /// Speed limit, m/s.
    pub max_speed: f32,
    /// Position gain, 1/s.
    pub gain: f32,
    /// Battery voltage at start, V.
    pub vbat_start: f32,
    /// Battery drain while flying, V/s.
    pub vbat_drain: f32,
    /// Sink rate once levelled, m/s.
    pub levelled_sink: f32,
}

impl Default for CfSimConfig {
    fn default() -> CfSimConfig {
        CfSimConfig {
            max_speed: 1.0,
            gain: 2.0,
            vbat_start: 4.1,
            vbat_drain: 0.002,
            levelled_sink: 0.3,
        }
    }
}

/// The simulated Crazyflie. Time is passed in (ns on any monotonic origin).
#[derive(Debug)]
pub struct CfSim {
    cfg: CfSimConfig,
    now_ms: u64,
    last_step_ms: u64,
    pos: [f32; 3],
    vel: [f32; 3],
    yaw: f32,
    vbat: f32,
    armed: bool,
    locked: bool,
    flying: bool,
    control: Control,
    /// When the last streamed setpoint stops counting (its arrival, or a notify-stop's
    /// validity end); the watchdog runs from here.
    stream_valid_until_ms: Option<u64>,
    hl_blocked: bool,
    estop_last_ms: Option<u64>,
    obstacle_below_m: Option<f32>,
    blocks: BTreeMap<u8, LogBlock>,
    out: VecDeque<Vec<u8>>,
    setpoints: VecDeque<CfSetpointRecord>,
    events: VecDeque<CfEvent>,
    /// Packets that matched no known command.
    pub unknown_packets: u64,
    /// Every packet received, as raw bytes (header first), for wire-format checks.
    pub received: Vec<Vec<u8>>,
    /// Keep [`CfSim::received`] (off by default: a long run would grow it).
    pub record_received: bool,
}

fn f32_at(d: &[u8], at: usize) -> Option<f32> {
    let b: [u8; 4] = d.get(at..at + 4)?.try_into().ok()?;
    Some(f32::from_le_bytes(b))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = d.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

fn header(port: u8, channel: u8) -> u8 {
    ((port & 0x0f) << 4) | (channel & 0x03)
}

impl CfSim {
    /// On the ground at the origin, disarmed, battery full.
    pub fn new(cfg: CfSimConfig) -> CfSim {
        CfSim {
            vbat: cfg.vbat_start,
            cfg,
            now_ms: 0,
            last_step_ms: 0,
            pos: [0.0; 3],
            vel: [0.0; 3],
            yaw: 0.0,
            armed: false,
            locked: false,
            flying: false,
            control: Control::Idle,
            stream_valid_until_ms: None,
            hl_blocked: false,
            estop_last_ms: None,
            obstacle_below_m: None,
            blocks: BTreeMap::new(),
            out: VecDeque::new(),
            setpoints: VecDeque::new(),
            events: VecDeque::new(),
            unknown_packets: 0,
            received: Vec::new(),
            record_received: false,
        }
    }

    /// Position (x, y, z), m.
    pub fn position(&self) -> [f32; 3] {
        self.pos
    }

    /// Yaw, degrees.
    pub fn yaw_deg(&self) -> f32 {
        self.yaw
    }

    /// Armed.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Locked until reboot.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// In the air.
    pub fn flying(&self) -> bool {
        self.flying
    }

    /// The high-level planner is blocked by streamed setpoints.
    pub fn hl_blocked(&self) -> bool {
        self.hl_blocked
    }

    /// Puts an obstacle this far below the vehicle: `range.zrange` reports it instead of the
    /// height (a box on the floor, a hand under the flow deck). `None` removes it.
    pub fn set_obstacle_below(&mut self, m: Option<f32>) {
        self.obstacle_below_m = m;
    }

    /// The `supervisor.info` bits.
    pub fn supervisor_bits(&self) -> u16 {
        let mut b = 0;
        if !self.locked {
            b |= sup::CAN_BE_ARMED;
        }
        if self.armed {
            b |= sup::IS_ARMED;
            if !self.locked {
                b |= sup::CAN_FLY;
            }
        }
        if self.flying {
            b |= sup::IS_FLYING;
        }
        if self.locked {
            b |= sup::IS_LOCKED;
        }
        if matches!(self.control, Control::Planner { .. }) {
            b |= sup::HL_CONTROL_ACTIVE;
        }
        if self.hl_blocked {
            b |= sup::HL_CONTROL_DISABLED;
        }
        b
    }

    /// The next setpoint the controller took.
    pub fn poll_setpoint(&mut self) -> Option<CfSetpointRecord> {
        self.setpoints.pop_front()
    }

    /// The next vehicle event.
    pub fn poll_event(&mut self) -> Option<CfEvent> {
        self.events.pop_front()
    }

    /// The next packet to send down the link (header byte first).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    fn reply(&mut self, port: u8, channel: u8, data: &[u8]) {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(header(port, channel));
        v.extend_from_slice(data);
        self.out.push_back(v);
    }

    fn record(&mut self, source: SetpointSource, p: [f32; 3], yaw: f32) {
        let fingerprint = match source {
            SetpointSource::Stop | SetpointSource::HlStop | SetpointSource::Velocity => {
                String::new()
            }
            _ => fingerprint(p[0], p[1], p[2], yaw),
        };
        self.setpoints.push_back(CfSetpointRecord {
            t_ms: self.now_ms,
            source,
            x: p[0],
            y: p[1],
            z: p[2],
            yaw_deg: yaw,
            fingerprint,
        });
    }

    fn lock(&mut self, reason: &str) {
        if !self.locked {
            self.locked = true;
            self.armed = false;
            self.control = Control::Idle;
            self.events.push_back(CfEvent::Locked {
                t_ms: self.now_ms,
                reason: reason.into(),
            });
        }
    }

    /// Feeds one packet from the link (header byte first).
    pub fn handle_packet(&mut self, now_ns: u64, raw: &[u8]) {
        self.advance(now_ns);
        if self.record_received {
            self.received.push(raw.to_vec());
        }
        let Some((&h, data)) = raw.split_first() else {
            return;
        };
        // 0xFF: a null packet or an nRF (platform chip) command; never reaches the STM32.
        if h == 0xff {
            return;
        }
        let port = (h >> 4) & 0x0f;
        let channel = h & 0x03;
        let known = match port {
            port::PLATFORM => self.on_platform(channel, data),
            port::LINK => {
                if channel == 0 {
                    self.reply(port::LINK, 0, data);
                }
                true
            }
            port::LOG => self.on_log(channel, data),
            port::PARAM => self.on_param(channel, data),
            port::MEMORY => self.on_memory(channel, data),
            port::GENERIC_SETPOINT => self.on_generic(channel, data),
            port::COMMANDER => self.on_legacy(data),
            port::HL_COMMANDER => self.on_high_level(data),
            port::SUPERVISOR => self.on_supervisor(channel, data),
            _ => false,
        };
        if !known {
            self.unknown_packets += 1;
        }
    }

    fn on_platform(&mut self, channel: u8, data: &[u8]) -> bool {
        if channel != 1 {
            return false;
        }
        match data.first() {
            Some(0) => self.reply(port::PLATFORM, 1, &[0, PROTOCOL_VERSION]),
            Some(1) => {
                let mut v = vec![1];
                v.extend_from_slice(b"2025.02 (halo-sitl)");
                self.reply(port::PLATFORM, 1, &v);
            }
            Some(2) => {
                let mut v = vec![2];
                v.extend_from_slice(b"CF21");
                self.reply(port::PLATFORM, 1, &v);
            }
            _ => return false,
        }
        true
    }

    fn toc_reply(&mut self, port: u8, toc: &[(&str, &str, u8)], data: &[u8]) -> bool {
        match data.first() {
            // TOC info v2: [3, len u16, crc u32, max packets, max ops]
            Some(3) => {
                let len = u16::try_from(toc.len()).unwrap_or(u16::MAX);
                let mut crc: u32 = 0x811c_9dc5;
                for (g, n, t) in toc {
                    for b in g.bytes().chain(n.bytes()).chain([*t]) {
                        crc = (crc ^ u32::from(b)).wrapping_mul(0x0100_0193);
                    }
                }
                let mut v = vec![3];
                v.extend_from_slice(&len.to_le_bytes());
                v.extend_from_slice(&crc.to_le_bytes());
                v.extend_from_slice(&[16, 128]);
                self.reply(port, 0, &v);
                true
            }
            // TOC item v2: [2, id u16] -> [2, id u16, type, group\0name\0]
            Some(2) => {
                let (Some(&lo), Some(&hi)) = (data.get(1), data.get(2)) else {
                    return false;
                };
                let id = u16::from_le_bytes([lo, hi]);
                let Some((g, n, t)) = toc.get(usize::from(id)) else {
                    return false;
                };
                let mut v = vec![2, lo, hi, *t];
                v.extend_from_slice(g.as_bytes());
                v.push(0);
                v.extend_from_slice(n.as_bytes());
                v.push(0);
                self.reply(port, 0, &v);
                true
            }
            _ => false,
        }
    }

    fn on_param(&mut self, channel: u8, data: &[u8]) -> bool {
        match channel {
            0 => self.toc_reply(port::PARAM, PARAM_TOC, data),
            // Read: [id u16] -> [id u16, status 0, value]
            1 => {
                let (Some(&lo), Some(&hi)) = (data.first(), data.get(1)) else {
                    return false;
                };
                let value: u8 = match u16::from_le_bytes([lo, hi]) {
                    0 => 1, // commander.enHighLevel
                    1 => 2, // Kalman
                    2 => 1, // PID
                    3 => 1, // a Flow deck v2 is attached
                    _ => 0,
                };
                self.reply(port::PARAM, 1, &[lo, hi, 0, value]);
                true
            }
            _ => false,
        }
    }

    fn on_memory(&mut self, channel: u8, data: &[u8]) -> bool {
        if channel == 0 && data.first() == Some(&1) {
            self.reply(port::MEMORY, 0, &[1, 0]);
            return true;
        }
        false
    }

    fn block_size(&self, vars: &[u16]) -> usize {
        vars.iter()
            .map(|&id| match LOG_TOC.get(usize::from(id)).map(|e| e.2) {
                Some(log_type::F32) => 4,
                Some(log_type::U16) => 2,
                _ => 1,
            })
            .sum()
    }

    fn on_log(&mut self, channel: u8, data: &[u8]) -> bool {
        if channel == 0 {
            return self.toc_reply(port::LOG, LOG_TOC, data);
        }
        if channel != 1 {
            return false;
        }
        let (Some(&cmd), id) = (data.first(), data.get(1).copied().unwrap_or(0)) else {
            return false;
        };
        // Error codes as the firmware returns them (errno values).
        const ENOENT: u8 = 2;
        const E2BIG: u8 = 7;
        const EEXIST: u8 = 17;
        let status = match cmd {
            5 => {
                self.blocks.clear();
                self.reply(port::LOG, 1, &[5, 0, 0]);
                return true;
            }
            6 => {
                if let std::collections::btree_map::Entry::Vacant(e) = self.blocks.entry(id) {
                    e.insert(LogBlock {
                        vars: Vec::new(),
                        period_ms: 100,
                        next_ms: None,
                    });
                    0
                } else {
                    EEXIST
                }
            }
            7 => {
                let var = data
                    .get(3..5)
                    .and_then(|b| Some(u16::from_le_bytes(b.try_into().ok()?)))
                    .filter(|v| usize::from(*v) < LOG_TOC.len());
                match (var, self.blocks.get(&id).map(|b| b.vars.clone())) {
                    (Some(v), Some(mut vars)) => {
                        vars.push(v);
                        if self.block_size(&vars) > LOG_BLOCK_MAX {
                            E2BIG
                        } else {
                            if let Some(b) = self.blocks.get_mut(&id) {
                                b.vars = vars;
                            }
                            0
                        }
                    }
                    _ => ENOENT,
                }
            }
            3 => {
                let period = u64::from(data.get(2).copied().unwrap_or(10)).max(1) * 10;
                let now = self.now_ms;
                match self.blocks.get_mut(&id) {
                    Some(b) => {
                        b.period_ms = period;
                        b.next_ms = Some(now + period);
                        0
                    }
                    None => ENOENT,
                }
            }
            4 => match self.blocks.get_mut(&id) {
                Some(b) => {
                    b.next_ms = None;
                    0
                }
                None => ENOENT,
            },
            2 => {
                if self.blocks.remove(&id).is_some() {
                    0
                } else {
                    ENOENT
                }
            }
            _ => return false,
        };
        self.reply(port::LOG, 1, &[cmd, id, status]);
        true
    }

    /// A streamed setpoint arrived: the planner stops and is blocked; the watchdog restarts.
    fn streamed(&mut self) {
        self.stream_valid_until_ms = Some(self.now_ms);
        self.hl_blocked = true;
    }

    fn on_generic(&mut self, channel: u8, data: &[u8]) -> bool {
        if channel == 1 {
            // Meta command 0: notify-setpoint-stop [0, remain_valid_ms u32].
            if data.first() == Some(&0) {
                let remain = u64::from(u32_at(data, 1).unwrap_or(0));
                self.stream_valid_until_ms = Some(self.now_ms + remain);
                self.hl_blocked = false;
                return true;
            }
            return false;
        }
        if channel != 0 {
            return false;
        }
        match data.first() {
            Some(0) => {
                self.streamed();
                self.control = Control::Idle;
                self.record(SetpointSource::Stop, self.pos, self.yaw);
                true
            }
            Some(7) => {
                let (Some(x), Some(y), Some(z), Some(yaw)) = (
                    f32_at(data, 1),
                    f32_at(data, 5),
                    f32_at(data, 9),
                    f32_at(data, 13),
                ) else {
                    return false;
                };
                self.streamed();
                if self.armed && !self.locked {
                    self.control = Control::Stream {
                        target: [x, y, z],
                        yaw,
                    };
                    self.record(SetpointSource::Position, [x, y, z], yaw);
                }
                true
            }
            Some(8) => {
                let (Some(vx), Some(vy), Some(vz)) =
                    (f32_at(data, 1), f32_at(data, 5), f32_at(data, 9))
                else {
                    return false;
                };
                self.streamed();
                if self.armed && !self.locked {
                    self.control = Control::Velocity { v: [vx, vy, vz] };
                    self.record(SetpointSource::Velocity, [vx, vy, vz], self.yaw);
                }
                true
            }
            Some(10) => {
                let (Some(vx), Some(vy), Some(z)) =
                    (f32_at(data, 1), f32_at(data, 5), f32_at(data, 13))
                else {
                    return false;
                };
                self.streamed();
                if self.armed && !self.locked {
                    // Body-frame velocity with a height: taken as a world-frame velocity here.
                    let target = [self.pos[0] + vx, self.pos[1] + vy, z];
                    self.control = Control::Stream {
                        target,
                        yaw: self.yaw,
                    };
                    self.record(SetpointSource::Hover, target, self.yaw);
                }
                true
            }
            _ => false,
        }
    }

    fn on_legacy(&mut self, data: &[u8]) -> bool {
        let Some(thrust) = data
            .get(12..14)
            .and_then(|b| Some(u16::from_le_bytes(b.try_into().ok()?)))
        else {
            return false;
        };
        self.streamed();
        if thrust == 0 {
            self.control = Control::Idle;
            self.record(SetpointSource::Stop, self.pos, self.yaw);
        }
        true
    }

    fn on_high_level(&mut self, data: &[u8]) -> bool {
        let Some(&cmd) = data.first() else {
            return false;
        };
        let known = matches!(cmd, 0 | 3 | 7 | 8 | 12);
        if !known {
            return false;
        }
        if cmd == 0 {
            return true;
        }
        if self.hl_blocked {
            self.events
                .push_back(CfEvent::HlIgnored { t_ms: self.now_ms });
            return true;
        }
        if !self.armed || self.locked {
            return true;
        }
        match cmd {
            3 => {
                self.control = Control::Idle;
                self.record(SetpointSource::HlStop, self.pos, self.yaw);
            }
            // takeoff_2 / land_2: [cmd, group, height f32, yaw f32, use_current_yaw u8, duration f32]
            7 | 8 => {
                let (Some(h), Some(yaw_rad), Some(&use_current)) =
                    (f32_at(data, 2), f32_at(data, 6), data.get(10))
                else {
                    return false;
                };
                let yaw = if use_current != 0 {
                    self.yaw
                } else {
                    yaw_rad.to_degrees()
                };
                let target = [self.pos[0], self.pos[1], h];
                let land = cmd == 8;
                self.control = Control::Planner { target, yaw, land };
                self.record(
                    if land {
                        SetpointSource::HlLand
                    } else {
                        SetpointSource::HlTakeoff
                    },
                    target,
                    yaw,
                );
            }
            // go_to_2: [12, group, relative u8, linear u8, x, y, z, yaw f32 (rad), duration f32]
            12 => {
                let (Some(&rel), Some(x), Some(y), Some(z), Some(yaw_rad)) = (
                    data.get(2),
                    f32_at(data, 4),
                    f32_at(data, 8),
                    f32_at(data, 12),
                    f32_at(data, 16),
                ) else {
                    return false;
                };
                let mut target = [x, y, z];
                let mut yaw = yaw_rad.to_degrees();
                if rel != 0 {
                    for (t, p) in target.iter_mut().zip(self.pos) {
                        *t += p;
                    }
                    yaw += self.yaw;
                }
                self.control = Control::Planner {
                    target,
                    yaw,
                    land: false,
                };
                self.record(SetpointSource::HlGoTo, target, yaw);
            }
            _ => {}
        }
        true
    }

    fn on_supervisor(&mut self, channel: u8, data: &[u8]) -> bool {
        if channel != 1 {
            return false;
        }
        match data.first() {
            Some(0x01) => {
                let arm = data.get(1).copied().unwrap_or(0) != 0;
                if arm && self.locked {
                    return true;
                }
                if arm != self.armed {
                    self.armed = arm;
                    if !arm {
                        self.control = Control::Idle;
                    }
                    self.events.push_back(CfEvent::Armed {
                        t_ms: self.now_ms,
                        armed: arm,
                    });
                }
                true
            }
            // Crash recovery: only a tumbled vehicle recovers; Locked stays until reboot.
            Some(0x02) => true,
            Some(0x03) => {
                self.lock("emergency stop");
                true
            }
            Some(0x04) => {
                self.estop_last_ms = Some(self.now_ms);
                true
            }
            _ => false,
        }
    }

    /// Advances time: watchdogs, dynamics, log blocks.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.advance(now_ns);
    }

    /// When [`CfSim::handle_timeout`] should next run, ns (the next log block, else 10 ms).
    pub fn poll_timeout(&self) -> u64 {
        let next = self
            .blocks
            .values()
            .filter_map(|b| b.next_ms)
            .min()
            .unwrap_or(u64::MAX)
            .min(self.now_ms + 10);
        next.saturating_mul(1_000_000)
    }

    fn advance(&mut self, now_ns: u64) {
        let now = now_ns / 1_000_000;
        // Step the dynamics in 5 ms increments so the watchdogs fire on time.
        while self.last_step_ms + 5 <= now {
            self.last_step_ms += 5;
            self.now_ms = self.last_step_ms;
            self.step(0.005);
        }
        self.now_ms = now.max(self.now_ms);
        self.emit_logs();
    }

    fn step(&mut self, dt: f32) {
        // The emergency-stop watchdog.
        if let Some(t) = self.estop_last_ms
            && self.now_ms > t + ESTOP_WATCHDOG_MS
            && !self.locked
        {
            self.lock("emergency-stop watchdog");
        }
        // The commander watchdog, for streamed control.
        if let Some(t) = self.stream_valid_until_ms {
            let streaming = matches!(
                self.control,
                Control::Stream { .. } | Control::Velocity { .. } | Control::Levelled
            );
            if streaming {
                let silent = self.now_ms.saturating_sub(t);
                if silent > WDT_SHUTDOWN_MS {
                    self.lock("commander watchdog: no setpoint for 2 s");
                } else if silent > WDT_STABILIZE_MS && self.control != Control::Levelled {
                    self.control = Control::Levelled;
                    self.events
                        .push_back(CfEvent::Levelled { t_ms: self.now_ms });
                }
            }
        }
        let g = self.cfg.gain;
        let vmax = self.cfg.max_speed;
        let desired: [f32; 3] = match self.control {
            Control::Idle => {
                if self.flying || self.locked {
                    [0.0, 0.0, -2.0] // falls (motors off)
                } else {
                    [0.0; 3]
                }
            }
            Control::Stream { target, yaw } | Control::Planner { target, yaw, .. } => {
                self.yaw = yaw;
                let mut v = [0.0; 3];
                for ((v, t), p) in v.iter_mut().zip(target).zip(self.pos) {
                    *v = (t - p) * g;
                }
                let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
                if n > vmax {
                    for x in &mut v {
                        *x *= vmax / n;
                    }
                }
                v
            }
            Control::Velocity { v } => v,
            Control::Levelled => [
                self.vel[0] * 0.98,
                self.vel[1] * 0.98,
                -self.cfg.levelled_sink,
            ],
        };
        self.vel = desired;
        for (p, v) in self.pos.iter_mut().zip(self.vel) {
            *p += v * dt;
        }
        // A landing planner touches down (the firmware's land ends on the ground, motors idle).
        if let Control::Planner { land: true, .. } = self.control
            && self.pos[2] < 0.03
        {
            self.pos[2] = 0.0;
        }
        if self.pos[2] <= 0.0 {
            self.pos[2] = 0.0;
            self.vel = [0.0; 3];
            if self.flying {
                self.flying = false;
                self.events.push_back(CfEvent::Landed { t_ms: self.now_ms });
                if let Control::Planner { land: true, .. } = self.control {
                    self.control = Control::Idle;
                }
            }
        } else if self.pos[2] > 0.02 && self.armed {
            self.flying = true;
        }
        if self.flying {
            self.vbat -= self.cfg.vbat_drain * dt;
        }
    }

    fn value_bytes(&self, var: u16, out: &mut Vec<u8>) {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a millimetre range clamped to the sensor's u16"
        )]
        let zrange = {
            let m = self.obstacle_below_m.unwrap_or(self.pos[2]).clamp(0.0, 4.0);
            (m * 1000.0).round() as u16
        };
        match var {
            0..=2 => out.extend(
                self.pos
                    .iter()
                    .skip(usize::from(var))
                    .take(1)
                    .flat_map(|v| v.to_le_bytes()),
            ),
            3..=5 => {
                let i = usize::from(var - 3);
                out.extend(
                    self.vel
                        .iter()
                        .skip(i)
                        .take(1)
                        .flat_map(|v| v.to_le_bytes()),
                );
            }
            6 => out.extend_from_slice(&self.yaw.to_le_bytes()),
            7 => out.extend_from_slice(&zrange.to_le_bytes()),
            8 => out.extend_from_slice(&self.vbat.to_le_bytes()),
            // pm.state: 0 battery, 1 charging, 2 charged, 3 low power, 4 shutdown
            9 => out.push(if self.vbat < 3.1 { 3 } else { 0 }),
            10 => out.extend_from_slice(&self.supervisor_bits().to_le_bytes()),
            _ => out.push(0),
        }
    }

    fn emit_logs(&mut self) {
        let now = self.now_ms;
        let due: Vec<(u8, Vec<u16>)> = self
            .blocks
            .iter_mut()
            .filter_map(|(id, b)| match b.next_ms {
                Some(t) if t <= now => {
                    // Next period from now: a late tick never bursts.
                    b.next_ms = Some(now + b.period_ms);
                    Some((*id, b.vars.clone()))
                }
                _ => None,
            })
            .collect();
        for (id, vars) in due {
            let ts = u32::try_from(now & 0x00ff_ffff).unwrap_or(0).to_le_bytes();
            let mut v = vec![id, ts[0], ts[1], ts[2]];
            for var in vars {
                self.value_bytes(var, &mut v);
            }
            self.reply(port::LOG, 2, &v);
        }
    }
}

/// Shared between a [`SimLink`] and its test: the vehicle, link controls and records.
#[derive(Debug)]
pub struct SimShared {
    /// The vehicle.
    pub sim: CfSim,
    /// While true the link carries nothing either way (a radio outage).
    pub outage: bool,
    /// Setpoints the vehicle took, in order.
    pub setpoints: Vec<CfSetpointRecord>,
    /// Vehicle events, in order.
    pub events: Vec<CfEvent>,
    setpoint_log: Option<std::fs::File>,
    closed: Option<String>,
}

impl SimShared {
    fn drain(&mut self) {
        while let Some(r) = self.sim.poll_setpoint() {
            if let Some(f) = self.setpoint_log.as_mut()
                && let Ok(line) = serde_json::to_string(&r)
            {
                let _ = writeln!(f, "{line}");
            }
            self.setpoints.push(r);
        }
        while let Some(e) = self.sim.poll_event() {
            self.events.push(e);
        }
    }
}

/// A simulated Crazyflie on a tokio task, reached through [`SimLink`]s.
#[derive(Clone, Debug)]
pub struct SimCrazyflie {
    shared: Arc<Mutex<SimShared>>,
    origin: Instant,
    down: Arc<Mutex<Option<mpsc::UnboundedReceiver<Vec<u8>>>>>,
    down_tx: mpsc::UnboundedSender<Vec<u8>>,
    closed: Arc<Notify>,
}

fn lock(m: &Mutex<SimShared>) -> std::sync::MutexGuard<'_, SimShared> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SimCrazyflie {
    /// Starts the vehicle's clock task. Needs a tokio runtime. `setpoint_log` gets one JSON line
    /// per setpoint the vehicle took.
    ///
    /// # Errors
    /// The setpoint log cannot be created.
    pub fn start(cfg: CfSimConfig, setpoint_log: Option<&Path>) -> std::io::Result<SimCrazyflie> {
        let setpoint_log = match setpoint_log {
            Some(p) => Some(std::fs::File::create(p)?),
            None => None,
        };
        let (down_tx, down_rx) = mpsc::unbounded_channel();
        let me = SimCrazyflie {
            shared: Arc::new(Mutex::new(SimShared {
                sim: CfSim::new(cfg),
                outage: false,
                setpoints: Vec::new(),
                events: Vec::new(),
                setpoint_log,
                closed: None,
            })),
            origin: Instant::now(),
            down: Arc::new(Mutex::new(Some(down_rx))),
            down_tx,
            closed: Arc::new(Notify::new()),
        };
        let weak = Arc::downgrade(&me.shared);
        let tx = me.down_tx.clone();
        let origin = me.origin;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let mut s = lock(&shared);
                let now = u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
                s.sim.handle_timeout(now);
                s.drain();
                while let Some(pk) = s.sim.poll_transmit() {
                    if !s.outage {
                        let _ = tx.send(pk);
                    }
                }
            }
        });
        Ok(me)
    }

    /// Runs `f` on the shared state (the vehicle, link controls, records).
    pub fn with<R>(&self, f: impl FnOnce(&mut SimShared) -> R) -> R {
        f(&mut lock(&self.shared))
    }

    /// A link to the vehicle for `crazyflie-lib` (`Connection::new(Box::new(link))`). One link
    /// at a time: a second while the first is open gets a closed link.
    pub async fn link(&self) -> SimLink {
        let mut rx = self
            .down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        // Replies to an earlier link are not this link's.
        if let Some(rx) = rx.as_mut() {
            while rx.try_recv().is_ok() {}
        }
        self.with(|s| s.closed = None);
        SimLink {
            vehicle: self.clone(),
            rx: tokio::sync::Mutex::new(rx),
        }
    }

    /// Ends the open link from the vehicle's side (the radio lost it), with a reason.
    pub fn drop_link(&self, reason: &str) {
        self.with(|s| s.closed = Some(reason.into()));
        self.closed.notify_waiters();
    }

    /// Power-cycles the vehicle: on the ground where it is, disarmed, unlocked, no log blocks.
    pub fn reboot(&self) {
        self.with(|s| {
            let cfg = s.sim.cfg.clone();
            let pos = s.sim.position();
            let now = s.sim.now_ms;
            s.sim = CfSim::new(cfg);
            s.sim.pos = [pos[0], pos[1], 0.0];
            s.sim.now_ms = now;
            s.sim.last_step_ms = now;
        });
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A [`ConnectionTrait`] to a [`SimCrazyflie`]: one call of `send_packet` is one CRTP packet
/// delivered (unless the link is in an outage); replies arrive through `recv_packet`.
#[derive(Debug)]
pub struct SimLink {
    vehicle: SimCrazyflie,
    rx: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Vec<u8>>>>,
}

impl SimLink {
    /// Gives the receiver back so a later link can open.
    fn give_back(&self) {
        if let Ok(mut g) = self.rx.try_lock()
            && let Some(rx) = g.take()
        {
            *self
                .vehicle
                .down
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(rx);
        }
    }
}

impl Drop for SimLink {
    fn drop(&mut self) {
        self.give_back();
    }
}

#[async_trait]
impl ConnectionTrait for SimLink {
    async fn wait_close(&self) -> String {
        self.wait_disconnect().await;
        self.vehicle
            .with(|s| s.closed.clone())
            .unwrap_or_else(|| "closed".into())
    }

    async fn close(&self) {
        self.vehicle.with(|s| {
            if s.closed.is_none() {
                s.closed = Some("closed by the host".into());
            }
        });
        self.vehicle.closed.notify_waiters();
        self.give_back();
    }

    async fn status(&self) -> ConnectionStatus {
        match self.vehicle.with(|s| s.closed.clone()) {
            Some(r) => ConnectionStatus::Disconnected(r),
            None => ConnectionStatus::Connected,
        }
    }

    async fn wait_disconnect(&self) {
        loop {
            let notified = self.vehicle.closed.notified();
            if self.vehicle.with(|s| s.closed.is_some()) {
                return;
            }
            notified.await;
        }
    }

    async fn send_packet(&self, packet: Packet) -> crazyflie_link::error::Result<()> {
        let now = self.vehicle.now_ns();
        let raw: Vec<u8> = packet.into();
        let replies = self.vehicle.with(|s| {
            if s.closed.is_some() {
                return Err(crazyflie_link::Error::Timeout);
            }
            if s.outage {
                return Ok(Vec::new());
            }
            s.sim.handle_packet(now, &raw);
            s.drain();
            let mut out = Vec::new();
            while let Some(pk) = s.sim.poll_transmit() {
                out.push(pk);
            }
            Ok(out)
        })?;
        for pk in replies {
            let _ = self.vehicle.down_tx.send(pk);
        }
        Ok(())
    }

    async fn recv_packet(&self) -> crazyflie_link::error::Result<Packet> {
        let mut rx = self.rx.lock().await;
        let Some(rx) = rx.as_mut() else {
            return Err(crazyflie_link::Error::Timeout);
        };
        loop {
            tokio::select! {
                pk = rx.recv() => match pk {
                    Some(raw) if !raw.is_empty() => return Ok(Packet::from(raw)),
                    Some(_) => continue,
                    None => return Err(crazyflie_link::Error::Timeout),
                },
                () = self.wait_disconnect() => return Err(crazyflie_link::Error::Timeout),
            }
        }
    }

    async fn link_statistics(&self) -> Option<RadioLinkStatistics> {
        let outage = self.vehicle.with(|s| s.outage);
        Some(RadioLinkStatistics {
            link_quality: if outage { 0.0 } else { 1.0 },
            ..RadioLinkStatistics::default()
        })
    }
}

/// Serves the vehicle over UDP until `stop` resolves: one datagram is one CRTP packet (header
/// byte first), both ways; replies go to whoever sent the newest datagram. For tools other than
/// crazyflie-lib (a Python script, a packet logger); `halo-sitl crazyflie` runs it.
///
/// # Errors
/// The socket's.
pub async fn serve_udp(
    sock: tokio::net::UdpSocket,
    vehicle: SimCrazyflie,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let link = vehicle.link().await;
    let mut peer: Option<std::net::SocketAddr> = None;
    let mut buf = [0u8; 64];
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            r = sock.recv_from(&mut buf) => {
                let (n, from) = r?;
                peer = Some(from);
                // One CRTP packet: a header and at most 31 data bytes.
                if let Some(raw) = buf.get(..n).filter(|b| !b.is_empty() && b.len() <= 32) {
                    let _ = link.send_packet(Packet::from(raw.to_vec())).await;
                }
            }
            pk = link.recv_packet() => {
                let Ok(pk) = pk else { break };
                if let Some(to) = peer {
                    let raw: Vec<u8> = pk.into();
                    sock.send_to(&raw, to).await?;
                }
            }
        }
    }
    link.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: u64) -> u64 {
        t * 1_000_000
    }

    fn pk(port: u8, channel: u8, data: &[u8]) -> Vec<u8> {
        let mut v = vec![header(port, channel)];
        v.extend_from_slice(data);
        v
    }

    fn position(x: f32, y: f32, z: f32, yaw: f32) -> Vec<u8> {
        let mut d = vec![7];
        for v in [x, y, z, yaw] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        pk(port::GENERIC_SETPOINT, 0, &d)
    }

    fn armed_sim() -> CfSim {
        let mut s = CfSim::new(CfSimConfig::default());
        s.handle_packet(0, &pk(port::SUPERVISOR, 1, &[0x01, 1]));
        assert!(s.armed());
        s
    }

    #[test]
    fn a_streamed_setpoint_flies_and_the_watchdog_levels_then_locks() {
        let mut s = armed_sim();
        for t in (0..3000).step_by(50) {
            s.handle_packet(ms(t), &position(0.0, 0.0, 1.0, 0.0));
        }
        assert!((s.position()[2] - 1.0).abs() < 0.05, "{:?}", s.position());
        assert!(s.flying());
        // Silence: levelled after 500 ms, locked after 2 s.
        s.handle_timeout(ms(2950 + 490));
        assert!(!s.locked());
        assert!(
            !s.events
                .iter()
                .any(|e| matches!(e, CfEvent::Levelled { .. }))
        );
        s.handle_timeout(ms(2950 + 520));
        assert!(
            s.events
                .iter()
                .any(|e| matches!(e, CfEvent::Levelled { .. }))
        );
        s.handle_timeout(ms(2950 + 2010));
        assert!(s.locked());
        assert!(s.supervisor_bits() & sup::IS_LOCKED != 0);
        // Locked: a setpoint moves nothing, arming is refused.
        s.handle_packet(ms(5200), &pk(port::SUPERVISOR, 1, &[0x01, 1]));
        assert!(!s.armed());
    }

    #[test]
    fn the_planner_is_blocked_until_notify_stop() {
        let mut s = armed_sim();
        s.handle_packet(ms(0), &position(0.0, 0.0, 0.5, 0.0));
        let mut goto = vec![12, 0, 0, 0];
        for v in [1.0f32, 0.0, 0.5, 0.0, 1.0] {
            goto.extend_from_slice(&v.to_le_bytes());
        }
        s.handle_packet(ms(50), &pk(port::HL_COMMANDER, 0, &goto));
        assert!(
            s.events
                .iter()
                .any(|e| matches!(e, CfEvent::HlIgnored { .. }))
        );
        let mut stop = vec![0];
        stop.extend_from_slice(&0u32.to_le_bytes());
        s.handle_packet(ms(60), &pk(port::GENERIC_SETPOINT, 1, &stop));
        s.handle_packet(ms(70), &pk(port::HL_COMMANDER, 0, &goto));
        assert!(matches!(s.control, Control::Planner { .. }));
        // The planner is not a stream: the commander watchdog leaves it alone.
        s.handle_timeout(ms(3000));
        assert!(!s.locked());
        assert!((s.position()[0] - 1.0).abs() < 0.05);
    }

    #[test]
    fn the_estop_watchdog_locks_after_a_second_without_refresh() {
        let mut s = armed_sim();
        s.handle_packet(ms(0), &pk(port::SUPERVISOR, 1, &[0x04]));
        s.handle_packet(ms(900), &pk(port::SUPERVISOR, 1, &[0x04]));
        s.handle_timeout(ms(1800));
        assert!(!s.locked());
        s.handle_timeout(ms(1910));
        assert!(s.locked());
    }

    #[test]
    fn log_blocks_refuse_more_than_26_bytes() {
        let mut s = CfSim::new(CfSimConfig::default());
        s.handle_packet(0, &pk(port::LOG, 1, &[6, 1]));
        assert_eq!(s.poll_transmit(), Some(pk(port::LOG, 1, &[6, 1, 0])));
        for id in 0u16..6 {
            let b = id.to_le_bytes();
            s.handle_packet(0, &pk(port::LOG, 1, &[7, 1, log_type::F32, b[0], b[1]]));
            assert_eq!(s.poll_transmit(), Some(pk(port::LOG, 1, &[7, 1, 0])));
        }
        // 24 bytes so far; a third f32... no: yaw would make 28.
        s.handle_packet(0, &pk(port::LOG, 1, &[7, 1, log_type::F32, 6, 0]));
        assert_eq!(s.poll_transmit(), Some(pk(port::LOG, 1, &[7, 1, 7])));
        // A u16 fits (26).
        s.handle_packet(0, &pk(port::LOG, 1, &[7, 1, log_type::U16, 7, 0]));
        assert_eq!(s.poll_transmit(), Some(pk(port::LOG, 1, &[7, 1, 0])));
    }

    #[tokio::test]
    async fn answers_over_udp_one_datagram_one_packet() {
        let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_udp(sock, v.clone(), async {
            let _ = rx.await;
        }));
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        // Platform port 13, channel 1: the protocol version.
        client.send_to(&[0xd1, 0], addr).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), client.recv(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(buf.get(..n), Some(&[0xd1, 0, PROTOCOL_VERSION][..]));
        // Arm over the supervisor: the vehicle says so.
        client.send_to(&[0x91, 0x01, 1], addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(v.with(|s| s.sim.armed()));
        let _ = tx.send(());
        server.await.unwrap().unwrap();
    }

    #[test]
    fn fingerprint_rounds_and_normalises() {
        assert_eq!(fingerprint(1.004, -0.2, 0.5, 190.0), "x100_y-20_z50_w-1700");
        assert_eq!(fingerprint(0.0, 0.0, 0.0, -180.0), "x0_y0_z0_w1800");
    }
}
