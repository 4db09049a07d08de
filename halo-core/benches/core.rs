//! Criterion benchmarks of the protocol core.
//!
//! ```text
//! cargo bench -p halo-gateway --bench core
//! ```
//!
//! - `admission/V{n}_E{m}`: graph validation (references, phases, cycles) and admission
//!   (LocalOK over each footprint, the retained set `A*_t`, witnesses, bindings and tokens) of a
//!   response whose components were already parsed and digested.
//! - `admission_json/V{n}_E{m}`: the same, starting from the JSON bytes.
//! - `gate_decision/D{d}_F{f}`: `DispatchOK` for an action with `d` prerequisites and a footprint
//!   of `f` sources, evaluated before the token is spent (the paper's pre-consumption gate).
//! - `gate/D{d}_F{f}`: one whole final-gate call: the decision, token consumption, the (no-op)
//!   adapter call, the phase change, dependents and the receipt record.
//! - `readmission/candidate`: one fresh candidate, from its JSON bytes to the new binding.
//!
//! Results and the machine they were taken on are recorded in `docs/benchmarks.md`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "benchmark fixtures"
)]
#![allow(missing_docs, reason = "criterion macros generate undocumented items")]

#[path = "../tests/core/common/contract_scale.rs"]
mod contract_scale;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use halo_core::engine::{Config, Gateway};
use halo_core::envelope::parse_envelope;
use halo_core::gate::{Adapter, AdapterError, EnqueueRequest};
use halo_core::graph::{Graph, ResponseIds, ValidatedResponse, build_component};
use halo_core::statefile::ProviderUpdate;
use halo_core::{Catalog, Nanos};
use std::hint::black_box;

/// A catalog with 32 epoch sources, a non-action `n` over `s0`, and actions `fK` whose footprint
/// is the first K sources.
fn bench_catalog() -> Catalog {
    let mut t = String::from("[catalog]\nid = \"bench\"\nversion = 1\n\n[sources]\n");
    for i in 0..32 {
        t.push_str(&format!("s{i} = {{ value = \"none\" }}\n"));
    }
    t.push_str(
        "\n[types.n]\nclass = \"non_action\"\npayload = \"notice\"\noutput = \"log\"\nfootprint = { s0 = 60000 }\ntemporal = \"point\"\nprerequisites = [{ type = \"n\", phases = [\"emitted\"] }]\n",
    );
    for k in [1, 2, 4, 8, 16, 32] {
        let fp: Vec<String> = (0..k).map(|i| format!("s{i} = 60000")).collect();
        t.push_str(&format!(
            "\n[types.f{k}]\nclass = \"action\"\npayload = \"hold\"\nadapter = \"null\"\nfootprint = {{ {} }}\ntemporal = \"point\"\nprerequisites = [{{ type = \"n\", phases = [\"emitted\"] }}]\n",
            fp.join(", ")
        ));
    }
    Catalog::parse(&t, "bench").unwrap()
}

fn fresh_gateway(cat: &Catalog) -> Gateway {
    let mut gw = Gateway::new(cat.clone(), Config::default());
    for i in 0..32 {
        let u = ProviderUpdate {
            source: format!("s{i}"),
            value: serde_json::Value::Null,
            epoch: 1,
            provenance: "p".parse().unwrap(),
            generated_at_ms: 1_000,
        };
        gw.handle_source_update(Nanos::from_ms(1_000), u.typed(cat).unwrap())
            .unwrap();
    }
    gw
}

/// `n` notices; node `i` requires up to 16 earlier nodes, `e` edges in all, spread evenly.
fn graph_response(n: usize, e: usize) -> String {
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut left = e;
    'outer: loop {
        let before = left;
        for (i, ps) in parents.iter_mut().enumerate() {
            if left == 0 {
                break 'outer;
            }
            if ps.len() < i.min(16) {
                let cand = (0..i).rev().find(|p| !ps.contains(p));
                if let Some(p) = cand {
                    ps.push(p);
                    left -= 1;
                }
            }
        }
        if left == before {
            break;
        }
    }
    assert_eq!(left, 0, "cannot place {e} edges on {n} nodes");
    let comps: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let reqs: Vec<serde_json::Value> = parents[i]
                .iter()
                .map(|p| serde_json::json!({"id": format!("v{p}"), "phase": "emitted"}))
                .collect();
            serde_json::json!({"id": format!("v{i}"), "type": "n", "payload": {"text": format!("node {i}")},
                               "requires": reqs, "support": {"s0": {"epoch": 1}}})
        })
        .collect();
    serde_json::json!({"response_id": "b", "agent_id": "a", "generation": 1,
                       "catalog": {"id": "bench", "version": 1}, "components": comps})
    .to_string()
}

fn admission(c: &mut Criterion) {
    let cat = bench_catalog();
    let mut g = c.benchmark_group("admission");
    let shapes: Vec<(usize, usize)> = vec![
        (4, 3),
        (8, 12),
        (16, 40),
        (32, 50),
        (32, 100),
        (32, 200),
        (64, 200),
    ];
    for (n, e) in shapes {
        let text = graph_response(n, e);
        let raw = parse_envelope(text.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let ids = ResponseIds::new(&raw.components).unwrap();
        let comps: Vec<_> = raw
            .components
            .iter()
            .map(|rc| build_component(&cat, rc, &ids, &mut buf).unwrap())
            .collect();
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("V{n}_E{e}")),
            &comps,
            |b, comps| {
                b.iter_batched(
                    || (fresh_gateway(&cat), comps.clone()),
                    |(mut gw, comps)| {
                        let graph = Graph::build(gw.catalog(), comps).unwrap();
                        let v = ValidatedResponse {
                            response_id: "b".parse().unwrap(),
                            agent_id: "a".parse().unwrap(),
                            generation: 1,
                            graph,
                        };
                        let rep = gw.handle_validated(Nanos::from_ms(1_100), v).unwrap();
                        black_box(rep);
                        gw
                    },
                    BatchSize::SmallInput,
                );
            },
        );
    }
    g.finish();

    let mut g = c.benchmark_group("admission_json");
    for (n, e) in [(4, 3), (32, 200)] {
        let text = graph_response(n, e);
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("V{n}_E{e}")),
            &text,
            |b, text| {
                b.iter_batched(
                    || fresh_gateway(&cat),
                    |mut gw| {
                        black_box(
                            gw.handle_response(Nanos::from_ms(1_100), text.as_bytes())
                                .unwrap(),
                        );
                        gw
                    },
                    BatchSize::SmallInput,
                );
            },
        );
    }
    g.finish();
}

struct NullAdapter;
impl Adapter for NullAdapter {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        black_box(req);
        Ok(())
    }
}

fn gate_response(d: usize, f: usize) -> String {
    let mut comps: Vec<serde_json::Value> = (0..d)
        .map(|i| serde_json::json!({"id": format!("p{i}"), "type": "n", "payload": {"text": "p"}}))
        .collect();
    let reqs: Vec<serde_json::Value> = (0..d)
        .map(|i| serde_json::json!({"id": format!("p{i}"), "phase": "emitted"}))
        .collect();
    comps.push(serde_json::json!({"id": "act", "type": format!("f{f}"), "payload": {"duration_s": 2.0}, "requires": reqs}));
    serde_json::json!({"response_id": "g", "agent_id": "a", "generation": 1,
                       "catalog": {"id": "bench", "version": 1}, "components": comps})
    .to_string()
}

fn gate(c: &mut Criterion) {
    let cat = bench_catalog();
    // The decision: DispatchOK over prerequisites and footprint, before the token is spent.
    let mut g = c.benchmark_group("gate_decision");
    for d in [0usize, 1, 2, 4, 8, 16] {
        for f in [1usize, 2, 4, 8, 16, 32] {
            let text = gate_response(d, f);
            let mut gw = fresh_gateway(&cat);
            gw.handle_response(Nanos::from_ms(1_100), text.as_bytes())
                .unwrap();
            while gw.poll_event().is_some() {}
            let tok = gw.poll_dispatch().unwrap();
            let now = Nanos::from_ms(1_200);
            assert!(gw.dispatch_ok(now, &tok).is_ok());
            g.bench_function(BenchmarkId::from_parameter(format!("D{d}_F{f}")), |b| {
                b.iter(|| black_box(gw.dispatch_ok(black_box(now), black_box(&tok))));
            });
        }
    }
    g.finish();

    // The whole call: decision, token consumption, adapter call, phase, dependents, receipt.
    let mut g = c.benchmark_group("gate");
    for (d, f) in [(0usize, 1usize), (4, 8), (16, 32)] {
        let text = gate_response(d, f);
        g.bench_function(BenchmarkId::from_parameter(format!("D{d}_F{f}")), |b| {
            b.iter_batched(
                || {
                    let mut gw = fresh_gateway(&cat);
                    gw.handle_response(Nanos::from_ms(1_100), text.as_bytes())
                        .unwrap();
                    while gw.poll_event().is_some() {}
                    let tok = gw.poll_dispatch().unwrap();
                    (gw, tok)
                },
                |(mut gw, tok)| {
                    let o = gw.final_gate(Nanos::from_ms(1_200), tok, &mut NullAdapter);
                    debug_assert!(o.is_dispatched());
                    black_box(o);
                    gw
                },
                BatchSize::SmallInput,
            );
        });
    }
    g.finish();
}

fn readmission(c: &mut Criterion) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../catalogs/uav-px4.toml");
    let cat = Catalog::parse(&std::fs::read_to_string(path).unwrap(), "uav-px4.toml").unwrap();
    let route = serde_json::json!({"frame": "local_ned", "north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 8.0});
    let support = serde_json::json!({"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}});
    let e3 = serde_json::json!({"id": "e3", "type": "route_action", "payload": route, "support": support, "certificate": "cert-9f2c"});
    let resp = serde_json::json!({"response_id": "r1", "agent_id": "planner-1", "generation": 12,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts"}},
            e3.clone(),
            {"id": "e4", "type": "status", "payload": {"text": "En route"}, "requires": [{"id": "e3", "phase": "dispatched"}]}]})
    .to_string();
    let digest = {
        let raw = parse_envelope(resp.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let ids = ResponseIds::new(&raw.components).unwrap();
        build_component(&cat, &raw.components[1], &ids, &mut buf)
            .unwrap()
            .digest
    };
    let put = |gw: &mut Gateway,
               at: u64,
               name: &str,
               value: serde_json::Value,
               epoch: u64,
               prov: &str| {
        let u = ProviderUpdate {
            source: name.into(),
            value,
            epoch,
            provenance: prov.parse().unwrap(),
            generated_at_ms: at,
        };
        gw.handle_source_update(Nanos::from_ms(at), u.typed(&cat).unwrap())
            .unwrap();
    };
    let healthy = |gw: &mut Gateway, at: u64| {
        use serde_json::json;
        put(gw, at, "traffic", json!([]), 41, "utm");
        put(gw, at, "map", json!(null), 7, "map");
        put(
            gw,
            at,
            "bounds",
            json!({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.0}),
            3,
            "corridor-12",
        );
        put(gw, at, "vehicle", json!("airborne"), 1, "px4");
        put(
            gw,
            at,
            "home",
            json!({"north_m": 0.0, "east_m": 0.0, "down_m": 0.0}),
            1,
            "px4",
        );
        put(
            gw,
            at,
            "origin",
            json!({"lat_deg": 47.397742, "lon_deg": 8.545594, "alt_m": 488.0, "home_alt_m": 488.0}),
            1,
            "px4",
        );
        put(gw, at, "battery", json!(80.0), 1, "px4");
        for f in ["link", "authority", "airspace", "preflight"] {
            put(gw, at, f, json!(true), 1, "op");
        }
        put(gw, at, "wind", json!(3.0), 1, "wx");
    };
    let candidate = serde_json::json!({"obligation": 1, "response_id": "r1", "agent_id": "planner-1", "generation": 13,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [e3]})
    .to_string();
    c.bench_function("readmission/candidate", |b| {
        b.iter_batched(
            || {
                let mut gw = Gateway::new(cat.clone(), Config::default());
                healthy(&mut gw, 1_000);
                gw.handle_certificate(
                    Nanos::from_ms(1_000),
                    halo_core::Certificate {
                        id: "cert-9f2c".parse().unwrap(),
                        covers: digest,
                        valid_until: Nanos::from_ms(60_000),
                        issuer: "tube".parse().unwrap(),
                    },
                )
                .unwrap();
                // Map epoch drifts: e3 is withheld with obligation 1; then the map is back.
                put(&mut gw, 1_050, "map", serde_json::Value::Null, 8, "map");
                gw.handle_response(Nanos::from_ms(1_100), resp.as_bytes())
                    .unwrap();
                put(&mut gw, 1_150, "map", serde_json::Value::Null, 7, "map");
                while gw.poll_event().is_some() {}
                gw
            },
            |mut gw| {
                black_box(
                    gw.handle_candidate(Nanos::from_ms(1_200), candidate.as_bytes())
                        .unwrap(),
                );
                gw
            },
            BatchSize::SmallInput,
        );
    });
}

/// The mission-contract targets: transition authorization on the baseline fixture, effect
/// authorization, commit, and the T-256 / F-256 cells. Each call runs on a fresh clone of the
/// prepared monitor, cloned just before each timed call (untimed), as the scale study does.
fn contract(c: &mut Criterion) {
    let mut g = c.benchmark_group("contract");
    let cells: Vec<(&str, contract_scale::Prepared)> = vec![
        (
            "transition_baseline",
            contract_scale::transition(&contract_scale::BASE),
        ),
        (
            "effect_authorization",
            contract_scale::effect_authorization(),
        ),
        ("commit", contract_scale::commit()),
        (
            "transition_T256",
            contract_scale::transition(&contract_scale::Shape {
                t: 256,
                ..contract_scale::BASE
            }),
        ),
        (
            "transition_F256",
            contract_scale::transition(&contract_scale::Shape {
                f: 256,
                ..contract_scale::BASE
            }),
        ),
    ];
    for (name, p) in &cells {
        g.bench_function(*name, |b| {
            b.iter_batched(
                || (p.monitor.clone(), p.request.clone()),
                |(mut m, r)| {
                    // Returned, so the monitor is dropped after timing, not inside it.
                    let d = m.handle(r);
                    (m, black_box(d))
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, admission, gate, readmission, contract);
criterion_main!(benches);
