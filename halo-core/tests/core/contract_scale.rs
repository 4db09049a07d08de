//! `contract-scale`: every cell of the scale study (`common/contract_scale.rs`) decided once,
//! untimed, against its registered decision (a refused cell must leave the retained state
//! byte-for-byte unchanged); prints the retained-state size per cell. Timings
//! come from `scripts/contract_scale.sh` (the `contract_scale` bench), never from a test.
use crate::common::contract_scale::cells;

#[test]
fn contract_scale_decisions() {
    let all = cells();
    let mut matched = 0;
    let mut failures = Vec::new();
    println!("\ncontract-scale: decisions (retained-state bytes after the operation)");
    for c in &all {
        let mut p = (c.build)();
        let before = p.monitor.retained_state_json();
        let d = p.monitor.handle(p.request.clone());
        let after = p.monitor.retained_state_json();
        let bytes = after.len();
        // A refused cell leaves the retained state exactly as it was.
        let unchanged = d.allowed() || before == after;
        let ok = (d.verdict, d.reason) == c.expect && unchanged;
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
                "{}: expected {:?}, got {:?} {:?} ({}){}",
                c.name,
                c.expect,
                d.verdict,
                d.reason,
                d.detail,
                if unchanged {
                    ""
                } else {
                    "; the refusal changed the retained state"
                }
            ));
        }
    }
    for f in &failures {
        println!("  FAIL {f}");
    }
    println!("contract-scale: {matched}/{} matched", all.len());
    assert_eq!(all.len(), 140, "the corpus: every cell, pinned");
    assert!(failures.is_empty());
}
