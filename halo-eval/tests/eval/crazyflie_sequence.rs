//! The paper's Crazyflie sequence (Figure 2, Table 4's first row), end to end: the real
//! `halo-gateway run` process with `vehicle.kind = "crazyflie"` on the embedded simulated
//! Crazyflie (bitcraze's crazyflie-lib over crazyflie-link's `ConnectionTrait`), each repetition
//! from a cold start (a new process, a new state directory), played through HTTP by
//! `runtime::cf_sequence::play`.
//!
//! Per repetition four cells: the stale forward action withheld, REPORT(z_range) emitted
//! meanwhile, no setpoint matching the withheld action in the vehicle's own log, the fresh
//! backtrack-and-land candidate readmitted (new binding, flown, landed). The receipt chain of each
//! run is verified with `halo-gateway audit verify`.
//!
//! `CF_SEQUENCE_REPS` sets the repetitions (CI: 2; `scripts/crazyflie_sequence.sh`: 10).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs,
    reason = "tests"
)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use halo_eval::cf_sequence::{Outcome, play, providers};
use halo_eval::demo::Client;
use halo_gateway::service::Config;

use crate::common;

fn one(dir: &Path, rep: u32) -> (Outcome, bool) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let state = dir.join("state");
    let g = common::Spawned::start_args(
        common::BIN,
        dir,
        &format!(
            "[vehicle]\nkind = \"crazyflie\"\nurl = \"sim\"\n\
             [listen]\nhttp = \"127.0.0.1:0\"\n[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            state.display()
        ),
        &state,
        &[],
        &[
            "--sim-setpoint-log",
            &dir.join("vehicle.jsonl").display().to_string(),
        ],
    );
    let mut cfg = Config::default();
    cfg.vehicle.kind = halo_gateway::service::config::VehicleKind::Crazyflie;
    let cat = cfg.catalog().unwrap();
    let frame = Arc::new(AtomicU64::new(1));
    let halt = Arc::new(AtomicBool::new(false));
    let feeds = providers(
        g.url.clone(),
        g.creds[1].clone(),
        frame.clone(),
        halt.clone(),
    );
    let mut c = Client::new(
        g.url.clone(),
        g.creds.clone(),
        cat,
        std::fs::File::create(dir.join("responses.jsonl")).unwrap(),
        true,
    );
    let out = play(&mut c, &dir.join("vehicle.jsonl"), &frame, rep);
    halt.store(true, Ordering::Relaxed);
    let _ = feeds.join();
    let code = g.stop();
    let out = out.unwrap_or_else(|e| panic!("repetition {rep}: {e}"));
    assert_eq!(code, 0, "repetition {rep}: the gateway's exit status");
    // The receipts verify (hash chain, every digest, the checkpoints' signatures).
    let receipts = dir.join("state").join("receipts").join("boot-1.jsonl");
    let key = dir.join("state").join("audit-key.pub");
    let v = Command::new(common::BIN)
        .args(["audit", "verify", "--key"])
        .arg(&key)
        .arg(&receipts)
        .output()
        .unwrap();
    (out, v.status.success())
}

#[test]
fn crazyflie_sequence() {
    let _timing = common::shared();
    let reps: u32 = std::env::var("CF_SEQUENCE_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let root = std::env::temp_dir().join(format!("halo-cf-seq-{}", std::process::id()));
    let mut cells = [0u32; 4];
    let (mut streamed, mut fresh_bindings, mut verified) = (0, 0, 0);
    for rep in 1..=reps {
        let (o, receipts_ok) = one(&root.join(format!("rep-{rep}")), rep);
        let yes = |b: bool| if b { "yes" } else { "NO" };
        println!(
            "  repetition {rep}: streamed {}, withheld {}, range report {}, stale setpoints at the vehicle {}, readmitted {}, new binding {}, receipts verified {}",
            yes(o.streamed),
            yes(o.withheld),
            yes(o.range_report),
            o.stale_at_vehicle,
            yes(o.readmitted),
            yes(o.fresh_binding),
            yes(receipts_ok)
        );
        cells[0] += u32::from(o.withheld);
        cells[1] += u32::from(o.range_report);
        cells[2] += u32::from(o.stale_at_vehicle == 0);
        cells[3] += u32::from(o.readmitted);
        streamed += u32::from(o.streamed);
        fresh_bindings += u32::from(o.fresh_binding);
        verified += u32::from(receipts_ok);
    }
    let stale = reps - cells[2];
    println!(
        "crazyflie sequence, {reps} repetitions from cold start: withheld {}/{reps}, range reports {}/{reps}, matching stale setpoints at the vehicle {stale}/{reps}, fresh readmissions {}/{reps} (forward action streamed {streamed}/{reps}, new bindings {fresh_bindings}/{reps}, receipts verified {verified}/{reps})",
        cells[0], cells[1], cells[3]
    );
    let matched: u32 = cells.iter().sum();
    println!("crazyflie-sequence: {matched}/{} matched", 4 * reps);
    assert_eq!(matched, 4 * reps, "every cell of every repetition");
    assert_eq!(streamed, reps);
    assert_eq!(fresh_bindings, reps);
    assert_eq!(verified, reps);
    let _ = std::fs::remove_dir_all(&root);
}

/// A clean stop while the Crazyflie flies lands it first (once the process is gone the
/// emergency-stop watchdog would cut the motors in the air), then exits 0.
#[test]
fn stopping_the_service_lands_a_flying_crazyflie_first() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-cf-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let log = dir.join("vehicle.jsonl");
    let g = common::Spawned::start_args(
        common::BIN,
        &dir,
        &format!(
            "[vehicle]\nkind = \"crazyflie\"\nurl = \"sim\"\n\
             [listen]\nhttp = \"127.0.0.1:0\"\n[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            state.display()
        ),
        &state,
        &[],
        &["--sim-setpoint-log", &log.display().to_string()],
    );
    let auth = format!("Bearer {}", g.creds[2]);
    let status = || -> serde_json::Value {
        let body = ureq::get(format!("{}/v1/status", g.url))
            .header("Authorization", &auth)
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    };
    let operator = |action: &str, body: &str| {
        ureq::post(format!("{}/v1/operator/{action}", g.url))
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body)
            .unwrap()
            .status()
            .as_u16()
    };
    let wait = |cond: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if cond(&status()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    };
    assert!(wait(&|v| v["vehicle"]["link_up"] == true));
    assert_eq!(operator("arm", "{}"), 200);
    assert!(wait(&|v| v["vehicle"]["armed"] == true));
    assert_eq!(operator("takeoff", "{\"altitude_m\": 0.5}"), 200);
    assert!(wait(&|v| v["vehicle"]["landed_state"] == "in air"
        && v["vehicle"]["position_ned_m"][2].as_f64().unwrap_or(0.0)
            < -0.3));
    assert_eq!(g.stop(), 0, "a clean stop");
    // The last setpoint the vehicle took is the land, and the gateway's last word is that it
    // stopped with the vehicle on the ground and disarmed.
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["source"], "hl_land", "{last}");
    let receipts = std::fs::read_to_string(state.join("receipts").join("boot-1.jsonl")).unwrap();
    let end = receipts
        .lines()
        .rfind(|l| l.contains("\"shutdown\"") && l.contains("\"flying\""))
        .expect("a shutdown record");
    assert!(end.contains("\"flying\":false"), "{end}");
    let _ = std::fs::remove_dir_all(&dir);
}
