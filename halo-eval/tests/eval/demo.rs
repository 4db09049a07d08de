//! End to end: the demo flies the running example on the embedded simulated PX4 through the
//! real MAVLink bridge, in real time (about 45 s). The evidence is the vehicle's own log of the
//! setpoints its controller took, and the receipt chain.
use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn the_demo_flies_and_every_check_holds() {
    let _timing = common::shared();
    let out = std::env::temp_dir().join(format!("halo-demo-test-{}", std::process::id()));
    let summary = halo_eval::demo::run(common::uav_catalog(), &out, true)
        .await
        .unwrap();
    println!("{summary:?}");
    assert!(summary.ok(), "{summary:?}");
    assert_eq!(summary.dispatched, 2);
    assert_eq!(summary.reached_vehicle, 2);
    assert_eq!(summary.stale_reached_vehicle, 0);
    // The receipt log on disk verifies independently of the run, and a flipped byte is caught.
    let receipts = halo_eval::demo::read_receipts(&out.join("receipts.jsonl")).unwrap();
    assert!(halo_core::receipt::verify_chain(&receipts).is_ok());
    let mut tampered = receipts.clone();
    let k = tampered.len() / 2;
    tampered[k].at_ns += 1;
    assert!(halo_core::receipt::verify_chain(&tampered).is_err());
    signed_receipts_catch_rewrites_deletions_and_cuts(&out);
    // The stale target (30, 20, -10, yaw 45) never appears in the vehicle's log.
    let log = std::fs::read_to_string(out.join("vehicle-setpoints.jsonl")).unwrap();
    assert!(!log.contains("\"n3000_e2000_d-1000_y450\""));
    assert!(log.contains("\"n3000_e1800_d-1000_y450\""));
    // The decisions alone, for people: the story of the run without telemetry.
    let shown = std::process::Command::new(common::BIN)
        .args(["audit", "show", "--decisions"])
        .arg(out.join("receipts.jsonl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success());
    assert!(text.contains("gate resp-0007/e3 dispatched"), "{text}");
    assert!(text.contains("e5 withheld (EPOCH_CHANGED)"), "{text}");
    assert!(
        text.contains("readmitted resp-0008 from agent: e5"),
        "{text}"
    );
    assert!(
        !text.contains("source "),
        "telemetry is not a decision: {text}"
    );
    // The agent's envelopes are kept beside the receipts.
    let sent = std::fs::read_to_string(out.join("responses.jsonl")).unwrap();
    assert_eq!(sent.lines().count(), 4);
    let _ = std::fs::remove_dir_all(&out);
}

/// The demo's log is signed: with the public key it wrote, `audit verify --key` passes on the
/// log as written and exits 2 for each forgery a hash chain alone lets through.
fn signed_receipts_catch_rewrites_deletions_and_cuts(out: &std::path::Path) {
    use common::{halo, read_log, write_relinked};
    let log = out.join("receipts.jsonl");
    let key = out.join("receipts.pub").display().to_string();
    let l = log.display().to_string();
    let (rc, text) = halo(&["audit", "verify", "--key", &key, &l]);
    assert_eq!(rc, 0, "{text}");
    assert!(text.contains("every receipt is covered"), "{text}");
    let (rc, text) = halo(&["audit", "verify", &l]);
    assert_eq!(rc, 0, "{text}");
    assert!(text.contains("integrity only"), "{text}");

    let rs = read_log(&log);
    let checkpoints: Vec<usize> = (0..rs.len())
        .filter(|&i| rs[i].body.value()["kind"] == "checkpoint")
        .collect();
    assert!(
        checkpoints.len() >= 2,
        "periodic and shutdown checkpoints: {checkpoints:?}"
    );
    assert_eq!(*checkpoints.last().unwrap(), rs.len() - 1);
    let forged = out.join("forged.jsonl");
    let f = forged.display().to_string();
    let verify = |expect_without_key: i32| {
        let (rc, signed) = halo(&["audit", "verify", "--key", &key, &f]);
        assert_eq!(rc, 2, "{signed}");
        let (rc, text) = halo(&["audit", "verify", &f]);
        assert_eq!(rc, expect_without_key, "{text}");
        signed
    };

    // A gate outcome flipped from dispatched to denied, every later hash recomputed.
    let mut flipped = rs.clone();
    let g = flipped
        .iter()
        .position(|r| {
            let b = r.body.value();
            b["kind"] == "gate" && b["outcome"] == "dispatched"
        })
        .unwrap();
    flipped[g]
        .body
        .edit(|b| b["outcome"] = serde_json::json!("denied"));
    write_relinked(&forged, &flipped);
    verify(0);
    // A record deleted and the chain re-linked.
    let mut deleted = rs.clone();
    deleted.remove(g);
    write_relinked(&forged, &deleted);
    verify(0);
    // Cut to a prefix: inside a stretch, and exactly after a periodic checkpoint.
    write_relinked(&forged, &rs[..checkpoints[0] + 3]);
    let text = verify(0);
    assert!(text.contains("not covered by any signature"), "{text}");
    write_relinked(&forged, &rs[..=checkpoints[0]]);
    let text = verify(0);
    assert!(text.contains("not the shutdown one"), "{text}");
    // The signed head kept off the vehicle catches a cut at a checkpoint too.
    let head = out.join("head.json");
    let mut kept = rs[rs.len() - 1].body.value();
    kept.as_object_mut().unwrap().remove("kind");
    std::fs::write(&head, kept.to_string()).unwrap();
    let h = head.display().to_string();
    assert_eq!(
        halo(&["audit", "verify", "--key", &key, "--head", &h, &l]).0,
        0
    );
    let (rc, text) = halo(&["audit", "verify", "--key", &key, "--head", &h, &f]);
    assert_eq!(rc, 2);
    assert!(text.contains("receipts were cut"), "{text}");
    // Another key than the one that signed.
    let other = halo_gateway::audit::Signer::from_seed([5; 32]).public_hex();
    let (rc, text) = halo(&["audit", "verify", "--key", &other, &l]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("another key"), "{text}");
    let _ = std::fs::remove_file(&forged);
}

/// `halo-eval demo --vehicle crazyflie`: the binary, as a user runs it, flies the Crazyflie
/// sequence on the embedded simulated Crazyflie and says every check passed; the decisions in
/// its receipts tell the same story.
#[test]
fn the_crazyflie_demo_passes_as_a_user_runs_it() {
    let _timing = common::shared();
    let out = std::env::temp_dir().join(format!("halo-cf-demo-test-{}", std::process::id()));
    let run = std::process::Command::new(common::BIN)
        .args(["demo", "--vehicle", "crazyflie", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(text.contains("demo: all checks passed"), "{text}");
    assert!(
        text.contains("stale setpoints at the vehicle      0"),
        "{text}"
    );
    let shown = std::process::Command::new(common::BIN)
        .args(["audit", "show", "--decisions"])
        .arg(out.join("receipts.jsonl"))
        .output()
        .unwrap();
    let story = String::from_utf8_lossy(&shown.stdout);
    assert!(story.contains("gate cf-1-1/f1 dispatched"), "{story}");
    assert!(story.contains("f2 withheld (EPOCH_CHANGED)"), "{story}");
    assert!(
        story.contains("readmitted cf-1-2 from agent: f2"),
        "{story}"
    );
    // The flight's picture, in the Crazyflie's own frame: the forward move, the withheld one
    // and the readmitted backtrack.
    let picture = std::fs::read_to_string(out.join("flight.svg")).unwrap();
    for label in [
        "cf-1-1/f1",
        "cf-1-2/f2",
        "withheld",
        "x (forward)",
        "z (up)",
    ] {
        assert!(picture.contains(label), "{label} is not in the picture");
    }
    std::fs::copy(
        out.join("flight.svg"),
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("flight-crazyflie.svg"),
    )
    .unwrap();
    // The catalog flag is for the PX4 demo; mixing them is refused with a reason.
    let mixed = std::process::Command::new(common::BIN)
        .args(["demo", "--vehicle", "crazyflie", "--catalog", "x.toml"])
        .output()
        .unwrap();
    assert_eq!(mixed.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("--catalog is for the PX4 demo"));
    let _ = std::fs::remove_dir_all(&out);
}
