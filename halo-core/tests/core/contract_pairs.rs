//! `contract-pairs` and `contract-comparators`: 48 matched benign/drifted workflow pairs (96
//! cases) over eight transition classes, in a UAV and a ground-operations vocabulary
//! (`tests/data/contract/pairs-*.json`, written by `scripts/gen_contract_pairs.py`).
//!
//! Every case runs from a fresh state through six controls, each seeing only its projection:
//!
//! 1. memoryless allowlist: the normalized effect against the root's effect catalog;
//! 2. static goal-effect set: also each proposed goal's declared effects and resources;
//! 3. per-step declared purpose: also binds each effect to its declared goal;
//! 4. final-state check: the resulting state and completed trace, after execution;
//! 5. history-aware complete-continuation check: the root language, transition semantics,
//!    forbidden and closing predicates, the current state, the committed prefix and each proposed
//!    complete continuation — but no lineage, resources, obligations, versions or join evidence;
//! 6. the full mechanism (the monitor).
//!
//! A workflow stops at its first blocked step. A drifted case is *prevented* when a control
//! blocks it at or before its last drift-labelled step, *post-detected* when it is blocked only
//! after, and *committed* when nothing blocks it. *Forbidden* counts cases whose executed effects
//! reached a registered forbidden state (contract or current policy), judged by the domain's
//! transition semantics as the independent checker reads them (`sitl::oracle::contract_audit`'s
//! `AuditDomain`, which shares no code with the monitor), not by any control.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use halo_core::contract::domain::{Pred, State};
use halo_core::contract::workflow::{Runner, Step};
use halo_core::contract::{ContractSpec, Domain, GoalSpec, Monitor, PolicyRule, Verdict};
use halo_core::receipt::verify_chain;
use serde::Deserialize;
use serde_json::Value;
use sitl::oracle::contract_audit::{AuditDomain, World};

#[derive(Deserialize)]
struct Pair {
    id: String,
    class: String,
    contract: ContractSpec,
    benign: Vec<Step>,
    drifted: Vec<Step>,
}

/// The monitor's reading of a domain (for the controls) and the independent checker's (for the
/// ground truth).
fn domain_for(id: &str) -> (Domain, AuditDomain) {
    let file = match id {
        "uav-survey" => "catalogs/contract-uav.toml",
        "ground-depot" => "catalogs/contract-ground.toml",
        other => panic!("no domain {other}"),
    };
    let text = std::fs::read_to_string(common::repo_root().join(file)).unwrap();
    (
        Domain::parse(&text, file).unwrap(),
        AuditDomain::from_toml(&text).unwrap(),
    )
}

fn json_map(values: &BTreeMap<String, Value>) -> serde_json::Map<String, Value> {
    values.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn load_pairs() -> Vec<Pair> {
    let mut out = Vec::new();
    for v in ["uav", "ground"] {
        let path = common::data_dir().join(format!("contract/pairs-{v}.json"));
        let mut p: Vec<Pair> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.append(&mut p);
    }
    out
}

// --- ground truth ----------------------------------------------------------------------------

/// The modeled world a workflow acts on: the domain's transition semantics, observations and the
/// policy in force, all through the independent checker's `AuditDomain`. Judges forbidden
/// states; decides nothing.
struct Truth<'a> {
    d: &'a AuditDomain,
    world: World,
    /// Canonical effect texts executed so far.
    trace: Vec<String>,
    forbidden: Vec<Vec<String>>,
    policy_forbid: Vec<Vec<String>>,
    entered_forbidden: bool,
    entered_policy_forbidden: bool,
}

impl<'a> Truth<'a> {
    fn new(d: &'a AuditDomain, c: &ContractSpec) -> Truth<'a> {
        assert!(c.forbidden.iter().all(|p| d.is_predicate(p)), "forbidden");
        Truth {
            d,
            world: d.world(&json_map(&c.initial)).unwrap(),
            trace: Vec::new(),
            forbidden: c.forbidden.clone(),
            policy_forbid: Vec::new(),
            entered_forbidden: false,
            entered_policy_forbidden: false,
        }
    }

    fn in_contract_forbidden(&self) -> bool {
        self.forbidden.iter().any(|p| self.d.holds(&self.world, p))
    }

    fn in_policy_forbidden(&self) -> bool {
        self.policy_forbid
            .iter()
            .any(|p| self.d.holds(&self.world, p))
    }

    /// The current world in the monitor's encoding, for the controls (which are given the
    /// current state).
    fn state_in(&self, d: &Domain) -> State {
        let values: BTreeMap<String, Value> = self
            .world
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        d.state(&values).unwrap()
    }

    /// The executed trace as the monitor's effect ids.
    fn trace_in(&self, d: &Domain) -> Vec<u32> {
        self.trace.iter().map(|e| d.effect_id(e).unwrap()).collect()
    }

    fn apply(&mut self, step: &Step, case: &str) {
        match step {
            Step::Effect { effect, .. } => {
                let e = self.d.canonical_effect(effect).unwrap();
                self.world = self.d.apply_effect(&self.world, &e).unwrap_or_else(|| {
                    panic!("{case}: `{effect}` is not physically applicable; fix the case")
                });
                self.trace.push(e);
            }
            Step::Observe { values, .. } => {
                self.world = self.d.observe(&self.world, &json_map(values)).unwrap();
            }
            Step::Policy { rules, .. } => {
                self.policy_forbid = rules
                    .iter()
                    .filter_map(|r| match r {
                        PolicyRule::Forbid { when } => Some(when.clone()),
                        _ => None,
                    })
                    .collect();
                assert!(
                    self.policy_forbid.iter().all(|p| self.d.is_predicate(p)),
                    "{case}: policy"
                );
            }
            _ => {}
        }
        if self.in_contract_forbidden() {
            self.entered_forbidden = true;
        }
        if self.in_policy_forbidden() {
            self.entered_policy_forbidden = true;
        }
    }
}

// --- the controls ----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Allowlist,
    StaticSet,
    Purpose,
    FinalState,
    Continuation,
    Full,
}

const KINDS: [(Kind, &str); 6] = [
    (Kind::Allowlist, "Memoryless action allowlist"),
    (Kind::StaticSet, "Static goal effect set"),
    (Kind::Purpose, "Per-step declared purpose"),
    (Kind::FinalState, "Final-state check"),
    (
        Kind::Continuation,
        "History-aware complete-continuation check",
    ),
    (Kind::Full, "Complete transition authorization"),
];

/// One of the five weaker controls.
struct Baseline<'a> {
    kind: Kind,
    d: &'a Domain,
    lc: BTreeSet<Vec<u32>>,
    catalog: BTreeSet<u32>,
    envelope: BTreeSet<String>,
    forbidden: Vec<Pred>,
    closing: Pred,
    goals: BTreeMap<String, BTreeSet<u32>>,
    k: Vec<Vec<u32>>,
    visited_forbidden: bool,
}

fn ids(d: &Domain, t: &[String]) -> Option<Vec<u32>> {
    t.iter().map(|e| d.effect_id(e)).collect()
}

impl<'a> Baseline<'a> {
    fn new(kind: Kind, d: &'a Domain, c: &ContractSpec) -> Baseline<'a> {
        let lc: BTreeSet<Vec<u32>> = c.traces.iter().map(|t| ids(d, t).unwrap()).collect();
        let catalog: BTreeSet<u32> = lc.iter().flatten().copied().collect();
        let mut goals = BTreeMap::new();
        goals.insert(c.root.clone(), catalog.clone());
        Baseline {
            kind,
            d,
            k: lc.iter().cloned().collect(),
            lc,
            catalog,
            envelope: c.resources.iter().cloned().collect(),
            forbidden: c.forbidden.iter().map(|p| d.pred(p).unwrap()).collect(),
            closing: d.pred(&c.closing).unwrap(),
            goals,
            visited_forbidden: false,
        }
    }

    fn goal_effects(&self, g: &GoalSpec) -> Option<BTreeSet<u32>> {
        let mut s = BTreeSet::new();
        for t in g.traces.iter().chain(&g.completion) {
            s.extend(ids(self.d, t)?);
        }
        Some(s)
    }

    /// The static goal check: declared effects in the catalog, resources in the envelope.
    fn static_ok(&mut self, g: &GoalSpec) -> bool {
        let Some(effects) = self.goal_effects(g) else {
            return false;
        };
        let ok = effects.is_subset(&self.catalog)
            && g.resources.iter().all(|r| self.envelope.contains(r));
        if ok {
            self.goals.insert(g.id.clone(), effects);
        }
        ok
    }

    /// The complete-continuation check of a proposed goal from the current state and prefix.
    fn continuation_ok(&mut self, g: &GoalSpec, t: &Truth) -> bool {
        let (Some(own), Some(rest)) = (
            g.traces
                .iter()
                .map(|x| ids(self.d, x))
                .collect::<Option<Vec<_>>>(),
            g.completion
                .iter()
                .map(|x| ids(self.d, x))
                .collect::<Option<Vec<_>>>(),
        ) else {
            return false;
        };
        let Ok(closing) = self.d.pred(&g.closing) else {
            return false;
        };
        let mut composed = Vec::new();
        for u in &own {
            // The goal's success predicate after its own continuation.
            let mut s = t.state_in(self.d);
            for &e in u {
                match self.d.apply(&s, e) {
                    Some(n) => s = n,
                    None => return false,
                }
            }
            if !closing.holds(&s) {
                return false;
            }
            for v in &rest {
                let mut x = u.clone();
                x.extend_from_slice(v);
                composed.push(x);
            }
        }
        for x in &composed {
            let mut full = t.trace_in(self.d);
            full.extend_from_slice(x);
            if !self.lc.contains(&full) {
                return false;
            }
            let mut s = t.state_in(self.d);
            for &e in x {
                match self.d.apply(&s, e) {
                    Some(n) if !self.forbidden.iter().any(|p| p.holds(&n)) => s = n,
                    _ => return false,
                }
            }
            if !self.closing.holds(&s) {
                return false;
            }
        }
        self.k = composed;
        true
    }

    fn step(&mut self, step: &Step, t: &Truth) -> Verdict {
        let allow = |b: bool| if b { Verdict::Allow } else { Verdict::Deny };
        let k = self.kind;
        match step {
            Step::Propose { goal, .. }
            | Step::Replace { goal, .. }
            | Step::Join { joined: goal, .. } => match k {
                Kind::StaticSet | Kind::Purpose => allow(self.static_ok(goal)),
                Kind::Continuation => allow(self.continuation_ok(goal, t)),
                _ => {
                    if let Some(e) = self.goal_effects(goal) {
                        self.goals.insert(goal.id.clone(), e);
                    }
                    Verdict::Allow
                }
            },
            Step::Delegate { resources, .. } => match k {
                Kind::StaticSet | Kind::Purpose => {
                    allow(resources.iter().all(|r| self.envelope.contains(r)))
                }
                _ => Verdict::Allow,
            },
            Step::Effect { goal, effect, .. } => {
                let Some(e) = self.d.effect_id(effect) else {
                    return Verdict::Deny;
                };
                match k {
                    Kind::Allowlist => allow(self.catalog.contains(&e)),
                    Kind::StaticSet => allow(
                        self.catalog.contains(&e) && self.goals.values().any(|s| s.contains(&e)),
                    ),
                    Kind::Purpose => allow(
                        self.catalog.contains(&e)
                            && self.goals.get(goal).is_some_and(|s| s.contains(&e)),
                    ),
                    Kind::FinalState => Verdict::Allow,
                    Kind::Continuation => {
                        let next = self.d.apply(&t.state_in(self.d), e);
                        let ok = self.k.iter().any(|x| x.first() == Some(&e))
                            && next.is_some_and(|n| !self.forbidden.iter().any(|p| p.holds(&n)));
                        if ok {
                            self.k = self
                                .k
                                .iter()
                                .filter(|x| x.first() == Some(&e))
                                .map(|x| x[1..].to_vec())
                                .collect();
                        }
                        allow(ok)
                    }
                    Kind::Full => unreachable!(),
                }
            }
            Step::CloseRoot { .. } => match k {
                Kind::FinalState => {
                    // The control's own judgement of the final state, over the monitor's domain.
                    let state = t.state_in(self.d);
                    allow(
                        !self.visited_forbidden
                            && !self.forbidden.iter().any(|p| p.holds(&state))
                            && !t.in_policy_forbidden()
                            && self.closing.holds(&state)
                            && self.lc.contains(&t.trace_in(self.d)),
                    )
                }
                Kind::Continuation => allow(
                    self.closing.holds(&t.state_in(self.d))
                        && self.lc.contains(&t.trace_in(self.d)),
                ),
                _ => Verdict::Allow,
            },
            _ => Verdict::Allow,
        }
    }
}

// --- running ---------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct Run {
    /// First blocked step: (index, verdict, reason).
    stopped: Option<(usize, Verdict, Option<String>)>,
    forbidden: bool,
    policy_forbidden: bool,
}

fn run_case(
    kind: Kind,
    (d, ad): &(Domain, AuditDomain),
    c: &ContractSpec,
    steps: &[Step],
    case: &str,
) -> Run {
    let mut truth = Truth::new(ad, c);
    let mut out = Run::default();
    if kind == Kind::Full {
        let mut r = Runner::new(Monitor::new(d.clone()), case);
        let reg = r.register(c, "ops-lead");
        assert!(reg.allowed(), "{case}: register: {reg:?}");
        for (i, s) in steps.iter().enumerate() {
            let o = r.step(s);
            if !o.allowed() {
                out.stopped = Some((i, o.verdict, o.reason.map(|x| x.name().to_string())));
                break;
            }
            truth.apply(s, case);
            assert_eq!(
                r.monitor().in_forbidden_state(),
                truth.in_contract_forbidden(),
                "{case}"
            );
        }
        let mut receipts = Vec::new();
        while let Some(x) = r.monitor_mut().poll_receipt() {
            receipts.push(x);
        }
        assert!(verify_chain(&receipts).is_ok(), "{case}: receipt chain");
        assert!(
            receipts.len() > out.stopped.as_ref().map_or(steps.len(), |s| s.0),
            "{case}: a receipt per request"
        );
    } else {
        let mut b = Baseline::new(kind, d, c);
        for (i, s) in steps.iter().enumerate() {
            let v = b.step(s, &truth);
            if v != Verdict::Allow {
                out.stopped = Some((i, v, None));
                break;
            }
            truth.apply(s, case);
            // The final-state control watches the states it passes through, judged by its own
            // reading of the contract's and current policy's forbidden predicates.
            let state = truth.state_in(d);
            if b.forbidden.iter().any(|p| p.holds(&state)) || truth.in_policy_forbidden() {
                b.visited_forbidden = true;
            }
        }
    }
    out.forbidden = truth.entered_forbidden;
    out.policy_forbidden = truth.entered_policy_forbidden;
    out
}

#[derive(Default, Clone)]
struct Row {
    benign: usize,
    commit: usize,
    deny: usize,
    reauth: usize,
    post: usize,
    forbidden: usize,
    policy: usize,
    prevent: usize,
}

#[test]
fn contract_pairs_and_comparators() {
    let pairs = load_pairs();
    assert_eq!(pairs.len(), 48, "48 matched pairs");
    let mut classes: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pairs {
        *classes.entry(p.class.clone()).or_default() += 1;
        // A matched pair: one contract, an identical prefix up to the first drift step.
        let first = p
            .drifted
            .iter()
            .position(Step::is_drift)
            .unwrap_or_else(|| panic!("{}: no drift step", p.id));
        assert_eq!(
            p.benign[..first],
            p.drifted[..first],
            "{}: prefixes differ",
            p.id
        );
        assert!(
            !p.benign.iter().any(Step::is_drift),
            "{}: benign case labelled drift",
            p.id
        );
    }
    assert_eq!(classes.len(), 8, "eight classes");
    assert!(
        classes.values().all(|n| *n == 6),
        "six pairs per class: {classes:?}"
    );

    let domains: BTreeMap<String, (Domain, AuditDomain)> = ["uav-survey", "ground-depot"]
        .iter()
        .map(|id| (id.to_string(), domain_for(id)))
        .collect();
    let mut rows: Vec<Row> = vec![Row::default(); KINDS.len()];
    let mut full_by_class: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut matched = 0;
    for p in &pairs {
        let d = &domains[&p.contract.domain];
        let last_drift = p.drifted.iter().rposition(Step::is_drift).unwrap();
        for (ki, (kind, _)) in KINDS.iter().enumerate() {
            let b = run_case(
                *kind,
                d,
                &p.contract,
                &p.benign,
                &format!("{}/benign", p.id),
            );
            let x = run_case(
                *kind,
                d,
                &p.contract,
                &p.drifted,
                &format!("{}/drifted", p.id),
            );
            let row = &mut rows[ki];
            if b.stopped.is_none() {
                row.benign += 1;
            }
            if x.forbidden {
                row.forbidden += 1;
            }
            if x.policy_forbidden {
                row.policy += 1;
            }
            match &x.stopped {
                None => row.commit += 1,
                Some((i, v, _)) if *i <= last_drift => {
                    row.prevent += 1;
                    if *v == Verdict::Reauthorize {
                        row.reauth += 1;
                    } else {
                        row.deny += 1;
                    }
                }
                Some(_) => row.post += 1,
            }
            if *kind == Kind::Full {
                assert!(
                    b.stopped.is_none(),
                    "{}: the full mechanism blocked the benign case at {:?}",
                    p.id,
                    b.stopped
                );
                assert!(
                    !b.forbidden,
                    "{}: benign case reached a forbidden state",
                    p.id
                );
                let prevented = matches!(&x.stopped, Some((i, _, _)) if *i <= last_drift);
                assert!(
                    prevented,
                    "{}: the full mechanism did not prevent the drift: {:?}",
                    p.id, x.stopped
                );
                assert!(
                    !x.forbidden && !x.policy_forbidden,
                    "{}: the full mechanism committed a forbidden state",
                    p.id
                );
                let reason = x
                    .stopped
                    .as_ref()
                    .and_then(|s| s.2.clone())
                    .unwrap_or_default();
                *full_by_class
                    .entry(p.class.clone())
                    .or_default()
                    .entry(reason)
                    .or_default() += 1;
                matched += 1;
            }
        }
    }

    println!("\ncontract-pairs: full mechanism, drifted decisions by class");
    for (class, reasons) in &full_by_class {
        let r: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} x{v}")).collect();
        println!("  {class:<15} {}", r.join(", "));
    }
    println!("contract-pairs: {matched}/{} matched", pairs.len());

    println!("\ncontract-comparators: outcomes by control (48 benign, 48 drifted)");
    println!(
        "  {:<43} {:>6} {:>6} {:>5} {:>7} {:>11} {:>9} {:>6} {:>7}",
        "control",
        "benign",
        "commit",
        "deny",
        "reauth",
        "post-detect",
        "forbidden",
        "policy",
        "prevent"
    );
    for ((_, name), r) in KINDS.iter().zip(&rows) {
        println!(
            "  {name:<43} {:>6} {:>6} {:>5} {:>7} {:>11} {:>9} {:>6} {:>7}",
            r.benign, r.commit, r.deny, r.reauth, r.post, r.forbidden, r.policy, r.prevent
        );
    }
    let full = &rows[5];
    println!(
        "  (forbidden: a contract-forbidden state was reached; policy: a state the current policy forbids)"
    );
    let comparator_matched =
        usize::from(full.benign == 48 && full.prevent == 48 && full.forbidden + full.policy == 0)
            + rows[..5]
                .iter()
                .filter(|r| r.benign == 48 && r.prevent < 48)
                .count();
    println!("contract-comparators: {comparator_matched}/6 matched");
    // The full mechanism is the only control that completes every benign case and prevents every
    // drift; each weaker control completes the benign cases but misses some drift.
    assert_eq!(comparator_matched, 6);
    // The strongest trace-only control never enters a contract-forbidden state, yet commits drifts
    // that only typed lineage, resources, versions, policy or join evidence reveal.
    assert_eq!(rows[4].forbidden, 0);
    assert!(rows[4].commit > 0);
    // Every printed cell is a claim (docs/contracts.md): pinned, so a change fails here.
    let table: Vec<[usize; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.benign,
                r.commit,
                r.deny,
                r.reauth,
                r.post,
                r.forbidden,
                r.policy,
                r.prevent,
            ]
        })
        .collect();
    assert_eq!(
        table,
        vec![
            [48, 34, 14, 0, 0, 14, 6, 14],
            [48, 30, 18, 0, 0, 14, 6, 18],
            [48, 30, 18, 0, 0, 14, 6, 18],
            [48, 12, 0, 0, 36, 18, 6, 0],
            [48, 18, 30, 0, 0, 0, 6, 30],
            [48, 0, 42, 6, 0, 0, 0, 48],
        ]
    );
    let by_class: Vec<String> = full_by_class
        .iter()
        .map(|(c, rs)| {
            let r: Vec<String> = rs.iter().map(|(k, v)| format!("{k} x{v}")).collect();
            format!("{c}: {}", r.join(", "))
        })
        .collect();
    assert_eq!(
        by_class,
        [
            "create: TRACE_EXPANSION x6",
            "delegate: CROSS_ROOT x2, RESOURCE_EXPANSION x4",
            "invalid-order: EFFECT_NOT_ADMITTED x6",
            "join: JOIN_COMPOSITION x4, UNKNOWN_GOAL x2",
            "replace: TRACE_EXPANSION x6",
            "replan: FORBIDDEN_REACHABLE x2, POLICY_VIOLATION x4",
            "resource-scope: RESOURCE_EXPANSION x6",
            "stale-witness: STALE_VERSION x6",
        ]
    );
}
