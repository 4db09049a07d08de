//! `protocol-cases`: hand-written transition cases, as step scripts under
//! `tests/data/protocol/cases.json` (written by `scripts/gen_protocol_cases.py`).
//!
//! Each step happens at a time `at` (ms) and does one thing: apply state, certify, submit a
//! response, poll a token, pass a token to the gate, replay a token from its wire form, race two
//! consumers for one token, restart with a new boot epoch, observe, submit a fresh candidate,
//! or check phases, obligations, emissions and adapter calls.
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex};

use crate::common::*;
use halo_core::statefile::ProviderUpdate;
use halo_core::{
    AdapterError, Config, DispatchToken, Event, GateOutcome, Gateway, Id, Nanos, RecordingAdapter,
    Variant,
};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    catalog: String,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    responses: BTreeMap<String, Value>,
    steps: Vec<Value>,
}

struct World {
    catalog: String,
    variant: Variant,
    boot: u64,
    gw: Gateway,
    adapter: RecordingAdapter,
    tokens: BTreeMap<String, Option<DispatchToken>>,
    wires: BTreeMap<String, Vec<u8>>,
    emitted: Vec<String>,
    responses: BTreeMap<String, Value>,
}

impl World {
    fn new(c: &Case) -> World {
        let variant = c
            .variant
            .as_deref()
            .map_or(Variant::Full, |v| v.parse().unwrap());
        World {
            catalog: c.catalog.clone(),
            variant,
            boot: 1,
            gw: Gateway::new(
                catalog_named(&c.catalog),
                Config {
                    variant,
                    boot_epoch: 1,
                    ..Config::default()
                },
            ),
            adapter: RecordingAdapter::new(),
            tokens: BTreeMap::new(),
            wires: BTreeMap::new(),
            emitted: Vec::new(),
            responses: c.responses.clone(),
        }
    }

    fn drain(&mut self) {
        while let Some(e) = self.gw.poll_event() {
            if let Event::Emit { component, .. } = e {
                self.emitted
                    .push(format!("{}/{}", component.response(), component.id()));
            }
        }
        while let Some(r) = self.gw.poll_receipt() {
            // Sealed bodies are written straight from the records (core::canonical); the
            // Value route must give the very same text, or the hash would cover other bytes
            // than a verifier recomputes.
            assert_eq!(
                serde_json::to_string(&r.body.value()).unwrap(),
                r.body.as_str()
            );
        }
    }

    fn response_text(&self, name: &str) -> String {
        self.responses
            .get(name)
            .map(|v| serde_json::to_string(v).unwrap())
            .unwrap_or_else(|| panic!("no response `{name}` declared"))
    }
}

fn ms(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

fn phase_str(w: &World, rid: &str, cid: &str) -> String {
    match w
        .gw
        .component_report(&rid.parse().unwrap(), &cid.parse().unwrap())
    {
        None => "ABSENT".into(),
        Some(c) => match c.reason {
            Some(r)
                if !matches!(
                    c.phase.name(),
                    "EMITTED" | "DISPATCHED" | "OBSERVED_SUCCESS" | "RETAINED"
                ) =>
            {
                format!("{}:{}", c.phase.name(), r.name())
            }
            _ => c.phase.name().to_string(),
        },
    }
}

fn outcome_str(o: &GateOutcome) -> String {
    match o {
        GateOutcome::Dispatched { .. } => "dispatched".into(),
        GateOutcome::Denied { code, .. } => format!("denied:{code}"),
        GateOutcome::Refused { code } => format!("refused:{code}"),
        GateOutcome::EnqueueFailed { .. } => "enqueue_failed".into(),
    }
}

fn step(w: &mut World, s: &Value) -> Result<(), String> {
    let at = ms(&s["at"]);
    let now = Nanos::from_ms(at);
    let obj = s.as_object().unwrap();
    const ACTIONS: [&str; 17] = [
        "healthy",
        "update",
        "certify",
        "revoke_certificate",
        "submit",
        "poll",
        "gate",
        "replay",
        "race",
        "restart",
        "refuse_adapter",
        "observe",
        "timeout",
        "renew",
        "candidate",
        "check",
        "note",
    ];
    let found: Vec<&str> = ACTIONS
        .iter()
        .copied()
        .filter(|a| obj.contains_key(*a))
        .collect();
    let action = match found.as_slice() {
        [one] => *one,
        _ => return Err(format!("a step has exactly one action, found {found:?}")),
    };
    match action {
        "healthy" => healthy_uav(&mut w.gw, at),
        "update" => {
            let u = &s["update"];
            let pu = ProviderUpdate {
                source: u["source"].as_str().unwrap().into(),
                value: u.get("value").cloned().unwrap_or(Value::Null),
                epoch: u["epoch"].as_u64().unwrap(),
                provenance: u["provenance"].as_str().unwrap().parse().unwrap(),
                generated_at_ms: u.get("generated_at").map_or(at, ms),
            };
            let typed = pu
                .typed(w.gw.catalog())
                .map_err(|e| format!("bad update in case: {e}"))?;
            let r = w.gw.handle_source_update(now, typed);
            match (s.get("expect_error").and_then(Value::as_str), r) {
                (None, Ok(())) => {}
                (Some(code), Err(e)) if e.code().name() == code => {}
                (want, got) => {
                    return Err(format!(
                        "update: expected {want:?}, got {:?}",
                        got.map_err(|e| e.code())
                    ));
                }
            }
        }
        "certify" => {
            let c = &s["certify"];
            let text = w.response_text(c["response"].as_str().unwrap());
            certify(
                &mut w.gw,
                at,
                &text,
                c["component"].as_str().unwrap(),
                c["id"].as_str().unwrap(),
                ms(&c["until"]),
            );
        }
        "revoke_certificate" => {
            let id: Id = s["revoke_certificate"].as_str().unwrap().parse().unwrap();
            w.gw.handle_certificate_revoked(now, &id);
        }
        "submit" => {
            let name = s["submit"].as_str().unwrap();
            let text = if name == "@malformed" {
                "{\"response_id\": 7}".to_string()
            } else {
                w.response_text(name)
            };
            let r = w.gw.handle_response(now, text.as_bytes());
            match (s.get("expect_rejected").and_then(Value::as_str), r) {
                (None, Ok(_)) => {}
                (Some(code), Err(rej)) if rej.code().name() == code => {}
                (want, got) => {
                    return Err(format!(
                        "submit: expected rejection {want:?}, got {:?}",
                        got.map(|_| "admitted").map_err(|e| e.code())
                    ));
                }
            }
        }
        "poll" => {
            let name = s["poll"].as_str().unwrap().to_string();
            let tok = w.gw.poll_dispatch();
            match (s.get("component").and_then(Value::as_str), tok) {
                (None, None) => {}
                (Some(cid), Some(t)) if t.component().as_str() == cid => {
                    w.wires.insert(name.clone(), t.to_wire());
                    w.tokens.insert(name, Some(t));
                }
                (want, got) => {
                    return Err(format!(
                        "poll: expected token for {want:?}, got {:?}",
                        got.map(|t| t.component().to_string())
                    ));
                }
            }
        }
        "gate" => {
            let name = s["gate"].as_str().unwrap();
            let tok = match w.tokens.get_mut(name).and_then(Option::take) {
                Some(t) => t,
                None => DispatchToken::from_wire(&w.wires[name]).unwrap(),
            };
            let o = w.gw.final_gate(now, tok, &mut w.adapter);
            let want = s["expect"].as_str().unwrap();
            if outcome_str(&o) != want {
                return Err(format!(
                    "gate {name}: {} , expected {want}",
                    outcome_str(&o)
                ));
            }
        }
        "replay" => {
            let name = s["replay"].as_str().unwrap();
            let tok = DispatchToken::from_wire(&w.wires[name]).unwrap();
            let o = w.gw.final_gate(now, tok, &mut w.adapter);
            let want = s["expect"].as_str().unwrap();
            if outcome_str(&o) != want {
                return Err(format!(
                    "replay {name}: {}, expected {want}",
                    outcome_str(&o)
                ));
            }
        }
        "race" => {
            let name = s["race"].as_str().unwrap();
            let first = w.tokens.get_mut(name).and_then(Option::take).unwrap();
            let second = DispatchToken::from_wire(&w.wires[name]).unwrap();
            let placeholder = Gateway::new(catalog_named(&w.catalog), Config::default());
            let gw = Arc::new(Mutex::new(std::mem::replace(&mut w.gw, placeholder)));
            let barrier = Arc::new(Barrier::new(2));
            let handles: Vec<_> = [first, second]
                .into_iter()
                .map(|tok| {
                    let gw = Arc::clone(&gw);
                    let barrier = Arc::clone(&barrier);
                    std::thread::spawn(move || {
                        let mut ad = RecordingAdapter::new();
                        barrier.wait();
                        let o = gw.lock().unwrap().final_gate(now, tok, &mut ad);
                        (ad.calls.len(), o)
                    })
                })
                .collect();
            let results: Vec<(usize, GateOutcome)> =
                handles.into_iter().map(|h| h.join().unwrap()).collect();
            w.gw = Arc::try_unwrap(gw)
                .map_err(|_| "gateway still shared")
                .unwrap()
                .into_inner()
                .unwrap();
            let enqueues: usize = results.iter().map(|r| r.0).sum();
            let want = s["expect_enqueues"].as_u64().unwrap() as usize;
            if enqueues != want {
                return Err(format!("race: {enqueues} enqueues, expected {want}"));
            }
            let refused: Vec<String> = results
                .iter()
                .filter(|r| r.0 == 0)
                .map(|r| outcome_str(&r.1))
                .collect();
            if let Some(code) = s.get("expect_loser").and_then(Value::as_str)
                && refused != [code.to_string()]
            {
                return Err(format!("race loser: {refused:?}, expected {code}"));
            }
        }
        "restart" => {
            w.drain();
            let mut snapshot = Vec::new();
            for (i, spec) in w.gw.catalog().sources().iter().enumerate() {
                let ix = halo_core::SourceIx(u8::try_from(i).unwrap());
                if let Some(st) = w.gw.snapshot().source(ix) {
                    snapshot.push((
                        spec.name.clone(),
                        halo_core::SourceUpdate {
                            source: ix,
                            state: st.clone(),
                        },
                    ));
                }
            }
            w.boot += 1;
            w.gw = Gateway::new(
                catalog_named(&w.catalog),
                Config {
                    variant: w.variant,
                    boot_epoch: w.boot,
                    ..Config::default()
                },
            );
            for (_, u) in snapshot {
                w.gw.handle_source_update(now, u).unwrap();
            }
            w.tokens.clear();
        }
        "refuse_adapter" => w
            .adapter
            .refuse_next(ms(&s["refuse_adapter"]) as usize, AdapterError::QueueFull),
        "observe" => {
            let o = &s["observe"];
            let r = w.gw.handle_observation(
                now,
                &o["response"].as_str().unwrap().parse().unwrap(),
                &o["component"].as_str().unwrap().parse().unwrap(),
                o["success"].as_bool().unwrap(),
            );
            if let Err(code) = r {
                return Err(format!("observe: {code}"));
            }
        }
        "timeout" => w.gw.handle_timeout(now),
        "renew" => {
            let r = &s["renew"];
            let res = w.gw.renew_rolling(
                now,
                &r["response"].as_str().unwrap().parse().unwrap(),
                &r["component"].as_str().unwrap().parse().unwrap(),
            );
            let want = s["expect"].as_str().unwrap();
            let got = match res {
                Ok(_) => "accepted".to_string(),
                Err(rej) => format!("rejected:{}", rej.code()),
            };
            if got != want {
                return Err(format!("renew: {got}, expected {want}"));
            }
        }
        "candidate" => {
            let mut cand = s["candidate"].clone();
            if let Some(of) = s.get("obligation_of") {
                let rep =
                    w.gw.component_report(
                        &of["response"].as_str().unwrap().parse().unwrap(),
                        &of["component"].as_str().unwrap().parse().unwrap(),
                    )
                    .ok_or("obligation_of names an unknown component")?;
                let oid = rep
                    .obligation
                    .ok_or("obligation_of names a component without an obligation")?;
                cand["obligation"] = Value::from(oid.0);
            }
            let text = serde_json::to_string(&cand).unwrap();
            let r = w.gw.handle_candidate(now, text.as_bytes());
            let want = s["expect"].as_str().unwrap();
            let got = match r {
                Ok(_) => "accepted".to_string(),
                Err(rej) => format!("rejected:{}", rej.code()),
            };
            if got != want {
                return Err(format!("candidate: {got}, expected {want}"));
            }
        }
        "check" => {}
        other => return Err(format!("unknown step `{other}`")),
    }
    w.drain();

    if let Some(exp) = s.get("expect_phases") {
        for (rid, comps) in exp.as_object().unwrap() {
            for (cid, want) in comps.as_object().unwrap() {
                let got = phase_str(w, rid, cid);
                if got != want.as_str().unwrap() {
                    return Err(format!(
                        "{rid}/{cid} is {got}, expected {}",
                        want.as_str().unwrap()
                    ));
                }
            }
        }
    }
    if let Some(n) = s.get("expect_adapter_calls")
        && w.adapter.calls.len() as u64 != n.as_u64().unwrap()
    {
        return Err(format!(
            "{} adapter calls, expected {}",
            w.adapter.calls.len(),
            n
        ));
    }
    if let Some(list) = s.get("expect_emitted") {
        let want: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        if w.emitted != want {
            return Err(format!("emitted {:?}, expected {want:?}", w.emitted));
        }
    }
    if let Some(o) = s.get("expect_obligation") {
        let rid = o["response"].as_str().unwrap();
        let cid = o["component"].as_str().unwrap();
        let want = o["state"].as_str().unwrap();
        let found: Vec<String> =
            w.gw.obligations()
                .filter(|ob| {
                    ob.component.response().as_str() == rid && ob.component.id().as_str() == cid
                })
                .map(|ob| ob.state.name().to_string())
                .collect();
        if found.last().map(String::as_str) != Some(want) {
            return Err(format!(
                "obligation of {rid}/{cid}: {found:?}, expected last {want}"
            ));
        }
        if let Some(req) = o.get("required") {
            let want_req: Vec<&str> = req
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let ob =
                w.gw.obligations()
                    .filter(|ob| {
                        ob.component.response().as_str() == rid && ob.component.id().as_str() == cid
                    })
                    .last()
                    .unwrap();
            let got: Vec<&str> = ob.required.iter().map(Id::as_str).collect();
            if got != want_req {
                return Err(format!(
                    "obligation required {got:?}, expected {want_req:?}"
                ));
            }
        }
        if let Some(route) = o.get("route").and_then(Value::as_str) {
            let ob =
                w.gw.obligations()
                    .filter(|ob| {
                        ob.component.response().as_str() == rid && ob.component.id().as_str() == cid
                    })
                    .last()
                    .unwrap();
            if ob.route.as_str() != route {
                return Err(format!("obligation route {}, expected {route}", ob.route));
            }
        }
        if let Some(scope) = o.get("scope") {
            let want_scope: Vec<&str> = scope
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let ob =
                w.gw.obligations()
                    .filter(|ob| {
                        ob.component.response().as_str() == rid && ob.component.id().as_str() == cid
                    })
                    .last()
                    .unwrap();
            let got: Vec<&str> = ob.scope.iter().map(Id::as_str).collect();
            if got != want_scope {
                return Err(format!("obligation scope {got:?}, expected {want_scope:?}"));
            }
        }
    }
    if let Some(v) = s.get("expect_no_token")
        && v.as_bool() == Some(true)
        && w.gw.poll_dispatch().is_some()
    {
        return Err("a token was ready".into());
    }
    if let Some(b) = s.get("expect_binding_unchanged") {
        let rid = b["response"].as_str().unwrap();
        let cid = b["component"].as_str().unwrap();
        let rep =
            w.gw.component_report(&rid.parse().unwrap(), &cid.parse().unwrap())
                .unwrap();
        let key = format!("binding:{rid}/{cid}");
        let now_b = rep.binding.map(|d| d.to_hex()).unwrap_or_default();
        match w.wires.get(&key) {
            None => {
                w.wires.insert(key, now_b.into_bytes());
            }
            Some(prev) if *prev == now_b.as_bytes() => {}
            Some(_) => return Err(format!("binding of {rid}/{cid} changed")),
        }
    }
    Ok(())
}

#[test]
fn protocol_cases() {
    let cf: CaseFile =
        serde_json::from_slice(&std::fs::read(data_dir().join("protocol/cases.json")).unwrap())
            .unwrap();
    let mut matched = 0;
    let mut failures = Vec::new();
    for c in &cf.cases {
        let mut w = World::new(c);
        let mut result = Ok(());
        for (i, s) in c.steps.iter().enumerate() {
            if let Err(e) = step(&mut w, s) {
                result = Err(format!("step {i}: {e}"));
                break;
            }
        }
        match result {
            Ok(()) => matched += 1,
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    println!("protocol-cases: {matched}/{} matched", cf.cases.len());
    for f in &failures {
        println!("  MISMATCH {f}");
    }
    assert_eq!(cf.cases.len(), 29, "the corpus: every case, pinned");
    assert_eq!(matched, cf.cases.len());
    assert!(failures.is_empty());
}
