//! `contract-protocol`: positive and negative checks over every gate of the mission-contract
//! protocol — root lifecycle, witnesses, bottom-up resolution, cancel then explicit recovery,
//! obligation non-expansion, all-interleaving joins, atomic commit, idempotency and profile
//! limits. Each check sets up a monitor through allowed steps, sends one request and compares
//! the verdict and reason with what the specification requires. A refused request must leave the
//! retained state and the versions exactly as they were; an allowed one must change them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use halo_core::contract::monitor::{delegation_digest, edit_digest};
use halo_core::contract::workflow::{Runner, Step};
use halo_core::contract::{
    ContractSpec, Domain, GoalSpec, Monitor, Op, PolicyRule, Request, Role, Verdict, WitnessClaim,
};
use halo_core::reason::ReasonCode as R;

const T1: &[&str] = &["takeoff", "goto(wp1)", "photograph(wp1)", "return", "land"];
const T2: &[&str] = &["takeoff", "goto(wp2)", "photograph(wp2)", "return", "land"];
const T3: &[&str] = &[
    "takeoff",
    "goto(wp1)",
    "photograph(wp1)",
    "goto(wp2)",
    "photograph(wp2)",
    "return",
    "land",
];

fn domain() -> Domain {
    let path = common::repo_root().join("catalogs/contract-uav.toml");
    Domain::parse(&std::fs::read_to_string(path).unwrap(), "contract-uav.toml").unwrap()
}

fn s(x: &[&str]) -> Vec<String> {
    x.iter().map(|e| (*e).to_string()).collect()
}

fn contract() -> ContractSpec {
    let path = common::data_dir().join("contract/pairs-uav.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::from_value(v[0]["contract"].clone()).unwrap()
}

fn goal(id: &str, parent: &str, traces: &[&[&str]]) -> GoalSpec {
    GoalSpec {
        closing: s(&["photos >= 1", "airborne == false", "zone == home"]),
        completion: vec![Vec::new()],
        discharged: Vec::new(),
        frames: Vec::new(),
        id: id.into(),
        obligations: s(&["review"]),
        parent: parent.into(),
        resources: s(&["camera", "zone:wp1", "zone:wp2"]),
        text: None,
        traces: traces.iter().map(|t| s(t)).collect(),
    }
}

struct Fx {
    r: Runner,
}

impl Fx {
    fn new() -> Fx {
        let mut r = Runner::new(Monitor::new(domain()), "k");
        assert!(r.register(&contract(), "ops-lead").allowed());
        Fx { r }
    }

    fn bare() -> Fx {
        Fx {
            r: Runner::new(Monitor::new(domain()), "k"),
        }
    }

    fn m(&self) -> &Monitor {
        self.r.monitor()
    }

    /// Runs setup steps; each must be allowed.
    fn ok(&mut self, steps: &[Step]) -> &mut Fx {
        for st in steps {
            let o = self.r.step(st);
            assert!(o.allowed(), "setup step {st:?} refused: {o:?}");
        }
        self
    }

    fn witness(&self, parent: &str, g: &GoalSpec) -> WitnessClaim {
        self.m().witness_for(parent, &edit_digest(g))
    }

    fn send(&mut self, caller: Role, op: Op) -> halo_core::contract::Decision {
        self.r.monitor_mut().handle(Request { caller, op })
    }

    fn agent(&mut self, op: Op) -> halo_core::contract::Decision {
        self.send(Role::Agent, op)
    }

    fn propose_op(&self, g: &GoalSpec) -> Op {
        Op::ProposeGoal {
            goal: g.clone(),
            witness: self.witness(&g.parent, g),
        }
    }

    fn authorize(&mut self, goal: &str, effect: &str) -> halo_core::contract::Decision {
        self.agent(Op::AuthorizeEffect {
            effect: effect.into(),
            goal: goal.into(),
        })
    }
}

fn propose(g: GoalSpec) -> Step {
    Step::Propose {
        goal: g,
        witness: None,
        drift: false,
    }
}

fn effect(goal: &str, e: &str) -> Step {
    Step::Effect {
        goal: goal.into(),
        effect: e.into(),
        drift: false,
    }
}

fn effects(goal: &str, t: &[&str]) -> Vec<Step> {
    t.iter().map(|e| effect(goal, e)).collect()
}

fn observe(var: &str, v: serde_json::Value) -> Step {
    Step::Observe {
        values: BTreeMap::from([(var.to_string(), v)]),
        drift: false,
    }
}

fn policy(rules: Vec<PolicyRule>) -> Step {
    Step::Policy {
        rules,
        drift: false,
    }
}

fn reauth(goal: &str) -> Step {
    Step::Reauthorize {
        goal: goal.into(),
        drift: false,
    }
}

/// One check: a name, the expected verdict and reason, and a body that returns the fixture and
/// the operation to judge (sent by `caller`).
struct Check {
    name: &'static str,
    expect: (Verdict, Option<R>),
    body: Box<dyn Fn() -> (Fx, Role, Op)>,
}

fn check(
    name: &'static str,
    verdict: Verdict,
    reason: Option<R>,
    body: impl Fn() -> (Fx, Role, Op) + 'static,
) -> Check {
    Check {
        name,
        expect: (verdict, reason),
        body: Box::new(body),
    }
}

use Verdict::{Allow, Deny, Indeterminate, Reauthorize};

fn with_g1() -> Fx {
    let mut f = Fx::new();
    f.ok(&[propose(goal("g1", "survey", &[T1]))]);
    f
}

fn flown_g1() -> Fx {
    let mut f = with_g1();
    f.ok(&effects("g1", T1));
    f
}

fn join_fixture() -> Fx {
    let mut f = Fx::new();
    let mut a = goal("a", "survey", &[&["goto(wp1)", "photograph(wp1)"]]);
    a.completion = vec![s(&["goto(wp2)", "photograph(wp2)", "return", "land"])];
    a.closing = s(&["photos >= 1"]);
    let mut b = goal("b", "survey", &[&["goto(wp2)", "photograph(wp2)"]]);
    b.completion = vec![s(&["goto(wp1)", "photograph(wp1)", "return", "land"])];
    b.closing = s(&["photos >= 1"]);
    f.ok(&[effect("survey", "takeoff"), propose(a), propose(b)]);
    f
}

fn joined(traces: &[&[&str]]) -> GoalSpec {
    let mut j = goal("j", "survey", traces);
    j.completion = vec![s(&["return", "land"])];
    j.closing = s(&["photos >= 2"]);
    j
}

fn join_op(f: &Fx, j: &GoalSpec, prec: &[(&str, &str)], sources: &[&str]) -> Op {
    Op::JoinGoals {
        joined: j.clone(),
        precedence: prec
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect(),
        sources: s(sources),
        witness: f.witness("survey", j),
    }
}

fn delegate_op(f: &Fx, goal: &str, resources: &[&str], root: &str, worker: &str) -> Op {
    Op::DelegateGoal {
        goal: goal.into(),
        resources: s(resources),
        root: root.into(),
        witness: f
            .m()
            .witness_for("survey", &delegation_digest(goal, &s(resources), worker)),
        worker: worker.into(),
    }
}

fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    // --- root lifecycle -----------------------------------------------------------------------
    let reg = |c: ContractSpec, who: &str| Op::RegisterRoot {
        approved_by: who.into(),
        contract: c,
    };
    v.push(check(
        "root: operator registers an approved contract",
        Allow,
        None,
        move || (Fx::bare(), Role::Operator, reg(contract(), "ops-lead")),
    ));
    v.push(check(
        "root: a second root is refused",
        Deny,
        Some(R::ROOT_EXISTS),
        move || (Fx::new(), Role::Operator, reg(contract(), "ops-lead")),
    ));
    v.push(check(
        "root: the agent cannot register a root",
        Deny,
        Some(R::WRONG_ROLE),
        move || (Fx::bare(), Role::Agent, reg(contract(), "ops-lead")),
    ));
    v.push(check(
        "root: a contract without an approving principal",
        Deny,
        Some(R::NOT_APPROVED),
        move || (Fx::bare(), Role::Operator, reg(contract(), " ")),
    ));
    v.push(check(
        "root: a root goal id with a look-alike letter from another script",
        Deny,
        Some(R::INVALID_ID),
        move || {
            let mut c = contract();
            c.root = format!("{}\u{0430}", c.root); // Cyrillic a
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: an approver name with a control character",
        Deny,
        Some(R::INVALID_ID),
        move || (Fx::bare(), Role::Operator, reg(contract(), "ops\u{0}lead")),
    ));
    v.push(check(
        "root: a permitted trace with an effect name outside the id rule",
        Deny,
        Some(R::INVALID_ID),
        move || {
            let mut c = contract();
            c.traces[0][0] = "t\u{0430}keoff".to_string();
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "propose: a goal id with a space",
        Deny,
        Some(R::INVALID_ID),
        move || {
            let f = Fx::new();
            let op = f.propose_op(&goal("g 1", "survey", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "root: a contract for another domain",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            let mut c = contract();
            c.domain = "ground-depot".into();
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: an empty trace language",
        Deny,
        Some(R::EMPTY_LANGUAGE),
        move || {
            let mut c = contract();
            c.traces.clear();
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: a permitted trace reaches a forbidden state",
        Deny,
        Some(R::INITIAL_UNSAFE),
        move || {
            let mut c = contract();
            c.traces
                .push(s(&["takeoff", "goto(nofly)", "return", "land"]));
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: an unregistered effect in the language",
        Deny,
        Some(R::EFFECT_UNKNOWN),
        move || {
            let mut c = contract();
            c.traces.push(s(&["takeoff", "barrel_roll", "land"]));
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: an initial state missing a variable",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            let mut c = contract();
            c.initial.remove("battery");
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: 257 permitted traces exceed the profile",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let mut c = contract();
            c.traces = vec![s(T1); 257];
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: a 65-effect trace exceeds the profile",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let mut c = contract();
            let mut t = s(&["takeoff"]);
            t.extend(std::iter::repeat_n("hold".to_string(), 62));
            t.extend(s(&["return", "land"]));
            c.traces.push(t);
            (Fx::bare(), Role::Operator, reg(c, "ops-lead"))
        },
    ));
    v.push(check(
        "root: operations before a root",
        Deny,
        Some(R::NO_ROOT),
        move || (Fx::bare(), Role::Agent, Op::CloseRoot {}),
    ));
    v.push(check(
        "root: closeRoot with an active goal",
        Deny,
        Some(R::DESCENDANTS_UNRESOLVED),
        move || (with_g1(), Role::Agent, Op::CloseRoot {}),
    ));
    v.push(check(
        "root: closeRoot while suspended",
        Reauthorize,
        Some(R::ROOT_SUSPENDED),
        move || {
            let mut f = Fx::new();
            f.ok(&[observe("review", true.into())]);
            (f, Role::Agent, Op::CloseRoot {})
        },
    ));
    v.push(check(
        "root: closeRoot before a permitted completion",
        Deny,
        Some(R::TRACE_NOT_PERMITTED),
        move || {
            let mut f = Fx::new();
            f.ok(&[effect("survey", "takeoff")]);
            (f, Role::Agent, Op::CloseRoot {})
        },
    ));
    v.push(check(
        "root: closeRoot with the review obligation open",
        Deny,
        Some(R::OBLIGATIONS_OPEN),
        move || {
            let mut f = Fx::new();
            f.ok(&effects("survey", T1));
            (f, Role::Agent, Op::CloseRoot {})
        },
    ));
    v.push(check(
        "root: closeRoot after a permitted completion",
        Allow,
        None,
        move || {
            let mut f = flown_g1();
            f.ok(&[
                observe("review", true.into()),
                reauth("g1"),
                Step::Close {
                    goal: "g1".into(),
                    drift: false,
                },
            ]);
            (f, Role::Agent, Op::CloseRoot {})
        },
    ));
    v.push(check(
        "root: nothing is accepted once closed",
        Deny,
        Some(R::ROOT_CLOSED),
        move || {
            let mut f = Fx::new();
            f.ok(&effects("survey", T1));
            f.ok(&[
                observe("review", true.into()),
                reauth("survey"),
                Step::CloseRoot { drift: false },
            ]);
            let g = goal("g9", "survey", &[T1]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "root: no version change once closed",
        Deny,
        Some(R::ROOT_CLOSED),
        move || {
            let mut f = Fx::new();
            f.ok(&effects("survey", T1));
            f.ok(&[
                observe("review", true.into()),
                reauth("survey"),
                Step::CloseRoot { drift: false },
            ]);
            (
                f,
                Role::Provider,
                Op::ChangeVersion {
                    policy: None,
                    observe: Some(BTreeMap::from([("battery".into(), "low".into())])),
                },
            )
        },
    ));

    // --- propose: W1–W7 ------------------------------------------------------------------------
    v.push(check("propose: a refining child", Allow, None, move || {
        let f = Fx::new();
        let op = f.propose_op(&goal("g1", "survey", &[T1, T3]));
        (f, Role::Agent, op)
    }));
    let tweak = |name: &'static str, verdict: Verdict, reason: R, w: fn(&mut WitnessClaim)| {
        check(name, verdict, Some(reason), move || {
            let f = Fx::new();
            let g = goal("g1", "survey", &[T1]);
            let mut wc = f.witness("survey", &g);
            w(&mut wc);
            (
                f,
                Role::Agent,
                Op::ProposeGoal {
                    goal: g,
                    witness: wc,
                },
            )
        })
    };
    v.push(tweak(
        "W1: a witness for another root",
        Deny,
        R::CROSS_ROOT,
        |w| w.root = "survey-east".into(),
    ));
    v.push(tweak(
        "W1: a witness for another epoch",
        Deny,
        R::CROSS_ROOT,
        |w| w.epoch += 1,
    ));
    v.push(tweak(
        "W1: a witness for another edit",
        Deny,
        R::WITNESS_MISMATCH,
        |w| w.edit = "00".repeat(32),
    ));
    v.push(tweak(
        "W1: a revision that does not follow its base",
        Deny,
        R::WITNESS_MISMATCH,
        |w| w.new_revision += 1,
    ));
    v.push(tweak(
        "W2: a witness naming another parent",
        Deny,
        R::WITNESS_MISMATCH,
        |w| w.parent = "g7".into(),
    ));
    v.push(tweak(
        "W7: a stale graph revision",
        Reauthorize,
        R::STALE_VERSION,
        |w| {
            w.base_revision -= 1;
            w.new_revision -= 1;
        },
    ));
    v.push(tweak(
        "W7: a stale policy version",
        Reauthorize,
        R::STALE_VERSION,
        |w| w.policy_version = 0,
    ));
    v.push(tweak(
        "W7: a stale state version",
        Reauthorize,
        R::STALE_VERSION,
        |w| w.state_version = 0,
    ));
    v.push(tweak(
        "W7: a stale parent revision",
        Reauthorize,
        R::STALE_VERSION,
        |w| w.parent_revision = 0,
    ));
    v.push(check(
        "W2: an unknown parent",
        Deny,
        Some(R::UNKNOWN_GOAL),
        move || {
            let f = Fx::new();
            let op = f.propose_op(&goal("g1", "nowhere", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W2: a duplicate goal id",
        Deny,
        Some(R::DUPLICATE_GOAL),
        move || {
            let f = with_g1();
            let op = f.propose_op(&goal("g1", "survey", &[T2]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W2: a parent that is no longer active",
        Deny,
        Some(R::PARENT_NOT_ACTIVE),
        move || {
            let mut f = with_g1();
            f.ok(&[Step::Cancel {
                goal: "g1".into(),
                drift: false,
            }]);
            let op = f.propose_op(&goal("g2", "g1", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W3: a continuation outside the root language",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            let f = Fx::new();
            let op = f.propose_op(&goal(
                "g1",
                "survey",
                &[&["takeoff", "goto(wp3)", "photograph(wp3)", "return", "land"]],
            ));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W3: a child outside its parent's residual language",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            let f = with_g1();
            let op = f.propose_op(&goal("g2", "g1", &[T2]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W3: a child that leaves the parent's work incomplete",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            let f = Fx::new();
            let mut g = goal(
                "g1",
                "survey",
                &[&["takeoff", "goto(wp1)", "photograph(wp1)"]],
            );
            g.closing = s(&["photos >= 1"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W3: a child and completion that close the parent",
        Allow,
        None,
        move || {
            let f = Fx::new();
            let mut g = goal(
                "g1",
                "survey",
                &[&["takeoff", "goto(wp1)", "photograph(wp1)"]],
            );
            g.closing = s(&["photos >= 1"]);
            g.completion = vec![
                s(&["return", "land"]),
                s(&["goto(wp2)", "photograph(wp2)", "return", "land"]),
            ];
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W4: a forbidden state reachable after an observation",
        Deny,
        Some(R::FORBIDDEN_REACHABLE),
        move || {
            let mut f = Fx::new();
            // A suspended root with no active goal resumes by an edit; this one is unsafe.
            f.ok(&[
                effect("survey", "takeoff"),
                observe("battery", "low".into()),
            ]);
            let op = f.propose_op(&goal("g1", "survey", &[&T2[1..]]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W4: the goal's own frame fails on a prefix",
        Deny,
        Some(R::FRAME_VIOLATION),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T3]);
            g.frames = vec![s(&["zone != wp2"])];
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W4: an ancestor's frame binds its descendant's path",
        Deny,
        Some(R::FRAME_VIOLATION),
        move || {
            let mut f = Fx::new();
            let mut g1 = goal("g1", "survey", &[T1]);
            g1.frames = vec![s(&["battery != low"])];
            f.ok(&[
                propose(g1),
                propose(goal("g2", "g1", &[T1])),
                observe("battery", "low".into()),
            ]);
            (f, Role::Agent, Op::Reauthorize { goal: "g2".into() })
        },
    ));
    v.push(check(
        "W4: the policy denies an effect of the continuation",
        Deny,
        Some(R::POLICY_VIOLATION),
        move || {
            let mut f = Fx::new();
            f.ok(&[policy(vec![PolicyRule::DenyEffect {
                effect: "goto(wp2)".into(),
            }])]);
            let op = f.propose_op(&goal("g1", "survey", &[T2]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W4: the policy bounds the trace length",
        Deny,
        Some(R::POLICY_VIOLATION),
        move || {
            let mut f = Fx::new();
            f.ok(&[policy(vec![PolicyRule::MaxTraceLen { max: 5 }])]);
            let op = f.propose_op(&goal("g1", "survey", &[T3]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W4: the policy forbids a reachable state",
        Deny,
        Some(R::POLICY_VIOLATION),
        move || {
            let mut f = Fx::new();
            f.ok(&[policy(vec![PolicyRule::Forbid {
                when: s(&["zone == wp2"]),
            }])]);
            let op = f.propose_op(&goal("g1", "survey", &[T2]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: a resource outside the root envelope",
        Deny,
        Some(R::RESOURCE_EXPANSION),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.resources.push("zone:wp3".into());
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: a child claims a resource its parent lacks",
        Deny,
        Some(R::RESOURCE_EXPANSION),
        move || {
            let mut f = Fx::new();
            let mut g1 = goal("g1", "survey", &[T1]);
            g1.resources = s(&["camera"]);
            f.ok(&[propose(g1)]);
            let op = f.propose_op(&goal("g2", "g1", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: a minted obligation",
        Deny,
        Some(R::OBLIGATION_MINTED),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.obligations.push("debrief".into());
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: an obligation dropped without evidence",
        Deny,
        Some(R::OBLIGATION_DROPPED),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.obligations.clear();
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: a discharge claimed while the evidence is false",
        Deny,
        Some(R::OBLIGATION_DROPPED),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.obligations.clear();
            g.discharged = s(&["review"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W5: a discharge backed by trusted evidence",
        Allow,
        None,
        move || {
            let mut f = Fx::new();
            f.ok(&[observe("review", true.into()), reauth("survey")]);
            let mut g = goal("g1", "survey", &[T1]);
            g.obligations.clear();
            g.discharged = s(&["review"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W6: a child closing predicate its traces do not reach",
        Deny,
        Some(R::SUCCESS_NOT_REFINED),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.closing = s(&["photos >= 2"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "W6: a composition that does not close the parent",
        Deny,
        Some(R::SUCCESS_NOT_REFINED),
        move || {
            // The language permits a flight without photos; the root's closing predicate does not.
            let mut c = contract();
            c.traces.push(s(&["takeoff", "hold", "land"]));
            let mut f = Fx::bare();
            assert!(f.r.register(&c, "ops-lead").allowed());
            let mut g = goal("g1", "survey", &[&["takeoff", "hold", "land"]]);
            g.closing = s(&["airborne == false"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "schema: an unregistered effect",
        Deny,
        Some(R::EFFECT_UNKNOWN),
        move || {
            let f = Fx::new();
            let op = f.propose_op(&goal(
                "g1",
                "survey",
                &[&["takeoff", "loop_the_loop", "land"]],
            ));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "schema: a predicate over an unknown variable",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.closing = s(&["altitude >= 10"]);
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: 257 continuations",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.traces = vec![s(T1); 257];
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: a 65-effect continuation",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.traces = vec![vec!["hold".to_string(); 65]];
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: 257 resources",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let f = Fx::new();
            let mut g = goal("g1", "survey", &[T1]);
            g.resources = (0..257).map(|i| format!("r{i}")).collect();
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: the 65th goal",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let mut f = Fx::new();
            for i in 1..64 {
                f.ok(&[propose(goal(&format!("g{i}"), "survey", &[T1]))]);
            }
            assert_eq!(f.m().goal_count(), 64);
            let op = f.propose_op(&goal("g64", "survey", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "roles: a provider cannot propose",
        Deny,
        Some(R::WRONG_ROLE),
        move || {
            let f = Fx::new();
            let op = f.propose_op(&goal("g1", "survey", &[T1]));
            (f, Role::Provider, op)
        },
    ));
    v.push(check(
        "roles: the agent cannot change the policy",
        Deny,
        Some(R::WRONG_ROLE),
        move || {
            (
                Fx::new(),
                Role::Agent,
                Op::ChangeVersion {
                    policy: Some(Vec::new()),
                    observe: None,
                },
            )
        },
    ));
    v.push(check(
        "roles: the agent cannot report state",
        Deny,
        Some(R::WRONG_ROLE),
        move || {
            (
                Fx::new(),
                Role::Agent,
                Op::ChangeVersion {
                    policy: None,
                    observe: Some(BTreeMap::from([("review".into(), true.into())])),
                },
            )
        },
    ));
    v.push(check(
        "text: persuasive free text changes nothing",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            let f = Fx::new();
            let mut g = goal(
                "g1",
                "survey",
                &[&["takeoff", "goto(wp3)", "photograph(wp3)", "return", "land"]],
            );
            g.text = Some("The operator verbally approved wp3; this is within the mission.".into());
            let op = f.propose_op(&g);
            (f, Role::Agent, op)
        },
    ));

    // --- replace, cancel and explicit recovery -------------------------------------------------
    let replace_op = |f: &Fx, old: &str, g: &GoalSpec| Op::ReplaceGoal {
        goal: g.clone(),
        old: old.into(),
        witness: f.witness(&g.parent, g),
    };
    v.push(check(
        "replace: a new revision of an active goal",
        Allow,
        None,
        move || {
            let f = with_g1();
            let op = replace_op(&f, "g1", &goal("g1", "survey", &[T3]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "replace: a closed goal cannot be replaced",
        Deny,
        Some(R::NOT_REPLACEABLE_GOAL),
        move || {
            let mut f = flown_g1();
            f.ok(&[
                observe("review", true.into()),
                reauth("g1"),
                Step::Close {
                    goal: "g1".into(),
                    drift: false,
                },
                reauth("survey"),
            ]);
            let op = replace_op(&f, "g1", &goal("g1b", "survey", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "replace: a replacement keeps the parent",
        Deny,
        Some(R::WITNESS_MISMATCH),
        move || {
            let mut f = with_g1();
            f.ok(&[propose(goal("g2", "g1", &[T1]))]);
            let op = replace_op(&f, "g2", &goal("g2", "survey", &[T1]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "replace: not while a descendant is active",
        Deny,
        Some(R::DESCENDANTS_UNRESOLVED),
        move || {
            let mut f = with_g1();
            f.ok(&[propose(goal("g2", "g1", &[T1]))]);
            let op = replace_op(&f, "g1", &goal("g1", "survey", &[T3]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check("cancel: an active leaf", Allow, None, move || {
        (with_g1(), Role::Agent, Op::CancelGoal { goal: "g1".into() })
    }));
    v.push(check(
        "cancel: leaves no witness; effects need explicit recovery",
        Reauthorize,
        Some(R::NO_CURRENT_WITNESS),
        move || {
            let mut f = with_g1();
            f.ok(&[Step::Cancel {
                goal: "g1".into(),
                drift: false,
            }]);
            (
                f,
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "takeoff".into(),
                    goal: "survey".into(),
                },
            )
        },
    ));
    v.push(check(
        "cancel: a cancelled goal is not completion evidence",
        Deny,
        Some(R::PARENT_NOT_ACTIVE),
        move || {
            let mut f = flown_g1();
            f.ok(&[Step::Cancel {
                goal: "g1".into(),
                drift: false,
            }]);
            (f, Role::Agent, Op::Reauthorize { goal: "g1".into() })
        },
    ));
    v.push(check(
        "cancel: recovery by replacing the tombstone",
        Allow,
        None,
        move || {
            let mut f = with_g1();
            f.ok(&[
                effect("g1", "takeoff"),
                Step::Cancel {
                    goal: "g1".into(),
                    drift: false,
                },
            ]);
            let op = replace_op(&f, "g1", &goal("g1", "survey", &[&T3[1..]]));
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "cancel: the root goal cannot be cancelled",
        Deny,
        Some(R::PARENT_NOT_ACTIVE),
        move || {
            (
                Fx::new(),
                Role::Agent,
                Op::CancelGoal {
                    goal: "survey".into(),
                },
            )
        },
    ));
    v.push(check(
        "cancel: not while a descendant is active",
        Deny,
        Some(R::DESCENDANTS_UNRESOLVED),
        move || {
            let mut f = with_g1();
            f.ok(&[propose(goal("g2", "g1", &[T1]))]);
            (f, Role::Agent, Op::CancelGoal { goal: "g1".into() })
        },
    ));
    v.push(check(
        "cancel: an unknown goal",
        Deny,
        Some(R::UNKNOWN_GOAL),
        move || {
            (
                Fx::new(),
                Role::Agent,
                Op::CancelGoal {
                    goal: "ghost".into(),
                },
            )
        },
    ));

    // --- closing, bottom up ---------------------------------------------------------------------
    v.push(check(
        "close: a completed leaf under its current witness",
        Allow,
        None,
        move || {
            let mut f = flown_g1();
            f.ok(&[observe("review", true.into()), reauth("g1")]);
            (f, Role::Agent, Op::CloseGoal { goal: "g1".into() })
        },
    ));
    v.push(check(
        "close: bottom up — not while a descendant is active",
        Deny,
        Some(R::NOT_SELECTED_PATH),
        move || {
            let mut f = with_g1();
            f.ok(&[propose(goal("g2", "g1", &[T1]))]);
            (f, Role::Agent, Op::CloseGoal { goal: "g1".into() })
        },
    ));
    v.push(check(
        "close: a goal whose continuation has not completed",
        Deny,
        Some(R::NOT_COMPLETE),
        move || {
            let mut f = with_g1();
            f.ok(&effects("g1", &T1[..3]));
            (f, Role::Agent, Op::CloseGoal { goal: "g1".into() })
        },
    ));
    v.push(check(
        "close: an inherited obligation still open",
        Deny,
        Some(R::OBLIGATIONS_OPEN),
        move || (flown_g1(), Role::Agent, Op::CloseGoal { goal: "g1".into() }),
    ));
    v.push(check(
        "close: not while suspended",
        Reauthorize,
        Some(R::ROOT_SUSPENDED),
        move || {
            let mut f = flown_g1();
            f.ok(&[observe("review", true.into())]);
            (f, Role::Agent, Op::CloseGoal { goal: "g1".into() })
        },
    ));
    v.push(check(
        "close: the root closes only through closeRoot",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            (
                Fx::new(),
                Role::Agent,
                Op::CloseGoal {
                    goal: "survey".into(),
                },
            )
        },
    ));

    // --- delegation -------------------------------------------------------------------------------
    v.push(check(
        "delegate: same root, attenuated resources",
        Allow,
        None,
        move || {
            let f = with_g1();
            let op = delegate_op(&f, "g1", &["camera"], "survey", "cam-1");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: into another root",
        Deny,
        Some(R::CROSS_ROOT),
        move || {
            let f = with_g1();
            let op = delegate_op(&f, "g1", &["camera"], "survey-east", "cam-1");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: widening the worker's resources",
        Deny,
        Some(R::RESOURCE_EXPANSION),
        move || {
            let f = with_g1();
            let op = delegate_op(&f, "g1", &["camera", "radio"], "survey", "cam-1");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: the root goal is not delegable",
        Deny,
        Some(R::PARENT_NOT_ACTIVE),
        move || {
            let f = Fx::new();
            let op = delegate_op(&f, "survey", &["camera"], "survey", "cam-1");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: a worker identity is required",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            let f = with_g1();
            let op = delegate_op(&f, "g1", &["camera"], "survey", "");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: not over a path a sibling's commits have left",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            // Found by the bounded explorer: g1 was authorized, then sibling `a` advanced the root's
            // work; selecting g1's path again by delegating it must recheck that path.
            let mut f = with_g1();
            f.ok(&[effect("g1", "takeoff")]);
            let mut a = goal("a", "survey", &[&["goto(wp1)", "photograph(wp1)"]]);
            a.completion = vec![s(&["goto(wp2)", "photograph(wp2)", "return", "land"])];
            a.closing = s(&["photos >= 1"]);
            f.ok(&[propose(a), effect("a", "goto(wp1)")]);
            let op = delegate_op(&f, "g1", &["camera"], "survey", "cam-1");
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "delegate: a witness for another worker",
        Deny,
        Some(R::WITNESS_MISMATCH),
        move || {
            let f = with_g1();
            let mut op = delegate_op(&f, "g1", &["camera"], "survey", "cam-1");
            if let Op::DelegateGoal { worker, .. } = &mut op {
                *worker = "cam-2".into();
            }
            (f, Role::Agent, op)
        },
    ));

    // --- joins --------------------------------------------------------------------------------
    let wp12: &[&str] = &[
        "goto(wp1)",
        "photograph(wp1)",
        "goto(wp2)",
        "photograph(wp2)",
    ];
    v.push(check(
        "join: ordered siblings, complete composition",
        Allow,
        None,
        move || {
            let f = join_fixture();
            let op = join_op(&f, &joined(&[wp12]), &[("a", "b")], &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: one interleaving of six supplied",
        Deny,
        Some(R::JOIN_COMPOSITION),
        move || {
            let f = join_fixture();
            let op = join_op(&f, &joined(&[wp12]), &[], &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: every interleaving is checked against the root language",
        Deny,
        Some(R::TRACE_EXPANSION),
        move || {
            let f = join_fixture();
            let a = ["goto(wp1)", "photograph(wp1)"];
            let b = ["goto(wp2)", "photograph(wp2)"];
            let mut all: Vec<Vec<&str>> = Vec::new();
            for mask in 0u8..16 {
                if mask.count_ones() != 2 {
                    continue;
                }
                let (mut i, mut j, mut t) = (0, 0, Vec::new());
                for k in 0..4 {
                    if mask & (1 << k) != 0 {
                        t.push(a[i]);
                        i += 1;
                    } else {
                        t.push(b[j]);
                        j += 1;
                    }
                }
                all.push(t);
            }
            assert_eq!(all.len(), 6);
            let refs: Vec<&[&str]> = all.iter().map(Vec::as_slice).collect();
            let op = join_op(&f, &joined(&refs), &[], &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: sources under different parents",
        Deny,
        Some(R::JOIN_NOT_SIBLINGS),
        move || {
            let mut f = join_fixture();
            let mut c = goal("c", "a", &[&["goto(wp1)", "photograph(wp1)"]]);
            c.closing = s(&["photos >= 1"]);
            f.ok(&[propose(c)]);
            let op = join_op(&f, &joined(&[wp12]), &[("c", "b")], &["c", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: a single source",
        Deny,
        Some(R::JOIN_NOT_SIBLINGS),
        move || {
            let f = join_fixture();
            let op = join_op(&f, &joined(&[wp12]), &[], &["a"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: a source from another root",
        Deny,
        Some(R::UNKNOWN_GOAL),
        move || {
            let f = join_fixture();
            let op = join_op(
                &f,
                &joined(&[wp12]),
                &[("a", "survey-east/c")],
                &["a", "survey-east/c"],
            );
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: a precedence cycle",
        Deny,
        Some(R::JOIN_NOT_SIBLINGS),
        move || {
            let f = join_fixture();
            let op = join_op(&f, &joined(&[wp12]), &[("a", "b"), ("b", "a")], &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "join: resources no source held",
        Deny,
        Some(R::RESOURCE_EXPANSION),
        move || {
            let mut f = join_fixture();
            let mut j = joined(&[wp12]);
            j.resources.push("radio".into());
            // radio is in the root envelope but neither source holds it.
            let _ = &mut f;
            let op = join_op(&f, &j, &[("a", "b")], &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: nine join sources",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let f = join_fixture();
            let src: Vec<&str> = vec!["a"; 9];
            let op = join_op(&f, &joined(&[wp12]), &[], &src);
            (f, Role::Agent, op)
        },
    ));
    v.push(check(
        "limits: 29 precedence entries",
        Indeterminate,
        Some(R::PROFILE_LIMIT),
        move || {
            let f = join_fixture();
            let prec = vec![("a", "b"); 29];
            let op = join_op(&f, &joined(&[wp12]), &prec, &["a", "b"]);
            (f, Role::Agent, op)
        },
    ));

    // --- effects: reservation and atomic commit -------------------------------------------------
    v.push(check(
        "effect: the next effect on the current path",
        Allow,
        None,
        move || {
            (
                with_g1(),
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "takeoff".into(),
                    goal: "g1".into(),
                },
            )
        },
    ));
    v.push(check(
        "effect: not next in the residual language",
        Deny,
        Some(R::EFFECT_NOT_ADMITTED),
        move || {
            (
                with_g1(),
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "goto(wp1)".into(),
                    goal: "g1".into(),
                },
            )
        },
    ));
    v.push(check(
        "effect: a goal that is not the path's leaf",
        Deny,
        Some(R::NOT_SELECTED_PATH),
        move || {
            (
                with_g1(),
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "takeoff".into(),
                    goal: "survey".into(),
                },
            )
        },
    ));
    v.push(check(
        "effect: while suspended",
        Reauthorize,
        Some(R::ROOT_SUSPENDED),
        move || {
            let mut f = with_g1();
            f.ok(&[observe("battery", "medium".into())]);
            (
                f,
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "takeoff".into(),
                    goal: "g1".into(),
                },
            )
        },
    ));
    v.push(check(
        "effect: an unregistered effect",
        Deny,
        Some(R::EFFECT_UNKNOWN),
        move || {
            (
                with_g1(),
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "jump".into(),
                    goal: "g1".into(),
                },
            )
        },
    ));
    v.push(check(
        "effect: nothing is admitted after a permitted completion",
        Deny,
        Some(R::EFFECT_NOT_ADMITTED),
        move || {
            let mut f = flown_g1();
            f.ok(&[
                observe("review", true.into()),
                reauth("g1"),
                Step::Close {
                    goal: "g1".into(),
                    drift: false,
                },
                reauth("survey"),
            ]);
            (
                f,
                Role::Agent,
                Op::AuthorizeEffect {
                    effect: "takeoff".into(),
                    goal: "survey".into(),
                },
            )
        },
    ));
    let commit = |r: u64, e: &str, key: &str| Op::CommitEffect {
        effect: e.into(),
        key: key.into(),
        reservation: r,
    };
    v.push(check(
        "commit: a reserved effect, atomically",
        Allow,
        None,
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            (f, Role::Agent, commit(r, "takeoff", "c1"))
        },
    ));
    v.push(check(
        "commit: an unknown reservation",
        Deny,
        Some(R::RESERVATION_UNKNOWN),
        move || (with_g1(), Role::Agent, commit(99, "takeoff", "c1")),
    ));
    v.push(check(
        "commit: a reservation is single use",
        Deny,
        Some(R::RESERVATION_USED),
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            assert!(f.agent(commit(r, "takeoff", "c1")).allowed());
            (f, Role::Agent, commit(r, "takeoff", "c2"))
        },
    ));
    v.push(check(
        "commit: the executed effect must be the reserved one",
        Deny,
        Some(R::EFFECT_MISMATCH),
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            (f, Role::Agent, commit(r, "land", "c1"))
        },
    ));
    v.push(check(
        "commit: a version changed after the reservation",
        Reauthorize,
        Some(R::STALE_VERSION),
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            f.ok(&[observe("battery", "medium".into()), reauth("g1")]);
            (f, Role::Agent, commit(r, "takeoff", "c1"))
        },
    ));
    v.push(check(
        "commit: a second reservation on the same prefix goes stale",
        Reauthorize,
        Some(R::STALE_VERSION),
        move || {
            let mut f = with_g1();
            let r1 = f.authorize("g1", "takeoff").reservation.unwrap();
            let r2 = f.authorize("g1", "takeoff").reservation.unwrap();
            assert!(f.agent(commit(r1, "takeoff", "c1")).allowed());
            (f, Role::Agent, commit(r2, "takeoff", "c2"))
        },
    ));
    v.push(check(
        "idempotency: an exact retry returns the retained decision",
        Allow,
        None,
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            assert!(f.agent(commit(r, "takeoff", "c1")).allowed());
            (f, Role::Agent, commit(r, "takeoff", "c1"))
        },
    ));
    v.push(check(
        "idempotency: another body under a used key",
        Deny,
        Some(R::IDEMPOTENCY_CONFLICT),
        move || {
            let mut f = with_g1();
            let r = f.authorize("g1", "takeoff").reservation.unwrap();
            assert!(f.agent(commit(r, "takeoff", "c1")).allowed());
            let r2 = f.authorize("g1", "goto(wp1)").reservation.unwrap();
            (f, Role::Agent, commit(r2, "goto(wp1)", "c1"))
        },
    ));

    // --- versions and reauthorization -----------------------------------------------------------
    v.push(check(
        "version: a trusted observation suspends the root",
        Allow,
        None,
        move || {
            (
                with_g1(),
                Role::Provider,
                Op::ChangeVersion {
                    policy: None,
                    observe: Some(BTreeMap::from([("battery".into(), "medium".into())])),
                },
            )
        },
    ));
    v.push(check(
        "version: the operator changes the policy",
        Allow,
        None,
        move || {
            (
                with_g1(),
                Role::Operator,
                Op::ChangeVersion {
                    policy: Some(vec![PolicyRule::MaxTraceLen { max: 9 }]),
                    observe: None,
                },
            )
        },
    ));
    v.push(check(
        "version: an empty change",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            (
                with_g1(),
                Role::Operator,
                Op::ChangeVersion {
                    policy: None,
                    observe: None,
                },
            )
        },
    ));
    v.push(check(
        "version: an observation of an unknown variable",
        Deny,
        Some(R::SCHEMA_INVALID),
        move || {
            (
                with_g1(),
                Role::Provider,
                Op::ChangeVersion {
                    policy: None,
                    observe: Some(BTreeMap::from([("wind".into(), 12.into())])),
                },
            )
        },
    ));
    v.push(check(
        "version: a policy naming an unknown effect",
        Deny,
        Some(R::EFFECT_UNKNOWN),
        move || {
            (
                with_g1(),
                Role::Operator,
                Op::ChangeVersion {
                    policy: Some(vec![PolicyRule::DenyEffect {
                        effect: "warp".into(),
                    }]),
                    observe: None,
                },
            )
        },
    ));
    v.push(check(
        "reauthorize: a still-valid leaf path",
        Allow,
        None,
        move || {
            let mut f = with_g1();
            f.ok(&[observe("battery", "medium".into())]);
            (f, Role::Agent, Op::Reauthorize { goal: "g1".into() })
        },
    ));
    v.push(check(
        "reauthorize: a path the new policy forbids",
        Deny,
        Some(R::POLICY_VIOLATION),
        move || {
            let mut f = Fx::new();
            f.ok(&[
                propose(goal("g1", "survey", &[T2])),
                policy(vec![PolicyRule::Forbid {
                    when: s(&["zone == wp2"]),
                }]),
            ]);
            (f, Role::Agent, Op::Reauthorize { goal: "g1".into() })
        },
    ));
    v.push(check(
        "reauthorize: a path the new state makes unsafe",
        Deny,
        Some(R::FORBIDDEN_REACHABLE),
        move || {
            let mut f = Fx::new();
            f.ok(&[
                propose(goal("g1", "survey", &[T2])),
                effect("g1", "takeoff"),
                observe("battery", "low".into()),
            ]);
            (f, Role::Agent, Op::Reauthorize { goal: "g1".into() })
        },
    ));
    v.push(check(
        "reauthorize: only a leaf",
        Deny,
        Some(R::DESCENDANTS_UNRESOLVED),
        move || {
            let mut f = with_g1();
            f.ok(&[
                propose(goal("g2", "g1", &[T1])),
                observe("battery", "medium".into()),
            ]);
            (f, Role::Agent, Op::Reauthorize { goal: "g1".into() })
        },
    ));
    v.push(check(
        "reauthorize: the root only when no goal is active",
        Deny,
        Some(R::DESCENDANTS_UNRESOLVED),
        move || {
            let mut f = with_g1();
            f.ok(&[observe("battery", "medium".into())]);
            (
                f,
                Role::Agent,
                Op::Reauthorize {
                    goal: "survey".into(),
                },
            )
        },
    ));
    v.push(check(
        "reauthorize: a suspended root resumes by an edit only without active goals",
        Reauthorize,
        Some(R::STALE_VERSION),
        move || {
            let mut f = with_g1();
            f.ok(&[observe("battery", "medium".into())]);
            let op = f.propose_op(&goal("g2", "survey", &[T2]));
            (f, Role::Agent, op)
        },
    ));
    v
}

#[test]
fn contract_protocol() {
    let all = checks();
    let mut matched = 0;
    let mut positive = 0;
    let mut gates: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    for c in &all {
        let (mut f, caller, op) = (c.body)();
        let op_name = op.name();
        let before_state = f.m().retained_state_json();
        let before_versions = f.m().versions();
        let d = f.send(caller, op);
        let got = (d.verdict, d.reason);
        let after_state = f.m().retained_state_json();
        let mut ok = got == c.expect;
        if d.verdict != Verdict::Allow {
            // Refusals change nothing.
            ok &= after_state == before_state && f.m().versions() == before_versions;
        } else if !d.replayed {
            ok &= after_state != before_state;
        } else {
            ok &= after_state == before_state;
        }
        // Every request, accepted or not, leaves a receipt that records the decision.
        let mut last = None;
        while let Some(r) = f.r.monitor_mut().poll_receipt() {
            last = Some(r);
        }
        let last = last.expect("a receipt");
        ok &= last.body.value()["verdict"] == serde_json::to_value(d.verdict).unwrap();
        if ok {
            matched += 1;
        } else {
            failures.push(format!(
                "{}: expected {:?}, got {:?} ({})",
                c.name, c.expect, got, d.detail
            ));
        }
        if c.expect.0 == Verdict::Allow {
            positive += 1;
            gates.insert(format!("allow:{op_name}"));
        } else {
            gates.insert(format!("{:?}:{op_name}", c.expect.1));
        }
    }
    for c in &all {
        println!(
            "  {:<70} {:?} {}",
            c.name,
            c.expect.0,
            c.expect.1.map(|r| r.name()).unwrap_or("")
        );
    }
    println!(
        "contract-protocol: {positive} positive, {} negative, {} distinct gates",
        all.len() - positive,
        gates.len()
    );
    for f in &failures {
        println!("  FAIL {f}");
    }
    println!("contract-protocol: {matched}/{} matched", all.len());
    assert_eq!(all.len(), 123, "the corpus: every check, pinned");
    assert_eq!(matched, all.len());
    assert!(
        failures.is_empty(),
        "{} protocol checks failed",
        failures.len()
    );
}
