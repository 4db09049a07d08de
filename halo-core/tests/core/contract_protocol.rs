//! `contract-protocol`: positive and negative checks over every gate of the mission-contract
//! protocol — root lifecycle, witnesses, bottom-up resolution, cancel then explicit recovery,
//! obligation non-expansion, all-interleaving joins, atomic commit, idempotency and profile
//! limits — as data: `tests/data/contract/protocol.jsonl`, one check a line.
//!
//! A check names the root it starts from (`pairs-uav`: the operator registers the contract of
//! `pairs-uav.json`; `null`: no root), the setup requests with the verdict each must get, the
//! request judged, and the verdict and reason the specification requires of it. A refused
//! request must leave the retained state and the versions exactly as they were; an allowed one
//! must change them (an idempotent replay must not); every request leaves a receipt that
//! records its verdict.

use std::collections::BTreeSet;

use halo_core::contract::{ContractSpec, Domain, Monitor, Op, Request, Role, Verdict};
use serde::Deserialize;
use serde_json::Value;

use crate::common;

/// One check of the corpus.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// `pairs-uav`, or none.
    root: Option<String>,
    setup: Vec<SetupStep>,
    request: Request,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetupStep {
    request: Request,
    /// `allow`, `deny`, `indeterminate`, `reauthorize`.
    verdict: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    verdict: String,
    reason: Option<String>,
}

/// A verdict's wire name.
fn wire(v: Verdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|x| x.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn domain() -> Domain {
    let path = common::repo_root().join("catalogs/contract-uav.toml");
    Domain::parse(&std::fs::read_to_string(path).unwrap(), "contract-uav.toml").unwrap()
}

fn pairs_contract() -> ContractSpec {
    let path = common::data_dir().join("contract/pairs-uav.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::from_value(v[0]["contract"].clone()).unwrap()
}

fn corpus() -> Vec<Case> {
    let path = common::data_dir().join("contract/protocol.jsonl");
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Runs one check; the reason it does not hold, if it does not.
fn run(c: &Case, domain: &Domain, root: &ContractSpec) -> Result<(), String> {
    let mut m = Monitor::new(domain.clone());
    if let Some(r) = &c.root {
        if r != "pairs-uav" {
            return Err(format!("unknown root `{r}`"));
        }
        let d = m.handle(Request {
            caller: Role::Operator,
            op: Op::RegisterRoot {
                approved_by: "ops-lead".into(),
                contract: root.clone(),
            },
        });
        if !d.allowed() {
            return Err(format!("the root was refused: {}", d.detail));
        }
    }
    for (i, st) in c.setup.iter().enumerate() {
        let d = m.handle(st.request.clone());
        if wire(d.verdict) != st.verdict {
            return Err(format!(
                "setup step {} ({}): {}, not {} ({})",
                i + 1,
                st.request.op.name(),
                wire(d.verdict),
                st.verdict,
                d.detail
            ));
        }
    }
    while m.poll_receipt().is_some() {}
    let before_state = m.retained_state_json();
    let before_versions = m.versions();
    let d = m.handle(c.request.clone());
    let reason = d.reason.map(|r| r.name().to_string());
    let after_state = m.retained_state_json();
    let mut why = Vec::new();
    if (wire(d.verdict), &reason) != (c.expect.verdict.clone(), &c.expect.reason) {
        why.push(format!(
            "expected {} {:?}, got {} {:?} ({})",
            c.expect.verdict,
            c.expect.reason,
            wire(d.verdict),
            reason,
            d.detail
        ));
    }
    if d.verdict != Verdict::Allow {
        if after_state != before_state || m.versions() != before_versions {
            why.push("a refusal changed the retained state or the versions".into());
        }
    } else if !d.replayed && after_state == before_state {
        why.push("an allowed request changed nothing".into());
    } else if d.replayed && after_state != before_state {
        why.push("an idempotent replay changed the state".into());
    }
    // Every request, accepted or not, leaves a receipt that records the decision.
    let mut last = None;
    while let Some(r) = m.poll_receipt() {
        last = Some(r);
    }
    match last {
        Some(r) if r.body.value()["verdict"] == serde_json::to_value(d.verdict).unwrap() => {}
        Some(_) => why.push("the receipt records another verdict".into()),
        None => why.push("no receipt".into()),
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

#[test]
fn contract_protocol() {
    let all = corpus();
    let (domain, root) = (domain(), pairs_contract());
    let mut matched = 0;
    let mut positive = 0;
    let mut gates: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    for c in &all {
        match run(c, &domain, &root) {
            Ok(()) => matched += 1,
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
        let op = c.request.op.name();
        if c.expect.verdict == "allow" {
            positive += 1;
            gates.insert(format!("allow:{op}"));
        } else {
            gates.insert(format!("{:?}:{op}", c.expect.reason));
        }
        println!(
            "  {:<70} {} {}",
            c.name,
            c.expect.verdict,
            c.expect.reason.as_deref().unwrap_or("")
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

/// The runner catches a wrong expectation: one check's expected verdict flipped, and one
/// check's request replaced by another, are each caught.
#[test]
fn the_protocol_runner_catches_a_planted_expectation() {
    let mut all = corpus();
    let (domain, root) = (domain(), pairs_contract());
    let flipped = all.iter_mut().find(|c| c.expect.verdict == "deny").unwrap();
    flipped.expect.verdict = "allow".into();
    flipped.expect.reason = None;
    assert!(run(flipped, &domain, &root).is_err());
    let allowed = all
        .iter()
        .position(|c| c.expect.verdict == "allow" && c.root.is_some())
        .unwrap();
    let mut swapped = all.remove(allowed);
    swapped.request.op = Op::CloseRoot {};
    assert!(run(&swapped, &domain, &root).is_err());
}
