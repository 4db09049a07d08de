//! `mechanisms`: one shared set of conditions (`tests/data/mechanisms/conditions.json`) through
//! the eight variants of the core (`Variant::ALL`: the product, the three reduced variants and
//! the paper's comparators AgentSpec-Global, AgentSpec-Scoped, GlobalSnapshot and
//! Local-Unbound). Counts, against the hand-written ground truth of each condition:
//!
//! - supported-kept: supported components that reached their output (emitted or enqueued);
//! - stale-dispatch: adapter calls for an action the ground truth says is unsupported;
//! - orphan-leak: dependents that reached their output although a declared prerequisite never
//!   reached its required phase;
//! - supported-blocked: supported components that never reached their output;
//! - replay-accepted: spent tokens presented again that reached the adapter again (every token
//!   that reached the adapter is replayed once).
//!
//! WholeResponse overblocks, IndependentFilter leaks orphans, AdmissionOnly leaks stale
//! dispatches; AgentSpec-Global overblocks at admission and accepts replays; AgentSpec-Scoped
//! matches Full at admission but leaks every post-admission drift and accepts replays;
//! GlobalSnapshot overblocks on unrelated drift; Local-Unbound dispatches past epoch and
//! provenance changes. Full does none of these.
use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use halo_core::statefile::ProviderUpdate;
use halo_core::{Config, DispatchToken, Event, Gateway, Id, Nanos, RecordingAdapter, Variant};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code, reason = "documentation in the data file")]
    note: String,
    conditions: Vec<Condition>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Condition {
    name: String,
    #[serde(default)]
    status_after: Option<String>,
    #[serde(default)]
    pre: Vec<Upd>,
    #[serde(default)]
    pre_advance_ms: u64,
    #[serde(default)]
    post: Vec<Upd>,
    #[serde(default)]
    post_revoke: Option<String>,
    #[serde(default)]
    gate_at: Option<u64>,
    supported: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Upd {
    source: String,
    value: serde_json::Value,
    epoch: u64,
    provenance: String,
}

fn apply(gw: &mut Gateway, at: u64, u: &Upd) {
    let pu = ProviderUpdate {
        source: u.source.clone(),
        value: u.value.clone(),
        epoch: u.epoch,
        provenance: u.provenance.parse().unwrap(),
        generated_at_ms: at,
    };
    let typed = pu.typed(gw.catalog()).unwrap();
    gw.handle_source_update(Nanos::from_ms(at), typed).unwrap();
}

fn response(status_after: Option<&str>) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&running_example("m1", 12)).unwrap();
    if let Some(p) = status_after {
        v["components"][3]["requires"] = serde_json::json!([{"id": p, "phase": "emitted"}]);
    }
    v.to_string()
}

#[derive(Default, Clone, Copy)]
struct Row {
    kept: usize,
    supported: usize,
    stale: usize,
    stale_opp: usize,
    orphan: usize,
    orphan_opp: usize,
    blocked: usize,
    replayed: usize,
    replay_opp: usize,
}

fn run(c: &Condition, variant: Variant) -> Row {
    let mut gw = Gateway::new(
        uav_catalog(),
        Config {
            variant,
            ..Config::default()
        },
    );
    let text = response(c.status_after.as_deref());
    healthy_uav(&mut gw, 1_000);
    certify(&mut gw, 1_000, &text, "e3", "cert-9f2c", 30_000);
    for u in &c.pre {
        apply(&mut gw, 1_050, u);
    }
    let shift = c.pre_advance_ms;
    let mut reached = BTreeSet::new();
    let mut events = Vec::new();
    let _ = gw.handle_response(Nanos::from_ms(1_100 + shift), text.as_bytes());
    events.extend(std::iter::from_fn(|| gw.poll_event()));
    let mut tokens: Vec<_> = std::iter::from_fn(|| gw.poll_dispatch()).collect();
    for u in &c.post {
        apply(&mut gw, 1_150 + shift, u);
    }
    if let Some(cert) = &c.post_revoke {
        gw.handle_certificate_revoked(Nanos::from_ms(1_150 + shift), &cert.parse::<Id>().unwrap());
    }
    events.extend(std::iter::from_fn(|| gw.poll_event()));
    let t_gate = Nanos::from_ms(c.gate_at.unwrap_or(1_200 + shift));
    let mut ad = RecordingAdapter::new();
    // Gate every ready action, including any that become ready after a dispatch.
    let mut spent = Vec::new();
    while !tokens.is_empty() {
        for t in tokens.drain(..) {
            let before = ad.calls.len();
            let wire = t.to_wire();
            let _ = gw.final_gate(t_gate, t, &mut ad);
            if ad.calls.len() > before {
                spent.push(wire);
            }
        }
        events.extend(std::iter::from_fn(|| gw.poll_event()));
        tokens.extend(std::iter::from_fn(|| gw.poll_dispatch()));
    }
    // The replay control: every token that reached the adapter, presented once more.
    let dispatched = ad.calls.len();
    for w in &spent {
        let _ = gw.final_gate(t_gate, DispatchToken::from_wire(w).unwrap(), &mut ad);
    }
    let replayed = ad.calls.len() - dispatched;
    ad.calls.truncate(dispatched);
    for e in &events {
        if let Event::Emit { component, .. } = e {
            reached.insert(component.id().to_string());
        }
    }
    for call in &ad.calls {
        reached.insert(call.component.to_string());
    }

    let supported: BTreeSet<String> = c.supported.iter().cloned().collect();
    let parent_of_e4 = c.status_after.clone().unwrap_or_else(|| "e3".into());
    let mut row = Row {
        supported: supported.len(),
        replayed,
        replay_opp: spent.len(),
        ..Row::default()
    };
    for id in ["e1", "e2", "e3", "e4"] {
        let s = supported.contains(id);
        let r = reached.contains(id);
        if s && r {
            row.kept += 1;
        }
        if s && !r {
            row.blocked += 1;
        }
    }
    if !supported.contains("e3") {
        row.stale_opp = 1;
        row.stale = ad
            .calls
            .iter()
            .filter(|c| c.component.as_str() == "e3")
            .count();
    }
    if !supported.contains(&parent_of_e4) {
        // A leak is a dependent that reached its output although its prerequisite never
        // reached the required phase. (A dependent that follows a stale dispatch is
        // dependency-consistent; the stale dispatch itself is counted above.)
        row.orphan_opp = 1;
        row.orphan = usize::from(reached.contains("e4") && !reached.contains(&parent_of_e4));
    }
    row
}

#[test]
fn mechanisms() {
    let f: File = serde_json::from_slice(
        &std::fs::read(data_dir().join("mechanisms/conditions.json")).unwrap(),
    )
    .unwrap();
    let mut totals: BTreeMap<&str, Row> = BTreeMap::new();
    let mut per: Vec<(String, &str, Row)> = Vec::new();
    for c in &f.conditions {
        for v in Variant::ALL {
            let r = run(c, v);
            let t = totals.entry(v.name()).or_default();
            t.kept += r.kept;
            t.supported += r.supported;
            t.stale += r.stale;
            t.stale_opp += r.stale_opp;
            t.orphan += r.orphan;
            t.orphan_opp += r.orphan_opp;
            t.blocked += r.blocked;
            t.replayed += r.replayed;
            t.replay_opp += r.replay_opp;
            per.push((c.name.clone(), v.name(), r));
        }
    }
    let n = f.conditions.len() * Variant::ALL.len();
    println!(
        "mechanisms: {n} condition-variant runs over {} conditions",
        f.conditions.len()
    );
    println!(
        "  {:<18} {:>16} {:>16} {:>14} {:>19} {:>17}",
        "variant",
        "supported-kept↑",
        "stale-dispatch↓",
        "orphan-leak↓",
        "supported-blocked↓",
        "replay-accepted↓"
    );
    for v in Variant::ALL {
        let t = totals[v.name()];
        println!(
            "  {:<18} {:>16} {:>16} {:>14} {:>19} {:>17}",
            v.name(),
            format!("{}/{}", t.kept, t.supported),
            format!("{}/{}", t.stale, t.stale_opp),
            format!("{}/{}", t.orphan, t.orphan_opp),
            format!("{}/{}", t.blocked, t.supported),
            format!("{}/{}", t.replayed, t.replay_opp)
        );
    }
    for (c, v, r) in &per {
        if r.stale + r.orphan + r.blocked + r.replayed > 0 {
            println!(
                "    {c:<36} {v:<18} stale {} orphan {} blocked {} replayed {}",
                r.stale, r.orphan, r.blocked, r.replayed
            );
        }
    }
    let t = |name: &str| totals[name];
    let (full, whole, indep, adm) = (
        t("Full"),
        t("WholeResponse"),
        t("IndependentFilter"),
        t("AdmissionOnly"),
    );
    let (global, scoped, snapshot, unbound) = (
        t("AgentSpecGlobal"),
        t("AgentSpecScoped"),
        t("GlobalSnapshot"),
        t("LocalUnbound"),
    );
    // AgentSpec-Scoped is the matched admission-time control: on every condition whose drift
    // happens before admission it decides exactly as Full does.
    let admission_time: Vec<&str> = f
        .conditions
        .iter()
        .filter(|c| c.post.is_empty() && c.post_revoke.is_none() && c.gate_at.is_none())
        .map(|c| c.name.as_str())
        .collect();
    let same_at_admission = admission_time.iter().all(|c| {
        let row = |v: &str| {
            per.iter()
                .find(|(n, w, _)| n == c && *w == v)
                .map(|(_, _, r)| (r.kept, r.stale, r.orphan, r.blocked))
        };
        row("Full") == row("AgentSpecScoped")
    });
    let matched = [
        full.kept == full.supported
            && full.stale == 0
            && full.orphan == 0
            && full.blocked == 0
            && full.replayed == 0,
        whole.blocked > 0 && whole.stale == 0 && whole.orphan == 0 && whole.replayed == 0,
        indep.orphan > 0 && indep.stale == 0 && indep.replayed == 0,
        adm.stale > 0 && adm.orphan == 0 && adm.replayed == 0,
        global.blocked > 0 && global.replayed == global.replay_opp && global.replay_opp > 0,
        same_at_admission
            && scoped.stale > 0
            && scoped.orphan == 0
            && scoped.replayed == scoped.replay_opp
            && scoped.replay_opp > 0,
        snapshot.blocked > 0 && snapshot.stale == 0 && snapshot.orphan == 0,
        unbound.stale > 0 && unbound.orphan == 0 && unbound.blocked == 0,
    ];
    println!(
        "mechanisms: {}/8 matched (Full avoids all; WholeResponse overblocks; IndependentFilter leaks orphans; AdmissionOnly leaks stale dispatches; AgentSpecGlobal overblocks and accepts replays; AgentSpecScoped matches Full at admission ({} conditions), then leaks drift and accepts replays; GlobalSnapshot overblocks on unrelated drift; LocalUnbound dispatches past epoch and provenance changes)",
        matched.iter().filter(|m| **m).count(),
        admission_time.len()
    );
    assert_eq!(matched, [true; 8]);
    // The printed table, pinned: (kept/supported, stale/opportunities, orphans/opportunities,
    // blocked, replays accepted/replayed) per variant, as docs/conformance.md shows it.
    let cells: Vec<(&str, [usize; 9])> = Variant::ALL
        .iter()
        .map(|v| {
            let t = totals[v.name()];
            (
                v.name(),
                [
                    t.kept,
                    t.supported,
                    t.stale,
                    t.stale_opp,
                    t.orphan,
                    t.orphan_opp,
                    t.blocked,
                    t.replayed,
                    t.replay_opp,
                ],
            )
        })
        .collect();
    assert_eq!(
        cells,
        [
            ("Full", [29, 29, 0, 8, 0, 9, 0, 0, 4]),
            ("WholeResponse", [18, 29, 0, 8, 0, 9, 11, 0, 2]),
            ("IndependentFilter", [29, 29, 0, 8, 9, 9, 0, 0, 4]),
            ("AdmissionOnly", [29, 29, 5, 8, 0, 9, 0, 0, 9]),
            ("AgentSpecGlobal", [18, 29, 5, 8, 0, 9, 11, 7, 7]),
            ("AgentSpecScoped", [29, 29, 5, 8, 0, 9, 0, 9, 9]),
            ("GlobalSnapshot", [27, 29, 0, 8, 0, 9, 2, 0, 3]),
            ("LocalUnbound", [29, 29, 5, 8, 0, 9, 0, 0, 9]),
        ]
    );
}
