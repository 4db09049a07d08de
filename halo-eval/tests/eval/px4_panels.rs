//! The PX4 panels through the running service, a CI slice: 2 cold starts of 3 route actions
//! each (`scripts/px4_panels.sh` runs 10 of 4). Each action streams to the simulated PX4, is
//! taken by its controller, and loses its support to a map epoch change while it streams: the
//! hold must reach the vehicle and nothing of the action after it. The counts are pinned.
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
    // Its picture is drawn (the runner writes it next to the logs).
    let svg = out.join("px4-panels.svg");
    report.plot(&svg).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // And each cold start's flight, next to its logs (`halo-gateway plot`).
    for k in 0..2 {
        let flight = std::fs::read_to_string(out.join(format!("cold-{k}/flight.svg"))).unwrap();
        assert!(flight.contains("deny-hold") && flight.contains("dispatched"));
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `px4-profiles`, the CI slice: one cold start of all 41 conditions (`scripts/px4_panels.sh`
/// runs 10). The denominators are the data file's, pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn support_profiles_through_the_running_service() {
    let _timing = common::exclusive();
    let out = std::env::temp_dir().join(format!("halo-px4-profiles-{}", std::process::id()));
    let report = halo_eval::px4_profiles::run(
        common::uav_catalog(),
        &out,
        1,
        &halo_eval::px4_panels::Peer::Sim,
    )
    .await
    .unwrap();
    report.print();
    assert_eq!(report.matched(), (41, 41));
    // (matched, runs, admitted seen, admitted, denied seen, denied, fresh recoveries, recoveries)
    assert_eq!(report.counts(Some("aoi")), (11, 11, 6, 6, 0, 5, 1, 1));
    assert_eq!(
        report.counts(Some("part107")),
        (30, 30, 10, 10, 0, 20, 5, 5)
    );
    // Its picture is drawn (the runner writes it next to the logs).
    let svg = out.join("px4-profiles.svg");
    report.plot(&svg).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let flight = std::fs::read_to_string(out.join("cold-0/flight.svg")).unwrap();
    assert!(flight.contains("withheld") && flight.contains("dispatched"));
    let _ = std::fs::remove_dir_all(&out);
}

/// The panel is shown to catch a planted defect: the same AUTH-2 conditions against a catalog
/// whose route action lost its airspace rule. The four actions the data file expects withheld
/// are dispatched and taken by the vehicle, and the panel says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn support_profiles_catch_a_catalog_without_its_airspace_rule() {
    let _timing = common::exclusive();
    let path = common::repo_root().join("catalogs/uav-px4.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rule = "  { kind = \"flag\", source = \"airspace\", code = \"AIRSPACE_NOT_AUTHORIZED\" },    # AUTH-2\n";
    assert_eq!(text.matches(rule).count(), 1, "the rule to remove");
    let defective =
        halo_core::catalog::Catalog::parse(&text.replace(rule, ""), "defective").unwrap();
    let out = std::env::temp_dir().join(format!("halo-px4-defect-{}", std::process::id()));
    let report = halo_eval::px4_profiles::run_selected(
        defective,
        &out,
        1,
        &halo_eval::px4_panels::Peer::Sim,
        |c| c.profile == "AUTH-2",
    )
    .await
    .unwrap();
    // The panel's own table would read as a failing suite line; say what was caught.
    let caught = report
        .outcomes
        .iter()
        .filter(|o| o.expect != "dispatched" && o.seen && !o.matched())
        .count();
    println!(
        "px4-profiles-planted-defect: {}/1 matched (AUTH-2 against a catalog without the airspace rule: {caught} of 4 denials flew and the panel flagged each; {} of 6 conditions still matched)",
        usize::from(caught == 4),
        report.matched().0
    );
    assert_eq!(report.matched(), (2, 6));
    // Every withheld expectation now reached the vehicle; the recovery had nothing to recover.
    assert_eq!(report.counts(None), (2, 6, 2, 2, 4, 4, 0, 1));
    let _ = std::fs::remove_dir_all(&out);
}

/// `recovery-routes`, the CI slice: one cold start of the 48 routes and the six controls
/// (`scripts/px4_panels.sh` runs 10). Executable or terminal comes from the runner's own
/// reading of the catalog; the counts are pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn recovery_routes_through_the_running_service() {
    let _timing = common::exclusive();
    let text = std::fs::read_to_string(common::repo_root().join("catalogs/uav-px4.toml")).unwrap();
    let out = std::env::temp_dir().join(format!("halo-recovery-routes-{}", std::process::id()));
    let report = halo_eval::recovery_routes::run(&text, &out, 1, &halo_eval::px4_panels::Peer::Sim)
        .await
        .unwrap();
    report.print();
    assert_eq!(report.matched(), (48, 48));
    assert_eq!(report.executable(), (36, 36));
    assert_eq!(report.terminal(), (12, 12));
    assert_eq!(report.unauthorized(), 0);
    assert_eq!(report.controls_refused(), (6, 6));
    let codes: Vec<&str> = report.controls.iter().map(|c| c.code.as_str()).collect();
    assert_eq!(
        codes,
        [
            "DUPLICATE_RESPONSE",
            "OBLIGATION_NOT_LIVE",
            "GENERATION_STALE",
            "CANDIDATE_NOT_SUPPORTED",
            "CANDIDATE_NOT_SUPPORTED",
            "OUT_OF_SCOPE"
        ]
    );
    // Its picture is drawn (the runner writes it next to the logs).
    let svg = out.join("recovery-routes.svg");
    report.plot(&svg).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let _ = std::fs::remove_dir_all(&out);
}

/// The route panel is shown to catch a planted defect: a gateway whose catalog grants recovery
/// for a missing claim (terminal by the catalog the runner reads) owes the agent an obligation
/// it must not, and the panel says so for each claim-missing route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn recovery_routes_catch_a_gateway_that_recovers_a_terminal_reason() {
    let _timing = common::exclusive();
    let text = std::fs::read_to_string(common::repo_root().join("catalogs/uav-px4.toml")).unwrap();
    let list = "recoverable = [\n  \"SOURCE_MISSING\", \"STALE_SOURCE\",";
    assert_eq!(text.matches(list).count(), 1, "the route action's list");
    let defective = text.replace(
        list,
        "recoverable = [\n  \"CLAIM_MISSING\", \"SOURCE_MISSING\", \"STALE_SOURCE\",",
    );
    let out = std::env::temp_dir().join(format!("halo-routes-defect-{}", std::process::id()));
    let report = halo_eval::recovery_routes::run_with(
        &defective,
        &text,
        &out,
        1,
        &halo_eval::px4_panels::Peer::Sim,
        |name| name.ends_with("-claim-missing"),
    )
    .await
    .unwrap();
    let caught = report
        .routes
        .iter()
        .filter(|r| !r.matched() && r.outcome.obligation.is_some())
        .count();
    println!(
        "recovery-routes-planted-defect: {}/1 matched (a gateway recovering CLAIM_MISSING: {caught} of 6 terminal routes owed an obligation and the panel flagged each)",
        usize::from(caught == 6)
    );
    // Three claims, alone and with a status: each now withheld with an obligation.
    assert_eq!(report.matched(), (0, 6));
    assert_eq!(report.terminal(), (0, 6));
    assert_eq!(report.unauthorized(), 0);
    let _ = std::fs::remove_dir_all(&out);
}

/// `px4-mechanisms`, the CI slice: one cold start of the 12 shared conditions through the
/// service running as each of the paper's Table 12 variants (`scripts/px4_panels.sh` runs 10).
/// Full flies exactly the supported components; each reduced variant shows its own failure at
/// the vehicle or on the host, as the in-process `mechanisms` suite does. Every cell pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::await_holding_lock,
    reason = "the lock only orders this binary's tests; no task of this runtime takes it"
)]
async fn mechanism_variants_through_the_running_service() {
    use halo_core::Variant;
    let _timing = common::exclusive();
    let out = std::env::temp_dir().join(format!("halo-px4-mechanisms-{}", std::process::id()));
    let report = halo_eval::px4_mechanisms::run(
        common::uav_catalog(),
        &out,
        1,
        &halo_eval::px4_mechanisms::TABLE_12,
        &halo_eval::px4_panels::Peer::Sim,
    )
    .await
    .unwrap();
    report.print();
    assert_eq!(report.matched(), (12, 12));
    // (supported kept, stale setpoints at the vehicle, orphan leaks, supported blocked)
    let cells: Vec<_> = halo_eval::px4_mechanisms::TABLE_12
        .iter()
        .map(|v| report.cells(*v))
        .collect();
    assert_eq!(
        cells,
        [
            [(18, 29), (0, 8), (0, 9), (11, 29)],
            [(29, 29), (0, 8), (9, 9), (0, 29)],
            [(29, 29), (5, 8), (0, 9), (0, 29)],
            [(29, 29), (0, 8), (0, 9), (0, 29)],
        ]
    );
    assert_eq!(halo_eval::px4_mechanisms::TABLE_12[3], Variant::Full);
    // Its picture is drawn (the runner writes it next to the logs).
    let svg = out.join("px4-mechanisms.svg");
    report.plot(&svg).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let _ = std::fs::remove_dir_all(&out);
}
