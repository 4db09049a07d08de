//! An independent MAVLink peer: pymavlink (installed by `scripts/test.sh` from PyPI) plays the
//! autopilot and decodes what the bridge sends: heartbeat identity and rate, the setpoint's
//! fields, type mask, frame, target ids and rate, the rate requests, and TIMESYNC.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use std::time::Duration;

use px4_bridge::shell::{BridgeOptions, start};
use px4_bridge::{Event, Mono, Setpoint};
use sitl::peer::PythonPeer;

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether the bridge reports its link up within `secs`.
async fn link_up(rx: &mut tokio::sync::mpsc::Receiver<Event>, secs: u64) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Event::Link { up: true, .. })) => return true,
            Ok(Some(_)) => {}
            _ => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymavlink_decodes_what_the_bridge_sends() {
    let port = free_udp_port();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/fake_autopilot.py");
    let args = [port.to_string(), "6".to_string()];
    let mut peer = tokio::task::spawn_blocking(move || {
        PythonPeer::start(&script, &[args[0].as_str(), args[1].as_str()], false)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));

    let (tx, _) = tokio::sync::broadcast::channel(1);
    let mut bopts = BridgeOptions::new(
        &format!("udpout:127.0.0.1:{port}"),
        std::time::Instant::now(),
    );
    // The test is the operator who handed the vehicle to the bridge.
    bopts.config.offboard_permitted_at_start = true;
    let (h, mut rx, task) = start(bopts, tx.subscribe()).await.unwrap();
    let up = link_up(&mut rx, 4).await;
    let status = peer.exited();
    assert!(
        up,
        "no link with the pymavlink autopilot (script status {status:?}); is pymavlink installed? run ./scripts/test.sh"
    );
    let sp = Setpoint {
        north_m: 1.5,
        east_m: -2.25,
        down_m: -3.0,
        yaw_deg: 45.0,
    };
    h.try_enqueue(sp, [8; 32], Mono(h.now().0 + 20_000_000_000))
        .unwrap();
    let out = tokio::task::spawn_blocking(move || peer.finish())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "peer failed: {}", out.stderr);
    let _ = tx.send(());
    let _ = task.await;

    let json = out.report().unwrap();
    println!("pymavlink saw: {json}");
    // Heartbeat: an onboard controller, not an autopilot, from system 1 component 191, at 1 Hz.
    assert_eq!(json["heartbeat_types"], serde_json::json!([18]));
    assert_eq!(json["heartbeat_autopilots"], serde_json::json!([8]));
    assert_eq!(json["heartbeat_sources"], serde_json::json!([[1, 191]]));
    let hbs = json["heartbeats"].as_f64().unwrap();
    let span = json["heartbeat_span_s"].as_f64().unwrap();
    assert!(
        hbs >= 3.0 && ((hbs - 1.0) / span - 1.0).abs() < 0.2,
        "{hbs} heartbeats over {span} s"
    );
    // The setpoint: position + yaw mask, local NED, addressed to the autopilot, exact values.
    assert_eq!(json["type_masks"], serde_json::json!([0x09F8]));
    assert_eq!(json["frames"], serde_json::json!([1]));
    assert_eq!(json["targets"], serde_json::json!([[1, 1]]));
    let last = &json["last_setpoint"];
    assert_eq!(
        (
            last["x"].as_f64().unwrap(),
            last["y"].as_f64().unwrap(),
            last["z"].as_f64().unwrap()
        ),
        (1.5, -2.25, -3.0)
    );
    assert!((last["yaw"].as_f64().unwrap() - std::f64::consts::FRAC_PI_4).abs() < 1e-6);
    let rate = json["setpoint_rate_hz"].as_f64().unwrap();
    assert!((18.0..=22.0).contains(&rate), "setpoint rate {rate} Hz");
    // Telemetry rates requested: LOCAL_POSITION_NED at 50 Hz (20000 µs), BATTERY_STATUS at 2 Hz.
    let intervals: Vec<(f64, f64)> = json["interval_commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["params"][0].as_f64().unwrap(),
                c["params"][1].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(intervals.contains(&(32.0, 20000.0)), "{intervals:?}");
    assert!(intervals.contains(&(147.0, 500000.0)), "{intervals:?}");
    assert!(
        json["interval_commands"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["target"] == serde_json::json!([1, 1]))
    );
    // TIMESYNC requests (pymavlink's dialect may not decode the target extension fields).
    assert!(json["timesync_requests"].as_u64().unwrap() >= 1);
    let targets = &json["timesync_targets"];
    assert!(
        *targets == serde_json::json!([[1, 1]]) || *targets == serde_json::json!([[null, null]]),
        "{targets}"
    );
    assert_eq!(json["bad_data"], 0);
}

/// One run of the bridge against the keyed pymavlink autopilot: the bridge's key (or none) and
/// ids; returns whether the link came up, the bridge's refusals and pymavlink's report.
async fn signed_run(
    bridge_key: Option<[u8; 32]>,
    peer_key: [u8; 32],
) -> (bool, u64, serde_json::Value) {
    let port = free_udp_port();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/signed_autopilot.py");
    let hex: String = peer_key.iter().map(|b| format!("{b:02x}")).collect();
    let args = [port.to_string(), "4".to_string(), hex];
    let peer = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        PythonPeer::start(&script, &a, false)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    let (tx, _) = tokio::sync::broadcast::channel(1);
    let mut bopts = BridgeOptions::new(
        &format!("udpout:127.0.0.1:{port}"),
        std::time::Instant::now(),
    );
    bopts.config.system_id = 2;
    bopts.config.component_id = 192;
    bopts.signing = bridge_key.map(|k| px4_bridge::signing::SigningKey::new(k, 3, false));
    let (h, mut rx, task) = start(bopts, tx.subscribe()).await.unwrap();
    let up = link_up(&mut rx, 3).await;
    let out = tokio::task::spawn_blocking(move || peer.finish())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "peer failed: {}", out.stderr);
    let refused = h.unsigned_refused();
    let _ = tx.send(());
    let _ = task.await;
    (up, refused, out.report().unwrap())
}

/// MAVLink 2 signing against an independent implementation: pymavlink, keyed, verifies every
/// signature the bridge puts on its frames and refuses unsigned ones; the bridge verifies
/// pymavlink's. The second run plants a wrong key in the bridge, the third no key: pymavlink
/// must refuse what the bridge sends and take nothing from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymavlink_verifies_the_bridge_signatures() {
    let key = [0x5a; 32];
    let mut c = Vec::new();

    let (up, refused, r) = signed_run(Some(key), key).await;
    println!("  same key:  link up {up}, bridge refused {refused}, pymavlink {r}");
    c.push(
        up && refused == 0
            && r["goodsig"].as_u64().unwrap() >= 3
            && r["badsig"] == 0
            && r["unsigned_refused"] == 0
            && r["taken"]["HEARTBEAT"].as_u64().unwrap() >= 2
            // The configured ids are on the signed frames.
            && r["sources"] == serde_json::json!([[2, 192]]),
    );

    let (up, refused, r) = signed_run(Some([0x33; 32]), key).await;
    println!("  wrong key: link up {up}, bridge refused {refused}, pymavlink {r}");
    c.push(
        !up && refused > 0
            && r["goodsig"] == 0
            && r["badsig"].as_u64().unwrap() >= 2
            && r["taken"] == serde_json::json!({}),
    );

    let (up, refused, r) = signed_run(None, key).await;
    println!("  no key:    link up {up}, bridge refused {refused}, pymavlink {r}");
    c.push(
        r["goodsig"] == 0
            && r["unsigned_refused"].as_u64().unwrap() >= 2
            && r["taken"] == serde_json::json!({}),
    );

    let matched = c.iter().filter(|g| **g).count();
    println!("bridge-signing: {matched}/{} matched", c.len());
    assert_eq!((matched, c.len()), (3, 3));
}
