//! End to end: the demo flies the running example on the embedded simulated PX4 through the
//! real MAVLink bridge, in real time (about 45 s). The evidence is the vehicle's own log of the
//! setpoints its controller took, and the receipt chain.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_flies_and_every_check_holds() {
    let out = std::env::temp_dir().join(format!("halo-demo-test-{}", std::process::id()));
    let summary = halo_gateway::runtime::demo::run(common::uav_catalog(), &out, true)
        .await
        .unwrap();
    println!("{summary:?}");
    assert!(summary.ok(), "{summary:?}");
    assert_eq!(summary.dispatched, 2);
    assert_eq!(summary.reached_vehicle, 2);
    assert_eq!(summary.stale_reached_vehicle, 0);
    // The receipt log on disk verifies independently of the run, and a flipped byte is caught.
    let receipts = halo_gateway::runtime::demo::read_receipts(&out.join("receipts.jsonl")).unwrap();
    assert!(halo_gateway::core::receipt::verify_chain(&receipts).is_ok());
    let mut tampered = receipts.clone();
    let k = tampered.len() / 2;
    tampered[k].at_ns += 1;
    assert!(halo_gateway::core::receipt::verify_chain(&tampered).is_err());
    // The stale target (30, 20, -10, yaw 45) never appears in the vehicle's log.
    let log = std::fs::read_to_string(out.join("vehicle-setpoints.jsonl")).unwrap();
    assert!(!log.contains("\"n3000_e2000_d-1000_y450\""));
    assert!(log.contains("\"n3000_e1800_d-1000_y450\""));
    // The decisions alone, for people: the story of the run without telemetry.
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["audit", "show", "--decisions"])
        .arg(out.join("receipts.jsonl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success());
    assert!(text.contains("gate resp-0007/e3 dispatched"), "{text}");
    assert!(text.contains("e5 WITHHELD (EPOCH_CHANGED)"), "{text}");
    assert!(text.contains("readmitted resp-0008: e5"), "{text}");
    assert!(
        !text.contains("source "),
        "telemetry is not a decision: {text}"
    );
    // The agent's envelopes are kept beside the receipts.
    let sent = std::fs::read_to_string(out.join("responses.jsonl")).unwrap();
    assert_eq!(sent.lines().count(), 4);
    let _ = std::fs::remove_dir_all(&out);
}
