//! End to end: the real `halo-gateway run` process, driven over real HTTP, flying a simulated
//! PX4 that runs in this test process on its own UDP socket. The evidence of what reached the
//! vehicle is the simulator's own record of the setpoints its controller took.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;

use common::Checks;
use common::service::*;

#[test]
fn the_running_example_flies_over_http() {
    let _timing = common::shared();
    let dir = tmp("example");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();

    // The event stream, from the start.
    let events = Arc::new(Mutex::new(Vec::new()));
    let stop_sse = Arc::new(AtomicBool::new(false));
    let _sse = sse_reader(
        u.clone(),
        g.agent.clone(),
        None,
        Arc::clone(&events),
        Arc::clone(&stop_sse),
    );

    // The operator arms (once PX4 is ready) and takes off to 5 m.
    take_off(&g, &sim);
    let providers = Providers::start(&u, &g.provider);

    // resp-0007: notice and report go out, the route action passes the gate and flies, the
    // status follows its dispatch.
    let r1 = json!({"response_id": "resp-0007", "agent_id": "planner-1", "generation": 12,
    "catalog": {"id": "uav-px4", "version": 6},
    "components": [
        {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
        {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}},
        route("e3", [12.0, 3.5, -10.0, 90.0], 7, "cert-9f2c"),
        {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"}, "requires": [{"id": "e3", "phase": "dispatched"}]}
    ]});
    certify(&g, &r1, "e3", "cert-9f2c");
    let (st, rep) = post(
        &format!("{u}/v1/responses"),
        Some(&g.agent),
        r1.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{rep}");
    assert_eq!(
        phases(&rep),
        [
            ("e1".into(), "emitted".into()),
            ("e2".into(), "emitted".into()),
            ("e3".into(), "dispatched".into()),
            ("e4".into(), "emitted".into())
        ]
    );
    assert!(rep["components"][2]["binding"].as_str().unwrap().len() == 64);
    // What its admission receipt must pin: SHA-256 over the format-3 tag and the component
    // digests the answer gave, in envelope order (computed here, apart from the gateway).
    let r1_pinned = {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(b"halo/components/v1\0");
        for c in rep["components"].as_array().unwrap() {
            let hex = c["digest"].as_str().unwrap();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            h.update(&bytes);
        }
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let e3_fp = fp(12.0, 3.5, -10.0, 90.0);
    wait_until(20, "e3 at the vehicle", || {
        sim.fingerprints().contains(&e3_fp)
    });

    // Support lost while e3 streams (its certificate is revoked): deny-hold at once, and the
    // vehicle takes no e3 setpoint after it.
    let (st, v) = delete(&format!("{u}/v1/certificates/cert-9f2c"), Some(&g.provider));
    assert_eq!(st, 200, "{v}");
    wait_until(5, "the deny-hold event", || {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|(_, n, d)| n == "deny_hold" && d.contains("\"held\":true"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let count = |f: &str| sim.fingerprints().iter().filter(|x| *x == f).count();
    let before = count(&e3_fp);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        count(&e3_fp),
        before,
        "the vehicle took e3 after the deny-hold"
    );

    // The map changes while the agent plans resp-0008 against epoch 7: e5 and its status are
    // withheld with an obligation; nothing of e5 reaches the vehicle.
    providers.map_epoch.store(8, Ordering::Relaxed);
    // Wait for the feed thread to publish it (publishing from here too could race it and be
    // refused as out of order).
    wait_until(5, "map epoch 8 held", || {
        get(&format!("{u}/v1/status"), None).1["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["source"] == "map" && s["epoch"] == 8)
    });
    let r2 = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 13,
    "catalog": {"id": "uav-px4", "version": 6},
    "components": [
        route("e5", [30.0, 20.0, -10.0, 45.0], 7, "cert-a001"),
        {"id": "e6", "type": "status", "payload": {"text": "En route to WP4"}, "requires": [{"id": "e5", "phase": "dispatched"}]}
    ]});
    certify(&g, &r2, "e5", "cert-a001");
    let (st, rep) = post(
        &format!("{u}/v1/responses"),
        Some(&g.agent),
        r2.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["components"][0]["phase"], "withheld", "{rep}");
    assert_eq!(rep["components"][0]["reason"], "EPOCH_CHANGED", "{rep}");
    assert_eq!(rep["components"][1]["phase"], "withheld", "{rep}");
    let oid = rep["components"][0]["obligation"].as_u64().unwrap();
    let (st, obls) = get(&format!("{u}/v1/obligations"), Some(&g.agent));
    assert_eq!(st, 200);
    let o = obls
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == oid)
        .unwrap()
        .clone();
    assert_eq!(o["required"], json!(["map"]), "{o}");

    // The agent answers with a fresh candidate planned against epoch 8.
    let cand_route = route("e5", [30.0, 18.0, -10.0, 45.0], 8, "cert-a002");
    let as_response = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [cand_route.clone()]});
    certify(&g, &as_response, "e5", "cert-a002");
    let cand = json!({"obligation": oid, "response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [cand_route]});
    // Naming another obligation than the URL is refused and changes nothing.
    let (st, v) = post(
        &format!("{u}/v1/obligations/{}/candidates", oid + 100),
        Some(&g.agent),
        cand.to_string().as_bytes(),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("OBLIGATION_MISMATCH"))
    );
    let (st, v) = post(
        &format!("{u}/v1/obligations/{oid}/candidates"),
        Some(&g.agent),
        cand.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["readmitted"][0]["generation"], 2, "{v}");
    let fresh_fp = fp(30.0, 18.0, -10.0, 45.0);
    let stale_fp = fp(30.0, 20.0, -10.0, 45.0);
    wait_until(20, "the fresh e5 at the vehicle", || {
        sim.fingerprints().contains(&fresh_fp)
    });

    // Land through the gate.
    let r3 = json!({"response_id": "resp-0009", "agent_id": "planner-1", "generation": 15,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "l1", "type": "land", "payload": {}}]});
    let (st, rep) = post(
        &format!("{u}/v1/responses"),
        Some(&g.agent),
        r3.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["components"][0]["phase"], "dispatched", "{rep}");
    wait_until(60, "landed and disarmed", || {
        let v = sim.control.view();
        v.on_ground && !v.armed
    });
    drop(providers);

    // What the vehicle took: both dispatched targets, never the stale one.
    let mut example = Checks::new("service-example");
    let taken = sim.fingerprints();
    example.check(
        "the vehicle took e3 and the readmitted e5 (the simulator's setpoint log)",
        taken.contains(&e3_fp) && taken.contains(&fresh_fp),
    );
    example.check(
        "the withheld e5 never reached the vehicle",
        !taken.contains(&stale_fp),
    );

    // The event stream carried the story; a client resuming from the middle gets exactly the
    // events after its Last-Event-ID.
    std::thread::sleep(Duration::from_millis(300));
    let seen = events.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(_, n, _)| n.as_str()).collect();
    let mut resume = Checks::new("service-sse-resume");
    for want in [
        "emit",
        "gate",
        "obligation_created",
        "vehicle_mode",
        "vehicle_command",
    ] {
        resume.check(
            format!("the stream carried a `{want}` event"),
            names.contains(&want),
        );
    }
    let ids: Vec<u64> = seen.iter().map(|e| e.0).collect();
    resume.check(
        "event ids are sequential",
        ids.windows(2).all(|w| w[1] == w[0] + 1),
    );
    let mid = ids[ids.len() / 2];
    let resumed = Arc::new(Mutex::new(Vec::new()));
    let stop2 = Arc::new(AtomicBool::new(false));
    let _r = sse_reader(
        u.clone(),
        g.agent.clone(),
        Some(mid),
        Arc::clone(&resumed),
        Arc::clone(&stop2),
    );
    wait_until(10, "the resumed stream to catch up", || {
        resumed.lock().unwrap().len() >= seen.len() - ids.len() / 2 - 1
    });
    let got = resumed.lock().unwrap().clone();
    let expect: Vec<_> = seen.iter().filter(|e| e.0 > mid).cloned().collect();
    resume.check(
        format!("the resumed stream starts at id {}", mid + 1),
        got.first().map(|e| e.0) == Some(mid + 1),
    );
    resume.check(
        "the resumed stream is exactly the events after Last-Event-ID",
        got.get(..expect.len()) == Some(&expect[..]),
    );
    resume.finish(
        8,
        &format!("{} events replayed after id {mid}", expect.len()),
    );

    // Clean shutdown: exit 0, the receipt log verifies.
    stop_sse.store(true, Ordering::Relaxed);
    stop2.store(true, Ordering::Relaxed);
    let state = g.state.clone();
    example.check("the gateway stopped cleanly (exit 0)", g.stop() == 0);
    let log = state.join("receipts").join("boot-1.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    example.check(
        format!(
            "`audit verify` accepts the receipt log: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        out.status.success(),
    );
    let text = std::fs::read_to_string(&log).unwrap();
    example.check(
        "receipts carry wall-clock time",
        text.contains("\"wall_unix_ms\":"),
    );
    example.check(
        "the operator's commands are receipted",
        text.contains("\"what\":\"operator_command\""),
    );
    example.check(
        "the revoked certificate's loss of support is receipted",
        text.contains("\"kind\":\"support_lost\""),
    );
    let latency = text
        .lines()
        .find(|l| l.contains("\"what\":\"deny_hold_done\""))
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["body"]["detail"]["latency_us"].as_u64())
        .expect("a deny-hold receipt with its latency");
    println!(
        "  the running example's deny-hold: support lost to the first hold setpoint in {latency} µs"
    );
    example.check(
        "the shutdown is receipted",
        text.contains("\"what\":\"shutdown\""),
    );
    // resp-0007's admission receipt (format 3): its ids in envelope order, the digest over
    // theirs, and every position given one decision.
    let admitted = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["body"].clone())
        .find(|b| b["kind"] == "admitted" && b["response"] == "resp-0007")
        .expect("resp-0007's admission receipt");
    let c = &admitted["components"];
    example.check(
        "resp-0007's admission names its ids in envelope order",
        c["ids"] == json!(["e1", "e2", "e3", "e4"]),
    );
    example.check(
        "resp-0007's admission digest is the pinned one",
        c["digest"] == r1_pinned.as_str(),
    );
    let mut at: Vec<u64> = c["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| {
            d["at"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
        })
        .collect();
    at.sort_unstable();
    example.check(
        "every position of resp-0007 has exactly one decision",
        at == [0, 1, 2, 3],
    );
    example.finish(11, &format!("deny-hold in {latency} µs"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `halo-gateway run --config FILE` that must refuse to start: exit 3 and one line on stderr,
/// which is returned.
fn refused_config(file: &Path) -> String {
    refused_start(file, 3)
}

/// `halo-gateway run --config FILE` that must refuse to start with exit `code` and one line on
/// stderr, which is returned.
fn refused_start(file: &Path, code: i32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["run", "--config"])
        .arg(file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

/// A missing configuration file is one clear line and exit code 3; so is an unknown key.
#[test]
fn configuration_errors_are_one_line_and_exit_3() {
    let _timing = common::shared();
    let dir = tmp("config");
    let err = refused_config(&dir.join("nope.toml"));
    assert!(
        err.contains("nope.toml") && err.contains("no such file"),
        "{err}"
    );
    std::fs::write(
        dir.join("bad.toml"),
        "[vehicle]\nurl = \"udpout:127.0.0.1:9\"\nspeed = 3\n",
    )
    .unwrap();
    let err = refused_config(&dir.join("bad.toml"));
    assert!(
        err.contains("bad.toml:3:") && err.contains("speed"),
        "{err}"
    );
    // The flight binary flies only the vehicle it is told: no vehicle, or the evaluation
    // binary's embedded simulator, is a refusal saying what to do.
    std::fs::write(dir.join("none.toml"), "[listen]\nhttp = \"127.0.0.1:0\"\n").unwrap();
    let err = refused_config(&dir.join("none.toml"));
    assert!(
        err.contains("no vehicle: set vehicle.url") && err.contains("scripts/run_sim.sh"),
        "{err}"
    );
    std::fs::write(dir.join("sim.toml"), "[vehicle]\nurl = \"sim\"\n").unwrap();
    let err = refused_config(&dir.join("sim.toml"));
    assert!(
        err.contains("embedded simulator") && err.contains("halo-eval run"),
        "{err}"
    );
    // A vehicle link that cannot open (6) and a state directory that cannot be used (7) each
    // have their own exit code.
    std::fs::write(
        dir.join("serial.toml"),
        format!(
            "[vehicle]\nurl = \"serial:{}:921600\"\n[listen]\nhttp = \"127.0.0.1:0\"\n",
            dir.join("no-such-tty").display()
        ),
    )
    .unwrap();
    let err = refused_start(&dir.join("serial.toml"), 6);
    assert!(
        err.contains("vehicle link") && err.contains("no-such-tty"),
        "{err}"
    );
    std::fs::write(dir.join("a-file"), "not a directory").unwrap();
    std::fs::write(
        dir.join("state.toml"),
        format!(
            "[vehicle]\nurl = \"udpout:127.0.0.1:9\"\n[listen]\nhttp = \"127.0.0.1:0\"\n[state]\ndir = \"{}\"\n",
            dir.join("a-file").join("state").display()
        ),
    )
    .unwrap();
    let err = refused_start(&dir.join("state.toml"), 7);
    assert!(err.contains("state directory"), "{err}");
    // An operator-supplied audit key that others can read is refused, not used.
    let key = dir.join("audit-key");
    std::fs::write(&key, format!("{}\n", "11".repeat(32))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(
            dir.join("key.toml"),
            format!(
                "[vehicle]\nurl = \"udpout:127.0.0.1:9\"\n[state]\ndir = \"{}\"\n[receipts]\nsigning_key = \"{}\"\n",
                dir.join("state").display(),
                key.display()
            ),
        )
        .unwrap();
        let err = refused_config(&dir.join("key.toml"));
        assert!(
            err.contains("readable by others") && err.contains("chmod 600"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A start that fails after its configuration parsed (the listener's port is taken) touches no
/// state: no boot epoch bumped, no receipt file created, none deleted, even at `max_files`.
#[test]
fn a_failed_start_touches_no_state() {
    let _timing = common::shared();
    let dir = tmp("failed-start");
    let state = dir.join("state");
    let receipts = state.join("receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    std::fs::write(state.join("boot_epoch"), "7\n").unwrap();
    // Two earlier starts' logs, at the cap of 2.
    std::fs::write(receipts.join("boot-5.jsonl"), "{\"index\":0}\n").unwrap();
    std::fs::write(receipts.join("boot-6.jsonl"), "{\"index\":0}\n").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = dir.join("busy.toml");
    std::fs::write(
        &cfg,
        format!(
            "[vehicle]\nurl = \"udpout:127.0.0.1:9\"\n[listen]\nhttp = \"127.0.0.1:{port}\"\n[state]\ndir = \"{}\"\n[receipts]\nmax_files = 2\n",
            state.display()
        ),
    )
    .unwrap();
    let before: Vec<String> = {
        let mut v: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    };
    let mut c = Checks::new("service-failed-start");
    for k in 1..=3 {
        // A listener that cannot bind is its own exit code (5), not a configuration error.
        let err = refused_start(&cfg, 5);
        c.check(
            format!("start {k} on a taken port exits 5 saying it cannot listen"),
            err.contains("cannot listen"),
        );
    }
    drop(taken);
    let mut after: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    after.sort();
    c.check(
        "nothing in the state directory was created or deleted",
        before == after,
    );
    c.check(
        "the boot epoch was not bumped",
        std::fs::read_to_string(state.join("boot_epoch")).unwrap() == "7\n",
    );
    let mut logs: Vec<String> = std::fs::read_dir(&receipts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    logs.sort();
    c.check(
        "no receipt log was rotated away or created",
        logs == ["boot-5.jsonl", "boot-6.jsonl"],
    );
    c.finish(6, "3 starts refused on a taken port");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A vehicle command while no heartbeat arrives fails at once with `NO_VEHICLE_LINK`; hold and
/// release still work.
#[test]
fn vehicle_commands_without_a_link_fail_at_once() {
    let _timing = common::shared();
    let dir = tmp("nolink");
    // Nothing answers on the discard port.
    let g = Gateway::start(&dir, "udpout:127.0.0.1:9", "");
    let t0 = Instant::now();
    let (st, v) = post(
        &format!("{}/v1/operator/arm", g.url),
        Some(&g.operator),
        b"{}",
    );
    let took = t0.elapsed();
    let mut c = Checks::new("service-no-vehicle-link");
    c.check(
        format!("arming without a link is 503 NO_VEHICLE_LINK: {v}"),
        (st, v["error"]["code"].as_str()) == (503, Some("NO_VEHICLE_LINK")),
    );
    c.check(
        "the refusal names the vehicle URL",
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("127.0.0.1:9")),
    );
    c.check(
        format!("refused at once, without retries ({} ms)", took.as_millis()),
        took < Duration::from_secs(5),
    );
    let (st, _) = post(
        &format!("{}/v1/operator/hold", g.url),
        Some(&g.operator),
        b"{}",
    );
    c.check("the operator's hold still works (200)", st == 200);
    let (st, _) = post(
        &format!("{}/v1/operator/release", g.url),
        Some(&g.operator),
        b"{}",
    );
    c.check("the operator's release still works (200)", st == 200);
    c.check("the gateway stops cleanly (exit 0)", g.stop() == 0);
    c.finish(6, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every endpoint with every kind of credential: none, a wrong one, and each role's.
#[test]
fn roles_and_bad_input() {
    let _timing = common::shared();
    let dir = tmp("roles");
    let g = Gateway::start(&dir, "sim", "");
    let u = g.url.clone();
    let creds: [(&str, Option<&str>); 5] = [
        ("none", None),
        ("wrong", Some("0000000000000000000000000000000000000000")),
        ("agent", Some(&g.agent)),
        ("provider", Some(&g.provider)),
        ("operator", Some(&g.operator)),
    ];
    // (method, path, body, roles allowed; "*" = public)
    let routes: [(&str, &str, &str, &[&str]); 19] = [
        ("POST", "/v1/responses", "{}", &["agent"]),
        ("GET", "/v1/responses", "", &["agent", "operator"]),
        ("GET", "/v1/responses/nosuch", "", &["agent", "operator"]),
        ("GET", "/v1/obligations", "", &["agent", "operator"]),
        ("POST", "/v1/obligations/1/candidates", "{}", &["agent"]),
        ("GET", "/v1/events", "", &["agent", "operator"]),
        ("POST", "/v1/state/traffic", "{}", &["provider"]),
        ("POST", "/v1/certificates", "{}", &["provider", "operator"]),
        (
            "DELETE",
            "/v1/certificates/nosuch",
            "",
            &["provider", "operator"],
        ),
        ("POST", "/v1/operator/hold", "{}", &["operator"]),
        ("POST", "/v1/operator/release", "{}", &["operator"]),
        ("POST", "/v1/contract", "{}", &["operator", "provider"]),
        ("GET", "/v1/contract", "", &["agent", "operator"]),
        ("POST", "/v1/goals", "{}", &["agent"]),
        ("GET", "/v1/status", "", &["*"]),
        ("GET", "/v1/audit/head", "", &["*"]),
        ("GET", "/v1/schema", "", &["*"]),
        ("GET", "/metrics", "", &["*"]),
        // The console's page: no data, no credential needed (docs/console.md).
        ("GET", "/", "", &["*"]),
    ];
    let short = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent();
    let mut matched = 0;
    let mut total = 0;
    println!(
        "{:<36} {:>6} {:>6} {:>6} {:>9} {:>9}",
        "route", "none", "wrong", "agent", "provider", "operator"
    );
    for (method, path, body, allowed) in routes {
        let mut row = Vec::new();
        for (who, tok) in creds {
            let url = format!("{u}{path}");
            let mut resp = match method {
                "GET" => {
                    let mut r = short.get(&url);
                    if let Some(t) = tok {
                        r = r.header("Authorization", &format!("Bearer {t}"));
                    }
                    r.call().unwrap()
                }
                "DELETE" => {
                    let mut r = short.delete(&url);
                    if let Some(t) = tok {
                        r = r.header("Authorization", &format!("Bearer {t}"));
                    }
                    r.call().unwrap()
                }
                _ => {
                    let mut r = short.post(&url);
                    if let Some(t) = tok {
                        r = r.header("Authorization", &format!("Bearer {t}"));
                    }
                    r.send(body.as_bytes()).unwrap()
                }
            };
            let status = resp.status().as_u16();
            let code = if path == "/v1/events" && status == 200 {
                String::new()
            } else {
                let text = resp.body_mut().read_to_string().unwrap_or_default();
                serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                    .unwrap_or_default()
            };
            let public = allowed.contains(&"*");
            let ok = if public {
                status == 200
            } else if matches!(who, "none" | "wrong") {
                status == 401 && code == "UNAUTHENTICATED"
            } else if allowed.contains(&who) {
                status != 401 && status != 403
            } else {
                // A source the caller's role does not own is refused by its owner rule.
                status == 403
                    && (code == "FORBIDDEN_ROLE"
                        || (path.starts_with("/v1/state/") && code == "SOURCE_NOT_WRITABLE"))
            };
            total += 1;
            if ok {
                matched += 1;
            }
            row.push(format!("{status}{}", if ok { "" } else { "!" }));
        }
        println!(
            "{:<36} {:>6} {:>6} {:>6} {:>9} {:>9}",
            format!("{method} {path}"),
            row[0],
            row[1],
            row[2],
            row[3],
            row[4]
        );
    }
    println!("service-roles: {matched}/{total} matched");
    assert_eq!((matched, total), (95, 95));

    // Bad input: a clear status and reason, and nothing else changes.
    let observe = || {
        let (_, st) = get(&format!("{u}/v1/status"), None);
        let sources: Vec<Value> = st["sources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["provenance"] != "px4")
            .map(|s| json!([s["source"], s["epoch"], s["provenance"]]))
            .collect();
        let (_, obl) = get(&format!("{u}/v1/obligations"), Some(&g.operator));
        json!({"responses": st["responses_live"], "obligations": obl, "sources": sources, "hold": st["operator_hold"]})
    };
    let at = unix_ms();
    let upd = |v: Value, at: u64| {
        json!({"value": v, "epoch": 41, "provenance": "utm-feed-a", "generated_at_unix_ms": at})
            .to_string()
    };
    let (st, v) = post(
        &format!("{u}/v1/state/traffic"),
        Some(&g.provider),
        upd(json!([]), at).as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    let before = observe();
    let big = vec![b' '; 600 * 1024];
    let mid = vec![b' '; 100 * 1024];
    let r1 = json!({"response_id": "r1", "agent_id": "a", "generation": 1, "catalog": {"id": "uav-px4", "version": 6},
                    "components": [{"id": "e1", "type": "notice", "payload": {"text": "x"}}], "extra": 1}).to_string();
    /// (what, url, credential, body, expected status, expected code)
    type Case<'a> = (&'a str, String, Option<&'a str>, Vec<u8>, u16, &'a str);
    let cases: Vec<Case<'_>> = vec![
        ("malformed JSON", format!("{u}/v1/responses"), Some(&g.agent), b"{\"response_id\":".to_vec(), 422, "MALFORMED_JSON"),
        ("oversized response", format!("{u}/v1/responses"), Some(&g.agent), big, 413, "RESPONSE_TOO_LARGE"),
        ("unknown field", format!("{u}/v1/responses"), Some(&g.agent), r1.into_bytes(), 422, "UNKNOWN_FIELD"),
        ("unknown source", format!("{u}/v1/state/nosuch"), Some(&g.provider), upd(json!([]), at).into_bytes(), 404, "UNKNOWN_SOURCE"),
        ("generated in the future", format!("{u}/v1/state/traffic"), Some(&g.provider), upd(json!([]), at + 10_000).into_bytes(), 422, "FUTURE_TIMESTAMP"),
        ("older than held", format!("{u}/v1/state/traffic"), Some(&g.provider), upd(json!([]), at - 5_000).into_bytes(), 422, "OUT_OF_ORDER_UPDATE"),
        ("wrong value kind", format!("{u}/v1/state/traffic"), Some(&g.provider), upd(json!(5), at + 1).into_bytes(), 422, "VALUE_KIND_MISMATCH"),
        ("duplicate key", format!("{u}/v1/state/traffic"), Some(&g.provider),
            format!("{{\"value\":[],\"epoch\":1,\"epoch\":2,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}").into_bytes(), 400, "DUPLICATE_KEY"),
        ("duplicate key in the value", format!("{u}/v1/state/traffic"), Some(&g.provider),
            format!("{{\"value\":[{{\"north_m\":90,\"north_m\":1,\"east_m\":0,\"down_m\":-10}}],\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}").into_bytes(), 400, "DUPLICATE_KEY"),
        ("certificate duplicate key", format!("{u}/v1/certificates"), Some(&g.provider),
            br#"{"id":"c1","id":"c2","covers":"00","valid_for_ms":1000,"issuer":"geo"}"#.to_vec(), 400, "DUPLICATE_KEY"),
        ("oversized update", format!("{u}/v1/state/traffic"), Some(&g.provider), mid, 413, "BODY_TOO_LARGE"),
        ("certificate digest", format!("{u}/v1/certificates"), Some(&g.provider),
            br#"{"id":"c1","covers":"zz","valid_for_ms":1000,"issuer":"geo"}"#.to_vec(), 422, "INVALID_UPDATE"),
        ("wrong credential", format!("{u}/v1/state/traffic"), Some("not-a-credential-at-all"), upd(json!([]), at + 2).into_bytes(), 401, "UNAUTHENTICATED"),
        ("agent writes state", format!("{u}/v1/state/traffic"), Some(&g.agent), upd(json!([]), at + 3).into_bytes(), 403, "FORBIDDEN_ROLE"),
        ("agent issues a certificate", format!("{u}/v1/certificates"), Some(&g.agent),
            br#"{"id":"c1","covers":"00","valid_for_ms":1000,"issuer":"geo"}"#.to_vec(), 403, "FORBIDDEN_ROLE"),
        ("no such obligation", format!("{u}/v1/obligations/abc/candidates"), Some(&g.agent), b"{}".to_vec(), 404, "NO_OBLIGATION"),
        ("no such operator action", format!("{u}/v1/operator/fly"), Some(&g.operator), b"{}".to_vec(), 404, "NOT_FOUND"),
        ("takeoff too high", format!("{u}/v1/operator/takeoff"), Some(&g.operator), br#"{"altitude_m": 500}"#.to_vec(), 422, "INVALID_REQUEST"),
        ("number out of range", format!("{u}/v1/state/wind"), Some(&g.provider),
            format!("{{\"value\":1e400,\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}").into_bytes(), 400, "INVALID_UPDATE"),
        ("NaN", format!("{u}/v1/state/wind"), Some(&g.provider),
            format!("{{\"value\":NaN,\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}").into_bytes(), 400, "INVALID_UPDATE"),
        ("not UTF-8", format!("{u}/v1/state/wind"), Some(&g.provider),
            b"{\"value\":\"\xff\",\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":1}".to_vec(), 400, "INVALID_UPDATE"),
        ("nested too deep", format!("{u}/v1/state/traffic"), Some(&g.provider),
            format!("{{\"value\":{}{},\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}", "[".repeat(300), "]".repeat(300)).into_bytes(), 400, "INVALID_UPDATE"),
        ("generation past 2^53", format!("{u}/v1/responses"), Some(&g.agent),
            json!({"response_id": "r-gen", "agent_id": "a", "generation": u64::MAX, "catalog": {"id": "uav-px4", "version": 6},
                   "components": [{"id": "e1", "type": "notice", "payload": {"text": "x"}}]}).to_string().into_bytes(), 422, "GENERATION_OUT_OF_RANGE"),
        ("certificate for ever", format!("{u}/v1/certificates"), Some(&g.provider),
            format!("{{\"id\":\"c1\",\"covers\":\"{}\",\"valid_for_ms\":{},\"issuer\":\"geo\"}}", "0".repeat(64), u64::MAX).into_bytes(), 422, "CERTIFICATE_TOO_LONG"),
        ("provider writes the vehicle's link", format!("{u}/v1/state/link"), Some(&g.provider),
            format!("{{\"value\":true,\"epoch\":1,\"provenance\":\"x\",\"generated_at_unix_ms\":{at}}}").into_bytes(), 403, "SOURCE_NOT_WRITABLE"),
        ("operator writes traffic", format!("{u}/v1/state/traffic"), Some(&g.operator), upd(json!([]), at + 4).into_bytes(), 403, "SOURCE_NOT_WRITABLE"),
    ];
    let mut ok = 0;
    for (name, url, tok, body, want_status, want_code) in &cases {
        let (st, v) = post(url, *tok, body);
        let code = v["error"]["code"].as_str().unwrap_or("");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        let good = st == *want_status && code == *want_code && !msg.is_empty();
        println!("  {name:<28} {st} {code:<22} {msg}");
        if good {
            ok += 1;
        }
    }
    let after = observe();
    assert_eq!(before, after, "a refused input changed state");
    println!("service-bad-input: {ok}/{} matched", cases.len());
    assert_eq!(cases.len(), 26, "the bad-input table changed");
    assert_eq!(ok, cases.len());

    // The HTTP edges: media type, the Bearer scheme's case, the 401 challenge, a method a
    // route does not take, and Last-Event-ID extremes; every error JSON with a request id.
    let raw = |method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>| {
        let mut r = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{u}{path}"));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let a = http();
        let mut resp = match body {
            Some(b) => a.run(r.body(b.to_vec()).unwrap()),
            None => a.run(r.body(()).unwrap()),
        }
        .unwrap();
        let status = resp.status().as_u16();
        let hdr = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (auth, rid) = (hdr("www-authenticate"), hdr("x-request-id"));
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap_or_default())
            .unwrap_or(Value::Null);
        (status, v, auth, rid)
    };
    let bearer = format!("Bearer {}", g.agent);
    let lower = format!("bearer {}", g.agent);
    let obl = "/v1/obligations";
    let edges: Vec<(&str, bool)> = vec![
        ("text/plain body is 415", {
            let (st, v, _, _) = raw(
                "POST",
                "/v1/responses",
                &[("Authorization", &bearer), ("Content-Type", "text/plain")],
                Some(b"{}"),
            );
            st == 415 && v["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
        }),
        (
            "lower-case bearer scheme",
            raw("GET", obl, &[("Authorization", &lower)], None).0 == 200,
        ),
        ("401 carries WWW-Authenticate", {
            let (st, _, auth, _) = raw("GET", obl, &[], None);
            st == 401 && auth.starts_with("Bearer")
        }),
        ("DELETE /v1/status is a JSON 405", {
            let (st, v, _, rid) = raw("DELETE", "/v1/status", &[], None);
            st == 405
                && v["error"]["code"] == "METHOD_NOT_ALLOWED"
                && !rid.is_empty()
                && v["request_id"] == rid.as_str()
        }),
        ("Last-Event-ID u64::MAX is a 400", {
            let (st, v, _, _) = raw(
                "GET",
                "/v1/events",
                &[
                    ("Authorization", &bearer),
                    ("Last-Event-ID", "18446744073709551615"),
                ],
                None,
            );
            st == 400 && v["error"]["code"] == "INVALID_EVENT_ID"
        }),
        ("Last-Event-ID from the future is a 400", {
            let (st, v, _, _) = raw(
                "GET",
                "/v1/events",
                &[
                    ("Authorization", &bearer),
                    ("Last-Event-ID", "1.18446744073709551615"),
                ],
                None,
            );
            st == 400 && v["error"]["code"] == "INVALID_EVENT_ID"
        }),
        ("the hub still serves a subscriber after them", {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let r = sse_reader(
                u.clone(),
                g.operator.clone(),
                None,
                Arc::clone(&seen),
                Arc::clone(&stop),
            );
            std::thread::sleep(Duration::from_millis(200));
            let held = post(&format!("{u}/v1/operator/hold"), Some(&g.operator), b"{}").0 == 200
                && post(
                    &format!("{u}/v1/operator/release"),
                    Some(&g.operator),
                    b"{}",
                )
                .0 == 200;
            let got = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(50));
                seen.lock()
                    .unwrap()
                    .iter()
                    .any(|e: &(u64, String, String)| e.1 == "operator_hold")
            });
            stop.store(true, Ordering::Relaxed);
            drop(r);
            held && got
        }),
    ];
    for (name, good) in &edges {
        println!("  {name:<40} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let n = edges.iter().filter(|(_, g)| *g).count();
    println!("service-http-edges: {n}/{} matched", edges.len());
    assert_eq!((n, edges.len()), (7, 7));
    // And the gateway still takes a good update afterwards.
    let (st, _) = post(
        &format!("{u}/v1/state/traffic"),
        Some(&g.provider),
        upd(json!([]), at + 50).as_bytes(),
    );
    assert_eq!(st, 200);
    assert_eq!(g.stop(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

fn pilot(port: u32, modes: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/pilot.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(port.to_string())
        .args(modes)
        .output()
        .expect("python3 with pymavlink is needed (scripts/test.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pilot {modes:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn a_pilots_mode_switch_takes_the_vehicle_from_the_gateway() {
    let _timing = common::shared();
    let dir = tmp("pilot");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();
    let providers = Providers::start(&u, &g.provider);
    let status = || get(&format!("{u}/v1/status"), None).1;
    assert_eq!(
        status()["vehicle"]["control"],
        "operator",
        "not handed over yet"
    );
    take_off(&g, &sim);
    assert_eq!(
        status()["vehicle"]["control"],
        "gateway",
        "the takeoff hands it over"
    );
    let submit = |rid: &str, generation: u64, target: [f64; 4], cert: &str| {
        let env = json!({"response_id": rid, "agent_id": "planner-1", "generation": generation,
            "catalog": {"id": "uav-px4", "version": 6}, "components": [route("a", target, 7, cert)]});
        certify(&g, &env, "a", cert);
        let (st, rep) = post(
            &format!("{u}/v1/responses"),
            Some(&g.agent),
            env.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{rep}");
        rep["components"][0].clone()
    };
    let c = submit("pilot-1", 1, [8.0, 2.0, -6.0, 0.0], "cert-p1");
    assert_eq!(c["phase"], "dispatched", "{c}");
    wait_until(15, "OFFBOARD and the first target taken", || {
        status()["vehicle"]["mode"] == "OFFBOARD"
            && sim.fingerprints().contains(&fp(8.0, 2.0, -6.0, 0.0))
    });

    // The pilot takes the vehicle from a ground station: RTL (on PX4 SIH without RC a ground
    // station can switch to HOLD, RTL or LAND in flight; PX4 refuses POSCTL).
    let port = sim.control.gcs_port.load(Ordering::Relaxed);
    assert_ne!(port, 0, "the simulator bound its ground-station port");
    let p = pilot(port, &["AUTO.RTL"]);
    wait_until(3, "the override at the gateway", || {
        let v = status();
        v["vehicle"]["control"] == "operator" && v["vehicle"]["override_mode"] == "AUTO.RTL"
    });
    std::thread::sleep(Duration::from_millis(300));
    let received = sim.control.view().stats.setpoints_received;
    std::thread::sleep(Duration::from_millis(1500));
    let v = sim.control.view();
    let mut c = Checks::new("service-pilot-override");
    c.check(
        "no setpoint reached the vehicle after the RTL override (the simulator's count)",
        v.stats.setpoints_received == received,
    );
    c.check(
        "the vehicle stays in AUTO.RTL: the gateway never takes it back",
        v.mode == (4, 5),
    );

    // The pilot pauses (AUTO.LOITER, in the air again): the vehicle stays theirs, and the
    // agent's next action is withheld at admission: the catalog's `control` source is false,
    // a recoverable reason, so the agent gets an obligation for a fresh candidate.
    let p2 = pilot(port, &["AUTO.LOITER"]);
    wait_until(5, "airborne in AUTO.LOITER", || {
        let v = status();
        v["vehicle"]["mode"] == "AUTO.LOITER" && v["vehicle"]["landed_state"] == "in air"
    });
    let c2 = submit("pilot-2", 2, [12.0, 3.0, -6.0, 0.0], "cert-p2");
    c.check(
        format!("the next action is withheld CONTROL_NOT_GRANTED: {c2}"),
        (c2["phase"].as_str(), c2["reason"].as_str())
            == (Some("withheld"), Some("CONTROL_NOT_GRANTED")),
    );
    c.check(
        "with an obligation for a fresh candidate",
        c2["obligation"].is_u64(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    c.check(
        "the vehicle stays in the pilot's AUTO.LOITER",
        sim.control.view().mode == (4, 3),
    );
    c.check(
        "and still no setpoint reaches it",
        sim.control.view().stats.setpoints_received == received,
    );

    // The operator hands the vehicle back; a fresh action flies.
    let (st, v) = post(
        &format!("{u}/v1/operator/release"),
        Some(&g.operator),
        b"{}",
    );
    assert_eq!(st, 200, "{v}");
    wait_until(3, "control back at the gateway", || {
        status()["vehicle"]["control"] == "gateway"
    });
    let c3 = submit("pilot-3", 3, [10.0, 4.0, -6.0, 0.0], "cert-p3");
    c.check(
        format!("after `operator release` a fresh action dispatches: {c3}"),
        c3["phase"] == "dispatched",
    );
    wait_until(15, "the fresh target taken in OFFBOARD", || {
        sim.fingerprints().contains(&fp(10.0, 4.0, -6.0, 0.0)) && sim.control.view().mode.0 == 6
    });
    c.check(
        "the withheld target never flew (the simulator's log)",
        !sim.fingerprints().contains(&fp(12.0, 3.0, -6.0, 0.0)),
    );
    // The same, from PX4's own reports to a ground station (an independent observer, not the
    // simulator's log): the vehicle holds the fresh target, never the refused one.
    let watched = pilot(port, &["watch", "1.5"]);
    let targets: Vec<&str> = watched["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    c.check(
        "PX4's own reports to a ground station show the fresh target",
        targets.contains(&fp(10.0, 4.0, -6.0, 0.0).as_str()),
    );
    c.check(
        "and never the withheld one",
        !targets.contains(&fp(12.0, 3.0, -6.0, 0.0).as_str()),
    );
    // Two overrides: RTL, then the pilot's own pause while the vehicle was still theirs.
    let metrics = metrics_text(&u);
    c.check(
        "/metrics counts the two overrides",
        metrics.contains("halo_operator_overrides_total 2"),
    );
    drop(providers);
    let state = g.state.clone();
    c.check("the gateway stops cleanly (exit 0)", g.stop() == 0);
    // The decisions view shows the pilot: the override with the action it stopped, and the
    // operator's release as a release.
    let files: Vec<String> = std::fs::read_dir(state.join("receipts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["audit", "show", "--decisions"];
    args.extend(files.iter().map(String::as_str));
    let (rc, shown) = common::halo(&args);
    assert_eq!(rc, 0, "{shown}");
    c.check(
        "`audit show --decisions` names the override and the action it stopped",
        shown.contains(
            "operator override: PX4 went from OFFBOARD to AUTO.RTL (not commanded by the gateway); stopped streaming pilot-1/a",
        ),
    );
    c.check(
        "and the operator's release",
        shown.contains("operator release"),
    );
    // The takeoff left the ground (PX4 says "taking off" while it climbs): no false report.
    c.check(
        "no false takeoff_stalled report",
        !shown.contains("takeoff_stalled"),
    );
    if c.done_failed() {
        println!("{shown}");
    }
    c.finish(
        15,
        &format!(
            "AUTO.RTL shown by PX4's heartbeat after {} ms, AUTO.LOITER after {} ms",
            p["switched"][0]["after_ms"], p2["switched"][0]["after_ms"]
        ),
    );
}

/// A ground station on the simulator's GCS port (`pilot.py texts`, pymavlink) that collects
/// every `STATUSTEXT`; `mode NAME` on its stdin switches the vehicle's mode as a pilot would.
struct GroundStation {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: BufReader<std::process::ChildStdout>,
}

impl GroundStation {
    fn start(port: u32) -> GroundStation {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/pilot.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg("texts")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with pymavlink is needed (scripts/test.sh installs it)");
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(
            line.trim(),
            "READY",
            "the ground station did not hear the vehicle"
        );
        GroundStation { child, stdin, out }
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn finish(mut self) -> Value {
        self.say("stop");
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let _ = self.child.wait();
        serde_json::from_str(line.trim()).unwrap()
    }
}

/// `[gcs] forward`: the pilot's ground station kept in the loop through the gateway, as on a Pi
/// that owns the flight controller's only serial port. A pymavlink ground station that connects
/// to the relay hears the vehicle's heartbeat through it, its mode switch reaches the vehicle and
/// counts as the pilot's override, a land command forged in the gateway's own name never reaches
/// the vehicle, and the gateway's own words arrive there too.
#[test]
fn a_ground_station_through_the_relay_sees_the_vehicle_and_its_hold_is_an_override() {
    let _timing = common::shared();
    let dir = tmp("gcs-relay");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let g = Gateway::start(
        &dir,
        &format!("udpout:{}", sim.addr),
        &format!("\n[gcs]\nforward = \"udpin:127.0.0.1:{port}\"\n"),
    );
    let u = g.url.clone();
    let providers = Providers::start(&u, &g.provider);
    let status = || get(&format!("{u}/v1/status"), None).1;
    let metric = |name: &str| -> u64 {
        metrics_text(&u)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("halo_{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    take_off(&g, &sim);
    let mut c: Vec<(&str, bool)> = Vec::new();
    // READY: the ground station heard the vehicle's heartbeat (system 1, component 1) through
    // the gateway; it never spoke to the vehicle's own ports.
    let mut gcs = GroundStation::start(u32::from(port));
    c.push((
        "the ground station hears the vehicle through the relay",
        true,
    ));
    // Long enough that the gateway's own expiry hold never comes before the pilot's.
    let mut a = route("a", [8.0, 2.0, -6.0, 0.0], 7, "cert-a");
    a["payload"]["duration_s"] = json!(20.0);
    let env = json!({"response_id": "gcs-1", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [a]});
    certify(&g, &env, "a", "cert-a");
    let (st, rep) = post(
        &format!("{u}/v1/responses"),
        Some(&g.agent),
        env.to_string().as_bytes(),
    );
    assert_eq!(
        (st, rep["components"][0]["phase"].as_str()),
        (200, Some("dispatched")),
        "{rep}"
    );
    wait_until(10, "the target at the vehicle", || {
        sim.fingerprints().contains(&fp(8.0, 2.0, -6.0, 0.0))
    });
    // A land command in the gateway's own name: dropped by the relay, counted.
    gcs.say("forge");
    std::thread::sleep(Duration::from_millis(1500));
    let v = sim.control.view();
    println!(
        "  after the forged land command: mode {:?}, on the ground {}",
        v.mode, v.on_ground
    );
    c.push((
        "a land command forged in the gateway's name never reaches the vehicle",
        v.mode != (4, 6) && !v.on_ground,
    ));
    c.push((
        "the forged frame is counted",
        metric("gcs_forged_dropped") >= 1,
    ));
    // The pilot's HOLD from the ground station: the gateway sees an override and stops.
    gcs.say("mode AUTO.LOITER");
    wait_until(5, "the override", || {
        status()["vehicle"]["override_mode"] == "AUTO.LOITER"
    });
    c.push((
        "the ground station's HOLD is the pilot's override",
        status()["vehicle"]["control"] == "operator",
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let heard = gcs.finish();
    println!("  the ground station heard: {heard}");
    c.push((
        "the ground station saw the vehicle take its mode, through the relay",
        heard["switched"].as_array().is_some_and(|s| {
            s.iter()
                .any(|x| x["mode"] == "AUTO.LOITER" && x["confirmed"] == true)
        }),
    ));
    c.push((
        "the gateway's own words reach the relayed ground station",
        heard["texts"].as_array().is_some_and(|t| {
            t.iter().any(|x| {
                x["comp"] == 191 && x["text"].as_str().is_some_and(|s| s.starts_with("HALO:"))
            })
        }),
    ));
    let (to_vehicle, to_gcs) = (
        metric("gcs_relayed_to_vehicle"),
        metric("gcs_relayed_to_gcs"),
    );
    println!("  relayed: {to_vehicle} frames to the vehicle, {to_gcs} to the ground station");
    c.push((
        "both directions counted in /metrics",
        to_vehicle > 0 && to_gcs > 0,
    ));
    for (name, good) in &c {
        println!("  {name:<72} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = c.iter().filter(|(_, g)| *g).count();
    println!("service-gcs-relay: {matched}/{} matched", c.len());
    drop(providers);
    assert_eq!(g.stop(), 0);
    assert_eq!((matched, c.len()), (7, 7));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The gateway's decisions reach the pilot's ground station as short `STATUSTEXT`s through
/// PX4's forwarding: an expiry hold, a deny-hold, a withheld action and its refresh request,
/// the operator's hold and release, and the pilot's own override, each in words, from the
/// gateway's component, at most 50 bytes, one per 250 ms at most.
#[test]
fn the_pilots_ground_station_hears_the_gateways_decisions() {
    let _timing = common::shared();
    let dir = tmp("statustext");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let setpoint_log = dir.join("bridge-setpoints.jsonl");
    let g = Gateway::start(
        &dir,
        &format!("udpout:{}", sim.addr),
        &format!("setpoint_log = \"{}\"", setpoint_log.display()),
    );
    let u = g.url.clone();
    let providers = Providers::start(&u, &g.provider);
    let status = || get(&format!("{u}/v1/status"), None).1;
    let g_state = g.state.clone();
    take_off(&g, &sim);
    let mut gcs = GroundStation::start(sim.control.gcs_port.load(Ordering::Relaxed));
    let submit = |rid: &str, generation: u64, comp: Value, cert: &str| {
        let env = json!({"response_id": rid, "agent_id": "planner-1", "generation": generation,
            "catalog": {"id": "uav-px4", "version": 6}, "components": [comp]});
        let id = env["components"][0]["id"].as_str().unwrap().to_string();
        certify(&g, &env, &id, cert);
        let (st, rep) = post(
            &format!("{u}/v1/responses"),
            Some(&g.agent),
            env.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{rep}");
        rep["components"][0].clone()
    };
    let said = |text: &str| {
        status()["last_decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|x| x["text"] == text))
    };

    // A target certified for 1.5 s: flown, then held when its time ends.
    let mut short = route("x", [6.0, 1.0, -6.0, 0.0], 7, "cert-x");
    short["payload"]["duration_s"] = json!(1.5);
    let c = submit("st-0", 1, short, "cert-x");
    assert_eq!(c["phase"], "dispatched", "{c}");
    wait_until(10, "the expiry hold", || {
        said("HALO: target time ended, holding")
    });
    // A target streaming when the map epoch changes: deny-hold.
    let c = submit(
        "st-1",
        2,
        route("a", [8.0, 2.0, -6.0, 0.0], 7, "cert-a"),
        "cert-a",
    );
    assert_eq!(c["phase"], "dispatched", "{c}");
    wait_until(10, "the target at the vehicle", || {
        sim.fingerprints().contains(&fp(8.0, 2.0, -6.0, 0.0))
    });
    providers.map_epoch.store(8, Ordering::Relaxed);
    wait_until(10, "the deny-hold", || {
        said("HALO: a lost support, hold: epoch changed")
    });
    // An action planned against the old map: withheld, with a refresh request.
    let c = submit(
        "st-2",
        3,
        route("b", [9.0, 2.0, -6.0, 0.0], 7, "cert-b"),
        "cert-b",
    );
    assert_eq!(c["reason"], "EPOCH_CHANGED", "{c}");
    // A fresh action flying when the operator holds: the hold's receipt names it.
    let c = submit(
        "st-3",
        4,
        route("c", [7.0, 3.0, -6.0, 0.0], 8, "cert-c"),
        "cert-c",
    );
    assert_eq!(c["phase"], "dispatched", "{c}");
    wait_until(10, "the fresh target at the vehicle", || {
        sim.fingerprints().contains(&fp(7.0, 3.0, -6.0, 0.0))
    });
    for action in ["hold", "release"] {
        let (st, v) = post(
            &format!("{u}/v1/operator/{action}"),
            Some(&g.operator),
            b"{}",
        );
        assert_eq!(st, 200, "{v}");
    }
    // The pilot takes the vehicle from the ground station.
    gcs.say("mode AUTO.LOITER");
    wait_until(5, "the override", || {
        status()["vehicle"]["override_mode"] == "AUTO.LOITER"
    });
    // Every line waiting has gone out (one per 250 ms).
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && status()["statustext"]["sent"].as_u64() < Some(7) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let v = status();
    let heard = gcs.finish();
    // The same state from `halo-gateway operator status`, in words, and as JSON.
    let state = g.state.display().to_string();
    let op = |json: bool| {
        let mut args = vec![
            "operator",
            "status",
            "--url",
            &g.proc.operator_url,
            "--state-dir",
            &state,
        ];
        if json {
            args.push("--json");
        }
        common::halo(&args)
    };
    let (rc, words) = op(false);
    let (rc_json, raw) = op(true);
    println!("{words}");
    let cli = [
        (
            "the summary names the gateway that answered and who flies",
            rc == 0
                && words.contains(&format!("gateway      {}: halo-gateway", g.proc.operator_url))
                && words.contains(&format!("vehicle      udpout:{}, link up, mode AUTO.LOITER, armed", sim.addr))
                && words.contains("control      the pilot took over (AUTO.LOITER); `operator release` hands the vehicle back"),
        ),
        (
            "the open obligation and the last decisions in words",
            words.contains("obligations  1 open")
                && words.contains("st-2/b: a source epoch differs")
                && words.contains("s ago  pilot took over (AUTO.LOITER), gateway off")
                && !words.contains('{'),
        ),
        (
            "--json is the raw status",
            rc_json == 0
                && serde_json::from_str::<Value>(raw.trim())
                    .is_ok_and(|j| j["vehicle"]["override_mode"] == "AUTO.LOITER"),
        ),
    ];
    for (name, good) in &cli {
        println!("  {name:<70} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let cli_matched = cli.iter().filter(|(_, g)| *g).count();
    println!(
        "service-operator-status: {cli_matched}/{} matched",
        cli.len()
    );
    assert_eq!((cli_matched, cli.len()), (3, 3), "{words}");
    drop(providers);
    let stopped = g.stop();
    // After the flight, the decisions view names what the operator's hold stopped.
    let log = g_state.join("receipts/boot-1.jsonl").display().to_string();
    let (rc, shown) = common::halo(&["audit", "show", "--decisions", &log]);
    assert_eq!(rc, 0, "{shown}");
    assert!(
        shown.contains("operator hold: agent actions do not dispatch; stopped streaming st-3/c")
            && shown
                .contains("expiry hold: the certified interval of st-0/x ended, the vehicle holds"),
        "{shown}"
    );
    // The picture of this flight: four components, three dispatches (x, a, c), the deny-hold
    // of a, the expiry of x, the override, and the three targets the bridge logged.
    let svg = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flight-statustext.svg");
    let setpoints = setpoint_log.display().to_string();
    let (rc, said) = common::halo(&["plot", &log, &setpoints, "-o", &svg.display().to_string()]);
    assert_eq!(rc, 0, "{said}");
    assert!(
        said.contains(
            ": 4 components, 3 dispatches, 1 deny-hold, 1 expiry hold, 1 pilot override, 3 targets streamed over"
        ) && said.contains("; the vehicle's track from "),
        "{said}"
    );
    // The track is the vehicle's own telemetry, 5 positions a second at most, so a flight of
    // several seconds has more than a few of them and never more than the rate allows.
    let positions: Vec<Value> = std::fs::read_to_string(&setpoint_log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("position").is_some())
        .collect();
    let times: Vec<u64> = positions
        .iter()
        .filter_map(|l| l["t_ns"].as_u64())
        .collect();
    assert!(positions.len() > 10, "{} positions", positions.len());
    assert!(
        times.windows(2).all(|w| w[1] >= w[0] + 200_000_000),
        "the track is logged at most every 200 ms"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    for label in [
        "st-0/x",
        "st-1/a",
        "st-2/b",
        "st-3/c",
        "withheld",
        "dispatched",
        "track flown",
    ] {
        assert!(
            picture.contains(label),
            "{label} is not in {}",
            svg.display()
        );
    }
    println!("the flight's picture: {}", svg.display());
    let ours: Vec<&Value> = heard["texts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["text"].as_str().unwrap_or("").starts_with("HALO:"))
        .collect();
    for t in &ours {
        println!(
            "  heard: severity {} \"{}\"",
            t["severity"],
            t["text"].as_str().unwrap_or("")
        );
    }
    let heard_line = |text: &str, severity: u64| {
        ours.iter()
            .any(|t| t["text"] == text && t["severity"].as_u64() == Some(severity))
    };
    let times: Vec<u64> = ours.iter().filter_map(|t| t["t_ms"].as_u64()).collect();
    let outcomes = [
        (
            "expiry hold: warning",
            heard_line("HALO: target time ended, holding", 4),
        ),
        (
            "deny-hold: error",
            heard_line("HALO: a lost support, hold: epoch changed", 3),
        ),
        (
            "withheld action: warning",
            heard_line("HALO: b withheld: epoch changed", 4),
        ),
        (
            "its refresh request: info",
            ours.iter().any(|t| {
                t["severity"] == 6
                    && t["text"]
                        .as_str()
                        .is_some_and(|x| x.starts_with("HALO: b needs fresh ") && x.contains("map"))
            }),
        ),
        (
            "operator hold: notice",
            heard_line("HALO: operator hold, no agent actions", 5),
        ),
        (
            "operator release: notice",
            heard_line("HALO: operator released the hold", 5),
        ),
        (
            "pilot override: notice",
            heard_line("HALO: pilot took over (AUTO.LOITER), gateway off", 5),
        ),
        (
            "from the gateway's component (1/191), at most 50 bytes",
            !ours.is_empty()
                && ours.iter().all(|t| {
                    t["sys"] == 1
                        && t["comp"] == 191
                        && t["text"].as_str().unwrap_or("").len() <= 50
                }),
        ),
        (
            "at most one line per 250 ms (150 ms apart at the ground station)",
            times.windows(2).all(|w| w[1] >= w[0] + 150),
        ),
        (
            "every line sent was heard, none dropped",
            v["statustext"]["sent"].as_u64() == Some(ours.len() as u64)
                && v["statustext"]["dropped"] == 0,
        ),
    ];
    for (name, good) in &outcomes {
        println!("  {name:<70} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = outcomes.iter().filter(|(_, g)| *g).count();
    println!("service-statustext: {matched}/{} matched", outcomes.len());
    assert_eq!((matched, outcomes.len()), (10, 10), "{heard}\n{v}");
    assert_eq!(stopped, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vehicle.statustext = false`: the decisions stay in the status and the receipts, and the
/// ground station hears none of them.
#[test]
fn statustext_off_keeps_the_ground_station_quiet() {
    let _timing = common::shared();
    let dir = tmp("statustext-off");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "statustext = false");
    let u = g.url.clone();
    wait_until(20, "the vehicle link", || {
        get(&format!("{u}/v1/status"), None).1["vehicle"]["link_up"] == true
    });
    let gcs = GroundStation::start(sim.control.gcs_port.load(Ordering::Relaxed));
    for action in ["hold", "release"] {
        let (st, v) = post(
            &format!("{u}/v1/operator/{action}"),
            Some(&g.operator),
            b"{}",
        );
        assert_eq!(st, 200, "{v}");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let v = get(&format!("{u}/v1/status"), None).1;
    let heard = gcs.finish();
    let ours = heard["texts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["text"].as_str().unwrap_or("").starts_with("HALO:"))
        .count();
    let decided = v["last_decisions"].as_array().map_or(0, |d| {
        d.iter()
            .filter(|x| x["text"].as_str().unwrap_or("").contains("operator"))
            .count()
    });
    println!(
        "service-statustext-off: {}/1 matched (decisions kept {decided}, heard {ours}, statustext {})",
        u8::from(ours == 0 && decided == 2 && v["statustext"].is_null()),
        v["statustext"]
    );
    assert_eq!((ours, decided), (0, 2), "{heard}\n{v}");
    assert!(v["statustext"].is_null(), "{v}");
    assert_eq!(g.stop(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET /v1/openapi.json` is a valid OpenAPI 3.1 document (checked by `openapi-spec-validator`,
/// an independent validator, shown to refuse a broken one) with every route of the
/// table the router is built from.
#[test]
fn the_openapi_document_is_valid_and_names_every_route() {
    // The routes docs/run.md's table lists.
    const OPENAPI_ROUTES: usize = 22;
    let _timing = common::shared();
    let dir = tmp("openapi");
    let g = Gateway::start(&dir, "sim", "");
    let (st, doc) = get(&format!("{}/v1/openapi.json", g.url), None);
    assert_eq!(st, 200, "{doc}");
    let mut c = Checks::new("service-openapi");
    for r in halo_gateway::service::api::routes::ROUTES {
        c.check(
            format!("{} {} is in the document", r.method, r.path),
            doc["paths"][r.path][r.method.to_ascii_lowercase()].is_object(),
        );
    }
    let validate = |v: &Value, name: &str| {
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        Command::new("python3")
            .args([
                "-c",
                "import json,sys; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1])))",
            ])
            .arg(&f)
            .output()
            .expect("python3 with openapi-spec-validator (scripts/test.sh installs it)")
    };
    let out = validate(&doc, "openapi.json");
    c.check(
        format!(
            "openapi-spec-validator accepts the document {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        out.status.success(),
    );
    // A path parameter must be required: the validator refuses one that is not.
    let mut broken = doc.clone();
    broken["paths"]["/v1/responses/{id}"]["get"]["parameters"][0]["required"] = json!(false);
    c.check(
        "and refuses it with an optional path parameter planted",
        !validate(&broken, "broken.json").status.success(),
    );
    assert_eq!(g.stop(), 0);
    // Every route of the table, the document's validity, the planted defect caught.
    c.finish(OPENAPI_ROUTES + 2, &format!("{OPENAPI_ROUTES} operations"));
}

/// The strict structured-output form: the running example written as such a mode writes it
/// (every property present, `null` for absent) validates against `GET /v1/schema?strict=true`
/// with Python's `jsonschema`, an independent validator; `POST /v1/responses?form=strict` takes
/// it; the same bytes without `form=strict` are refused and change nothing.
#[test]
fn the_strict_form_validates_and_is_taken() {
    let _timing = common::shared();
    let dir = tmp("strict-form");
    let g = Gateway::start(&dir, "sim", "");
    let (st, schema) = get(&format!("{}/v1/schema?strict=true", g.url), None);
    assert_eq!(st, 200, "{schema}");
    let null_sources = |keep: &[(&str, Value)]| {
        let mut m = serde_json::Map::new();
        for s in [
            "traffic",
            "map",
            "bounds",
            "vehicle",
            "home",
            "origin",
            "battery",
            "link",
            "authority",
            "airspace",
            "preflight",
            "wind",
            "control",
        ] {
            m.insert(s.into(), Value::Null);
        }
        for (k, v) in keep {
            m.insert((*k).into(), v.clone());
        }
        Value::Object(m)
    };
    let doc = json!({
        "format": null, "response_id": "resp-strict", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
            {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 1.42, "unit": null},
             "support": {"z_range": null}},
            {"id": "e3", "type": "route_action",
             "payload": {"frame": "local_ned", "north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 8.0},
             "support": null_sources(&[
                 ("map", json!({"epoch": 7, "provenance": null})),
                 ("traffic", json!({"epoch": 41, "provenance": null})),
                 ("bounds", json!({"epoch": 3, "provenance": "corridor-12"})),
             ]),
             "certificate": "cert-9f2c"},
            {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
             "requires": [{"id": "e3", "phase": "dispatched"}]},
        ]
    });
    let sf = dir.join("strict-schema.json");
    let df = dir.join("strict-doc.json");
    std::fs::write(&sf, schema.to_string()).unwrap();
    std::fs::write(&df, doc.to_string()).unwrap();
    let check = |d: &Path| {
        Command::new("python3")
            .args([
                "-c",
                "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))",
            ])
            .arg(&sf)
            .arg(d)
            .output()
            .expect("python3 with jsonschema (scripts/test.sh installs it)")
    };
    let out = check(&df);
    let mut c = Checks::new("service-strict-form");
    c.check(
        format!(
            "jsonschema validates the strict form against /v1/schema?strict=true {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        out.status.success(),
    );
    // The validator is not a rubber stamp: a member left out fails the strict form.
    let mut missing = doc.clone();
    missing["components"][1]["payload"]
        .as_object_mut()
        .unwrap()
        .remove("unit");
    let mf = dir.join("strict-missing.json");
    std::fs::write(&mf, missing.to_string()).unwrap();
    c.check(
        "and refuses it with a member left out",
        !check(&mf).status.success(),
    );
    let body = doc.to_string();
    let (st, _) = post(
        &format!("{}/v1/responses", g.url),
        Some(&g.agent),
        body.as_bytes(),
    );
    c.check(
        format!("the strict form without ?form=strict is refused ({st})"),
        (400..500).contains(&st),
    );
    let (st, v) = post(
        &format!("{}/v1/responses?form=strict", g.url),
        Some(&g.agent),
        body.as_bytes(),
    );
    c.check(
        format!("POST /v1/responses?form=strict takes it: {v}"),
        st == 200 && v["response"] == "resp-strict",
    );
    let ids: Vec<&str> = v["components"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    c.check(
        "every component admitted, in envelope order",
        ids == ["e1", "e2", "e3", "e4"],
    );
    c.check(
        "the notice is emitted",
        v["components"][0]["phase"] == "emitted",
    );
    let (st, v) = post(
        &format!("{}/v1/responses?form=loose", g.url),
        Some(&g.agent),
        body.as_bytes(),
    );
    c.check(
        "an unknown form is 400 INVALID_REQUEST",
        (st, v["error"]["code"].as_str()) == (400, Some("INVALID_REQUEST")),
    );
    c.check("the gateway stops cleanly (exit 0)", g.stop() == 0);
    c.finish(8, "");
}

/// The example Python client, an independent peer, runs the running example against the
/// real service: submit, follow the event stream, answer the obligation with a fresh candidate.
#[test]
fn the_python_example_client_runs_against_the_service() {
    let _timing = common::shared();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/agent_client.py");
    let mut c = Checks::new("service-python-client");
    // Without a certifier and without --demo's stand-in, nothing is armed: exit 2 at once.
    {
        let dir = tmp("python-no-certifier");
        let g = Gateway::start(&dir, "sim", "");
        let out = Command::new("python3")
            .arg(&script)
            .args(["--url", &g.url, "--state-dir"])
            .arg(&g.state)
            .output()
            .expect("python3");
        let stderr = String::from_utf8_lossy(&out.stderr);
        c.check(
            format!(
                "without a certifier the client exits 2 saying so: {}",
                stderr.trim()
            ),
            out.status.code() == Some(2) && stderr.contains("certifier is off"),
        );
        let v = get(&format!("{}/v1/status", g.url), None).1;
        c.check("and nothing was armed", v["vehicle"]["armed"] == false);
        assert_eq!(g.stop(), 0);
    }
    // With no provider publishing, the route action is withheld at the gate: the client says
    // so with the gate's reason, and never calls it a dispatch that went missing.
    {
        let dir = tmp("python-withheld");
        let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
        let g = Gateway::start(
            &dir,
            &format!("udpout:{}", sim.addr),
            "[certifier]\nenabled = true\n",
        );
        take_off(&g, &sim);
        // The map is at epoch 8; the client plans at epoch 7 (it plays no provider).
        Providers::publish_once(&g.url, &g.provider, 8);
        let out = Command::new("python3")
            .arg(&script)
            .args(["--url", &g.url, "--state-dir"])
            .arg(&g.state)
            .output()
            .expect("python3");
        let stderr = String::from_utf8_lossy(&out.stderr);
        c.check(
            format!("an action withheld at the gate: the client exits 1 with the gate's reason, not a lost dispatch: {}", stderr.trim()),
            out.status.code() == Some(1)
                && stderr.contains("was not dispatched")
                && !stderr.contains("never reached"),
        );
        assert_eq!(g.stop(), 0);
    }
    let dir = tmp("python");
    let g = Gateway::start(&dir, "sim", "[certifier]\nenabled = true\n");
    // No `halo-gateway` on the client's PATH: it needs none.
    let out = Command::new("python3")
        .arg(&script)
        .args(["--demo", "--url", &g.url, "--state-dir"])
        .arg(&g.state)
        .env(
            "PATH",
            std::env::var("PATH")
                .unwrap_or_default()
                .split(':')
                .filter(|d| !std::path::Path::new(d).join("halo-gateway").exists())
                .collect::<Vec<_>>()
                .join(":"),
        )
        .output()
        .expect("python3 is needed for the example-client test (scripts/test.sh installs httpx)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        !stderr.contains("No module named 'httpx'"),
        "httpx is missing: run ./scripts/test.sh, which installs it into target/pyenv"
    );
    c.check(
        format!(
            "--demo flies the running example (exit 0) {}",
            stderr.trim()
        ),
        out.status.success(),
    );
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let find = |s: &str| {
        steps
            .iter()
            .find(|v| v["step"] == s)
            .cloned()
            .unwrap_or(Value::Null)
    };
    c.check(
        "the running example fits /v1/schema (the client's jsonschema)",
        find("schema")["valid"] == true,
    );
    c.check(
        "and the schema refuses an extra member",
        find("schema")["rejects_extra"] == true,
    );
    c.check(
        "the client found the reference certifier",
        find("certifier")["reference"] == true,
    );
    let by: Vec<&str> = steps
        .iter()
        .filter(|v| v["step"] == "certificate")
        .map(|v| v["by"].as_str().unwrap_or(""))
        .collect();
    c.check(
        "all three certificates came from the reference certifier",
        by == vec!["reference certifier"; 3],
    );
    c.check(
        "the stale action's obligation says EPOCH_CHANGED",
        find("obligation")["reason"] == "EPOCH_CHANGED",
    );
    c.check(
        "the fresh candidate is taken (200)",
        find("candidate")["status"] == 200,
    );
    c.check(
        "and dispatched at the gate",
        find("gate")["dispatched"] == true,
    );
    // Each dispatched action reached the vehicle before the next step: e3 before the map
    // moved, the fresh e5 after.
    let reached: Vec<(String, bool)> = steps
        .iter()
        .filter(|v| v["step"] == "vehicle")
        .map(|v| {
            (
                v["component"].as_str().unwrap_or("").to_string(),
                v["reached"] == true,
            )
        })
        .collect();
    c.check(
        "e3 and then the fresh e5 reached the vehicle",
        reached == vec![("e3".to_string(), true), ("e5".to_string(), true)],
    );
    c.check(
        "the demo took off through the operator's routes",
        find("operator")["did"] == "arm and takeoff",
    );
    c.check("the client says it is done", find("done")["ok"] == true);
    c.check("the gateway stops cleanly (exit 0)", g.stop() == 0);
    c.finish(15, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent link as JSON lines over standard input and output: a reply per request, events
/// in between, bad lines refused with a reason, and end of input stops the gateway cleanly.
#[test]
fn stdio_agent_link() {
    let _timing = common::shared();
    use std::io::Write;
    let dir = tmp("stdio");
    let state = dir.join("state");
    let sim = Sim::start(&dir.join("vehicle.jsonl"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args([
            "run",
            "--vehicle",
            &format!("udpout:{}", sim.addr),
            "--agent",
            "stdio",
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "warn",
            "--state-dir",
        ])
        .arg(&state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let v: Value = serde_json::from_str(&line).expect("every stdout line is JSON");
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    let next_reply = |want: Value| -> (Vec<Value>, Value) {
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no reply to {want}: {e}; saw {events:?}"));
            if v.get("reply_to").is_some() && v["reply_to"] == want {
                return (events, v);
            }
            events.push(v);
        }
    };
    let notice = json!({"response_id": "r-stdio", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "n1", "type": "notice", "payload": {"text": "hello from stdio"}}]});
    writeln!(
        stdin,
        "{}",
        json!({"id": 1, "op": "submit_response", "response": notice})
    )
    .unwrap();
    let (mut events, r1) = next_reply(json!(1));
    let mut c = Checks::new("service-stdio");
    c.check(
        format!("a response over stdio is admitted and its notice emitted: {r1}"),
        r1["ok"] == true && r1["result"]["components"][0]["phase"] == "emitted",
    );
    writeln!(
        stdin,
        "{}",
        json!({"id": 2, "op": "get_response", "response_id": "r-stdio"})
    )
    .unwrap();
    let (more, r2) = next_reply(json!(2));
    events.extend(more);
    c.check(
        "get_response answers with the response",
        r2["result"]["response"] == "r-stdio",
    );
    writeln!(
        stdin,
        "{}",
        json!({"id": 3, "op": "submit_response", "response": {"response_id": "x"}})
    )
    .unwrap();
    let (more, r3) = next_reply(json!(3));
    events.extend(more);
    c.check(
        format!("a malformed envelope is refused MALFORMED_JSON: {r3}"),
        (r3["ok"].clone(), r3["error"]["code"].clone()) == (json!(false), json!("MALFORMED_JSON")),
    );
    writeln!(stdin, "{{\"op\": \"fly\"}}").unwrap();
    let (more, r4) = next_reply(Value::Null);
    events.extend(more);
    c.check(
        "an unknown op is INVALID_REQUEST",
        r4["error"]["code"] == "INVALID_REQUEST",
    );
    writeln!(stdin, "{}", "x".repeat(600 * 1024)).unwrap();
    let (more, r5) = next_reply(Value::Null);
    events.extend(more);
    c.check(
        "a 600 KiB line is RESPONSE_TOO_LARGE",
        r5["error"]["code"] == "RESPONSE_TOO_LARGE",
    );
    writeln!(stdin, "{}", json!({"id": "s", "op": "status"})).unwrap();
    let (more, r6) = next_reply(json!("s"));
    events.extend(more);
    c.check(
        "status still answers after the bad lines (one response live)",
        r6["result"]["responses_live"] == 1,
    );
    // End of input: a clean stop.
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not stop at end of input"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    c.check(
        "end of input stops the gateway cleanly (exit 0)",
        status.code() == Some(0),
    );
    // Everything the gateway wrote before it exited (the reader ends at end of output).
    while let Ok(v) = rx.recv_timeout(Duration::from_secs(10)) {
        events.push(v);
    }
    // The notice's emission arrived as an event line, with its payload.
    c.check(
        "the notice's emission came as an event line with its payload",
        events
            .iter()
            .any(|v| v["event"] == "emit" && v["data"]["payload"]["text"] == "hello from stdio"),
    );
    let log = std::fs::read_to_string(state.join("receipts/boot-1.jsonl")).unwrap();
    c.check(
        "the admission is receipted",
        log.contains("\"kind\":\"admitted\""),
    );
    c.finish(9, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The mission contract at the gate: an agent that replans to skip the review obligation is
/// refused by the monitor, and the new plan's action is denied at the final gate before any
/// setpoint of it reaches the vehicle; the plan the operator approved still flies.
#[test]
fn the_mission_contract_bounds_the_agent_at_the_gate() {
    let _timing = common::shared();
    let dir = tmp("contract");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();

    // The operator registers the root contract: survey wp1 then wp2, with a review obligation.
    let register = json!({"op": "register_root", "approved_by": "ops-lead", "contract": {
        "closing": ["airborne == false", "zone == home"],
        "discharge": {"review": ["review == true"]},
        "domain": "uav-survey", "epoch": 7,
        "forbidden": [["zone == nofly"]],
        "initial": {"airborne": false, "battery": "high", "photos": 0, "review": false, "zone": "home"},
        "obligations": ["review"], "policy": [],
        "resources": ["radio", "zone:wp1", "zone:wp2"],
        "root": "survey",
        "traces": [["takeoff", "goto(wp1)", "goto(wp2)", "return", "land"]]}});
    let (st, d) = post(
        &format!("{u}/v1/contract"),
        Some(&g.operator),
        register.to_string().as_bytes(),
    );
    assert_eq!((st, d["verdict"].as_str()), (200, Some("allow")), "{d}");
    // The agent cannot register or change the contract, nor commit effects itself.
    let (st, _) = post(
        &format!("{u}/v1/contract"),
        Some(&g.agent),
        register.to_string().as_bytes(),
    );
    let mut k = Checks::new("service-contract");
    k.check("the agent cannot register a contract (403)", st == 403);
    let (st, v) = post(
        &format!("{u}/v1/goals"),
        Some(&g.agent),
        br#"{"op": "authorize_effect", "effect": "goto(wp3)", "goal": "survey"}"#,
    );
    k.check(
        "nor commit an effect itself (403 FORBIDDEN_ROLE)",
        (st, v["error"]["code"].as_str()) == (403, Some("FORBIDDEN_ROLE")),
    );

    // The agent proposes its goal, with the witness the gateway computes at current versions.
    let propose = |goal: &Value, op: &str, old: Option<&str>| -> Value {
        let (st, w) = post(
            &format!("{u}/v1/goals/witness"),
            Some(&g.agent),
            json!({"parent": "survey", "goal": goal})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(st, 200, "{w}");
        let mut req = json!({"op": op, "goal": goal, "witness": w});
        if let Some(o) = old {
            req["old"] = json!(o);
        }
        let (st, d) = post(
            &format!("{u}/v1/goals"),
            Some(&g.agent),
            req.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{d}");
        d
    };
    let g1 = json!({"closing": ["airborne == false", "zone == home"], "completion": [[]],
        "discharged": [], "frames": [], "id": "g1", "obligations": ["review"], "parent": "survey",
        "resources": ["radio", "zone:wp1", "zone:wp2"],
        "traces": [["takeoff", "goto(wp1)", "goto(wp2)", "return", "land"]]});
    let d = propose(&g1, "propose_goal", None);
    k.check(
        format!("the agent's goal with its witness is allowed: {d}"),
        d["verdict"] == "allow",
    );

    // The operator's takeoff is the contract's first effect.
    take_off(&g, &sim);
    let providers = Providers::start(&u, &g.provider);

    let send = |rid: &str, generation: u64, t: [f64; 4], cert: &str| -> Value {
        let r = json!({"response_id": rid, "agent_id": "planner-1", "generation": generation,
            "catalog": {"id": "uav-px4", "version": 6}, "components": [route("a", t, 7, cert)]});
        certify(&g, &r, "a", cert);
        let (st, rep) = post(
            &format!("{u}/v1/responses"),
            Some(&g.agent),
            r.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{rep}");
        rep["components"][0].clone()
    };
    // goto(wp1): admitted by the approved plan.
    let c = send("c-1", 1, [12.0, 3.5, -10.0, 90.0], "cert-c1");
    k.check(
        format!("goto(wp1) of the approved plan dispatches: {c}"),
        c["phase"] == "dispatched",
    );
    let wp1 = fp(12.0, 3.5, -10.0, 90.0);
    wait_until(20, "wp1 at the vehicle", || {
        sim.fingerprints().contains(&wp1)
    });

    // The agent replans to drop the review obligation: the monitor refuses the edit.
    let drop_review = json!({"closing": ["airborne == false", "zone == home"], "completion": [[]],
        "discharged": [], "frames": [], "id": "g1", "obligations": [], "parent": "survey",
        "resources": ["radio", "zone:wp1", "zone:wp2"],
        "traces": [["goto(wp2)", "return", "land"]]});
    let d = propose(&drop_review, "replace_goal", Some("g1"));
    k.check(
        format!("a replan that drops the review is denied OBLIGATION_DROPPED: {d}"),
        (d["verdict"].as_str(), d["reason"].as_str()) == (Some("deny"), Some("OBLIGATION_DROPPED")),
    );
    // It replans to skip the review and head for wp3 instead: refused as well.
    let skip = json!({"closing": ["airborne == false", "zone == home"], "completion": [[]],
        "discharged": [], "frames": [], "id": "g1", "obligations": [], "parent": "survey",
        "resources": ["radio", "zone:wp1", "zone:wp2"],
        "traces": [["goto(wp3)", "return", "land"]]});
    let d = propose(&skip, "replace_goal", Some("g1"));
    k.check(
        "a replan that skips it for wp3 is denied",
        d["verdict"] == "deny",
    );
    println!(
        "replanning without the review: {} ({})",
        d["reason"], d["detail"]
    );
    // It sends the new plan's action anyway: denied at the final gate, terminally.
    let c = send("c-2", 2, [50.0, -20.0, -10.0, 0.0], "cert-c2");
    k.check(
        format!("the refused plan's action is invalidated EFFECT_NOT_ADMITTED at the gate: {c}"),
        c["phase"] == "invalidated" && c["reason"] == "EFFECT_NOT_ADMITTED",
    );
    // An action whose target lies in no zone names no effect: denied too.
    let c = send("c-3", 3, [-30.0, -30.0, -10.0, 0.0], "cert-c3");
    k.check(
        "an action in no zone is ZONE_UNRESOLVED",
        c["reason"] == "ZONE_UNRESOLVED",
    );
    // A policy change suspends the root: nothing dispatches until a path is reauthorized.
    let (st, d) = post(
        &format!("{u}/v1/contract"),
        Some(&g.operator),
        br#"{"op": "change_version", "policy": [{"rule": "forbid", "when": ["zone == nofly"]}]}"#,
    );
    assert_eq!((st, d["verdict"].as_str()), (200, Some("allow")), "{d}");
    let c = send("c-4s", 4, [30.0, 18.0, -10.0, 45.0], "cert-c4s");
    k.check(
        format!("after a policy change nothing dispatches (ROOT_SUSPENDED): {c}"),
        (c["phase"].as_str(), c["reason"].as_str())
            == (Some("invalidated"), Some("ROOT_SUSPENDED")),
    );
    let (st, d) = post(
        &format!("{u}/v1/contract"),
        Some(&g.operator),
        br#"{"op": "reauthorize", "goal": "g1"}"#,
    );
    assert_eq!((st, d["verdict"].as_str()), (200, Some("allow")), "{d}");
    // The approved plan goes on: goto(wp2).
    let c = send("c-4", 5, [30.0, 18.0, -10.0, 45.0], "cert-c4");
    k.check(
        format!("after reauthorization goto(wp2) dispatches: {c}"),
        c["phase"] == "dispatched",
    );
    let wp2 = fp(30.0, 18.0, -10.0, 45.0);
    wait_until(20, "wp2 at the vehicle", || {
        sim.fingerprints().contains(&wp2)
    });
    std::thread::sleep(Duration::from_secs(1));
    drop(providers);

    // The vehicle's own log: never a setpoint of the refused plan.
    let taken = sim.fingerprints();
    k.check(
        "the refused plan's target never reached the vehicle (the simulator's log)",
        !taken.contains(&fp(50.0, -20.0, -10.0, 0.0)),
    );
    k.check(
        "nor the zoneless one",
        !taken.contains(&fp(-30.0, -30.0, -10.0, 0.0)),
    );
    let (_, cs) = get(&format!("{u}/v1/contract"), Some(&g.operator));
    k.check(
        format!("the committed trace is takeoff, wp1, wp2: {}", cs["trace"]),
        cs["trace"] == json!(["takeoff()", "goto(wp1)", "goto(wp2)"]),
    );
    let state = g.state.clone();
    k.check("the gateway stops cleanly (exit 0)", g.stop() == 0);
    let log = std::fs::read_to_string(state.join("receipts/boot-1.jsonl")).unwrap();
    k.check(
        "the monitor's verdicts are receipted",
        log.contains("\"what\":\"contract\""),
    );
    k.check(
        "and the committed effect goto(wp2)",
        log.contains("\"effect\":\"goto(wp2)\""),
    );
    k.finish(16, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Receipt rotation: past `max_file_bytes` the chain continues in the next file; at
/// `max_files`, with every file this start's own, nothing is deleted: the gateway fails closed
/// (holds, refuses new work with `RECEIPTS_UNAVAILABLE`, exits 4), and `audit verify --key`
/// over the files in order checks the whole chain, from the first receipt to the shutdown
/// checkpoint.
#[test]
fn receipts_rotate_and_verify_across_files() {
    let _timing = common::shared();
    let dir = tmp("rotate");
    let g = Gateway::start(
        &dir,
        "sim",
        "[receipts]\npolicy = \"all\"\nmax_file_bytes = 8192\nmax_files = 3\n",
    );
    // Every telemetry update is a receipt under `all`: about 80 a second.
    wait_until(20, "the receipt cap", || {
        get(&format!("{}/v1/status", g.url), None).1["receipts"]["state"] == "refusing"
    });
    let st = get(&format!("{}/v1/status", g.url), None).1;
    let mut c = Checks::new("service-receipt-rotation");
    c.check(
        format!(
            "/v1/status says the log refuses at max_files: {}",
            st["receipts"]["reason"]
        ),
        st["receipts"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_files")),
    );
    let (code, body) = post(
        &format!("{}/v1/responses", g.url),
        Some(&g.agent),
        json!({"response_id": "late", "agent_id": "a", "generation": 1,
               "catalog": {"id": "uav-px4", "version": 6},
               "components": [{"id": "n1", "type": "notice", "payload": {"text": "x"}}]})
        .to_string()
        .as_bytes(),
    );
    c.check(
        "a response while the log refuses is 503 RECEIPTS_UNAVAILABLE (fail closed)",
        (code, body["error"]["code"].as_str()) == (503, Some("RECEIPTS_UNAVAILABLE")),
    );
    let state = g.state.clone();
    c.check(
        "the gateway exits 4: the receipt log refused during the run",
        g.stop() == 4,
    );
    let rdir = state.join("receipts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&rdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort_by_key(|p| {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        n.split('.')
            .nth(1)
            .and_then(|x| x.parse::<u32>().ok())
            .unwrap_or(0)
    });
    c.check(
        format!(
            "nothing deleted: three files of this start ({})",
            files.len()
        ),
        files.len() == 3,
    );
    let out = Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["audit", "verify", "--key"])
        .arg(state.join("audit-key.pub"))
        .args(&files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    c.check(
        "`audit verify --key` accepts the three files",
        out.status.success(),
    );
    c.check(
        "from the first receipt to the shutdown checkpoint",
        text.contains("receipts, chain and hashes verify") && text.contains("shutdown checkpoint"),
    );
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    c.check(
        "the refusal itself is receipted",
        all.contains("\"what\":\"receipts_unavailable\""),
    );
    // Out of order, the chain does not verify.
    let mut swapped = files.clone();
    swapped.swap(0, 1);
    let out = Command::new(env!("CARGO_BIN_EXE_halo-gateway"))
        .args(["audit", "verify"])
        .args(&swapped)
        .output()
        .unwrap();
    c.check(
        "two files out of order do not verify (exit 2)",
        out.status.code() == Some(2),
    );
    c.finish(8, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// PX4 SITL's default origin, as the simulator announces it.
const ORIGIN: (f64, f64, f64) = (47.397_742, 8.545_594, 488.0);
const EARTH_R: f64 = 6_371_000.0;

/// The latitude and longitude `north`, `east` metres from `origin` (the spherical "direct"
/// problem: the great-circle destination along the bearing), the test's own geometry.
fn latlon_at(origin: (f64, f64), north: f64, east: f64) -> (f64, f64) {
    let d = north.hypot(east) / EARTH_R;
    let theta = east.atan2(north);
    let (p1, l1) = (origin.0.to_radians(), origin.1.to_radians());
    let p2 = (p1.sin() * d.cos() + p1.cos() * d.sin() * theta.cos()).asin();
    let l2 = l1 + (theta.sin() * d.sin() * p1.cos()).atan2(d.cos() - p1.sin() * p2.sin());
    (p2.to_degrees(), l2.to_degrees())
}

/// North and east of `(lat, lon)` from `origin`: haversine distance along the initial bearing.
fn north_east_of(origin: (f64, f64), lat: f64, lon: f64) -> (f64, f64) {
    let (p1, p2) = (origin.0.to_radians(), lat.to_radians());
    let dl = (lon - origin.1).to_radians();
    let a = ((p2 - p1) / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    let d = 2.0 * EARTH_R * a.sqrt().asin();
    let bearing = (dl.sin() * p2.cos()).atan2(p1.cos() * p2.sin() - p1.sin() * p2.cos() * dl.cos());
    (d * bearing.cos(), d * bearing.sin())
}

/// A route action to a point on the globe (altitude above mean sea level), planned against
/// origin epoch `origin_epoch`.
fn global_route(id: &str, lat: f64, lon: f64, alt_m: f64, origin_epoch: u64, cert: &str) -> Value {
    json!({"id": id, "type": "route_action",
           "payload": {"frame": "global", "lat_deg": lat, "lon_deg": lon, "alt_m": alt_m, "yaw_deg": 0.0, "duration_s": 8.0},
           "support": {"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"},
                       "origin": {"epoch": origin_epoch}},
           "certificate": cert})
}

#[test]
fn global_targets_fly_through_the_origin_and_a_moved_origin_withholds_them() {
    let _timing = common::shared();
    let dir = tmp("global");
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();
    let providers = Providers::start(&u, &g.provider);
    let origin_epoch = || {
        get(&format!("{u}/v1/status"), None).1["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == "origin")
            .and_then(|s| s["epoch"].as_u64())
    };
    take_off(&g, &sim);
    wait_until(10, "the origin from PX4", || origin_epoch().is_some());
    let e1 = origin_epoch().unwrap();
    let mut outcomes: Vec<(&str, bool)> = Vec::new();
    let submit = |env: &Value| {
        let (st, rep) = post(
            &format!("{u}/v1/responses"),
            Some(&g.agent),
            env.to_string().as_bytes(),
        );
        assert_eq!(st, 200, "{rep}");
        rep["components"][0].clone()
    };

    // 8 m north, 2 m east, 6 m above the origin: flown at exactly that local point.
    let (lat, lon) = latlon_at((ORIGIN.0, ORIGIN.1), 8.0, 2.0);
    let r1 = json!({"response_id": "geo-1", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [global_route("g1", lat, lon, ORIGIN.2 + 6.0, e1, "cert-g1")]});
    certify(&g, &r1, "g1", "cert-g1");
    let c1 = submit(&r1);
    outcomes.push(("a global target dispatches", c1["phase"] == "dispatched"));
    let first = fp(8.0, 2.0, -6.0, 0.0);
    wait_until(15, "the converted target at the vehicle", || {
        sim.fingerprints().contains(&first)
    });
    outcomes.push(("the vehicle takes its local point", true));

    // A ground station moves the EKF origin 0.0001° north (about 11 m): a new origin epoch.
    let port = sim.control.gcs_port.load(Ordering::Relaxed);
    let moved = (ORIGIN.0 + 0.0001, ORIGIN.1, ORIGIN.2);
    let before_move_ns = sim.now_ns();
    let p = pilot(
        port,
        &[
            "origin",
            &moved.0.to_string(),
            &moved.1.to_string(),
            &moved.2.to_string(),
        ],
    );
    assert_eq!(p["origin"]["confirmed"], true, "{p}");
    wait_until(5, "the new origin epoch", || {
        origin_epoch().is_some_and(|e| e != e1)
    });
    let e2 = origin_epoch().unwrap();
    // The streaming target was planned in the old frame: the vehicle stops taking it.
    std::thread::sleep(Duration::from_millis(600));
    let after_ns = sim.now_ns();
    std::thread::sleep(Duration::from_millis(1000));
    outcomes.push((
        "the target of the old frame streams until the origin moves, not after",
        sim.taken_after(&first, before_move_ns) > 0 && sim.taken_after(&first, after_ns) == 0,
    ));

    // An action still planned against the old origin is withheld, with an obligation.
    let (lat2, lon2) = latlon_at((ORIGIN.0, ORIGIN.1), 12.0, 3.0);
    let r2 = json!({"response_id": "geo-2", "agent_id": "planner-1", "generation": 2,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [global_route("g2", lat2, lon2, ORIGIN.2 + 6.0, e1, "cert-g2")]});
    certify(&g, &r2, "g2", "cert-g2");
    let c2 = submit(&r2);
    outcomes.push((
        "planned against the old origin: withheld EPOCH_CHANGED",
        c2["phase"] == "withheld" && c2["reason"] == "EPOCH_CHANGED" && c2["obligation"].is_u64(),
    ));
    let oid = c2["obligation"].as_u64().unwrap_or(0);

    // The fresh candidate claims the new origin: the same place on the globe, new local numbers.
    let fresh = global_route("g2", lat2, lon2, ORIGIN.2 + 6.0, e2, "cert-g3");
    let as_response = json!({"response_id": "geo-2", "agent_id": "planner-1", "generation": 3,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [fresh.clone()]});
    certify(&g, &as_response, "g2", "cert-g3");
    let cand = json!({"obligation": oid, "response_id": "geo-2", "agent_id": "planner-1", "generation": 3,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [fresh]});
    let (st, v) = post(
        &format!("{u}/v1/obligations/{oid}/candidates"),
        Some(&g.agent),
        cand.to_string().as_bytes(),
    );
    outcomes.push(("the fresh candidate is readmitted", st == 200));
    let (n, e) = north_east_of((moved.0, moved.1), lat2, lon2);
    assert!((n - (12.0 - 11.119)).abs() < 0.05, "{n}");
    let near = |r: &sitl::sim::px4::SetpointRecord| {
        (f64::from(r.x) - n).abs() < 0.01
            && (f64::from(r.y) - e).abs() < 0.01
            && (f64::from(r.z) - -6.0).abs() < 0.01
    };
    let flew = {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if sim.control.view().setpoints.iter().any(near) {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    outcomes.push((
        "the vehicle takes the point converted through the new origin",
        flew,
    ));
    // Never the old frame's numbers for g2.
    outcomes.push((
        "never the old frame's numbers",
        !sim.fingerprints().contains(&fp(12.0, 3.0, -6.0, 0.0)),
    ));
    drop(providers);
    for (name, good) in &outcomes {
        println!("  {name:<70} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = outcomes.iter().filter(|(_, g)| *g).count();
    println!(
        "service-global-targets: {matched}/{} matched",
        outcomes.len()
    );
    assert_eq!((matched, outcomes.len()), (7, 7), "{v}");
    assert_eq!(g.stop(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// PX4 v1.16 sends GPS_GLOBAL_ORIGIN only when asked or when it moves: a gateway started
/// after PX4 asks for it at link-up, and says in `/v1/status` that it waits until it comes.
#[test]
fn the_gateway_asks_px4_for_its_origin_and_says_it_waits() {
    let _timing = common::shared();
    let dir = tmp("origin-wait");
    let sim = Sim::start_with(
        &dir.join("vehicle-setpoints.jsonl"),
        None,
        sitl::sim::px4::SimConfig {
            // Long enough that a slow start of the gateway on a loaded machine still sees two
            // requests before it (a fresh-clone run once took more than 5 s to link up).
            origin_after_ms: 15_000,
            ..sitl::sim::px4::SimConfig::default()
        },
    );
    let g = Gateway::start(&dir, &format!("udpout:{}", sim.addr), "");
    let u = g.url.clone();
    let status = || get(&format!("{u}/v1/status"), None).1;
    let has_origin = |s: &Value| {
        s["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["source"] == "origin" && x["epoch"].as_u64().is_some())
    };
    let mut cases: Vec<(&str, bool)> = Vec::new();
    wait_until(10, "the link", || status()["vehicle"]["link_up"] == true);
    // Judged on the very snapshot that shows the second request, so nothing can arrive
    // between the two readings on a slow machine.
    let mut waiting = Value::Null;
    wait_until(10, "a second request", || {
        let s = status();
        let asked = s["vehicle"]["waiting_for_origin"]["requests"]
            .as_u64()
            .is_some_and(|n| n >= 2);
        if asked {
            waiting = s;
        }
        asked
    });
    println!(
        "  while waiting: {} (origin source present: {})",
        waiting["vehicle"]["waiting_for_origin"],
        has_origin(&waiting)
    );
    cases.push((
        "while PX4 has no origin: status says it waits, in words, and no origin source",
        waiting["vehicle"]["waiting_for_origin"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("GPS_GLOBAL_ORIGIN"))
            && !has_origin(&waiting),
    ));
    // The gateway's own request count, read while it waits, shows the period without relying
    // on how fast this loop polls on a loaded machine (a CI run saw the poll itself lag).
    let mut asked = 0;
    wait_until(30, "the origin", || {
        let s = status();
        if let Some(n) = s["vehicle"]["waiting_for_origin"]["requests"].as_u64() {
            asked = asked.max(n);
        }
        has_origin(&s)
    });
    let heard_ns = sim.now_ns();
    let s = status();
    cases.push((
        "once it exists it is heard and the wait is over",
        s["vehicle"].get("waiting_for_origin").is_none(),
    ));
    // A 2 s period over the 15 s before the origin exists is up to 8 requests (fewer when the
    // gateway is slow to link up); a gateway that asked only at start, or every 10 s, asks at
    // most twice.
    println!(
        "  asked {asked} times while waiting; heard {:.1} s after the simulator started",
        heard_ns as f64 / 1e9
    );
    cases.push((
        "it kept asking at its period (at least 3 requests while waiting) and heard it after it exists",
        asked >= 3 && heard_ns >= 15_000_000_000,
    ));
    let matched = cases.iter().filter(|(_, ok)| *ok).count();
    for (what, ok) in &cases {
        println!("  {} {what}", if *ok { "ok  " } else { "FAIL" });
    }
    println!("service-origin-wait: {matched}/{} matched", cases.len());
    assert_eq!((matched, cases.len()), (3, 3), "{s}");
}
