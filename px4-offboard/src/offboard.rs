//! The offboard state machine: pure, with time passed in and outputs polled.
//!
//! # Call order
//!
//! Feed every received message to [`Offboard::handle_message`], call
//! [`Offboard::handle_timeout`] when [`Offboard::poll_timeout`] passes, and after each call drain
//! [`Offboard::poll_transmit`] (messages to send, with [`Offboard::header`]) and
//! [`Offboard::poll_event`]. [`Offboard::try_enqueue`], [`Offboard::hold`] and
//! [`Offboard::command`] are inputs too.
//!
//! # Safety behaviour
//!
//! - A dispatched target is streamed only until `hold_margin_ms` before the `valid_until` its
//!   dispatch certified, so the vehicle has switched by the time the interval ends; at that
//!   instant (a timer, not the next stream tick) the bridge sends the hold and says so ([`Event::TargetExpired`], [`Event::Holding`]): by default it
//!   streams a hold at the position the vehicle was at for at most `hold_stream_ms`, then
//!   switches PX4 to HOLD (AUTO.LOITER) and stops streaming. It never re-sends an expired target.
//! - If the process stops, nothing is streamed, so PX4's own offboard-loss failsafe
//!   (`COM_OF_LOSS_T`) fires. The bridge never streams while the link is down.
//! - It never takes the vehicle away from a pilot, a failsafe, or an autopilot procedure
//!   (land, return, takeoff): [`Offboard::try_enqueue`] refuses with
//!   [`EnqueueError::NotOffboardCapable`].
//! - The pilot wins. The bridge flies only while the operator has handed it the vehicle
//!   ([`Offboard::permit_offboard`]; [`Config::offboard_permitted_at_start`] is off by
//!   default). A mode change it did not command while the vehicle is armed (an RC switch, a
//!   ground station, a PX4 failsafe) is an operator override ([`Event::Override`]): it stops
//!   streaming, cancels its own pending mode changes, withdraws the permission, and never
//!   enters OFFBOARD or commands a mode again until the operator permits it anew.
//! - A mode change is reported accepted only once the HEARTBEAT shows it.
//! - PX4 v1.16 sends `GPS_GLOBAL_ORIGIN` only when the origin moves or when asked: from link-up
//!   until it is heard the bridge asks for it (`MAV_CMD_REQUEST_MESSAGE`, every
//!   `origin_request_ms`) and says so ([`Event::OriginRequested`]).

use std::collections::{BTreeSet, VecDeque};

use mavlink::MavHeader;
use mavlink::dialects::common::{
    HEARTBEAT_DATA, MavAutopilot, MavCmd, MavFrame, MavLandedState, MavMessage, MavModeFlag,
    MavState, MavType, POSITION_TARGET_LOCAL_NED_DATA, PositionTargetTypemask,
    SET_POSITION_TARGET_LOCAL_NED_DATA, TIMESYNC_DATA,
};
use serde::{Deserialize, Serialize};

use crate::command::{Command, CommandId, CommandOutcome, CommandTracker};
use crate::mode::Px4Mode;
use crate::setpoint::{Fingerprint, Setpoint, TYPE_MASK_POSITION_YAW};
use crate::telemetry::{LandedState, Telemetry, TelemetryUpdate, TimeSource};
use crate::time::Mono;
use crate::timesync::TimeSync;

/// MAVLink message ids used for rate requests.
pub mod msg_id {
    /// `SYS_STATUS`.
    pub const SYS_STATUS: u32 = 1;
    /// `ATTITUDE`.
    pub const ATTITUDE: u32 = 30;
    /// `LOCAL_POSITION_NED`.
    pub const LOCAL_POSITION_NED: u32 = 32;
    /// `GLOBAL_POSITION_INT`.
    pub const GLOBAL_POSITION_INT: u32 = 33;
    /// `POSITION_TARGET_LOCAL_NED`.
    pub const POSITION_TARGET_LOCAL_NED: u32 = 85;
    /// `BATTERY_STATUS`.
    pub const BATTERY_STATUS: u32 = 147;
    /// `EXTENDED_SYS_STATE`.
    pub const EXTENDED_SYS_STATE: u32 = 245;
    /// `HOME_POSITION`.
    pub const HOME_POSITION: u32 = 242;
    /// `GPS_GLOBAL_ORIGIN`.
    pub const GPS_GLOBAL_ORIGIN: u32 = 49;
    /// `CURRENT_MODE`: PX4 sends it whenever its `vehicle_status` changes (at most at the
    /// requested rate), so a mode change shows in tens of milliseconds. PX4 refuses rate
    /// requests for HEARTBEAT (a constant 1 Hz stream).
    pub const CURRENT_MODE: u32 = 436;
}

/// How long a refused command waits for PX4's STATUSTEXT saying why, ms. PX4 publishes the
/// reason and the refusal separately; either may arrive first.
pub const STATUS_TEXT_WAIT_MS: u64 = 300;

/// The STATUSTEXT severities kept as reasons: `MAV_SEVERITY_WARNING` (4) or worse.
const REASON_SEVERITY: u8 = 4;

/// What the bridge does when a target's interval ends or a hold is requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldPolicy {
    /// Stream a hold at the vehicle's position for at most `max_ms`, then PX4 HOLD.
    PositionThenPx4 {
        /// Longest position-hold stream, ms.
        max_ms: u64,
    },
    /// Switch PX4 to HOLD (AUTO.LOITER) at once and stop streaming.
    Px4Hold,
}

/// Bridge configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Our system id.
    pub system_id: u8,
    /// Our component id (`MAV_COMP_ID_ONBOARD_COMPUTER` = 191 by default).
    pub component_id: u8,
    /// Only accept this autopilot system id; `None` takes the first PX4 heartbeat.
    pub autopilot_system: Option<u8>,
    /// Setpoint stream rate, Hz (PX4 needs more than 2 Hz).
    pub stream_hz: f64,
    /// Our heartbeat period, ms.
    pub heartbeat_ms: u64,
    /// The link is down after this long without an autopilot heartbeat, ms.
    pub link_timeout_ms: u64,
    /// A gap between autopilot heartbeats longer than this is counted
    /// ([`Stats::heartbeat_gaps`]) and reported ([`Event::HeartbeatGap`]), ms. PX4 sends 1 Hz;
    /// the largest gaps measured against PX4 v1.16 SITL on a loaded host were 1.03 s and
    /// 1.24 s, so 1.3 s counts only what is unusual (the link is down after `link_timeout_ms`).
    pub heartbeat_gap_ms: u64,
    /// The hold replaces a target this long before its `valid_until`, ms: one stream period
    /// plus the link's latency, so that no setpoint of the target is taken by the vehicle at or
    /// after the end of its certified interval.
    pub hold_margin_ms: u64,
    /// Command ACK timeout, ms.
    pub command_timeout_ms: u64,
    /// Command retries after the first send.
    pub command_retries: u8,
    /// How long a mode change may take to show in the heartbeat, ms.
    pub mode_confirm_ms: u64,
    /// Stream this long before asking PX4 for OFFBOARD, ms.
    pub offboard_warmup_ms: u64,
    /// Enter OFFBOARD from HOLD when a target is active, the warm-up has streamed and the
    /// operator permits it.
    pub auto_offboard: bool,
    /// Whether the operator's permission to fly is given at start. Off by default: the
    /// operator grants it ([`Offboard::permit_offboard`]), and an override withdraws it.
    pub offboard_permitted_at_start: bool,
    /// What to do when a target expires.
    pub hold: HoldPolicy,
    /// Telemetry rates to request with `MAV_CMD_SET_MESSAGE_INTERVAL`: (message id, Hz).
    pub message_rates: Vec<(u32, f64)>,
    /// TIMESYNC request period while unsynced and after, ms.
    pub timesync_ms: u64,
    /// After this many sends in a row fail, the vehicle cannot be reached whatever it says:
    /// the link is down until a send gets through ([`Offboard::handle_send_result`]).
    #[serde(default = "default_send_failures")]
    pub send_failures_link_down: u32,
    /// While the link is up and no `GPS_GLOBAL_ORIGIN` has come, ask for it
    /// (`MAV_CMD_REQUEST_MESSAGE`) this often, ms. PX4 v1.16 sends the origin only when it
    /// moves or when asked, so a gateway started after PX4 would otherwise never hear it.
    #[serde(default = "default_origin_request_ms")]
    pub origin_request_ms: u64,
    /// Unanswered TIMESYNC requests before falling back to arrival time.
    pub timesync_give_up: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            system_id: 1,
            component_id: 191,
            autopilot_system: None,
            stream_hz: 20.0,
            heartbeat_ms: 1000,
            link_timeout_ms: 1500,
            heartbeat_gap_ms: 1300,
            hold_margin_ms: 60,
            command_timeout_ms: 500,
            command_retries: 3,
            mode_confirm_ms: 2000,
            offboard_warmup_ms: 1000,
            auto_offboard: true,
            offboard_permitted_at_start: false,
            hold: HoldPolicy::PositionThenPx4 { max_ms: 5000 },
            message_rates: vec![
                (msg_id::LOCAL_POSITION_NED, 50.0),
                (msg_id::POSITION_TARGET_LOCAL_NED, 10.0),
                (msg_id::ATTITUDE, 20.0),
                (msg_id::GLOBAL_POSITION_INT, 10.0),
                // PX4's onboard profile sends BATTERY_STATUS at 0.5 Hz: too slow for a 5 s limit.
                (msg_id::BATTERY_STATUS, 2.0),
                (msg_id::EXTENDED_SYS_STATE, 2.0),
                (msg_id::SYS_STATUS, 2.0),
                // Home is re-sent so the gateway's `home` source stays fresh on long flights
                // (PX4 sends HOME_POSITION at 0.5 Hz in its normal profile).
                (msg_id::HOME_POSITION, 1.0),
                // PX4's origin stream sends only when the origin moves, whatever its rate: the
                // rate makes sure the stream exists on this link; the first value is requested
                // (`origin_request_ms`).
                (msg_id::GPS_GLOBAL_ORIGIN, 0.2),
                // A mode change from another link (a ground station's HOLD, an RC switch)
                // shows in no extra HEARTBEAT on this one: PX4's next 1 Hz heartbeat came
                // 912 ms later. CURRENT_MODE goes out on every status change, at most this
                // often: the override is seen within one interval.
                (msg_id::CURRENT_MODE, 20.0),
            ],
            timesync_ms: 1000,
            timesync_give_up: 5,
            send_failures_link_down: default_send_failures(),
            origin_request_ms: default_origin_request_ms(),
        }
    }
}

fn default_send_failures() -> u32 {
    10
}

fn default_origin_request_ms() -> u64 {
    2000
}

/// Why an enqueue was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnqueueError {
    /// No autopilot heartbeat within the link timeout.
    LinkDown,
    /// The bounded command queue is full.
    QueueFull,
    /// A pilot, a failsafe or an autopilot procedure owns the vehicle.
    NotOffboardCapable,
    /// The operator has not handed the vehicle to the bridge, or took it back (an override).
    NotPermitted,
    /// The setpoint has a non-finite field.
    InvalidSetpoint,
    /// `valid_until` is not in the future.
    Expired,
}

impl std::fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EnqueueError::LinkDown => "link to the autopilot is down",
            EnqueueError::QueueFull => "bridge queue is full",
            EnqueueError::NotOffboardCapable => "vehicle is not in an offboard-capable state",
            EnqueueError::NotPermitted => {
                "the operator has not handed the vehicle to the gateway (or took it back)"
            }
            EnqueueError::InvalidSetpoint => "setpoint has a non-finite field",
            EnqueueError::Expired => "the certified interval already ended",
        })
    }
}

impl std::error::Error for EnqueueError {}

/// Why the bridge holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// The target's certified interval ended.
    TargetExpired,
    /// The gateway asked for a hold.
    Requested,
    /// The position-hold stream reached its limit.
    HoldStreamLimit,
}

/// The longest `STATUSTEXT` text, bytes (MAVLink's `char[50]`).
pub const STATUSTEXT_LEN: usize = 50;

/// Why a `STATUSTEXT` was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusTextError {
    /// Empty, or longer than [`STATUSTEXT_LEN`] bytes.
    Length(usize),
    /// The autopilot link is down.
    LinkDown,
    /// The bridge's status-text queue is full (the gateway rate-limits below it).
    QueueFull,
}

impl std::fmt::Display for StatusTextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatusTextError::Length(n) => {
                write!(f, "a status text must be 1 to 50 bytes, this one has {n}")
            }
            StatusTextError::LinkDown => f.write_str("the autopilot link is down"),
            StatusTextError::QueueFull => f.write_str("the status-text queue is full"),
        }
    }
}

impl std::error::Error for StatusTextError {}

/// How the bridge holds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum HoldKind {
    /// Streaming a fixed position and yaw.
    PositionSetpoint {
        /// What is streamed.
        fingerprint: Fingerprint,
    },
    /// PX4 HOLD mode requested; nothing is streamed.
    Px4Hold,
}

/// Something the shell should know.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The autopilot was found.
    AutopilotDiscovered {
        /// System id.
        system_id: u8,
        /// Component id.
        component_id: u8,
    },
    /// Link health changed.
    Link {
        /// Up or down.
        up: bool,
        /// Time since the last autopilot heartbeat, ms.
        silent_ms: u64,
    },
    /// No `GPS_GLOBAL_ORIGIN` yet: the bridge asked PX4 for it (again). Until it comes the
    /// local frame has no place on the globe and the gateway's `origin` source is missing.
    OriginRequested {
        /// Requests sent since the link came up, this one included.
        attempt: u32,
    },
    /// A telemetry update.
    Telemetry(TelemetryUpdate),
    /// The autopilot's mode changed.
    ModeChanged {
        /// Previous mode, if known.
        from: Option<Px4Mode>,
        /// New mode.
        to: Px4Mode,
    },
    /// A mode change the bridge did not command, while armed: a pilot, a ground station or a
    /// PX4 failsafe took the vehicle. The bridge stopped streaming and will not fly again
    /// until the operator permits it ([`Offboard::permit_offboard`]).
    Override {
        /// The mode before.
        from: Option<Px4Mode>,
        /// The mode the vehicle is in now.
        to: Px4Mode,
        /// The binding of the target it stopped, if one was streaming.
        #[serde(default)]
        stopped: Option<[u8; 32]>,
    },
    /// The operator's permission to fly changed.
    Permission {
        /// Whether the bridge may fly now.
        permitted: bool,
    },
    /// Armed state changed.
    ArmedChanged {
        /// Armed now.
        armed: bool,
    },
    /// A command ended.
    Command {
        /// Its id.
        id: CommandId,
        /// The command.
        command: Command,
        /// How it ended.
        outcome: CommandOutcome,
        /// PX4's own words when it refused: the STATUSTEXT (warning or worse) it sent between
        /// the command and [`STATUS_TEXT_WAIT_MS`] after its refusal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A dispatched target started streaming.
    TargetStarted {
        /// The gateway's binding.
        binding: [u8; 32],
        /// Its fingerprint.
        fingerprint: Fingerprint,
        /// End of its certified interval.
        valid_until: Mono,
    },
    /// The autopilot echoed the active target (POSITION_TARGET_LOCAL_NED in OFFBOARD).
    TargetObserved {
        /// The gateway's binding.
        binding: [u8; 32],
        /// Its fingerprint.
        fingerprint: Fingerprint,
    },
    /// A target's certified interval ended; it is no longer sent.
    TargetExpired {
        /// The gateway's binding.
        binding: [u8; 32],
        /// Its fingerprint.
        fingerprint: Fingerprint,
    },
    /// The bridge holds.
    Holding {
        /// How.
        kind: HoldKind,
        /// Why.
        reason: HoldReason,
    },
    /// An enqueued target was dropped when it was processed.
    EnqueueDropped {
        /// The gateway's binding.
        binding: [u8; 32],
        /// Why.
        reason: EnqueueError,
    },
    /// The autopilot's heartbeats were further apart than `heartbeat_gap_ms`.
    HeartbeatGap {
        /// The gap, ms.
        gap_ms: u64,
    },
    /// TIMESYNC state.
    TimeSync {
        /// Whether an offset is known.
        synced: bool,
        /// Offset (autopilot minus companion), ns.
        offset_ns: Option<i64>,
        /// Last round trip, ns.
        rtt_ns: Option<u64>,
        /// The fitted rate difference (autopilot clock faster by), parts per million.
        skew_ppm: Option<f64>,
        /// How far a mapped time may be off, ns.
        uncertainty_ns: u64,
    },
    /// A STATUSTEXT from the autopilot.
    StatusText {
        /// `MAV_SEVERITY`.
        severity: u8,
        /// Text.
        text: String,
    },
}

/// Counters, for observability and the bad-input tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Messages handled.
    pub messages: u64,
    /// Messages from the autopilot's system.
    pub from_autopilot: u64,
    /// Messages from other systems, dropped.
    pub other_systems: u64,
    /// Frames the link layer could not parse, counted by the shell.
    pub parse_errors: u64,
    /// Setpoints sent.
    pub setpoints_sent: u64,
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// TIMESYNC requests sent.
    pub timesync_sent: u64,
    /// Autopilot heartbeat gaps longer than `heartbeat_gap_ms`.
    pub heartbeat_gaps: u64,
    /// The longest gap between autopilot heartbeats, ms.
    pub max_heartbeat_gap_ms: u64,
    /// Sends the transport refused, counted by the shell.
    pub send_errors: u64,
    /// `STATUSTEXT`s queued for the autopilot ([`Offboard::status_text`]).
    pub status_texts_sent: u64,
    /// `MAV_CMD_REQUEST_MESSAGE`s sent for `GPS_GLOBAL_ORIGIN`.
    pub origin_requests: u64,
}

#[derive(Clone, Copy, Debug)]
struct Active {
    sp: Setpoint,
    binding: [u8; 32],
    valid_until: Mono,
    observed: bool,
}

/// A refused command waiting for PX4's reason.
#[derive(Clone, Copy, Debug)]
struct AwaitReason {
    id: CommandId,
    command: Command,
    outcome: CommandOutcome,
    deadline: Mono,
}

#[derive(Clone, Copy, Debug)]
struct Hold {
    sp: Setpoint,
    since: Mono,
    max_ns: u64,
}

/// The bridge's state machine. See the module documentation.
#[derive(Debug)]
pub struct Offboard {
    cfg: Config,
    autopilot: Option<(u8, u8)>,
    last_heartbeat: Option<Mono>,
    link_up: bool,
    armed: bool,
    mode: Option<Px4Mode>,
    landed: LandedState,
    permitted: bool,
    /// The modes the bridge's latest mode-affecting command may lead to (a takeoff ends in
    /// HOLD by itself); any other mode while armed is an override.
    expected_modes: Vec<Px4Mode>,
    target: Option<Active>,
    hold: Option<Hold>,
    stream_since: Option<Mono>,
    last_position: Option<(Setpoint, Mono)>,
    next_stream: Mono,
    next_heartbeat: Mono,
    next_timesync: Mono,
    timesync: TimeSync,
    timesync_outstanding: BTreeSet<i64>,
    timesync_unanswered: u32,
    timesync_given_up: bool,
    rates_requested: bool,
    /// Whether a `GPS_GLOBAL_ORIGIN` was heard, when to ask for it next, and how often it
    /// was asked for since the link came up.
    origin_heard: bool,
    next_origin_request: Mono,
    origin_attempts: u32,
    commands: CommandTracker,
    /// An arm waiting for PX4 to show HOLD first: the mode change's id and the arm's.
    arm_after_hold: Option<(CommandId, CommandId)>,
    /// When each command not yet ended was submitted.
    submitted: Vec<(CommandId, Mono)>,
    /// PX4's recent warning-or-worse texts, oldest first (at most 8).
    texts: VecDeque<(Mono, String)>,
    /// Refused commands waiting for PX4's reason.
    awaiting_reason: VecDeque<AwaitReason>,
    /// Sends that failed in a row, and whether that made the vehicle unreachable.
    send_failures: u32,
    unreachable: bool,
    outbox: VecDeque<MavMessage>,
    events: VecDeque<Event>,
    stats: Stats,
}

fn clamp_rate_ns(hz: f64) -> u64 {
    let hz = if hz.is_finite() && hz > 0.0 {
        hz.clamp(2.5, 200.0)
    } else {
        20.0
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped positive"
    )]
    let ns = (1e9 / hz) as u64;
    ns
}

impl Offboard {
    /// A bridge that has heard nothing yet.
    pub fn new(cfg: Config, now: Mono) -> Offboard {
        let commands = CommandTracker::new(
            cfg.command_timeout_ms * 1_000_000,
            cfg.command_retries,
            cfg.mode_confirm_ms * 1_000_000,
        );
        Offboard {
            autopilot: None,
            last_heartbeat: None,
            link_up: false,
            armed: false,
            mode: None,
            landed: LandedState::Undefined,
            permitted: cfg.offboard_permitted_at_start,
            expected_modes: Vec::new(),
            target: None,
            hold: None,
            stream_since: None,
            last_position: None,
            next_stream: Mono::NEVER,
            next_heartbeat: now,
            next_timesync: Mono::NEVER,
            timesync: TimeSync::new(),
            timesync_outstanding: BTreeSet::new(),
            timesync_unanswered: 0,
            timesync_given_up: false,
            rates_requested: false,
            origin_heard: false,
            next_origin_request: Mono::NEVER,
            origin_attempts: 0,
            commands,
            arm_after_hold: None,
            submitted: Vec::new(),
            texts: VecDeque::new(),
            awaiting_reason: VecDeque::new(),
            send_failures: 0,
            unreachable: false,
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            cfg,
        }
    }

    /// The header our messages carry (the link layer fills the sequence).
    pub fn header(&self) -> MavHeader {
        MavHeader {
            system_id: u32::from(self.cfg.system_id),
            component_id: self.cfg.component_id,
            sequence: 0,
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Counts a frame the link layer could not parse.
    pub fn note_parse_error(&mut self) {
        self.stats.parse_errors += 1;
    }

    /// The shell tried to send a message: `ok` when the transport took it. After
    /// [`Config::send_failures_link_down`] failures in a row the link is down (the vehicle gets
    /// nothing we send, whatever it says: no setpoint is streamed, commands end `LinkLost`), and
    /// stays down until a send gets through and the vehicle is heard again.
    pub fn handle_send_result(&mut self, now: Mono, ok: bool) {
        if ok {
            self.send_failures = 0;
            self.unreachable = false;
            return;
        }
        self.stats.send_errors += 1;
        self.send_failures = self.send_failures.saturating_add(1);
        if self.send_failures >= self.cfg.send_failures_link_down.max(1) && !self.unreachable {
            self.unreachable = true;
            if self.link_up {
                let silent = self.last_heartbeat.map_or(0, |h| now.since(h));
                self.link_down(silent);
            }
        }
    }

    /// The link went down: say so, end the commands in flight, stop streaming.
    fn link_down(&mut self, silent_ns: u64) {
        self.link_up = false;
        self.events.push_back(Event::Link {
            up: false,
            silent_ms: silent_ns / 1_000_000,
        });
        self.commands.handle_link_lost();
        // Nothing is streamed without a link; a target that is still valid resumes when the
        // link returns, an expired one never does.
        self.stream_since = None;
    }

    /// Whether the link is up.
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// The autopilot's (system, component), once discovered.
    pub fn autopilot(&self) -> Option<(u8, u8)> {
        self.autopilot
    }

    /// The autopilot's mode, once heard.
    pub fn mode(&self) -> Option<Px4Mode> {
        self.mode
    }

    /// Whether the autopilot reports armed.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Time since the last autopilot heartbeat, if one was heard.
    pub fn silent_ns(&self, now: Mono) -> Option<u64> {
        self.last_heartbeat.map(|h| now.since(h))
    }

    /// Whether a dispatched setpoint would be taken now: link up, the operator's permission,
    /// and the vehicle not owned by a pilot, a failsafe or an autopilot procedure.
    pub fn offboard_capable(&self) -> bool {
        self.link_up
            && self.permitted
            && !(self.armed && self.mode.is_some_and(Px4Mode::owned_by_autopilot_or_pilot))
    }

    /// Whether the operator has handed the vehicle to the bridge (and not taken it back).
    pub fn permitted(&self) -> bool {
        self.permitted
    }

    /// The operator hands the vehicle to the bridge (again): it may enter OFFBOARD and
    /// command modes until the next override.
    pub fn permit_offboard(&mut self) {
        if !self.permitted {
            self.permitted = true;
            self.events.push_back(Event::Permission { permitted: true });
        }
    }

    /// The target being streamed, with its binding and end.
    pub fn active_target(&self) -> Option<(Setpoint, [u8; 32], Mono)> {
        self.target.map(|t| (t.sp, t.binding, t.valid_until))
    }

    fn target_ids(&self) -> (u8, u8) {
        self.autopilot
            .unwrap_or((self.cfg.autopilot_system.unwrap_or(1), 1))
    }

    /// Takes one exact setpoint, to be streamed until `valid_until`. Returns at once.
    ///
    /// # Errors
    /// [`EnqueueError`] when the link is down, the vehicle is owned by a pilot, a failsafe or
    /// an autopilot procedure, the setpoint is not finite, or the interval already ended.
    pub fn try_enqueue(
        &mut self,
        now: Mono,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<(), EnqueueError> {
        if !sp.is_finite() {
            return Err(EnqueueError::InvalidSetpoint);
        }
        if self.hold_at(valid_until) <= now {
            return Err(EnqueueError::Expired);
        }
        if !self.link_up {
            return Err(EnqueueError::LinkDown);
        }
        if !self.permitted {
            return Err(EnqueueError::NotPermitted);
        }
        if !self.offboard_capable() {
            return Err(EnqueueError::NotOffboardCapable);
        }
        self.target = Some(Active {
            sp,
            binding,
            valid_until,
            observed: false,
        });
        self.hold = None;
        if self.stream_since.is_none() {
            self.stream_since = Some(now);
        }
        self.next_stream = now;
        self.events.push_back(Event::TargetStarted {
            binding,
            fingerprint: sp.fingerprint(),
            valid_until,
        });
        Ok(())
    }

    /// When the hold replaces a target certified until `valid_until`.
    fn hold_at(&self, valid_until: Mono) -> Mono {
        valid_until.sub_ns(self.cfg.hold_margin_ms.saturating_mul(1_000_000))
    }

    /// Stops the current target and holds (per the hold policy).
    pub fn hold(&mut self, now: Mono) {
        self.target = None;
        self.enter_hold(now, HoldReason::Requested);
    }

    /// Sends a command; its outcome arrives as [`Event::Command`] with the returned id.
    ///
    /// An arm while the vehicle shows a mode that would move it once armed (OFFBOARD while
    /// the bridge streams nothing: PX4 then refuses to arm, "Resolve system health failures
    /// first", after a landing or a failsafe from OFFBOARD; AUTO.TAKEOFF, LAND, RTL or MISSION
    /// set while disarmed) first switches PX4 to HOLD and waits for the heartbeat to show it;
    /// the arm follows only then, and ends with the mode change's outcome if PX4 does not
    /// switch.
    pub fn command(&mut self, now: Mono, command: Command) -> CommandId {
        if command == Command::Arm && !self.armed && self.arm_needs_hold() {
            let arm = self.commands.reserve();
            self.submitted.push((arm, now));
            let hold = self.command(
                now,
                Command::SetMode {
                    mode: Px4Mode::HOLD,
                },
            );
            self.arm_after_hold = Some((hold, arm));
            return arm;
        }
        let expected: &[Px4Mode] = match command {
            Command::SetMode { mode } => &[mode],
            // PX4 goes to HOLD by itself when the takeoff ends, and RTL lands at home.
            Command::Takeoff { .. } => &[Px4Mode::TAKEOFF, Px4Mode::HOLD],
            Command::ReturnToLaunch => &[Px4Mode::RTL, Px4Mode::LAND],
            Command::Land => &[Px4Mode::LAND],
            _ => &[],
        };
        if !expected.is_empty() {
            self.expected_modes = expected.to_vec();
        }
        let target = self.target_ids();
        let id = self.commands.submit(now, command, target);
        self.submitted.push((id, now));
        self.flush_commands(now);
        id
    }

    /// Whether arming now would set the vehicle moving by itself, or PX4 would refuse it for
    /// the mode it shows: OFFBOARD with no stream from us, or an AUTO procedure other than
    /// HOLD.
    fn arm_needs_hold(&self) -> bool {
        let streaming = self.target.is_some() || self.hold.is_some();
        self.mode.is_some_and(|m| {
            (m == Px4Mode::OFFBOARD && !streaming)
                || (m.main == crate::mode::main::AUTO && m != Px4Mode::HOLD)
        })
    }

    fn flush_commands(&mut self, now: Mono) {
        while let Some(c) = self.commands.poll_transmit() {
            self.outbox.push_back(MavMessage::COMMAND_LONG(c));
        }
        while let Some((id, command, outcome)) = self.commands.poll_done() {
            self.command_ended(now, id, command, outcome);
        }
    }

    /// A command ended: an arm waiting for HOLD goes out (or ends with the mode change's
    /// outcome); a refusal waits briefly for PX4's reason.
    fn command_ended(
        &mut self,
        now: Mono,
        id: CommandId,
        command: Command,
        outcome: CommandOutcome,
    ) {
        let since = self.submitted_at(id).unwrap_or(now);
        if let Some((hold, arm)) = self.arm_after_hold
            && hold == id
        {
            self.arm_after_hold = None;
            self.report(now, id, command, outcome, since);
            if outcome == CommandOutcome::Accepted && !self.armed {
                let target = self.target_ids();
                self.commands.submit_as(now, arm, Command::Arm, target);
                while let Some(c) = self.commands.poll_transmit() {
                    self.outbox.push_back(MavMessage::COMMAND_LONG(c));
                }
            } else if outcome == CommandOutcome::Accepted {
                // Armed meanwhile (another link): the arm asked for holds.
                let since = self.submitted_at(arm).unwrap_or(since);
                self.report(now, arm, Command::Arm, outcome, since);
            } else {
                let since = self.submitted_at(arm).unwrap_or(since);
                self.report(now, arm, Command::Arm, outcome, since);
            }
            return;
        }
        self.report(now, id, command, outcome, since);
    }

    fn submitted_at(&mut self, id: CommandId) -> Option<Mono> {
        let k = self.submitted.iter().position(|(i, _)| *i == id)?;
        Some(self.submitted.swap_remove(k).1)
    }

    /// Reports a command's end, with PX4's reason for a refusal: a text already received
    /// since the command was submitted, or the next one within [`STATUS_TEXT_WAIT_MS`].
    fn report(
        &mut self,
        now: Mono,
        id: CommandId,
        command: Command,
        outcome: CommandOutcome,
        since: Mono,
    ) {
        if outcome == CommandOutcome::Accepted {
            self.events.push_back(Event::Command {
                id,
                command,
                outcome,
                reason: None,
            });
            return;
        }
        let reason = self
            .texts
            .iter()
            .rev()
            .find(|(t, _)| *t >= since)
            .map(|(_, text)| text.clone());
        let refused = matches!(
            outcome,
            CommandOutcome::Denied | CommandOutcome::TemporarilyRejected | CommandOutcome::Failed
        );
        if reason.is_none() && refused {
            self.awaiting_reason.push_back(AwaitReason {
                id,
                command,
                outcome,
                deadline: now.add_ms(STATUS_TEXT_WAIT_MS),
            });
            return;
        }
        self.events.push_back(Event::Command {
            id,
            command,
            outcome,
            reason,
        });
    }

    /// A warning-or-worse STATUSTEXT from PX4: kept as the reason for refusals.
    fn note_reason(&mut self, now: Mono, text: &str) {
        self.texts.push_back((now, text.to_string()));
        while self.texts.len() > 8 {
            self.texts.pop_front();
        }
        for a in std::mem::take(&mut self.awaiting_reason) {
            self.events.push_back(Event::Command {
                id: a.id,
                command: a.command,
                outcome: a.outcome,
                reason: Some(text.to_string()),
            });
        }
    }

    /// Refusals whose wait for a reason is over.
    fn reasons_due(&mut self, now: Mono) {
        while self
            .awaiting_reason
            .front()
            .is_some_and(|a| a.deadline <= now)
        {
            if let Some(a) = self.awaiting_reason.pop_front() {
                self.events.push_back(Event::Command {
                    id: a.id,
                    command: a.command,
                    outcome: a.outcome,
                    reason: None,
                });
            }
        }
    }

    fn enter_hold(&mut self, now: Mono, reason: HoldReason) {
        let max_ns = match self.cfg.hold {
            HoldPolicy::PositionThenPx4 { max_ms } => max_ms * 1_000_000,
            HoldPolicy::Px4Hold => 0,
        };
        let position = self.last_position.map(|(p, _)| p);
        match (max_ns, position) {
            (m, Some(p)) if m > 0 && self.link_up => {
                self.hold = Some(Hold {
                    sp: p,
                    since: now,
                    max_ns: m,
                });
                self.next_stream = now;
                self.events.push_back(Event::Holding {
                    kind: HoldKind::PositionSetpoint {
                        fingerprint: p.fingerprint(),
                    },
                    reason,
                });
            }
            _ => self.px4_hold(now, reason),
        }
    }

    fn px4_hold(&mut self, now: Mono, reason: HoldReason) {
        self.hold = None;
        self.stream_since = None;
        self.next_stream = Mono::NEVER;
        // Without the operator's permission the vehicle is theirs: no mode command.
        if self.permitted && self.link_up && self.armed && self.mode != Some(Px4Mode::HOLD) {
            self.command(
                now,
                Command::SetMode {
                    mode: Px4Mode::HOLD,
                },
            );
        }
        self.events.push_back(Event::Holding {
            kind: HoldKind::Px4Hold,
            reason,
        });
    }

    fn operator_override(&mut self, now: Mono, from: Option<Px4Mode>, to: Px4Mode) {
        let stopped = self.target.take().map(|t| {
            self.events.push_back(Event::TargetExpired {
                binding: t.binding,
                fingerprint: t.sp.fingerprint(),
            });
            t.binding
        });
        self.hold = None;
        self.stream_since = None;
        self.next_stream = Mono::NEVER;
        self.expected_modes.clear();
        self.commands.cancel_mode_changes(now);
        self.events.push_back(Event::Override { from, to, stopped });
        if self.permitted {
            self.permitted = false;
            self.events
                .push_back(Event::Permission { permitted: false });
        }
    }

    fn map_time(&self, now: Mono, time_boot_ms: u32) -> (Mono, TimeSource) {
        let remote_ns = i64::from(time_boot_ms) * 1_000_000;
        match self.timesync.to_local(remote_ns) {
            // A mapped time in the future is clock error; never report data newer than now.
            Some(t) if t <= now => (t, TimeSource::Mapped),
            Some(_) => (now, TimeSource::Mapped),
            None => (now, TimeSource::Arrival),
        }
    }

    fn telemetry(
        &mut self,
        generated_at: Mono,
        received_at: Mono,
        time_source: TimeSource,
        data: Telemetry,
    ) {
        let uncertainty_ns = match time_source {
            TimeSource::Mapped => self.timesync.uncertainty_ns(),
            TimeSource::Arrival => 0,
        };
        self.events.push_back(Event::Telemetry(TelemetryUpdate {
            generated_at,
            received_at,
            time_source,
            uncertainty_ns,
            data,
        }));
    }

    /// Feeds one received message.
    pub fn handle_message(&mut self, now: Mono, header: &MavHeader, msg: &MavMessage) {
        self.stats.messages += 1;
        let sys = u8::try_from(header.system_id).unwrap_or(0);
        if self.autopilot.is_none()
            && let MavMessage::HEARTBEAT(hb) = msg
        {
            let is_autopilot = hb.autopilot != MavAutopilot::MAV_AUTOPILOT_INVALID
                && !matches!(
                    hb.mavtype,
                    MavType::MAV_TYPE_GCS | MavType::MAV_TYPE_ONBOARD_CONTROLLER
                );
            let wanted = self.cfg.autopilot_system.is_none_or(|s| s == sys);
            if is_autopilot && wanted {
                self.autopilot = Some((sys, header.component_id));
                self.events.push_back(Event::AutopilotDiscovered {
                    system_id: sys,
                    component_id: header.component_id,
                });
                self.next_timesync = now;
            }
        }
        let Some((ap_sys, ap_comp)) = self.autopilot else {
            self.stats.other_systems += 1;
            return;
        };
        if sys != ap_sys {
            self.stats.other_systems += 1;
            return;
        }
        self.stats.from_autopilot += 1;
        let target = (ap_sys, ap_comp);
        match msg {
            MavMessage::HEARTBEAT(hb) if header.component_id == ap_comp => {
                self.on_heartbeat(now, hb, target);
            }
            MavMessage::HEARTBEAT(_) => {}
            MavMessage::LOCAL_POSITION_NED(_)
            | MavMessage::ATTITUDE(_)
            | MavMessage::GLOBAL_POSITION_INT(_)
            | MavMessage::BATTERY_STATUS(_)
            | MavMessage::SYS_STATUS(_)
            | MavMessage::HOME_POSITION(_)
            | MavMessage::GPS_GLOBAL_ORIGIN(_)
            | MavMessage::EXTENDED_SYS_STATE(_) => self.on_telemetry_message(now, msg),
            MavMessage::POSITION_TARGET_LOCAL_NED(p) => self.on_position_target(now, p),
            MavMessage::CURRENT_MODE(m) if header.component_id == ap_comp => {
                self.on_mode(now, Px4Mode::from_custom_mode(m.custom_mode), false);
            }
            MavMessage::COMMAND_ACK(ack) => {
                let ours = ack.target_system == 0 || ack.target_system == self.cfg.system_id;
                if ours {
                    self.commands
                        .handle_ack(now, ack.command, ack.result, target);
                    self.flush_commands(now);
                }
            }
            MavMessage::TIMESYNC(ts) => self.on_timesync(now, ts, target),
            MavMessage::STATUSTEXT(st) => {
                let text = st
                    .text
                    .to_str()
                    .unwrap_or("")
                    .trim_end_matches('\0')
                    .to_string();
                let severity = st.severity as u8;
                if severity <= REASON_SEVERITY {
                    self.note_reason(now, &text);
                }
                self.events.push_back(Event::StatusText { severity, text });
            }
            _ => {}
        }
        self.flush_commands(now);
    }

    /// A telemetry message: position, attitude, global position, battery, home, origin, landed
    /// state, each stamped with its generation time where it carries one.
    fn on_telemetry_message(&mut self, now: Mono, msg: &MavMessage) {
        match msg {
            MavMessage::LOCAL_POSITION_NED(p) => {
                let (t, src) = self.map_time(now, p.time_boot_ms);
                let yaw = self.last_position.map_or(0.0, |(s, _)| s.yaw_deg);
                self.last_position = Some((
                    Setpoint {
                        north_m: p.x,
                        east_m: p.y,
                        down_m: p.z,
                        yaw_deg: yaw,
                    },
                    t,
                ));
                self.telemetry(
                    t,
                    now,
                    src,
                    Telemetry::LocalPosition {
                        north_m: p.x,
                        east_m: p.y,
                        down_m: p.z,
                        vn: p.vx,
                        ve: p.vy,
                        vd: p.vz,
                    },
                );
            }
            MavMessage::ATTITUDE(a) => {
                let (t, src) = self.map_time(now, a.time_boot_ms);
                if let Some((sp, _)) = self.last_position.as_mut() {
                    sp.yaw_deg = a.yaw.to_degrees();
                }
                self.telemetry(
                    t,
                    now,
                    src,
                    Telemetry::Attitude {
                        roll: a.roll,
                        pitch: a.pitch,
                        yaw: a.yaw,
                    },
                );
            }
            MavMessage::GLOBAL_POSITION_INT(g) => {
                let (t, src) = self.map_time(now, g.time_boot_ms);
                #[allow(clippy::cast_precision_loss, reason = "1e-7 degree and mm units")]
                self.telemetry(
                    t,
                    now,
                    src,
                    Telemetry::GlobalPosition {
                        lat_deg: f64::from(g.lat) / 1e7,
                        lon_deg: f64::from(g.lon) / 1e7,
                        alt_m: g.alt as f32 / 1000.0,
                        relative_alt_m: g.relative_alt as f32 / 1000.0,
                    },
                );
            }
            MavMessage::BATTERY_STATUS(b) => {
                let voltage = b
                    .voltages
                    .first()
                    .copied()
                    .filter(|v| *v != u16::MAX)
                    .map(|v| f32::from(v) / 1000.0);
                let remaining = (b.battery_remaining >= 0).then(|| f32::from(b.battery_remaining));
                self.telemetry(
                    now,
                    now,
                    TimeSource::Arrival,
                    Telemetry::Battery {
                        remaining_pct: remaining,
                        voltage_v: voltage,
                    },
                );
            }
            MavMessage::SYS_STATUS(s) => {
                let voltage =
                    (s.voltage_battery != u16::MAX).then(|| f32::from(s.voltage_battery) / 1000.0);
                let remaining = (s.battery_remaining >= 0).then(|| f32::from(s.battery_remaining));
                self.telemetry(
                    now,
                    now,
                    TimeSource::Arrival,
                    Telemetry::Battery {
                        remaining_pct: remaining,
                        voltage_v: voltage,
                    },
                );
            }
            MavMessage::HOME_POSITION(h) => {
                #[allow(clippy::cast_precision_loss, reason = "1e-7 degree and mm units")]
                let data = Telemetry::Home {
                    north_m: h.x,
                    east_m: h.y,
                    down_m: h.z,
                    lat_deg: f64::from(h.latitude) / 1e7,
                    lon_deg: f64::from(h.longitude) / 1e7,
                    alt_m: h.altitude as f32 / 1000.0,
                };
                if h.x.is_finite() && h.y.is_finite() && h.z.is_finite() {
                    self.telemetry(now, now, TimeSource::Arrival, data);
                }
            }
            MavMessage::GPS_GLOBAL_ORIGIN(o) => {
                self.origin_heard = true;
                self.next_origin_request = Mono::NEVER;
                #[allow(clippy::cast_precision_loss, reason = "1e-7 degree and mm units")]
                let data = Telemetry::Origin {
                    lat_deg: f64::from(o.latitude) / 1e7,
                    lon_deg: f64::from(o.longitude) / 1e7,
                    alt_m: o.altitude as f32 / 1000.0,
                };
                self.telemetry(now, now, TimeSource::Arrival, data);
            }
            MavMessage::EXTENDED_SYS_STATE(e) => {
                let state = match e.landed_state {
                    MavLandedState::MAV_LANDED_STATE_ON_GROUND => LandedState::OnGround,
                    MavLandedState::MAV_LANDED_STATE_IN_AIR => LandedState::InAir,
                    MavLandedState::MAV_LANDED_STATE_TAKEOFF => LandedState::Takeoff,
                    MavLandedState::MAV_LANDED_STATE_LANDING => LandedState::Landing,
                    MavLandedState::MAV_LANDED_STATE_UNDEFINED => LandedState::Undefined,
                };
                self.landed = state;
                self.telemetry(now, now, TimeSource::Arrival, Telemetry::Landed { state });
            }
            _ => {}
        }
    }

    /// The autopilot's heartbeat: link health, armed state and mode (an override when the mode
    /// changed and the bridge did not command it), and the telemetry rates on the first one.
    fn on_heartbeat(&mut self, now: Mono, hb: &HEARTBEAT_DATA, target: (u8, u8)) {
        if let Some(prev) = self.last_heartbeat {
            let gap_ms = now.since(prev) / 1_000_000;
            self.stats.max_heartbeat_gap_ms = self.stats.max_heartbeat_gap_ms.max(gap_ms);
            if gap_ms > self.cfg.heartbeat_gap_ms {
                self.stats.heartbeat_gaps += 1;
                self.events.push_back(Event::HeartbeatGap { gap_ms });
            }
        }
        self.last_heartbeat = Some(now);
        // A vehicle we cannot send to is not linked, however well we hear it.
        if !self.link_up && !self.unreachable {
            self.link_up = true;
            self.events.push_back(Event::Link {
                up: true,
                silent_ms: 0,
            });
            if !self.origin_heard {
                // Asked for after the rate requests have gone out (they share the queue).
                self.next_origin_request = now;
                self.origin_attempts = 0;
            }
        }
        let armed = hb
            .base_mode
            .contains(MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED);
        let mode = Px4Mode::from_custom_mode(hb.custom_mode);
        if armed != self.armed {
            self.armed = armed;
            self.events.push_back(Event::ArmedChanged { armed });
        }
        self.on_mode(now, mode, true);
        self.telemetry(
            now,
            now,
            TimeSource::Arrival,
            Telemetry::Heartbeat {
                armed,
                mode,
                system_status: hb.system_status as u8,
            },
        );
        if !self.rates_requested {
            self.rates_requested = true;
            for (id, hz) in self.cfg.message_rates.clone() {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "interval in µs of a positive rate"
                )]
                let interval_us = if hz > 0.0 { (1e6 / hz) as i32 } else { -1 };
                self.commands.submit(
                    now,
                    Command::SetMessageInterval {
                        message_id: id,
                        interval_us,
                    },
                    target,
                );
            }
        }
    }

    /// The autopilot's mode, from its HEARTBEAT or its CURRENT_MODE (which PX4 sends on every
    /// change, at most at the requested rate, so an override is seen in tens of milliseconds
    /// rather than at the next 1 Hz heartbeat).
    ///
    /// CURRENT_MODE carries no armed flag, and on the ground PX4 changes its mode as it
    /// disarms (after a landing it reads OFFBOARD or HOLD again) before the heartbeat says it
    /// disarmed: there, only a heartbeat, which carries both, can show an override.
    fn on_mode(&mut self, now: Mono, mode: Px4Mode, with_armed_flag: bool) {
        let from = self.mode;
        if from != Some(mode) {
            self.events.push_back(Event::ModeChanged { from, to: mode });
            self.mode = Some(mode);
        }
        self.commands.handle_mode(mode);
        self.flush_commands(now);
        // INVARIANT (the pilot wins): a mode change the bridge did not command while
        // armed takes the vehicle from the gateway until the operator hands it back.
        let knows_armed = with_armed_flag || self.landed != LandedState::OnGround;
        if from.is_some_and(|f| f != mode)
            && self.armed
            && knows_armed
            && !self.expected_modes.contains(&mode)
        {
            self.operator_override(now, from, mode);
        }
        // If the vehicle left OFFBOARD while a target streams (pilot, failsafe), stop.
        if self.armed
            && mode.owned_by_autopilot_or_pilot()
            && (self.target.is_some() || self.hold.is_some())
        {
            self.target = None;
            self.hold = None;
            self.stream_since = None;
            self.next_stream = Mono::NEVER;
            self.events.push_back(Event::StatusText {
                severity: 4,
                text: format!("{mode} owns the vehicle: stopped streaming"),
            });
        }
    }

    /// PX4's own report of the target it flies: the dispatched target is observed once PX4, in
    /// OFFBOARD, echoes its fingerprint.
    fn on_position_target(&mut self, now: Mono, p: &POSITION_TARGET_LOCAL_NED_DATA) {
        let (t, src) = self.map_time(now, p.time_boot_ms);
        let set = p.x.is_finite() && p.y.is_finite() && p.z.is_finite();
        let yaw_deg = if p.yaw.is_finite() {
            p.yaw.to_degrees()
        } else {
            f32::NAN
        };
        let fingerprint = set.then(|| {
            Fingerprint::of(
                p.x,
                p.y,
                p.z,
                if yaw_deg.is_finite() { yaw_deg } else { 0.0 },
            )
        });
        if let (Some(fp), Some(active)) = (fingerprint, self.target.as_mut())
            && !active.observed
            && self.mode == Some(Px4Mode::OFFBOARD)
            && fp == active.sp.fingerprint()
        {
            active.observed = true;
            self.events.push_back(Event::TargetObserved {
                binding: active.binding,
                fingerprint: fp,
            });
        }
        self.telemetry(
            t,
            now,
            src,
            Telemetry::PositionTarget {
                north_m: p.x,
                east_m: p.y,
                down_m: p.z,
                yaw_deg,
                type_mask: p.type_mask.bits(),
                frame: p.coordinate_frame as u8,
                fingerprint,
            },
        );
    }

    /// TIMESYNC: the autopilot's request answered with our clock, or its reply to ours folded
    /// into the offset estimate.
    fn on_timesync(&mut self, now: Mono, ts: &TIMESYNC_DATA, target: (u8, u8)) {
        let (ap_sys, ap_comp) = target;
        if ts.tc1 == 0 {
            // A request from the autopilot: answer with our clock.
            self.outbox.push_back(MavMessage::TIMESYNC(TIMESYNC_DATA {
                tc1: i64::try_from(now.0).unwrap_or(i64::MAX),
                ts1: ts.ts1,
                target_system: ap_sys,
                target_component: ap_comp,
            }));
        } else if self.timesync_outstanding.remove(&ts.ts1) {
            self.timesync_unanswered = 0;
            if self.timesync.handle_reply(now, ts.tc1, ts.ts1) {
                self.timesync_given_up = false;
                self.events.push_back(Event::TimeSync {
                    synced: true,
                    offset_ns: self.timesync.offset_ns(),
                    rtt_ns: self.timesync.last_rtt_ns(),
                    skew_ppm: self.timesync.skew_ppm(),
                    uncertainty_ns: self.timesync.uncertainty_ns(),
                });
            }
        }
    }

    /// Timers due at `now`: link health, heartbeat, TIMESYNC, commands, the setpoint stream.
    pub fn handle_timeout(&mut self, now: Mono) {
        // Link health.
        if self.link_up {
            let silent = self.last_heartbeat.map_or(u64::MAX, |h| now.since(h));
            if silent > self.cfg.link_timeout_ms * 1_000_000 {
                self.link_down(silent);
            }
        }
        // Our heartbeat.
        if now >= self.next_heartbeat {
            self.outbox.push_back(MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                custom_mode: 0,
                mavtype: MavType::MAV_TYPE_ONBOARD_CONTROLLER,
                autopilot: MavAutopilot::MAV_AUTOPILOT_INVALID,
                base_mode: MavModeFlag::empty(),
                system_status: MavState::MAV_STATE_ACTIVE,
                mavlink_version: 3,
            }));
            self.stats.heartbeats_sent += 1;
            self.next_heartbeat = now.add_ms(self.cfg.heartbeat_ms);
        }
        // TIMESYNC.
        if let Some((sys, comp)) = self.autopilot {
            if now >= self.next_timesync && !self.link_up {
                // Nothing to synchronise with; look again after a period.
                self.next_timesync = now.add_ms(self.cfg.timesync_ms);
            }
            if now >= self.next_timesync && self.link_up {
                if self.timesync_unanswered >= self.cfg.timesync_give_up && !self.timesync_given_up
                {
                    self.timesync_given_up = true;
                    self.events.push_back(Event::TimeSync {
                        synced: self.timesync.is_synced(),
                        offset_ns: self.timesync.offset_ns(),
                        rtt_ns: None,
                        skew_ppm: self.timesync.skew_ppm(),
                        uncertainty_ns: self.timesync.uncertainty_ns(),
                    });
                }
                let ts1 = i64::try_from(now.0).unwrap_or(i64::MAX);
                self.outbox.push_back(MavMessage::TIMESYNC(TIMESYNC_DATA {
                    tc1: 0,
                    ts1,
                    target_system: sys,
                    target_component: comp,
                }));
                self.timesync_outstanding.insert(ts1);
                while self.timesync_outstanding.len() > 16 {
                    self.timesync_outstanding.pop_first();
                }
                self.timesync_unanswered = self.timesync_unanswered.saturating_add(1);
                self.stats.timesync_sent += 1;
                // Fast until the fit has settled (enough samples agreeing within a few ms), then
                // slow; a reset (reboot) or a spread-out fit brings the fast rate back.
                let period = if self.timesync.settled() {
                    self.cfg.timesync_ms * 5
                } else {
                    self.cfg.timesync_ms
                };
                self.next_timesync = now.add_ms(period);
            }
        }
        // The EKF origin, until it is heard.
        if self.link_up && !self.origin_heard && now >= self.next_origin_request {
            self.request_origin(now);
        }
        // Commands.
        let target = self.target_ids();
        self.commands.handle_timeout(now, target);
        self.flush_commands(now);
        self.reasons_due(now);
        // The stream, and a target's end at its own instant (not the next tick).
        let ends = self
            .target
            .is_some_and(|t| now >= self.hold_at(t.valid_until));
        if now >= self.next_stream || ends {
            self.stream_tick(now);
        }
    }

    /// Asks PX4 for `GPS_GLOBAL_ORIGIN` once more and says so.
    fn request_origin(&mut self, now: Mono) {
        if self.commands.pending(MavCmd::MAV_CMD_REQUEST_MESSAGE) {
            // The last request is still being retried: one at a time.
            self.next_origin_request = now.add_ms(self.cfg.origin_request_ms.max(100));
            return;
        }
        self.origin_attempts = self.origin_attempts.saturating_add(1);
        self.stats.origin_requests += 1;
        self.next_origin_request = now.add_ms(self.cfg.origin_request_ms.max(100));
        let target = self.target_ids();
        self.commands.submit(
            now,
            Command::RequestMessage {
                message_id: msg_id::GPS_GLOBAL_ORIGIN,
            },
            target,
        );
        self.events.push_back(Event::OriginRequested {
            attempt: self.origin_attempts,
        });
    }

    /// Whether the link is up and the EKF origin has not been heard yet (the bridge is
    /// asking PX4 for it).
    pub fn waiting_for_origin(&self) -> bool {
        self.link_up && !self.origin_heard
    }

    fn stream_tick(&mut self, now: Mono) {
        let period = clamp_rate_ns(self.cfg.stream_hz);
        if let Some(t) = self.target
            && now >= self.hold_at(t.valid_until)
        {
            // INVARIANT (no stale target): from `hold_margin_ms` before the end of its
            // certified interval a target is never sent again.
            self.target = None;
            self.events.push_back(Event::TargetExpired {
                binding: t.binding,
                fingerprint: t.sp.fingerprint(),
            });
            self.enter_hold(now, HoldReason::TargetExpired);
        }
        if let Some(h) = self.hold
            && now.since(h.since) >= h.max_ns
        {
            self.px4_hold(now, HoldReason::HoldStreamLimit);
        }
        let sp = self.target.map(|t| t.sp).or(self.hold.map(|h| h.sp));
        let Some(sp) = sp else {
            self.stream_since = None;
            self.next_stream = Mono::NEVER;
            return;
        };
        if self.link_up {
            let (sys, comp) = self.target_ids();
            #[allow(
                clippy::cast_possible_truncation,
                reason = "time_boot_ms wraps by design"
            )]
            let time_boot_ms = now.as_ms() as u32;
            self.outbox
                .push_back(MavMessage::SET_POSITION_TARGET_LOCAL_NED(
                    SET_POSITION_TARGET_LOCAL_NED_DATA {
                        time_boot_ms,
                        x: sp.north_m,
                        y: sp.east_m,
                        z: sp.down_m,
                        vx: 0.0,
                        vy: 0.0,
                        vz: 0.0,
                        afx: 0.0,
                        afy: 0.0,
                        afz: 0.0,
                        yaw: sp.yaw_rad(),
                        yaw_rate: 0.0,
                        type_mask: PositionTargetTypemask::from_bits_truncate(
                            TYPE_MASK_POSITION_YAW,
                        ),
                        target_system: sys,
                        target_component: comp,
                        coordinate_frame: MavFrame::MAV_FRAME_LOCAL_NED,
                    },
                ));
            self.stats.setpoints_sent += 1;
            if self.stream_since.is_none() {
                self.stream_since = Some(now);
            }
            // Re-enter OFFBOARD from HOLD once the warm-up has streamed.
            let warm = self
                .stream_since
                .is_some_and(|s| now.since(s) >= self.cfg.offboard_warmup_ms * 1_000_000);
            if self.cfg.auto_offboard
                && self.permitted
                && self.target.is_some()
                && self.armed
                && self.mode == Some(Px4Mode::HOLD)
                && warm
                && !self.commands.mode_change_pending()
            {
                self.command(
                    now,
                    Command::SetMode {
                        mode: Px4Mode::OFFBOARD,
                    },
                );
            }
        }
        self.next_stream = now.add_ns(period);
    }

    /// Queues a `STATUSTEXT` from the gateway's own component for the autopilot, which
    /// forwards it to the ground station (PX4 with `MAV_x_FORWARD` on both instances) and logs
    /// it. Nothing is queued while the link is down: there is nobody to tell. `text` is at most
    /// [`STATUSTEXT_LEN`] bytes (the caller composes it to fit; it is never cut here).
    ///
    /// # Errors
    /// [`StatusTextError`] for a text that is empty or too long, or a link that is down.
    pub fn status_text(&mut self, severity: u8, text: &str) -> Result<(), StatusTextError> {
        if text.is_empty() || text.len() > STATUSTEXT_LEN {
            return Err(StatusTextError::Length(text.len()));
        }
        if !self.link_up {
            return Err(StatusTextError::LinkDown);
        }
        use mavlink::dialects::common::MavSeverity as S;
        let severity = match severity {
            0 => S::MAV_SEVERITY_EMERGENCY,
            1 => S::MAV_SEVERITY_ALERT,
            2 => S::MAV_SEVERITY_CRITICAL,
            3 => S::MAV_SEVERITY_ERROR,
            4 => S::MAV_SEVERITY_WARNING,
            5 => S::MAV_SEVERITY_NOTICE,
            6 => S::MAV_SEVERITY_INFO,
            _ => S::MAV_SEVERITY_DEBUG,
        };
        let mut st = mavlink::dialects::common::STATUSTEXT_DATA {
            severity,
            ..mavlink::dialects::common::STATUSTEXT_DATA::DEFAULT
        };
        st.text = text.into();
        self.outbox.push_back(MavMessage::STATUSTEXT(st));
        self.stats.status_texts_sent += 1;
        Ok(())
    }

    /// The next message to send, with [`Offboard::header`].
    pub fn poll_transmit(&mut self) -> Option<MavMessage> {
        self.outbox.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Offboard::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Mono {
        let mut t = self.next_heartbeat.min(self.next_stream);
        if let Some(a) = self.target {
            t = t.min(self.hold_at(a.valid_until));
        }
        if self.autopilot.is_some() {
            t = t.min(self.next_timesync);
        }
        if self.link_up
            && let Some(h) = self.last_heartbeat
        {
            t = t.min(h.add_ms(self.cfg.link_timeout_ms).add_ns(1));
        }
        if let Some(c) = self.commands.poll_timeout() {
            t = t.min(c);
        }
        if let Some(a) = self.awaiting_reason.front() {
            t = t.min(a.deadline);
        }
        if self.link_up && !self.origin_heard {
            t = t.min(self.next_origin_request);
        }
        t
    }
}
