//! `contract-scale`: every cell of the scale study (`common/contract_scale.rs`) decided once,
//! untimed, against its registered decision; prints the retained-state size per cell. Timings
//! come from `scripts/contract_scale.sh` (the `contract_scale` bench), never from a test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

mod common;

use common::contract_scale::cells;

#[test]
fn contract_scale_decisions() {
    let all = cells();
    let mut matched = 0;
    let mut failures = Vec::new();
    println!("\ncontract-scale: decisions (retained-state bytes after the operation)");
    for c in &all {
        let mut p = (c.build)();
        let d = p.monitor.handle(p.request.clone());
        let bytes = p.monitor.retained_state_json().len();
        let ok = (d.verdict, d.reason) == c.expect;
        println!(
            "  {:<8} {:<46} {:<13} {:<14} {:>8} B{}",
            c.family,
            c.name,
            format!("{:?}", d.verdict),
            d.reason.map(|r| r.name()).unwrap_or("-"),
            bytes,
            if ok { "" } else { "  MISMATCH" }
        );
        if ok {
            matched += 1;
        } else {
            failures.push(format!(
                "{}: expected {:?}, got {:?} {:?} ({})",
                c.name, c.expect, d.verdict, d.reason, d.detail
            ));
        }
    }
    for f in &failures {
        println!("  FAIL {f}");
    }
    println!("contract-scale: {matched}/{} matched", all.len());
    assert_eq!(all.len(), 133, "the corpus: every cell, pinned");
    assert!(failures.is_empty());
}
