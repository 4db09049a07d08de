//! The flight binary's command line: `check`, `digest`, `catalog`, `contract run` and
//! `contract domain`, `audit verify` and `audit show`, their messages and exit codes.
use crate::common::{self, repo_root};
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
    let _timing = common::shared();
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
    let _timing = common::shared();
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

/// Error messages say what was expected: a byte-order mark, a number past u64, a table defined
/// twice (with its full key path), and a contract domain given where a catalog is expected (and
/// the other way round), each one line naming the file once.
#[test]
fn error_messages_say_what_was_expected() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-cli-msgs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = std::fs::read(path("docs/examples/state.json")).unwrap();
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend_from_slice(&state);
    let bom_file = dir.join("bom.json");
    std::fs::write(&bom_file, &bom).unwrap();
    let big_file = dir.join("big.json");
    std::fs::write(
        &big_file,
        r#"{"sources": {"map": {"value": null, "epoch": 99999999999999999999, "provenance": "p", "generated_at_ms": 1}}}"#,
    )
    .unwrap();
    let cat = std::fs::read_to_string(path("catalogs/uav-px4.toml")).unwrap();
    let dup_file = dir.join("dup.toml");
    let table = &cat[cat.find("[types.notice]").unwrap()..cat.find("[types.report]").unwrap()];
    std::fs::write(&dup_file, format!("{cat}\n{table}")).unwrap();
    let response = path("docs/examples/response.json");
    let (b, g, d) = (
        bom_file.display().to_string(),
        big_file.display().to_string(),
        dup_file.display().to_string(),
    );
    let domain = path("catalogs/contract-uav.toml");
    let catalog = path("catalogs/uav-px4.toml");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["check", "--state", &b, &response],
            "byte-order mark (bytes EF BB BF)".into(),
        ),
        (
            vec!["check", "--state", &g, &response],
            "99999999999999999999 is not a whole number from 0 to 18446744073709551615".into(),
        ),
        (vec!["catalog", &d], "types.notice: defined twice".into()),
        (
            vec!["catalog", &domain],
            format!(
                "this is a mission-contract domain (it has a [domain] table), not a HALO catalog; check it with `halo-gateway contract domain {domain}`"
            ),
        ),
        (
            vec!["contract", "domain", &catalog],
            format!(
                "this is a HALO catalog (it has a [catalog] table), not a contract domain; check it with `halo-gateway catalog {catalog}`"
            ),
        ),
    ];
    for (args, want) in &cases {
        let (rc, text) = common::halo(args);
        assert_eq!(rc, EXIT_ERROR, "{args:?}: {text}");
        assert!(text.contains(want.as_str()), "{args:?}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{args:?}: {text}");
        let file = args.iter().rev().find(|a| a.contains('/')).unwrap();
        let named = if args[0] == "check" { args[2] } else { file };
        assert_eq!(
            text.matches(named).count(),
            if want.contains(named) { 2 } else { 1 },
            "{args:?}: {text}"
        );
    }
    let (rc, text) = common::halo(&["contract", "domain", &domain]);
    assert_eq!(rc, EXIT_OK, "{text}");
    assert!(text.contains("contract domain `uav-survey`"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Both verifiers read one canonical encoding per record, treat a blank line as an error, and
/// report a torn tail with its byte offset after checking the intact prefix.
/// With `--key`, a log without receipts is no evidence (exit 2); without the key it merely has
/// nothing to check.
#[test]
fn an_empty_log_is_no_evidence() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-cli-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    // A real key: the one `contract run` creates when asked to sign.
    let k = dir.join("k");
    let (rc, out) = common::halo(&[
        "contract",
        "run",
        "--signing-key",
        &k.display().to_string(),
        "--receipts",
        &dir.join("r.jsonl").display().to_string(),
        &common::repo_root()
            .join("docs/examples/contract-workflow.json")
            .display()
            .to_string(),
    ]);
    assert_eq!(rc, EXIT_OK, "{out}");
    let key = dir.join("k.pub").display().to_string();
    let e = empty.display().to_string();
    let (rc, text) = common::halo(&["audit", "verify", "--key", &key, &e]);
    assert_eq!(rc, EXIT_REJECTED, "{text}");
    assert!(text.contains("no evidence"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A state file is read as strictly as an envelope: a key repeated anywhere, or two
/// certificates with one id, is an error naming it, not "the last one wins".
#[test]
fn state_files_refuse_repeated_keys_and_certificate_ids() {
    let _timing = common::shared();
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

/// A log written before receipt format 3 (a real `run` of 2026-12-03, format 2: every
/// admission lists each component's full report) still verifies under its key, and
/// `audit show` prints it line for line as that gateway did (`show.txt`, `show-decisions.txt`,
/// written by the format-2 binary from this log). A `| head` that stops reading early ends
/// the listing quietly.
#[test]
fn a_format_2_log_verifies_and_shows_as_it_did() {
    let _timing = common::shared();
    let dir = repo_root().join("gateway/tests/data/receipts-format2");
    let log = dir.join("boot-1.jsonl").display().to_string();
    let key = dir.join("audit-key.pub").display().to_string();
    let (rc, text) = common::halo(&["audit", "verify", "--key", &key, &log]);
    assert_eq!(rc, EXIT_OK, "{text}");
    assert!(
        text.contains("121 receipts, chain and hashes verify")
            && text.contains("4 signed checkpoints verify"),
        "{text}"
    );
    for (args, want) in [
        (&["audit", "show"][..], "show.txt"),
        (&["audit", "show", "--decisions"][..], "show-decisions.txt"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
            .args(args)
            .arg(&log)
            .output()
            .unwrap();
        assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
        let want = std::fs::read_to_string(dir.join(want)).unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
    }
    // The admissions and readmissions are among what it shows.
    let shown = std::fs::read_to_string(dir.join("show-decisions.txt")).unwrap();
    assert!(shown.contains(
        "admitted resp-py-http: e1 emitted, e2 emitted, e3 retained, e4 pending (DEPS_NOT_READY)"
    ));
    assert!(shown.contains("readmitted mcp-1-2: a2 retained"));
    // A reader that closes the pipe after one line.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["audit", "show", &log])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
