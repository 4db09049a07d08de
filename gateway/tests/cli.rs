//! The `halo-gateway check` and `digest` commands and their exit codes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

mod common;

use common::repo_root;
use halo_gateway::cli::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_REJECTED, run_with};

fn path(p: &str) -> String {
    repo_root().join(p).display().to_string()
}

fn check(state: &str, response: &str, extra: &[&str]) -> i32 {
    let mut args = vec![
        "halo-gateway".to_string(),
        "check".into(),
        "--catalog".into(),
        path("catalogs/uav-px4.toml"),
        "--state".into(),
        path(state),
        path(response),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run_with(args)
}

#[test]
fn check_reports_exit_codes_for_kept_partial_rejected_and_errors() {
    assert_eq!(
        check(
            "docs/examples/state.json",
            "docs/examples/response.json",
            &[]
        ),
        EXIT_OK
    );
    assert_eq!(
        check(
            "docs/examples/state.json",
            "docs/examples/response.json",
            &["--json"]
        ),
        EXIT_OK
    );
    assert_eq!(
        check(
            "docs/examples/state-map-epoch-8.json",
            "docs/examples/response.json",
            &[]
        ),
        EXIT_PARTIAL
    );
    assert_eq!(
        check("docs/examples/state.json", "Cargo.toml", &[]),
        EXIT_REJECTED
    );
    assert_eq!(
        check(
            "docs/examples/missing.json",
            "docs/examples/response.json",
            &[]
        ),
        EXIT_ERROR
    );
    assert_eq!(
        check(
            "docs/examples/response.json",
            "docs/examples/response.json",
            &[]
        ),
        EXIT_ERROR
    );
    assert_eq!(
        run_with(["halo-gateway", "check"]),
        EXIT_ERROR,
        "missing arguments"
    );
}

#[test]
fn digest_and_catalog_commands() {
    assert_eq!(
        run_with([
            "halo-gateway".to_string(),
            "digest".into(),
            "--catalog".into(),
            path("catalogs/uav-px4.toml"),
            path("docs/examples/response.json")
        ]),
        EXIT_OK
    );
    assert_eq!(
        run_with([
            "halo-gateway".to_string(),
            "catalog".into(),
            path("catalogs/uav-px4.toml")
        ]),
        EXIT_OK
    );
    assert_eq!(
        run_with([
            "halo-gateway".to_string(),
            "catalog".into(),
            path("Cargo.toml")
        ]),
        EXIT_ERROR
    );
}
