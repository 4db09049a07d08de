//! A simulated PX4 multicopter, faithful to the PX4 behaviour the gateway relies on.
//!
//! Sans-IO: time comes in as nanoseconds, messages in and out as values.
//!
//! Matched to PX4 v1.16.0 SITL (SIH quadrotor), as measured:
//! - system 1, component 1, HEARTBEAT type 2 (quadrotor), autopilot 12 (PX4); starts in AUTO
//!   (main 4) LOITER (sub 3); OFFBOARD is main mode 6;
//! - LOCAL_POSITION_NED at 30 Hz and POSITION_TARGET_LOCAL_NED at 10 Hz by default;
//!   `MAV_CMD_SET_MESSAGE_INTERVAL` is honoured; in OFFBOARD the target echo carries the
//!   commanded target exactly (frame 1, type mask 0) plus the controller's velocity and
//!   acceleration; disarmed it carries NaN positions with type mask 63;
//! - `DO_SET_MODE(1, 6)` is ACKed 0 and shown in the heartbeat even while disarmed with no
//!   setpoint stream; armed, OFFBOARD (or arming in it) is accepted only after about 1 s of
//!   stream;
//! - arming is ACKed 0 once the system is ready (`TEMPORARILY_REJECTED` with a STATUSTEXT
//!   before); armed without taking off for 10 s it disarms (`COM_DISARM_PRFLT`); after landing
//!   it disarms after 2 s (`COM_DISARM_LAND`);
//! - with the stream stopped in the air, after `COM_OF_LOSS_T` (1 s) plus detection the
//!   heartbeat shows POSCTL (main 3) and, with no manual control, it descends and disarms,
//!   after which the heartbeat reads the interrupted mode (OFFBOARD) again;
//! - commands sent to component 0 are accepted and ACKed twice;
//! - GPS_GLOBAL_ORIGIN only when the origin moves or on `MAV_CMD_REQUEST_MESSAGE`, never
//!   unsolicited at boot (a `SET_MESSAGE_INTERVAL` for it is accepted and changes nothing);
//! - a ground-station link with its own streams (POSITION_TARGET_LOCAL_NED at 50 Hz);
//! - settled at a target it holds 0.2–0.6 m off it; leaving the ground in OFFBOARD it keeps
//!   its own heading briefly; AUTO.TAKEOFF slows well before its height.
//!
//! Every setpoint the controller takes in OFFBOARD is recorded (PX4's `trajectory_setpoint`
//! topic): the evidence of what reached the vehicle.

use std::collections::VecDeque;

use mavlink::MavHeader;
use mavlink::dialects::common::{
    ATTITUDE_DATA, BATTERY_STATUS_DATA, COMMAND_ACK_DATA, CURRENT_MODE_DATA,
    EXTENDED_SYS_STATE_DATA, GLOBAL_POSITION_INT_DATA, GPS_GLOBAL_ORIGIN_DATA, HEARTBEAT_DATA,
    HOME_POSITION_DATA, LOCAL_POSITION_NED_DATA, MavAutopilot, MavBatteryFunction, MavBatteryType,
    MavCmd, MavFrame, MavLandedState, MavMessage, MavModeFlag, MavResult, MavSeverity,
    MavStandardMode, MavState, MavSysStatusSensor, MavType, MavVtolState,
    POSITION_TARGET_LOCAL_NED_DATA, PositionTargetTypemask, STATUSTEXT_DATA, SYS_STATUS_DATA,
    TIMESYNC_DATA,
};
use serde::{Deserialize, Serialize};

use crate::sim::dynamics::{Body, Demand, Limits};

/// PX4 main modes.
pub const MAIN_POSCTL: u8 = 3;
/// AUTO.
pub const MAIN_AUTO: u8 = 4;
/// OFFBOARD.
pub const MAIN_OFFBOARD: u8 = 6;
/// AUTO.TAKEOFF.
pub const SUB_TAKEOFF: u8 = 2;
/// AUTO.LOITER (HOLD).
pub const SUB_LOITER: u8 = 3;
/// AUTO.RTL.
pub const SUB_RTL: u8 = 5;
/// AUTO.LAND.
pub const SUB_LAND: u8 = 6;

const MS: u64 = 1_000_000;

/// What the vehicle does when the offboard stream stops in the air.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAction {
    /// Show POSCTL and, with no manual control, descend and disarm (measured default).
    Posctl,
    /// AUTO.LOITER.
    Hold,
    /// AUTO.LAND.
    Land,
}

/// Simulator settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// System id.
    pub system_id: u8,
    /// Component id.
    pub component_id: u8,
    /// The autopilot's boot clock runs this far ahead of simulation time, ms (a clock offset
    /// for TIMESYNC tests).
    pub clock_offset_ms: i64,
    /// The autopilot clock's rate error, parts per million (negative: slow). PX4 SITL under
    /// load was measured about 1 % slow (-10000).
    pub clock_drift_ppm: i64,
    /// Arming is refused until this long after boot (estimator not ready), ms.
    pub ready_after_ms: u64,
    /// The EKF has no global origin until this long after boot, ms: a request for
    /// `GPS_GLOBAL_ORIGIN` before it fails and sends nothing.
    #[serde(default)]
    pub origin_after_ms: u64,
    /// Arming is refused below this battery level, percent.
    pub min_arm_battery_pct: f64,
    /// `COM_OF_LOSS_T`, ms.
    pub offboard_loss_ms: u64,
    /// Extra time PX4 takes to act on the loss, ms.
    pub loss_detection_ms: u64,
    /// `COM_OBL_RC_ACT`-like action.
    pub loss_action: LossAction,
    /// Stream this long before OFFBOARD (or arming in it) is accepted while armed, ms.
    pub offboard_warmup_ms: u64,
    /// `COM_DISARM_PRFLT`, ms.
    pub disarm_preflight_ms: u64,
    /// `COM_DISARM_LAND`, ms.
    pub disarm_land_ms: u64,
    /// `MIS_TAKEOFF_ALT`, m above home.
    pub takeoff_alt_m: f64,
    /// Motor spool-up before leaving the ground, ms.
    pub spoolup_ms: u64,
    /// `MPC_LAND_SPEED`, m/s.
    pub land_speed: f64,
    /// Keep a record of every setpoint that arrives in OFFBOARD, used or replaced before the
    /// next control tick ([`Px4Sim::poll_arrival`]; for latency measurements).
    pub record_arrivals: bool,
    /// The position controller's period, ms: a setpoint that arrives is used from the next
    /// control tick after it, and the last one stays in use until another arrives.
    pub control_period_ms: u64,
    /// How long PX4's land detector takes from ground contact to "landed", ms.
    pub land_detect_ms: u64,
    /// A status change (mode, arming) reaches CURRENT_MODE this long after it happened, ms
    /// (PX4's commander publishes it on its next cycle: measured 53–54 ms from an onboard
    /// DO_SET_MODE, 56–64 ms from a ground station's). PX4 sends no extra HEARTBEAT on a mode
    /// change, from any link: the heartbeat shows it at its next 1 Hz beat.
    pub mode_report_ms: u64,
    /// Each HEARTBEAT leaves up to this much later than its 1 Hz slot, ms, by a deterministic
    /// pseudo-random amount (measured: gaps up to 1.24 s on a loaded host). 0: on time.
    pub heartbeat_late_ms: u64,
    /// How far the ground lies from the local frame's origin, m, least and most: PX4's local
    /// origin is not the ground (measured on SIH: +0.76 … +1.6 m down in one session, −0.38 m
    /// in another), and it moves at each boot and each landing (a deterministic pseudo-random
    /// pick in the range, below the origin one time in four). `[0, 0]` puts the ground at 0.
    pub ground_down_m: [f64; 2],
    /// Seed of the pseudo-random picks (ground offset, heartbeat lateness).
    pub seed: u64,
    /// A radio (RC) is connected: without one PX4 refuses POSCTL while armed.
    pub rc_connected: bool,
    /// Home latitude, degrees.
    pub home_lat: f64,
    /// Home longitude, degrees.
    pub home_lon: f64,
    /// Home altitude AMSL, m.
    pub home_alt_m: f64,
    /// Initial battery, percent.
    pub battery_pct: f64,
    /// Battery drain while armed on the ground, percent per second.
    pub drain_idle: f64,
    /// Battery drain while flying, percent per second.
    pub drain_flying: f64,
    /// Answer TIMESYNC requests (off to test a companion's fallback to arrival time).
    pub answer_timesync: bool,
    /// How far from its position target PX4 holds once settled, m, least and most: the hover
    /// error drifts slowly between the two (measured in SIH: 0.2–0.6 m). `[0, 0]` holds exactly.
    pub hold_error_m: [f64; 2],
    /// AUTO.TAKEOFF's climb speed limit, m/s (`MPC_TKO_SPEED`-like).
    pub takeoff_speed: f64,
    /// AUTO.TAKEOFF's vertical approach gain, 1/s: lower than the position controller's, so the
    /// climb slows well before the takeoff altitude (measured: 0→3 m to 95 % in 5.9 s).
    pub takeoff_gain: f64,
    /// Leaving the ground in OFFBOARD, PX4 flies and reports its own heading instead of the
    /// setpoint's yaw until this long after liftoff, ms.
    pub takeoff_yaw_ms: u64,
    /// Dynamics.
    #[serde(skip)]
    pub limits: Limits,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            system_id: 1,
            component_id: 1,
            clock_offset_ms: 0,
            clock_drift_ppm: 0,
            ready_after_ms: 2000,
            origin_after_ms: 0,
            min_arm_battery_pct: 20.0,
            offboard_loss_ms: 1000,
            loss_detection_ms: 80,
            loss_action: LossAction::Posctl,
            offboard_warmup_ms: 1000,
            disarm_preflight_ms: 10_000,
            disarm_land_ms: 2000,
            takeoff_alt_m: 2.5,
            spoolup_ms: 50,
            land_speed: 0.7,
            land_detect_ms: 3700,
            control_period_ms: 20,
            record_arrivals: false,
            mode_report_ms: 54,
            heartbeat_late_ms: 240,
            ground_down_m: [0.38, 1.6],
            seed: 1,
            rc_connected: false,
            home_lat: 47.397_742,
            home_lon: 8.545_594,
            home_alt_m: 488.0,
            battery_pct: 100.0,
            drain_idle: 0.02,
            drain_flying: 0.15,
            answer_timesync: true,
            hold_error_m: [0.2, 0.6],
            takeoff_speed: 1.0,
            takeoff_gain: 0.5,
            takeoff_yaw_ms: 400,
            limits: Limits::default(),
        }
    }
}

/// One setpoint the controller took (the counterpart of PX4's `trajectory_setpoint`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetpointRecord {
    /// Simulation time the controller started using it, ns.
    pub t_ns: u64,
    /// Simulation time it arrived, ns (a control period or less before `t_ns`).
    pub arrived_ns: u64,
    /// The autopilot's `time_boot_ms` at that instant.
    pub time_boot_ms: u64,
    /// North, m.
    pub x: f32,
    /// East, m.
    pub y: f32,
    /// Down, m.
    pub z: f32,
    /// Yaw, degrees.
    pub yaw_deg: f32,
    /// Type mask as received.
    pub type_mask: u16,
    /// `MAV_FRAME` as received.
    pub frame: u8,
    /// The rounded fingerprint: `n{cm}_e{cm}_d{cm}_y{deci-degrees}`.
    pub fingerprint: String,
}

/// The fingerprint rule, written here independently of the bridge: centimetres and tenths of
/// a degree, yaw normalised to (-180, 180].
pub fn fingerprint(x: f32, y: f32, z: f32, yaw_deg: f32) -> String {
    let [a, b, c, w] = rounded(x, y, z, yaw_deg);
    format!("n{a}_e{b}_d{c}_y{w}")
}

/// Three coordinates in centimetres and a yaw in tenths of a degree normalised to
/// (-180, 180], rounded: what both simulators' fingerprints print.
#[allow(clippy::cast_possible_truncation, reason = "rounded bounded values")]
pub(crate) fn rounded(x: f32, y: f32, z: f32, yaw_deg: f32) -> [i64; 4] {
    let r = |v: f64| v.round() as i64;
    let mut yaw = f64::from(yaw_deg) % 360.0;
    if yaw <= -180.0 {
        yaw += 360.0;
    } else if yaw > 180.0 {
        yaw -= 360.0;
    }
    let mut yd = r(yaw * 10.0);
    if yd == -1800 {
        yd = 1800;
    }
    [
        r(f64::from(x) * 100.0),
        r(f64::from(y) * 100.0),
        r(f64::from(z) * 100.0),
        yd,
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Sp {
    /// Where the controller drives the vehicle (the local frame less the ground offset).
    pos: [f64; 3],
    /// The position as received, local frame (what PX4 echoes).
    raw: [f32; 3],
    yaw_deg: f64,
    type_mask: u16,
    frame: u8,
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    msg_id: u32,
    interval_ns: u64,
    next_at: u64,
    /// When it was last sent (CURRENT_MODE is sent on a status change, at most this often).
    last_sent: u64,
}

/// A deterministic pseudo-random number in [0, 1) from a seed and a counter (splitmix64).
fn unit(seed: u64, n: u64) -> f64 {
    let mut z = seed
        .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    #[allow(clippy::cast_precision_loss, reason = "53 bits of a random word")]
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    u
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Setpoint messages received.
    pub setpoints_received: u64,
    /// Setpoints the controller took (in OFFBOARD).
    pub setpoints_accepted: u64,
    /// Setpoint messages ignored (wrong target, unsupported mask or frame).
    pub setpoints_ignored: u64,
    /// Commands handled.
    pub commands: u64,
    /// Offboard-loss failsafes.
    pub failsafes: u64,
    /// Messages sent in answer to `MAV_CMD_REQUEST_MESSAGE`.
    pub messages_requested: u64,
}

/// The simulated vehicle. See the module documentation.
#[derive(Debug)]
pub struct Px4Sim {
    cfg: SimConfig,
    boot_ns: u64,
    last_ns: u64,
    armed: bool,
    armed_at: u64,
    main: u8,
    sub: u8,
    body: Body,
    on_ground: bool,
    flew: bool,
    landed_at: Option<u64>,
    liftoff_at: Option<u64>,
    /// Ground contact while descending, before the land detector concludes.
    contact_at: Option<u64>,
    battery_pct: f64,
    sp: Option<Sp>,
    /// A setpoint that arrived and waits for the next control tick, with its record.
    pending: Option<(Sp, SetpointRecord)>,
    arrivals: VecDeque<SetpointRecord>,
    sp_first_ns: Option<u64>,
    sp_last_ns: Option<u64>,
    hold_at: [f64; 3],
    hold_yaw: f64,
    takeoff_to: f64,
    failsafe: bool,
    /// The mode the offboard-loss failsafe took the vehicle out of (PX4 shows it again once the
    /// failsafe disarms the vehicle).
    before_failsafe: Option<(u8, u8)>,
    streams: Vec<Stream>,
    outbox: VecDeque<MavMessage>,
    /// The ground-station link's own streams (empty until [`Px4Sim::enable_gcs_link`]).
    gcs_streams: Vec<Stream>,
    gcs_outbox: VecDeque<MavMessage>,
    /// Other components' heartbeats and status texts heard on the offboard link, forwarded to
    /// the ground station with their own header (measured: PX4 SITL forwards the companion's
    /// heartbeat, sys 1 comp 191).
    gcs_forward: VecDeque<(MavHeader, MavMessage)>,
    /// The position target the hover error is measured from, and since when the vehicle has
    /// been near it (the error builds up only once it has settled there).
    err_target: [f64; 3],
    near_since: Option<u64>,
    log: VecDeque<SetpointRecord>,
    stats: SimStats,
    /// Where the ground is in the local frame now (m down), and how many picks were made.
    ground: f64,
    ground_picks: u64,
    /// Home's local z: the ground where the vehicle was last armed (PX4 sets home on arming).
    home_down: f64,
    /// Home's local north and east (0 until the origin moves).
    home_ne: [f64; 2],
    /// The EKF's global origin: latitude, longitude (degrees), altitude AMSL (m). A ground
    /// station moves it with `SET_GPS_GLOBAL_ORIGIN`; the local frame moves with it.
    origin: [f64; 3],
    /// Heartbeats sent, for their lateness.
    heartbeats: u64,
    /// The heartbeat's on-time slot (the late one is sent later, the slots stay 1 s apart).
    heartbeat_slot: [u64; 2],
    /// The mode the vehicle showed when a LAND interrupted OFFBOARD (PX4 reads OFFBOARD again
    /// once it disarms on the ground), and whether OFFBOARD is now shown stuck: arming refused
    /// until the mode changes.
    before_land: Option<(u8, u8)>,
    offboard_stuck: bool,
    /// A status change waits to reach CURRENT_MODE until then.
    status_due: Option<u64>,
}

fn rate_ns(hz: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "positive rates"
    )]
    let ns = (1e9 / hz) as u64;
    ns
}

/// Streams of `(message id, rate in Hz)`, each first due at `now_ns`.
fn streams_at(rates: &[(u32, f64)], now_ns: u64) -> Vec<Stream> {
    rates
        .iter()
        .map(|&(msg_id, hz)| Stream {
            msg_id,
            interval_ns: rate_ns(hz),
            next_at: now_ns,
            last_sent: 0,
        })
        .collect()
}

impl Px4Sim {
    /// A vehicle booting at `now_ns`, on the ground at home, disarmed, in AUTO.LOITER.
    pub fn new(cfg: SimConfig, now_ns: u64) -> Px4Sim {
        let streams = streams_at(
            &[
                (0, 1.0),   // HEARTBEAT
                (32, 30.0), // LOCAL_POSITION_NED
                (85, 10.0), // POSITION_TARGET_LOCAL_NED
                (30, 50.0), // ATTITUDE
                (33, 10.0), // GLOBAL_POSITION_INT
                (147, 0.5), // BATTERY_STATUS (PX4's onboard profile rate)
                (1, 1.0),   // SYS_STATUS
                (245, 5.0), // EXTENDED_SYS_STATE
                (242, 0.5), // HOME_POSITION (PX4's normal-profile rate)
                (111, 1.0), // TIMESYNC requests
                (436, 0.5), // CURRENT_MODE (PX4's onboard profile rate)
            ],
            now_ns,
        );
        // GPS_GLOBAL_ORIGIN, as PX4 v1.16's stream sends it: only when the origin changes or
        // when asked with MAV_CMD_REQUEST_MESSAGE, never unsolicited at boot, whatever rate a
        // SET_MESSAGE_INTERVAL gives it (the stream is there, so the rate is ACCEPTED).
        let mut streams = streams;
        streams.push(Stream {
            msg_id: 49,
            interval_ns: u64::MAX,
            next_at: u64::MAX,
            last_sent: 0,
        });
        let battery = cfg.battery_pct;
        let cfg_origin = (cfg.home_lat, cfg.home_lon, cfg.home_alt_m);
        let mut sim = Px4Sim {
            cfg,
            boot_ns: now_ns,
            last_ns: now_ns,
            armed: false,
            armed_at: 0,
            main: MAIN_AUTO,
            sub: SUB_LOITER,
            body: Body::default(),
            on_ground: true,
            flew: false,
            landed_at: None,
            liftoff_at: None,
            contact_at: None,
            battery_pct: battery,
            sp: None,
            pending: None,
            arrivals: VecDeque::new(),
            sp_first_ns: None,
            sp_last_ns: None,
            hold_at: [0.0; 3],
            hold_yaw: 0.0,
            takeoff_to: 0.0,
            failsafe: false,
            before_failsafe: None,
            streams,
            outbox: VecDeque::new(),
            gcs_streams: Vec::new(),
            gcs_outbox: VecDeque::new(),
            gcs_forward: VecDeque::new(),
            err_target: [0.0; 3],
            near_since: None,
            log: VecDeque::new(),
            stats: SimStats::default(),
            ground: 0.0,
            ground_picks: 0,
            home_down: 0.0,
            home_ne: [0.0; 2],
            origin: [cfg_origin.0, cfg_origin.1, cfg_origin.2],
            heartbeats: 0,
            heartbeat_slot: [now_ns; 2],
            before_land: None,
            offboard_stuck: false,
            status_due: None,
        };
        sim.pick_ground();
        sim.home_down = sim.ground;
        sim
    }

    /// A new EKF origin, as PX4 takes `SET_GPS_GLOBAL_ORIGIN`: the local frame moves with it,
    /// so everything the vehicle knows by local coordinates (its position, home, where it
    /// holds) gets new numbers for the same place, while a setpoint being flown keeps its
    /// numbers (and so names another place). PX4 announces the new origin at once.
    fn move_origin(&mut self, lat: f64, lon: f64, alt: f64) {
        let [lat0, lon0, alt0] = self.origin;
        let dn = (lat0 - lat) * 111_320.0;
        let de = (lon0 - lon) * 111_320.0 * lat.to_radians().cos();
        let dd = alt - alt0;
        for p in [&mut self.body.pos, &mut self.hold_at] {
            p[0] += dn;
            p[1] += de;
        }
        self.home_ne[0] += dn;
        self.home_ne[1] += de;
        self.ground += dd;
        self.home_down += dd;
        self.origin = [lat, lon, alt];
        if let Some(m) = self.stream_message(49, self.last_ns) {
            self.broadcast(m);
        }
    }

    /// A new place for the ground in the local frame (at boot and at each landing).
    fn pick_ground(&mut self) {
        let [lo, hi] = self.cfg.ground_down_m;
        let magnitude = lo + (hi - lo) * unit(self.cfg.seed, self.ground_picks);
        let below = unit(self.cfg.seed ^ 0x6772, self.ground_picks) < 0.25;
        self.ground = if below { -magnitude } else { magnitude };
        self.ground_picks += 1;
    }

    /// Where the ground lies in the local frame now, m down.
    pub fn ground_down_m(&self) -> f64 {
        self.ground
    }

    /// The vehicle's height above the ground, m.
    pub fn height_m(&self) -> f64 {
        -self.body.pos[2]
    }

    /// The autopilot clock (`time_boot_ms` in ns) at simulation time `now_ns`.
    pub fn boot_time_ns(&self, now_ns: u64) -> u64 {
        let since = i128::from(now_ns.saturating_sub(self.boot_ns));
        let drifted = since + since * i128::from(self.cfg.clock_drift_ppm) / 1_000_000;
        let off = i128::from(self.cfg.clock_offset_ms) * 1_000_000;
        u64::try_from((drifted + off).max(0)).unwrap_or(u64::MAX)
    }

    /// Opens PX4 SITL's ground-station link: its own stream set (PX4 streams
    /// POSITION_TARGET_LOCAL_NED there at about 50 Hz, measured), read with
    /// [`Px4Sim::poll_transmit_gcs`]; command ACKs and STATUSTEXT go to both links.
    pub fn enable_gcs_link(&mut self, now_ns: u64) {
        if !self.gcs_streams.is_empty() {
            return;
        }
        self.gcs_streams = streams_at(
            &[
                (0, 1.0),   // HEARTBEAT
                (85, 50.0), // POSITION_TARGET_LOCAL_NED (measured on PX4 v1.16 SITL)
                (32, 30.0), // LOCAL_POSITION_NED
                (30, 20.0), // ATTITUDE
                (33, 5.0),  // GLOBAL_POSITION_INT
                (1, 1.0),   // SYS_STATUS
                (245, 1.0), // EXTENDED_SYS_STATE
                (242, 0.5), // HOME_POSITION
                (436, 0.5), // CURRENT_MODE
            ],
            now_ns,
        );
    }

    /// A message both links carry (command ACKs, STATUSTEXT).
    fn broadcast(&mut self, msg: MavMessage) {
        if !self.gcs_streams.is_empty() {
            self.gcs_outbox.push_back(msg.clone());
        }
        self.outbox.push_back(msg);
    }

    /// Position in PX4's local frame, NED metres (the ground is at [`Px4Sim::ground_down_m`]).
    pub fn position(&self) -> [f64; 3] {
        let p = self.body.pos;
        [p[0], p[1], p[2] + self.ground]
    }

    /// Armed.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// (main, sub) mode.
    pub fn mode(&self) -> (u8, u8) {
        (self.main, self.sub)
    }

    /// On the ground.
    pub fn on_ground(&self) -> bool {
        self.on_ground
    }

    /// Counters.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// Battery, percent.
    pub fn battery_pct(&self) -> f64 {
        self.battery_pct
    }

    /// Sets the battery level (test control).
    pub fn set_battery_pct(&mut self, pct: f64) {
        self.battery_pct = pct.clamp(0.0, 100.0);
    }

    fn set_mode(&mut self, main: u8, sub: u8) {
        if (main, sub) == (MAIN_AUTO, SUB_LOITER) || main == MAIN_POSCTL {
            self.hold_at = self.body.pos;
            self.hold_yaw = self.body.yaw_deg;
        }
        let changed = (self.main, self.sub) != (main, sub);
        if changed {
            // LAND out of OFFBOARD: once disarmed on the ground PX4 reads OFFBOARD again.
            self.before_land = ((main, sub) == (MAIN_AUTO, SUB_LAND) && self.main == MAIN_OFFBOARD)
                .then_some((self.main, self.sub));
            self.offboard_stuck = false;
            self.status_changed();
        }
        self.main = main;
        self.sub = sub;
    }

    /// Commander publishes the new status on its next cycle; CURRENT_MODE follows (measured:
    /// no extra HEARTBEAT on any link).
    fn status_changed(&mut self) {
        let at = self.last_ns + self.cfg.mode_report_ms * MS;
        self.status_due = Some(self.status_due.map_or(at, |d| d.min(at)));
    }

    fn heartbeat(&self) -> MavMessage {
        let mut base = MavModeFlag::MAV_MODE_FLAG_CUSTOM_MODE_ENABLED;
        if self.armed {
            base |= MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED;
        }
        let status = if self.failsafe {
            MavState::MAV_STATE_CRITICAL
        } else if self.armed {
            MavState::MAV_STATE_ACTIVE
        } else {
            MavState::MAV_STATE_STANDBY
        };
        MavMessage::HEARTBEAT(HEARTBEAT_DATA {
            custom_mode: (u32::from(self.sub) << 24) | (u32::from(self.main) << 16),
            mavtype: MavType::MAV_TYPE_QUADROTOR,
            autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
            base_mode: base,
            system_status: status,
            mavlink_version: 3,
        })
    }

    fn status_text(&mut self, severity: MavSeverity, text: &str) {
        let mut st = STATUSTEXT_DATA {
            severity,
            ..STATUSTEXT_DATA::DEFAULT
        };
        st.text = text.into();
        self.broadcast(MavMessage::STATUSTEXT(st));
    }

    fn offboard_signal_ok(&self, now: u64) -> bool {
        match (self.sp_first_ns, self.sp_last_ns) {
            (Some(first), Some(last)) => {
                now.saturating_sub(last) <= self.cfg.offboard_loss_ms * MS
                    && last.saturating_sub(first) + 100 * MS >= self.cfg.offboard_warmup_ms * MS
            }
            _ => false,
        }
    }

    /// Feeds one message received on the offboard link from system `header.system_id`.
    pub fn handle_message(&mut self, now_ns: u64, header: &MavHeader, msg: &MavMessage) {
        self.handle_on(now_ns, false, header, msg);
    }

    /// Feeds one message received on the ground-station link (see
    /// [`Px4Sim::enable_gcs_link`]): commands act on the vehicle as from the offboard link; a
    /// rate request changes the ground-station link's stream.
    pub fn handle_gcs_message(&mut self, now_ns: u64, header: &MavHeader, msg: &MavMessage) {
        self.handle_on(now_ns, true, header, msg);
    }

    fn handle_on(&mut self, now_ns: u64, gcs: bool, header: &MavHeader, msg: &MavMessage) {
        self.advance(now_ns);
        let own = header.system_id == u32::from(self.cfg.system_id)
            && header.component_id == self.cfg.component_id;
        // PX4 forwards what a companion broadcasts (its heartbeat, its STATUSTEXT) to the
        // ground-station link (`MAV_x_FORWARD` on both instances, as PX4 SITL starts them).
        if !gcs
            && !own
            && !self.gcs_streams.is_empty()
            && matches!(msg, MavMessage::HEARTBEAT(_) | MavMessage::STATUSTEXT(_))
        {
            if self.gcs_forward.len() >= 64 {
                self.gcs_forward.pop_front();
            }
            self.gcs_forward.push_back((*header, msg.clone()));
        }
        let ours = |sys: u8, comp: u8| {
            (sys == self.cfg.system_id || sys == 0) && (comp == self.cfg.component_id || comp == 0)
        };
        match msg {
            MavMessage::SET_POSITION_TARGET_LOCAL_NED(s) => {
                self.stats.setpoints_received += 1;
                if !ours(s.target_system, s.target_component) {
                    self.stats.setpoints_ignored += 1;
                    return;
                }
                let mask = s.type_mask.bits();
                let uses_position = mask & 0x7 == 0;
                let local = s.coordinate_frame == MavFrame::MAV_FRAME_LOCAL_NED;
                if !(uses_position
                    && local
                    && s.x.is_finite()
                    && s.y.is_finite()
                    && s.z.is_finite())
                {
                    self.stats.setpoints_ignored += 1;
                    return;
                }
                // The offboard signal is "alive" from the first of a continuous stream.
                let gap = self
                    .sp_last_ns
                    .map_or(u64::MAX, |l| now_ns.saturating_sub(l));
                if gap > self.cfg.offboard_loss_ms * MS {
                    self.sp_first_ns = Some(now_ns);
                }
                self.sp_last_ns = Some(now_ns);
                let yaw_deg = if mask & 0x400 == 0 && s.yaw.is_finite() {
                    f64::from(s.yaw).to_degrees()
                } else {
                    self.body.yaw_deg
                };
                let sp = Sp {
                    pos: [f64::from(s.x), f64::from(s.y), f64::from(s.z) - self.ground],
                    raw: [s.x, s.y, s.z],
                    yaw_deg,
                    type_mask: mask,
                    frame: s.coordinate_frame as u8,
                };
                #[allow(clippy::cast_possible_truncation, reason = "f32 as received")]
                let yaw = yaw_deg as f32;
                let record = SetpointRecord {
                    t_ns: now_ns,
                    arrived_ns: now_ns,
                    time_boot_ms: self.boot_time_ns(now_ns) / MS,
                    x: s.x,
                    y: s.y,
                    z: s.z,
                    yaw_deg: yaw,
                    type_mask: mask,
                    frame: s.coordinate_frame as u8,
                    fingerprint: fingerprint(s.x, s.y, s.z, yaw),
                };
                if self.cfg.record_arrivals && self.main == MAIN_OFFBOARD {
                    self.arrivals.push_back(record.clone());
                }
                // Used from the next control tick; a newer one replaces one still waiting.
                self.pending = Some((sp, record));
            }
            // Superseded in MAVLink by MAV_CMD_DO_SET_GLOBAL_ORIGIN (2025-04); the message is
            // what PX4 v1.16 and today's ground stations use.
            #[allow(deprecated, reason = "the message PX4 v1.16 takes")]
            MavMessage::SET_GPS_GLOBAL_ORIGIN(o) => {
                if !ours(o.target_system, self.cfg.component_id) {
                    return;
                }
                self.move_origin(
                    f64::from(o.latitude) / 1e7,
                    f64::from(o.longitude) / 1e7,
                    f64::from(o.altitude) / 1e3,
                );
            }
            MavMessage::COMMAND_LONG(c) => {
                if !ours(c.target_system, c.target_component) {
                    return;
                }
                self.stats.commands += 1;
                let result = self.handle_command(
                    now_ns,
                    gcs,
                    c.command,
                    [c.param1, c.param2, c.param3, c.param7],
                );
                let sender = u8::try_from(header.system_id).unwrap_or(0);
                let ack = MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
                    command: c.command,
                    result,
                    progress: 0,
                    result_param2: 0,
                    target_system: sender,
                    target_component: header.component_id,
                });
                if c.target_component == 0 {
                    // Measured on PX4 v1.16: a broadcast-component command is ACKed twice.
                    self.broadcast(ack.clone());
                }
                self.broadcast(ack);
            }
            MavMessage::TIMESYNC(t) if t.tc1 == 0 && self.cfg.answer_timesync => {
                let sender = u8::try_from(header.system_id).unwrap_or(0);
                let reply = MavMessage::TIMESYNC(TIMESYNC_DATA {
                    tc1: i64::try_from(self.boot_time_ns(now_ns)).unwrap_or(i64::MAX),
                    ts1: t.ts1,
                    target_system: sender,
                    target_component: header.component_id,
                });
                if gcs {
                    self.gcs_outbox.push_back(reply);
                } else {
                    self.outbox.push_back(reply);
                }
            }
            _ => {}
        }
    }

    fn handle_command(&mut self, now: u64, gcs: bool, cmd: MavCmd, p: [f32; 4]) -> MavResult {
        match cmd {
            MavCmd::MAV_CMD_COMPONENT_ARM_DISARM => {
                let forced = (p[1] - 21196.0).abs() < 0.5;
                if p[0] > 0.5 {
                    if self.armed {
                        return MavResult::MAV_RESULT_ACCEPTED;
                    }
                    let reason = if now.saturating_sub(self.boot_ns) < self.cfg.ready_after_ms * MS
                    {
                        Some("Arming denied: system not ready")
                    } else if self.battery_pct < self.cfg.min_arm_battery_pct {
                        Some("Arming denied: battery low")
                    } else if self.main == MAIN_OFFBOARD && self.offboard_stuck {
                        // Measured after a LAND or a failsafe out of OFFBOARD: refused until
                        // the mode changes, whatever is streamed.
                        Some("Arming denied: Resolve system health failures first")
                    } else if self.main == MAIN_OFFBOARD && !self.offboard_signal_ok(now) {
                        // Measured: refused with no STATUSTEXT on the onboard link.
                        Some("")
                    } else {
                        None
                    };
                    if let (Some(r), false) = (reason, forced) {
                        if !r.is_empty() {
                            self.status_text(MavSeverity::MAV_SEVERITY_CRITICAL, r);
                        }
                        return MavResult::MAV_RESULT_TEMPORARILY_REJECTED;
                    }
                    self.armed = true;
                    self.armed_at = now;
                    self.home_down = self.ground;
                    self.status_changed();
                    self.flew = false;
                    self.liftoff_at = None;
                    self.landed_at = None;
                    self.failsafe = false;
                    self.hold_at = self.body.pos;
                    self.hold_yaw = self.body.yaw_deg;
                    MavResult::MAV_RESULT_ACCEPTED
                } else {
                    if !self.armed {
                        return MavResult::MAV_RESULT_ACCEPTED;
                    }
                    if !self.on_ground && !forced {
                        self.status_text(
                            MavSeverity::MAV_SEVERITY_CRITICAL,
                            "Disarming denied: not landed",
                        );
                        return MavResult::MAV_RESULT_TEMPORARILY_REJECTED;
                    }
                    self.disarm();
                    MavResult::MAV_RESULT_ACCEPTED
                }
            }
            MavCmd::MAV_CMD_DO_SET_MODE => {
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "mode numbers"
                )]
                let (main, sub) = (p[1].round() as u8, p[2].round() as u8);
                match (main, sub) {
                    (MAIN_OFFBOARD, _) => {
                        // Measured: accepted while disarmed even without a stream.
                        if self.armed && !self.offboard_signal_ok(now) {
                            self.status_text(
                                MavSeverity::MAV_SEVERITY_CRITICAL,
                                "Switching to Offboard is currently not possible",
                            );
                            return MavResult::MAV_RESULT_TEMPORARILY_REJECTED;
                        }
                        self.set_mode(MAIN_OFFBOARD, 0);
                        self.failsafe = false;
                        MavResult::MAV_RESULT_ACCEPTED
                    }
                    (MAIN_POSCTL, 0) if self.armed && !self.cfg.rc_connected => {
                        // Measured: refused in flight without RC (accepted on the ground).
                        MavResult::MAV_RESULT_TEMPORARILY_REJECTED
                    }
                    (MAIN_AUTO, SUB_LOITER) | (MAIN_POSCTL, 0) => {
                        self.set_mode(main, sub);
                        self.failsafe = false;
                        MavResult::MAV_RESULT_ACCEPTED
                    }
                    (MAIN_AUTO, SUB_LAND | SUB_RTL | SUB_TAKEOFF) => {
                        if !self.armed {
                            return MavResult::MAV_RESULT_TEMPORARILY_REJECTED;
                        }
                        if sub == SUB_TAKEOFF {
                            self.takeoff_to = -self.cfg.takeoff_alt_m;
                        }
                        self.set_mode(main, sub);
                        MavResult::MAV_RESULT_ACCEPTED
                    }
                    _ => MavResult::MAV_RESULT_UNSUPPORTED,
                }
            }
            MavCmd::MAV_CMD_NAV_TAKEOFF => {
                // Measured on PX4 v1.16: accepted while disarmed; the vehicle shows
                // AUTO.TAKEOFF and climbs the moment it is armed.
                let alt = if p[3].is_finite() {
                    f64::from(p[3]) - self.cfg.home_alt_m
                } else {
                    self.cfg.takeoff_alt_m
                };
                self.takeoff_to = -alt.max(0.5);
                self.set_mode(MAIN_AUTO, SUB_TAKEOFF);
                MavResult::MAV_RESULT_ACCEPTED
            }
            MavCmd::MAV_CMD_NAV_LAND => {
                if !self.armed {
                    return MavResult::MAV_RESULT_DENIED;
                }
                self.set_mode(MAIN_AUTO, SUB_LAND);
                MavResult::MAV_RESULT_ACCEPTED
            }
            MavCmd::MAV_CMD_NAV_RETURN_TO_LAUNCH => {
                if !self.armed {
                    return MavResult::MAV_RESULT_DENIED;
                }
                self.set_mode(MAIN_AUTO, SUB_RTL);
                MavResult::MAV_RESULT_ACCEPTED
            }
            MavCmd::MAV_CMD_SET_MESSAGE_INTERVAL => {
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "message ids"
                )]
                let id = p[0].round() as u32;
                if id == 0 {
                    // PX4: HEARTBEAT is a constant 1 Hz stream; rate requests fail.
                    return MavResult::MAV_RESULT_FAILED;
                }
                let streams = if gcs {
                    &mut self.gcs_streams
                } else {
                    &mut self.streams
                };
                let Some(s) = streams.iter_mut().find(|s| s.msg_id == id) else {
                    return MavResult::MAV_RESULT_UNSUPPORTED;
                };
                if id == 49 {
                    // Sent on change and on request only (see `Px4Sim::new`).
                    return MavResult::MAV_RESULT_ACCEPTED;
                }
                let us = f64::from(p[1]);
                if us < 0.0 {
                    s.interval_ns = u64::MAX;
                    s.next_at = u64::MAX;
                } else if us > 0.0 {
                    #[allow(
                        clippy::cast_possible_truncation,
                        clippy::cast_sign_loss,
                        reason = "positive interval"
                    )]
                    let ns = (us * 1000.0) as u64;
                    s.interval_ns = ns.max(MS);
                    s.next_at = now;
                }
                MavResult::MAV_RESULT_ACCEPTED
            }
            MavCmd::MAV_CMD_REQUEST_MESSAGE => {
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "message ids"
                )]
                let id = p[0].round() as u32;
                if id == 49 && now.saturating_sub(self.boot_ns) < self.cfg.origin_after_ms * MS {
                    return MavResult::MAV_RESULT_FAILED;
                }
                // PX4 answers on the link that asked, after the ACK in practice; order does not
                // matter to a reader that takes both.
                let Some(m) = self.stream_message(id, now) else {
                    return MavResult::MAV_RESULT_UNSUPPORTED;
                };
                self.stats.messages_requested += 1;
                if gcs {
                    self.gcs_outbox.push_back(m);
                } else {
                    self.outbox.push_back(m);
                }
                MavResult::MAV_RESULT_ACCEPTED
            }
            _ => MavResult::MAV_RESULT_UNSUPPORTED,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
        let after_failsafe = std::mem::take(&mut self.failsafe);
        self.status_changed();
        let before_land = self.before_land.take();
        let landing = (self.main, self.sub) == (MAIN_AUTO, SUB_LAND);
        match (self.before_failsafe.take(), before_land) {
            // Measured on PX4 v1.16: once the offboard-loss failsafe has descended and
            // disarmed, or a LAND commanded from OFFBOARD has, the heartbeat reads OFFBOARD
            // again, and arming is refused until the mode changes.
            (Some((main, sub)), _) if after_failsafe => {
                self.set_mode(main, sub);
                self.offboard_stuck = main == MAIN_OFFBOARD;
            }
            (_, Some((main, sub))) if landing => {
                self.set_mode(main, sub);
                self.offboard_stuck = main == MAIN_OFFBOARD;
            }
            _ => {
                if self.main == MAIN_POSCTL || (self.main == MAIN_AUTO && self.sub != SUB_LOITER) {
                    self.set_mode(MAIN_AUTO, SUB_LOITER);
                }
            }
        }
    }

    /// Runs the vehicle up to `now_ns` and emits the streams due.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.advance(now_ns);
        self.emit_streams(now_ns);
    }

    /// When [`Px4Sim::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> u64 {
        let next_stream = self
            .streams
            .iter()
            .chain(&self.gcs_streams)
            .map(|s| s.next_at)
            .min()
            .unwrap_or(u64::MAX);
        next_stream
            .min(self.last_ns + 5 * MS)
            .min(self.status_due.unwrap_or(u64::MAX))
    }

    fn advance(&mut self, now_ns: u64) {
        const STEP: u64 = 5 * MS;
        while self.last_ns + STEP <= now_ns {
            self.last_ns += STEP;
            self.step(self.last_ns, 0.005);
        }
    }

    fn step(&mut self, now: u64, dt: f64) {
        // The control tick takes the setpoint that arrived since the last one.
        let period = self.cfg.control_period_ms.max(1) * MS;
        if now % period < 5 * MS
            && let Some((sp, mut record)) = self.pending.take()
        {
            self.sp = Some(sp);
            if self.main == MAIN_OFFBOARD {
                self.stats.setpoints_accepted += 1;
                record.t_ns = now;
                record.time_boot_ms = self.boot_time_ns(now) / MS;
                self.log.push_back(record);
            }
        }
        // Offboard-loss failsafe.
        if self.armed && self.main == MAIN_OFFBOARD && !self.on_ground {
            let silent = self.sp_last_ns.map_or(u64::MAX, |l| now.saturating_sub(l));
            if silent > (self.cfg.offboard_loss_ms + self.cfg.loss_detection_ms) * MS {
                self.stats.failsafes += 1;
                self.failsafe = true;
                self.before_failsafe = Some((self.main, self.sub));
                self.status_text(
                    MavSeverity::MAV_SEVERITY_CRITICAL,
                    "Failsafe activated: offboard signal lost",
                );
                match self.cfg.loss_action {
                    LossAction::Posctl => self.set_mode(MAIN_POSCTL, 0),
                    LossAction::Hold => self.set_mode(MAIN_AUTO, SUB_LOITER),
                    LossAction::Land => self.set_mode(MAIN_AUTO, SUB_LAND),
                }
            }
        }
        let lim = self.cfg.limits;
        let demand = if !self.armed {
            Demand::Idle
        } else {
            let spooling =
                self.on_ground && now.saturating_sub(self.armed_at) < self.cfg.spoolup_ms * MS;
            match (self.main, self.sub) {
                _ if spooling => Demand::Idle,
                (MAIN_OFFBOARD, _) => match self.sp {
                    Some(sp) => Demand::Position {
                        target: sp.pos,
                        yaw_deg: if self.own_yaw(now) {
                            self.hold_yaw
                        } else {
                            sp.yaw_deg
                        },
                    },
                    None => Demand::Position {
                        target: self.hold_at,
                        yaw_deg: self.hold_yaw,
                    },
                },
                (MAIN_AUTO, SUB_TAKEOFF) => {
                    if (self.body.pos[2] - self.takeoff_to).abs() < 0.1 {
                        self.set_mode(MAIN_AUTO, SUB_LOITER);
                        self.hold_at[2] = self.takeoff_to;
                    }
                    Demand::Position {
                        target: [self.hold_at[0], self.hold_at[1], self.takeoff_to],
                        yaw_deg: self.hold_yaw,
                    }
                }
                (MAIN_AUTO, SUB_LAND) | (MAIN_POSCTL, _) => Demand::Descend {
                    speed: self.cfg.land_speed,
                    hold_ne: [self.hold_at[0], self.hold_at[1]],
                },
                (MAIN_AUTO, SUB_RTL) => {
                    let d = self.body.pos[0].hypot(self.body.pos[1]);
                    if d < 0.5 {
                        Demand::Descend {
                            speed: self.cfg.land_speed,
                            hold_ne: [0.0, 0.0],
                        }
                    } else {
                        Demand::Position {
                            target: [0.0, 0.0, self.body.pos[2].min(-5.0)],
                            yaw_deg: self.body.yaw_deg,
                        }
                    }
                }
                _ => Demand::Position {
                    target: self.hold_at,
                    yaw_deg: self.hold_yaw,
                },
            }
        };
        let demand = if matches!(
            (self.main, self.sub),
            (MAIN_OFFBOARD, _) | (MAIN_AUTO, SUB_LOITER)
        ) {
            self.with_hold_error(now, demand)
        } else {
            self.near_since = None;
            demand
        };
        // PX4's takeoff climbs slower than its position controller and slows early.
        let lim = if (self.main, self.sub) == (MAIN_AUTO, SUB_TAKEOFF) {
            Limits {
                v_up: self.cfg.takeoff_speed,
                k_z: self.cfg.takeoff_gain,
                ..lim
            }
        } else {
            lim
        };
        // On the ground, only an upward demand lifts off.
        let lifts = match demand {
            Demand::Position { target, .. } => target[2] < self.body.pos[2] - 0.05,
            _ => false,
        };
        if self.on_ground && !lifts {
            self.body.vel = [0.0; 3];
            self.body.acc = [0.0; 3];
            self.body.vel_cmd = [0.0; 3];
        } else {
            self.body.step(dt, demand, &lim);
        }
        // The ground holds the vehicle up.
        if self.body.pos[2] > 0.0 {
            self.body.pos[2] = 0.0;
            self.body.vel[2] = self.body.vel[2].min(0.0);
            self.body.acc[2] = self.body.acc[2].min(0.0);
        }
        // Land detection.
        let airborne = self.body.pos[2] < -0.1;
        if airborne && self.on_ground {
            self.on_ground = false;
            self.flew = true;
            self.liftoff_at = Some(now);
            self.landed_at = None;
        } else if !airborne && !self.on_ground && self.body.vel[2] >= -0.05 {
            let descending_mode = matches!(
                (self.main, self.sub),
                (MAIN_AUTO, SUB_LAND | SUB_RTL) | (MAIN_POSCTL, _)
            );
            if descending_mode || self.body.pos[2] >= -0.02 {
                // PX4's land detector concludes a while after ground contact.
                let since = *self.contact_at.get_or_insert(now);
                if now.saturating_sub(since) >= self.cfg.land_detect_ms * MS {
                    self.on_ground = true;
                    self.body.pos[2] = 0.0;
                    self.landed_at = Some(now);
                    self.contact_at = None;
                    // The local frame's ground moves at each landing (measured).
                    self.pick_ground();
                }
            } else {
                self.contact_at = None;
            }
        } else {
            self.contact_at = None;
        }
        // Automatic disarms.
        if self.armed && self.on_ground {
            if !self.flew && now.saturating_sub(self.armed_at) > self.cfg.disarm_preflight_ms * MS {
                self.status_text(
                    MavSeverity::MAV_SEVERITY_INFO,
                    "Disarmed: no takeoff (COM_DISARM_PRFLT)",
                );
                self.disarm();
            } else if let Some(l) = self.landed_at
                && self.flew
                && now.saturating_sub(l) > self.cfg.disarm_land_ms * MS
            {
                self.status_text(
                    MavSeverity::MAV_SEVERITY_INFO,
                    "Landing detected: disarmed (COM_DISARM_LAND)",
                );
                self.disarm();
            }
        }
        // Battery.
        if self.armed {
            let drain = if self.on_ground {
                self.cfg.drain_idle
            } else {
                self.cfg.drain_flying
            };
            self.battery_pct = (self.battery_pct - drain * dt).max(0.0);
        }
    }

    /// Leaving the ground in OFFBOARD, PX4 holds its own heading (and reports it as the
    /// target's yaw) until shortly after liftoff.
    fn own_yaw(&self, now: u64) -> bool {
        self.armed
            && self.main == MAIN_OFFBOARD
            && (self.on_ground
                || self
                    .liftoff_at
                    .is_some_and(|l| now.saturating_sub(l) < self.cfg.takeoff_yaw_ms * MS))
    }

    /// PX4 does not hold a position exactly: once the vehicle has settled near its target, it
    /// holds a point that drifts slowly between `hold_error_m[0]` and `[1]` away from it (a
    /// deterministic stand-in for SIH's estimator and wind errors; the target it reports is
    /// unchanged).
    fn with_hold_error(&mut self, now: u64, demand: Demand) -> Demand {
        let Demand::Position { target, yaw_deg } = demand else {
            self.near_since = None;
            return demand;
        };
        if target
            .iter()
            .zip(self.err_target)
            .any(|(a, b)| (a - b).abs() > 0.05)
        {
            self.err_target = target;
            self.near_since = None;
        }
        let p = self.body.pos;
        let d =
            ((target[0] - p[0]).powi(2) + (target[1] - p[1]).powi(2) + (target[2] - p[2]).powi(2))
                .sqrt();
        if self.near_since.is_none() && !self.on_ground && d < 0.3 {
            self.near_since = Some(now);
        }
        let Some(since) = self.near_since else {
            return demand;
        };
        #[allow(clippy::cast_precision_loss, reason = "seconds")]
        let (settled_s, t) = (
            now.saturating_sub(since) as f64 / 1e9,
            now.saturating_sub(self.boot_ns) as f64 / 1e9,
        );
        let ramp = ((settled_s - 1.0) / 2.0).clamp(0.0, 1.0);
        let [lo, hi] = self.cfg.hold_error_m;
        let tau = std::f64::consts::TAU;
        let m = (lo + hi) / 2.0 + (hi - lo) / 2.0 * (tau * t / 12.0).sin();
        let th = tau * t / 40.0;
        Demand::Position {
            target: [
                target[0] + ramp * m * th.cos(),
                target[1] + ramp * m * th.sin(),
                target[2],
            ],
            yaw_deg,
        }
    }

    fn landed_state(&self) -> MavLandedState {
        if self.on_ground {
            MavLandedState::MAV_LANDED_STATE_ON_GROUND
        } else if self.main == MAIN_AUTO && self.sub == SUB_LAND || self.main == MAIN_POSCTL {
            MavLandedState::MAV_LANDED_STATE_LANDING
        } else if self.main == MAIN_AUTO && self.sub == SUB_TAKEOFF {
            MavLandedState::MAV_LANDED_STATE_TAKEOFF
        } else {
            MavLandedState::MAV_LANDED_STATE_IN_AIR
        }
    }

    fn emit_streams(&mut self, now: u64) {
        // A status change reaches CURRENT_MODE now, at most at the stream's rate.
        let status_now = self.status_due.is_some_and(|d| now >= d);
        if status_now {
            self.status_due = None;
        }
        for gcs in [false, true] {
            let set = if gcs {
                &mut self.gcs_streams
            } else {
                &mut self.streams
            };
            let mut due: heapless::Vec<u32, 16> = heapless::Vec::new();
            for s in set.iter_mut() {
                if s.interval_ns == u64::MAX {
                    s.next_at = u64::MAX;
                    continue;
                }
                if s.msg_id == 436 && status_now {
                    s.next_at = s.next_at.min((s.last_sent + s.interval_ns).max(now));
                }
                if now < s.next_at {
                    continue;
                }
                s.next_at = if s.msg_id == 0 && self.cfg.heartbeat_late_ms > 0 {
                    // Slots 1 s apart; each beat leaves up to `heartbeat_late_ms` late.
                    let [on_offboard, on_gcs] = &mut self.heartbeat_slot;
                    let slot = if gcs { on_gcs } else { on_offboard };
                    *slot = if now - *slot > 2 * s.interval_ns {
                        now
                    } else {
                        *slot + s.interval_ns
                    };
                    self.heartbeats += 1;
                    #[allow(
                        clippy::cast_possible_truncation,
                        clippy::cast_sign_loss,
                        clippy::cast_precision_loss,
                        reason = "a fraction of a few hundred ms"
                    )]
                    let late = (unit(self.cfg.seed ^ 0x4842, self.heartbeats)
                        * (self.cfg.heartbeat_late_ms * MS) as f64)
                        as u64;
                    *slot + late
                } else if s.msg_id == 436 {
                    // vehicle_status is published every 500 ms (and on each change).
                    now + s.interval_ns.max(500 * MS)
                } else if now - s.next_at > s.interval_ns {
                    // Catch up without a burst after a long gap.
                    now + s.interval_ns
                } else {
                    s.next_at + s.interval_ns
                };
                s.last_sent = now;
                // At most 12 streams per link: always room.
                let _ = due.push(s.msg_id);
            }
            for id in due {
                if let Some(msg) = self.stream_message(id, now) {
                    if gcs {
                        self.gcs_outbox.push_back(msg);
                    } else {
                        self.outbox.push_back(msg);
                    }
                }
            }
        }
    }

    /// The stream message `msg_id` as it reads at `now`.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "telemetry encodings"
    )]
    fn stream_message(&self, msg_id: u32, now: u64) -> Option<MavMessage> {
        let boot_ms = (self.boot_time_ns(now) / MS) as u32;
        let b = self.body;
        let msg = match msg_id {
            0 => self.heartbeat(),
            32 => MavMessage::LOCAL_POSITION_NED(LOCAL_POSITION_NED_DATA {
                time_boot_ms: boot_ms,
                x: b.pos[0] as f32,
                y: b.pos[1] as f32,
                z: (b.pos[2] + self.ground) as f32,
                vx: b.vel[0] as f32,
                vy: b.vel[1] as f32,
                vz: b.vel[2] as f32,
            }),
            85 => {
                let (pos, yaw, mask, vel, acc) = match (self.armed, self.main, self.sp) {
                    (_, MAIN_OFFBOARD, Some(sp)) => (
                        sp.raw,
                        if self.own_yaw(now) {
                            self.hold_yaw.to_radians() as f32
                        } else {
                            sp.yaw_deg.to_radians() as f32
                        },
                        0u16,
                        b.vel_cmd,
                        b.acc,
                    ),
                    (true, _, _) => (
                        [
                            self.hold_at[0] as f32,
                            self.hold_at[1] as f32,
                            (self.hold_at[2] + self.ground) as f32,
                        ],
                        self.hold_yaw.to_radians() as f32,
                        0u16,
                        b.vel_cmd,
                        b.acc,
                    ),
                    _ => ([f32::NAN; 3], f32::NAN, 63u16, [0.0; 3], [0.0; 3]),
                };
                MavMessage::POSITION_TARGET_LOCAL_NED(POSITION_TARGET_LOCAL_NED_DATA {
                    time_boot_ms: boot_ms,
                    x: pos[0],
                    y: pos[1],
                    z: pos[2],
                    vx: vel[0] as f32,
                    vy: vel[1] as f32,
                    vz: vel[2] as f32,
                    afx: acc[0] as f32,
                    afy: acc[1] as f32,
                    afz: acc[2] as f32,
                    yaw,
                    yaw_rate: 0.0,
                    type_mask: PositionTargetTypemask::from_bits_truncate(mask),
                    coordinate_frame: MavFrame::MAV_FRAME_LOCAL_NED,
                })
            }
            30 => MavMessage::ATTITUDE(ATTITUDE_DATA {
                time_boot_ms: boot_ms,
                roll: (b.acc[1] / 9.81).atan() as f32,
                pitch: (-b.acc[0] / 9.81).atan() as f32,
                yaw: b.yaw_deg.to_radians() as f32,
                rollspeed: 0.0,
                pitchspeed: 0.0,
                yawspeed: 0.0,
            }),
            33 => {
                let [lat0, lon0, _] = self.origin;
                let lat = lat0 + b.pos[0] / 111_320.0;
                let lon = lon0 + b.pos[1] / (111_320.0 * lat0.to_radians().cos());
                MavMessage::GLOBAL_POSITION_INT(GLOBAL_POSITION_INT_DATA {
                    time_boot_ms: boot_ms,
                    lat: (lat * 1e7) as i32,
                    lon: (lon * 1e7) as i32,
                    alt: ((self.cfg.home_alt_m - b.pos[2]) * 1000.0) as i32,
                    relative_alt: (-b.pos[2] * 1000.0) as i32,
                    vx: (b.vel[0] * 100.0) as i16,
                    vy: (b.vel[1] * 100.0) as i16,
                    vz: (b.vel[2] * 100.0) as i16,
                    hdg: ((b.yaw_deg.rem_euclid(360.0)) * 100.0) as u16,
                })
            }
            147 => {
                let mv = self.voltage_mv();
                let mut voltages = [u16::MAX; 10];
                if let Some(v) = voltages.first_mut() {
                    *v = mv;
                }
                MavMessage::BATTERY_STATUS(BATTERY_STATUS_DATA {
                    current_consumed: -1,
                    energy_consumed: -1,
                    temperature: i16::MAX,
                    voltages,
                    current_battery: if self.armed { 1200 } else { 50 },
                    id: 0,
                    battery_function: MavBatteryFunction::MAV_BATTERY_FUNCTION_ALL,
                    mavtype: MavBatteryType::MAV_BATTERY_TYPE_LIPO,
                    battery_remaining: self.battery_pct.round() as i8,
                    ..BATTERY_STATUS_DATA::DEFAULT
                })
            }
            1 => MavMessage::SYS_STATUS(SYS_STATUS_DATA {
                onboard_control_sensors_present: MavSysStatusSensor::empty(),
                onboard_control_sensors_enabled: MavSysStatusSensor::empty(),
                onboard_control_sensors_health: MavSysStatusSensor::empty(),
                load: 300,
                voltage_battery: self.voltage_mv(),
                current_battery: if self.armed { 1200 } else { 50 },
                drop_rate_comm: 0,
                errors_comm: 0,
                errors_count1: 0,
                errors_count2: 0,
                errors_count3: 0,
                errors_count4: 0,
                battery_remaining: self.battery_pct.round() as i8,
                ..SYS_STATUS_DATA::DEFAULT
            }),
            245 => MavMessage::EXTENDED_SYS_STATE(EXTENDED_SYS_STATE_DATA {
                vtol_state: MavVtolState::MAV_VTOL_STATE_UNDEFINED,
                landed_state: self.landed_state(),
            }),
            242 => MavMessage::HOME_POSITION(HOME_POSITION_DATA {
                latitude: (self.cfg.home_lat * 1e7) as i32,
                longitude: (self.cfg.home_lon * 1e7) as i32,
                altitude: (self.cfg.home_alt_m * 1000.0) as i32,
                x: self.home_ne[0] as f32,
                y: self.home_ne[1] as f32,
                z: self.home_down as f32,
                q: [1.0, 0.0, 0.0, 0.0],
                approach_x: 0.0,
                approach_y: 0.0,
                approach_z: 0.0,
                time_usec: self.boot_time_ns(now) / 1000,
            }),
            49 => MavMessage::GPS_GLOBAL_ORIGIN(GPS_GLOBAL_ORIGIN_DATA {
                latitude: (self.origin[0] * 1e7).round() as i32,
                longitude: (self.origin[1] * 1e7).round() as i32,
                altitude: (self.origin[2] * 1000.0).round() as i32,
                time_usec: self.boot_time_ns(now) / 1000,
            }),
            436 => {
                let mode = (u32::from(self.sub) << 24) | (u32::from(self.main) << 16);
                MavMessage::CURRENT_MODE(CURRENT_MODE_DATA {
                    custom_mode: mode,
                    intended_custom_mode: mode,
                    standard_mode: MavStandardMode::MAV_STANDARD_MODE_NON_STANDARD,
                })
            }
            111 => MavMessage::TIMESYNC(TIMESYNC_DATA {
                tc1: 0,
                ts1: i64::try_from(self.boot_time_ns(now)).unwrap_or(i64::MAX),
                target_system: 0,
                target_component: 0,
            }),
            _ => return None,
        };
        Some(msg)
    }

    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "millivolts"
    )]
    fn voltage_mv(&self) -> u16 {
        (14_000.0 + 2_800.0 * self.battery_pct / 100.0) as u16
    }

    /// The next message to send on the offboard link, from [`Px4Sim::header`].
    pub fn poll_transmit(&mut self) -> Option<MavMessage> {
        self.outbox.pop_front()
    }

    /// The next message to send on the ground-station link.
    pub fn poll_transmit_gcs(&mut self) -> Option<MavMessage> {
        self.gcs_outbox.pop_front()
    }

    /// The next heartbeat of another component to forward to the ground station, with the
    /// header it came with.
    pub fn poll_forward_gcs(&mut self) -> Option<(MavHeader, MavMessage)> {
        self.gcs_forward.pop_front()
    }

    /// The header of every message the vehicle sends (the link layer fills the sequence).
    pub fn header(&self) -> MavHeader {
        MavHeader {
            system_id: u32::from(self.cfg.system_id),
            component_id: self.cfg.component_id,
            sequence: 0,
        }
    }

    /// The next accepted-setpoint record.
    pub fn poll_setpoint(&mut self) -> Option<SetpointRecord> {
        self.log.pop_front()
    }

    /// The next arrival record (with `SimConfig::record_arrivals`).
    pub fn poll_arrival(&mut self) -> Option<SetpointRecord> {
        self.arrivals.pop_front()
    }
}
