//! The evaluation binary's command line as a user meets it: `contract audit` (the independent
//! checker over `contract run`'s receipts, which the flight binary writes) and `replay` over a
//! user's own recorded responses. `halo-eval` also takes every flight command (`contract run`,
//! `audit verify`, ...), the same code as `halo-gateway`'s.
use crate::common::{self, repo_root};
use halo_eval::cli::run_with;
use halo_gateway::cli::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_REJECTED};

fn path(p: &str) -> String {
    repo_root().join(p).display().to_string()
}

#[test]
fn contract_run_and_independent_audit() {
    let _timing = common::shared();
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
    let audit = || run_with(["halo-eval", "contract", "audit", "--domain", &domain, &log]);

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
    let rs: Vec<halo_core::Receipt> = lines
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    common::write_relinked(std::path::Path::new(&log), &rs);
    let (rc, text) = common::halo(&["contract", "audit", "--domain", &domain, &log]);
    assert_eq!(rc, EXIT_REJECTED);
    assert!(text.contains("the checker derives a refusal"), "{text}");

    // Usage and file errors.
    assert_eq!(run("Cargo.toml", &[]), EXIT_ERROR);
    assert_eq!(
        run_with([
            "halo-eval",
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

/// A signed contract log: `contract run --signing-key` ends it with a checkpoint; a consistent
/// rewrite (an approver renamed, the no-fly rule dropped, every hash recomputed) passes the
/// chain and the independent replay, and only the signature catches it.
#[test]
fn a_signed_contract_log_catches_a_consistent_rewrite() {
    let _timing = common::shared();
    use common::{halo, read_log, write_relinked};
    let dir = std::env::temp_dir().join(format!("halo-contract-sig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = dir.join("receipts.jsonl");
    let l = log.display().to_string();
    let key = dir.join("audit-key");
    let k = key.display().to_string();
    let pubk = format!("{k}.pub");
    let (rc, text) = halo(&[
        "contract",
        "run",
        "--signing-key",
        &k,
        "--receipts",
        &l,
        &path("docs/examples/contract-workflow.json"),
    ]);
    assert_eq!(rc, EXIT_OK, "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (rc, text) = halo(&["contract", "audit", "--key", &pubk, &l]);
    assert_eq!(rc, EXIT_OK, "{text}");
    assert!(text.contains("signed: every receipt is covered"), "{text}");
    assert_eq!(halo(&["audit", "verify", "--key", &pubk, &l]).0, EXIT_OK);

    let rs = read_log(&log);
    let forged = dir.join("forged.jsonl");
    let f = forged.display().to_string();
    let mut renamed = rs.clone();
    renamed[0]
        .body
        .edit(|b| b["request"]["op"]["approved_by"] = serde_json::json!("mallory"));
    let mut no_nofly = rs.clone();
    no_nofly[0].body.edit(|b| {
        let forbidden = &mut b["request"]["op"]["contract"]["forbidden"];
        let before = forbidden.as_array().unwrap().len();
        forbidden
            .as_array_mut()
            .unwrap()
            .retain(|c| c != &serde_json::json!(["zone == nofly"]));
        assert_eq!(forbidden.as_array().unwrap().len(), before - 1);
    });
    for forgery in [renamed, no_nofly] {
        write_relinked(&forged, &forgery);
        // The chain and the replay accept it: a hash chain cannot tell.
        let (rc, text) = halo(&["contract", "audit", &f]);
        assert_eq!(rc, EXIT_OK, "{text}");
        let (rc, text) = halo(&["contract", "audit", "--key", &pubk, &f]);
        assert_eq!(rc, EXIT_REJECTED, "{text}");
        assert!(text.contains("signature does not verify"), "{text}");
        assert_eq!(
            halo(&["audit", "verify", "--key", &pubk, &f]).0,
            EXIT_REJECTED
        );
    }
    // Cut before its final checkpoint.
    write_relinked(&forged, &rs[..rs.len() - 1]);
    let (rc, text) = halo(&["contract", "audit", "--key", &pubk, &f]);
    assert_eq!(rc, EXIT_REJECTED, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Contract names follow the envelope's id rule in the monitor and, independently, in the
/// checker: a root id with a Cyrillic look-alike letter or an approver with a NUL is refused
/// (INVALID_ID), and the independent audit derives the same refusal from the log.
#[test]
fn contract_names_follow_the_id_rule_in_monitor_and_checker() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-contract-ids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wf: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(path("docs/examples/contract-workflow.json")).unwrap(),
    )
    .unwrap();
    let mut lookalike = wf.clone();
    let root = lookalike["contract"]["root"]
        .as_str()
        .unwrap()
        .replace('e', "\u{0435}");
    lookalike["contract"]["root"] = serde_json::json!(root);
    let mut nul = wf.clone();
    nul["approved_by"] = serde_json::json!("ops\u{0}lead");
    for (name, w) in [("lookalike", lookalike), ("nul", nul)] {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, w.to_string()).unwrap();
        let log = dir.join(format!("{name}.jsonl")).display().to_string();
        let (rc, text) = common::halo(&[
            "contract",
            "run",
            "--receipts",
            &log,
            &file.display().to_string(),
        ]);
        assert_eq!(rc, EXIT_PARTIAL, "{name}: {text}");
        assert!(text.contains("INVALID_ID"), "{name}: {text}");
        let (rc, text) = common::halo(&["contract", "audit", &log]);
        assert_eq!(
            rc, EXIT_OK,
            "{name}: the checker derives the refusal too: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `halo-gateway replay` takes a user's own recorded responses: a directory of JSON-lines files
/// (family, provenance with the envelope's digest, envelope), prints the panel and exits 0 when
/// the product keeps every supported component and leaks nothing. A record whose digest does not
/// match its envelope is refused with its file and line.
#[test]
fn replay_takes_a_directory_of_recorded_responses() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cohort = std::fs::read_to_string(common::data_dir().join("replay/cohort.jsonl")).unwrap();
    let lines: Vec<&str> = cohort.lines().collect();
    // Two files: a running-example-shaped response and a fan-out one.
    let pick = |family: &str| {
        *lines
            .iter()
            .find(|l| l.contains(&format!("\"family\":\"{family}\"")))
            .unwrap()
    };
    std::fs::write(
        dir.join("a.jsonl"),
        format!("{}\n", pick("running-example")),
    )
    .unwrap();
    std::fs::write(dir.join("b.jsonl"), format!("{}\n", pick("fan-out"))).unwrap();
    let d = dir.display().to_string();
    let (rc, out) = common::halo(&["replay", &d]);
    assert_eq!(rc, EXIT_OK, "{out}");
    assert!(
        out.contains("2 responses × 12 conditions × 8 variants"),
        "{out}"
    );
    assert!(out.contains("Full               yes"), "{out}");
    // A record whose envelope was edited after its digest was taken.
    let edited = pick("fan-out").replacen("\"planner-1\"", "\"planner-2\"", 1);
    std::fs::write(
        dir.join("b.jsonl"),
        format!("{}\n{edited}\n", pick("fan-out")),
    )
    .unwrap();
    let (rc, out) = common::halo(&["replay", &d]);
    assert_eq!(rc, EXIT_ERROR, "{out}");
    assert!(out.contains("b.jsonl:2: provenance digest"), "{out}");
    assert!(out.contains("does not match the envelope"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn both_verifiers_read_records_strictly_and_report_a_torn_tail() {
    let _timing = common::shared();
    let dir = std::env::temp_dir().join(format!("halo-strict-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("receipts.jsonl");
    let l = log.display().to_string();
    assert_eq!(
        common::halo(&[
            "contract",
            "run",
            "--receipts",
            &l,
            &path("docs/examples/contract-workflow.json"),
        ])
        .0,
        EXIT_OK
    );
    let honest = std::fs::read_to_string(&log).unwrap();
    let first = honest.lines().next().unwrap().to_string();
    let bad = dir.join("bad.jsonl");
    let b = bad.display().to_string();
    let variants = [
        (
            "duplicate key",
            honest.replacen("{\"index\":0,", "{\"index\":0,\"index\":0,", 1),
        ),
        (
            "unknown field",
            honest.replacen(&first, &first.replacen("}", ",\"note\":1}", 1), 1),
        ),
        (
            "whitespace",
            honest.replacen("\"index\":0", "\"index\": 0", 1),
        ),
        (
            "escaped character",
            honest.replacen("\"caller\"", "\"c\\u0061ller\"", 1),
        ),
        ("blank line", honest.replacen('\n', "\n\n", 1)),
    ];
    for (what, text) in &variants {
        assert_ne!(text, &honest, "{what}");
        std::fs::write(&bad, text).unwrap();
        for cmd in [&["audit", "verify"][..], &["contract", "audit"][..]] {
            let mut a: Vec<&str> = cmd.to_vec();
            a.push(&b);
            let (rc, out) = common::halo(&a);
            assert_eq!(rc, EXIT_REJECTED, "{what} via {cmd:?}: {out}");
        }
    }
    // Torn: the last record cut mid-write.
    let cut = honest.len() - 30;
    let offset = honest[..cut].rfind('\n').unwrap() + 1;
    std::fs::write(&bad, &honest[..cut]).unwrap();
    let n = honest.lines().count() - 1;
    for cmd in [&["audit", "verify"][..], &["contract", "audit"][..]] {
        let mut a: Vec<&str> = cmd.to_vec();
        a.push(&b);
        let (rc, out) = common::halo(&a);
        assert_eq!(rc, EXIT_REJECTED, "{cmd:?}: {out}");
        assert!(
            out.contains(&format!("torn record at byte {offset}")),
            "{cmd:?}: {out}"
        );
        assert!(out.contains(&format!("{n} receipts")), "{cmd:?}: {out}");
    }
    // `audit show` shows the intact prefix (every whole record) and says the tail is torn.
    let (rc, out) = common::halo(&["audit", "show", &b]);
    assert_eq!(rc, EXIT_OK, "{out}");
    let shown = out.lines().filter(|l| l.contains("s  ")).count();
    assert_eq!(shown, n, "{out}");
    assert!(
        out.contains(&format!("the last record is torn at byte {offset}")),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every file the binary reads goes through a size cap before it is parsed: an endless file
/// (`/dev/zero`) or an oversized one is a one-line error naming the file, exit 3, and nothing
/// is read past the cap.
#[test]
fn endless_and_oversized_files_are_refused_at_their_cap() {
    let _timing = common::shared();
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
        let out = std::process::Command::new(common::BIN)
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
