//! `supervisor-schedules`: the supervisor in virtual time. Seeded schedules drive it as the core
//! task would (operator requests, the vehicle's reports, dispatches, losses of support, a
//! receipt log that refuses, deadlines, a shutdown), against a recording vehicle and a mission
//! contract that may refuse the takeoff. After every step a checker of its own bookkeeping
//! (what should be streaming, held, granted, pending; it calls nothing of the supervisor's but
//! the inputs and outputs under test) says whether what came out was right:
//!
//! - every operator request is answered exactly once: at once when it cannot be sent, when
//!   the vehicle answers, at its deadline (never before), or at the shutdown;
//! - a vehicle command goes out only when the request is valid, the link is up, PX4 knows
//!   home (a takeoff), and the contract admits the takeoff;
//! - a deny-hold holds the vehicle exactly when the lost action is the streaming target and a
//!   setpoint would still be taken;
//! - the `control` source reads "granted and not held"; dispatch is open exactly while the
//!   operator does not hold and the receipt log never refused;
//! - the pilot wins: after an override the gateway is not handed the vehicle again but by the
//!   operator (a release, a takeoff the vehicle accepted);
//! - a refusing receipt log holds the vehicle once and closes dispatch for good;
//! - a Crazyflie target is observed once, and only within reach of its position;
//! - the silence warning comes after 3 s without a heartbeat, then at most every 5 s.
//!
//! Planted defects (a supervisor wrapped so that it misbehaves in one way) show the checker
//! catches each.
use std::collections::{BTreeMap, BTreeSet};

use halo_core::gate::EffectGate;
use halo_core::ids::Id;
use halo_core::reason::ReasonCode;
use halo_core::time::Nanos;
use halo_supervisor::{
    Binding, Enqueued, Observation, OperatorOp, Output, Supervisor, Ticket, VehicleCommand,
    VehicleControl, VehicleError, VehicleKind,
};

use crate::common::{self, Rng};

/// Schedules per vehicle kind (pinned below).
const SCHEDULES: usize = 5000;
/// Steps per schedule.
const STEPS: usize = 120;

/// The vehicle as the supervisor sees it through [`VehicleControl`]: facts the schedule sets,
/// every call recorded.
#[derive(Default)]
struct FakeVehicle {
    link_up: bool,
    takes_setpoints: bool,
    flying: bool,
    armed: bool,
    queue_full: bool,
    /// A planted defect: holds are swallowed.
    swallow_holds: bool,
    calls: Vec<Call>,
}

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Hold,
    Command(VehicleCommand),
    Permit,
}

impl VehicleControl for FakeVehicle {
    fn hold(&mut self) -> Result<(), VehicleError> {
        if !self.swallow_holds {
            self.calls.push(Call::Hold);
        }
        Ok(())
    }
    fn command(&mut self, command: &VehicleCommand) -> Result<(), VehicleError> {
        if self.queue_full {
            return Err(VehicleError::Refused(
                px4_bridge::EnqueueError::QueueFull.to_string(),
            ));
        }
        self.calls.push(Call::Command(*command));
        Ok(())
    }
    fn permit_offboard(&mut self) -> Result<(), VehicleError> {
        self.calls.push(Call::Permit);
        Ok(())
    }
    fn link_up(&self) -> bool {
        self.link_up
    }
    fn takes_setpoints(&self) -> bool {
        self.takes_setpoints
    }
    fn flying(&self) -> bool {
        self.flying
    }
    fn armed(&self) -> bool {
        self.armed
    }
}

/// A mission contract that is registered or not, and refuses the takeoff or not.
struct FakeContract {
    active: bool,
    refuse: bool,
    committed: usize,
}

impl EffectGate for FakeContract {
    fn active(&self) -> bool {
        self.active
    }
    fn authorize(&mut self, _effect: &str) -> Result<u64, ReasonCode> {
        Ok(0)
    }
    fn commit(&mut self, _r: u64, _effect: &str, _key: &str) -> Result<(), ReasonCode> {
        Ok(())
    }
    fn commit_once(&mut self, effect: &str, _key: &str) -> Result<(), (ReasonCode, String)> {
        assert_eq!(effect, "takeoff");
        if self.active && self.refuse {
            return Err((
                ReasonCode::EFFECT_NOT_ADMITTED,
                "not in the contract".into(),
            ));
        }
        self.committed += usize::from(self.active);
        Ok(())
    }
}

/// One way of breaking the supervisor, to show the checker notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Defect {
    /// Deny-holds never reach the vehicle.
    NoDenyHold,
    /// After an override the gateway takes the vehicle back by itself.
    RegrantAfterOverride,
    /// A takeoff's answer is lost.
    DropTakeoffAnswer,
    /// Dispatch reopens after the receipt log refused, once the operator releases.
    OpenAfterFailure,
}

pub(crate) const DEFECTS: [Defect; 4] = [
    Defect::NoDenyHold,
    Defect::RegrantAfterOverride,
    Defect::DropTakeoffAnswer,
    Defect::OpenAfterFailure,
];

/// The checker's own bookkeeping.
#[derive(Default)]
struct Model {
    streaming: Option<Binding>,
    arrival: Option<(Binding, [f64; 3])>,
    held: bool,
    failed: bool,
    granted: bool,
    /// An override took the vehicle; only the operator gives it back.
    overridden: bool,
    /// The operator gave it back since (a release, an accepted takeoff).
    given_back: bool,
    link_up: bool,
    mode: Option<String>,
    armed: bool,
    home: bool,
    /// PX4 commands sent and not answered: ticket → (kind, sent at).
    pending: BTreeMap<Ticket, (VehicleCommand, Nanos)>,
    answered: BTreeSet<Ticket>,
    asked: BTreeSet<Ticket>,
    silent_since: Option<Nanos>,
    last_warning: Option<Nanos>,
}

/// A takeoff altitude the schedules try: below the range, not a number, above it, or 1.0 m
/// plus tenths (inside both vehicles' ranges but 2.0 m for a Crazyflie at ten tenths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Alt {
    Negative,
    NotANumber,
    TooHigh,
    Tenths(u8),
}

/// An operator request, with its choices spelled out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Arm,
    Disarm,
    Takeoff(Alt),
    Land,
    ReturnToLaunch,
    Hold,
    Release,
}

impl Op {
    fn request(self) -> OperatorOp {
        match self {
            Op::Arm => OperatorOp::Arm,
            Op::Disarm => OperatorOp::Disarm,
            Op::Takeoff(alt) => OperatorOp::Takeoff {
                altitude_m: match alt {
                    Alt::Negative => -3.0,
                    Alt::NotANumber => f64::NAN,
                    Alt::TooHigh => 500.0,
                    Alt::Tenths(t) => 1.0 + f64::from(t) * 0.1,
                },
            },
            Op::Land => OperatorOp::Land,
            Op::ReturnToLaunch => OperatorOp::ReturnToLaunch,
            Op::Hold => OperatorOp::Hold,
            Op::Release => OperatorOp::Release,
        }
    }
}

/// What the core enqueued: a hold, a land, or a route to (x, y, -2) m NED.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Enq {
    Hold,
    Land,
    Route(u8, u8),
}

/// One move of the supervisor's environment, with its choices spelled out: the seeded
/// schedules draw them (`Run::draw`), the model check (`supervisor_model.rs`) enumerates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SupMove {
    /// Virtual time passes, and the supervisor's timer runs if it is due.
    Advance {
        ms: u64,
    },
    Operator(Op),
    /// The vehicle answers the `k`-th pending PX4 command.
    VehicleAnswers {
        k: usize,
        accepted: bool,
    },
    Link {
        up: bool,
    },
    /// The vehicle's facts as the bridge reads them (no report of their own).
    Facts {
        takes_setpoints: bool,
        queue_full: bool,
        flying: bool,
        armed: bool,
    },
    Mode(&'static str),
    /// The pilot takes the vehicle (a mode change the gateway did not command).
    Override,
    Permission {
        permitted: bool,
    },
    Armed {
        armed: bool,
    },
    Home,
    Enqueued(Enq),
    /// Support of the streaming target lost (or of another binding).
    SupportLost {
        of_streaming: bool,
    },
    Position {
        near: bool,
    },
    TargetStopped {
        of_streaming: bool,
    },
    Heard,
    /// The receipt log refuses a write.
    ReceiptsFail,
    Echoed,
    /// The service shuts down (the last move of a trace).
    Shutdown,
}

/// Facts the model's reachability properties look for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Seen {
    pub(crate) hold_while_streaming: bool,
    pub(crate) deny_held: bool,
    pub(crate) overridden: bool,
    pub(crate) given_back: bool,
    pub(crate) vehicle_answered: bool,
    pub(crate) receipts_refused: bool,
}

pub(crate) struct Run {
    kind: VehicleKind,
    sup: Supervisor,
    v: FakeVehicle,
    contract: FakeContract,
    m: Model,
    now: Nanos,
    next_ticket: u64,
    next_binding: u8,
    defect: Option<Defect>,
    pub(crate) errors: Vec<String>,
    pub(crate) seen: Seen,
}

fn b(n: u8) -> Binding {
    [n; 32]
}

fn ids() -> (Id, Id) {
    (Id::new("r").unwrap(), Id::new("e").unwrap())
}

impl Run {
    fn new(kind: VehicleKind, rng: &mut Rng, defect: Option<Defect>) -> Run {
        let granted = kind == VehicleKind::Px4 && rng.below(4) == 0;
        let active = rng.below(2) == 0;
        let refuse = rng.below(3) == 0;
        Run::with(kind, granted, (active, refuse), defect)
    }

    /// A supervisor at time zero: PX4's permission `granted` or not, a mission contract
    /// `(registered, refusing the takeoff)`.
    pub(crate) fn with(
        kind: VehicleKind,
        granted: bool,
        (active, refuse): (bool, bool),
        defect: Option<Defect>,
    ) -> Run {
        Run {
            kind,
            sup: Supervisor::new(kind, "udpout:127.0.0.1:9", 3, Nanos::ZERO, granted),
            v: FakeVehicle {
                swallow_holds: defect == Some(Defect::NoDenyHold),
                ..FakeVehicle::default()
            },
            contract: FakeContract {
                active,
                refuse,
                committed: 0,
            },
            m: Model {
                granted,
                silent_since: Some(Nanos::ZERO),
                ..Model::default()
            },
            now: Nanos::ZERO,
            next_ticket: 0,
            next_binding: 1,
            defect,
            errors: Vec::new(),
            seen: Seen::default(),
        }
    }

    fn err(&mut self, what: String) {
        if self.errors.len() < 4 {
            self.errors.push(what);
        }
    }

    /// Drains the supervisor's outputs and the vehicle's calls and checks them against the
    /// model; `expect_holds` and friends say what this step must have produced.
    fn drain(&mut self) -> (Vec<Output>, Vec<Call>) {
        let mut outs = Vec::new();
        while let Some(o) = self.sup.poll_output() {
            if self.defect == Some(Defect::DropTakeoffAnswer)
                && let Output::Answer(_, Ok(v)) = &o
                && v["action"] == "takeoff"
            {
                continue;
            }
            outs.push(o);
        }
        let calls = std::mem::take(&mut self.v.calls);
        for o in &outs {
            match o {
                Output::Answer(t, _) => {
                    if !self.m.asked.contains(t) {
                        self.err(format!("answer to {t:?}, never asked"));
                    }
                    if !self.m.answered.insert(*t) {
                        self.err(format!("{t:?} answered twice"));
                    }
                    self.m.pending.remove(t);
                }
                Output::Control(v) => {
                    let want = self.m.granted && !self.m.held;
                    if *v != want {
                        self.err(format!("control {v}, want {want}"));
                    }
                }
                Output::StreamEnded(_) | Output::Record(..) | Output::Notice(..) => {}
                Output::Observed(_)
                | Output::LinkHeard(_)
                | Output::DenyHoldLatency(_)
                | Output::Silent(_) => {}
            }
        }
        if calls.contains(&Call::Permit) && self.m.overridden && !self.m.given_back {
            self.err("the gateway took the vehicle back after an override".into());
        }
        let open = self.dispatch_open();
        let want = !self.m.held && !self.m.failed;
        if open != want {
            self.err(format!("dispatch open {open}, want {want}"));
        }
        (outs, calls)
    }

    fn dispatch_open(&self) -> bool {
        if self.defect == Some(Defect::OpenAfterFailure) {
            !self.sup.held()
        } else {
            self.sup.dispatch_open()
        }
    }

    fn observe(&mut self, o: Observation) -> (Vec<Output>, Vec<Call>) {
        let regrant = matches!(o, Observation::Override { .. })
            && self.defect == Some(Defect::RegrantAfterOverride);
        self.sup.handle_observation(self.now, o, &mut self.v);
        if regrant {
            let _ = self.v.permit_offboard();
        }
        self.drain()
    }

    /// An operator request as the schedules draw it: an altitude (used by a takeoff), then the
    /// request.
    fn draw_operator(rng: &mut Rng) -> Op {
        let alt = match rng.below(6) {
            0 => Alt::Negative,
            1 => Alt::NotANumber,
            2 => Alt::TooHigh,
            _ => Alt::Tenths(rng.below(10) as u8),
        };
        match rng.below(9) {
            0 => Op::Arm,
            1 => Op::Disarm,
            2 | 3 => Op::Takeoff(alt),
            4 => Op::Land,
            5 => Op::ReturnToLaunch,
            6 | 7 => Op::Hold,
            _ => Op::Release,
        }
    }

    fn operator(&mut self, op: Op) {
        if op == Op::Hold && self.m.streaming.is_some() {
            self.seen.hold_while_streaming = true;
        }
        let op = op.request();
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        self.m.asked.insert(ticket);
        // What the checker expects of this request, decided before it is made.
        let (lo, hi) = match self.kind {
            VehicleKind::Px4 => (1.0, 120.0),
            VehicleKind::Crazyflie => (0.2, 2.0),
        };
        let takeoff = matches!(op, OperatorOp::Takeoff { .. });
        let bad_altitude = matches!(op, OperatorOp::Takeoff { altitude_m }
            if !(altitude_m.is_finite() && (lo..=hi).contains(&altitude_m)));
        let refused_contract = takeoff && self.contract.active && self.contract.refuse;
        let no_home = takeoff && self.kind == VehicleKind::Px4 && !self.m.home;
        // PX4 would take a takeoff while disarmed and climb when armed: refused.
        let disarmed = takeoff && self.kind == VehicleKind::Px4 && !self.m.armed;
        let cf_rtl = op == OperatorOp::ReturnToLaunch && self.kind == VehicleKind::Crazyflie;
        let may_send = !bad_altitude
            && self.v.link_up
            && !no_home
            && !disarmed
            && !refused_contract
            && !cf_rtl;
        let will_send = may_send && !self.v.queue_full;
        match op {
            OperatorOp::Hold => {
                self.m.held = true;
                self.m.streaming = None;
                self.m.arrival = None;
            }
            OperatorOp::Release => {
                self.m.held = false;
                self.m.given_back = true;
                if self.kind == VehicleKind::Crazyflie {
                    self.m.granted = true;
                }
            }
            _ if takeoff && will_send && self.kind == VehicleKind::Crazyflie => {
                self.m.granted = true;
                self.m.given_back = true;
            }
            _ => {}
        }
        self.sup
            .handle_operator(self.now, ticket, op, &mut self.v, &mut self.contract);
        let (outs, calls) = self.drain();
        let answered = outs
            .iter()
            .any(|o| matches!(o, Output::Answer(t, _) if *t == ticket));
        let commands: Vec<VehicleCommand> = calls
            .iter()
            .filter_map(|c| match c {
                Call::Command(c) => Some(*c),
                _ => None,
            })
            .collect();
        match op {
            OperatorOp::Hold | OperatorOp::Release => {
                if op == OperatorOp::Hold && !calls.contains(&Call::Hold) {
                    self.err("an operator hold did not hold the vehicle".into());
                }
                if !answered {
                    self.err(format!("{op:?} not answered at once"));
                }
            }
            _ => {
                let sent = !commands.is_empty();
                if sent != will_send {
                    self.err(format!(
                        "{op:?} sent {sent}, want {will_send} (link {}, home {}, contract refuses {refused_contract}, queue full {})",
                        self.v.link_up, self.m.home, self.v.queue_full
                    ));
                }
                if self.kind == VehicleKind::Px4 && sent {
                    if answered {
                        self.err(format!("{op:?} answered before the vehicle did"));
                    }
                    if let Some(c) = commands.first() {
                        self.m.pending.insert(ticket, (*c, self.now));
                    }
                } else if !answered {
                    self.err(format!("{op:?} not answered at once"));
                }
            }
        }
    }

    /// The vehicle answers one pending PX4 command.
    fn vehicle_answers(&mut self, k: usize, accepted: bool) -> bool {
        let Some((&ticket, &(command, _))) = self.m.pending.iter().nth(k) else {
            return false;
        };
        self.seen.vehicle_answered = true;
        // The supervisor matches the first pending command of the same kind.
        let first = self
            .m
            .pending
            .iter()
            .find(|(_, (c, _))| std::mem::discriminant(c) == std::mem::discriminant(&command))
            .map(|(t, _)| *t)
            .unwrap_or(ticket);
        if accepted && matches!(command, VehicleCommand::Takeoff { .. }) {
            self.m.given_back = true;
        }
        // An acknowledged arm or disarm happened (the heartbeat says so later).
        match (command, accepted) {
            (VehicleCommand::Arm, true) => self.m.armed = true,
            (VehicleCommand::Disarm, true) => self.m.armed = false,
            _ => {}
        }
        let (outs, calls) = self.observe(Observation::CommandEnded {
            command,
            accepted,
            outcome: if accepted {
                "accepted".into()
            } else {
                "denied".into()
            },
            reason: (!accepted).then(|| "Arming denied: battery low".into()),
        });
        let answered = outs
            .iter()
            .any(|o| matches!(o, Output::Answer(t, _) if *t == first));
        if !answered {
            self.err(format!("{command:?} ended and {first:?} was not answered"));
        }
        let permitted = calls.contains(&Call::Permit);
        if accepted && matches!(command, VehicleCommand::Takeoff { .. }) && !permitted {
            self.err("an accepted takeoff did not hand the vehicle to the gateway".into());
        }
        true
    }

    fn support_lost(&mut self, of_streaming: bool) -> bool {
        let binding = match (self.m.streaming, of_streaming) {
            (Some(s), true) => s,
            (None, true) => return false,
            _ => b(200),
        };
        let (r, c) = ids();
        self.sup.handle_support_lost(
            self.now,
            &r,
            &c,
            binding,
            ReasonCode::EPOCH_CHANGED,
            &mut self.v,
        );
        let expect = self.m.streaming == Some(binding) && self.v.takes_setpoints;
        let (outs, calls) = self.drain();
        let held = calls.contains(&Call::Hold);
        if held != expect {
            self.err(format!("deny-hold {held}, want {expect}"));
        }
        let recorded = outs
            .iter()
            .any(|o| matches!(o, Output::Record("deny_hold", d) if d["held"] == expect));
        if !recorded {
            self.err("no deny_hold receipt saying whether it held".into());
        }
        if expect {
            self.seen.deny_held = true;
            self.m.streaming = None;
            self.m.arrival = None;
        }
        true
    }

    fn enqueued(&mut self, what: Enq) {
        self.next_binding = self.next_binding.wrapping_add(1).max(1);
        let binding = b(self.next_binding);
        let what = match what {
            Enq::Hold => Enqueued::Hold,
            Enq::Land => Enqueued::Land,
            Enq::Route(x, y) => Enqueued::Route([f64::from(x), f64::from(y), -2.0]),
        };
        self.sup.handle_enqueued(binding, what);
        let _ = self.drain();
        match what {
            Enqueued::Route(t) => {
                self.m.streaming = Some(binding);
                self.m.arrival = Some((binding, t));
            }
            _ => {
                self.m.streaming = None;
                self.m.arrival = None;
            }
        }
    }

    /// A position report, near the arrival point or not; `false` when there is no arrival
    /// point to be near (the report is the same either way).
    fn position(&mut self, near: bool) -> bool {
        let meaningful = !near || self.m.arrival.is_some();
        let ned = match (self.m.arrival, near) {
            (Some((_, t)), true) => [t[0] + 0.05, t[1] - 0.05, t[2]],
            (Some((_, t)), false) => [t[0] + 1.0, t[1], t[2]],
            (None, _) => [0.0, 0.0, -1.0],
        };
        let want = match self.m.arrival {
            Some((b, _)) if near => Some(b),
            _ => None,
        };
        let (outs, _) = self.observe(Observation::Position { ned_m: ned });
        let got: Vec<Binding> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Observed(b) => Some(*b),
                _ => None,
            })
            .collect();
        if got != want.into_iter().collect::<Vec<_>>() {
            self.err(format!("arrival {got:?}, want {want:?}"));
        }
        if want.is_some() {
            self.m.arrival = None;
        }
        meaningful
    }

    fn advance(&mut self, ms: u64) {
        let step = Nanos::from_ms(ms);
        self.now = self.now.saturating_add(step);
        if self.sup.poll_timeout().is_some_and(|t| t <= self.now) {
            self.sup.handle_timeout(self.now, &mut self.v);
        }
        let before = self.m.pending.clone();
        let (outs, _) = self.drain();
        // Deadlines: answered at or after their deadline, never before; none overdue now.
        let due: Vec<Ticket> = self
            .m
            .pending
            .iter()
            .filter(|(_, (_, at))| self.now.saturating_sub(*at) >= Nanos::from_ms(15_000))
            .map(|(t, _)| *t)
            .collect();
        let answered: BTreeSet<Ticket> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Answer(t, _) => Some(*t),
                _ => None,
            })
            .collect();
        for t in due {
            if !self.m.answered.contains(&t) {
                self.err(format!("{t:?} overdue and unanswered"));
            }
        }
        for t in &answered {
            if let Some((_, at)) = before.get(t)
                && self.now.saturating_sub(*at) < Nanos::from_ms(15_000)
            {
                self.err(format!("{t:?} timed out before its deadline"));
            }
        }
        // Silence: a warning after 3 s without a heartbeat, then at most every 5 s.
        for o in &outs {
            if let Output::Silent(_) = o {
                let ok = self.m.silent_since.is_some_and(|s| {
                    self.now.saturating_sub(s) >= Nanos::from_ms(3000)
                        && self
                            .m
                            .last_warning
                            .is_none_or(|w| self.now.saturating_sub(w) >= Nanos::from_ms(5000))
                });
                if !ok {
                    self.err("a silence warning out of turn".into());
                }
                self.m.last_warning = Some(self.now);
            }
        }
    }

    /// The schedules' next move, drawn from `rng` as it always was.
    fn draw(&self, rng: &mut Rng) -> SupMove {
        match rng.below(20) {
            0..=2 => SupMove::Advance {
                ms: [5, 100, 900, 2500, 6000][rng.below(5)],
            },
            3..=5 => SupMove::Operator(Run::draw_operator(rng)),
            6 => {
                let k = rng.below(self.m.pending.len());
                let accepted = !self.m.pending.is_empty() && rng.below(2) == 0;
                SupMove::VehicleAnswers { k, accepted }
            }
            7 => SupMove::Link {
                up: rng.below(3) != 0,
            },
            8 => SupMove::Facts {
                takes_setpoints: rng.below(3) != 0,
                queue_full: rng.below(6) == 0,
                flying: rng.below(2) == 0,
                armed: rng.below(2) == 0,
            },
            9 => SupMove::Mode(["OFFBOARD", "AUTO.LOITER", "POSCTL", "AUTO.LAND"][rng.below(4)]),
            10 => SupMove::Override,
            // The bridge withdraws or restores its permission; it restores it only after the
            // operator gave the vehicle back (it is the bridge's own rule).
            11 => SupMove::Permission {
                permitted: rng.below(2) == 0 && (!self.m.overridden || self.m.given_back),
            },
            12 => SupMove::Armed {
                armed: rng.below(2) == 0,
            },
            13 => SupMove::Home,
            14 => SupMove::Enqueued(match rng.below(5) {
                0 => Enq::Hold,
                1 => Enq::Land,
                _ => Enq::Route(rng.below(10) as u8, rng.below(10) as u8),
            }),
            15 => {
                let pick = rng.below(3);
                SupMove::SupportLost {
                    of_streaming: self.m.streaming.is_some() && pick < 2,
                }
            }
            16 => SupMove::Position {
                near: rng.below(2) == 0,
            },
            17 => {
                let pick = rng.below(2);
                SupMove::TargetStopped {
                    of_streaming: self.m.streaming.is_some() && pick == 0,
                }
            }
            18 => SupMove::Heard,
            _ => {
                if rng.below(8) == 0 {
                    SupMove::ReceiptsFail
                } else {
                    SupMove::Echoed
                }
            }
        }
    }

    /// Makes one move and checks what came out; `false` when the move had nothing to act on
    /// or is not one the environment makes in this state (the model has no such successor).
    pub(crate) fn apply(&mut self, mv: SupMove) -> bool {
        match mv {
            SupMove::Advance { ms } => self.advance(ms),
            SupMove::Operator(op) => self.operator(op),
            SupMove::VehicleAnswers { k, accepted } => return self.vehicle_answers(k, accepted),
            SupMove::Link { up } => {
                self.v.link_up = up;
                self.m.link_up = up;
                self.m.silent_since = if up { None } else { Some(self.now) };
                self.m.last_warning = None;
                if !up && self.kind == VehicleKind::Crazyflie {
                    self.m.streaming = None;
                    self.m.arrival = None;
                }
                let _ = self.observe(Observation::Link { up, silent_ms: 0 });
            }
            SupMove::Facts {
                takes_setpoints,
                queue_full,
                flying,
                armed,
            } => {
                self.v.takes_setpoints = takes_setpoints;
                self.v.queue_full = queue_full;
                self.v.flying = flying;
                self.v.armed = armed;
            }
            SupMove::Mode(to) => {
                self.m.mode = Some(to.into());
                let _ = self.observe(Observation::Mode { to: to.into() });
            }
            SupMove::Override => {
                self.seen.overridden = true;
                self.m.overridden = true;
                self.m.given_back = false;
                self.m.streaming = None;
                self.m.arrival = None;
                // The mode change itself comes as its own report (`Mode`).
                let _ = self.observe(Observation::Override {
                    from: self.m.mode.clone(),
                    to: "AUTO.LOITER".into(),
                    stopped: serde_json::Value::Null,
                });
            }
            SupMove::Permission { permitted } => {
                if permitted && self.m.overridden && !self.m.given_back {
                    return false;
                }
                self.m.granted = permitted;
                let _ = self.observe(Observation::Permission { permitted });
            }
            SupMove::Armed { armed } => {
                self.m.armed = armed;
                let _ = self.observe(Observation::Armed { armed });
            }
            SupMove::Home => {
                self.m.home = true;
                let _ = self.observe(Observation::HomeAltitude { amsl_m: 488.0 });
            }
            SupMove::Enqueued(what) => self.enqueued(what),
            SupMove::SupportLost { of_streaming } => return self.support_lost(of_streaming),
            SupMove::Position { near } => return self.position(near),
            SupMove::TargetStopped { of_streaming } => {
                let binding = match (self.m.streaming, of_streaming) {
                    (Some(s), true) => s,
                    (None, true) => return false,
                    _ => b(201),
                };
                if self.m.streaming == Some(binding) {
                    self.m.streaming = None;
                    self.m.arrival = None;
                }
                let _ = self.observe(Observation::TargetStopped { binding });
            }
            SupMove::Heard => {
                let _ = self.observe(Observation::Heard {
                    at: self.now,
                    uncertainty: Nanos::from_ms(1),
                });
            }
            SupMove::ReceiptsFail => self.receipts_fail(),
            SupMove::Echoed => {
                let _ = self.observe(Observation::TargetEchoed { binding: b(7) });
            }
            SupMove::Shutdown => self.shutdown(),
        }
        self.seen.given_back |= self.m.overridden && self.m.given_back;
        true
    }

    fn receipts_fail(&mut self) {
        self.seen.receipts_refused = true;
        let first = !self.m.failed;
        let r = self
            .sup
            .handle_receipts_failed("disk full", &[], &mut self.v);
        self.m.failed = true;
        self.m.streaming = None;
        self.m.arrival = None;
        let (_, calls) = self.drain();
        let holds = calls.iter().filter(|c| **c == Call::Hold).count();
        if r.is_some() != first {
            self.err("the receipt log's failure was decided twice, or not at all".into());
        }
        let want = usize::from(first);
        if holds != want {
            self.err(format!(
                "{holds} holds on the receipt log's failure, want {want}"
            ));
        }
    }

    fn shutdown(&mut self) {
        // PX4 is asked out of OFFBOARD when it is there (a full queue refuses the command).
        let px4_hold_mode = self.m.armed
            && self.m.mode.as_deref() == Some("OFFBOARD")
            && self.m.link_up
            && !self.v.queue_full;
        self.sup.begin_shutdown(&mut self.v);
        self.m.held = true;
        self.m.streaming = None;
        let (_, calls) = self.drain();
        if self.kind == VehicleKind::Px4 {
            let hold_mode = calls.contains(&Call::Command(VehicleCommand::HoldMode));
            if hold_mode != px4_hold_mode {
                self.err(format!(
                    "shutdown: PX4 HOLD commanded {hold_mode}, want {px4_hold_mode} (calls {calls:?})"
                ));
            }
        }
        let settled = self.sup.shutdown_settled(&self.v);
        self.sup.finish_shutdown(settled, &mut self.v);
        let _ = self.drain();
        let open: Vec<Ticket> = self.m.asked.difference(&self.m.answered).copied().collect();
        if !open.is_empty() {
            self.err(format!("unanswered after the shutdown: {open:?}"));
        }
    }
}

fn schedule(kind: VehicleKind, seed: u64, defect: Option<Defect>) -> Vec<String> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut run = Run::new(kind, &mut rng, defect);
    for _ in 0..STEPS {
        let mv = run.draw(&mut rng);
        run.apply(mv);
    }
    run.shutdown();
    run.errors
}

#[test]
fn supervisor_schedules() {
    let _timing = common::shared();
    let mut matched = 0;
    let mut total = 0;
    for kind in [VehicleKind::Px4, VehicleKind::Crazyflie] {
        for seed in 0..SCHEDULES as u64 {
            total += 1;
            let errors = schedule(kind, seed, None);
            if errors.is_empty() {
                matched += 1;
            } else {
                println!("  {kind:?} seed {seed}: {}", errors.join("; "));
            }
        }
    }
    println!(
        "supervisor-schedules: {matched}/{total} matched ({SCHEDULES} seeded schedules per vehicle kind, {STEPS} steps and a shutdown each)"
    );
    assert_eq!((matched, total), (2 * SCHEDULES, 2 * SCHEDULES));

    // Each planted defect is caught by some schedule.
    let mut caught = 0;
    for d in DEFECTS {
        let failing = (0..200u64)
            .filter(|&seed| {
                [VehicleKind::Px4, VehicleKind::Crazyflie]
                    .into_iter()
                    .any(|k| !schedule(k, seed, Some(d)).is_empty())
            })
            .count();
        println!("  planted defect {d:?}: {failing}/200 seeds caught it");
        caught += usize::from(failing > 0);
    }
    println!("supervisor-defects: {caught}/{} caught", DEFECTS.len());
    assert_eq!(caught, DEFECTS.len());
}

/// PX4's takeoff, as issue 24 found it on a real PX4: accepted while disarmed (and flown the
/// moment someone armed), so the supervisor refuses it unless armed; once accepted, a vehicle
/// that is not in the air within `TAKEOFF_AIRBORNE_WITHIN` is reported; a refusal carries
/// PX4's own words.
#[test]
fn px4_takeoff_needs_an_armed_vehicle_and_must_leave_the_ground() {
    use halo_supervisor::TAKEOFF_AIRBORNE_WITHIN;
    let drain = |sup: &mut Supervisor| -> Vec<Output> {
        std::iter::from_fn(|| sup.poll_output()).collect()
    };
    let answer = |outs: &[Output], t: Ticket| {
        outs.iter().find_map(|o| match o {
            Output::Answer(x, a) if *x == t => Some(a.clone()),
            _ => None,
        })
    };
    let stalled = |outs: &[Output]| {
        outs.iter()
            .any(|o| matches!(o, Output::Notice("takeoff_stalled", _)))
    };
    for lifts_off in [false, true] {
        let mut sup = Supervisor::new(VehicleKind::Px4, "udpin:127.0.0.1:0", 1, Nanos(0), false);
        let mut v = FakeVehicle {
            link_up: true,
            ..FakeVehicle::default()
        };
        let mut contract = FakeContract {
            active: false,
            refuse: false,
            committed: 0,
        };
        let now = Nanos::from_ms(1000);
        for o in [
            Observation::Link {
                up: true,
                silent_ms: 0,
            },
            Observation::HomeAltitude { amsl_m: 488.0 },
            Observation::Armed { armed: false },
        ] {
            sup.handle_observation(now, o, &mut v);
        }
        let _ = drain(&mut sup);
        // Disarmed: refused with its own code, nothing sent.
        let op = OperatorOp::Takeoff { altitude_m: 5.0 };
        sup.handle_operator(now, Ticket(1), op, &mut v, &mut contract);
        let outs = drain(&mut sup);
        match answer(&outs, Ticket(1)) {
            Some(Err(r)) => assert_eq!(r.code, ReasonCode::VEHICLE_NOT_ARMED, "{}", r.message),
            other => panic!("a disarmed takeoff was answered {other:?}"),
        }
        assert!(v.calls.is_empty(), "sent {:?}", v.calls);
        // An arm PX4 refuses: the answer carries PX4's reason.
        sup.handle_operator(now, Ticket(2), OperatorOp::Arm, &mut v, &mut contract);
        sup.handle_observation(
            now,
            Observation::CommandEnded {
                command: VehicleCommand::Arm,
                accepted: false,
                outcome: "temporarily rejected".into(),
                reason: Some("Arming denied: Resolve system health failures first".into()),
            },
            &mut v,
        );
        let outs = drain(&mut sup);
        match answer(&outs, Ticket(2)) {
            Some(Err(r)) => assert!(
                r.message
                    .contains("PX4 says: \"Arming denied: Resolve system health failures first\""),
                "{}",
                r.message
            ),
            other => panic!("the refused arm was answered {other:?}"),
        }
        // Armed: the takeoff goes out; PX4 accepts it.
        sup.handle_observation(now, Observation::Armed { armed: true }, &mut v);
        sup.handle_operator(now, Ticket(3), op, &mut v, &mut contract);
        assert!(
            v.calls
                .iter()
                .any(|c| matches!(c, Call::Command(VehicleCommand::Takeoff { .. })))
        );
        sup.handle_observation(
            now,
            Observation::CommandEnded {
                command: VehicleCommand::Takeoff {
                    amsl_m: Some(493.0),
                    height_m: 5.0,
                },
                accepted: true,
                outcome: "accepted".into(),
                reason: None,
            },
            &mut v,
        );
        let outs = drain(&mut sup);
        assert!(matches!(answer(&outs, Ticket(3)), Some(Ok(_))));
        if lifts_off {
            sup.handle_observation(
                now.saturating_add(Nanos::from_ms(3000)),
                Observation::Airborne { airborne: true },
                &mut v,
            );
        }
        // Just before the deadline nothing; at it, a report unless it lifted off.
        let due = now.saturating_add(TAKEOFF_AIRBORNE_WITHIN);
        sup.handle_timeout(due.saturating_sub(Nanos(1)), &mut v);
        assert!(!stalled(&drain(&mut sup)), "reported before the deadline");
        sup.handle_timeout(due, &mut v);
        assert_eq!(
            stalled(&drain(&mut sup)),
            !lifts_off,
            "lifted off: {lifts_off}"
        );
    }
    println!(
        "supervisor-takeoff: 2/2 matched (refused disarmed, PX4's reason shown, stalled takeoff reported, a takeoff that lifts off not)"
    );
}
