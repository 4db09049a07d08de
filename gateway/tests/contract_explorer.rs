//! `contract-explorer`: the bounded explorer (`sitl::contract_explorer`) over the small UAV
//! abstraction. With the intact checker it must reach no invariant violation, and the gateway's
//! monitor must take the same decision as the independent checker on every attempted transition
//! of the exploration. Each of the 13 single-defect variants of the checker must be killed by a
//! reachable counterexample.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

mod common;

use halo_gateway::contract::{Domain, Monitor, Request};
use sitl::contract_audit::{AuditDomain, Defect};
use sitl::contract_explorer::{INVARIANTS, explore, explore_until};

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
        "op": {"op": "register_root", "approved_by": "ops-lead", "contract": sitl::contract_explorer::contract()}
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
        if let Some(to) = t.to {
            if intact.reached_by[to] == Some(ix) {
                monitors[to] = Some(m);
            }
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
