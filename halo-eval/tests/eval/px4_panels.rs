//! The PX4 panels through the running service, a CI slice: 2 cold starts of 3 route actions
//! each (`scripts/px4_panels.sh` runs 10 of 4). Each action streams to the simulated PX4, is
//! taken by its controller, and loses its support to a map epoch change while it streams: the
//! hold must reach the vehicle and nothing of the action after it. The counts are pinned.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn deny_hold_and_latency_through_the_running_service() {
    let _timing = common::exclusive();
    let out = std::env::temp_dir().join(format!("halo-px4-panels-{}", std::process::id()));
    let report = halo_eval::px4_panels::run(
        common::uav_catalog(),
        &out,
        2,
        3,
        &halo_eval::px4_panels::Peer::Sim,
    )
    .await
    .unwrap();
    report.print();
    assert_eq!((report.cold_starts, report.samples.len()), (2, 6));
    assert_eq!(report.deny_hold_matched(), 6, "{:?}", report.samples);
    for s in &report.samples {
        // The gateway's own protocol computation is a small part of what the agent waits for.
        assert!(s.admission_ns + s.gate_ns < s.reply_ns - s.post_ns, "{s:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
