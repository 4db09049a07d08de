//! A bounded explorer of the mission-contract protocol over a small abstraction.
//!
//! The abstraction is the UAV survey domain with four permitted flights and a fixed alphabet of
//! agent, operator and provider actions: create (including stale, foreign, reordered, repeated,
//! widened, obligation-dropping, unreachable-success and framed variants), same-root join,
//! delegation, version advance, invalidation (cancel), reauthorization, protected commit (and a
//! commit without a reservation), and closure. From the registered root, every action is tried
//! in every reachable configuration up to a depth bound; the transition relation is the
//! independent checker's (`contract_audit`), optionally with one [`Defect`]. Each reached
//! configuration is checked against the invariants in [`INVARIANTS`].
//!
//! With no defect the explorer must find no violation; with each defect it must find one, and
//! its shortest counterexample is kept. Every attempted transition is returned as concrete
//! requests so a test can replay the same exploration through the gateway's monitor and require
//! identical decisions.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Value, json};

use crate::oracle::contract_audit::{AuditDomain, Defect, Replay, Status, edit_hash_of};

/// The invariants, by name.
pub const INVARIANTS: [&str; 11] = [
    "I1 committed trace is a prefix of a permitted trace",
    "I2 no committed effect reaches a forbidden state",
    "I3 every goal on the current path refines its parent's residual language",
    "I4 resources attenuate from the root envelope down",
    "I5 obligations are inherited or discharged with evidence",
    "I6 active frames hold on the current path",
    "I7 every goal on the current path can still close",
    "I8 every accepted witness was fresh",
    "I9 every accepted witness and delegation names this root",
    "I10 every commit spent its own reservation",
    "I11 a closed root has a permitted trace and its closing predicate",
];

/// One attempted transition.
#[derive(Clone, Debug)]
pub struct Trial {
    /// Source configuration (index into the BFS order).
    pub from: usize,
    /// The action's label.
    pub label: String,
    /// The concrete requests (`{caller, op}`), sent in order; later ones only if earlier ones
    /// were allowed.
    pub requests: Vec<Value>,
    /// Per request sent: allowed or not.
    pub decisions: Vec<bool>,
    /// The configuration reached when the action was allowed (new or already seen).
    pub to: Option<usize>,
}

/// A violated invariant with its shortest counterexample.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// The action labels from the registered root.
    pub path: Vec<String>,
}

/// What an exploration found.
#[derive(Clone, Debug, Default)]
pub struct Explored {
    /// Distinct configurations reached.
    pub states: usize,
    /// Allowed transitions.
    pub transitions: usize,
    /// Longest shortest path.
    pub depth: usize,
    /// Every attempted transition.
    pub trials: Vec<Trial>,
    /// For each configuration, the trial that first reached it (none for the root).
    pub reached_by: Vec<Option<usize>>,
    /// Invariant violations (first per invariant).
    pub violations: Vec<Violation>,
}

const T1: [&str; 5] = ["takeoff", "goto(wp1)", "photograph(wp1)", "return", "land"];
const T3: [&str; 7] = [
    "takeoff",
    "goto(wp1)",
    "photograph(wp1)",
    "goto(wp2)",
    "photograph(wp2)",
    "return",
    "land",
];
const T4: [&str; 7] = [
    "takeoff",
    "goto(wp2)",
    "photograph(wp2)",
    "goto(wp1)",
    "photograph(wp1)",
    "return",
    "land",
];
const T5: [&str; 6] = [
    "takeoff",
    "goto(wp1)",
    "hold",
    "photograph(wp1)",
    "return",
    "land",
];

/// The abstraction's root contract.
pub fn contract() -> Value {
    json!({
        "closing": ["airborne == false", "zone == home", "photos >= 1"],
        "discharge": {"review": ["review == true"]},
        "domain": "uav-survey",
        "epoch": 7,
        "forbidden": [["zone == nofly"], ["battery == low", "zone == wp2"], ["photos >= 3"],
                      ["airborne == false", "zone == wp1"], ["airborne == false", "zone == wp2"]],
        "initial": {"airborne": false, "battery": "high", "photos": 0, "review": false, "zone": "home"},
        "obligations": ["review"],
        "policy": [],
        "resources": ["camera", "radio", "zone:wp1", "zone:wp2"],
        "root": "survey",
        "traces": [T1, T3, T4, T5],
    })
}

fn goal(id: &str, traces: Value) -> Value {
    json!({
        "closing": ["photos >= 1", "airborne == false", "zone == home"],
        "completion": [[]],
        "discharged": [],
        "frames": [],
        "id": id,
        "obligations": ["review"],
        "parent": "survey",
        "resources": ["camera", "zone:wp1"],
        "traces": traces,
    })
}

/// Sets a field of a JSON object (the alphabet's specs are all objects).
fn set(v: &mut Value, k: &str, x: Value) {
    if let Some(o) = v.as_object_mut() {
        o.insert(k.to_string(), x);
    }
}

fn agent(op: Value) -> Value {
    json!({"caller": "agent", "op": op})
}

/// The witness for an edit below `parent` at the configuration's versions, then adjusted.
fn witness(r: &Replay, parent: &str, edit: &str) -> Value {
    json!({
        "base_revision": r.ver.graph,
        "edit": edit,
        "epoch": r.ver.epoch,
        "new_revision": r.ver.graph + 1,
        "parent": parent,
        "parent_revision": r.nodes.get(parent).map_or(0, |n| n.revision),
        "policy_version": r.ver.policy,
        "root": "survey",
        "state_version": r.ver.state,
    })
}

fn propose(r: &Replay, g: Value, tweak: impl Fn(&mut Value)) -> Vec<Value> {
    let parent = g
        .get("parent")
        .and_then(Value::as_str)
        .unwrap_or("survey")
        .to_string();
    let mut w = witness(r, &parent, &edit_hash_of(&g));
    tweak(&mut w);
    vec![agent(
        json!({"op": "propose_goal", "goal": g, "witness": w}),
    )]
}

fn join(r: &Replay, traces: Value, precedence: Value) -> Vec<Value> {
    let mut j = goal("j", traces);
    set(&mut j, "completion", json!([["return", "land"]]));
    set(&mut j, "closing", json!(["photos >= 2"]));
    set(&mut j, "resources", json!(["camera"]));
    let w = witness(r, "survey", &edit_hash_of(&j));
    vec![agent(
        json!({"op": "join_goals", "joined": j, "precedence": precedence, "sources": ["a", "b"], "witness": w}),
    )]
}

fn delegate(r: &Replay, root: &str) -> Vec<Value> {
    let resources = json!(["camera"]);
    let edit = crate::oracle::contract_audit::delegation_hash_of("g1", &resources, "w1");
    let w = witness(r, "survey", &edit);
    vec![agent(
        json!({"op": "delegate_goal", "goal": "g1", "resources": resources, "root": root, "witness": w, "worker": "w1"}),
    )]
}

/// The alphabet, concretized at a configuration.
fn actions(r: &Replay) -> Vec<(String, Vec<Value>)> {
    let mut a: Vec<(String, Vec<Value>)> = Vec::new();
    let t1 = json!([T1]);
    a.push((
        "propose g1".into(),
        propose(r, goal("g1", t1.clone()), |_| {}),
    ));
    if r.ver.state > 1 {
        a.push((
            "propose g1 on a stale state version".into(),
            propose(r, goal("g1", t1.clone()), |w| {
                set(w, "state_version", json!(r.ver.state - 1))
            }),
        ));
    }
    if r.ver.policy > 1 {
        a.push((
            "propose g1 on a stale policy version".into(),
            propose(r, goal("g1", t1.clone()), |w| {
                set(w, "policy_version", json!(r.ver.policy - 1))
            }),
        ));
    }
    if r.ver.graph > 1 {
        a.push((
            "propose g2 on a stale graph revision".into(),
            propose(r, goal("g2", t1.clone()), |w| {
                set(w, "base_revision", json!(r.ver.graph - 1));
                set(w, "new_revision", json!(r.ver.graph));
            }),
        ));
    }
    a.push((
        "propose g1 with another root's witness".into(),
        propose(r, goal("g1", t1.clone()), |w| {
            set(w, "root", json!("survey-east"))
        }),
    ));
    a.push((
        "propose g1 reordered".into(),
        propose(
            r,
            goal(
                "g1",
                json!([[
                    "takeoff",
                    "goto(wp1)",
                    "photograph(wp1)",
                    "hold",
                    "return",
                    "land"
                ]]),
            ),
            |_| {},
        ),
    ));
    a.push((
        "propose g1 with a repeated photo".into(),
        propose(
            r,
            goal(
                "g1",
                json!([[
                    "takeoff",
                    "goto(wp1)",
                    "photograph(wp1)",
                    "photograph(wp1)",
                    "return",
                    "land"
                ]]),
            ),
            |_| {},
        ),
    ));
    let mut wide = goal("g1", t1.clone());
    set(
        &mut wide,
        "resources",
        json!(["camera", "zone:wp1", "zone:wp3"]),
    );
    a.push((
        "propose g1 with a resource outside the envelope".into(),
        propose(r, wide, |_| {}),
    ));
    let mut dropped = goal("g1", t1.clone());
    set(&mut dropped, "obligations", json!([]));
    a.push((
        "propose g1 without the review obligation".into(),
        propose(r, dropped, |_| {}),
    ));
    let mut unreachable = goal("g1", t1.clone());
    set(&mut unreachable, "closing", json!(["photos >= 2"]));
    a.push((
        "propose g1 with an unreachable closing predicate".into(),
        propose(r, unreachable, |_| {}),
    ));
    let mut framed = goal("g1", t1);
    set(&mut framed, "frames", json!([["zone != wp1"]]));
    a.push((
        "propose g1 framed away from wp1".into(),
        propose(r, framed, |_| {}),
    ));
    a.push(("delegate g1".into(), delegate(r, "survey")));
    a.push((
        "delegate g1 into another root".into(),
        delegate(r, "survey-east"),
    ));
    let mut ga = goal("a", json!([["goto(wp1)", "photograph(wp1)"]]));
    set(
        &mut ga,
        "completion",
        json!([["goto(wp2)", "photograph(wp2)", "return", "land"]]),
    );
    set(&mut ga, "closing", json!(["photos >= 1"]));
    a.push(("propose a".into(), propose(r, ga, |_| {})));
    let mut gb = goal("b", json!([["goto(wp2)", "photograph(wp2)"]]));
    set(
        &mut gb,
        "completion",
        json!([["goto(wp1)", "photograph(wp1)", "return", "land"]]),
    );
    set(&mut gb, "closing", json!(["photos >= 1"]));
    set(&mut gb, "resources", json!(["camera", "zone:wp2"]));
    a.push(("propose b".into(), propose(r, gb, |_| {})));
    let ordered = json!([[
        "goto(wp1)",
        "photograph(wp1)",
        "goto(wp2)",
        "photograph(wp2)"
    ]]);
    a.push((
        "join a before b".into(),
        join(r, ordered.clone(), json!([["a", "b"]])),
    ));
    a.push((
        "join a, b with one order and no precedence".into(),
        join(r, ordered, json!([])),
    ));
    let all_six = json!([
        [
            "goto(wp1)",
            "photograph(wp1)",
            "goto(wp2)",
            "photograph(wp2)"
        ],
        [
            "goto(wp1)",
            "goto(wp2)",
            "photograph(wp1)",
            "photograph(wp2)"
        ],
        [
            "goto(wp1)",
            "goto(wp2)",
            "photograph(wp2)",
            "photograph(wp1)"
        ],
        [
            "goto(wp2)",
            "goto(wp1)",
            "photograph(wp1)",
            "photograph(wp2)"
        ],
        [
            "goto(wp2)",
            "goto(wp1)",
            "photograph(wp2)",
            "photograph(wp1)"
        ],
        [
            "goto(wp2)",
            "photograph(wp2)",
            "goto(wp1)",
            "photograph(wp1)"
        ],
    ]);
    a.push((
        "join a, b with all six interleavings".into(),
        join(r, all_six, json!([])),
    ));
    let leaf = r
        .path
        .as_ref()
        .and_then(|(p, _)| p.first().cloned())
        .unwrap_or_else(|| "survey".into());
    for e in [
        "takeoff",
        "goto(wp1)",
        "photograph(wp1)",
        "hold",
        "goto(wp2)",
        "photograph(wp2)",
        "return",
        "land",
    ] {
        let res = r.next_hold;
        a.push((
            format!("commit {e} on {leaf}"),
            vec![
                agent(json!({"op": "authorize_effect", "effect": e, "goal": leaf})),
                agent(json!({"op": "commit_effect", "effect": e, "key": format!("k{res}"), "reservation": res})),
            ],
        ));
    }
    a.push((
        "commit land without a reservation".into(),
        vec![agent(
            json!({"op": "commit_effect", "effect": "land", "key": "rogue", "reservation": 999}),
        )],
    ));
    if r.world.get("battery").map(String::as_str) == Some("high") {
        a.push(("observe battery medium".into(), vec![json!({"caller": "provider", "op": {"op": "change_version", "observe": {"battery": "medium"}}})]));
    }
    if r.world.get("review").map(String::as_str) == Some("false") {
        a.push(("observe review done".into(), vec![json!({"caller": "provider", "op": {"op": "change_version", "observe": {"review": true}}})]));
    }
    if r.ver.policy == 1 {
        a.push(("policy: at most 9 effects".into(), vec![json!({"caller": "operator", "op": {"op": "change_version", "policy": [{"rule": "max_trace_len", "max": 9}]}})]));
    }
    for g in ["survey", "g1", "g2", "a", "b", "j"] {
        if r.nodes.contains_key(g) {
            a.push((
                format!("reauthorize {g}"),
                vec![agent(json!({"op": "reauthorize", "goal": g}))],
            ));
        }
    }
    for g in ["g1", "a"] {
        if r.nodes.contains_key(g) {
            a.push((
                format!("cancel {g}"),
                vec![agent(json!({"op": "cancel_goal", "goal": g}))],
            ));
        }
    }
    for g in ["g1", "j"] {
        if r.nodes.contains_key(g) {
            a.push((
                format!("close {g}"),
                vec![agent(json!({"op": "close_goal", "goal": g}))],
            ));
        }
    }
    a.push((
        "close the root".into(),
        vec![agent(json!({"op": "close_root"}))],
    ));
    a
}

fn key(r: &Replay) -> String {
    let holds: Vec<(u64, bool)> = r.holds.iter().map(|(k, h)| (*k, h.spent)).collect();
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}{}{}",
        r.ver,
        r.world,
        r.trace,
        r.lifecycle,
        r.path,
        r.nodes,
        holds,
        r.rules,
        r.stale_accepted,
        r.foreign_accepted,
        r.unmediated
    )
}

fn on_path(r: &Replay) -> Vec<String> {
    match &r.path {
        Some((p, v)) if *v == r.ver && r.lifecycle == Some("runnable") => p.clone(),
        _ => Vec::new(),
    }
}

/// The first invariant `r` breaks; `committed` says the last action committed an effect.
fn broken(r: &Replay, d: &AuditDomain, committed: bool) -> Option<&'static str> {
    let root = r.root.as_ref()?;
    let lang: Vec<Vec<String>> = root.language.iter().cloned().collect();
    if !lang.iter().any(|m| m.starts_with(&r.trace)) {
        return Some(INVARIANTS[0]);
    }
    if committed && root.forbidden.iter().any(|f| d.holds(&r.world, f)) {
        return Some(INVARIANTS[1]);
    }
    let path = on_path(r);
    for pair in path.windows(2) {
        let (Some(g), Some(p)) = (
            pair.first().and_then(|x| r.nodes.get(x)),
            pair.get(1).and_then(|x| r.nodes.get(x)),
        ) else {
            continue;
        };
        if g.residual
            .iter()
            .any(|x| !p.residual.iter().any(|m| m.starts_with(x)))
        {
            return Some(INVARIANTS[2]);
        }
    }
    for n in r.nodes.values().filter(|n| n.status == Status::Active) {
        let Some(p) = n.parent.as_ref().and_then(|p| r.nodes.get(p)) else {
            continue;
        };
        if !n
            .resources
            .iter()
            .all(|x| p.resources.contains(x) && root.envelope.contains(x))
        {
            return Some(INVARIANTS[3]);
        }
        let inherited = n.obligations.is_subset(&p.obligations)
            && p.obligations.difference(&n.obligations).all(|o| {
                root.discharge
                    .get(o)
                    .is_some_and(|pr| d.holds(&r.world, pr))
            });
        if !inherited {
            return Some(INVARIANTS[4]);
        }
    }
    for g in path.iter().filter_map(|x| r.nodes.get(x)) {
        if g.frames.iter().any(|f| !d.holds(&r.world, f)) {
            return Some(INVARIANTS[5]);
        }
        for u in &g.residual {
            let mut w = r.world.clone();
            let mut ok = true;
            for e in u {
                match d.apply_effect(&w, e) {
                    Some(n) => w = n,
                    None => ok = false,
                }
            }
            if !ok || !d.holds(&w, &g.closing) {
                return Some(INVARIANTS[6]);
            }
        }
    }
    if r.stale_accepted {
        return Some(INVARIANTS[7]);
    }
    if r.foreign_accepted {
        return Some(INVARIANTS[8]);
    }
    if r.unmediated {
        return Some(INVARIANTS[9]);
    }
    if r.lifecycle == Some("closed")
        && (!root.language.contains(&r.trace) || !d.holds(&r.world, &root.closing))
    {
        return Some(INVARIANTS[10]);
    }
    None
}

/// Explores to `max_depth` actions from the registered root, with `defect` (if any) in the
/// transition checker.
///
/// # Errors
/// When the abstraction's root contract is itself refused.
pub fn explore(
    d: &AuditDomain,
    defect: Option<Defect>,
    max_depth: usize,
) -> Result<Explored, String> {
    explore_until(d, defect, max_depth, false)
}

/// As [`explore`]; with `first_violation`, stops at the first violation found (breadth first,
/// so its counterexample is a shortest one).
///
/// # Errors
/// When the abstraction's root contract is itself refused.
pub fn explore_until(
    d: &AuditDomain,
    defect: Option<Defect>,
    max_depth: usize,
    first_violation: bool,
) -> Result<Explored, String> {
    let mut start = Replay::new(d);
    start.defect = defect;
    let register = json!({"caller": "operator", "op": {"op": "register_root", "approved_by": "ops-lead", "contract": contract()}});
    start.step(&register)?;
    let mut out = Explored::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut configs: Vec<Replay> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    seen.insert(key(&start), 0);
    configs.push(start);
    depth.push(0);
    out.reached_by.push(None);
    let mut queue = VecDeque::from([0usize]);
    let mut violated: BTreeSet<&'static str> = BTreeSet::new();
    while let Some(ix) = queue.pop_front() {
        let here = depth.get(ix).copied().unwrap_or(0);
        if here >= max_depth {
            continue;
        }
        let Some(cur) = configs.get(ix).cloned() else {
            continue;
        };
        for (label, requests) in actions(&cur) {
            let mut next = cur.clone();
            let mut decisions = Vec::new();
            for req in &requests {
                let ok = next.step(req).is_ok();
                decisions.push(ok);
                if !ok {
                    break;
                }
            }
            let allowed = decisions.len() == requests.len() && decisions.iter().all(|x| *x);
            let trial_ix = out.trials.len();
            let mut to = None;
            if allowed {
                out.transitions += 1;
                let k = key(&next);
                let target = match seen.get(&k) {
                    Some(t) => *t,
                    None => {
                        let t = configs.len();
                        seen.insert(k, t);
                        let committed = label.starts_with("commit");
                        if let Some(inv) = broken(&next, d, committed)
                            && violated.insert(inv)
                        {
                            let mut path = vec![label.clone()];
                            let mut at = ix;
                            while let Some(Some(tr)) = out.reached_by.get(at) {
                                let Some(t) = out.trials.get(*tr) else { break };
                                path.push(t.label.clone());
                                at = t.from;
                            }
                            path.reverse();
                            out.violations.push(Violation {
                                invariant: inv,
                                path,
                            });
                            if first_violation {
                                out.states = configs.len() + 1;
                                return Ok(out);
                            }
                        }
                        configs.push(next);
                        depth.push(here + 1);
                        out.reached_by.push(Some(trial_ix));
                        out.depth = out.depth.max(here + 1);
                        queue.push_back(t);
                        t
                    }
                };
                to = Some(target);
            }
            out.trials.push(Trial {
                from: ix,
                label,
                requests,
                decisions,
                to,
            });
        }
    }
    out.states = configs.len();
    Ok(out)
}
