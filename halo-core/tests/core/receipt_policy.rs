//! The `Decisions` receipt policy: telemetry that changes no decision is summarized per source;
//! an update that changes a decision, or a source's epoch or provenance, keeps its own receipt,
//! placed before the decisions it caused.
use crate::common::{certify, healthy_uav, put, running_example, uav_catalog};
use halo_core::engine::{Config, Gateway, ReceiptPolicy};
use halo_core::receipt::{Receipt, verify_chain, verify_chain_from};
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

/// Responses refused only because too many are live are counted under `Decisions` and summed
/// up in one receipt at the summary (their count, first and last id and instant); under `All`
/// each keeps its own. Other refusals keep theirs under both.
#[test]
fn refusals_as_too_many_are_summarized() {
    for decisions in [true, false] {
        let mut gw = Gateway::new(
            uav_catalog(),
            Config {
                receipts: if decisions {
                    ReceiptPolicy::Decisions {
                        summary_every: Nanos::from_ms(10_000),
                    }
                } else {
                    ReceiptPolicy::All
                },
                max_live_responses: 1,
                ..Config::default()
            },
        );
        healthy_uav(&mut gw, 1_000);
        let text = running_example("resp-0", 1);
        certify(&mut gw, 1_000, &text, "e3", "cert-9f2c", 60_000);
        gw.handle_response(Nanos::from_ms(1_000), text.as_bytes())
            .unwrap();
        drain(&mut gw);
        for i in 1..=50u64 {
            let text = running_example(&format!("resp-{i}"), 1);
            let e = gw
                .handle_response(Nanos::from_ms(1_000 + i), text.as_bytes())
                .unwrap_err();
            assert_eq!(e.code().name(), "TOO_MANY_RESPONSES");
        }
        // A duplicate id is a refusal of another kind: its own receipt either way.
        let dup = running_example("resp-0", 1);
        gw.handle_response(Nanos::from_ms(1_100), dup.as_bytes())
            .unwrap_err();
        let during = drain(&mut gw);
        let rejected = kinds(&during).iter().filter(|k| *k == "rejected").count();
        assert_eq!(
            rejected,
            if decisions { 1 } else { 51 },
            "{:?}",
            kinds(&during)
        );
        // The summary comes with the timers at the period's end.
        gw.handle_timeout(Nanos::from_ms(11_100));
        let after = drain(&mut gw);
        let summaries: Vec<_> = after
            .iter()
            .map(|r| r.body.value())
            .filter(|b| b["kind"] == "rejected_summary")
            .collect();
        if decisions {
            assert_eq!(
                summaries,
                [
                    json!({"kind": "rejected_summary", "code": "TOO_MANY_RESPONSES",
                    "refused": 50, "first_response": "resp-1", "last_response": "resp-50",
                    "first_at_ns": 1_001_000_000u64, "last_at_ns": 1_050_000_000u64})
                ]
            );
        } else {
            assert!(summaries.is_empty());
        }
        let mut all = during;
        all.extend(after);
        assert!(verify_chain_from(&all).is_ok());
    }
}
