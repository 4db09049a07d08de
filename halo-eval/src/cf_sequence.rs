//! The paper's Crazyflie sequence, played against a running `halo-gateway run` with
//! `vehicle.kind = "crazyflie"`, through the same HTTP interfaces a deployment uses.
//!
//! One repetition:
//!
//! 1. Providers publish the localization frame's epoch and the flight volume; the operator arms
//!    and takes off to 0.5 m.
//! 2. The agent's `cf-1`: a notice, REPORT(z_range) and a forward action `f1` to 0.8 m ahead;
//!    `f1` passes the final gate and streams (its fingerprint reaches the vehicle).
//! 3. The support changes before the governed effect: the localization provider publishes a new
//!    frame epoch. `f1` loses its support while streaming (deny-hold).
//! 4. The agent's `cf-2`, planned against the old frame: the next forward action `f2`, its own
//!    REPORT(z_range) `r2`, and a land `l2` after `f2`. The gateway withholds `f2` (and `l2`,
//!    whose parent is withheld) with an obligation, while `r2` is emitted: the range report does
//!    not read the frame.
//! 5. The agent answers the obligation with a fresh backtrack-and-land candidate planned in the
//!    new frame: `f2` as a `backtrack` to the start point and `l2` after it. It re-enters
//!    admission, gets a new binding and token, passes the final gate; the vehicle flies back and
//!    lands.
//!
//! The evidence is the vehicle's own record of the setpoints it took (a JSON-lines file the
//! simulated Crazyflie writes, or on a real vehicle the bridge's log): `f2`'s fingerprint must
//! never appear there.

#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value indexing returns Null, never panics"
)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::demo::{Client, DemoError, phases};

/// What one repetition showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// `f1` was dispatched and the vehicle took its setpoint.
    pub streamed: bool,
    /// `f2` was withheld (with an obligation).
    pub withheld: bool,
    /// `r2`, REPORT(z_range), was emitted while `f2` was withheld.
    pub range_report: bool,
    /// Setpoints the vehicle took that match the withheld `f2` (must be 0).
    pub stale_at_vehicle: usize,
    /// The fresh candidate was readmitted, dispatched with a new binding, and the vehicle landed.
    pub readmitted: bool,
    /// The bindings `f1` and the fresh `f2` got differ (a fresh binding, not a reused one).
    pub fresh_binding: bool,
}

/// The start point (local NED) and the two forward targets.
const START: [f64; 4] = [0.0, 0.0, -0.5, 0.0];
const F1: [f64; 4] = [0.8, 0.0, -0.5, 0.0];
const F2: [f64; 4] = [1.6, 0.0, -0.5, 0.0];

/// The rounded fingerprint the simulated Crazyflie records for a NED target.
#[allow(clippy::cast_possible_truncation, reason = "the radio carries f32")]
pub fn fingerprint(t: [f64; 4]) -> String {
    // NED to the Crazyflie's frame: x = north, y = −east, z = −down, yaw = −yaw.
    sitl::sim::crazyflie::fingerprint(t[0] as f32, -t[1] as f32, -t[2] as f32, -t[3] as f32)
}

fn forward(kind: &str, id: &str, t: [f64; 4], frame_epoch: u64, cert: &str) -> Value {
    let [n, e, d, yaw] = t;
    json!({"id": id, "type": kind,
           "payload": {"frame": "local_ned", "north_m": n, "east_m": e, "down_m": d, "yaw_deg": yaw, "duration_s": 4.0},
           "support": {"localization": {"epoch": frame_epoch}, "volume": {"epoch": 1, "provenance": "bench-net"}},
           "certificate": cert})
}

/// The localization frame's epoch and the flight volume, every 200 ms, as providers do.
pub fn providers(
    url: String,
    token: String,
    frame_epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    super::demo::feed(url, token, stop, move |at| {
        vec![
            (
                "localization",
                json!({"value": null, "epoch": frame_epoch.load(Ordering::Relaxed), "provenance": "lighthouse", "generated_at_unix_ms": at}),
            ),
            (
                "volume",
                json!({"value": {"north_min": -1.0, "north_max": 2.5, "east_min": -1.5, "east_max": 1.5, "down_min": -2.0, "down_max": 0.1},
                       "epoch": 1, "provenance": "bench-net", "generated_at_unix_ms": at}),
            ),
        ]
    })
}

fn vehicle_fingerprints(log: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["source"] == "position")
        .filter_map(|v| v["fingerprint"].as_str().map(str::to_owned))
        .collect()
}

fn altitude(c: &Client) -> f64 {
    -c.status()["vehicle"]["position_ned_m"][2]
        .as_f64()
        .unwrap_or(0.0)
}

fn flying(c: &Client) -> bool {
    c.status()["vehicle"]["landed_state"] == "in air"
}

/// Plays one repetition. `vehicle_log` is the vehicle's own setpoint record; `rep` numbers the
/// response ids; `frame_epoch` is what the providers publish.
///
/// # Errors
/// [`DemoError`] when a step cannot run (the gateway refuses a request, the vehicle does not
/// respond in time).
pub fn play(
    c: &mut Client,
    vehicle_log: &Path,
    frame_epoch: &AtomicU64,
    rep: u32,
) -> Result<Outcome, DemoError> {
    let mut out = Outcome::default();
    if !c.wait(10, |c| c.status()["vehicle"]["link_up"] == true) {
        return Err(DemoError("no telemetry from the Crazyflie".into()));
    }
    // 1. Arm, take off to 0.5 m.
    let (st, v) = c.operator("arm", &json!({}));
    if st != 200 {
        return Err(DemoError(format!("arming refused: {v}")));
    }
    if !c.wait(5, |c| c.status()["vehicle"]["armed"] == true) {
        return Err(DemoError("the Crazyflie did not arm".into()));
    }
    c.say("operator: armed; takeoff to 0.5 m");
    let (st, v) = c.operator("takeoff", &json!({"altitude_m": 0.5}));
    if st != 200 {
        return Err(DemoError(format!("takeoff refused: {v}")));
    }
    if !c.wait(15, |c| flying(c) && altitude(c) > 0.45) {
        return Err(DemoError("the Crazyflie did not climb to 0.5 m".into()));
    }
    c.say(&format!("airborne at {:.2} m", altitude(c)));
    std::thread::sleep(Duration::from_millis(400));

    // 2. A forward action retained and streaming, with REPORT(z_range).
    let e0 = frame_epoch.load(Ordering::Relaxed);
    let r1id = format!("cf-{rep}-1");
    let z = c.status()["vehicle"]["z_range_m"].as_f64().unwrap_or(0.5);
    let r1 = json!({"response_id": r1id, "agent_id": "cf-planner", "generation": 2 * rep + 1,
    "catalog": {"id": "crazyflie", "version": 1},
    "components": [
        {"id": "n1", "type": "notice", "payload": {"text": "moving forward 0.8 m"}},
        {"id": "r1", "type": "report", "payload": {"sensor": "z_range", "value": z, "unit": "m"}},
        forward("forward", "f1", F1, e0, &format!("cert-{rep}-f1")),
    ]});
    c.certify(&r1, "f1", &format!("cert-{rep}-f1"))?;
    c.say(&format!(
        "agent sends {r1id}: notice n1, REPORT(z_range) r1, forward f1 to 0.8 m ahead (frame epoch {e0})"
    ));
    let rep1 = c.submit("/v1/responses", &r1)?;
    c.say(&format!("gateway answers: {}", phases(&rep1)));
    let fp1 = fingerprint(F1);
    out.streamed = c.wait(5, |_| vehicle_fingerprints(vehicle_log).contains(&fp1));
    c.say(if out.streamed {
        "f1 is streaming: the Crazyflie took its setpoint"
    } else {
        "f1 did not reach the Crazyflie"
    });
    std::thread::sleep(Duration::from_millis(700));

    // 3. The support changes before the governed effect: a new localization frame.
    frame_epoch.store(e0 + 1, Ordering::Relaxed);
    c.say(&format!(
        "the localization provider publishes frame epoch {} while the agent plans against {e0}",
        e0 + 1
    ));
    std::thread::sleep(Duration::from_millis(500));

    // 4. The next forward action, planned in the old frame, with its range report and a land.
    let r2id = format!("cf-{rep}-2");
    let z = c.status()["vehicle"]["z_range_m"].as_f64().unwrap_or(0.5);
    let r2 = json!({"response_id": r2id, "agent_id": "cf-planner", "generation": 2 * rep + 2,
    "catalog": {"id": "crazyflie", "version": 1},
    "components": [
        forward("forward", "f2", F2, e0, &format!("cert-{rep}-f2")),
        {"id": "r2", "type": "report", "payload": {"sensor": "z_range", "value": z, "unit": "m"}},
        {"id": "l2", "type": "land", "payload": {}, "requires": [{"id": "f2", "phase": "observed_success"}]},
    ]});
    c.certify(&r2, "f2", &format!("cert-{rep}-f2"))?;
    c.say(&format!(
        "agent sends {r2id}: forward f2 to 1.6 m planned in frame {e0}, REPORT(z_range) r2, land l2 after f2"
    ));
    let rep2 = c.submit("/v1/responses", &r2)?;
    c.say(&format!("gateway answers: {}", phases(&rep2)));
    let comp = |rep: &Value, id: &str| -> Value {
        rep["components"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["id"] == id).cloned())
            .unwrap_or(Value::Null)
    };
    out.withheld = comp(&rep2, "f2")["phase"] == "withheld";
    out.range_report = comp(&rep2, "r2")["phase"] == "emitted";
    let Some(oid) = comp(&rep2, "f2")["obligation"].as_u64() else {
        return Err(DemoError(format!("no obligation for f2: {rep2}")));
    };
    std::thread::sleep(Duration::from_millis(500));

    // 5. The fresh backtrack-and-land candidate, planned in the new frame.
    let cand_comps = json!([
        forward("backtrack", "f2", START, e0 + 1, &format!("cert-{rep}-f2b")),
        {"id": "l2", "type": "land", "payload": {}, "requires": [{"id": "f2", "phase": "observed_success"}]},
    ]);
    let as_response = json!({"response_id": r2id, "agent_id": "cf-planner", "generation": 2 * rep + 3,
        "catalog": {"id": "crazyflie", "version": 1}, "components": cand_comps.clone()});
    c.certify(&as_response, "f2", &format!("cert-{rep}-f2b"))?;
    let cand = json!({"obligation": oid, "response_id": r2id, "agent_id": "cf-planner", "generation": 2 * rep + 3,
        "catalog": {"id": "crazyflie", "version": 1}, "components": cand_comps});
    c.say(&format!(
        "agent answers obligation {oid}: backtrack f2 to the start point and land l2 after it, in frame {}",
        e0 + 1
    ));
    let rep3 = c.submit(&format!("/v1/obligations/{oid}/candidates"), &cand)?;
    c.say(&format!("gateway answers: {}", phases(&rep3["current"])));
    let readmitted = rep3["readmitted"].as_array().is_some_and(|a| !a.is_empty());
    let b1 = comp(&rep1, "f1")["binding"].clone();
    let b2 = comp(&rep3["current"], "f2")["binding"].clone();
    out.fresh_binding = !b1.is_null() && !b2.is_null() && b1 != b2;
    let fpb = fingerprint(START);
    let back = c.wait(10, |_| vehicle_fingerprints(vehicle_log).contains(&fpb));
    let landed = c.wait(20, |c| !flying(c) && altitude(c) < 0.05);
    c.say(if landed {
        "backtracked and landed"
    } else {
        "did not land in time"
    });
    out.readmitted = readmitted && back && landed;
    let _ = c.operator("disarm", &json!({}));
    c.wait(5, |c| c.status()["vehicle"]["armed"] == false);
    out.stale_at_vehicle =
        usize::from(vehicle_fingerprints(vehicle_log).contains(&fingerprint(F2)));
    Ok(out)
}

/// Runs the sequence once against a fresh in-process service on the embedded simulated
/// Crazyflie, narrated: `halo-gateway demo --vehicle crazyflie`. `out` receives the receipts,
/// the responses sent, the vehicle's and the bridge's setpoint logs, and the state directory.
///
/// # Errors
/// [`DemoError`] when a step cannot run.
pub async fn demo(out: &Path, quiet: bool) -> Result<(Outcome, bool), DemoError> {
    use crate::service::Service;
    use crate::service::config::VehicleKind;
    let mut cfg = super::demo::demo_config(out)?;
    cfg.vehicle.kind = VehicleKind::Crazyflie;
    let catalog = cfg.catalog().map_err(|e| DemoError(e.to_string()))?;
    let (cfg, embedded, vehicle) =
        crate::embedded::start(cfg, Some(&out.join("vehicle-setpoints.jsonl")))
            .await
            .map_err(|e| DemoError(e.to_string()))?;
    let svc = Service::start_with(cfg, catalog.clone(), embedded.keeping(vehicle))
        .await
        .map_err(super::demo::err("service"))?;
    let t0 = Instant::now();
    if !quiet {
        println!(
            "[{:>6.2}s] halo-gateway run on {} with the embedded simulated Crazyflie",
            0.0,
            svc.url()
        );
    }
    let seen = Arc::new(std::sync::Mutex::new(super::demo::Seen::default()));
    let narr = super::demo::narrator(
        "the Crazyflie",
        svc.url(),
        svc.credentials().operator.expose().to_string(),
        t0,
        quiet,
        Arc::clone(&seen),
    );
    let frame = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let feeds = providers(
        svc.url(),
        svc.credentials().provider.expose().to_string(),
        Arc::clone(&frame),
        Arc::clone(&stop),
    );
    let mut client = Client::for_service(&svc, catalog, out, t0, quiet)?;
    let log = out.join("vehicle-setpoints.jsonl");
    let fr = Arc::clone(&frame);
    let result = tokio::task::spawn_blocking(move || play(&mut client, &log, &fr, 1))
        .await
        .map_err(super::demo::err("demo script"))?;
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || feeds.join()).await;
    super::demo::stop_service(svc, out).await?;
    let _ = tokio::task::spawn_blocking(move || narr.join()).await;
    let outcome = result?;
    let picture = super::demo::draw_run(&out.join("receipts.jsonl"), out).map_err(DemoError)?;
    if !quiet {
        println!(
            "the flight's picture: {} ({picture})",
            out.join("flight.svg").display()
        );
    }
    let receipts = super::demo::read_receipts(&out.join("receipts.jsonl"))?;
    let key = crate::audit::public_key(&out.join("receipts.pub").display().to_string())
        .map_err(|e| DemoError(e.to_string()))?;
    let signed = crate::audit::verify(&receipts, Some(&key))
        .is_ok_and(|v| v.ends_final && v.covered == Some(v.first + v.count));
    Ok((outcome, signed))
}
