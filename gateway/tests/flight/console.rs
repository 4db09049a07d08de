//! The operator's console in a real browser: Debian's headless Chromium, driven over WebDriver by
//! `tests/py/console.py` (selenium), against the real `halo-gateway run` flying the simulated
//! PX4. The browser reads only what the page shows; the evidence of what reached the vehicle is
//! the simulator's own record of the setpoints its controller took.
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;

use common::browser::Operator;
use common::service::*;

/// Load the page, watch the components change phase, approve a certificate from the page and
/// see the action dispatch at the vehicle, hold from the page and see the vehicle take no more
/// of it, and see an AoI bar turn when its source goes stale.
#[test]
fn the_operator_flies_from_the_console() {
    let _timing = common::shared();
    let dir = tmp("console");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();
    let providers = Providers::start(&u, &g.provider);
    take_off(&g, &sim);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let shot = |op: &mut Operator, name: &str| {
        let f = shots.join(format!("console-{name}.png"));
        op.must(&format!("shot {}", f.display()));
        println!("  screenshot: {}", f.display());
    };
    let mut op = Operator::start();
    let mut checks: Vec<(&str, bool)> = Vec::new();

    // The page, from the operator's listener, with the credential typed in.
    let opened = op.must(&format!("open {}/ {}", g.proc.operator_url, g.operator));
    checks.push((
        "the page loads and follows the event stream; the credential is never in a URL",
        opened["title"] == "halo-gateway console" && opened["url_has_token"] == false,
    ));
    let control = op.must("text control");
    checks.push((
        "the vehicle panel says who flies in words",
        control["text"] == "the gateway (handed over by the operator)",
    ));

    // The running example's first action, certified by a provider: dispatched on the page.
    let submit = |env: &Value| {
        let (st, rep) = post(
            &format!("{u}/v1/responses"),
            Some(&g.agent),
            env.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{rep}");
        rep
    };
    let r1 = json!({"response_id": "cs-1", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [route("e1", [6.0, 2.0, -6.0, 0.0], 7, "cert-e1"),
            {"id": "e2", "type": "status", "payload": {"text": "Leaving home"}, "requires": [{"id": "e1", "phase": "dispatched"}]}]});
    certify(&g, &r1, "e1", "cert-e1");
    submit(&r1);
    op.must("wait_phase cs-1/e1 dispatched,observed_success 10");
    op.must("wait_phase cs-1/e2 emitted 10");

    // An action that names a certificate nobody issued yet: withheld, with a refresh request.
    let e3 = route("e3", [9.0, 4.0, -6.0, 90.0], 7, "cert-op-1");
    let r2 = json!({"response_id": "cs-2", "agent_id": "planner-1", "generation": 2,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [e3.clone()]});
    let rep = submit(&r2);
    assert_eq!(
        rep["components"][0]["reason"], "CERTIFICATE_UNKNOWN",
        "{rep}"
    );
    let oid = rep["components"][0]["obligation"].as_u64().unwrap();
    let digest = digest_of(&r2, "e3");
    let row = op.must("wait_phase cs-2/e3 withheld 10");
    checks.push((
        "the withheld action shows its reason in words and the exact digest to approve",
        row["digest"] == digest.as_str()
            && row["certificate"] == "cert-op-1"
            && row["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("CERTIFICATE_UNKNOWN: ")),
    ));
    // Who sent it: the table's caption and the log's admission line name the agent principal
    // (the default `[auth]` one is `agent`).
    let caption = op.must("caption cs-2");
    let log = op.must("log");
    let admitted = log["lines"].as_array().unwrap().iter().any(|l| {
        l.as_str()
            .is_some_and(|t| t.ends_with("admitted cs-2 from agent (e3)"))
    });
    checks.push((
        "the response's table and the log's admission name the agent principal that sent it",
        caption["text"] == "cs-2 — sent by agent" && admitted,
    ));
    let fp_e3 = fp(9.0, 4.0, -6.0, 90.0);
    std::thread::sleep(Duration::from_millis(600));
    let plan = op.must("plan");
    let marks = plan["marks"].as_array().unwrap();
    let marked = |kind: &str, target: Option<&str>| {
        marks
            .iter()
            .any(|m| m["kind"] == kind && target.is_none_or(|t| m["target"] == t))
    };
    checks.push((
        "the plan view marks the corridor, the vehicle, the flown and the withheld target",
        marked("corridor", None)
            && marked("vehicle", None)
            && (marked("current", Some("cs-1/e1")) || marked("flown", Some("cs-1/e1")))
            && marked("withheld", Some("cs-2/e3")),
    ));
    shot(&mut op, "withheld");

    // The operator approves from the page; the agent's fresh candidate then dispatches.
    let t_approve = sim.now_ns();
    let approved = op.must("approve cs-2/e3");
    checks.push((
        "approving answers in words and nothing reached the vehicle before it",
        approved["code"] == "OK"
            && approved["text"].as_str().is_some_and(|t| {
                t.contains(&format!("cert-op-1 covers cs-2/e3 ({}", &digest[..12]))
            })
            && sim.taken_after(&fp_e3, 0) == 0,
    ));
    let cand = json!({"obligation": oid, "response_id": "cs-2", "agent_id": "planner-1", "generation": 3,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [e3]});
    let (st, v) = post(
        &format!("{u}/v1/obligations/{oid}/candidates"),
        Some(&g.agent),
        cand.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    op.must("wait_phase cs-2/e3 dispatched,observed_success 10");
    wait_until(10, "e3 at the vehicle", || {
        sim.taken_after(&fp_e3, t_approve) > 0
    });
    checks.push((
        "the readmitted action is the digest the page approved, and the vehicle flies it",
        v["readmitted"][0]["digest"] == digest.as_str() && sim.taken_after(&fp_e3, t_approve) > 0,
    ));
    let seen = op.must("seen");
    checks.push((
        "the page showed e3 change phase live: withheld, then dispatched (and reached)",
        [
            json!(["withheld", "dispatched"]),
            json!(["withheld", "dispatched", "observed_success"]),
            json!(["withheld", "observed_success"]),
        ]
        .contains(&seen["seen"]["cs-2/e3"]),
    ));
    shot(&mut op, "dispatched");

    // On a tablet the page fits its width (panels stack; no sideways scrolling).
    let tablet = op.must("fits 768 1024");
    shot(&mut op, "tablet");
    let laptop = op.must("fits 1280 1100");
    checks.push((
        "readable on a tablet and a laptop: no sideways scrolling at 768 or 1280 px",
        tablet["fits"] == true && laptop["fits"] == true,
    ));
    println!("  widths: tablet {tablet}, laptop {laptop}");

    // Hold from the page while e3 streams: the vehicle takes no more of it.
    let streaming = sim.taken_after(&fp_e3, sim.now_ns().saturating_sub(300_000_000)) > 0;
    let held = op.must("click act-hold");
    let t_hold = sim.now_ns();
    std::thread::sleep(Duration::from_millis(1500));
    let st = get(&format!("{u}/v1/status"), None).1;
    let after_hold = sim.taken_after(&fp_e3, t_hold + 300_000_000);
    let control = op.must("text control");
    checks.push((
        "Hold from the page: the gateway holds and the vehicle takes no more of e3",
        held["code"] == "OK"
            && streaming
            && st["vehicle"]["control"] == "operator_hold"
            && after_hold == 0
            && control["text"] == "held by the operator: no agent action dispatches",
    ));
    shot(&mut op, "held");
    let released = op.must("click act-release");
    wait_until(5, "released", || {
        get(&format!("{u}/v1/status"), None).1["vehicle"]["control"] == "gateway"
    });
    checks.push(("Release from the page", released["code"] == "OK"));

    // Revoke from the page while an action streams: it loses its support, the vehicle holds.
    let r3 = json!({"response_id": "cs-3", "agent_id": "planner-1", "generation": 4,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [route("e4", [5.0, 6.0, -6.0, 180.0], 7, "cert-e4")]});
    certify(&g, &r3, "e4", "cert-e4");
    submit(&r3);
    let fp_e4 = fp(5.0, 6.0, -6.0, 180.0);
    wait_until(10, "e4 at the vehicle", || sim.taken_after(&fp_e4, 0) > 0);
    let revoked = op.must("revoke cs-3/e4");
    let t_revoke = sim.now_ns();
    std::thread::sleep(Duration::from_millis(1500));
    let said = get(&format!("{u}/v1/status"), None).1["last_decisions"].clone();
    checks.push((
        "Revoke from the page: e4 loses its support and the vehicle takes no more of it",
        revoked["code"] == "OK"
            && sim.taken_after(&fp_e4, t_revoke + 300_000_000) == 0
            && said.as_array().is_some_and(|d| {
                d.iter().any(|x| {
                    x["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("HALO: e4 lost support, hold"))
                })
            }),
    ));
    // The track as drawn, judged in the picture's own pixels against the simulator's own
    // position: the picture's scale and offset come from the marks of e1 (N 6, E 2) and e3
    // (N 9, E 4), and the track's last point, read back through them, is where the simulated
    // vehicle is (north, east; it holds since the revoke, so the page's half-second poll is
    // no matter).
    let truth = sim.control.view().position;
    let plan = op.must("plan");
    let marks = plan["marks"].as_array().unwrap();
    let px = |v: &Value| Some((v.get(0)?.as_f64()?, v.get(1)?.as_f64()?));
    let at = |target: &str| {
        marks
            .iter()
            .find(|m| m["target"] == target)
            .and_then(|m| px(&m["at"]))
    };
    let track: Vec<(f64, f64)> = marks
        .iter()
        .find(|m| m["kind"] == "track")
        .and_then(|m| m["points"].as_array())
        .map(|ps| ps.iter().filter_map(px).collect())
        .unwrap_or_default();
    let read_back = match (at("cs-1/e1"), at("cs-2/e3"), track.last()) {
        (Some(e1), Some(e3), Some(&last)) => {
            // x grows east, y grows south: x = x1 + (e - 2) k, y = y1 - (n - 6) k.
            let k = (e3.0 - e1.0) / (4.0 - 2.0);
            Some((6.0 - (last.1 - e1.1) / k, 2.0 + (last.0 - e1.0) / k))
        }
        _ => None,
    };
    let off_m = read_back.map(|(n, e)| (n - truth[0]).hypot(e - truth[1]));
    checks.push((
        "the plan view draws the track it names: its end, read back in metres, is where the vehicle is",
        track.len() >= 2 && off_m.is_some_and(|d| d < 0.5),
    ));
    println!(
        "  track: {} points; its end {} from the simulator's position (N {:.2} m, E {:.2} m)",
        track.len(),
        off_m.map_or("not read".to_string(), |d| format!("{d:.2} m")),
        truth[0],
        truth[1]
    );
    println!("  after the revocation: {said}");

    // The mission contract from the page: registered (the panel shows it), then registered
    // again, which the gateway refuses with a code the page shows.
    let workflow =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/contract-workflow.json");
    let first = op.must(&format!("register {} ops-lead", workflow.display()));
    wait_until(5, "the contract panel", || {
        op.must("contract")["text"]
            .as_str()
            .is_some_and(|t| t.contains("root"))
    });
    let panel = op.must("contract");
    let again = op.must(&format!("register {} ops-lead", workflow.display()));
    checks.push((
        "a contract registered from the page, and a second one refused with its code",
        first["code"] == "OK"
            && panel["text"]
                .as_str()
                .is_some_and(|t| t.contains("committed effects"))
            && again["code"] != "OK"
            && again["text"]
                .as_str()
                .is_some_and(|t| t.contains("refused")),
    ));
    println!("  second registration: {}", again["text"]);
    let reauth = op.must("reauthorize survey");
    println!("  reauthorize: {}", reauth["text"]);
    checks.push((
        "Reauthorize from the page shows the gateway's answer",
        reauth["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Reauthorize: ")),
    ));

    let fresh = |op: &mut Operator, name: &str| {
        op.must("sources")["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == name)
            .map(|s| s["stale"] == false)
    };
    let bars = op.must("sources");
    let by = |name: &str| {
        bars["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == name)
            .map(|s| s["by"].clone())
    };
    checks.push((
        "the AoI bars name the provider principal whose update each source holds, and none for the vehicle's own",
        by("traffic") == Some(json!("by provider"))
            && by("map") == Some(json!("by provider"))
            && by("battery") == Some(Value::Null),
    ));
    checks.push((
        "the AoI bars show traffic, map and bounds fresh",
        ["traffic", "map", "bounds"]
            .iter()
            .all(|s| fresh(&mut op, s) == Some(true)),
    ));
    providers.stop.store(true, Ordering::Relaxed);
    let turned = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        fresh(&mut op, "traffic") == Some(false)
    });
    checks.push(("the traffic bar turns when its source goes stale", turned));
    drop(providers);

    // Land takes two clicks: the first only asks; the second lands.
    let asked = op.must("click_only act-land");
    std::thread::sleep(Duration::from_millis(500));
    let mode_after_one = get(&format!("{u}/v1/status"), None).1["vehicle"]["mode"].clone();
    let landed = op.must("click act-land");
    wait_until(10, "AUTO.LAND", || {
        get(&format!("{u}/v1/status"), None).1["vehicle"]["mode"] == "AUTO.LAND"
    });
    checks.push((
        "Land from the page: the first click asks, the second lands",
        asked["text"] == "Confirm land" && mode_after_one != "AUTO.LAND" && landed["code"] == "OK",
    ));

    for (name, good) in &checks {
        println!("  {name:<90} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = checks.iter().filter(|(_, good)| *good).count();
    println!("console: {matched}/{} matched", checks.len());
    drop(op);
    assert_eq!(g.stop(), 0);
    assert_eq!((matched, checks.len()), (19, 19));
}
