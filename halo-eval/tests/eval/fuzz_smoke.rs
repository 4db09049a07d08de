//! A stable-toolchain smoke run of every fuzz target (`fuzz/`, docs/fuzzing.md): each entry
//! point in `halo_eval::fuzzing` runs over its seeds from the test data and a fixed number of
//! deterministic mutations of them (byte flips, insertions, deletions, truncations, splices).
//! A panic is a finding. The count of inputs per target is printed and pinned.
use crate::common;

use common::Rng;

use halo_eval::fuzzing;

/// Mutations per target (on top of the seeds).
const MUTATIONS: usize = 1500;

const INTERESTING: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\\u0000",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\n",
    b"\"kind\":\"checkpoint\"",
    b"0.5",
    b"true",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let ins = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, ins.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.truncate(at),
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
            _ => {
                if let Some(d) = v.iter().position(|b| b.is_ascii_digit()) {
                    v.splice(d..=d, b"99999999999999999999".iter().copied());
                }
            }
        }
    }
    v
}

fn run(name: &str, seeds: &[Vec<u8>], target: fn(&[u8])) -> usize {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let mut n = 0;
    for s in seeds {
        target(s);
        n += 1;
    }
    for _ in 0..MUTATIONS {
        let input = mutate(&mut rng, seeds);
        let r = std::panic::catch_unwind(|| target(&input));
        assert!(
            r.is_ok(),
            "{name}: finding on input {:?}",
            String::from_utf8_lossy(&input)
        );
        n += 1;
    }
    n
}

fn cases(file: &str, key: &str) -> Vec<Vec<u8>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::data_dir().join(file)).unwrap())
            .unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(
            |c| match c.get(format!("{key}_text")).and_then(|t| t.as_str()) {
                // A case written as raw text (malformed on purpose) is used as written.
                Some(text) => text.as_bytes().to_vec(),
                None => c[key].to_string().into_bytes(),
            },
        )
        .collect()
}

fn file(p: &str) -> Vec<u8> {
    std::fs::read(common::repo_root().join(p)).unwrap()
}

#[test]
fn every_fuzz_target_survives_its_smoke_run() {
    let _timing = common::exclusive();
    let mut envelopes = cases("admission/structure.json", "response");
    envelopes.extend(cases("admission/local.json", "response"));
    envelopes.extend(cases("admission/closure.json", "response"));
    envelopes.push(file("docs/examples/response.json"));
    let mut states = cases("admission/local.json", "state");
    states.push(file("docs/examples/state.json"));
    let catalogs = vec![
        file("catalogs/uav-px4.toml"),
        file("halo-core/tests/data/catalogs/graph.toml"),
        file("halo-core/tests/data/catalogs/schedule.toml"),
    ];
    let domains = vec![file("catalogs/contract-uav.toml")];
    // Receipt lines: a signed contract log, written here.
    let dir = std::env::temp_dir().join(format!("halo-fuzz-smoke-{}", std::process::id()));
    let log = dir.join("r.jsonl");
    let (rc, out) = common::halo(&[
        "contract",
        "run",
        "--signing-key",
        &dir.join("k").display().to_string(),
        "--receipts",
        &log.display().to_string(),
        &common::repo_root()
            .join("docs/examples/contract-workflow.json")
            .display()
            .to_string(),
    ]);
    assert_eq!(rc, 0, "{out}");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut receipts: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
    receipts.push(text.into_bytes());
    let _ = std::fs::remove_dir_all(&dir);

    // Offboard scripts (two bytes a step, see `fuzzing::offboard`): PX4 in HOLD armed, a
    // target enqueued, OFFBOARD, time, a hold; a pilot's POSCTL mid-stream; commands, acks,
    // TIMESYNC and permission between.
    let scripts: Vec<Vec<u8>> = vec![
        vec![
            0, 0x85, 1, 10, 3, 100, 2, 40, 0, 0x84, 2, 100, 2, 100, 2, 200, 4, 0, 2, 100,
        ],
        vec![
            0, 0x85, 3, 30, 2, 255, 2, 255, 0, 0x86, 2, 100, 3, 50, 2, 100,
        ],
        vec![
            0, 0x85, 3, 200, 2, 20, 8, 5, 7, 0, 5, 0, 2, 50, 9, 0, 3, 50, 2, 255, 6, 3, 0xFD, 9, 0,
            0, 0, 1, 1, 0,
        ],
    ];
    // The invariant is live: the seeds make the bridge stream the target.
    let streamed: Vec<usize> = scripts.iter().map(|s| fuzzing::offboard(s)).collect();
    println!("  offboard seeds stream the target: {streamed:?} setpoints checked");
    assert!(streamed.iter().all(|n| *n > 0), "{streamed:?}");
    let workflows = vec![
        file("docs/examples/contract-workflow.json"),
        file("docs/examples/contract-workflow-drifted.json"),
    ];
    // The service's bodies: every provider update the demo's feeds send, certificates, and
    // contract operations as `POST /v1/contract` takes them (the root of the example workflow).
    let mut bodies: Vec<Vec<u8>> = sitl::sim::world::provider_updates(7, 1_000)
        .into_iter()
        .map(|(_, b)| b.to_string().into_bytes())
        .collect();
    bodies.push(
        format!(
            r#"{{"id":"cert-1","covers":"{}","valid_for_ms":30000,"issuer":"geo"}}"#,
            "ab".repeat(32)
        )
        .into_bytes(),
    );
    bodies.push(
        format!(
            r#"{{"id":"cert-2","covers":"{}","valid_until_unix_ms":99,"issuer":"geo"}}"#,
            "0".repeat(64)
        )
        .into_bytes(),
    );
    let wf: serde_json::Value =
        serde_json::from_slice(&file("docs/examples/contract-workflow.json")).unwrap();
    bodies.push(
        serde_json::json!({"op": "register_root", "approved_by": wf["approved_by"], "contract": wf["contract"]})
            .to_string()
            .into_bytes(),
    );
    bodies.push(br#"{"op": "reauthorize", "goal": "g1"}"#.to_vec());
    bodies.push(
        br#"{"op": "change_version", "policy": [{"rule": "forbid", "when": ["zone == nofly"]}]}"#
            .to_vec(),
    );
    bodies.push(br#"{"op": "authorize_effect", "effect": "goto(wp3)", "goal": "survey"}"#.to_vec());
    let event_ids: Vec<Vec<u8>> = [
        "3.5",
        "3.0",
        "3.10",
        "2.99",
        "4.1",
        "18446744073709551615",
        "3.18446744073709551615",
        " 3.7 ",
        "03.04",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    // Gateway configurations: the shipped examples and the listener forms the network suite
    // takes and refuses.
    let mut configs: Vec<Vec<u8>> = ["sim", "px4-sitl", "pixhawk-telem2", "crazyflie"]
        .iter()
        .map(|n| file(&format!("configs/{n}.toml")))
        .collect();
    configs.push(b"[listen]\nhttp = \"0.0.0.0:0\"\ninsecure_plaintext = true\n".to_vec());
    configs.push(
        b"[listen]\nhttp = \"127.0.0.1:0\"\noperator = \"[::]:0\"\n[listen.tls]\ncert_file = \"a\"\nkey_file = \"b\"\n"
            .to_vec(),
    );
    configs.push(
        b"[listen.tls]\ncert_file = \"a\"\nkey_file = \"b\"\nclient_ca_file = \"c\"\n\
          [[principals]]\nname = \"planner-1\"\nrole = \"agent\"\ncert_common_name = \"planner-1\"\n\
          [[principals]]\nname = \"op\"\nrole = \"operator\"\ntoken_file = \"op.token\"\n"
            .to_vec(),
    );
    // TLS files: a real chain and key (openssl, as docs/deploy.md makes them), and a key of
    // another pair, each as `chain NUL key`.
    let pki = std::env::temp_dir().join(format!("halo-fuzz-pki-{}", std::process::id()));
    std::fs::create_dir_all(&pki).unwrap();
    for k in ["a", "b"] {
        let o = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
            .arg(pki.join(format!("{k}.key")))
            .arg("-out")
            .arg(pki.join(format!("{k}.crt")))
            .output()
            .expect("openssl");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let read = |n: &str| std::fs::read(pki.join(n)).unwrap();
    let mut pems: Vec<Vec<u8>> = [("a.crt", "a.key"), ("a.crt", "b.key")]
        .iter()
        .map(|(c, k)| [read(c), vec![0], read(k)].concat())
        .collect();
    // With a client CA (mTLS): b's certificate as the CA.
    pems.push(
        [
            read("a.crt"),
            vec![0],
            read("a.key"),
            vec![0],
            read("b.crt"),
        ]
        .concat(),
    );
    // Client identities: a certificate's DER (a's, with its serial) and revocation lists.
    let der = std::process::Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(pki.join("a.crt"))
        .output()
        .expect("openssl");
    assert!(der.status.success());
    let identities: Vec<Vec<u8>> = vec![
        der.stdout,
        b"# leaked\nplanner-1\nserial=00A1:B2\nserial:7f\n".to_vec(),
        b"serial=\nserial=zz\n".to_vec(),
    ];
    let _ = std::fs::remove_dir_all(&pki);
    // The envelope target's payload invariant is live: the seeds' payloads are compared.
    let cat = halo_core::Catalog::parse(
        std::str::from_utf8(&file("catalogs/uav-px4.toml")).unwrap(),
        "uav-px4.toml",
    )
    .unwrap();
    let payloads: usize = envelopes
        .iter()
        .map(|e| fuzzing::payload_readers(&cat, e))
        .sum();
    println!("  envelope seeds: {payloads} payloads read directly and by serde_json alike");
    assert!(payloads > 100, "{payloads}");
    let runs = [
        ("envelope", run("envelope", &envelopes, fuzzing::envelope)),
        (
            "state_file",
            run("state_file", &states, fuzzing::state_file),
        ),
        ("catalog", run("catalog", &catalogs, fuzzing::catalog_text)),
        (
            "contract_domain",
            run("contract_domain", &domains, fuzzing::contract_domain),
        ),
        (
            "receipt_lines",
            run("receipt_lines", &receipts, fuzzing::receipt_lines),
        ),
        (
            "offboard",
            run("offboard", &scripts, |d| {
                let _ = fuzzing::offboard(d);
            }),
        ),
        (
            "contract_workflow",
            run("contract_workflow", &workflows, fuzzing::contract_workflow),
        ),
        (
            "service_bodies",
            run("service_bodies", &bodies, fuzzing::service_bodies),
        ),
        (
            "last_event_id",
            run("last_event_id", &event_ids, fuzzing::last_event_id),
        ),
        (
            "gateway_config",
            run("gateway_config", &configs, fuzzing::gateway_config),
        ),
        ("tls_pem", run("tls_pem", &pems, fuzzing::tls_pem)),
        (
            "client_identity",
            run("client_identity", &identities, fuzzing::client_identity),
        ),
    ];
    let total: usize = runs.iter().map(|(_, n)| n).sum();
    for (name, n) in &runs {
        println!("  {name:<16} {n} inputs, no finding");
    }
    let want = runs.len() * MUTATIONS
        + envelopes.len()
        + states.len()
        + catalogs.len()
        + domains.len()
        + receipts.len()
        + scripts.len()
        + workflows.len()
        + bodies.len()
        + event_ids.len()
        + configs.len()
        + pems.len()
        + identities.len();
    println!("fuzz-smoke: {total}/{want} matched");
    assert_eq!(envelopes.len(), 120);
    assert_eq!(total, want);
    assert_eq!(
        (
            bodies.len(),
            event_ids.len(),
            configs.len(),
            pems.len(),
            identities.len()
        ),
        (14, 9, 7, 3, 3)
    );
    assert_eq!(total, 18240, "the smoke run's size, pinned");
}
