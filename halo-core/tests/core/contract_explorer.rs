//! `contract-explorer`: the bounded explorer (`sitl::oracle::contract_explorer`) over the small UAV
//! abstraction. With the intact checker it must reach no invariant violation, and the gateway's
//! monitor must take the same decision as the independent checker on every attempted transition
//! of the exploration. Each of the 13 single-defect variants of the checker must be killed by a
//! reachable counterexample.
use crate::common;

use halo_core::contract::{Domain, Monitor, Request};
use sitl::oracle::contract_audit::{AuditDomain, Defect};
use sitl::oracle::contract_explorer::{INVARIANTS, explore, explore_until};

/// Depth bound: deep enough to fly, join, close and reach every counterexample.
const DEPTH: usize = 9;

fn text() -> String {
    std::fs::read_to_string(common::repo_root().join("catalogs/contract-uav.toml")).unwrap()
}

#[test]
fn contract_explorer() {
    let ad = AuditDomain::from_toml(&text()).unwrap();
    let intact = explore(&ad, None, DEPTH).unwrap();
    println!(
        "\ncontract-explorer: intact checker, depth {DEPTH}: {} states, {} transitions ({} attempted), max shortest-path depth {}",
        intact.states,
        intact.transitions,
        intact.trials.len(),
        intact.depth
    );
    for v in &intact.violations {
        println!("  VIOLATION {}: {}", v.invariant, v.path.join(" → "));
    }
    assert!(
        intact.violations.is_empty(),
        "the intact checker violates an invariant"
    );
    assert!(
        intact.states > 100,
        "the abstraction is too small to mean anything"
    );

    // The monitor agrees with the independent checker on every attempted transition.
    let d = Domain::parse(&text(), "contract-uav.toml").unwrap();
    let mut root = Monitor::new(d);
    let register: Request = serde_json::from_value(serde_json::json!({
        "caller": "operator",
        "op": {"op": "register_root", "approved_by": "ops-lead", "contract": sitl::oracle::contract_explorer::contract()}
    }))
    .unwrap();
    assert!(root.handle(register).allowed());
    let mut monitors: Vec<Option<Monitor>> = vec![None; intact.states];
    monitors[0] = Some(root);
    let mut agree = 0;
    for (ix, t) in intact.trials.iter().enumerate() {
        let mut m = monitors[t.from]
            .clone()
            .expect("source configuration replayed");
        let mut decisions = Vec::new();
        for req in &t.requests {
            let r: Request = serde_json::from_value(req.clone()).unwrap();
            let ok = m.handle(r).allowed();
            decisions.push(ok);
            if !ok {
                break;
            }
        }
        assert_eq!(
            decisions, t.decisions,
            "monitor and checker disagree on `{}` from configuration {}",
            t.label, t.from
        );
        agree += 1;
        if let Some(to) = t.to
            && intact.reached_by[to] == Some(ix)
        {
            monitors[to] = Some(m);
        }
        // Configurations whose every outgoing trial is done can be dropped.
        if intact.trials.get(ix + 1).is_none_or(|n| n.from != t.from) {
            monitors[t.from] = None;
        }
    }
    println!(
        "contract-explorer: monitor and checker agree on {agree}/{} attempted transitions",
        intact.trials.len()
    );

    println!("contract-explorer: single-defect variants");
    let mut killed = 0;
    for defect in Defect::ALL {
        let x = explore_until(&ad, Some(defect), DEPTH, true).unwrap();
        match x.violations.first() {
            Some(v) => {
                killed += 1;
                println!(
                    "  {defect:?}: killed by {} after {}",
                    v.invariant,
                    v.path.join(" → ")
                );
            }
            None => println!("  {defect:?}: SURVIVED ({} states)", x.states),
        }
    }
    println!(
        "contract-explorer: {} invariants, {killed}/{} variants killed",
        INVARIANTS.len(),
        Defect::ALL.len()
    );
    println!(
        "contract-explorer: {}/{} matched",
        killed + usize::from(intact.violations.is_empty()),
        Defect::ALL.len() + 1
    );
    assert_eq!(killed, Defect::ALL.len());
    // The exploration's size, pinned (docs/conformance.md).
    assert_eq!(
        (
            intact.states,
            intact.transitions,
            intact.trials.len(),
            agree
        ),
        (7491, 20789, 155_212, 155_212)
    );
    assert_eq!((INVARIANTS.len(), Defect::ALL.len()), (11, 13));
}

// --- the static oracle over the initial proposals ---------------------------------------------

/// A third evaluator, smaller than both the monitor and the checker and sharing no code with
/// either: the survey domain's six effects written out by hand, predicates as `VAR OP VALUE`,
/// and the proposal rules of the method (root identity, resources inside the envelope, parent
/// obligations carried, every composed continuation exactly one of the parent's remaining
/// maximal traces, each own continuation applicable, frame-respecting, avoiding forbidden states
/// and reaching the goal's closing predicate, each composed continuation reaching the root's
/// closing predicate; a join supplies exactly the composition of its sources' traces over the
/// orders its precedence allows).
mod static_oracle {
    use std::collections::{BTreeMap, BTreeSet};

    use serde_json::Value;

    pub type World = BTreeMap<String, String>;

    /// A set of continuations (effect texts).
    pub type Traces = BTreeSet<Vec<String>>;

    fn strs(v: &Value) -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    }

    fn traces(v: &Value) -> Vec<Vec<String>> {
        v.as_array().into_iter().flatten().map(strs).collect()
    }

    /// One effect of the survey domain, or `None` when it does not apply.
    pub fn step(w: &World, e: &str) -> Option<World> {
        let mut n = w.clone();
        let airborne = w["airborne"] == "true";
        let (name, arg) = match e.split_once('(') {
            Some((n, a)) => (n, a.trim_end_matches(')')),
            None => (e, ""),
        };
        match name {
            "takeoff" if !airborne && w["battery"] != "low" => {
                n.insert("airborne".into(), "true".into());
            }
            "goto" if airborne => {
                n.insert("zone".into(), arg.into());
            }
            "photograph" if airborne && w["zone"] == arg => {
                let p: i64 = w["photos"].parse().ok()?;
                if p + 1 > 8 {
                    return None;
                }
                n.insert("photos".into(), (p + 1).to_string());
            }
            "hold" if airborne => {}
            "return" if airborne => {
                n.insert("zone".into(), "home".into());
            }
            "land" if airborne => {
                n.insert("airborne".into(), "false".into());
            }
            _ => return None,
        }
        Some(n)
    }

    fn holds(w: &World, conds: &[String]) -> bool {
        conds.iter().all(|c| {
            let p: Vec<&str> = c.split_whitespace().collect();
            let (var, op, val) = (p[0], p[1], p[2]);
            let cur = &w[var];
            match (cur.parse::<i64>(), val.parse::<i64>()) {
                (Ok(a), Ok(b)) => match op {
                    "==" => a == b,
                    "!=" => a != b,
                    "<" => a < b,
                    "<=" => a <= b,
                    ">" => a > b,
                    ">=" => a >= b,
                    _ => false,
                },
                _ => match op {
                    "==" => cur == val,
                    "!=" => cur != val,
                    _ => false,
                },
            }
        })
    }

    /// Runs `t` from `w`: `None` when an effect does not apply, a forbidden state is entered,
    /// or a frame fails in a state along the way.
    fn run(
        w: &World,
        t: &[String],
        forbidden: &[Vec<String>],
        frames: &[Vec<String>],
    ) -> Option<World> {
        let mut cur = w.clone();
        for e in t {
            cur = step(&cur, e)?;
            if forbidden.iter().any(|f| holds(&cur, f)) {
                return None;
            }
            if !frames.iter().all(|f| holds(&cur, f)) {
                return None;
            }
        }
        Some(cur)
    }

    /// What the oracle decides: `Some((own continuations, composed set))` when admissible.
    pub fn decide(
        contract: &Value,
        prefix: &[String],
        world: &World,
        goals: &BTreeMap<String, Value>,
        op: &Value,
    ) -> Option<(Traces, Traces)> {
        let root = contract["root"].as_str()?;
        let forbidden: Vec<Vec<String>> = traces(&contract["forbidden"]);
        let remaining: BTreeSet<Vec<String>> = traces(&contract["traces"])
            .into_iter()
            .filter(|t| t.starts_with(prefix))
            .map(|t| t[prefix.len()..].to_vec())
            .collect();
        if op["witness"]["root"].as_str() != Some(root) {
            return None;
        }
        let (goal, own) = match op["op"].as_str()? {
            "propose_goal" => {
                let g = &op["goal"];
                (g, traces(&g["traces"]))
            }
            "join_goals" => {
                let j = &op["joined"];
                let sources = strs(&op["sources"]);
                let prec: Vec<(String, String)> = op["precedence"]
                    .as_array()?
                    .iter()
                    .map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
                    .collect::<Option<_>>()?;
                // The complete composition: every order of the sources the precedence allows,
                // each source contributing its own trace.
                let mut orders: Vec<Vec<String>> = vec![Vec::new()];
                for _ in 0..sources.len() {
                    let mut next = Vec::new();
                    for o in &orders {
                        for s in &sources {
                            let blocked = prec.iter().any(|(a, b)| b == s && !o.contains(a));
                            if !o.contains(s) && !blocked {
                                let mut o2 = o.clone();
                                o2.push(s.clone());
                                next.push(o2);
                            }
                        }
                    }
                    orders = next;
                }
                let mut composition = BTreeSet::new();
                for o in &orders {
                    let mut t = Vec::new();
                    for s in o {
                        t.extend(traces(&goals.get(s)?["traces"]).first()?.clone());
                    }
                    composition.insert(t);
                }
                let supplied: BTreeSet<Vec<String>> = traces(&j["traces"]).into_iter().collect();
                if supplied != composition {
                    return None;
                }
                (j, supplied.into_iter().collect())
            }
            _ => return None,
        };
        let envelope: BTreeSet<String> = strs(&contract["resources"]).into_iter().collect();
        if !strs(&goal["resources"])
            .iter()
            .all(|r| envelope.contains(r))
        {
            return None;
        }
        let carried: BTreeSet<String> = strs(&goal["obligations"]).into_iter().collect();
        if !strs(&contract["obligations"])
            .iter()
            .all(|o| carried.contains(o))
        {
            return None;
        }
        let frames = traces(&goal["frames"]);
        let closing = strs(&goal["closing"]);
        let root_closing = strs(&contract["closing"]);
        let mut composed = BTreeSet::new();
        for u in &own {
            let after = run(world, u, &forbidden, &frames)?;
            if !holds(&after, &closing) {
                return None;
            }
            for v in traces(&goal["completion"]) {
                let mut k = u.clone();
                k.extend(v);
                if !remaining.contains(&k) {
                    return None;
                }
                let end = run(world, &k, &forbidden, &[])?;
                if !holds(&end, &root_closing) {
                    return None;
                }
                composed.insert(k);
            }
        }
        Some((own.into_iter().collect(), composed))
    }
}

/// The separately coded static oracle agrees with the monitor and with the checker on the 13
/// initial proposals of the abstraction (each at the first configuration where it can be made:
/// the eight `g1` variants at the registered root, `a` and `b` after takeoff, the three joins once
/// `a` and `b` exist), including the composed trace set of every admissible one; and it catches
/// the checker's single-defect variants that change a decision there.
#[test]
fn the_static_oracle_agrees_on_the_initial_proposals() {
    use std::collections::BTreeMap;
    let ad = AuditDomain::from_toml(&text()).unwrap();
    let e = explore(&ad, None, 4).unwrap();
    let to = |from: usize, label: &str| {
        e.trials
            .iter()
            .find(|t| t.from == from && t.label == label)
            .and_then(|t| t.to)
            .unwrap_or_else(|| panic!("`{label}` from {from}"))
    };
    let s_takeoff = to(0, "commit takeoff on survey");
    let s_a = to(s_takeoff, "propose a");
    let s_ab = to(s_a, "propose b");
    let trial = |from: usize, label: &str| {
        e.trials
            .iter()
            .find(|t| t.from == from && t.label == label)
            .unwrap_or_else(|| panic!("`{label}` from {from}"))
            .clone()
    };
    // The path to each configuration, as requests.
    let path_to = |mut at: usize| {
        let mut steps = Vec::new();
        while let Some(ix) = e.reached_by[at] {
            steps.push(e.trials[ix].requests.clone());
            at = e.trials[ix].from;
        }
        steps.reverse();
        steps.concat()
    };
    let proposals: Vec<(usize, &str)> = [
        "propose g1",
        "propose g1 with another root's witness",
        "propose g1 reordered",
        "propose g1 with a repeated photo",
        "propose g1 with a resource outside the envelope",
        "propose g1 without the review obligation",
        "propose g1 with an unreachable closing predicate",
        "propose g1 framed away from wp1",
    ]
    .into_iter()
    .map(|l| (0, l))
    .chain([(s_takeoff, "propose a"), (s_takeoff, "propose b")])
    .chain(
        [
            "join a before b",
            "join a, b with one order and no precedence",
            "join a, b with all six interleavings",
        ]
        .into_iter()
        .map(|l| (s_ab, l)),
    )
    .collect();
    assert_eq!(proposals.len(), 13);

    let contract = sitl::oracle::contract_explorer::contract();
    let d = Domain::parse(&text(), "contract-uav.toml").unwrap();
    let mut agree = 0;
    let mut admissible = 0;
    let mut oracle_decisions = Vec::new();
    for (from, label) in &proposals {
        let t = trial(*from, label);
        // The monitor at that configuration.
        let mut m = Monitor::new(d.clone());
        let register: Request = serde_json::from_value(serde_json::json!({
            "caller": "operator",
            "op": {"op": "register_root", "approved_by": "ops-lead", "contract": contract}
        }))
        .unwrap();
        assert!(m.handle(register).allowed());
        let mut prefix: Vec<String> = Vec::new();
        let mut goals: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for req in path_to(*from) {
            let r: Request = serde_json::from_value(req.clone()).unwrap();
            assert!(m.handle(r).allowed(), "replaying the path to `{label}`");
            match req["op"]["op"].as_str() {
                Some("commit_effect") => {
                    prefix.push(req["op"]["effect"].as_str().unwrap().to_string());
                }
                Some("propose_goal") => {
                    goals.insert(
                        req["op"]["goal"]["id"].as_str().unwrap().to_string(),
                        req["op"]["goal"].clone(),
                    );
                }
                _ => {}
            }
        }
        let mut world: static_oracle::World = contract["initial"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), String::from)))
            .collect();
        for eff in &prefix {
            world = static_oracle::step(&world, eff).unwrap();
        }
        let op = &t.requests[0]["op"];
        let oracle = static_oracle::decide(&contract, &prefix, &world, &goals, op);
        let r: Request = serde_json::from_value(t.requests[0].clone()).unwrap();
        let monitor_ok = m.handle(r).allowed();
        let checker_ok = t.decisions[0];
        oracle_decisions.push(oracle.is_some());
        let mut same = oracle.is_some() == monitor_ok && monitor_ok == checker_ok;
        if let Some((own, k)) = &oracle {
            admissible += 1;
            println!("    composed: {k:?}");
            // The monitor retains the new goal's own continuations (its residual language); the
            // composed set is checked against the root's remaining traces by the oracle itself.
            let state: serde_json::Value = serde_json::from_str(&m.retained_state_json()).unwrap();
            let id = op["goal"]["id"]
                .as_str()
                .or(op["joined"]["id"].as_str())
                .unwrap();
            let goal = state["goals"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["goal"]["id"] == id)
                .unwrap();
            let retained: std::collections::BTreeSet<Vec<String>> = goal["residual"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    t.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| {
                            let n = d.name(u32::try_from(x.as_u64().unwrap()).unwrap());
                            n.strip_suffix("()").map_or(n.clone(), String::from)
                        })
                        .collect()
                })
                .collect();
            if &retained != own {
                println!("  `{label}`: own continuations {own:?}, monitor retained {retained:?}");
                same = false;
            }
        }
        println!(
            "  {:<50} oracle {:<5} monitor {:<5} checker {:<5}{}",
            label,
            oracle.is_some(),
            monitor_ok,
            checker_ok,
            if same { "" } else { "  MISMATCH" }
        );
        agree += usize::from(same);
    }
    // The oracle catches a checker that decides these proposals wrongly.
    let mut caught = Vec::new();
    for defect in Defect::ALL {
        let x = explore(&ad, Some(defect), 4).unwrap();
        // The same configurations, found by the same labels in this exploration.
        let xto = |from: usize, label: &str| {
            x.trials
                .iter()
                .find(|t| t.from == from && t.label == label)
                .and_then(|t| t.to)
        };
        let x_takeoff = xto(0, "commit takeoff on survey");
        let x_ab = x_takeoff
            .and_then(|t| xto(t, "propose a"))
            .and_then(|a| xto(a, "propose b"));
        let decided: Vec<bool> = proposals
            .iter()
            .map(|(from, label)| {
                let at = if *from == 0 {
                    Some(0)
                } else if *from == s_takeoff {
                    x_takeoff
                } else {
                    x_ab
                };
                at.and_then(|at| x.trials.iter().find(|t| t.from == at && t.label == *label))
                    .is_some_and(|t| t.decisions[0])
            })
            .collect();
        if decided != oracle_decisions {
            caught.push(format!("{defect:?}"));
        }
    }
    println!(
        "contract-static-oracle: {agree}/{} matched ({admissible} admissible; defective checkers caught at these proposals: {})",
        proposals.len(),
        caught.join(", ")
    );
    assert_eq!((agree, admissible), (13, 4));
    // The defects that change a proposal decision are caught; delegation lineage, the three
    // freshness checks and mediation act on later operations (the explorer kills those).
    assert_eq!(
        caught,
        [
            "LocalOnlyComposition",
            "IgnoreOrder",
            "IgnoreMultiplicity",
            "NoFrames",
            "NoRootIdentity",
            "NoResourceCheck",
            "NoObligationCheck",
            "NoSuccessRefinement"
        ]
    );
}
