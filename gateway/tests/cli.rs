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

#[test]
fn contract_run_and_independent_audit() {
    let dir = std::env::temp_dir().join(format!("halo-contract-cli-{}", std::process::id()));
    let log = dir.join("receipts.jsonl").display().to_string();
    let domain = path("catalogs/contract-uav.toml");
    let run = |wf: &str, extra: &[&str]| {
        let mut a = vec![
            "halo-gateway".to_string(),
            "contract".into(),
            "run".into(),
            "--domain".into(),
            domain.clone(),
            "--receipts".into(),
            log.clone(),
            path(wf),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        run_with(a)
    };
    let audit = || {
        run_with([
            "halo-gateway",
            "contract",
            "audit",
            "--domain",
            &domain,
            &log,
        ])
    };

    assert_eq!(run("docs/examples/contract-workflow.json", &[]), EXIT_OK);
    assert_eq!(audit(), EXIT_OK);
    let honest = std::fs::read_to_string(&log).unwrap();
    assert_eq!(honest.lines().count(), 19);

    // The drifted workflow is refused; its log (with the refusals) still verifies.
    assert_eq!(
        run(
            "docs/examples/contract-workflow-drifted.json",
            &["--keep-going"]
        ),
        EXIT_PARTIAL
    );
    assert_eq!(audit(), EXIT_OK);

    // A log whose refusal was rewritten as an allow is rejected, even with a valid chain: the
    // checker re-derives the decision.
    let mut lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let i = lines
        .iter()
        .position(|r| r["body"]["verdict"] == "deny")
        .unwrap();
    lines[i]["body"]["verdict"] = serde_json::json!("allow");
    lines[i]["body"]["reason"] = serde_json::Value::Null;
    let mut prev = halo_gateway::core::digest::Digest::default();
    for (k, r) in lines.iter_mut().enumerate() {
        r["prev"] = serde_json::json!(prev.to_hex());
        let h = halo_gateway::core::digest::Digest::of(
            halo_gateway::core::digest::tag::RECEIPT,
            &[&halo_gateway::core::receipt::Receipt::hash_input(
                k as u64,
                &prev,
                r["at_ns"].as_u64().unwrap(),
                &r["body"],
            )],
        );
        r["hash"] = serde_json::json!(h.to_hex());
        prev = h;
    }
    let text: String = lines.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&log, text).unwrap();
    assert_eq!(audit(), EXIT_REJECTED);

    // Usage and file errors.
    assert_eq!(run("Cargo.toml", &[]), EXIT_ERROR);
    assert_eq!(
        run_with([
            "halo-gateway",
            "contract",
            "audit",
            "--domain",
            &domain,
            "/nonexistent/receipts.jsonl"
        ]),
        EXIT_ERROR
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every file the binary reads goes through a size cap before it is parsed: an endless file
/// (`/dev/zero`) or an oversized one is a one-line error naming the file, exit 3, and nothing
/// is read past the cap.
#[test]
fn endless_and_oversized_files_are_refused_at_their_cap() {
    let dir = std::env::temp_dir().join(format!("halo-cli-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big_state = dir.join("big-state.json");
    // A syntactically plausible state file of 2 MiB (one long provenance string).
    std::fs::write(
        &big_state,
        format!(
            "{{\"sources\": {{\"map\": {{\"provenance\": \"{}\"}}}}}}",
            "x".repeat(2 << 20)
        ),
    )
    .unwrap();
    let state = path("docs/examples/state.json");
    let resp = path("docs/examples/response.json");
    let big = big_state.display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "state /dev/zero",
            vec!["check", "--state", "/dev/zero", &resp],
            "/dev/zero: the state file is larger than the 1048576-byte limit",
        ),
        (
            "state of 2 MiB",
            vec!["check", "--state", &big, &resp],
            "the state file is larger than the 1048576-byte limit",
        ),
        (
            "response /dev/zero",
            vec!["check", "--state", &state, "/dev/zero"],
            "/dev/zero: the response is larger than the 524288-byte limit",
        ),
        (
            "catalog /dev/zero",
            vec!["check", "--catalog", "/dev/zero", "--state", &state, &resp],
            "/dev/zero: the catalog is larger than the 1048576-byte limit",
        ),
        (
            "digest /dev/zero",
            vec!["digest", "/dev/zero"],
            "/dev/zero: the response is larger than the 524288-byte limit",
        ),
        (
            "audit verify /dev/zero",
            vec!["audit", "verify", "/dev/zero"],
            "/dev/zero:1: a record is longer than the 1048576-byte limit",
        ),
        (
            "contract audit /dev/zero",
            vec!["contract", "audit", "/dev/zero"],
            "/dev/zero:1: a record is longer than the 1048576-byte limit",
        ),
    ];
    let mut matched = 0;
    for (name, args, want) in &cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let ok =
            out.status.code() == Some(EXIT_ERROR) && err.contains(want) && err.lines().count() == 1;
        println!("  {name:<28} exit {:?}  {}", out.status.code(), err.trim());
        assert!(ok, "{name}: {err}");
        matched += 1;
    }
    println!("input-caps: {matched}/{} matched", cases.len());
    assert_eq!(matched, 7);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A state file is read as strictly as an envelope: a key repeated anywhere, or two
/// certificates with one id, is an error naming it, not "the last one wins".
#[test]
fn state_files_refuse_repeated_keys_and_certificate_ids() {
    let dir = std::env::temp_dir().join(format!("halo-cli-dups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = r#"{"value": null, "epoch": 7, "provenance": "map-service", "generated_at_ms": 900}"#;
    let cert = format!(
        r#"{{"id": "cert-1", "covers": "{}", "valid_until_ms": 5000, "issuer": "geo"}}"#,
        "ab".repeat(32)
    );
    let cases = [
        (
            format!(r#"{{"now_ms": 1000, "sources": {{"map": {src}, "map": {src}}}}}"#),
            "duplicate key `sources.map`",
        ),
        (
            r#"{"now_ms": 1000, "now_ms": 2000}"#.to_string(),
            "duplicate key `now_ms`",
        ),
        (
            format!(r#"{{"now_ms": 1000, "certificates": [{cert}, {cert}]}}"#),
            "certificate `cert-1` appears twice",
        ),
    ];
    let resp = path("docs/examples/response.json");
    for (k, (text, want)) in cases.iter().enumerate() {
        let p = dir.join(format!("state-{k}.json"));
        std::fs::write(&p, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
            .args(["check", "--state"])
            .arg(&p)
            .arg(&resp)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(EXIT_ERROR), "{err}");
        assert!(err.contains(want), "case {k}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
