//! The wire format, checked against bitcraze's own Python library: the commands a real pacer
//! produces are sent through the bridge (crazyflie-lib) to the simulated Crazyflie, which keeps
//! every packet it received; `tests/py/cflib_wire.py` encodes the same commands with cflib.
//! Payloads must be byte-identical; in the header, bits 2–3 (link flow control, which cflib sets
//! and crazyflie-lib leaves clear) are masked.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs,
    reason = "tests"
)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crazyflie_bridge::pacer::{Config, HoldReason, Out, Pacer};
use crazyflie_bridge::shell::send;
use crazyflie_bridge::telemetry::sup;
use crazyflie_bridge::{Mono, Setpoint, Telemetry};
use crazyflie_lib::{Crazyflie, NoTocCache};
use crazyflie_link::Connection;
use sitl::sim::crazyflie::{CfSimConfig, SimCrazyflie};

/// The commands a pacer emits over a short flight: arm, takeoff, watchdog, a streamed setpoint,
/// the hold at its end (notify-stop + go_to), a land.
fn pacer_commands() -> Vec<Out> {
    let mut p = Pacer::new(Config::default());
    let mut outs = Vec::new();
    p.link_opened(Mono(0));
    p.arm(Mono(0), true).unwrap();
    p.on_telemetry(
        Mono(1),
        &Telemetry::Supervisor {
            bits: sup::IS_ARMED | sup::CAN_FLY,
        },
    );
    p.on_telemetry(Mono(1), &Telemetry::Yaw { yaw_deg: -37.5 });
    p.on_telemetry(
        Mono(1),
        &Telemetry::State {
            position_m: [0.25, -0.125, 0.0],
            velocity_mps: [0.0; 3],
        },
    );
    p.takeoff(Mono(2), 0.8).unwrap();
    p.handle_timeout(Mono(3));
    let sp = Setpoint::from_ned(1.3, 0.45, -0.75, 212.0);
    p.try_enqueue(Mono(4), sp, [1; 32], Mono::from_ms(600))
        .unwrap();
    p.on_telemetry(
        Mono(5),
        &Telemetry::State {
            position_m: [1.1, -0.4, 0.74],
            velocity_mps: [0.1, 0.0, 0.0],
        },
    );
    p.hold(Mono(6), HoldReason::Requested).unwrap();
    p.try_enqueue(Mono(7), sp, [2; 32], Mono::from_ms(600))
        .unwrap();
    p.land(Mono(8)).unwrap();
    p.arm(Mono(9), false).unwrap();
    while let Some(o) = p.poll_transmit() {
        outs.push(o);
    }
    outs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_sends_what_cflib_sends() {
    let outs = pacer_commands();
    let kinds: Vec<String> = outs
        .iter()
        .map(|o| {
            serde_json::to_value(o).unwrap()["command"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    // Every kind of command the bridge uses is in the corpus.
    for k in [
        "arm",
        "takeoff",
        "estop_watchdog",
        "position",
        "notify_stop",
        "go_to",
        "land",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} missing from {kinds:?}");
    }

    // Ours: through crazyflie-lib into the simulated vehicle's packet record.
    let v = SimCrazyflie::start(CfSimConfig::default(), None).unwrap();
    let cf = Crazyflie::connect_from_link(Connection::new(Box::new(v.link().await)), NoTocCache)
        .await
        .unwrap();
    v.with(|s| {
        s.sim.record_received = true;
        s.sim.received.clear();
    });
    for o in &outs {
        send(&cf, *o).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cf.disconnect().await;
    let ours: Vec<Vec<u8>> = v.with(|s| {
        s.sim
            .received
            .iter()
            // Commands only: generic commander (7), high-level (8), supervisor commands (9/1).
            .filter(|p| matches!(p[0] >> 4, 7 | 8) || p[0] & 0xf3 == 0x91)
            .cloned()
            .collect()
    });

    // Theirs: cflib.
    let mut child = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/py/cflib_wire.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with cflib (scripts/requirements.txt) is needed");
    {
        let mut stdin = child.stdin.take().unwrap();
        for o in &outs {
            writeln!(stdin, "{}", serde_json::to_string(o).unwrap()).unwrap();
        }
    }
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "cflib_wire.py failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let theirs: Vec<Vec<String>> = serde_json::from_slice(&done.stdout).unwrap();
    let theirs: Vec<Vec<u8>> = theirs
        .into_iter()
        .flatten()
        .map(|h| {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect();

    let mask = |p: &[u8]| {
        let mut p = p.to_vec();
        p[0] &= !0x0c;
        p
    };
    assert_eq!(
        ours.len(),
        theirs.len(),
        "packet counts: ours {ours:02x?} theirs {theirs:02x?}"
    );
    let mut matched = 0;
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(
            mask(a),
            mask(b),
            "packet {i} ({}): ours {a:02x?}, cflib {b:02x?}",
            kinds[i]
        );
        matched += 1;
    }
    println!("cflib-wire: {matched}/{} matched", outs.len());
    assert_eq!(matched, outs.len());
    assert_eq!(outs.len(), 10, "the corpus is pinned");
}
