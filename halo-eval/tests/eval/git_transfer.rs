//! `git-transfer`: the cross-domain transfer check of the HALO paper. The unchanged core, with
//! `catalogs/repo-merge.toml` and a merge adapter over a real `git` in temporary bare
//! repositories, runs 12 cases through six variants; what happened is read back from Git's
//! ancestry (a merge commit of the reviewed change on `main`, or none). The expected outcome of
//! each case is written per case (`Case::admitted_merge_is_current`). CI runs
//! `HALO_GIT_REPS` repetitions (default 2); `scripts/git_transfer.sh` runs the paper's 10.
use crate::common;
use halo_eval::transfer::{Case, claims, panel, render};

#[test]
fn git_transfer() {
    let _timing = common::exclusive();
    let reps: usize = std::env::var("HALO_GIT_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    assert!(reps > 0, "HALO_GIT_REPS=0 runs nothing");
    let dir = std::env::temp_dir().join(format!("halo-git-transfer-{}", std::process::id()));
    let rows = panel(reps, &dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    print!("{}", render(&rows, reps));
    let cl = claims(&rows);
    let matched = cl.iter().filter(|(_, ok, _)| *ok).count();
    println!("git-transfer: {matched}/{} matched", cl.len());
    print!("{}", halo_eval::replay::render_claims(&cl));
    assert_eq!(Case::ALL.len(), 12);
    assert_eq!(matched, cl.len());
    // Every cell, pinned per repetition: (unaffected kept / unaffected, stale merges / changed
    // evidence, notice leaks / blocked or refused merges, fresh readmissions / attempted).
    let r = reps;
    let cells: Vec<(&str, [usize; 8])> = rows
        .iter()
        .map(|(v, x)| {
            (
                v.name(),
                [
                    x.unaffected_kept,
                    x.unaffected,
                    x.stale_merges,
                    x.stale_opp,
                    x.notice_leaks,
                    x.notice_opp,
                    x.fresh_done,
                    x.fresh_opp,
                ],
            )
        })
        .collect();
    let row = |kept, stale, leaks, fresh| {
        [
            kept * r,
            3 * r,
            stale * r,
            8 * r,
            leaks * r,
            9 * r,
            fresh * r,
            r,
        ]
    };
    assert_eq!(
        cells,
        [
            ("Full", row(3, 0, 0, 1)),
            ("WholeResponse", row(3, 0, 0, 1)),
            ("IndependentFilter", row(3, 0, 8, 1)),
            ("AdmissionOnly", row(3, 8, 0, 0)),
            ("GlobalSnapshot", row(1, 0, 0, 1)),
            ("LocalUnbound", row(3, 6, 0, 0)),
        ]
    );
}
