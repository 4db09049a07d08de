//! The `Decisions` receipt policy: telemetry that changes no decision is summarized per source;
//! an update that changes a decision, or a source's epoch or provenance, keeps its own receipt,
//! placed before the decisions it caused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use crate::common::{certify, healthy_uav, put, running_example, uav_catalog};
use halo_core::engine::{Config, Gateway, ReceiptPolicy};
use halo_core::receipt::{Receipt, verify_chain};
use halo_core::time::Nanos;
use serde_json::json;

fn kinds(rs: &[Receipt]) -> Vec<String> {
    rs.iter()
        .map(|r| {
            let b = r.body.value();
            let k = b["kind"].as_str().unwrap_or("?").to_string();
            match b["source"].as_str() {
                Some(s) => format!("{k}:{s}"),
                None => k,
            }
        })
        .collect()
}

fn drain(gw: &mut Gateway) -> Vec<Receipt> {
    std::iter::from_fn(|| gw.poll_receipt()).collect()
}

#[test]
fn telemetry_is_summarized_and_decisions_are_kept() {
    let mut gw = Gateway::new(
        uav_catalog(),
        Config {
            receipts: ReceiptPolicy::Decisions {
                summary_every: Nanos::from_ms(10_000),
            },
            ..Config::default()
        },
    );
    healthy_uav(&mut gw, 1_000);
    let text = running_example("resp-1", 1);
    certify(&mut gw, 1_000, &text, "e3", "cert-9f2c", 60_000);
    gw.handle_response(Nanos::from_ms(1_000), text.as_bytes())
        .unwrap();
    let mut all = drain(&mut gw);
    // First updates of each source are recorded (14 sources in `uav-px4` v6).
    assert_eq!(
        kinds(&all)
            .iter()
            .filter(|k| k.starts_with("source_update"))
            .count(),
        14
    );
    // 25 battery samples that change nothing: no receipt each.
    for i in 0..25u64 {
        let t = 1_100 + i * 20;
        put(
            &mut gw,
            t,
            "battery",
            json!(80.0 - i as f64 * 0.01),
            1,
            "px4",
            t,
        );
    }
    let quiet = drain(&mut gw);
    assert!(quiet.is_empty(), "{:?}", kinds(&quiet));
    // A battery sample below the rule's minimum changes a verdict: recorded, before the
    // withholding it causes.
    put(&mut gw, 1_600, "battery", json!(10.0), 1, "px4", 1_600);
    let r = drain(&mut gw);
    let k = kinds(&r);
    assert_eq!(
        k.first().map(String::as_str),
        Some("source_update:battery"),
        "{k:?}"
    );
    assert!(k.contains(&"phase".to_string()), "{k:?}");
    // The map epoch changes: recorded, whatever it decides.
    put(&mut gw, 1_700, "map", json!(null), 8, "map-service", 1_700);
    let r2 = drain(&mut gw);
    assert_eq!(
        kinds(&r2).first().map(String::as_str),
        Some("source_update:map"),
        "{:?}",
        kinds(&r2)
    );
    // The summary arrives when its timer is due and counts what was not recorded.
    gw.handle_timeout(Nanos::from_ms(11_100));
    let s = drain(&mut gw);
    let summary = s
        .iter()
        .map(|r| r.body.value())
        .find(|b| b["kind"] == "source_summary")
        .expect("a summary receipt");
    assert_eq!(summary["source"], "battery");
    assert_eq!(summary["updates"], 25);
    assert_eq!(summary["first_generated_at_ns"], 1_100_000_000u64);
    assert_eq!(summary["last_generated_at_ns"], 1_580_000_000u64);
    all.extend(quiet);
    all.extend(r);
    all.extend(r2);
    all.extend(s);
    assert!(verify_chain(&all).is_ok());
}

#[test]
fn the_default_policy_records_every_update() {
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    healthy_uav(&mut gw, 1_000);
    let _ = drain(&mut gw);
    for i in 0..5u64 {
        put(
            &mut gw,
            1_100 + i,
            "battery",
            json!(80.0),
            1,
            "px4",
            1_100 + i,
        );
    }
    assert_eq!(drain(&mut gw).len(), 5);
}

/// A full certificate table sheds certificates whose interval ended; live ones are never
/// dropped, so a table full of live certificates still refuses a new one.
#[test]
fn expired_certificates_make_room() {
    use halo_core::state::{Certificate, MAX_CERTIFICATES};
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    let cert = |i: usize, until_ms: u64| Certificate {
        id: format!("c{i}").parse().unwrap(),
        covers: halo_core::Digest::default(),
        valid_until: Nanos::from_ms(until_ms),
        issuer: "geo".parse().unwrap(),
    };
    for i in 0..MAX_CERTIFICATES {
        gw.handle_certificate(Nanos::from_ms(1_000), cert(i, 2_000))
            .unwrap();
    }
    // Still live at 1.5 s: the table is full.
    assert!(
        gw.handle_certificate(Nanos::from_ms(1_500), cert(9_999, 9_000))
            .is_err()
    );
    // At 3 s every one of them has ended: room again, and the expired ones are gone.
    gw.handle_certificate(Nanos::from_ms(3_000), cert(10_000, 9_000))
        .unwrap();
    assert_eq!(gw.snapshot().certificate_count(), 1);
}
