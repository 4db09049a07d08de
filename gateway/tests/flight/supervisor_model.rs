//! `model-check` of the supervisor: every interleaving of its environment's moves up to a
//! depth, explored by `stateright`, with the real [`halo_supervisor::Supervisor`] as the step
//! function and the checker of `supervisor_schedules.rs` (its own bookkeeping of what should
//! stream, hold, be granted and be answered; it calls nothing of the supervisor's but the inputs
//! and outputs under test) judging every step.
//!
//! A state is the sequence of moves made so far; its successor replays the sequence on a fresh
//! supervisor and makes one more move (the supervisor is deterministic in virtual time, so the
//! replay is the state). The domain (stated here and in docs/conformance.md): three starting
//! points — a PX4 whose permission is granted under a registered contract that admits the
//! takeoff, a PX4 not yet granted under a contract that refuses it, a Crazyflie with no
//! contract —, each with the link up, setpoints taken, flying and armed; and these moves: time
//! passing 100 ms or 16 s (past a command's deadline), the operator's arm, takeoff to 1.5 m,
//! land, hold and release, the vehicle accepting or refusing the first pending command, the
//! link lost and back, a full command queue, PX4 reporting OFFBOARD, the pilot's override, the
//! bridge's permission withdrawn and restored (restored only after the operator gave the
//! vehicle back: the bridge's own rule), home known, a route or a hold enqueued by the core,
//! support of the streaming target lost, a position at the arrival point, the receipt log
//! refusing a write, the shutdown (a trace's last move).
//!
//! Properties, in every state: each family of the checker's rules is a property of its own, so
//! a violation names the promise it breaks. Reachability (`sometimes`), so the model cannot pass
//! by being vacuous: an operator hold while a target streams, a deny-hold that holds, the
//! pilot's override and the operator giving the vehicle back, the vehicle answering a command,
//! the receipt log refusing.
//!
//! `HALO_MODEL_DEPTH` sets the depth (default: the CI slice, pinned below);
//! `scripts/model_check.sh` runs the deep one.
use std::fmt;
use std::time::Instant;

use halo_supervisor::VehicleKind;
use stateright::{Checker, Model, Property};

use crate::supervisor_schedules::{Alt, DEFECTS, Defect, Enq, Op, Run, Seen, SupMove};

/// The moves the model makes, in every state where they apply.
const MOVES: [SupMove; 22] = [
    SupMove::Advance { ms: 100 },
    SupMove::Advance { ms: 16_000 },
    SupMove::Operator(Op::Arm),
    SupMove::Operator(Op::Takeoff(Alt::Tenths(5))),
    SupMove::Operator(Op::Land),
    SupMove::Operator(Op::Hold),
    SupMove::Operator(Op::Release),
    SupMove::VehicleAnswers {
        k: 0,
        accepted: true,
    },
    SupMove::VehicleAnswers {
        k: 0,
        accepted: false,
    },
    SupMove::Link { up: false },
    SupMove::Link { up: true },
    SupMove::Facts {
        takes_setpoints: true,
        queue_full: true,
        flying: true,
        armed: true,
    },
    SupMove::Mode("OFFBOARD"),
    SupMove::Override,
    SupMove::Permission { permitted: false },
    SupMove::Permission { permitted: true },
    SupMove::Home,
    SupMove::Enqueued(Enq::Route(3, 4)),
    SupMove::Enqueued(Enq::Hold),
    SupMove::SupportLost { of_streaming: true },
    SupMove::Position { near: true },
    SupMove::ReceiptsFail,
];

/// The starting points: vehicle, PX4's permission granted, contract (registered, refusing).
const STARTS: [(VehicleKind, bool, (bool, bool)); 3] = [
    (VehicleKind::Px4, true, (true, false)),
    (VehicleKind::Px4, false, (true, true)),
    (VehicleKind::Crazyflie, false, (false, false)),
];

/// Every start begins with the link up and the vehicle flying, armed and taking setpoints.
const PRELUDE: [SupMove; 2] = [
    SupMove::Link { up: true },
    SupMove::Facts {
        takes_setpoints: true,
        queue_full: false,
        flying: true,
        armed: true,
    },
];

/// The CI slice's depth and the state count it reaches (pinned).
const SLICE: (usize, usize) = (5, 370_603);

struct SupervisorModel {
    defect: Option<Defect>,
}

/// A state: the start, the moves made, and what replaying them showed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Trace {
    start: usize,
    moves: Vec<SupMove>,
    violation: Option<String>,
    seen: Seen,
}

impl SupervisorModel {
    /// Replays a trace: `None` when its last move had nothing to act on.
    fn replay(&self, start: usize, moves: &[SupMove]) -> Option<Trace> {
        let (kind, granted, contract) = STARTS[start];
        let mut run = Run::with(kind, granted, contract, self.defect);
        for mv in PRELUDE {
            run.apply(mv);
        }
        let mut violation = run
            .errors
            .first()
            .cloned()
            .map(|e| format!("at the start: {e}"));
        for (i, mv) in moves.iter().enumerate() {
            if violation.is_some() {
                break;
            }
            if !run.apply(*mv) {
                assert!(i + 1 == moves.len(), "a prefix of a trace made every move");
                return None;
            }
            violation = run.errors.first().cloned();
        }
        Some(Trace {
            start,
            moves: moves.to_vec(),
            violation,
            seen: run.seen,
        })
    }
}

impl Model for SupervisorModel {
    type State = Trace;
    type Action = SupMove;

    fn init_states(&self) -> Vec<Trace> {
        (0..STARTS.len())
            .filter_map(|s| self.replay(s, &[]))
            .collect()
    }

    fn actions(&self, state: &Trace, actions: &mut Vec<SupMove>) {
        // A violation is a counterexample and the shutdown is the end: nothing follows them.
        if state.violation.is_none() && state.moves.last() != Some(&SupMove::Shutdown) {
            actions.extend(MOVES);
            actions.push(SupMove::Shutdown);
        }
    }

    fn next_state(&self, last: &Trace, mv: SupMove) -> Option<Trace> {
        let mut moves = last.moves.clone();
        moves.push(mv);
        self.replay(last.start, &moves)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        PROPERTIES
            .iter()
            .map(|(name, _, check)| Property::always(name, *check))
            .chain(
                REACHABLE
                    .iter()
                    .map(|(name, check)| Property::sometimes(name, *check)),
            )
            .collect()
    }
}

fn not_broken(s: &Trace, words: &[&str]) -> bool {
    s.violation
        .as_deref()
        .is_none_or(|v| !words.iter().any(|w| v.contains(w)))
}

type Check = fn(&SupervisorModel, &Trace) -> bool;

const HOLD: &[&str] = &["an operator hold did not hold", "dispatch open"];
const PILOT: &[&str] = &["took the vehicle back", "did not hand the vehicle"];
const DENY: &[&str] = &["deny-hold", "no deny_hold receipt"];
const RECEIPTS: &[&str] = &["receipt log's failure"];
const ANSWERS: &[&str] = &[
    "answered twice",
    "never asked",
    "not answered",
    "was not answered",
    "overdue",
    "timed out before",
    "unanswered after the shutdown",
];
const COMMANDS: &[&str] = &[" sent ", "HOLD commanded", "control "];

/// The `always` properties: name, the checker's words for a violation of it, and the check.
const PROPERTIES: [(&str, &[&str], Check); 7] = [
    (
        "the operator's hold holds the vehicle, and dispatch is open only with no hold and a working receipt log",
        HOLD,
        |_, s| not_broken(s, HOLD),
    ),
    (
        "the pilot wins: after an override only the operator gives the gateway the vehicle",
        PILOT,
        |_, s| not_broken(s, PILOT),
    ),
    (
        "a deny-hold holds exactly when the streaming target lost support, with its receipt",
        DENY,
        |_, s| not_broken(s, DENY),
    ),
    (
        "a refusing receipt log holds the vehicle once",
        RECEIPTS,
        |_, s| not_broken(s, RECEIPTS),
    ),
    (
        "every operator request is answered exactly once, on time",
        ANSWERS,
        |_, s| not_broken(s, ANSWERS),
    ),
    (
        "a vehicle command goes out only when it may, and `control` reads granted and not held",
        COMMANDS,
        |_, s| not_broken(s, COMMANDS),
    ),
    ("no violation of any other kind", &[], |_, s| {
        s.violation.as_deref().is_none_or(|v| {
            [HOLD, PILOT, DENY, RECEIPTS, ANSWERS, COMMANDS]
                .iter()
                .any(|words| words.iter().any(|w| v.contains(w)))
        })
    }),
];

/// The `sometimes` properties.
const REACHABLE: [(&str, Check); 6] = [
    ("an operator hold while a target streams", |_, s| {
        s.seen.hold_while_streaming
    }),
    ("a deny-hold holds the vehicle", |_, s| s.seen.deny_held),
    ("the pilot overrides", |_, s| s.seen.overridden),
    ("the vehicle is given back after an override", |_, s| {
        s.seen.given_back
    }),
    ("the vehicle answers a command", |_, s| {
        s.seen.vehicle_answered
    }),
    ("the receipt log refuses", |_, s| s.seen.receipts_refused),
];

impl fmt::Display for SupMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SupMove::Advance { ms } => write!(f, "{} s pass", ms as f64 / 1000.0),
            SupMove::Operator(op) => match op {
                Op::Arm => write!(f, "the operator arms"),
                Op::Disarm => write!(f, "the operator disarms"),
                Op::Takeoff(Alt::Tenths(t)) => {
                    write!(
                        f,
                        "the operator takes off to {:.1} m",
                        1.0 + f64::from(t) * 0.1
                    )
                }
                Op::Takeoff(_) => write!(f, "the operator takes off to an altitude out of range"),
                Op::Land => write!(f, "the operator lands"),
                Op::ReturnToLaunch => write!(f, "the operator returns to launch"),
                Op::Hold => write!(f, "the operator holds"),
                Op::Release => write!(f, "the operator releases"),
            },
            SupMove::VehicleAnswers { k, accepted } => write!(
                f,
                "the vehicle {} pending command {k}",
                if accepted { "accepts" } else { "refuses" }
            ),
            SupMove::Link { up: true } => write!(f, "the link comes back"),
            SupMove::Link { up: false } => write!(f, "the link is lost"),
            SupMove::Facts { queue_full, .. } => write!(
                f,
                "the vehicle's command queue is {}",
                if queue_full { "full" } else { "free" }
            ),
            SupMove::Mode(m) => write!(f, "PX4 reports {m}"),
            SupMove::Override => write!(f, "the pilot takes over (AUTO.LOITER)"),
            SupMove::Permission { permitted } => write!(
                f,
                "the bridge {} its permission",
                if permitted { "restores" } else { "withdraws" }
            ),
            SupMove::Armed { armed } => write!(f, "armed reported {armed}"),
            SupMove::Home => write!(f, "PX4 reports its home"),
            SupMove::Enqueued(Enq::Route(x, y)) => {
                write!(f, "the core enqueues a route to ({x}, {y}, -2) m")
            }
            SupMove::Enqueued(Enq::Hold) => write!(f, "the core enqueues a hold"),
            SupMove::Enqueued(Enq::Land) => write!(f, "the core enqueues a land"),
            SupMove::SupportLost { of_streaming } => write!(
                f,
                "support lost ({})",
                if of_streaming {
                    "the streaming target"
                } else {
                    "another binding"
                }
            ),
            SupMove::Position { near } => write!(
                f,
                "a position {}",
                if near {
                    "at the arrival point"
                } else {
                    "away from it"
                }
            ),
            SupMove::TargetStopped { .. } => write!(f, "the bridge stops the target"),
            SupMove::Heard => write!(f, "a heartbeat"),
            SupMove::ReceiptsFail => write!(f, "the receipt log refuses a write"),
            SupMove::Echoed => write!(f, "the vehicle echoes a target"),
            SupMove::Shutdown => write!(f, "the service shuts down"),
        }
    }
}

fn defect_name(d: Defect) -> &'static str {
    match d {
        Defect::NoDenyHold => "deny-holds swallowed",
        Defect::RegrantAfterOverride => "control taken back after an override",
        Defect::DropTakeoffAnswer => "a takeoff's answer lost",
        Defect::OpenAfterFailure => "dispatch reopened after the receipt log refused",
    }
}

/// One model run.
struct Outcome {
    states: usize,
    depth: usize,
    violations: Vec<String>,
    unreached: Vec<&'static str>,
    secs: f64,
}

/// Explores every trace up to `depth` states (the start is the first); a violation is
/// reported with the trace that reached it, which need not be the shortest.
fn check(depth: usize, defect: Option<Defect>) -> Outcome {
    let t = Instant::now();
    let checker = SupervisorModel { defect }
        .checker()
        .target_max_depth(depth)
        .spawn_bfs()
        .join();
    let found = checker.discoveries();
    let mut violations = Vec::new();
    for (name, _, _) in PROPERTIES {
        if let Some(path) = found.get(name) {
            let last = path.last_state().clone();
            let (kind, granted, _) = STARTS[last.start];
            let steps: Vec<String> = path
                .clone()
                .into_actions()
                .iter()
                .enumerate()
                .map(|(i, m)| format!("      {}. {m}", i + 1))
                .collect();
            violations.push(format!(
                "{name}\n    from a {} (permission {}), after:\n{}\n    the checker: {}",
                match kind {
                    VehicleKind::Px4 => "PX4",
                    VehicleKind::Crazyflie => "Crazyflie",
                },
                if granted { "granted" } else { "not granted" },
                steps.join("\n"),
                last.violation.unwrap_or_default()
            ));
        }
    }
    let unreached = REACHABLE
        .iter()
        .map(|(name, _)| *name)
        .filter(|n| !found.contains_key(n))
        .collect();
    Outcome {
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        violations,
        unreached,
        secs: t.elapsed().as_secs_f64(),
    }
}

#[test]
fn every_interleaving_up_to_the_depth_keeps_the_supervisors_promises() {
    let asked: Option<usize> = std::env::var("HALO_MODEL_DEPTH")
        .ok()
        .map(|v| v.parse().expect("HALO_MODEL_DEPTH is a depth"));
    let depth = asked.unwrap_or(SLICE.0);
    let props = PROPERTIES.len() + REACHABLE.len();
    let r = check(depth, None);
    println!(
        "model-check: {} states, depth {}, {props} properties, {} violations (the supervisor, {} starts, {:.1} s)",
        r.states,
        r.depth,
        r.violations.len(),
        STARTS.len(),
        r.secs
    );
    for v in &r.violations {
        println!("  VIOLATION {v}");
    }
    for u in &r.unreached {
        println!("  NEVER REACHED: {u}");
    }
    assert!(r.violations.is_empty() && r.unreached.is_empty());
    if asked.is_none() {
        assert_eq!(
            (r.depth, r.states),
            SLICE,
            "the CI slice's depth and states are pinned"
        );
    }

    // The planted defects of the sampled schedules: each breaks a property here, and the
    // trace that breaks it is printed in words.
    let mut caught = 0;
    for d in DEFECTS {
        let r = check(SLICE.0, Some(d));
        match r.violations.first() {
            Some(v) => {
                caught += 1;
                println!("  {} caught: {v}", defect_name(d));
            }
            None => println!("  {} survives the slice", defect_name(d)),
        }
    }
    println!(
        "model-check-defects: {caught}/{} caught (the supervisor)",
        DEFECTS.len()
    );
    assert_eq!(caught, DEFECTS.len());
}
