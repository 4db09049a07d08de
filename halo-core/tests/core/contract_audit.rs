//! `contract-audit` and `contract-mutants`: the independent checker (`sitl::oracle::contract_audit`,
//! which imports nothing from this crate) replays every receipt stream the monitor writes for
//! the 96 workflow cases and a protocol scenario, and must accept each one; then a semantic
//! mutation suite changes fields inside receipts, recomputes every outer hash so the chain is
//! intact, and the checker must reject every mutant.
//!
//! Families (after the registered categories: effect mediation; root, parent and worker
//! identity; trace order and multiplicity; resource scope; success and forbidden predicates;
//! active frames; inherited obligations; residual completion; policy and state versions;
//! same-root composition; reservation-to-commit binding; idempotency) are listed in `FAMILIES`.
use crate::common;

use std::collections::BTreeMap;

use halo_core::contract::monitor::edit_digest;
use halo_core::contract::workflow::{Runner, Step};
use halo_core::contract::{ContractSpec, Domain, GoalSpec, Monitor, Op, Request, Role};
use halo_core::digest::{Digest, tag};
use halo_core::receipt::Receipt;
use serde::Deserialize;
use serde_json::{Value, json};
use sitl::oracle::contract_audit::{AuditDomain, audit};

#[derive(Deserialize)]
struct Pair {
    id: String,
    contract: ContractSpec,
    benign: Vec<Step>,
    drifted: Vec<Step>,
}

fn domain_file(id: &str) -> &'static str {
    match id {
        "uav-survey" => "catalogs/contract-uav.toml",
        "ground-depot" => "catalogs/contract-ground.toml",
        other => panic!("no domain {other}"),
    }
}

fn text(file: &str) -> String {
    std::fs::read_to_string(common::repo_root().join(file)).unwrap()
}

fn drain(m: &mut Monitor) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(r) = m.poll_receipt() {
        // Sealed bodies are canonical: the Value route writes the same text.
        assert_eq!(
            serde_json::to_string(&r.body.value()).unwrap(),
            r.body.as_str()
        );
        out.push(serde_json::to_value(&r).unwrap());
    }
    out
}

struct Stream {
    name: String,
    domain: String,
    receipts: Vec<Value>,
    commits: usize,
}

/// Runs every step, not stopping at refusals, so streams hold accepted and refused operations.
fn run(name: &str, d: &Domain, c: &ContractSpec, steps: &[Step]) -> Stream {
    let mut r = Runner::new(Monitor::new(d.clone()), name);
    r.register(c, "ops-lead");
    for s in steps {
        r.step(s);
    }
    let commits = r.monitor().trace().len();
    Stream {
        name: name.into(),
        domain: c.domain.clone(),
        receipts: drain(r.monitor_mut()),
        commits,
    }
}

/// A scenario with what the workflows lack: exact retries, key conflicts, frames, delegation.
fn scenario(d: &Domain, c: &ContractSpec) -> Stream {
    let mut m = Monitor::new(d.clone());
    let send = |m: &mut Monitor, caller: Role, op: Op| m.handle(Request { caller, op });
    send(
        &mut m,
        Role::Operator,
        Op::RegisterRoot {
            approved_by: "ops-lead".into(),
            contract: c.clone(),
        },
    );
    let t1: Vec<String> = c.traces[0].clone();
    let goal = GoalSpec {
        closing: c.closing.clone(),
        completion: vec![Vec::new()],
        discharged: Vec::new(),
        frames: vec![vec![c.forbidden[0][0].replace("==", "!=")]],
        id: "g1".into(),
        obligations: c.obligations.clone(),
        parent: c.root.clone(),
        resources: vec![c.resources[0].clone()],
        text: Some("scenario".into()),
        traces: vec![t1.clone()],
    };
    let w = m.witness_for(&c.root, &edit_digest(&goal));
    assert!(send(&mut m, Role::Agent, Op::ProposeGoal { goal, witness: w }).allowed());
    let wd = m.witness_for(
        &c.root,
        &halo_core::contract::monitor::delegation_digest("g1", &[c.resources[0].clone()], "w1"),
    );
    assert!(
        send(
            &mut m,
            Role::Agent,
            Op::DelegateGoal {
                goal: "g1".into(),
                resources: vec![c.resources[0].clone()],
                root: c.root.clone(),
                witness: wd,
                worker: "w1".into()
            }
        )
        .allowed()
    );
    for (i, e) in t1.iter().enumerate() {
        let a = send(
            &mut m,
            Role::Agent,
            Op::AuthorizeEffect {
                effect: e.clone(),
                goal: "g1".into(),
            },
        );
        let r = a.reservation.unwrap();
        let commit = Op::CommitEffect {
            effect: e.clone(),
            key: format!("k{i}"),
            reservation: r,
        };
        assert!(send(&mut m, Role::Agent, commit.clone()).allowed());
        // An exact retry, then a conflicting body under the same key.
        assert!(send(&mut m, Role::Agent, commit).replayed);
        let conflict = Op::CommitEffect {
            effect: e.clone(),
            key: format!("k{i}"),
            reservation: r + 100,
        };
        assert!(!send(&mut m, Role::Agent, conflict).allowed());
    }
    let review: BTreeMap<String, Value> = c
        .discharge
        .values()
        .flatten()
        .map(|cond| {
            let parts: Vec<&str> = cond.split_whitespace().collect();
            (parts[0].to_string(), json!(parts[2] == "true"))
        })
        .collect();
    assert!(
        send(
            &mut m,
            Role::Provider,
            Op::ChangeVersion {
                policy: None,
                observe: Some(review)
            }
        )
        .allowed()
    );
    assert!(send(&mut m, Role::Agent, Op::Reauthorize { goal: "g1".into() }).allowed());
    assert!(send(&mut m, Role::Agent, Op::CloseGoal { goal: "g1".into() }).allowed());
    assert!(send(&mut m, Role::Agent, Op::CloseRoot {}).allowed());
    let commits = m.trace().len();
    Stream {
        name: format!("scenario-{}", c.domain),
        domain: c.domain.clone(),
        receipts: drain(&mut m),
        commits,
    }
}

/// Re-links and re-hashes a stream after a mutation: the chain itself stays valid.
fn rehash(rs: &mut [Value]) {
    let mut prev = Digest::default();
    for (i, r) in rs.iter_mut().enumerate() {
        r["index"] = json!(i);
        r["prev"] = json!(prev.to_hex());
        let at = r["at_ns"].as_u64().unwrap();
        let h = Digest::of(
            tag::RECEIPT,
            &[&Receipt::hash_input(i as u64, &prev, at, &r["body"])],
        );
        r["hash"] = json!(h.to_hex());
        prev = h;
    }
}

fn op(r: &Value) -> &str {
    r["body"]["request"]["op"]["op"].as_str().unwrap_or("")
}

fn allowed(r: &Value) -> bool {
    r["body"]["verdict"] == "allow" && r["body"]["replay_of"].is_null()
}

fn is_edit(r: &Value) -> bool {
    matches!(op(r), "propose_goal" | "replace_goal" | "join_goals")
}

fn goal_key(r: &Value) -> &'static str {
    if op(r) == "join_goals" {
        "joined"
    } else {
        "goal"
    }
}

/// Changes an accepted edit's goal spec and re-binds its digest in the witness and the record,
/// so only semantic checking can reject it.
fn rebind(r: &mut Value, f: &dyn Fn(&mut Value)) {
    let k = goal_key(r);
    f(&mut r["body"]["request"]["op"][k]);
    let g: GoalSpec = serde_json::from_value(r["body"]["request"]["op"][k].clone()).unwrap();
    let d = edit_digest(&g).to_hex();
    r["body"]["request"]["op"]["witness"]["edit"] = json!(d);
    r["body"]["edit"] = json!(d);
}

fn previous_state(rs: &[Value], i: usize) -> Value {
    rs[i.saturating_sub(1)]["body"]["state"].clone()
}

type Family = (&'static str, fn(&[Value]) -> Vec<Vec<Value>>);

fn each(
    rs: &[Value],
    pick: impl Fn(&Value) -> bool,
    f: impl Fn(&mut Vec<Value>, usize),
) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for i in 0..rs.len() {
        if pick(&rs[i]) {
            let mut m = rs.to_vec();
            f(&mut m, i);
            out.push(m);
        }
    }
    out
}

fn reservation_of(r: &Value) -> u64 {
    r["body"]["reservation"].as_u64().unwrap_or(0)
}

const FAMILIES: &[Family] = &[
    (
        "omitted mediation: the reservation before a commit removed",
        |rs| {
            each(
                rs,
                |r| allowed(r) && op(r) == "commit_effect",
                |m, i| {
                    let res = reservation_of(&m[i]);
                    let a = (0..i)
                        .rev()
                        .find(|j| op(&m[*j]) == "authorize_effect" && reservation_of(&m[*j]) == res)
                        .unwrap();
                    m.remove(a);
                },
            )
        },
    ),
    ("detached commit: another reservation id", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "commit_effect",
            |m, i| {
                let r = reservation_of(&m[i]) + 1000;
                m[i]["body"]["request"]["op"]["reservation"] = json!(r);
                m[i]["body"]["reservation"] = json!(r);
            },
        )
    }),
    (
        "effect mediation: a commit of another effect than reserved",
        |rs| {
            each(
                rs,
                |r| allowed(r) && op(r) == "commit_effect",
                |m, i| {
                    let e = m[i]["body"]["request"]["op"]["effect"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let other = m
                        .iter()
                        .filter(|r| op(r) == "commit_effect")
                        .filter_map(|r| r["body"]["request"]["op"]["effect"].as_str())
                        .find(|x| *x != e)
                        .unwrap_or("hold")
                        .to_string();
                    m[i]["body"]["request"]["op"]["effect"] = json!(other);
                },
            )
        },
    ),
    ("trace order: two committed effects swapped", |rs| {
        let commits: Vec<usize> = (0..rs.len())
            .filter(|i| allowed(&rs[*i]) && op(&rs[*i]) == "commit_effect")
            .collect();
        let mut out = Vec::new();
        for w in commits.windows(2) {
            let (i, j) = (w[0], w[1]);
            let (ei, ej) = (
                rs[i]["body"]["request"]["op"]["effect"].clone(),
                rs[j]["body"]["request"]["op"]["effect"].clone(),
            );
            if ei == ej {
                continue;
            }
            let mut m = rs.to_vec();
            for x in m.iter_mut() {
                if matches!(op(x), "authorize_effect" | "commit_effect") {
                    let res = reservation_of(x);
                    if res == reservation_of(&rs[i]) {
                        x["body"]["request"]["op"]["effect"] = ej.clone();
                    } else if res == reservation_of(&rs[j]) {
                        x["body"]["request"]["op"]["effect"] = ei.clone();
                    }
                }
            }
            out.push(m);
        }
        out
    }),
    ("multiplicity: a committed effect repeated", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "commit_effect",
            |m, i| {
                let mut dup = m[i].clone();
                dup["body"]["request"]["op"]["key"] = json!("mutant-key");
                m.insert(i + 1, dup);
            },
        )
    }),
    ("versions: a stale state version in a witness", |rs| {
        each(
            rs,
            |r| allowed(r) && (is_edit(r) || op(r) == "delegate_goal"),
            |m, i| {
                let w = &mut m[i]["body"]["request"]["op"]["witness"];
                w["state_version"] = json!(w["state_version"].as_u64().unwrap() + 1);
            },
        )
    }),
    ("versions: a stale policy version in a witness", |rs| {
        each(
            rs,
            |r| allowed(r) && (is_edit(r) || op(r) == "delegate_goal"),
            |m, i| {
                let w = &mut m[i]["body"]["request"]["op"]["witness"];
                w["policy_version"] = json!(w["policy_version"].as_u64().unwrap() + 1);
            },
        )
    }),
    ("versions: a stale graph revision in a witness", |rs| {
        each(
            rs,
            |r| allowed(r) && is_edit(r),
            |m, i| {
                let w = &mut m[i]["body"]["request"]["op"]["witness"];
                w["base_revision"] = json!(w["base_revision"].as_u64().unwrap() - 1);
                w["new_revision"] = json!(w["new_revision"].as_u64().unwrap() - 1);
            },
        )
    }),
    ("versions: recorded versions after an operation", |rs| {
        each(rs, allowed, |m, i| {
            let a = &mut m[i]["body"]["after"];
            a["graph"] = json!(a["graph"].as_u64().unwrap() + 1);
        })
    }),
    ("root identity: a witness for another root", |rs| {
        each(
            rs,
            |r| allowed(r) && is_edit(r),
            |m, i| {
                m[i]["body"]["request"]["op"]["witness"]["root"] = json!("mutant-root");
            },
        )
    }),
    ("root identity: a delegation into another root", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "delegate_goal",
            |m, i| {
                m[i]["body"]["request"]["op"]["root"] = json!("mutant-root");
            },
        )
    }),
    ("worker identity: a delegation to another worker", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "delegate_goal",
            |m, i| {
                m[i]["body"]["request"]["op"]["worker"] = json!("mutant-worker");
            },
        )
    }),
    ("parent identity: an edit under another parent", |rs| {
        each(
            rs,
            |r| allowed(r) && is_edit(r),
            |m, i| {
                rebind(&mut m[i], &|g| g["parent"] = json!("mutant-parent"));
                m[i]["body"]["request"]["op"]["witness"]["parent"] = json!("mutant-parent");
            },
        )
    }),
    (
        "resource scope: an accepted goal given a resource outside its envelope",
        |rs| {
            each(
                rs,
                |r| allowed(r) && is_edit(r),
                |m, i| {
                    rebind(&mut m[i], &|g| {
                        g["resources"]
                            .as_array_mut()
                            .unwrap()
                            .push(json!("mutant:scope"))
                    })
                },
            )
        },
    ),
    ("resource scope: a delegation widened", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "delegate_goal",
            |m, i| {
                m[i]["body"]["request"]["op"]["resources"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("mutant:scope"));
            },
        )
    }),
    ("obligations: an inherited obligation dropped", |rs| {
        each(
            rs,
            |r| {
                allowed(r)
                    && is_edit(r)
                    && r["body"]["request"]["op"][goal_key(r)]["obligations"]
                        .as_array()
                        .is_some_and(|a| !a.is_empty())
            },
            |m, i| {
                rebind(&mut m[i], &|g| g["obligations"] = json!([]));
            },
        )
    }),
    ("obligations: an obligation minted", |rs| {
        each(
            rs,
            |r| allowed(r) && is_edit(r),
            |m, i| {
                rebind(&mut m[i], &|g| {
                    g["obligations"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!("mutant-obligation"))
                })
            },
        )
    }),
    (
        "success predicate: replaced by one the traces never reach",
        |rs| {
            each(
                rs,
                |r| allowed(r) && is_edit(r),
                |m, i| {
                    let st = previous_state(m, i);
                    let int_var = st
                        .as_object()
                        .unwrap()
                        .iter()
                        .find(|(_, v)| v.as_str().unwrap().parse::<i64>().is_ok())
                        .map(|(k, _)| k.clone())
                        .unwrap();
                    rebind(&mut m[i], &|g| {
                        g["closing"] = json!([format!("{int_var} >= 8")])
                    });
                },
            )
        },
    ),
    (
        "active frames: a frame that fails on the witnessed prefix",
        |rs| {
            each(
                rs,
                |r| allowed(r) && is_edit(r),
                |m, i| {
                    let st = previous_state(m, i);
                    let (k, v) = st
                        .as_object()
                        .unwrap()
                        .iter()
                        .next()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .unwrap();
                    rebind(&mut m[i], &|g| {
                        g["frames"] = json!([[format!("{k} != {v}")]])
                    });
                },
            )
        },
    ),
    (
        "residual completion: work appended beyond the parent's",
        |rs| {
            each(
                rs,
                |r| allowed(r) && is_edit(r),
                |m, i| {
                    rebind(&mut m[i], &|g| {
                        let last = g["traces"][0]
                            .as_array()
                            .and_then(|t| t.last().cloned())
                            .unwrap_or(json!("hold"));
                        g["completion"] = json!([[last]]);
                    });
                },
            )
        },
    ),
    ("same-root composition: a join's precedence changed", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "join_goals",
            |m, i| {
                let p = &mut m[i]["body"]["request"]["op"]["precedence"];
                *p = if p.as_array().unwrap().is_empty() {
                    json!([["a", "b"]])
                } else {
                    json!([])
                };
            },
        )
    }),
    ("same-root composition: a join source omitted", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "join_goals",
            |m, i| {
                m[i]["body"]["request"]["op"]["sources"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
                m[i]["body"]["request"]["op"]["precedence"] = json!([]);
            },
        )
    }),
    (
        "forbidden predicates: a committed state made forbidden in the contract",
        |rs| {
            let last = rs
                .iter()
                .rev()
                .find(|r| allowed(r) && op(r) == "commit_effect");
            let Some(last) = last else { return Vec::new() };
            let conds: Vec<String> = last["body"]["state"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k} == {}", v.as_str().unwrap()))
                .collect();
            each(
                rs,
                |r| allowed(r) && op(r) == "register_root",
                |m, i| {
                    m[i]["body"]["request"]["op"]["contract"]["forbidden"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!(conds.clone()));
                },
            )
        },
    ),
    ("modeled state: a recorded state value changed", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "commit_effect",
            |m, i| {
                let st = m[i]["body"]["state"].as_object_mut().unwrap();
                let (k, v) = st
                    .iter()
                    .find(|(_, v)| v.as_str().unwrap().parse::<i64>().is_ok())
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().parse::<i64>().unwrap()))
                    .unwrap();
                st.insert(k, json!((v + 1).to_string()));
            },
        )
    }),
    ("committed trace: a recorded trace digest changed", |rs| {
        each(
            rs,
            |r| allowed(r) && op(r) == "commit_effect",
            |m, i| m[i]["body"]["trace"] = json!("0".repeat(64)),
        )
    }),
    ("decisions: a refusal recorded as allow", |rs| {
        each(
            rs,
            |r| r["body"]["verdict"] != "allow",
            |m, i| {
                m[i]["body"]["verdict"] = json!("allow");
                m[i]["body"]["reason"] = Value::Null;
            },
        )
    }),
    ("decisions: an allowed operation recorded as denied", |rs| {
        each(rs, allowed, |m, i| {
            m[i]["body"]["verdict"] = json!("deny");
            m[i]["body"]["reason"] = json!("POLICY_VIOLATION");
        })
    }),
    ("roles: an operator-only operation by the agent", |rs| {
        each(
            rs,
            |r| allowed(r) && (op(r) == "register_root" || op(r) == "change_version"),
            |m, i| {
                m[i]["body"]["request"]["caller"] = json!("agent");
            },
        )
    }),
    ("idempotency: a replay whose body differs", |rs| {
        each(
            rs,
            |r| !r["body"]["replay_of"].is_null(),
            |m, i| {
                let res = reservation_of(&m[i]) + 7;
                m[i]["body"]["request"]["op"]["reservation"] = json!(res);
            },
        )
    }),
    (
        "idempotency: a conflicting key recorded as an exact replay",
        |rs| {
            let mut out = Vec::new();
            for i in 0..rs.len() {
                if rs[i]["body"]["reason"] == "IDEMPOTENCY_CONFLICT" {
                    let orig = (0..i)
                        .rev()
                        .find(|j| !rs[*j]["body"]["replay_of"].is_null())
                        .map(|j| rs[j]["body"]["replay_of"].clone())
                        .unwrap();
                    let mut m = rs.to_vec();
                    m[i]["body"]["verdict"] = json!("allow");
                    m[i]["body"]["reason"] = Value::Null;
                    m[i]["body"]["replay_of"] = orig;
                    out.push(m);
                }
            }
            out
        },
    ),
    (
        "profile limits: an accepted edit with 257 continuations",
        |rs| {
            each(
                rs,
                |r| allowed(r) && is_edit(r),
                |m, i| {
                    rebind(&mut m[i], &|g| {
                        let t = g["traces"][0].clone();
                        g["traces"] = json!(vec![t; 257]);
                    });
                },
            )
        },
    ),
];

#[test]
fn contract_audit_and_mutants() {
    let mut streams = Vec::new();
    let mut domains: BTreeMap<String, (Domain, AuditDomain)> = BTreeMap::new();
    for v in ["uav", "ground"] {
        let path = common::data_dir().join(format!("contract/pairs-{v}.json"));
        let pairs: Vec<Pair> =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let id = pairs[0].contract.domain.clone();
        let file = domain_file(&id);
        let d = Domain::parse(&text(file), file).unwrap();
        domains.insert(
            id.clone(),
            (d.clone(), AuditDomain::from_toml(&text(file)).unwrap()),
        );
        for p in &pairs {
            streams.push(run(&format!("{}/benign", p.id), &d, &p.contract, &p.benign));
            streams.push(run(
                &format!("{}/drifted", p.id),
                &d,
                &p.contract,
                &p.drifted,
            ));
        }
        streams.push(scenario(&d, &pairs[0].contract));
    }

    // Agreement: every honest stream verifies, and the checker's counts match the monitor's.
    let mut verified = 0;
    let mut receipts = 0;
    for s in &streams {
        let ad = &domains[&s.domain].1;
        let rep = audit(ad, &s.receipts)
            .unwrap_or_else(|e| panic!("{}: honest stream rejected: {e}", s.name));
        assert_eq!(rep.receipts, s.receipts.len(), "{}", s.name);
        assert_eq!(rep.commits, s.commits, "{}: commits", s.name);
        receipts += rep.receipts;
        verified += 1;
    }
    println!("\ncontract-audit: {receipts} receipts replayed");
    println!("contract-audit: {verified}/{} matched", streams.len());
    assert_eq!(
        (streams.len(), receipts),
        (98, 1734),
        "the corpus and its receipts, pinned"
    );

    // A hash-only corruption is rejected too, but is not counted as a semantic mutant.
    let mut broken = streams[0].receipts.clone();
    broken[1]["hash"] = json!("f".repeat(64));
    assert!(audit(&domains[&streams[0].domain].1, &broken).is_err());

    let mut total = 0;
    let mut rejected = 0;
    let mut survivors = Vec::new();
    println!("contract-mutants: by family (outer hashes recomputed for every mutant)");
    for (name, f) in FAMILIES {
        let (mut n, mut r) = (0, 0);
        for s in &streams {
            let ad = &domains[&s.domain].1;
            for mut m in f(&s.receipts) {
                rehash(&mut m);
                n += 1;
                match audit(ad, &m) {
                    Err(_) => r += 1,
                    Ok(_) => survivors.push(format!("{name} in {}", s.name)),
                }
            }
        }
        println!("  {name:<72} {r:>5}/{n:<5}");
        assert!(n > 0, "family `{name}` produced no mutant");
        total += n;
        rejected += r;
    }
    for s in survivors.iter().take(10) {
        println!("  SURVIVED {s}");
    }
    println!("contract-mutants: {} families", FAMILIES.len());
    println!("contract-mutants: {rejected}/{total} matched");
    assert_eq!(rejected, total, "{} mutants survived", total - rejected);
    assert_eq!(
        (FAMILIES.len(), total),
        (31, 7720),
        "the mutant corpus, pinned"
    );
}

/// `contract-domain-rules`: the monitor's domain reader and the checker's (written separately
/// from docs/contracts.md) accept the two shipped domains and refuse each malformed variant of
/// one, for its own reason. A reader that lets a variant through fails here; the fuzz target
/// `contract_domain` asserts the same agreement over generated text.
#[test]
fn both_domain_readers_refuse_what_the_rules_refuse() {
    let base = text("catalogs/contract-uav.toml");
    for file in [
        "catalogs/contract-uav.toml",
        "catalogs/contract-ground.toml",
    ] {
        Domain::parse(&text(file), file).unwrap();
        AuditDomain::from_toml(&text(file)).unwrap();
    }
    let swap = |from: &str, to: &str| {
        assert!(base.contains(from), "{from}");
        base.replacen(from, to, 1)
    };
    let many_params: String = (0..17).map(|i| format!("p{i} = [\"x\"], ")).collect();
    let variants: Vec<(&str, String)> = vec![
        (
            "an unknown top-level table",
            format!("{base}\n[extra]\nk = 1\n"),
        ),
        (
            "an unknown key in [domain]",
            swap("version = 1", "version = 1\nowner = \"x\""),
        ),
        (
            "a version that is not a u32",
            swap("version = 1", "version = -1"),
        ),
        ("no version", swap("version = 1\n", "")),
        (
            "a domain id breaking the id rule",
            swap("\"uav-survey\"", "\"uav survey\""),
        ),
        (
            "a variable name breaking the id rule",
            swap("airborne = \"bool\"", "\"air borne\" = \"bool\""),
        ),
        (
            "an unknown type word",
            swap("airborne = \"bool\"", "airborne = \"boolean\""),
        ),
        (
            "an enum value that is not a string",
            swap("\"nofly\"]", "7]"),
        ),
        (
            "an enum value twice",
            swap("\"nofly\"]", "\"nofly\", \"home\"]"),
        ),
        (
            "an enum value breaking the id rule",
            swap("\"nofly\"]", "\"no,fly\"]"),
        ),
        (
            "an empty enum",
            swap("battery = [\"high\", \"medium\", \"low\"]", "battery = []"),
        ),
        (
            "an integer range with min > max",
            swap("{ min = 0, max = 8 }", "{ min = 9, max = 8 }"),
        ),
        (
            "an integer range with a third key",
            swap("{ min = 0, max = 8 }", "{ min = 0, max = 8, step = 1 }"),
        ),
        (
            "an unknown key in an effect",
            swap("[effects.hold]\n", "[effects.hold]\nwhen = [\"x\"]\n"),
        ),
        (
            "a parameter over a non-enum variable",
            swap("params = { to = \"zone\" }", "params = { to = \"photos\" }"),
        ),
        (
            "a parameter list with a number",
            swap(
                "params = { to = \"zone\" }",
                "params = { to = [\"home\", 1] }",
            ),
        ),
        (
            "a parameter list with a repeat",
            swap(
                "params = { to = \"zone\" }",
                "params = { to = [\"home\", \"home\"] }",
            ),
        ),
        (
            "417,605 argument combinations (over 4096)",
            swap(
                "params = { to = \"zone\" }",
                &format!(
                    "params = {{ a = {z}, b = {z}, c = {z}, d = {z}, to = \"zone\" }}",
                    z = "[\"a1\", \"a2\", \"a3\", \"a4\", \"a5\", \"a6\", \"a7\", \"a8\", \"a9\", \"a10\", \"a11\", \"a12\", \"a13\", \"a14\", \"a15\", \"a16\", \"a17\"]"
                ),
            ),
        ),
        (
            "seventeen parameters",
            swap(
                "params = { to = \"zone\" }",
                &format!("params = {{ {many_params}to = \"zone\" }}"),
            ),
        ),
        (
            "a precondition over an unknown variable",
            swap(
                "pre = [\"airborne == true\"]\npost = [\"zone = $to\"]",
                "pre = [\"flying == true\"]\npost = [\"zone = $to\"]",
            ),
        ),
        (
            "a precondition with four words",
            swap("\"airborne == false\"", "\"airborne == false now\""),
        ),
        (
            "an order comparison on a bool",
            swap("\"airborne == false\"", "\"airborne < true\""),
        ),
        (
            "a precondition constant out of range",
            swap(
                "pre = [\"airborne == true\", \"zone == $at\"]",
                "pre = [\"photos <= 9\"]",
            ),
        ),
        (
            "an unknown parameter",
            swap("\"zone == $at\"", "\"zone == $where\""),
        ),
        (
            "a parameter compared with a bool",
            swap("\"zone == $at\"", "\"airborne == $at\""),
        ),
        (
            "an assignment to an unknown variable",
            swap("post = [\"airborne = true\"]", "post = [\"flying = true\"]"),
        ),
        (
            "an assignment of a value outside the enum",
            swap("post = [\"zone = home\"]", "post = [\"zone = garage\"]"),
        ),
        (
            "arithmetic on an enum",
            swap("post = [\"photos += 1\"]", "post = [\"zone += 1\"]"),
        ),
        (
            "a step that is not an integer",
            swap("post = [\"photos += 1\"]", "post = [\"photos += one\"]"),
        ),
        (
            "a step whose negation overflows",
            swap(
                "post = [\"photos += 1\"]",
                "post = [\"photos -= -9223372036854775808\"]",
            ),
        ),
        (
            "an unknown assignment operator",
            swap("post = [\"photos += 1\"]", "post = [\"photos *= 2\"]"),
        ),
        (
            "a precondition that is not a string",
            swap(
                "pre = [\"airborne == true\"]\npost = [\"zone = $to\"]",
                "pre = [1]\npost = [\"zone = $to\"]",
            ),
        ),
        (
            "an effect name breaking the id rule",
            swap("[effects.hold]", "[effects.\"ho ld\"]"),
        ),
    ];
    let mut refused = 0;
    for (what, t) in &variants {
        let m = Domain::parse(t, "variant.toml");
        let c = AuditDomain::from_toml(t);
        assert!(m.is_err(), "the monitor accepts {what}");
        assert!(c.is_err(), "the checker accepts {what}");
        refused += 1;
    }
    println!(
        "contract-domain-rules: {refused}/{} matched (refused by both readers)",
        variants.len()
    );
    assert_eq!(refused, 33);
}
