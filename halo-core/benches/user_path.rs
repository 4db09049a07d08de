//! What a user's code pays: criterion benchmarks of whole public calls on realistic inputs — the
//! shipped `uav-px4` catalog, the example state (`docs/examples/state.json`), and a 32-component
//! response shaped like an agent's (6 route actions with certificates, claims and the catalog's
//! 12 rules; 2 holds; 4 notices; 4 reports; 16 statuses that declare 200 prerequisites between
//! them).
//!
//! ```text
//! cargo bench -p halo-core --bench user_path
//! ```
//!
//! - `user/admission_from_bytes`: `Gateway::handle_response` on the JSON bytes (parse, digests,
//!   validation, LocalOK, closure, bindings, tokens, events), excluding the receipts' sealing;
//! - `user/admission_pre_parsed`: `Gateway::handle_validated` on the same response already
//!   parsed, digested and validated (untimed);
//! - `user/receipts_of_one_admission`: sealing (`poll_receipt` until empty) the receipts that
//!   admission queued;
//! - `user/final_gate`: one whole `final_gate` call on a fresh token (timers brought up to date,
//!   the decision, the token spent, a no-op adapter, phases, dependents, the receipt record);
//! - `user/seal_gate_receipt`: sealing the receipt that gate queued;
//! - `user/readmission`: a fresh candidate from its JSON bytes to its new binding;
//! - `user/update_one_footprint` and `user/update_many_footprints`: a provider update that
//!   invalidates one footprint (`z_range`, the reports) or all six route actions (`traffic`);
//! - `user/contract_transition` and `user/contract_transition_with_receipt`: a mission-contract
//!   transition (the scale study's baseline proposeGoal), without and with its receipt sealed;
//! - `user/refuse_128_components` and `user/refuse_512_components`: `Gateway::handle_response`
//!   on a response over the 64-component limit (45 KB and 185 KB), the refusal's receipt queued;
//! - `live/update_{no_change,value_change,epoch_change}_{1,4,16,32,64}`: a `traffic` update with
//!   1 to 64 live responses (see [`live`]);
//! - `part/parse_envelope`, `part/parse_envelope_serde_json`, `part/validate`: labelled
//!   sub-measurements of admission from bytes — stage one as shipped (the fast reader), stage
//!   one as serde_json alone reads it, and stage two (ids, payloads, digests, the graph);
//!   `part/admission_without_prerequisites`, admission from bytes of the same response with its
//!   200 prerequisites left out (what they cost, and what the components' own work costs).
//!
//! Each iteration starts from a prepared gateway (built outside the timing, `iter_batched`), so
//! a number is the call alone. `HALO_BENCH_CALLS=N` times N single calls of each instead and
//! prints percentiles (see `bench` below; `scripts/bench_ab.sh` compares two builds so);
//! `HALO_BENCH_ONLY=TEXT` runs only the benchmarks whose `GROUP/NAME` contains TEXT;
//! `HALO_BENCH_WRITE_RESPONSE=FILE` writes the 32-component response's bytes to FILE (for the
//! floor measurement, `scripts/bench_floor.sh`).
//! docs/benchmarks.md records the results and the machine.
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

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, criterion_group, criterion_main};
use halo_core::engine::{Config, Gateway};
use halo_core::envelope::parse_envelope;
use halo_core::gate::{Adapter, AdapterError, EnqueueRequest};
use halo_core::graph::validate;
use halo_core::statefile::{ProviderUpdate, parse_state};
use halo_core::{Catalog, Certificate, DispatchToken, Id, Nanos, SourceUpdate};
use serde_json::{Value, json};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn catalog() -> Catalog {
    let t = std::fs::read_to_string(root().join("catalogs/uav-px4.toml")).unwrap();
    Catalog::parse(&t, "uav-px4.toml").unwrap()
}

/// The 32-component response; `rid` names it.
fn response(rid: &str) -> String {
    let comps = block("");
    json!({"response_id": rid, "agent_id": "planner-1", "generation": 7,
           "catalog": {"id": "uav-px4", "version": 6}, "components": comps})
    .to_string()
}

/// A response of `blocks` copies of the 32-component shape, ids suffixed per copy (`a0`,
/// `a0-1`, …): 128 and 512 components for the refusal benchmarks.
fn oversized(rid: &str, blocks: usize) -> String {
    let comps: Vec<Value> = (0..blocks)
        .flat_map(|b| {
            block(&if b == 0 {
                String::new()
            } else {
                format!("-{b}")
            })
        })
        .collect();
    json!({"response_id": rid, "agent_id": "planner-1", "generation": 7,
           "catalog": {"id": "uav-px4", "version": 6}, "components": comps})
    .to_string()
}

/// The 32 components of the agent-shaped response, each id ending in `sfx`.
fn block(sfx: &str) -> Vec<Value> {
    let mut comps: Vec<Value> = Vec::new();
    let claims = json!({"map": {"epoch": 7}, "traffic": {"epoch": 41},
                        "bounds": {"epoch": 3, "provenance": "corridor-12"}});
    for k in 0..6 {
        comps.push(json!({"id": format!("a{k}{sfx}"), "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": 10.0 + k as f64, "east_m": 3.5 + k as f64,
                        "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 6.0},
            "support": claims, "certificate": format!("cert-{k}")}));
    }
    for k in 0..2 {
        comps.push(
            json!({"id": format!("h{k}{sfx}"), "type": "hold", "payload": {"duration_s": 4.0}}),
        );
    }
    for k in 0..4 {
        comps.push(json!({"id": format!("n{k}{sfx}"), "type": "notice",
                          "payload": {"text": format!("Survey leg {k} starts")}}));
        comps.push(json!({"id": format!("r{k}{sfx}"), "type": "report",
                          "payload": {"sensor": "z_range", "value": 10.2, "unit": "m"}}));
    }
    // 16 statuses over the 16 parents above: 200 prerequisites (8 statuses × 13, 8 × 12).
    let parents: Vec<(String, &str)> = (0..6)
        .map(|k| (format!("a{k}{sfx}"), "dispatched"))
        .chain((0..2).map(|k| (format!("h{k}{sfx}"), "dispatched")))
        .chain((0..4).map(|k| (format!("n{k}{sfx}"), "emitted")))
        .chain((0..4).map(|k| (format!("r{k}{sfx}"), "emitted")))
        .collect();
    let mut edges = 0;
    for s in 0..16 {
        let want = if s < 8 { 13 } else { 12 };
        let req: Vec<Value> = (0..want)
            .map(|j| {
                let (id, phase) = &parents[(s + j) % parents.len()];
                json!({"id": id, "phase": phase})
            })
            .collect();
        edges += req.len();
        comps.push(json!({"id": format!("s{s}{sfx}"), "type": "status",
                          "payload": {"text": format!("status {s}")}, "requires": req}));
    }
    assert_eq!((comps.len(), edges), (32, 200));
    comps
}

struct NullAdapter;

impl Adapter for NullAdapter {
    fn try_enqueue(&mut self, _req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        Ok(())
    }
}

struct World {
    cat: Catalog,
    now: Nanos,
    updates: Vec<SourceUpdate>,
    certs: Vec<Certificate>,
}

impl World {
    /// A gateway holding the example state and the certificates, nothing admitted yet.
    fn fresh(&self) -> Gateway {
        let mut gw = Gateway::new(self.cat.clone(), Config::default());
        for u in &self.updates {
            gw.handle_source_update(self.now, u.clone()).unwrap();
        }
        for c in &self.certs {
            gw.handle_certificate(self.now, c.clone()).unwrap();
        }
        while gw.poll_receipt().is_some() {}
        while gw.poll_event().is_some() {}
        gw
    }
}

/// The example state with a certificate for each route action of `text`.
fn world(text: &str) -> World {
    let cat = catalog();
    let st = parse_state(
        &cat,
        &std::fs::read(root().join("docs/examples/state.json")).unwrap(),
    )
    .unwrap();
    let raw = parse_envelope(text.as_bytes()).unwrap();
    let v = validate(&cat, &raw).unwrap();
    let certs = (0..6)
        .map(|k| {
            let i = v.graph.index_of(&format!("a{k}").parse().unwrap()).unwrap();
            Certificate {
                id: format!("cert-{k}").parse().unwrap(),
                covers: v.graph.component(i).unwrap().digest,
                valid_until: Nanos::from_ms(60_000),
                issuer: "tube-verifier".parse().unwrap(),
            }
        })
        .collect();
    World {
        cat,
        now: st.now,
        updates: st.updates,
        certs,
    }
}

/// A gateway with the response admitted, its events and receipts drained, and its tokens.
fn admitted(w: &World, text: &str) -> (Gateway, Vec<DispatchToken>) {
    let mut gw = w.fresh();
    gw.handle_response(w.now, text.as_bytes()).unwrap();
    while gw.poll_receipt().is_some() {}
    while gw.poll_event().is_some() {}
    let toks = std::iter::from_fn(|| gw.poll_dispatch()).collect();
    (gw, toks)
}

/// Calls per benchmark in per-call mode (`HALO_BENCH_CALLS`), or `None` for criterion.
fn calls_mode() -> Option<usize> {
    std::env::var("HALO_BENCH_CALLS").ok()?.parse().ok()
}

/// One benchmark of a whole call: `routine` on a fresh input from `setup` (untimed) each time.
///
/// Under criterion (the default) it is `iter_batched` per iteration. With `HALO_BENCH_CALLS=N`
/// it times N single calls instead and prints their 10th percentile and median
/// (`calls GROUP/NAME P10 MEDIAN µs`): a burst of load on a shared VM then moves a few calls
/// rather than whole samples, so two builds compare within a few percent
/// (`scripts/bench_ab.sh`). `HALO_BENCH_ONLY=TEXT` runs only the benchmarks whose
/// `GROUP/NAME` contains TEXT.
fn bench<S, O>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    name: &str,
    mut setup: impl FnMut() -> S,
    mut routine: impl FnMut(S) -> O,
) {
    if std::env::var("HALO_BENCH_ONLY").is_ok_and(|only| !format!("{group}/{name}").contains(&only))
    {
        return;
    }
    let Some(n) = calls_mode() else {
        g.bench_function(name, |b| {
            b.iter_batched(&mut setup, &mut routine, BatchSize::PerIteration)
        });
        return;
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n.max(10) {
        let input = setup();
        let t = std::time::Instant::now();
        let out = routine(black_box(input));
        times.push(t.elapsed().as_secs_f64() * 1e6);
        drop(black_box(out));
    }
    times.sort_by(f64::total_cmp);
    println!(
        "calls {group}/{name} {:.3} {:.3} µs",
        times[times.len() / 10],
        times[times.len() / 2]
    );
}

/// One benchmark of a call repeated on one state, for calls that leave the state as they found
/// it (a provider update that changes nothing, or one that alternates between two values):
/// `input(k)` (untimed) then `routine(state, input)` (timed) for the k-th call, then
/// `tidy(state)` (untimed: receipts and events drained as the shell would). Modes as in
/// [`bench`].
fn bench_repeated<S, I, O>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    name: &str,
    state: &mut S,
    mut input: impl FnMut(usize) -> I,
    mut routine: impl FnMut(&mut S, I) -> O,
    mut tidy: impl FnMut(&mut S),
) {
    if std::env::var("HALO_BENCH_ONLY").is_ok_and(|only| !format!("{group}/{name}").contains(&only))
    {
        return;
    }
    let mut one = |k: usize| {
        let i = input(k);
        let t = std::time::Instant::now();
        let out = routine(state, black_box(i));
        let took = t.elapsed();
        drop(black_box(out));
        tidy(state);
        took
    };
    let Some(n) = calls_mode() else {
        let mut k = 0;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        k += 1;
                        one(k)
                    })
                    .sum()
            })
        });
        return;
    };
    let mut times: Vec<f64> = (0..n.max(10)).map(|k| one(k).as_secs_f64() * 1e6).collect();
    times.sort_by(f64::total_cmp);
    println!(
        "calls {group}/{name} {:.3} {:.3} µs",
        times[times.len() / 10],
        times[times.len() / 2]
    );
}

/// Provider updates as the flight gets busy: 1, 4, 16, 32 and 64 live responses (each the
/// 32-component response under its own id, its six route actions bound and queued), and a
/// `traffic` update that changes nothing but its time, one that moves the traffic (same epoch:
/// every route action's separation rule re-checked, nothing withheld), and one that changes its
/// epoch (every route action withheld with an obligation, its dependents with it). The first
/// two repeat on one gateway (the state is as before after each); the third starts from a
/// freshly admitted gateway each call. Receipts are queued, not sealed, as in `user/`.
fn live(c: &mut Criterion) {
    let text = response("resp-0");
    let w = world(&text);
    let traffic = |north: f64, epoch: u64| {
        ProviderUpdate {
            source: "traffic".into(),
            value: json!([{"north_m": north, "east_m": 400.0, "down_m": -50.0}]),
            epoch,
            provenance: "utm-feed-a".parse().unwrap(),
            generated_at_ms: 10_050,
        }
        .typed(&w.cat)
        .unwrap()
    };
    let at = Nanos::from_ms(10_050);
    let busy = |n: usize| {
        let mut gw = w.fresh();
        for k in 0..n {
            gw.handle_response(w.now, response(&format!("resp-{k}")).as_bytes())
                .unwrap();
        }
        while gw.poll_receipt().is_some() {}
        while gw.poll_event().is_some() {}
        while gw.poll_dispatch().is_some() {}
        gw
    };
    let drain = |gw: &mut Gateway| {
        while gw.poll_receipt().is_some() {}
        while gw.poll_event().is_some() {}
        while gw.poll_dispatch().is_some() {}
    };
    let mut g = c.benchmark_group("live");
    for n in [1usize, 4, 16, 32, 64] {
        let same = traffic(400.0, 41);
        let mut gw = busy(n);
        bench_repeated(
            &mut g,
            "live",
            &format!("update_no_change_{n}"),
            &mut gw,
            |_| same.clone(),
            |gw, u| gw.handle_source_update(at, u).is_ok(),
            drain,
        );
        let moved = [traffic(401.0, 41), traffic(400.0, 41)];
        bench_repeated(
            &mut g,
            "live",
            &format!("update_value_change_{n}"),
            &mut gw,
            |k| moved[k % 2].clone(),
            |gw, u| gw.handle_source_update(at, u).is_ok(),
            drain,
        );
        drop(gw);
        let epoch = traffic(400.0, 42);
        bench(
            &mut g,
            "live",
            &format!("update_epoch_change_{n}"),
            || (busy(n), epoch.clone()),
            |(mut gw, u)| {
                let r = gw.handle_source_update(at, u);
                (gw, black_box(r.is_ok()))
            },
        );
    }
    g.finish();
}

fn user_path(c: &mut Criterion) {
    let text = response("resp-bench");
    // For the floor measurement (scripts/bench_floor.sh): the same bytes, written out.
    if let Ok(path) = std::env::var("HALO_BENCH_WRITE_RESPONSE") {
        std::fs::write(&path, &text).unwrap();
    }
    eprintln!("the 32-component response is {} bytes of JSON", text.len());
    let w = world(&text);
    let mut g = c.benchmark_group("user");

    bench(
        &mut g,
        "user",
        "admission_from_bytes",
        || w.fresh(),
        |mut gw| {
            let r = gw.handle_response(w.now, black_box(text.as_bytes()));
            (gw, black_box(r.is_ok()))
        },
    );

    // The same admission after parsing, digests and graph validation (done untimed): what a
    // caller holding a `ValidatedResponse` pays.
    let validated = {
        let raw = parse_envelope(text.as_bytes()).unwrap();
        validate(&w.cat, &raw).unwrap()
    };
    bench(
        &mut g,
        "user",
        "admission_pre_parsed",
        || (w.fresh(), validated.clone()),
        |(mut gw, v)| {
            let r = gw.handle_validated(w.now, v);
            (gw, black_box(r.is_ok()))
        },
    );

    // Refusing a response over the component limit (64): 128 and 512 components, each a copy of
    // the 32-component shape (45 KB and 185 KB), the refusal's receipt queued.
    for blocks in [4usize, 16] {
        let big = oversized("resp-big", blocks);
        if std::env::var("HALO_BENCH_CALLS").is_err() {
            eprintln!("{} components are {} bytes of JSON", blocks * 32, big.len());
        }
        bench(
            &mut g,
            "user",
            &format!("refuse_{}_components", blocks * 32),
            || w.fresh(),
            |mut gw| {
                let r = gw.handle_response(w.now, black_box(big.as_bytes()));
                assert!(r.is_err());
                (gw, black_box(r.is_err()))
            },
        );
    }

    {
        let mut gw = w.fresh();
        gw.handle_response(w.now, text.as_bytes()).unwrap();
        let rs: Vec<_> = std::iter::from_fn(|| gw.poll_receipt()).collect();
        let bytes: usize = rs.iter().map(|r| r.body.as_str().len()).sum();
        eprintln!(
            "one admission of the 32-component response queues {} receipt(s), {bytes} bytes of canonical body",
            rs.len()
        );
    }
    bench(
        &mut g,
        "user",
        "receipts_of_one_admission",
        || {
            let mut gw = w.fresh();
            gw.handle_response(w.now, text.as_bytes()).unwrap();
            gw
        },
        |mut gw| {
            let mut n = 0;
            while gw.poll_receipt().is_some() {
                n += 1;
            }
            (gw, black_box(n))
        },
    );

    bench(
        &mut g,
        "user",
        "final_gate",
        || {
            let (gw, mut toks) = admitted(&w, &text);
            let t = toks.pop().unwrap();
            (gw, t)
        },
        |(mut gw, tok)| {
            let o = gw.final_gate(w.now, tok, &mut NullAdapter);
            (gw, black_box(o))
        },
    );

    {
        let (mut gw, mut toks) = admitted(&w, &text);
        let _ = gw.final_gate(w.now, toks.pop().unwrap(), &mut NullAdapter);
        let rs: Vec<_> = std::iter::from_fn(|| gw.poll_receipt()).collect();
        eprintln!(
            "one final gate queues {} receipt(s); the first has a {}-byte body",
            rs.len(),
            rs[0].body.as_str().len()
        );
    }
    bench(
        &mut g,
        "user",
        "seal_gate_receipt",
        || {
            let (mut gw, mut toks) = admitted(&w, &text);
            let t = toks.pop().unwrap();
            let _ = gw.final_gate(w.now, t, &mut NullAdapter);
            gw
        },
        |mut gw| {
            let r = gw.poll_receipt();
            (gw, black_box(r))
        },
    );

    // Readmission: traffic's epoch moves, every route action is withheld with an obligation; a
    // fresh candidate for `a0` against the new epoch.
    let drifted = || {
        let (mut gw, _) = admitted(&w, &text);
        let u = ProviderUpdate {
            source: "traffic".into(),
            value: json!([{"north_m": 400.0, "east_m": 400.0, "down_m": -50.0}]),
            epoch: 42,
            provenance: "utm-feed-a".parse().unwrap(),
            generated_at_ms: 10_050,
        };
        gw.handle_source_update(Nanos::from_ms(10_050), u.typed(&w.cat).unwrap())
            .unwrap();
        while gw.poll_receipt().is_some() {}
        while gw.poll_event().is_some() {}
        gw
    };
    let oid = drifted()
        .obligations()
        // By its JSON (`component` is the blocked component's id), which reads the same
        // whatever type holds it, so `scripts/bench_ab.sh` can build this file at older revisions.
        .find(|o| serde_json::to_value(o).unwrap()["component"] == "a0")
        .unwrap()
        .id
        .0;
    let mut a0: Value = serde_json::from_str::<Value>(&text).unwrap()["components"][0].clone();
    a0["support"]["traffic"]["epoch"] = json!(42);
    a0["certificate"] = json!("cert-fresh");
    let cand = json!({"obligation": oid, "response_id": "resp-bench", "agent_id": "planner-1",
                      "generation": 8, "catalog": {"id": "uav-px4", "version": 6},
                      "components": [a0.clone()]})
    .to_string();
    let cand_env = json!({"response_id": "x", "agent_id": "planner-1", "generation": 1,
                          "catalog": {"id": "uav-px4", "version": 6}, "components": [a0]})
    .to_string();
    let covers = {
        let raw = parse_envelope(cand_env.as_bytes()).unwrap();
        let v = validate(&w.cat, &raw).unwrap();
        v.graph.component(0).unwrap().digest
    };
    let ready = || {
        let mut gw = drifted();
        gw.handle_certificate(
            Nanos::from_ms(10_060),
            Certificate {
                id: "cert-fresh".parse::<Id>().unwrap(),
                covers,
                valid_until: Nanos::from_ms(60_000),
                issuer: "tube-verifier".parse().unwrap(),
            },
        )
        .unwrap();
        while gw.poll_receipt().is_some() {}
        gw
    };
    bench(&mut g, "user", "readmission", ready, |mut gw| {
        let r = gw.handle_candidate(Nanos::from_ms(10_070), black_box(cand.as_bytes()));
        assert!(r.is_ok(), "{r:?}");
        gw
    });

    for (name, source, value, epoch, prov) in [
        (
            "update_one_footprint",
            "z_range",
            json!(9.9),
            2,
            "rangefinder",
        ),
        (
            "update_many_footprints",
            "traffic",
            json!([{"north_m": 400.0, "east_m": 400.0, "down_m": -50.0}]),
            42,
            "utm-feed-a",
        ),
    ] {
        let u = ProviderUpdate {
            source: source.into(),
            value,
            epoch,
            provenance: prov.parse().unwrap(),
            generated_at_ms: 10_050,
        }
        .typed(&w.cat)
        .unwrap();
        bench(
            &mut g,
            "user",
            name,
            || (admitted(&w, &text).0, u.clone()),
            |(mut gw, u)| {
                let r = gw.handle_source_update(Nanos::from_ms(10_050), u);
                (gw, black_box(r.is_ok()))
            },
        );
    }

    let p = contract_scale::transition(&contract_scale::BASE);
    bench(
        &mut g,
        "user",
        "contract_transition",
        || (p.monitor.clone(), p.request.clone()),
        |(mut m, r)| {
            let d = m.handle(r);
            (m, black_box(d))
        },
    );
    {
        let mut m = p.monitor.clone();
        let _ = m.handle(p.request.clone());
        let r = m.poll_receipt().unwrap();
        eprintln!(
            "the contract transition's receipt has a {}-byte body",
            r.body.as_str().len()
        );
    }
    bench(
        &mut g,
        "user",
        "contract_transition_with_receipt",
        || (p.monitor.clone(), p.request.clone()),
        |(mut m, r)| {
            let d = m.handle(r);
            let mut n = 0;
            while m.poll_receipt().is_some() {
                n += 1;
            }
            (m, black_box((d, n)))
        },
    );
    g.finish();

    // Labelled sub-measurements of admission from bytes: its first two stages alone.
    let mut g = c.benchmark_group("part");
    bench(
        &mut g,
        "part",
        "parse_envelope",
        || (),
        |()| parse_envelope(black_box(text.as_bytes())).is_ok(),
    );
    bench(
        &mut g,
        "part",
        "parse_envelope_serde_json",
        || (),
        |()| serde_json::from_str::<halo_core::envelope::RawResponse<'_>>(black_box(&text)).is_ok(),
    );
    let raw = parse_envelope(text.as_bytes()).unwrap();
    bench(
        &mut g,
        "part",
        "validate",
        || (),
        |()| validate(&w.cat, black_box(&raw)).is_ok(),
    );
    // The same response without its 200 prerequisites (3.4 KB instead of 9.9): against
    // `user/admission_from_bytes`, what the prerequisites cost and what the 32 components'
    // own work does.
    let bare = {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        for c in v["components"].as_array_mut().unwrap() {
            c.as_object_mut().unwrap().remove("requires");
        }
        v.to_string()
    };
    assert!(w.fresh().handle_response(w.now, bare.as_bytes()).is_ok());
    bench(
        &mut g,
        "part",
        "admission_without_prerequisites",
        || w.fresh(),
        |mut gw| {
            let r = gw.handle_response(w.now, black_box(bare.as_bytes()));
            (gw, black_box(r.is_ok()))
        },
    );
    g.finish();
}

criterion_group!(benches, user_path, live);
criterion_main!(benches);
