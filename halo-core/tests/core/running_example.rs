//! The paper's running example end to end through the core.
use crate::common::*;
use halo_core::{Config, Event, Gateway, Id, Nanos, Phase, ReasonCode, RecordingAdapter};

fn id(s: &str) -> Id {
    s.parse().unwrap()
}

#[test]
fn all_supported_emits_notice_and_report_dispatches_action_then_status() {
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    healthy_uav(&mut gw, 1_000);
    let resp = running_example("r1", 1);
    certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
    let rep = gw
        .handle_response(Nanos::from_ms(1_100), resp.as_bytes())
        .unwrap();
    assert_eq!(rep.component("e1").unwrap().phase, Phase::Emitted);
    assert_eq!(rep.component("e2").unwrap().phase, Phase::Emitted);
    assert_eq!(rep.component("e3").unwrap().phase, Phase::Retained);
    assert_eq!(rep.component("e4").unwrap().phase, Phase::Pending);
    let emitted: Vec<_> = drain(&mut gw)
        .into_iter()
        .filter_map(|e| match e {
            Event::Emit { component, .. } => Some(component.id().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(emitted, ["e1", "e2"]);
    let tok = gw.poll_dispatch().unwrap();
    assert!(gw.poll_dispatch().is_none());
    let mut ad = RecordingAdapter::new();
    let out = gw.final_gate(Nanos::from_ms(1_120), tok, &mut ad);
    assert!(out.is_dispatched(), "{out:?}");
    assert_eq!(ad.calls.len(), 1);
    let e4 = gw.component_report(&id("r1"), &id("e4")).unwrap();
    assert_eq!(e4.phase, Phase::Emitted);
}

#[test]
fn stale_traffic_withholds_action_and_status_keeps_notice_and_report() {
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    healthy_uav(&mut gw, 1_000);
    let resp = running_example("r1", 1);
    certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
    // traffic is 2 s old at 3_000 exactly: fresh (equality admitted); at 3_001 stale.
    let rep = gw
        .handle_response(Nanos::from_ms(3_001), resp.as_bytes())
        .unwrap();
    assert_eq!(rep.component("e1").unwrap().phase, Phase::Emitted);
    assert_eq!(
        rep.component("e2").unwrap().phase,
        Phase::Withheld,
        "z_range is 500 ms limited"
    );
    let e3 = rep.component("e3").unwrap();
    assert_eq!(e3.phase, Phase::Withheld);
    assert_eq!(e3.reason, Some(ReasonCode::STALE_SOURCE));
    assert!(e3.obligation.is_some());
    assert_eq!(rep.component("e4").unwrap().phase, Phase::Withheld);
    assert_eq!(
        rep.component("e4").unwrap().reason,
        Some(ReasonCode::PARENT_WITHHELD)
    );
    assert!(gw.poll_dispatch().is_none());
}

#[test]
fn epoch_change_after_admission_is_caught_by_the_final_recheck() {
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    healthy_uav(&mut gw, 1_000);
    let resp = running_example("r1", 1);
    certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
    gw.handle_response(Nanos::from_ms(1_100), resp.as_bytes())
        .unwrap();
    let tok = gw.poll_dispatch().unwrap();
    // The map epoch changes; e3 claimed map epoch 7, so LocalOK fails at the event.
    put(
        &mut gw,
        1_150,
        "map",
        serde_json::json!(null),
        8,
        "map-service",
        1_150,
    );
    let mut ad = RecordingAdapter::new();
    let out = gw.final_gate(Nanos::from_ms(1_200), tok, &mut ad);
    assert_eq!(out.code(), Some(ReasonCode::TOKEN_REVOKED));
    assert!(ad.calls.is_empty());
    let e3 = gw.component_report(&id("r1"), &id("e3")).unwrap();
    assert_eq!(
        (e3.phase, e3.reason),
        (Phase::Withheld, Some(ReasonCode::EPOCH_CHANGED))
    );
}

#[test]
fn every_decision_leaves_a_hash_linked_receipt() {
    let mut gw = Gateway::new(uav_catalog(), Config::default());
    healthy_uav(&mut gw, 1_000);
    let resp = running_example("r1", 1);
    certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
    gw.handle_response(Nanos::from_ms(1_100), resp.as_bytes())
        .unwrap();
    let tok = gw.poll_dispatch().unwrap();
    let wire = tok.to_wire();
    let mut ad = RecordingAdapter::new();
    assert!(
        gw.final_gate(Nanos::from_ms(1_120), tok, &mut ad)
            .is_dispatched()
    );
    let replay = halo_core::DispatchToken::from_wire(&wire).unwrap();
    assert_eq!(
        gw.final_gate(Nanos::from_ms(1_130), replay, &mut ad).code(),
        Some(ReasonCode::TOKEN_USED)
    );
    let receipts: Vec<_> = std::iter::from_fn(|| gw.poll_receipt()).collect();
    assert_eq!(
        halo_core::receipt::verify_chain(&receipts),
        Ok(receipts.len() as u64)
    );
    let kinds: Vec<String> = receipts
        .iter()
        .map(|r| r.body.value()["kind"].as_str().unwrap().to_owned())
        .collect();
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    assert!(kinds.contains(&"admitted"));
    assert!(kinds.contains(&"gate"));
    assert!(kinds.contains(&"gate_refused"));
    // One per source of `uav-px4` v6 (14).
    assert_eq!(kinds.iter().filter(|k| **k == "source_update").count(), 14);
    // One JSON line per receipt, and a tampered line no longer verifies.
    let mut tampered = receipts.clone();
    let last = tampered.len() - 1;
    tampered[last]
        .body
        .edit(|b| b["code"] = serde_json::json!("TOKEN_REVOKED"));
    assert!(halo_core::receipt::verify_chain(&tampered).is_err());
}

/// A dispatched action streams under its certified interval: a support loss meanwhile is a
/// deny-hold (`SupportLost`). Once the vehicle stopped streaming it (`stream_ended`: a later
/// target, a hold or a land replaced it) the same loss is no longer reported, and the finished
/// response retires after the retention instead of waiting out the interval.
#[test]
fn a_support_loss_is_a_deny_hold_only_while_the_action_streams() {
    let run = |end_stream: bool| -> (usize, bool) {
        let cfg = Config {
            done_retention: Nanos::from_ms(100),
            ..Config::default()
        };
        let mut gw = Gateway::new(uav_catalog(), cfg);
        healthy_uav(&mut gw, 1_000);
        let resp = running_example("r1", 1);
        certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
        gw.handle_response(Nanos::from_ms(1_100), resp.as_bytes())
            .unwrap();
        let tok = gw.poll_dispatch().unwrap();
        let mut ad = RecordingAdapter::new();
        assert!(
            gw.final_gate(Nanos::from_ms(1_120), tok, &mut ad)
                .is_dispatched()
        );
        drain(&mut gw);
        if end_stream {
            gw.stream_ended(&id("r1"), &id("e3"));
        }
        // Done at 1_120; retention 100 ms; the certified interval runs to 21 s.
        gw.handle_timeout(Nanos::from_ms(2_000));
        let live = gw.response_ids().any(|r| r.as_str() == "r1");
        // The map epoch changes while the interval still runs.
        put(
            &mut gw,
            2_100,
            "map",
            serde_json::json!(null),
            8,
            "map-service",
            2_100,
        );
        let lost = drain(&mut gw)
            .into_iter()
            .filter(
                |e| matches!(e, Event::SupportLost { component, .. } if component.id().as_str() == "e3"),
            )
            .count();
        (lost, live)
    };
    assert_eq!(run(false), (1, true), "streaming: deny-hold, still live");
    assert_eq!(run(true), (0, false), "stream ended: no deny-hold, retired");
}

/// A provider update that brings only a later time (value, epoch and provenance as held) is not
/// re-decided for the components it supports: their support timer, still due at the earlier
/// instant, re-checks them then and finds them supported; they lose support only when the
/// fresher data ages out. An update that arrives after a component's instant passed (its timer
/// not yet delivered) still decides it at once. (`schedules` holds the same against its shadow
/// over thousands of schedules, where most updates are of this kind.)
#[test]
fn an_update_that_brings_only_time_keeps_support_until_the_fresher_data_ages() {
    let admitted = || {
        let mut gw = Gateway::new(uav_catalog(), Config::default());
        healthy_uav(&mut gw, 1_000);
        let resp = running_example("r1", 1);
        certify(&mut gw, 1_000, &resp, "e3", "cert-9f2c", 20_000);
        gw.handle_response(Nanos::from_ms(1_100), resp.as_bytes())
            .unwrap();
        drain(&mut gw);
        gw
    };
    let e3 = |gw: &Gateway| gw.component_report(&id("r1"), &id("e3")).unwrap();
    let mut gw = admitted();
    assert_eq!(
        e3(&gw).phase,
        Phase::Retained,
        "its token waits for the gate"
    );
    // `vehicle` and `link` (1 s limits) would make e3 stale after 2_000. Every source again at
    // 1_900, as held; the timer due at 2_000 finds e3 supported.
    healthy_uav(&mut gw, 1_900);
    gw.handle_timeout(Nanos::from_ms(2_001));
    drain(&mut gw);
    assert!(e3(&gw).locally_supported);
    assert_eq!(e3(&gw).phase, Phase::Retained);
    // No more updates: e3 is withheld when the 1_900 data ages out, after 2_900.
    let mut at = 2_001;
    while e3(&gw).phase == Phase::Retained && at < 6_000 {
        at += 10;
        gw.handle_timeout(Nanos::from_ms(at));
        drain(&mut gw);
    }
    let r = e3(&gw);
    assert_eq!(
        (r.phase, r.reason),
        (Phase::Withheld, Some(ReasonCode::STALE_SOURCE))
    );
    assert_eq!(at, 2_901, "withheld at the first check after 2_900");

    // The same update arriving at 2_500 with the 2_000 timer not delivered: the first of its
    // sources already finds `vehicle` 1.5 s old, and e3 is withheld by that update.
    let mut gw = admitted();
    healthy_uav(&mut gw, 2_500);
    let r = e3(&gw);
    assert_eq!(
        (r.phase, r.reason),
        (Phase::Withheld, Some(ReasonCode::STALE_SOURCE))
    );
}

/// Ended obligations are kept for queries up to `ended_obligations_kept` (the oldest go first);
/// open ones are always kept. So what the gateway holds stays bounded over a long flight (the
/// receipts keep every obligation).
#[test]
fn ended_obligations_are_kept_up_to_the_limit() {
    let cfg = Config {
        ended_obligations_kept: 2,
        ..Config::default()
    };
    let mut gw = Gateway::new(uav_catalog(), cfg);
    let mut at = 1_000;
    let mut created = Vec::new();
    for k in 0..6 {
        // Traffic 2.001 s old at admission: e3 withheld with an obligation.
        healthy_uav(&mut gw, at);
        let resp = running_example(&format!("r{k}"), 1);
        certify(&mut gw, at, &resp, "e3", "cert-9f2c", at + 20_000);
        at += 2_001;
        gw.handle_response(Nanos::from_ms(at), resp.as_bytes())
            .unwrap();
        drain(&mut gw);
        let open: Vec<u64> = gw
            .obligations()
            .filter(|o| o.state.is_live())
            .map(|o| o.id.0)
            .collect();
        let ended: Vec<u64> = gw
            .obligations()
            .filter(|o| !o.state.is_live())
            .map(|o| o.id.0)
            .collect();
        created.push(*open.last().unwrap());
        // The newest is open; of the ended, the two newest are kept.
        assert_eq!(open, [created[k]], "round {k}");
        let want: Vec<u64> = created[..k].iter().rev().take(2).rev().copied().collect();
        assert_eq!(ended, want, "round {k}");
        // Let it end (its expiry passes) before the next.
        while gw.obligations().any(|o| o.state.is_live()) {
            at = gw
                .poll_timeout()
                .map_or(at + 1_000, |t| t.as_ms().max(at + 1));
            gw.handle_timeout(Nanos::from_ms(at));
            drain(&mut gw);
        }
    }
}

/// `ObligationCreated` names its obligation by id, so an obligation whose event has not been
/// polled yet is kept even once ended and past the limit of ended ones (here 0): the shell
/// always finds what the event names. Once the event is polled it goes with the next pruning.
#[test]
fn an_obligation_is_kept_until_its_event_is_polled() {
    let cfg = Config {
        ended_obligations_kept: 0,
        ..Config::default()
    };
    let mut gw = Gateway::new(uav_catalog(), cfg);
    let mut at = 1_000;
    let admit = |gw: &mut Gateway, k: usize, at: &mut u64| {
        // Traffic 2.001 s old at admission: e3 withheld with an obligation.
        healthy_uav(gw, *at);
        let resp = running_example(&format!("r{k}"), 1);
        certify(gw, *at, &resp, "e3", "cert-9f2c", *at + 20_000);
        *at += 2_001;
        gw.handle_response(Nanos::from_ms(*at), resp.as_bytes())
            .unwrap();
    };
    admit(&mut gw, 0, &mut at);
    // Obligation 1 expires, its creation event still queued; then obligation 2 is created,
    // which prunes ended obligations beyond the limit.
    let first = gw.obligations().next().unwrap().id;
    while gw.obligation(first).unwrap().state.is_live() {
        at = gw
            .poll_timeout()
            .map_or(at + 1_000, |t| t.as_ms().max(at + 1));
        gw.handle_timeout(Nanos::from_ms(at));
    }
    admit(&mut gw, 1, &mut at);
    let mut named = Vec::new();
    while let Some(e) = gw.poll_event() {
        if let Event::ObligationCreated { id } = e {
            assert!(gw.obligation(id).is_some(), "{id} is gone before its event");
            named.push(id);
        }
    }
    assert_eq!(named.len(), 2, "{named:?}");
    assert!(gw.obligation(first).is_some());
    // Announced and ended: the next obligation's pruning drops it.
    admit(&mut gw, 2, &mut at);
    drain(&mut gw);
    assert!(gw.obligation(first).is_none());
}

/// The same bound holds with no provider update at all (the open list is then pruned as it
/// grows): 200 responses admitted one after another against stale data, each withholding e3
/// with an obligation that expires, and what is held stays within the open list's bound.
#[test]
fn ended_obligations_stay_bounded_without_provider_updates() {
    let cfg = Config {
        ended_obligations_kept: 2,
        done_retention: Nanos::from_ms(100),
        ..Config::default()
    };
    let mut gw = Gateway::new(uav_catalog(), cfg);
    healthy_uav(&mut gw, 1_000);
    let resp = |k: usize| running_example(&format!("r{k}"), 1);
    let mut at = 5_000;
    let mut most = 0;
    for k in 0..200 {
        gw.handle_response(Nanos::from_ms(at), resp(k).as_bytes())
            .unwrap();
        drain(&mut gw);
        while gw.obligations().any(|o| o.state.is_live()) || gw.response_ids().next().is_some() {
            at = gw
                .poll_timeout()
                .map_or(at + 1_000, |t| t.as_ms().max(at + 1));
            gw.handle_timeout(Nanos::from_ms(at));
            drain(&mut gw);
        }
        most = most.max(gw.obligations().count());
    }
    // The open list is pruned when it doubles (from 64): at most 128 entries besides the 2 kept.
    eprintln!("at most {most} obligations held");
    assert!(most <= 2 * 64 + 2, "{most} obligations held");
    assert!(most >= 3, "{most}: the case never went past the kept ones");
}
