//! The mission-contract scale study as a benchmark: every cell of `tests/common/contract_scale.rs`
//! in `BLOCKS` process blocks of `WARMUP` warm-ups and `MEASURED` measured calls, cell order
//! shuffled per block from a fixed seed. Every measured call gets a fresh monitor (a clone of the
//! prepared one, untimed) and the timed region is exactly one `Monitor::handle`. Quantiles are
//! nearest rank, `max(0, ceil(p n) - 1)`, with no sample removed.
//!
//! ```console
//! $ scripts/contract_scale.sh            # full: 5 blocks x (10 + 40) per cell
//! $ scripts/contract_scale.sh --quick    # 1 block x (2 + 8), a smoke run
//! ```
//!
//! Prints a table and writes `target/contract-scale.json`.
#![allow(missing_docs, reason = "bench binary")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "bench"
)]

#[path = "../tests/core/common/contract_scale.rs"]
mod contract_scale;

use std::time::Instant;

fn quantile(sorted: &[u128], p: f64) -> u128 {
    let n = sorted.len();
    let rank = ((p * n as f64).ceil() as usize).saturating_sub(1);
    sorted[rank.min(n - 1)]
}

fn fmt_ns(ns: u128) -> String {
    if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.2} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// xorshift64*: a fixed-seed shuffle, no dependency.
fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        let r = seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (blocks, warmup, measured) = if quick { (1, 2, 8) } else { (5, 10, 40) };
    // Other arguments (not cargo's `--bench`) select cells whose name contains them.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let cells: Vec<contract_scale::Cell> = contract_scale::cells()
        .into_iter()
        .filter(|c| {
            filters.is_empty()
                || filters
                    .iter()
                    .any(|f| c.name.contains(f.as_str()) || c.family == f)
        })
        .collect();
    eprintln!(
        "contract scale study: {} cells, {blocks} blocks x ({warmup} warm-up + {measured} measured) per cell",
        cells.len()
    );
    let prepared: Vec<contract_scale::Prepared> = cells.iter().map(|c| (c.build)()).collect();
    let mut samples: Vec<Vec<u128>> = vec![Vec::new(); cells.len()];
    let mut order: Vec<usize> = (0..cells.len()).collect();
    let mut seed = 0x5eed_0fc0_ffee_u64;
    for b in 0..blocks {
        shuffle(&mut order, &mut seed);
        for (done, &i) in order.iter().enumerate() {
            let p = &prepared[i];
            for k in 0..warmup + measured {
                let mut m = p.monitor.clone();
                let req = p.request.clone();
                let t = Instant::now();
                let d = m.handle(req);
                let ns = t.elapsed().as_nanos();
                std::hint::black_box(&d);
                if k >= warmup {
                    samples[i].push(ns);
                }
            }
            if done % 20 == 19 {
                eprintln!(
                    "  block {}/{blocks}: {}/{} cells",
                    b + 1,
                    done + 1,
                    cells.len()
                );
            }
        }
    }
    let mut rows = Vec::new();
    println!(
        "{:<8} {:<46} {:<13} {:<14} {:>11} {:>11} {:>11} {:>9}",
        "family", "cell", "decision", "reason", "median", "p95", "p99", "bytes"
    );
    for (i, c) in cells.iter().enumerate() {
        let mut m = prepared[i].monitor.clone();
        let d = m.handle(prepared[i].request.clone());
        assert_eq!(
            (d.verdict, d.reason),
            c.expect,
            "{}: correctness gate",
            c.name
        );
        let bytes = m.retained_state_json().len();
        let mut s = samples[i].clone();
        s.sort_unstable();
        let (med, p95, p99) = (quantile(&s, 0.5), quantile(&s, 0.95), quantile(&s, 0.99));
        println!(
            "{:<8} {:<46} {:<13} {:<14} {:>11} {:>11} {:>11} {:>9}",
            c.family,
            c.name,
            format!("{:?}", d.verdict),
            d.reason.map(|r| r.name()).unwrap_or("-"),
            fmt_ns(med),
            fmt_ns(p95),
            fmt_ns(p99),
            bytes
        );
        rows.push(serde_json::json!({
            "family": c.family, "cell": c.name, "decision": format!("{:?}", d.verdict),
            "reason": d.reason.map(|r| r.name()), "median_ns": med, "p95_ns": p95, "p99_ns": p99,
            "samples": s.len(), "retained_bytes": bytes,
        }));
    }
    let out =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/contract-scale.json");
    std::fs::write(&out, serde_json::to_string_pretty(&serde_json::json!({"blocks": blocks, "warmup": warmup, "measured": measured, "cells": rows})).unwrap()).unwrap();
    eprintln!("wrote {}", out.display());
}
