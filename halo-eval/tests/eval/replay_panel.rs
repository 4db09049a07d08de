//! `replay-panel`: the structured-response replay (the HALO paper's Table 3a). The recorded
//! cohort (`tests/data/replay/cohort.jsonl`, 15 families, written by
//! `scripts/gen_replay_cohort.py`) is replayed unchanged under 12 conditions through all eight
//! variants of the core; `halo_gateway::replay`'s oracle (its own catalog reading and LocalOK,
//! no core code) says what should have happened. Full keeps every supported component and
//! leaks nothing; each reduced variant shows its own failure. Every cell is pinned.
use crate::common;

use halo_core::Variant;
use halo_eval::replay::{Replay, claims, read_cohort, render};

fn replay() -> Replay {
    let root = common::repo_root();
    Replay::new(
        &std::fs::read_to_string(root.join("catalogs/uav-px4.toml")).unwrap(),
        "uav-px4.toml",
        &std::fs::read_to_string(root.join("docs/examples/state.json")).unwrap(),
    )
    .unwrap()
}

#[test]
fn replay_panel() {
    let _timing = common::exclusive();
    let cohort = read_cohort(&common::data_dir().join("replay/cohort.jsonl")).unwrap();
    let families: std::collections::BTreeSet<&str> = cohort
        .iter()
        .map(|r| r.family.as_str())
        .filter(|f| !f.starts_with("malformed"))
        .collect();
    assert_eq!(
        (cohort.len(), families.len()),
        (231, 15),
        "the cohort, pinned"
    );
    let panel = replay().run(&cohort, &Variant::ALL);
    print!("{}", render(&panel));
    let cl = claims(&panel);
    let matched = cl.iter().filter(|(_, ok, _)| *ok).count();
    println!("replay-panel: {matched}/{} matched", cl.len());
    print!("{}", halo_eval::replay::render_claims(&cl));
    assert_eq!(matched, cl.len());
    assert_eq!((panel.runs, panel.conditions), (22_176, 12));
    // Every printed cell, pinned: kept/supported, stale-epoch, wrong-bounds, other and orphan
    // leaks with their opportunities, replays accepted/presented, modified dispatched/presented,
    // malformed rejected/presented.
    let cells: Vec<(&str, [usize; 16])> = panel
        .rows
        .iter()
        .map(|(v, r)| {
            (
                v.name(),
                [
                    r.kept,
                    r.supported,
                    r.epoch_leak,
                    r.epoch_opp,
                    r.bounds_leak,
                    r.bounds_opp,
                    r.other_leak,
                    r.other_opp,
                    r.orphan_leak,
                    r.orphan_opp,
                    r.replay_accepted,
                    r.replay_opp,
                    r.modified_dispatched,
                    r.modified_opp,
                    r.malformed_rejected,
                    r.malformed,
                ],
            )
        })
        .collect();
    // (kept, [stale-epoch, wrong-bounds, other, orphan] leaks, [replays accepted, presented]);
    // the denominators are the cohort's and the same for every variant.
    let row = |kept, [el, bl, ol, orl]: [usize; 4], replay: [usize; 2]| {
        [
            kept, 4881, el, 555, bl, 185, ol, 1329, orl, 1702, replay[0], replay[1], 0, 185, 72, 72,
        ]
    };
    assert_eq!(
        cells,
        [
            ("Full", row(4881, [0; 4], [0, 1147])),
            ("WholeResponse", row(4390, [0; 4], [0, 789])),
            ("IndependentFilter", row(4881, [0, 0, 0, 1702], [0, 1147])),
            ("AdmissionOnly", row(4881, [555, 185, 1329, 0], [0, 3216])),
            ("AgentSpecGlobal", row(3390, [0; 4], [789, 789])),
            ("AgentSpecScoped", row(4881, [0; 4], [1147, 1147])),
            ("GlobalSnapshot", row(3879, [0; 4], [0, 547])),
            ("LocalUnbound", row(4881, [555, 185, 0, 0], [0, 1887])),
        ]
    );
    assert!(
        cohort.iter().all(|r| !r.at.is_empty()),
        "every record knows its file and line"
    );
}
