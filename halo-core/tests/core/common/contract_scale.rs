//! The mission-contract scale study: one-factor-at-a-time cells around a baseline fixture, join
//! families and internal-guard probes. Shared by the `contract_scale` test (every cell's decision,
//! untimed) and the `contract_scale` bench (timings and retained-state bytes).
//!
//! Baseline: a child of the root with 4 maximal continuations of length 4, 4 resources, 4
//! obligations, 4 active-frame predicates, 4 closing predicates, under 4 current-policy
//! predicates. Each family changes one factor:
//!
//! - G: goals already under the root (depth-one siblings); D: depth of the new goal (a chain);
//! - L: continuation length; T: continuations; R: resources; O: obligations; F: frames;
//!   C: closing predicates; P: policy predicates;
//! - J: join sources (a precedence chain); Q: six sources under precedence covers with 720, 360,
//!   90, 20, 6 and 1 topological orders; A: two unordered sources whose trace choices give
//!   joined outputs from 2 to 256 continuations;
//! - guard probes: trace-choice and raw-composition guards, topological orders over the guard,
//!   a joined output over 256, precedence entries at and over 28, the goal limit.
#![allow(dead_code, reason = "the test and the bench use different parts")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "fixtures"
)]

use std::collections::BTreeMap;

use halo_core::contract::monitor::edit_digest;
use halo_core::contract::{
    ContractSpec, Domain, GoalSpec, Monitor, Op, PolicyRule, Request, Role, Verdict,
};
use halo_core::reason::ReasonCode;

/// Distinct effects available.
pub const EFFECTS: usize = 256;

/// The synthetic domain: a step counter, sixteen bounded variables and 256 `act(aK)` effects.
pub fn domain() -> Domain {
    let mut t = String::from(
        "[domain]\nid = \"scale\"\nversion = 1\n\n[variables]\nn = { min = 0, max = 100000 }\n",
    );
    for i in 0..16 {
        t.push_str(&format!("v{i} = {{ min = 0, max = 10 }}\n"));
    }
    let names: Vec<String> = (0..EFFECTS).map(|k| format!("\"a{k}\"")).collect();
    t.push_str(&format!(
        "\n[effects.act]\nparams = {{ x = [{}] }}\npre = [\"n <= 99999\"]\npost = [\"n += 1\"]\n",
        names.join(", ")
    ));
    Domain::parse(&t, "scale.toml").unwrap()
}

fn act(k: usize) -> String {
    format!("act(a{})", k % EFFECTS)
}

/// `t` distinct maximal continuations of length `l`.
fn traces(t: usize, l: usize) -> Vec<Vec<String>> {
    (0..t)
        .map(|i| (0..l).map(|j| act(i + j * 37)).collect())
        .collect()
}

fn preds(n: usize, first: &str) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i == 0 {
                first.to_string()
            } else {
                format!("v{} <= {}", i % 16, 10 - (i / 16) % 10)
            }
        })
        .collect()
}

/// One fixture's shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub g: usize,
    pub d: usize,
    pub l: usize,
    pub t: usize,
    pub r: usize,
    pub o: usize,
    pub f: usize,
    pub c: usize,
    pub p: usize,
}

/// The baseline.
pub const BASE: Shape = Shape {
    g: 1,
    d: 1,
    l: 4,
    t: 4,
    r: 4,
    o: 4,
    f: 4,
    c: 4,
    p: 4,
};

fn contract(lang: Vec<Vec<String>>, r: usize, o: usize, p: usize) -> ContractSpec {
    let mut initial = BTreeMap::new();
    initial.insert("n".to_string(), serde_json::json!(0));
    for i in 0..16 {
        initial.insert(format!("v{i}"), serde_json::json!(0));
    }
    ContractSpec {
        closing: vec!["n >= 0".into()],
        discharge: BTreeMap::new(),
        domain: "scale".into(),
        epoch: 1,
        forbidden: (0..4).map(|i| vec![format!("v{i} >= 10")]).collect(),
        initial,
        obligations: (0..o).map(|i| format!("o{i}")).collect(),
        policy: (0..p)
            .map(|i| PolicyRule::Forbid {
                when: vec![format!("v{} >= {}", i % 16, 10 - (i / 16) % 5)],
            })
            .collect(),
        resources: (0..r).map(|i| format!("r{i}")).collect(),
        root: "root".into(),
        traces: lang,
    }
}

fn child(id: &str, parent: &str, s: &Shape, tr: Vec<Vec<String>>) -> GoalSpec {
    GoalSpec {
        closing: preds(s.c, &format!("n >= {}", s.l)),
        completion: vec![Vec::new()],
        discharged: Vec::new(),
        frames: preds(s.f, "n >= 0").into_iter().map(|p| vec![p]).collect(),
        id: id.into(),
        obligations: (0..s.o).map(|i| format!("o{i}")).collect(),
        parent: parent.into(),
        resources: (0..s.r).map(|i| format!("r{i}")).collect(),
        text: None,
        traces: tr,
    }
}

fn send(m: &mut Monitor, caller: Role, op: Op) -> halo_core::contract::Decision {
    m.handle(Request { caller, op })
}

fn propose_op(m: &Monitor, g: &GoalSpec) -> Op {
    Op::ProposeGoal {
        goal: g.clone(),
        witness: m.witness_for(&g.parent, &edit_digest(g)),
    }
}

/// A prepared monitor and the one request the cell measures.
pub struct Prepared {
    pub monitor: Monitor,
    pub request: Request,
}

fn registered(c: &ContractSpec) -> Monitor {
    let mut m = Monitor::new(domain());
    let d = send(
        &mut m,
        Role::Operator,
        Op::RegisterRoot {
            approved_by: "ops".into(),
            contract: c.clone(),
        },
    );
    assert!(d.allowed(), "fixture contract refused: {d:?}");
    m
}

/// A non-join cell: a proposal of shape `s`.
pub fn transition(s: &Shape) -> Prepared {
    let lang = traces(s.t, s.l);
    let mut m = registered(&contract(lang.clone(), s.r, s.o, s.p));
    // G: siblings already authorized under the root.
    for i in 1..s.g {
        let g = child(&format!("s{i}"), "root", s, lang.clone());
        let op = propose_op(&m, &g);
        assert!(send(&mut m, Role::Agent, op).allowed());
    }
    // D: a chain of ancestors.
    let mut parent = "root".to_string();
    for i in 1..s.d {
        let g = child(&format!("c{i}"), &parent, s, lang.clone());
        let op = propose_op(&m, &g);
        let d = send(&mut m, Role::Agent, op);
        assert!(d.allowed(), "chain {i}: {d:?}");
        parent = format!("c{i}");
    }
    while m.poll_receipt().is_some() {}
    let g = child("new", &parent, s, lang);
    let op = propose_op(&m, &g);
    Prepared {
        monitor: m,
        request: Request {
            caller: Role::Agent,
            op,
        },
    }
}

/// The baseline with its child authorized; the request authorizes the child's next effect.
pub fn effect_authorization() -> Prepared {
    let mut p = transition(&BASE);
    assert!(p.monitor.handle(p.request.clone()).allowed());
    while p.monitor.poll_receipt().is_some() {}
    let request = Request {
        caller: Role::Agent,
        op: Op::AuthorizeEffect {
            effect: act(0),
            goal: "new".into(),
        },
    };
    Prepared {
        monitor: p.monitor,
        request,
    }
}

/// As [`effect_authorization`] with the reservation made; the request commits it.
pub fn commit() -> Prepared {
    let mut p = effect_authorization();
    let d = p.monitor.handle(p.request.clone());
    while p.monitor.poll_receipt().is_some() {}
    let request = Request {
        caller: Role::Agent,
        op: Op::CommitEffect {
            effect: act(0),
            key: "k1".into(),
            reservation: d.reservation.unwrap(),
        },
    };
    Prepared {
        monitor: p.monitor,
        request,
    }
}

/// A join cell: `sources[i]` is source i's traces; `prec` pairs by index; the proposal supplies
/// the complete composition when `complete` (else only its first continuation). Sources are
/// proposed with completions when `with_completion`, else as whole root traces.
pub fn join(
    sources: &[Vec<Vec<String>>],
    prec: &[(usize, usize)],
    complete: bool,
    with_completion: bool,
) -> Prepared {
    let n = sources.len();
    let d = domain();
    let comp = halo_core::contract::compose::compose(
        &sources
            .iter()
            .map(|s| {
                s.iter()
                    .map(|t| t.iter().map(|e| d.effect_id(e).unwrap()).collect())
                    .collect()
            })
            .collect::<Vec<_>>(),
        &prec
            .iter()
            .copied()
            .filter(|(a, b)| a < &n && b < &n && a != b)
            .collect::<Vec<_>>(),
    );
    let composition: Vec<Vec<String>> = match &comp {
        Ok(c) => c
            .iter()
            .map(|t| t.iter().map(|e| d.name(*e)).collect())
            .collect(),
        Err(_) => Vec::new(),
    };
    // Each source's completion: one trace of every other source, in index order.
    let completion_of = |i: usize| -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = vec![Vec::new()];
        for (j, s) in sources.iter().enumerate() {
            if j == i {
                continue;
            }
            out = out
                .iter()
                .flat_map(|p| s.iter().map(move |t| p.iter().chain(t).cloned().collect()))
                .collect();
        }
        out
    };
    let mut lang: Vec<Vec<String>> = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        if with_completion {
            for u in s {
                for c in completion_of(i) {
                    lang.push(u.iter().chain(&c).cloned().collect());
                }
            }
        } else {
            lang.extend(s.iter().cloned());
        }
    }
    if composition.len() + lang.len() <= 256 {
        lang.extend(composition.iter().cloned());
    }
    lang.sort();
    lang.dedup();
    let shape = Shape {
        l: 1,
        t: 1,
        r: 1,
        o: 1,
        f: 1,
        c: 1,
        p: 1,
        ..BASE
    };
    let mut m = registered(&contract(lang, 1, 1, 1));
    for (i, s) in sources.iter().enumerate() {
        let mut g = child(&format!("s{i}"), "root", &shape, s.clone());
        g.closing = vec!["n >= 0".into()];
        if with_completion {
            g.completion = completion_of(i);
        }
        let op = propose_op(&m, &g);
        let dcs = send(&mut m, Role::Agent, op);
        assert!(dcs.allowed(), "source {i}: {dcs:?}");
    }
    while m.poll_receipt().is_some() {}
    let supplied = if complete {
        composition.clone()
    } else {
        composition.iter().take(1).cloned().collect()
    };
    let mut j = child(
        "joined",
        "root",
        &shape,
        if supplied.is_empty() {
            vec![sources[0][0].clone()]
        } else {
            supplied
        },
    );
    j.closing = vec!["n >= 0".into()];
    let op = Op::JoinGoals {
        witness: m.witness_for("root", &edit_digest(&j)),
        joined: j,
        precedence: prec
            .iter()
            .map(|(a, b)| (format!("s{a}"), format!("s{b}")))
            .collect(),
        sources: (0..n).map(|i| format!("s{i}")).collect(),
    };
    Prepared {
        monitor: m,
        request: Request {
            caller: Role::Agent,
            op,
        },
    }
}

fn singles(k: usize, base: usize) -> Vec<Vec<Vec<String>>> {
    (0..k).map(|i| vec![vec![act(base + i)]]).collect()
}

/// An over-profile probe: family, cell name, and the change to the proposed goal.
type OverProbe = (&'static str, &'static str, fn(&mut GoalSpec));

/// A one-factor family: name, values, and the shape for a value.
type Family = (&'static str, &'static [usize], fn(usize) -> Shape);

/// One registered cell.
pub struct Cell {
    pub family: &'static str,
    pub name: String,
    pub expect: (Verdict, Option<ReasonCode>),
    pub build: Box<dyn Fn() -> Prepared>,
}

fn cell(
    family: &'static str,
    name: String,
    expect: (Verdict, Option<ReasonCode>),
    build: impl Fn() -> Prepared + 'static,
) -> Cell {
    Cell {
        family,
        name,
        expect,
        build: Box::new(build),
    }
}

const ALLOW: (Verdict, Option<ReasonCode>) = (Verdict::Allow, None);
const LIMIT: (Verdict, Option<ReasonCode>) =
    (Verdict::Indeterminate, Some(ReasonCode::PROFILE_LIMIT));

/// Every cell of the study, in registry order.
pub fn cells() -> Vec<Cell> {
    let mut v = Vec::new();
    v.push(cell("baseline", "transition".into(), ALLOW, || {
        transition(&BASE)
    }));
    v.push(cell(
        "baseline",
        "effect authorization".into(),
        ALLOW,
        effect_authorization,
    ));
    v.push(cell("baseline", "commit".into(), ALLOW, commit));
    let fam: [Family; 9] = [
        ("G", &[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 63], |x| Shape {
            g: x,
            ..BASE
        }),
        ("D", &[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 63], |x| Shape {
            d: x,
            ..BASE
        }),
        ("L", &[1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64], |x| Shape {
            l: x,
            ..BASE
        }),
        ("T", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { t: x, ..BASE }
        }),
        ("R", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { r: x, ..BASE }
        }),
        ("O", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { o: x, ..BASE }
        }),
        ("F", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { f: x, ..BASE }
        }),
        ("C", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { c: x, ..BASE }
        }),
        ("P", &[1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256], |x| {
            Shape { p: x, ..BASE }
        }),
    ];
    for (f, xs, mk) in fam {
        for &x in xs {
            let s = mk(x);
            v.push(cell(f, format!("{f}-{x}"), ALLOW, move || transition(&s)));
        }
    }
    // Each family's first value over the published profile (the paper's Table 7 contrast
    // probes): Indeterminate / PROFILE_LIMIT, nothing retained. The root stays inside the
    // profile; the proposed goal carries the one dimension over it.
    v.push(cell("D", "D-64 (over)".into(), LIMIT, || {
        transition(&Shape { d: 64, ..BASE })
    }));
    let over: [OverProbe; 5] = [
        ("L", "L-65 (over)", |g| {
            g.traces = vec![(0..65).map(act).collect()];
        }),
        ("R", "R-257 (over)", |g| {
            g.resources = (0..257).map(|i| format!("r{i}")).collect();
        }),
        ("O", "O-257 (over)", |g| {
            g.obligations = (0..257).map(|i| format!("o{i}")).collect();
        }),
        ("F", "F-257 (over)", |g| {
            g.frames = preds(257, "n >= 0").into_iter().map(|p| vec![p]).collect();
        }),
        ("C", "C-257 (over)", |g| {
            g.closing = preds(257, "n >= 4");
        }),
    ];
    for (f, name, change) in over {
        v.push(cell(f, name.into(), LIMIT, move || {
            let mut p = transition(&BASE);
            if let Op::ProposeGoal { goal, witness } = &mut p.request.op {
                change(goal);
                witness.edit = edit_digest(goal).to_hex();
            }
            p
        }));
    }
    // J: 2..8 sources under a precedence chain: one joined continuation; 9 is over.
    v.push(cell("J", "J-9 (over)".into(), LIMIT, || {
        let chain: Vec<(usize, usize)> = (1..9).map(|i| (i - 1, i)).collect();
        join(&singles(9, 0), &chain, true, false)
    }));
    for k in 2..=8usize {
        v.push(cell("J", format!("J-{k}"), ALLOW, move || {
            let chain: Vec<(usize, usize)> = (1..k).map(|i| (i - 1, i)).collect();
            join(&singles(k, 0), &chain, true, false)
        }));
    }
    // Q: six single-effect sources; precedence covers with 720, 360, 90, 20, 6, 1 orders.
    let covers: [(usize, &[(usize, usize)]); 6] = [
        (720, &[]),
        (360, &[(0, 1)]),
        (90, &[(0, 1), (2, 3), (4, 5)]),
        (20, &[(0, 1), (1, 2), (3, 4), (4, 5)]),
        (6, &[(0, 1), (1, 2), (2, 3), (3, 4), (0, 5)]),
        (1, &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
    ];
    for (orders, prec) in covers {
        let expect = if orders > 256 { LIMIT } else { ALLOW };
        v.push(cell("Q", format!("Q-{orders}"), expect, move || {
            join(&singles(6, 0), prec, true, false)
        }));
    }
    // A: two unordered sources with m and n single-effect traces: 2mn joined continuations.
    for (m, n) in [
        (1, 1),
        (1, 2),
        (2, 2),
        (2, 4),
        (4, 4),
        (4, 6),
        (6, 6),
        (6, 8),
        (8, 8),
        (8, 16),
    ] {
        v.push(cell("A", format!("A-{}", 2 * m * n), ALLOW, move || {
            let a: Vec<Vec<String>> = (0..m).map(|i| vec![act(i)]).collect();
            let b: Vec<Vec<String>> = (0..n).map(|i| vec![act(100 + i)]).collect();
            join(&[a, b], &[], true, true)
        }));
    }
    // Guard probes.
    v.push(cell(
        "guard",
        "trace choices 4096, one continuation supplied".into(),
        LIMIT,
        || {
            let a: Vec<Vec<String>> = (0..64).map(|i| vec![act(i)]).collect();
            let b: Vec<Vec<String>> = (0..64).map(|i| vec![act(100 + i)]).collect();
            join(&[a, b], &[(0, 1)], false, false)
        },
    ));
    v.push(cell(
        "guard",
        "trace choices 4160 (over)".into(),
        LIMIT,
        || {
            let a: Vec<Vec<String>> = (0..65).map(|i| vec![act(i)]).collect();
            let b: Vec<Vec<String>> = (0..64).map(|i| vec![act(100 + i)]).collect();
            join(&[a, b], &[(0, 1)], false, false)
        },
    ));
    v.push(cell(
        "guard",
        "topological orders 5040 (over)".into(),
        LIMIT,
        || join(&singles(7, 0), &[], false, false),
    ));
    v.push(cell(
        "guard",
        "joined output 258 (over)".into(),
        LIMIT,
        || {
            let a: Vec<Vec<String>> = (0..3).map(|i| vec![act(i)]).collect();
            let b: Vec<Vec<String>> = (0..43).map(|i| vec![act(100 + i)]).collect();
            join(&[a, b], &[], false, false)
        },
    ));
    v.push(cell("guard", "precedence entries 28".into(), ALLOW, || {
        let all: Vec<(usize, usize)> = (0..8)
            .flat_map(|a| (a + 1..8).map(move |b| (a, b)))
            .collect();
        assert_eq!(all.len(), 28);
        join(&singles(8, 0), &all, true, false)
    }));
    v.push(cell(
        "guard",
        "precedence entries 29 (over)".into(),
        LIMIT,
        || {
            let mut all: Vec<(usize, usize)> = (0..8)
                .flat_map(|a| (a + 1..8).map(move |b| (a, b)))
                .collect();
            all.push((0, 7));
            join(&singles(8, 0), &all, true, false)
        },
    ));
    v.push(cell("guard", "goal 65".into(), LIMIT, || {
        transition(&Shape { g: 64, ..BASE })
    }));
    v.push(cell("guard", "continuations 257".into(), LIMIT, || {
        let mut p = transition(&BASE);
        if let Op::ProposeGoal { goal, witness } = &mut p.request.op {
            goal.traces = vec![goal.traces[0].clone(); 257];
            witness.edit = edit_digest(goal).to_hex();
        }
        p
    }));
    v
}
