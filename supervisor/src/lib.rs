//! The supervisor: the service's safety decisions around the core, as a sans-IO state machine.
//!
//! The protocol core decides which components may go out; the supervisor decides what the
//! service does with the vehicle around those decisions, and nothing here reads a clock or
//! awaits. Time comes in as an argument, the vehicle's reports come in as
//! [`Observation`]s, the operator's requests as [`OperatorOp`]s with a [`Ticket`], and the
//! outcomes are polled ([`Supervisor::poll_output`]). Its effects on the vehicle go through
//! [`VehicleControl`], whose calls return at once (bounded-queue enqueues), exactly as the
//! gate's go through its adapter.
//!
//! # Call order
//!
//! ```text
//! handle_operator / handle_observation / handle_support_lost / handle_enqueued /
//! handle_receipts_failed / begin_shutdown (now, ..)
//!     └─▶ drain poll_output(); set the adapter open iff dispatch_open();
//!         sleep until poll_timeout() and call handle_timeout(now)
//! ```
//!
//! # Safety behaviour
//!
//! - **Deny-hold.** When a streaming action loses its support, the vehicle holds at once if
//!   the bridge still streams that very target and a setpoint would still be taken; when PX4
//!   or a pilot owns the vehicle nothing is interrupted. The time from the loss to the bridge's
//!   first hold is recorded.
//! - **The pilot wins.** A mode change the gateway did not command is an override: the stream
//!   ends, the gateway's permission is withdrawn by the bridge, and only the operator gives it
//!   back (`release`, or a takeoff through the gateway). The supervisor never grants it by
//!   itself.
//! - **Operator hold.** While the operator holds, nothing dispatches ([`dispatch_open`] is
//!   false) and the `control` source reads false, so pending actions lose their support.
//! - **Receipts.** Once the receipt log refuses, nothing dispatches for the rest of the process
//!   and the vehicle holds (and lands, with `receipts.full_action = "land"`); neither a release
//!   nor anything else reopens it.
//! - **Operator commands** are answered exactly once: at once when they cannot be sent (a bad
//!   altitude, no link, no home altitude, the contract refuses the takeoff, a full queue),
//!   when the vehicle answers, or [`COMMAND_DEADLINE`] after they were sent; a shutdown
//!   cancels what is still pending.
//! - **Takeoff** (PX4) needs an armed vehicle (PX4 itself accepts a takeoff while disarmed
//!   and climbs the moment anyone arms it); an acknowledged arm counts as armed until the
//!   heartbeat says otherwise. A takeoff PX4 accepted must see the vehicle in the air within
//!   [`TAKEOFF_AIRBORNE_WITHIN`], or it is reported (`takeoff_stalled`).
//! - **Arrival** (a Crazyflie does not echo targets): a dispatched target counts as observed
//!   once the vehicle's estimate is within [`ARRIVAL_M`] of it.
//!
//! [`dispatch_open`]: Supervisor::dispatch_open

#![warn(missing_docs, unreachable_pub)]

use std::collections::VecDeque;

use serde_json::{Value, json};

use halo_core::digest::Digest;
use halo_core::gate::EffectGate;
use halo_core::ids::Id;
use halo_core::reason::ReasonCode;
use halo_core::time::Nanos;

/// A dispatched target's binding `b_e`.
pub type Binding = [u8; 32];

/// How long the vehicle has to answer an operator command, after every bridge retry.
pub const COMMAND_DEADLINE: Nanos = Nanos::from_ms(15_000);
/// A Crazyflie target counts as reached when the estimate is this close, m.
pub const ARRIVAL_M: f64 = 0.15;
/// After PX4 accepted a takeoff, the vehicle must be in the air within this long, or the
/// supervisor reports it (`takeoff_stalled`): PX4 takes a takeoff it cannot fly (measured: one
/// accepted while disarmed climbed 1 min 44 s later, the moment someone armed).
pub const TAKEOFF_AIRBORNE_WITHIN: Nanos = Nanos::from_ms(8_000);
/// The `link` source is refreshed at most this often from the vehicle's messages.
pub const LINK_REFRESH: Nanos = Nanos::from_ms(100);
/// No heartbeat for this long is worth a warning …
pub const SILENCE_FIRST_WARNING: Nanos = Nanos::from_ms(3_000);
/// … repeated this often while it lasts.
pub const SILENCE_REPEAT: Nanos = Nanos::from_ms(5_000);

/// Which vehicle the supervisor looks after: their commands and reports differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VehicleKind {
    /// PX4 over MAVLink: modes, command acknowledgements, the bridge's permission.
    Px4,
    /// A Crazyflie: no modes; the gateway's permission is its own flag; commands are sent at
    /// once with no acknowledgement.
    Crazyflie,
}

/// What the operator can ask of the vehicle and the gateway.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OperatorOp {
    /// Arm the vehicle.
    Arm,
    /// Disarm (on the ground).
    Disarm,
    /// Take off to this height above home, m.
    Takeoff {
        /// Height above home, m.
        altitude_m: f64,
    },
    /// Land at the current position.
    Land,
    /// Return to launch (PX4 RTL).
    ReturnToLaunch,
    /// Stop the current target and hold; no agent action dispatches until released.
    Hold,
    /// Release a hold and hand the vehicle (back) to the gateway after an override: agent
    /// actions may dispatch again.
    Release,
}

impl OperatorOp {
    /// The name used in URLs and receipts.
    pub fn name(&self) -> &'static str {
        match self {
            OperatorOp::Arm => "arm",
            OperatorOp::Disarm => "disarm",
            OperatorOp::Takeoff { .. } => "takeoff",
            OperatorOp::Land => "land",
            OperatorOp::ReturnToLaunch => "rtl",
            OperatorOp::Hold => "hold",
            OperatorOp::Release => "release",
        }
    }
}

/// The shell's handle on one operator request; its answer comes back with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// A command to the vehicle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VehicleCommand {
    /// Arm.
    Arm,
    /// Disarm.
    Disarm,
    /// Take off: PX4 to an altitude above mean sea level, a Crazyflie to a height.
    Takeoff {
        /// PX4: the target altitude AMSL, m.
        amsl_m: Option<f32>,
        /// A Crazyflie: the height above its start, m.
        height_m: f32,
    },
    /// Land where the vehicle is.
    Land,
    /// Return to launch.
    ReturnToLaunch,
    /// PX4 HOLD (AUTO.LOITER).
    HoldMode,
}

impl VehicleCommand {
    /// The command as people read it (`arm`, `takeoff to 495.0 m AMSL`, `set mode AUTO.LOITER`).
    pub fn text(&self) -> String {
        match self {
            VehicleCommand::Arm => "arm".into(),
            VehicleCommand::Disarm => "disarm".into(),
            VehicleCommand::Takeoff {
                amsl_m: Some(a), ..
            } => format!("takeoff to {a:.1} m AMSL"),
            VehicleCommand::Takeoff { amsl_m: None, .. } => {
                "takeoff to the default altitude".into()
            }
            VehicleCommand::Land => "land".into(),
            VehicleCommand::ReturnToLaunch => "return to launch".into(),
            VehicleCommand::HoldMode => "set mode AUTO.LOITER".into(),
        }
    }

    /// Whether `other` answers this command (the bridge reports the command it ended).
    fn same_kind(&self, other: &VehicleCommand) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// Why the vehicle link refused a call. The supervisor only reports it; the bridges' own error
/// types stay with the bridges (this crate links neither), and the shell gives their words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VehicleError {
    /// The bridge refused (its queue is full, the link is down, ...), in its own words.
    Refused(String),
    /// The vehicle has no such command (a Crazyflie has no flight modes).
    Unsupported,
}

impl std::fmt::Display for VehicleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VehicleError::Refused(why) => f.write_str(why),
            VehicleError::Unsupported => f.write_str("a Crazyflie has no flight modes"),
        }
    }
}

impl std::error::Error for VehicleError {}

/// What the service's vehicle link offers the supervisor. Every call returns at once: the
/// bridges' bounded queues, never a blocking write or an `.await`.
pub trait VehicleControl {
    /// Stops the current target and holds where the vehicle is.
    ///
    /// # Errors
    /// The bridge's refusal.
    fn hold(&mut self) -> Result<(), VehicleError>;
    /// Sends a command.
    ///
    /// # Errors
    /// The bridge's refusal (a full queue; a Crazyflie bridge's refusal).
    fn command(&mut self, command: &VehicleCommand) -> Result<(), VehicleError>;
    /// The operator handed the vehicle to the gateway: PX4's bridge may enter OFFBOARD.
    ///
    /// # Errors
    /// The bridge's refusal.
    fn permit_offboard(&mut self) -> Result<(), VehicleError>;
    /// Whether the bridge hears the vehicle now.
    fn link_up(&self) -> bool;
    /// Whether a setpoint would be taken now: PX4 offboard-capable (no pilot, failsafe or
    /// autopilot procedure owns the vehicle); a Crazyflie linked and armed.
    fn takes_setpoints(&self) -> bool;
    /// A Crazyflie's supervisor says it flies (PX4: always false; its landed state is
    /// observed).
    fn flying(&self) -> bool;
    /// A Crazyflie's supervisor says it is armed (PX4: observed instead).
    fn armed(&self) -> bool;
    /// The response and component a recently dispatched binding belongs to, for the records
    /// of what a hold or an override stopped (none when unknown).
    fn attribute(&self, _binding: &Binding) -> Option<(Id, Id)> {
        None
    }
}

/// How an operator request was refused: a stable code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Stable reason code.
    pub code: ReasonCode,
    /// For people.
    pub message: String,
}

impl Refusal {
    fn new(code: ReasonCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// What a dispatched command asked of the vehicle, as the adapter took it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Enqueued {
    /// A position target, local NED m.
    Route([f64; 3]),
    /// A hold.
    Hold,
    /// A landing.
    Land,
}

/// What the vehicle reported, translated by the shell from its bridge's events.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// Link health changed; `silent_ms` since the last heartbeat.
    Link {
        /// Up or down.
        up: bool,
        /// Time since the last heartbeat, ms.
        silent_ms: u64,
    },
    /// A message from the vehicle generated at `at` (mapped, fail closed by `uncertainty`):
    /// the command link is alive.
    Heard {
        /// Its generation time on the gateway's clock.
        at: Nanos,
        /// The mapping's uncertainty.
        uncertainty: Nanos,
    },
    /// The flight mode changed (PX4 mode names).
    Mode {
        /// The new mode.
        to: String,
    },
    /// A mode change the gateway did not command while armed.
    Override {
        /// The mode before, if known.
        from: Option<String>,
        /// The mode now.
        to: String,
        /// The streaming action it stopped (`{"response", "component"}`), or null.
        stopped: Value,
    },
    /// Whether the vehicle says it is in the air (PX4's landed state: in air, taking off,
    /// landing).
    Airborne {
        /// In the air.
        airborne: bool,
    },
    /// The bridge's permission to fly changed (PX4).
    Permission {
        /// Whether the gateway may fly now.
        permitted: bool,
    },
    /// Armed state.
    Armed {
        /// Armed now.
        armed: bool,
    },
    /// Altitude of home above mean sea level, m.
    HomeAltitude {
        /// m AMSL.
        amsl_m: f64,
    },
    /// The vehicle's position estimate, local NED m.
    Position {
        /// North, east, down, m.
        ned_m: [f64; 3],
    },
    /// A command ended.
    CommandEnded {
        /// The command, as the bridge reports it.
        command: VehicleCommand,
        /// Whether the vehicle accepted it.
        accepted: bool,
        /// The outcome for people (`accepted`, `temporarily rejected`, ...).
        outcome: String,
        /// The vehicle's own words for a refusal (PX4's STATUSTEXT), if it gave any.
        reason: Option<String>,
    },
    /// The vehicle echoed a dispatched target (PX4's POSITION_TARGET_LOCAL_NED).
    TargetEchoed {
        /// Its binding.
        binding: Binding,
    },
    /// The bridge stopped a target by itself (its interval ended, or it was dropped).
    TargetStopped {
        /// Its binding.
        binding: Binding,
    },
    /// The bridge holds: it sent the first hold command.
    Holding {
        /// How, as the bridge says it (for the receipt).
        kind: Value,
    },
    /// The vehicle lands (a Crazyflie's high-level commander).
    Landing,
    /// A Crazyflie's supervisor latched Locked.
    Locked,
}

/// What the shell does after a supervisor call, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// The stream of this target ended: the core stops watching its support.
    StreamEnded(Binding),
    /// The vehicle took this target: its component is observed.
    Observed(Binding),
    /// The catalog's `control` source now reads this (the gateway may fly).
    Control(bool),
    /// The catalog's `link` source: the vehicle was heard, generated no later than this.
    LinkHeard(Nanos),
    /// The answer to an operator request.
    Answer(Ticket, Result<Value, Refusal>),
    /// A receipt of the gateway's own: what, and its detail.
    Record(&'static str, Value),
    /// An event for the event stream: its name and data.
    Notice(&'static str, Value),
    /// A deny-hold took this long, from the loss of support to the bridge's first hold.
    DenyHoldLatency(Nanos),
    /// No heartbeat for this long: worth a warning that names the URL and the usual causes.
    Silent(Nanos),
}

/// An operator command sent to the vehicle and not answered yet.
#[derive(Clone, Debug)]
struct Pending {
    ticket: Ticket,
    op: OperatorOp,
    command: VehicleCommand,
    deadline: Nanos,
}

/// How the service stops the vehicle when its receipt log refuses (`receipts.full_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FullAction {
    /// Stop dispatching, hold the vehicle and refuse new work; the operator lands.
    #[default]
    Refuse,
    /// As `Refuse`, and land where the vehicle is.
    Land,
}

/// What the supervisor knows of the vehicle (telemetry the decisions read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VehicleState {
    /// The link is up.
    pub link_up: bool,
    /// The flight mode (PX4 names).
    pub mode: Option<String>,
    /// Armed.
    pub armed: bool,
    /// Home altitude AMSL, m.
    pub home_amsl_m: Option<f64>,
    /// The mode of the last override, until the operator gives the vehicle back.
    pub override_mode: Option<String>,
    /// The vehicle says it is in the air.
    pub airborne: bool,
}

/// The supervisor. See the module docs for the call order and the safety behaviour.
#[derive(Debug)]
pub struct Supervisor {
    kind: VehicleKind,
    /// The vehicle URL, named in refusals.
    vehicle_url: String,
    boot_epoch: u64,
    full_action: FullAction,
    vehicle: VehicleState,
    /// The gateway may fly: PX4's bridge permission; a Crazyflie's own flag.
    granted: bool,
    /// The operator holds.
    held: bool,
    /// Why dispatch closed for good (the receipt log refused).
    failed: Option<String>,
    /// The newest position target handed to the bridge, until its stream ended.
    streaming: Option<Binding>,
    /// The newest target's position until the vehicle was seen there (a Crazyflie).
    arrival: Option<(Binding, [f64; 3])>,
    /// A deny-hold asked of the bridge: its binding and when support was lost.
    deny_hold_since: Option<(Binding, Nanos)>,
    last_link_refresh: Option<Nanos>,
    /// Since when no heartbeat was heard, and the last warning.
    silent_since: Option<Nanos>,
    last_silence_warning: Option<Nanos>,
    pending: VecDeque<Pending>,
    /// Operator effects committed on the contract (their idempotency keys).
    operator_effects: u64,
    /// A takeoff PX4 accepted: the vehicle must be airborne by then.
    takeoff_deadline: Option<Nanos>,
    out: VecDeque<Output>,
}

impl Supervisor {
    /// A supervisor for `kind` at `vehicle_url`, in boot epoch `boot_epoch`, started at `now`
    /// with the gateway's permission `granted` (PX4: `vehicle.control_at_start`).
    pub fn new(
        kind: VehicleKind,
        vehicle_url: &str,
        boot_epoch: u64,
        now: Nanos,
        granted: bool,
    ) -> Supervisor {
        Supervisor {
            kind,
            vehicle_url: vehicle_url.to_string(),
            boot_epoch,
            full_action: FullAction::Refuse,
            vehicle: VehicleState::default(),
            granted,
            held: false,
            failed: None,
            streaming: None,
            arrival: None,
            deny_hold_since: None,
            last_link_refresh: None,
            silent_since: Some(now),
            last_silence_warning: None,
            pending: VecDeque::new(),
            operator_effects: 0,
            takeoff_deadline: None,
            out: VecDeque::new(),
        }
    }

    /// The vehicle URL, named in refusals.
    #[must_use]
    pub fn with_vehicle_url(mut self, url: &str) -> Supervisor {
        self.vehicle_url = url.to_string();
        self
    }

    /// What to do with the vehicle when the receipt log refuses.
    #[must_use]
    pub fn with_full_action(mut self, action: FullAction) -> Supervisor {
        self.full_action = action;
        self
    }

    /// Whether the gate's adapter takes commands: not while the operator holds, never again
    /// once the receipt log refused.
    pub fn dispatch_open(&self) -> bool {
        !self.held && self.failed.is_none()
    }

    /// The `control` source's value: the operator handed the vehicle over and does not hold.
    pub fn control(&self) -> bool {
        self.granted && !self.held
    }

    /// Who flies, for people: `gateway`, `operator_hold` or `operator`.
    pub fn control_name(&self) -> &'static str {
        if self.held {
            "operator_hold"
        } else if self.granted {
            "gateway"
        } else {
            "operator"
        }
    }

    /// The operator holds.
    pub fn held(&self) -> bool {
        self.held
    }

    /// Why dispatch closed for good, if it did.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// What the supervisor knows of the vehicle.
    pub fn vehicle(&self) -> &VehicleState {
        &self.vehicle
    }

    /// The target the bridge streams, if any.
    pub fn streaming(&self) -> Option<Binding> {
        self.streaming
    }

    /// The next output, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Supervisor::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let command = self.pending.iter().map(|p| p.deadline).min();
        let silence = self
            .silent_since
            .map(|since| match self.last_silence_warning {
                Some(w) => w.saturating_add(SILENCE_REPEAT),
                None => since.saturating_add(SILENCE_FIRST_WARNING),
            });
        [command, silence, self.takeoff_deadline]
            .into_iter()
            .flatten()
            .min()
    }

    /// Deadlines: operator commands the vehicle never answered; a takeoff that never left
    /// the ground; the silence warning.
    pub fn handle_timeout(&mut self, now: Nanos, vehicle: &mut dyn VehicleControl) {
        while let Some(i) = self.pending.iter().position(|p| p.deadline <= now) {
            if let Some(p) = self.pending.remove(i) {
                self.finish_command(
                    now,
                    p,
                    false,
                    "timed out (no answer after every retry)",
                    None,
                    vehicle,
                );
            }
        }
        if self.takeoff_deadline.is_some_and(|d| d <= now) {
            self.takeoff_deadline = None;
            if !self.vehicle.airborne {
                let armed = self.vehicle.armed;
                let mode = self
                    .vehicle
                    .mode
                    .clone()
                    .unwrap_or_else(|| "unknown".into());
                let secs = TAKEOFF_AIRBORNE_WITHIN.0 / 1_000_000_000;
                tracing::warn!(
                    armed,
                    mode = %mode,
                    "PX4 accepted the takeoff but the vehicle is not in the air after {secs} s ({}, {mode}); check the vehicle, or land/disarm it",
                    if armed { "armed" } else { "disarmed" }
                );
                let detail = json!({"after_s": secs, "armed": armed, "mode": mode});
                self.record("takeoff_stalled", detail.clone());
                self.notice("takeoff_stalled", detail);
            }
        }
        if let Some(since) = self.silent_since {
            let silent = now.saturating_sub(since);
            let due = match self.last_silence_warning {
                Some(w) => now.saturating_sub(w) >= SILENCE_REPEAT,
                None => true,
            };
            if silent >= SILENCE_FIRST_WARNING && due {
                self.last_silence_warning = Some(now);
                self.out.push_back(Output::Silent(silent));
            }
        }
    }

    fn record(&mut self, what: &'static str, detail: Value) {
        self.out.push_back(Output::Record(what, detail));
    }

    fn notice(&mut self, name: &'static str, data: Value) {
        self.out.push_back(Output::Notice(name, data));
    }

    fn publish_control(&mut self) {
        self.out.push_back(Output::Control(self.control()));
    }

    /// The current target's stream ended (a hold, a land, the link, an override).
    fn end_stream(&mut self) {
        if let Some(b) = self.streaming.take() {
            self.out.push_back(Output::StreamEnded(b));
        }
        self.arrival = None;
    }

    /// The gate's adapter took a dispatched command (drained from the adapter right after each
    /// gate call).
    pub fn handle_enqueued(&mut self, binding: Binding, what: Enqueued) {
        if self.streaming != Some(binding) {
            self.end_stream();
        }
        match what {
            Enqueued::Route(target) => {
                self.streaming = Some(binding);
                self.arrival = Some((binding, target));
            }
            Enqueued::Hold | Enqueued::Land => self.streaming = None,
        }
    }

    /// A streaming action lost its support: hold at once if the bridge still streams that
    /// very target and a setpoint would still be taken. When PX4 or a pilot owns the vehicle
    /// (a landing, RTL, a manual mode) nothing is interrupted. The bridge takes inputs in
    /// order, so a hold sent right after an enqueue it has not processed yet still stops it.
    pub fn handle_support_lost(
        &mut self,
        now: Nanos,
        response: &Id,
        component: &Id,
        binding: Binding,
        code: ReasonCode,
        vehicle: &mut dyn VehicleControl,
    ) {
        let streaming = self.streaming == Some(binding) && vehicle.takes_setpoints();
        if streaming {
            let r = vehicle.hold();
            self.end_stream();
            self.deny_hold_since = r.is_ok().then_some((binding, now));
            tracing::warn!(%response, %component, reason = %code, "support lost while streaming: deny-hold");
        }
        self.record(
            "deny_hold",
            json!({"response": response, "component": component, "binding": Digest(binding),
                   "code": code, "held": streaming}),
        );
        self.notice(
            "deny_hold",
            json!({"response": response, "component": component, "binding": Digest(binding),
                   "reason": code, "held": streaming}),
        );
    }

    /// One report from the vehicle.
    pub fn handle_observation(
        &mut self,
        now: Nanos,
        o: Observation,
        vehicle: &mut dyn VehicleControl,
    ) {
        match o {
            Observation::Link { up, silent_ms } => {
                self.vehicle.link_up = up;
                self.silent_since = if up {
                    None
                } else {
                    Some(now.saturating_sub(Nanos::from_ms(silent_ms)))
                };
                self.last_silence_warning = None;
                // A Crazyflie's stream does not survive its link.
                if !up && self.kind == VehicleKind::Crazyflie {
                    self.end_stream();
                }
            }
            Observation::Heard { at, uncertainty } => {
                let due = self
                    .last_link_refresh
                    .is_none_or(|t| now.saturating_sub(t) >= LINK_REFRESH);
                if due && self.vehicle.link_up {
                    self.last_link_refresh = Some(now);
                    let stamp = link_stamp(now, at.0, uncertainty.0);
                    self.out.push_back(Output::LinkHeard(stamp));
                    self.publish_control();
                }
            }
            Observation::Mode { to } => self.vehicle.mode = Some(to),
            Observation::Override { from, to, stopped } => {
                // The pilot wins: the bridge already stopped streaming and withdrew the
                // permission; pending actions meet a closed adapter at the gate.
                self.end_stream();
                tracing::warn!(
                    from = from.as_deref().unwrap_or("unknown"),
                    to = %to,
                    "operator override: PX4 is in {to}, which the gateway did not command; streaming stopped until the operator releases (`halo-gateway operator release`)"
                );
                self.vehicle.override_mode = Some(to.clone());
                self.record(
                    "operator_override",
                    json!({"from": from, "to": to, "stopped": stopped}),
                );
                self.notice(
                    "vehicle_override",
                    json!({"from": from, "to": to, "stopped": stopped}),
                );
            }
            Observation::Permission { permitted } => {
                self.granted = permitted;
                self.publish_control();
                tracing::info!(
                    permitted,
                    "the gateway {} fly the vehicle",
                    if permitted { "may" } else { "may not" }
                );
                self.notice("vehicle_control", json!({"permitted": permitted}));
            }
            Observation::Armed { armed } => self.vehicle.armed = armed,
            Observation::Airborne { airborne } => {
                self.vehicle.airborne = airborne;
                if airborne {
                    self.takeoff_deadline = None;
                }
            }
            Observation::HomeAltitude { amsl_m } => self.vehicle.home_amsl_m = Some(amsl_m),
            Observation::Position { ned_m } => {
                if let Some((b, target)) = self.arrival {
                    let d2: f64 = ned_m
                        .iter()
                        .zip(target)
                        .map(|(a, t)| (a - t) * (a - t))
                        .sum();
                    if d2.sqrt() <= ARRIVAL_M {
                        self.arrival = None;
                        self.out.push_back(Output::Observed(b));
                    }
                }
            }
            Observation::CommandEnded {
                command,
                accepted,
                outcome,
                reason,
            } => {
                // PX4 acknowledges an arm or a disarm once it happened; its heartbeat says so
                // up to a second later, and an operator's takeoff right after the arm must not
                // be refused as disarmed meanwhile.
                match (command, accepted) {
                    (VehicleCommand::Arm, true) => self.vehicle.armed = true,
                    (VehicleCommand::Disarm, true) => self.vehicle.armed = false,
                    _ => {}
                }
                if let Some(i) = self
                    .pending
                    .iter()
                    .position(|p| p.command.same_kind(&command))
                    && let Some(p) = self.pending.remove(i)
                {
                    self.finish_command(now, p, accepted, &outcome, reason, vehicle);
                }
            }
            Observation::TargetEchoed { binding } => self.out.push_back(Output::Observed(binding)),
            Observation::TargetStopped { binding } => {
                if self.streaming == Some(binding) {
                    self.end_stream();
                }
            }
            Observation::Holding { kind } => {
                if let Some((b, since)) = self.deny_hold_since.take() {
                    let latency = now.saturating_sub(since);
                    self.out.push_back(Output::DenyHoldLatency(latency));
                    self.record(
                        "deny_hold_done",
                        json!({"binding": Digest(b), "latency_us": latency.0 / 1000, "hold": kind}),
                    );
                    tracing::info!(latency_us = latency.0 / 1000, "deny-hold: holding");
                }
            }
            Observation::Landing => self.end_stream(),
            Observation::Locked => {
                self.end_stream();
                self.record("vehicle_locked", json!({}));
            }
        }
    }

    /// The operator hands the vehicle to the gateway (again).
    fn grant_control(&mut self, by: &str, vehicle: &mut dyn VehicleControl) {
        let bridge = match self.kind {
            VehicleKind::Px4 => vehicle
                .permit_offboard()
                .map_or_else(|e| e.to_string(), |()| "permitted".into()),
            VehicleKind::Crazyflie => {
                // No modes to hand over: the gateway's own flag is the permission.
                self.granted = true;
                self.publish_control();
                "permitted".into()
            }
        };
        self.vehicle.override_mode = None;
        self.record("control_granted", json!({"by": by, "bridge": bridge}));
    }

    fn answer(&mut self, ticket: Ticket, a: Result<Value, Refusal>) {
        self.out.push_back(Output::Answer(ticket, a));
    }

    /// One operator request. `effects` is the mission contract (a takeoff is its effect).
    pub fn handle_operator(
        &mut self,
        now: Nanos,
        ticket: Ticket,
        op: OperatorOp,
        vehicle: &mut dyn VehicleControl,
        effects: &mut dyn EffectGate,
    ) {
        // A bad request is refused as such first, whatever the link.
        if let OperatorOp::Takeoff { altitude_m } = op
            && let Err(r) = self.check_altitude(altitude_m)
        {
            self.answer(ticket, Err(r));
            return;
        }
        match op {
            OperatorOp::Hold => return self.operator_hold(ticket, vehicle),
            OperatorOp::Release => return self.operator_release(ticket, vehicle),
            _ => {}
        }
        // A vehicle command without a link cannot be sent: say so at once rather than after
        // every retry. Hold and release are the gateway's own and need no link.
        if !vehicle.link_up() {
            let message = format!(
                "no heartbeat from the vehicle at {}: `{}` cannot be sent ({})",
                self.vehicle_url,
                op.name(),
                link_hint(&self.vehicle_url)
            );
            self.answer(
                ticket,
                Err(Refusal::new(ReasonCode::NO_VEHICLE_LINK, message)),
            );
            return;
        }
        let command = match self.command_for(op, effects) {
            Ok(c) => c,
            Err(r) => {
                self.answer(ticket, Err(r));
                return;
            }
        };
        match self.kind {
            VehicleKind::Px4 => self.send_px4(now, ticket, op, command, vehicle),
            VehicleKind::Crazyflie => self.send_crazyflie(ticket, op, command, vehicle),
        }
    }

    /// The takeoff height's bounds for this vehicle.
    fn check_altitude(&self, altitude_m: f64) -> Result<(), Refusal> {
        let (lo, hi) = match self.kind {
            VehicleKind::Crazyflie => (0.2, 2.0),
            VehicleKind::Px4 => (1.0, 120.0),
        };
        if altitude_m.is_finite() && (lo..=hi).contains(&altitude_m) {
            return Ok(());
        }
        Err(Refusal::new(
            ReasonCode::INVALID_REQUEST,
            match self.kind {
                VehicleKind::Crazyflie => format!(
                    "takeoff height {altitude_m} m is outside {lo}..{hi} m (a Crazyflie on the bench)"
                ),
                VehicleKind::Px4 => {
                    format!("takeoff altitude {altitude_m} m is outside {lo}..{hi} m above home")
                }
            },
        ))
    }

    /// The vehicle command for an operator request, or why it cannot be sent. A takeoff with a
    /// mission contract is its first effect: committed before the command goes out, refused
    /// when the contract does not admit it.
    fn command_for(
        &mut self,
        op: OperatorOp,
        effects: &mut dyn EffectGate,
    ) -> Result<VehicleCommand, Refusal> {
        Ok(match op {
            OperatorOp::Arm => VehicleCommand::Arm,
            OperatorOp::Disarm => VehicleCommand::Disarm,
            OperatorOp::Land => VehicleCommand::Land,
            OperatorOp::ReturnToLaunch => {
                if self.kind == VehicleKind::Crazyflie {
                    return Err(Refusal::new(
                        ReasonCode::VEHICLE_COMMAND_FAILED,
                        "a Crazyflie has no return-to-launch; land it (`operator land`)",
                    ));
                }
                VehicleCommand::ReturnToLaunch
            }
            OperatorOp::Takeoff { altitude_m } => {
                let amsl_m = match self.kind {
                    VehicleKind::Px4 => {
                        // PX4 accepts a takeoff while disarmed and climbs the moment anyone
                        // arms it: refuse it here instead.
                        if !self.vehicle.armed {
                            return Err(Refusal::new(
                                ReasonCode::VEHICLE_NOT_ARMED,
                                "the vehicle is disarmed: arm it first (`halo-gateway operator arm`); PX4 would take this takeoff now and climb the moment it is armed",
                            ));
                        }
                        let Some(home) = self.vehicle.home_amsl_m else {
                            return Err(Refusal::new(
                                ReasonCode::VEHICLE_COMMAND_FAILED,
                                "home altitude is not known yet (no GLOBAL_POSITION_INT from PX4)",
                            ));
                        };
                        #[allow(clippy::cast_possible_truncation, reason = "MAVLink carries f32")]
                        Some((home + altitude_m) as f32)
                    }
                    VehicleKind::Crazyflie => None,
                };
                self.contract_takeoff(effects)?;
                #[allow(clippy::cast_possible_truncation, reason = "the radio carries f32")]
                VehicleCommand::Takeoff {
                    amsl_m,
                    height_m: altitude_m as f32,
                }
            }
            OperatorOp::Hold | OperatorOp::Release => {
                return Err(Refusal::new(
                    ReasonCode::INVALID_REQUEST,
                    "hold and release are not vehicle commands",
                ));
            }
        })
    }

    fn contract_takeoff(&mut self, effects: &mut dyn EffectGate) -> Result<(), Refusal> {
        if !effects.active() {
            return Ok(());
        }
        self.operator_effects += 1;
        let key = format!(
            "halo-{}-operator-{}",
            self.boot_epoch, self.operator_effects
        );
        effects
            .commit_once("takeoff", &key)
            .map_err(|(code, detail)| {
                Refusal::new(
                    code,
                    format!("the mission contract refuses the takeoff: {detail}"),
                )
            })
    }

    fn send_px4(
        &mut self,
        now: Nanos,
        ticket: Ticket,
        op: OperatorOp,
        command: VehicleCommand,
        vehicle: &mut dyn VehicleControl,
    ) {
        if let Err(e) = vehicle.command(&command) {
            self.answer(
                ticket,
                Err(Refusal::new(
                    ReasonCode::SERVICE_BUSY,
                    format!("bridge: {e}"),
                )),
            );
            return;
        }
        self.pending.push_back(Pending {
            ticket,
            op,
            command,
            deadline: now.saturating_add(COMMAND_DEADLINE),
        });
    }

    fn send_crazyflie(
        &mut self,
        ticket: Ticket,
        op: OperatorOp,
        command: VehicleCommand,
        vehicle: &mut dyn VehicleControl,
    ) {
        let r = vehicle.command(&command);
        self.record(
            "operator_command",
            json!({"action": op.name(), "command": op.name(),
                   "outcome": r.as_ref().map_or_else(ToString::to_string, |()| "sent".into())}),
        );
        match r {
            Ok(()) => {
                if matches!(op, OperatorOp::Takeoff { .. }) {
                    self.grant_control("takeoff", vehicle);
                }
                self.answer(ticket, Ok(json!({"action": op.name(), "outcome": "sent"})));
            }
            Err(e) => self.answer(
                ticket,
                Err(Refusal::new(
                    ReasonCode::VEHICLE_COMMAND_FAILED,
                    format!("the Crazyflie bridge refused `{}`: {e}", op.name()),
                )),
            ),
        }
    }

    fn operator_hold(&mut self, ticket: Ticket, vehicle: &mut dyn VehicleControl) {
        self.held = true;
        // The action the hold stops, named for the receipt and the audit.
        let stopped = self
            .streaming
            .and_then(|b| vehicle.attribute(&b))
            .map_or(Value::Null, |(r, c)| json!({"response": r, "component": c}));
        let r = vehicle.hold();
        self.end_stream();
        self.record(
            "operator_hold",
            json!({"held": true, "bridge": r.map_or_else(|e| e.to_string(), |()| "holding".into()),
                   "stopped": stopped}),
        );
        self.notice("operator_hold", json!({"held": true}));
        self.publish_control();
        tracing::warn!("operator hold: agent actions will not dispatch until released");
        self.answer(ticket, Ok(json!({"action": "hold", "held": true})));
    }

    fn operator_release(&mut self, ticket: Ticket, vehicle: &mut dyn VehicleControl) {
        self.held = false;
        self.grant_control("release", vehicle);
        self.record("operator_release", json!({"held": false}));
        self.notice("operator_hold", json!({"held": false}));
        self.publish_control();
        tracing::info!("operator released the hold");
        self.answer(ticket, Ok(json!({"action": "release", "held": false})));
    }

    /// A PX4 command ended (or timed out, or was cancelled): its receipt and its answer; a
    /// takeoff through the gateway hands it the vehicle.
    fn finish_command(
        &mut self,
        now: Nanos,
        p: Pending,
        accepted: bool,
        outcome: &str,
        reason: Option<String>,
        vehicle: &mut dyn VehicleControl,
    ) {
        let text = p.command.text();
        self.record(
            "operator_command",
            json!({"action": p.op.name(), "command": text, "outcome": outcome, "px4_says": reason}),
        );
        if accepted && matches!(p.op, OperatorOp::Takeoff { .. }) {
            self.grant_control("takeoff", vehicle);
            if !self.vehicle.airborne {
                self.takeoff_deadline = Some(now.saturating_add(TAKEOFF_AIRBORNE_WITHIN));
            }
        }
        let answer = if accepted {
            Ok(json!({"action": p.op.name(), "outcome": outcome}))
        } else {
            let says = reason
                .as_deref()
                .map(|r| format!(" (PX4 says: \"{r}\")"))
                .unwrap_or_default();
            Err(Refusal::new(
                ReasonCode::VEHICLE_COMMAND_FAILED,
                format!("PX4 did not accept `{text}`: {outcome}{says}"),
            ))
        };
        self.answer(p.ticket, answer);
    }

    /// The receipt log refused: nothing dispatches from now on, the vehicle holds (and lands
    /// with [`FullAction::Land`]). `dropped` are the targets staged behind the receipts that
    /// failed (the bridge never saw them). The first call returns what the service records and
    /// says; later calls only end those streams.
    pub fn handle_receipts_failed(
        &mut self,
        why: &str,
        dropped: &[Binding],
        vehicle: &mut dyn VehicleControl,
    ) -> Option<FailedClosed> {
        for b in dropped {
            if self.streaming == Some(*b) {
                self.end_stream();
            }
        }
        if self.failed.is_some() {
            return None;
        }
        self.failed = Some(why.to_string());
        let was_streaming = self.streaming.is_some() || !dropped.is_empty();
        let hold = vehicle.hold();
        self.end_stream();
        let landing = self.full_action == FullAction::Land;
        if landing {
            let _ = vehicle.command(&VehicleCommand::Land);
        }
        self.publish_control();
        Some(FailedClosed {
            was_streaming,
            hold: hold.is_ok(),
            landing,
        })
    }

    /// The service stops: nothing dispatches, the stream ends, and the vehicle is made safe
    /// (PX4: held, and out of OFFBOARD if it is there; a Crazyflie: landed if it flies).
    pub fn begin_shutdown(&mut self, vehicle: &mut dyn VehicleControl) {
        self.held = true;
        match self.kind {
            VehicleKind::Crazyflie => {
                let flying = vehicle.flying();
                if flying {
                    let _ = vehicle.command(&VehicleCommand::Land);
                }
                self.end_stream();
                self.record("shutdown", json!({"land_requested": flying}));
                tracing::info!(flying, "shutting down: landing the Crazyflie");
            }
            VehicleKind::Px4 => {
                let _ = vehicle.hold();
                self.end_stream();
                if self.vehicle.armed && self.in_offboard() && self.vehicle.link_up {
                    let _ = vehicle.command(&VehicleCommand::HoldMode);
                }
                self.record("shutdown", json!({"hold_requested": true}));
                tracing::info!("shutting down: holding the vehicle");
            }
        }
    }

    fn in_offboard(&self) -> bool {
        self.vehicle.mode.as_deref() == Some("OFFBOARD")
    }

    /// Whether the vehicle is safe to leave after [`Supervisor::begin_shutdown`]: PX4 out of
    /// OFFBOARD, disarmed or unreachable; a Crazyflie on the ground or unreachable.
    pub fn shutdown_settled(&self, vehicle: &dyn VehicleControl) -> bool {
        match self.kind {
            VehicleKind::Px4 => !self.vehicle.link_up || !self.vehicle.armed || !self.in_offboard(),
            VehicleKind::Crazyflie => !vehicle.link_up() || !vehicle.flying(),
        }
    }

    /// The end of a shutdown: pending commands cancelled, a landed Crazyflie disarmed, the
    /// state the vehicle was left in recorded. `settled` is [`Supervisor::shutdown_settled`]
    /// at the end of the wait.
    pub fn finish_shutdown(&mut self, settled: bool, vehicle: &mut dyn VehicleControl) {
        if !settled {
            match self.kind {
                VehicleKind::Px4 => tracing::warn!(
                    "the vehicle is still in OFFBOARD; stopping the stream (PX4's offboard-loss failsafe takes over)"
                ),
                VehicleKind::Crazyflie => tracing::warn!(
                    "the Crazyflie is still flying; stopping (its emergency-stop watchdog cuts the motors within 1 s)"
                ),
            }
        }
        match self.kind {
            VehicleKind::Crazyflie => {
                if vehicle.link_up() && !vehicle.flying() {
                    let _ = vehicle.command(&VehicleCommand::Disarm);
                }
                self.record(
                    "shutdown",
                    json!({"flying": vehicle.flying(), "armed": vehicle.armed(), "link_up": vehicle.link_up()}),
                );
            }
            VehicleKind::Px4 => {
                let v = &self.vehicle;
                let detail = json!({"mode": v.mode, "armed": v.armed, "link_up": v.link_up});
                self.record("shutdown", detail);
            }
        }
        while let Some(p) = self.pending.pop_front() {
            self.finish_command(Nanos(0), p, false, "cancelled", None, vehicle);
        }
    }
}

/// What the first [`Supervisor::handle_receipts_failed`] did, for the service's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailedClosed {
    /// A target streamed, or was staged to, when the log refused.
    pub was_streaming: bool,
    /// The bridge took the hold.
    pub hold: bool,
    /// A landing was commanded too.
    pub landing: bool,
}

/// The `link` source's stamp from a message generated at `at_ns` with mapping uncertainty
/// `uncertainty_ns`: as old as the uncertainty allows (fail closed), never after `now`.
pub fn link_stamp(now: Nanos, at_ns: u64, uncertainty_ns: u64) -> Nanos {
    Nanos(at_ns.saturating_sub(uncertainty_ns).min(now.0))
}

/// The usual causes of a vehicle link without heartbeats, for the URL in use.
pub fn link_hint(url: &str) -> String {
    let u = url.trim_start_matches("udp://");
    if let Some(addr) = u.strip_prefix("udpin:") {
        format!(
            "nothing sends to {addr}: PX4 SITL sends to 14540 (its offboard link; 14550 is the ground station's), a real PX4 needs a MAVLink instance in Onboard mode (MAV_x_MODE) sending to this address, and a firewall may drop the datagrams"
        )
    } else if let Some(addr) = u
        .strip_prefix("udpout:")
        .or_else(|| u.strip_prefix("tcpout:"))
    {
        format!("nothing answers at {addr}")
    } else if let Some(dev) = u.strip_prefix("serial:") {
        format!(
            "check the cable and {dev}: the baud rate (PX4's SER_TEL2_BAUD), PX4's MAV_1_CONFIG = TELEM 2 and MAV_1_MODE = Onboard, that no serial console uses the port, and that this user is in the device's group (dialout)"
        )
    } else if url.starts_with("radio://") || url.starts_with("usb://") {
        "check the Crazyradio, its channel and address, and that the Crazyflie is on".into()
    } else {
        "check the vehicle URL".into()
    }
}
