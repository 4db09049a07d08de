//! The network face: TLS on both listeners, judged by clients that share no code with the
//! gateway (curl, `openssl s_client`, Python's `ssl` and `httpx`, the Python `mcp` SDK), the
//! configuration's refusal of plaintext on a network, and a certificate replaced by SIGHUP
//! during a streaming flight. The certificates are made with the `openssl` commands
//! docs/deploy.md gives.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::service::{
    Gateway, Providers, Sim, certify, fp, get, metrics_text, post, route, take_off, tmp, trust_ca,
    wait_until,
};
use crate::common::tls::{ClientPair, Pki, client_cert, make_pki};
use crate::common::{self, Checks, halo, repo_root};

/// The network suite's checks.
const NETWORK: usize = 38;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// curl's exit code and body: `GET url` trusting `ca` (none: plain HTTP).
fn curl(url: &str, ca: Option<&Path>, token: Option<&str>) -> (i32, String) {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10"]);
    if let Some(ca) = ca {
        c.arg("--cacert").arg(ca);
    }
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = c.arg(url).stdin(Stdio::null()).output().expect("curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `openssl s_client` with `flags` against `addr`: what it printed (stdout and stderr).
fn s_client(addr: &str, flags: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", addr, "-brief"])
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `openssl s_client` offering only `flag` (`-tls1_1`, `-tls1`), its own floor lowered so a
/// refusal is the server's: refused with an alert and no session. rustls answers such a hello
/// with handshake_failure (nothing it offers is acceptable).
fn old_protocol_refused(addr: &str, flag: &str, ca: &str) -> bool {
    let out = s_client(
        addr,
        &[flag, "-cipher", "DEFAULT:@SECLEVEL=0", "-CAfile", ca],
    );
    let refused = out.contains("SSL alert number") && !out.contains("Protocol version:");
    if !refused {
        println!("  s_client {flag} at {addr}: {}", out.trim());
    }
    refused
}

/// A planted defect for the judge above: OpenSSL's s_server taking TLS 1.1 with the test
/// certificate. The judge must not call it refused.
fn weak_server_caught(pki: &Pki) -> bool {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("openssl")
        .args([
            "s_server",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-tls1_1",
        ])
        .args(["-cipher", "DEFAULT:@SECLEVEL=0", "-www", "-quiet", "-cert"])
        .arg(&pki.cert)
        .arg("-key")
        .arg(&pki.key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    wait_until(10, "openssl s_server", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let caught = !old_protocol_refused(&format!("127.0.0.1:{port}"), "-tls1_1", s(&pki.ca));
    let _ = server.kill();
    let _ = server.wait();
    caught
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("https://")
        .trim_start_matches("http://")
        .to_string()
}

fn metric(url: &str, line: &str) -> u64 {
    metrics_text(url)
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `run --check` of a configuration text: (exit code, output).
fn check_config(dir: &Path, name: &str, text: &str) -> (i32, String) {
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    halo(&[
        "run",
        "--check",
        "--config",
        s(&f),
        "--state-dir",
        s(&dir.join("never")),
    ])
}

fn tls_section(cert: &Path, key: &Path) -> String {
    format!(
        "[listen.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        cert.display(),
        key.display()
    )
}

/// What `run` and `run --check` take and refuse of `[listen]`.
fn configuration(c: &mut Checks, dir: &Path, pki: &Pki) {
    let v = "[vehicle]\nurl = \"udpin:127.0.0.1:0\"\n";
    let (code, out) = check_config(
        dir,
        "open.toml",
        &format!("{v}[listen]\nhttp = \"0.0.0.0:0\"\n"),
    );
    c.check(
        "plaintext on 0.0.0.0 is refused (exit 3), naming listen.http and [listen.tls]",
        code == 3 && out.contains("listen.http") && out.contains("[listen.tls]"),
    );
    let (code, out) = check_config(
        dir,
        "open-op.toml",
        &format!("{v}[listen]\nhttp = \"127.0.0.1:0\"\noperator = \"0.0.0.0:0\"\n"),
    );
    c.check(
        "plaintext on the operator's listener alone is refused too",
        code == 3 && out.contains("listen.operator"),
    );
    let (code, out) = check_config(
        dir,
        "insecure.toml",
        &format!("{v}[listen]\nhttp = \"0.0.0.0:0\"\ninsecure_plaintext = true\n"),
    );
    c.check(
        "listen.insecure_plaintext = true takes it and says so",
        code == 0 && out.contains("plaintext on a network"),
    );
    let (code, out) = check_config(
        dir,
        "mismatch.toml",
        &format!(
            "{v}[listen]\nhttp = \"0.0.0.0:0\"\n{}",
            tls_section(&pki.cert, &pki.other_key)
        ),
    );
    c.check(
        "a key that is not the certificate's is refused by run --check",
        code == 3 && out.contains("cannot be served together"),
    );
    let missing = dir.join("no-such.crt");
    let (code, out) = check_config(
        dir,
        "missing.toml",
        &format!(
            "{v}[listen]\nhttp = \"0.0.0.0:0\"\n{}",
            tls_section(&missing, &pki.key)
        ),
    );
    c.check(
        "a missing certificate file is named",
        code == 3 && out.contains("no-such.crt"),
    );
    let (code, out) = check_config(
        dir,
        "tls.toml",
        &format!(
            "{v}[listen]\nhttp = \"0.0.0.0:0\"\n{}",
            tls_section(&pki.cert, &pki.key)
        ),
    );
    c.check(
        "TLS on 0.0.0.0 checks, https on both listeners",
        code == 0 && out.contains("https://0.0.0.0:0 and https://0.0.0.0:0"),
    );
    let text = std::fs::read_to_string(repo_root().join("configs/pixhawk-telem2.toml")).unwrap();
    c.check(
        "configs/pixhawk-telem2.toml (what deploy installs) serves TLS on the network",
        text.contains("[listen.tls]") && text.contains("0.0.0.0:8640"),
    );
}

/// The running gateway over TLS, as curl, openssl and the operator's command line see it.
fn independent_clients(c: &mut Checks, g: &Gateway, pki: &Pki) {
    let u = &g.url;
    let op = &g.proc.operator_url;
    c.check(
        "the banner names https:// for both listeners",
        u.starts_with("https://") && op.starts_with("https://"),
    );
    let (code, body) = curl(&format!("{u}/v1/status"), Some(&pki.ca), None);
    c.check(
        "curl --cacert: GET /v1/status over TLS",
        code == 0 && body.contains("boot_epoch"),
    );
    let (code, _) = curl(&format!("{u}/v1/status"), Some(&pki.other_ca), None);
    c.check(
        "curl trusting another CA refuses the certificate (60)",
        code == 60,
    );
    let (code, body) = curl(&format!("http://{}/v1/status", host_port(u)), None, None);
    c.check(
        "plaintext HTTP to the TLS port gets no HTTP answer",
        code != 0 && !body.contains("boot_epoch"),
    );
    let (code, body) = curl(&format!("{op}/v1/status"), Some(&pki.ca), Some(&g.operator));
    c.check(
        "the operator's own listener serves TLS",
        code == 0 && body.contains("boot_epoch"),
    );
    let addr = host_port(u);
    let ca = s(&pki.ca);
    for (flag, want) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let out = s_client(&addr, &[flag, "-CAfile", ca, "-verify_return_error"]);
        c.check(
            format!("openssl s_client {flag}: {want}, the chain verified"),
            out.contains(&format!("Protocol version: {want}")) && out.contains("Verification: OK"),
        );
        if !out.contains(want) {
            println!("  s_client {flag}: {out}");
        }
    }
    for flag in ["-tls1_1", "-tls1"] {
        c.check(
            format!("openssl s_client {flag}: refused by the gateway with an alert, no session"),
            old_protocol_refused(&addr, flag, ca),
        );
    }
    // The judge shown to catch a server that does take TLS 1.1: OpenSSL's own s_server.
    c.check(
        "the TLS 1.1 judge catches a server that takes TLS 1.1 (openssl s_server -tls1_1)",
        weak_server_caught(pki),
    );
    let (code, out) = halo(&[
        "operator",
        "status",
        "--url",
        op,
        "--cacert",
        ca,
        "--state-dir",
        s(&g.state),
    ]);
    c.check(
        "halo-gateway operator status --cacert over TLS",
        code == 0 && out.contains("boot"),
    );
    let (code, out) = halo(&[
        "operator",
        "status",
        "--url",
        op,
        "--state-dir",
        s(&g.state),
    ]);
    c.check(
        "operator status to an https URL without --cacert says to give it",
        code != 0 && out.contains("--cacert"),
    );
    let failed = metric(u, "halo_tls_handshake_failures_total ");
    c.check("failed handshakes are counted in /metrics", failed >= 4);
    println!("  failed handshakes counted: {failed}");
}

/// The console in headless Chromium over HTTPS: a browser whose NSS database trusts the test
/// CA (no `--ignore-certificate-errors`) loads the page from the operator's listener and
/// follows its event stream; the same browser without the CA gets no page.
fn browser_console(c: &mut Checks, g: &Gateway, pki: &Pki, dir: &Path) {
    let trusting = dir.join("browser-trusting");
    common::browser::nss_trusting(&trusting, &pki.ca);
    let mut op = common::browser::Operator::start_with_home(Some(&trusting));
    let url = format!("{}/", g.proc.operator_url);
    let opened = op.ask(&format!("open {url} {}", g.operator));
    if opened["ok"] != true {
        println!("  chromium with the CA: {opened}");
    }
    c.check(
        "headless Chromium trusting the CA (its NSS database): the console loads over HTTPS, a secure context, and follows the event stream",
        opened["ok"] == true
            && opened["title"] == "halo-gateway console"
            && opened["protocol"] == "https:"
            && opened["secure_context"] == true,
    );
    let mode = op.ask("text vehicle-mode");
    c.check(
        "the console shows the vehicle's mode it read over TLS",
        mode["ok"] == true
            && mode["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty() && t != "–"),
    );
    drop(op);
    // The judge shown to catch an untrusted certificate: a browser without the CA.
    let untrusting = dir.join("browser-untrusting");
    std::fs::create_dir_all(&untrusting).unwrap();
    let mut op = common::browser::Operator::start_with_home(Some(&untrusting));
    let refused = op.ask(&format!("open {url} {}", g.operator));
    let page = op.ask("page");
    println!("  chromium without the CA: {}", page["title"]);
    c.check(
        "the same Chromium without the CA gets no console (the certificate is not trusted)",
        refused["ok"] == false && page["title"] != "halo-gateway console",
    );
}

/// Python's ssl, httpx and mcp against the running gateway (gateway/tests/py/tls_peer.py).
fn python_peer(c: &mut Checks, g: &Gateway, pki: &Pki) {
    let out = Command::new("python3")
        .arg(repo_root().join("gateway/tests/py/tls_peer.py"))
        .args([
            "--url",
            &g.url,
            "--ca",
            s(&pki.ca),
            "--wrong-ca",
            s(&pki.other_ca),
        ])
        .args(["--agent", &g.agent])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut done = None;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["done"] == true {
            done = Some(v);
        } else if let Some(name) = v["check"].as_str() {
            if v["ok"] != true {
                println!("  python: {name}: {}", v["detail"]);
            }
            c.check(format!("python {name}"), v["ok"] == true);
        }
    }
    c.check(
        "the Python peer ran to its end (8 checks)",
        done.is_some_and(|d| d["total"] == 8),
    );
}

/// During a streaming flight: the certificate is replaced by one of another CA and SIGHUP
/// re-reads it; then a broken key file is refused and the new certificate stays.
fn rotation(c: &mut Checks, g: &Gateway, sim: &Sim, pki: &Pki, live: (&Path, &Path)) {
    let u = &g.url;
    take_off(g, sim);
    let mut a = route("a", [8.0, 2.0, -6.0, 0.0], 7, "cert-a");
    a["payload"]["duration_s"] = json!(20.0);
    let env = json!({"response_id": "tls-1", "agent_id": "planner-1", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [a]});
    certify(g, &env, "a", "cert-a");
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
    let target = fp(8.0, 2.0, -6.0, 0.0);
    wait_until(10, "the target at the vehicle", || {
        sim.fingerprints().contains(&target)
    });
    // An event stream opened before the reload, trusting the first CA.
    let events = live.0.parent().unwrap().join("events.txt");
    let mut stream = Command::new("curl")
        .args([
            "-sS",
            "-N",
            "--max-time",
            "60",
            "--cacert",
            s(&pki.ca),
            "-H",
        ])
        .arg(format!("Authorization: Bearer {}", g.agent))
        .arg(format!("{u}/v1/events"))
        .stdout(std::fs::File::create(&events).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(10, "the stream's first event", || {
        std::fs::read_to_string(&events).is_ok_and(|t| t.contains("data:"))
    });
    std::fs::copy(&pki.other_cert, live.0).unwrap();
    std::fs::copy(&pki.other_key, live.1).unwrap();
    let t_reload = sim.now_ns();
    let hup = Command::new("kill")
        .args(["-HUP", &g.proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_until(10, "the reload", || {
        metric(u, "halo_tls_reloads_total{code=\"ok\"} ") == 1
    });
    c.check("SIGHUP reloads the certificate (counted ok)", true);
    let (old, _) = curl(&format!("{u}/v1/status"), Some(&pki.ca), None);
    let (new, body) = curl(&format!("{u}/v1/status"), Some(&pki.other_ca), None);
    c.check(
        "after it a new connection gets the new certificate (the old CA refuses it, the new one takes it)",
        old == 60 && new == 0 && body.contains("boot_epoch"),
    );
    let before = std::fs::read_to_string(&events).unwrap().len();
    let note = json!({"response_id": "tls-2", "agent_id": "planner-1", "generation": 2,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "n1", "type": "notice", "payload": {"text": "after the reload"}}]});
    let (st, _) = post(
        &format!("{u}/v1/responses"),
        Some(&g.agent),
        note.to_string().as_bytes(),
    );
    assert_eq!(st, 200);
    wait_until(
        10,
        "an event after the reload on the stream opened before it",
        || {
            std::fs::read_to_string(&events)
                .is_ok_and(|t| t.len() > before && t[before..].contains("tls-2"))
        },
    );
    c.check(
        "the event stream opened before the reload keeps streaming after it",
        stream.try_wait().unwrap().is_none(),
    );
    std::thread::sleep(Duration::from_secs(2));
    let taken = sim.taken_after(&target, t_reload);
    println!("  setpoints of the target taken in the 2 s after the reload: {taken}");
    c.check(
        "the target kept streaming through the reload (the simulator's own log)",
        taken >= 30,
    );
    // A half-written key: refused, the certificate in use stays.
    std::fs::write(live.1, "-----BEGIN PRIVATE KEY-----\ntruncated\n").unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &g.proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_until(10, "the refused reload", || {
        metric(u, "halo_tls_reloads_total{code=\"TLS_NO_KEY\"} ") == 1
    });
    let (new, _) = curl(&format!("{u}/v1/status"), Some(&pki.other_ca), None);
    c.check(
        "a broken key file is refused at reload (TLS_NO_KEY) and the certificate in use stays",
        new == 0,
    );
    let _ = stream.kill();
    let _ = stream.wait();
}

#[test]
fn tls_on_the_listeners_judged_by_independent_clients() {
    let _timing = common::exclusive();
    let dir = tmp("network-tls");
    let pki = make_pki(&dir);
    let mut c = Checks::new("network");
    configuration(&mut c, &dir, &pki);

    // The files the gateway serves, replaced during the flight.
    let live = (dir.join("live.crt"), dir.join("live.key"));
    std::fs::copy(&pki.cert, &live.0).unwrap();
    std::fs::copy(&pki.key, &live.1).unwrap();
    let sim = Sim::start(&dir.join("vehicle-setpoints.jsonl"));
    let state = dir.join("state");
    let g = Gateway::start_config(
        &dir,
        &state,
        &format!(
            "[vehicle]\nurl = \"udpout:{}\"\n[listen]\nhttp = \"127.0.0.1:0\"\n{}[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            sim.addr,
            tls_section(&live.0, &live.1),
            state.display()
        ),
        &[],
    );
    trust_ca(Some(&std::fs::read(&pki.ca).unwrap()));
    independent_clients(&mut c, &g, &pki);
    python_peer(&mut c, &g, &pki);
    browser_console(&mut c, &g, &pki, &dir);
    let providers = Providers::start(&g.url, &g.provider);
    // From here the helpers trust both CAs (the certificate changes mid-flight).
    let both = [
        std::fs::read(&pki.ca).unwrap(),
        std::fs::read(&pki.other_ca).unwrap(),
    ]
    .concat();
    trust_ca(Some(&both));
    rotation(&mut c, &g, &sim, &pki, (&live.0, &live.1));
    drop(providers);
    trust_ca(None);
    c.check("the gateway stops cleanly", g.stop() == 0);
    c.finish(NETWORK, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The principals suite's checks.
const PRINCIPALS: usize = 43;

const MAP_FEED: [&str; 7] = [
    "map",
    "bounds",
    "authority",
    "airspace",
    "preflight",
    "wind",
    "z_range",
];

fn token(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.token")))
        .unwrap()
        .trim()
        .to_string()
}

fn notice(id: &str, text: &str) -> Vec<u8> {
    json!({"response_id": id, "agent_id": "planner", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "n1", "type": "notice", "payload": {"text": text}}]})
    .to_string()
    .into_bytes()
}

/// What curl printed for `url` with `token`, with `args` before the credential.
fn curl_as(token: &str, args: &[&str], url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS"])
        .args(args)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An MCP `initialize` by `token`'s principal with curl: the status line (lower-cased) and the
/// session id the gateway gave, if it gave one.
fn mcp_initialize(u: &str, token: &str) -> (String, Option<String>) {
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let head = curl_as(
        token,
        &[
            "-i",
            "--max-time",
            "5",
            "-H",
            "Content-Type: application/json",
            "-H",
            "Accept: application/json, text/event-stream",
            "-d",
            init,
        ],
        &format!("{u}/mcp"),
    );
    let status = head.lines().next().unwrap_or("").to_lowercase();
    let id = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_string())
    });
    (status, id)
}

/// A POST on MCP session `id` with `token`; answers the HTTP status.
fn mcp_post(u: &str, token: &str, id: &str, body: &str) -> String {
    let sid = format!("Mcp-Session-Id: {id}");
    curl_as(
        token,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
            "-H",
            &sid,
            "-H",
            "Content-Type: application/json",
            "-H",
            "Accept: application/json, text/event-stream",
            "-d",
            body,
        ],
        &format!("{u}/mcp"),
    )
}

/// An initialized MCP session of `token`'s principal with its `GET /mcp` stream held open by
/// curl: (the session id, the stream).
fn mcp_session(u: &str, token: &str) -> (String, std::process::Child) {
    let (status, id) = mcp_initialize(u, token);
    let id = id.unwrap_or_else(|| panic!("initialize gave no session id ({status})"));
    let st = mcp_post(
        u,
        token,
        &id,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(st.starts_with('2'), "notifications/initialized: {st}");
    let stream = Command::new("curl")
        .args(["-sS", "-N", "--max-time", "30", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .args(["-H", "Accept: text/event-stream", "-H"])
        .arg(format!("Mcp-Session-Id: {id}"))
        .arg(format!("{u}/mcp"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (id, stream)
}

/// Whether `child` ends within `secs` seconds (killed if not).
fn ends_within(child: &mut std::process::Child, secs: u32) -> bool {
    let ended = (0..secs * 10).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        child.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    let _ = child.wait();
    ended
}

/// What `curl -N` read from `GET /v1/events` with `token` in `secs` seconds.
fn events_for(url: &str, token: &str, secs: u32) -> String {
    let secs = secs.to_string();
    curl_as(
        token,
        &["-N", "--max-time", &secs],
        &format!("{url}/v1/events"),
    )
}

/// Two agents, two providers and an operator, each a principal of its own: what each may write
/// and see, and credentials rotated and revoked by SIGHUP without a restart.
#[test]
fn principals_each_write_and_see_their_own_and_credentials_rotate_without_a_restart() {
    let _timing = common::shared();
    let dir = tmp("network-principals");
    let creds = dir.join("principals");
    std::fs::create_dir_all(&creds).unwrap();
    let revoked = creds.join("revoked");
    let sources = MAP_FEED.map(|s| format!("\"{s}\"")).join(", ");
    let principals = format!(
        "[[principals]]\nname = \"agent-a\"\nrole = \"agent\"\ntoken_file = \"{d}/agent-a.token\"\n\
         [[principals]]\nname = \"agent-b\"\nrole = \"agent\"\ntoken_file = \"{d}/agent-b.token\"\n\
         [[principals]]\nname = \"traffic-feed\"\nrole = \"provider\"\ntoken_file = \"{d}/traffic-feed.token\"\nsources = [\"traffic\"]\n\
         [[principals]]\nname = \"map-feed\"\nrole = \"provider\"\ntoken_file = \"{d}/map-feed.token\"\nsources = [{sources}]\n\
         [[principals]]\nname = \"op\"\nrole = \"operator\"\ntoken_file = \"{d}/op.token\"\n",
        d = creds.display()
    );
    let mut c = Checks::new("network-principals");
    // The configuration's refusals, as run --check gives them.
    let v = "[vehicle]\nurl = \"udpin:127.0.0.1:0\"\n";
    let (code, out) = check_config(
        &dir,
        "unknown-source.toml",
        &format!(
            "{v}{}",
            principals.replace("sources = [\"traffic\"]", "sources = [\"trafic\"]")
        ),
    );
    c.check(
        "a provider given a source the catalog does not define is refused (exit 3)",
        code == 3 && out.contains("`trafic`"),
    );
    let (code, out) = check_config(
        &dir,
        "vehicle-source.toml",
        &format!(
            "{v}{}",
            principals.replace("sources = [\"traffic\"]", "sources = [\"battery\"]")
        ),
    );
    c.check(
        "a provider given a vehicle-owned source is refused",
        code == 3 && out.contains("vehicle link"),
    );
    let (code, out) = check_config(
        &dir,
        "two-owners.toml",
        &format!(
            "{v}{}",
            principals.replace("sources = [\"traffic\"]", "sources = [\"map\"]")
        ),
    );
    c.check(
        "one source given to two providers is refused",
        code == 3 && out.contains("each source has one provider"),
    );
    let (code, out) = check_config(&dir, "principals.toml", &format!("{v}{principals}"));
    c.check(
        "run --check names the principals",
        code == 0 && out.contains("agent-a (agent), agent-b (agent), traffic-feed (provider)"),
    );

    let state = dir.join("state");
    let g = Gateway::start_config(
        &dir,
        &state,
        &format!(
            "[vehicle]\nurl = \"sim\"\n[listen]\nhttp = \"127.0.0.1:0\"\n[auth]\nrevoked_file = \"{}\"\n{principals}[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            revoked.display(),
            state.display()
        ),
        &[],
    );
    let u = g.url.clone();
    let [a, b, traffic, map, op] =
        ["agent-a", "agent-b", "traffic-feed", "map-feed", "op"].map(|n| token(&creds, n));
    // The role credentials of [auth] are not taken with [[principals]].
    let (st, _) = get(&format!("{u}/v1/obligations"), Some(&g.agent));
    c.check(
        "the [auth] agent credential is not taken with [[principals]] (401)",
        st == 401,
    );
    // Each provider writes its own sources, and only those.
    let mut writes = (0, 0, 0);
    for (source, body) in sitl::sim::world::provider_updates(7, common::service::unix_ms()) {
        let url = format!("{u}/v1/state/{source}");
        let bytes = body.to_string();
        let (own, other) = if source == "traffic" {
            (&traffic, &map)
        } else {
            (&map, &traffic)
        };
        let (st_other, v) = post(&url, Some(other), bytes.as_bytes());
        if st_other == 403 && v["error"]["code"] == "SOURCE_NOT_WRITABLE" {
            writes.1 += 1;
        }
        if post(&url, Some(own), bytes.as_bytes()).0 == 200 {
            writes.0 += 1;
        }
        if post(&url, Some(&a), bytes.as_bytes()).0 == 403 {
            writes.2 += 1;
        }
    }
    println!(
        "  provider writes: {writes:?} of 8 sources (own taken, other's refused, agent's refused)"
    );
    c.check("each provider's own sources are taken (8/8)", writes.0 == 8);
    c.check(
        "a provider writing the other's source is 403 SOURCE_NOT_WRITABLE (8/8)",
        writes.1 == 8,
    );
    c.check("an agent writing a source is 403 (8/8)", writes.2 == 8);
    // The status names whose update each source holds (the console's AoI bars show it).
    let (_, status) = get(&format!("{u}/v1/status"), Some(&op));
    let sent_by = |name: &str| {
        status["sources"]
            .as_array()
            .and_then(|l| l.iter().find(|s| s["source"] == name))
            .map(|s| s["sent_by"].clone())
    };
    c.check(
        "GET /v1/status names each source's sender (traffic: traffic-feed, map: map-feed, battery: none)",
        sent_by("traffic") == Some(json!("traffic-feed"))
            && sent_by("map") == Some(json!("map-feed"))
            && sent_by("battery") == Some(Value::Null),
    );
    let (st, v) = post(
        &format!("{u}/v1/state/battery"),
        Some(&map),
        br#"{"value": 50, "epoch": 1, "generated_at_unix_ms": 1}"#,
    );
    c.check(
        "no provider writes a vehicle-owned source",
        st == 403 && v["error"]["code"] == "SOURCE_NOT_WRITABLE",
    );
    // Agent A's response: A and the operator see it, B does not and cannot take its id.
    let (st, _) = post(
        &format!("{u}/v1/responses"),
        Some(&a),
        &notice("ra", "from agent A"),
    );
    c.check("agent A's response is taken", st == 200);
    c.check(
        "agent A reads its response",
        get(&format!("{u}/v1/responses/ra"), Some(&a)).0 == 200,
    );
    let (st, v) = get(&format!("{u}/v1/responses/ra"), Some(&b));
    c.check(
        "agent B does not see agent A's response (404)",
        st == 404 && v["error"]["code"] == "RESPONSE_UNKNOWN",
    );
    let (st, v) = post(
        &format!("{u}/v1/responses"),
        Some(&b),
        &notice("ra", "agent B's takeover"),
    );
    c.check(
        "agent B cannot send under agent A's response id (409 RESPONSE_ID_TAKEN)",
        st == 409 && v["error"]["code"] == "RESPONSE_ID_TAKEN",
    );
    let (st, _) = post(
        &format!("{u}/v1/responses"),
        Some(&b),
        &notice("rb", "from agent B"),
    );
    c.check("agent B's own response is taken", st == 200);
    let (_, all) = get(&format!("{u}/v1/responses"), Some(&op));
    let principal_of = |id: &str| {
        all.as_array()
            .and_then(|l| l.iter().find(|r| r["response"] == id))
            .map(|r| r["principal"].clone())
    };
    c.check(
        "the decisions view names each response's principal",
        principal_of("ra") == Some(json!("agent-a"))
            && principal_of("rb") == Some(json!("agent-b")),
    );
    // An obligation of agent A's: a route planned against an old map epoch.
    let r = json!({"response_id": "ra-route", "agent_id": "planner", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [route("e1", [8.0, 2.0, -6.0, 0.0], 6, "cert-x")]});
    let (st, rep) = post(
        &format!("{u}/v1/responses"),
        Some(&a),
        r.to_string().as_bytes(),
    );
    let obligation = rep["components"][0]["obligation"].as_u64();
    println!("  agent A's stale route: {st} {}", rep["components"][0]);
    c.check(
        "agent A's stale route is withheld with an obligation",
        obligation.is_some(),
    );
    let ob = obligation.unwrap_or(0);
    let listed = |t: &str| {
        get(&format!("{u}/v1/obligations"), Some(t))
            .1
            .as_array()
            .is_some_and(|l| l.iter().any(|o| o["id"] == ob))
    };
    c.check(
        "agent A lists its obligation, agent B does not; the operator does",
        listed(&a) && !listed(&b) && listed(&op),
    );
    let cand =
        json!({"obligation": ob, "component": route("e1", [8.0, 2.0, -6.0, 0.0], 7, "cert-x")});
    let (st, v) = post(
        &format!("{u}/v1/obligations/{ob}/candidates"),
        Some(&b),
        cand.to_string().as_bytes(),
    );
    c.check(
        "agent B cannot answer agent A's obligation (404 NO_OBLIGATION)",
        st == 404 && v["error"]["code"] == "NO_OBLIGATION",
    );
    // The event streams: each agent gets its own responses' events, not the other's.
    let (ea, eb, eo) = (
        events_for(&u, &a, 2),
        events_for(&u, &b, 2),
        events_for(&u, &op, 2),
    );
    c.check(
        "agent A's event stream carries its response's events and not agent B's",
        ea.contains("\"ra\"") && !ea.contains("\"rb\""),
    );
    c.check(
        "agent B's event stream carries its own and not agent A's",
        eb.contains("\"rb\"") && !eb.contains("\"ra\"") && !eb.contains("ra-route"),
    );
    c.check(
        "the operator's stream carries both",
        eo.contains("\"ra\"") && eo.contains("\"rb\""),
    );
    // Roles still hold: a provider on the agent's route, an agent on the operator's.
    let (st, v) = post(
        &format!("{u}/v1/responses"),
        Some(&traffic),
        &notice("rt", "x"),
    );
    c.check(
        "a provider principal may not send responses (403 FORBIDDEN_ROLE)",
        st == 403 && v["error"]["code"] == "FORBIDDEN_ROLE",
    );
    route_matrix(&u, [&a, &b, &traffic, &map, &op], ob);
    mcp_principals(&mut c, &u, (&a, &b), ob);
    // Rotation: agent A gets a new credential; its open stream closes, the old one is refused.
    let mut stream = Command::new("curl")
        .args(["-sS", "-N", "--max-time", "30", "-H"])
        .arg(format!("Authorization: Bearer {a}"))
        .arg(format!("{u}/v1/events"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // And an MCP session of agent A with its GET stream open, closed by the same reload.
    let (mcp_id, mut mcp_stream) = mcp_session(&u, &a);
    std::thread::sleep(Duration::from_millis(500));
    c.check(
        "agent A's MCP GET stream is open before the reload (the control)",
        mcp_stream.try_wait().unwrap().is_none(),
    );
    let fresh = "agent-a-second-credential-0123456789";
    std::fs::write(creds.join("agent-a.token"), format!("{fresh}\n")).unwrap();
    std::fs::write(&revoked, "# leaked\nmap-feed\n").unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &g.proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_until(10, "the credential reload", || {
        metric(&u, "halo_credential_reloads_total{code=\"ok\"} ") == 1
    });
    let closed = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        stream.try_wait().unwrap().is_some()
    });
    if !closed {
        let _ = stream.kill();
    }
    let _ = stream.wait();
    c.check(
        "agent A's open event stream is closed when its credential is replaced",
        closed,
    );
    c.check(
        "agent A's MCP session is closed by the reload: its GET stream ends",
        ends_within(&mut mcp_stream, 5),
    );
    let tools = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let after = mcp_post(&u, fresh, &mcp_id, tools);
    c.check(
        "the closed MCP session's id is unknown after it, even with A's new credential (404)",
        after == "404" && metric(&u, "halo_mcp_sessions_revoked_total ") >= 1,
    );
    let (st, _) = get(&format!("{u}/v1/responses/ra"), Some(&a));
    c.check(
        "agent A's old credential is refused after the reload (401)",
        st == 401,
    );
    // ra-route: withheld with its obligation, live for the catalog's two minutes (a
    // notice-only response like ra ends soon after its notice is emitted).
    let (st, v) = get(&format!("{u}/v1/responses/ra-route"), Some(fresh));
    if st != 200 {
        println!("  the new credential: {st} {v}");
    }
    c.check("its new credential is taken, without a restart", st == 200);
    let (st, v) = post(
        &format!("{u}/v1/state/map"),
        Some(&map),
        br#"{"value": null, "epoch": 7, "generated_at_unix_ms": 1}"#,
    );
    c.check(
        "the revoked provider is refused everywhere (401 CREDENTIAL_REVOKED)",
        st == 401 && v["error"]["code"] == "CREDENTIAL_REVOKED",
    );
    let traffic_body = sitl::sim::world::provider_updates(7, common::service::unix_ms())
        .into_iter()
        .find(|(s, _)| *s == "traffic")
        .map(|(_, b)| b.to_string())
        .unwrap();
    c.check(
        "the other provider is not touched by it",
        post(
            &format!("{u}/v1/state/traffic"),
            Some(&traffic),
            traffic_body.as_bytes(),
        )
        .0 == 200,
    );
    c.check("the gateway stops cleanly", g.stop() == 0);
    // The receipts name who sent each response and update; the chain still verifies.
    let log = state.join("receipts/boot-1.jsonl");
    let bodies: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|r| r["body"].clone())
        .collect();
    let sent = |kind: &str, key: &str, value: &str| -> Vec<String> {
        bodies
            .iter()
            .filter(|b| b["kind"] == kind && b[key] == value)
            .map(|b| b["sender"].as_str().unwrap_or("none").to_string())
            .collect()
    };
    let (ra, rb) = (
        sent("admitted", "response", "ra"),
        sent("admitted", "response", "rb"),
    );
    let traffic_by = sent("source_update", "source", "traffic");
    let map_by = sent("source_update", "source", "map");
    println!(
        "  receipts: ra from {ra:?}, rb from {rb:?}, traffic from {traffic_by:?}, map from {map_by:?}"
    );
    c.check(
        "the receipts name the agent that sent each response (ra: agent-a, rb: agent-b)",
        ra == ["agent-a"] && rb == ["agent-b"],
    );
    c.check(
        "the receipts name the provider that sent each update (traffic: traffic-feed, map: map-feed)",
        !traffic_by.is_empty()
            && traffic_by.iter().all(|p| p == "traffic-feed")
            && !map_by.is_empty()
            && map_by.iter().all(|p| p == "map-feed"),
    );
    let key = state.join("audit-key.pub");
    let (code, out) = halo(&["audit", "verify", "--key", s(&key), s(&log)]);
    c.check(
        "audit verify takes the log with the senders named (exit 0)",
        code == 0,
    );
    let (_, shown) = halo(&["audit", "show", s(&log)]);
    c.check(
        "audit show says who sent a response and an update",
        shown.contains("admitted ra from agent-a") && shown.contains("(sent by traffic-feed)"),
    );
    if code != 0 {
        println!("  audit verify: {out}");
    }
    c.finish(PRINCIPALS, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two agent principals over MCP with the Python SDK (gateway/tests/py/mcp_principals.py):
/// each session sees only its own principal's obligations, and a session id is no credential.
fn mcp_principals(c: &mut Checks, u: &str, (a, b): (&str, &str), ob: u64) {
    let out = Command::new("python3")
        .arg(repo_root().join("gateway/tests/py/mcp_principals.py"))
        .args([
            "--url",
            u,
            "--a",
            a,
            "--b",
            b,
            "--obligation",
            &ob.to_string(),
        ])
        .arg("--withheld")
        .arg(
            json!({"response_id": "ra-route-2", "agent_id": "planner", "generation": 1,
                "catalog": {"id": "uav-px4", "version": 6},
                "components": [route("e1", [8.0, 2.0, -6.0, 0.0], 6, "cert-x")]})
            .to_string(),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("python3");
    let mut total = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["done"] == true {
            total = v["total"].as_u64();
        } else if let Some(name) = v["check"].as_str() {
            if v["ok"] != true {
                println!("  mcp: {name}: {}", v["detail"]);
            }
            c.check(format!("mcp {name}"), v["ok"] == true);
        }
    }
    c.check("the MCP peer ran to its end (6 checks)", total == Some(6));
}

/// The route × principal matrix: every route of the API (25) for each of six callers.
const MATRIX: usize = 25 * 6 + 1;

/// What a caller should get from a route, by this test's own reading of docs/run.md's routes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Taken: neither 401 nor 403 (a body this test does not bother to make valid may be 4xx).
    Ok,
    /// 403 `FORBIDDEN_ROLE`: the caller's role may not.
    Role,
    /// 403 `SOURCE_NOT_WRITABLE`: another provider's source.
    Source,
    /// 404: another agent's response or obligation, as if it did not exist.
    Hidden,
    /// 401 `UNAUTHENTICATED`: no credential.
    Unauth,
}

/// curl's status and the error code of `method url` with `token` and `body`.
fn call(method: &str, url: &str, token: Option<&str>, body: &str) -> (String, String) {
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--max-time",
        "2",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(t) = token {
        c.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    if method != "GET" && method != "DELETE" {
        c.args(["-H", "content-type: application/json", "-d", body]);
    }
    let out = c.arg(url).stdin(Stdio::null()).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status.trim().to_string(), code)
}

/// Every route × agent A, agent B, the traffic provider, the map provider, the operator and no
/// credential, each cell judged against this test's table (`network-matrix: N/M matched`);
/// the table is checked to name every route the gateway's OpenAPI document lists. `ob` is
/// agent A's obligation and `ra-route` the response it belongs to.
fn route_matrix(u: &str, tokens: [&str; 5], ob: u64) {
    use Want::{Hidden, Ok, Role, Source, Unauth};
    let who = ["agent-a", "agent-b", "traffic", "map", "operator", "none"];
    let public = [Ok; 6];
    let agents_op = [Ok, Ok, Role, Role, Ok, Unauth];
    let agents = [Ok, Ok, Role, Role, Role, Unauth];
    let providers_op = [Role, Role, Ok, Ok, Ok, Unauth];
    let all = [Ok, Ok, Ok, Ok, Ok, Unauth];
    let op_only = [Role, Role, Role, Role, Ok, Unauth];
    let cand = format!("/v1/obligations/{ob}/candidates");
    // (method, template, the path called, body, what each caller gets)
    let table: [(&str, &str, &str, &str, [Want; 6]); 25] = [
        ("POST", "/v1/responses", "/v1/responses", "{}", agents),
        ("GET", "/v1/responses", "/v1/responses", "", agents_op),
        (
            "GET",
            "/v1/responses/{id}",
            "/v1/responses/ra-route",
            "",
            [Ok, Hidden, Role, Role, Ok, Unauth],
        ),
        (
            "POST",
            "/v1/obligations/{id}/candidates",
            &cand,
            "{}",
            [Ok, Hidden, Role, Role, Role, Unauth],
        ),
        ("GET", "/v1/obligations", "/v1/obligations", "", agents_op),
        ("GET", "/v1/events", "/v1/events", "", agents_op),
        (
            "POST",
            "/v1/state/{source}",
            "/v1/state/traffic",
            "{}",
            [Role, Role, Ok, Source, Source, Unauth],
        ),
        (
            "POST",
            "/v1/state/{source}",
            "/v1/state/map",
            "{}",
            [Role, Role, Source, Ok, Source, Unauth],
        ),
        (
            "POST",
            "/v1/certificates",
            "/v1/certificates",
            "{}",
            providers_op,
        ),
        (
            "DELETE",
            "/v1/certificates/{id}",
            "/v1/certificates/nosuch",
            "",
            providers_op,
        ),
        ("POST", "/v1/certify", "/v1/certify", "{}", all),
        ("POST", "/v1/digest", "/v1/digest", "{}", providers_op),
        // Not a hold: it would end agent A's live responses, which the rotation below reads.
        (
            "POST",
            "/v1/operator/{action}",
            "/v1/operator/no-such-action",
            "{}",
            op_only,
        ),
        (
            "POST",
            "/v1/operator/{action}",
            "/v1/operator/release",
            "{}",
            op_only,
        ),
        ("POST", "/v1/contract", "/v1/contract", "{}", providers_op),
        ("GET", "/v1/contract", "/v1/contract", "", agents_op),
        ("POST", "/v1/goals", "/v1/goals", "{}", agents),
        (
            "POST",
            "/v1/goals/witness",
            "/v1/goals/witness",
            "{}",
            agents,
        ),
        (
            "POST",
            "/v1/audit/exported",
            "/v1/audit/exported",
            "{}",
            op_only,
        ),
        ("GET", "/v1/status", "/v1/status", "", public),
        ("GET", "/v1/audit/head", "/v1/audit/head", "", public),
        ("GET", "/v1/schema", "/v1/schema", "", public),
        ("GET", "/v1/openapi.json", "/v1/openapi.json", "", public),
        ("GET", "/metrics", "/metrics", "", public),
        ("GET", "/", "/", "", public),
    ];
    let mut c = Checks::new("network-matrix");
    // Complete: every route the OpenAPI document lists is in the table.
    let (_, api) = get(&format!("{u}/v1/openapi.json"), None);
    let listed: Vec<(String, String)> = api["paths"]
        .as_object()
        .map(|paths| {
            paths
                .iter()
                .flat_map(|(p, ops)| {
                    ops.as_object()
                        .into_iter()
                        .flatten()
                        .map(move |(m, _)| (m.to_uppercase(), p.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let missing: Vec<_> = listed
        .iter()
        .filter(|(m, p)| !table.iter().any(|(tm, tp, ..)| tm == m && tp == p))
        .collect();
    println!(
        "  the OpenAPI document lists {} routes; not in the matrix: {missing:?}",
        listed.len()
    );
    c.check(
        "the matrix names every route the OpenAPI document lists",
        listed.len() >= 20 && missing.is_empty(),
    );
    println!(
        "  {:<40} {}",
        "route",
        who.map(|w| format!("{w:>9}")).join("")
    );
    for (method, _, path, body, wants) in &table {
        let mut row = String::new();
        for (i, want) in wants.iter().enumerate() {
            let token = tokens.get(i).copied();
            let (status, code) = call(method, &format!("{u}{path}"), token, body);
            let ok = match want {
                Ok => !["401", "403", "429", "000", ""].contains(&status.as_str()),
                Role => status == "403" && code == "FORBIDDEN_ROLE",
                Source => status == "403" && code == "SOURCE_NOT_WRITABLE",
                Hidden => status == "404",
                Unauth => status == "401" && code == "UNAUTHENTICATED",
            };
            row.push_str(&format!(
                "{:>9}",
                format!("{status}{}", if ok { "" } else { "!" })
            ));
            c.check(format!("{method} {path} as {}", who[i]), ok);
        }
        println!("  {:<40} {row}", format!("{method} {path}"));
    }
    c.finish(MATRIX, "");
}

/// The limits suite's checks.
const LIMITS: usize = 20;

/// What curl got: the status line and headers (`-i`), lower-cased, and the body.
fn curl_head(url: &str, token: &str) -> String {
    curl_as(token, &["-i", "--max-time", "5"], url).to_lowercase()
}

/// The HTTP status curl read from an event stream it held for a second (200 while it
/// streams).
fn stream_status(url: &str, token: &str) -> String {
    let args = ["-o", "/dev/null", "-w", "%{http_code}", "--max-time", "1"];
    curl_as(token, &args, &format!("{url}/v1/events"))
}

/// Limits per principal: a request rate (429 `RATE_LIMITED` with `Retry-After`, one bucket per
/// principal, the operator's commands never limited), event streams per principal, and a
/// backoff after failed authentications from one address, each counted in `/metrics`.
#[test]
fn each_principal_has_its_own_rate_and_streams_and_a_guessing_address_is_backed_off() {
    let _timing = common::shared();
    let dir = tmp("network-limits");
    let creds = dir.join("principals");
    std::fs::create_dir_all(&creds).unwrap();
    let principals = format!(
        "[[principals]]\nname = \"agent-a\"\nrole = \"agent\"\ntoken_file = \"{d}/agent-a.token\"\n\
         [[principals]]\nname = \"agent-b\"\nrole = \"agent\"\ntoken_file = \"{d}/agent-b.token\"\n\
         [[principals]]\nname = \"op\"\nrole = \"operator\"\ntoken_file = \"{d}/op.token\"\n",
        d = creds.display()
    );
    let limits = "requests_per_second_per_principal = 5\nburst_per_principal = 10\n\
                  max_event_streams_per_principal = 2\nmax_mcp_sessions_per_principal = 1\n\
                  auth_failures_before_backoff = 3\n\
                  auth_backoff_max_ms = 4000\n";
    let mut c = Checks::new("network-limits");
    let (code, out) = check_config(
        &dir,
        "zero-rate.toml",
        "[vehicle]\nurl = \"udpin:127.0.0.1:0\"\n[listen]\nrequests_per_second_per_principal = 0\n",
    );
    c.check(
        "a rate of 0 is refused by run --check, naming the key (exit 3)",
        code == 3 && out.contains("listen.requests_per_second_per_principal"),
    );
    let state = dir.join("state");
    let g = Gateway::start_config(
        &dir,
        &state,
        &format!(
            "[vehicle]\nurl = \"udpout:127.0.0.1:9\"\n[listen]\nhttp = \"127.0.0.1:0\"\noperator = \"127.0.0.1:0\"\n{limits}{principals}[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            state.display()
        ),
        &[],
    );
    let u = g.url.clone();
    let [a, b, op] = ["agent-a", "agent-b", "op"].map(|n| token(&creds, n));
    let obligations = format!("{u}/v1/obligations");
    // Rate: a burst of 10, then 5 a second.
    let statuses: Vec<u16> = (0..14).map(|_| get(&obligations, Some(&a)).0).collect();
    let taken = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    println!("  agent A, 14 requests at once: {taken} taken, {limited} refused 429");
    c.check(
        "agent A's burst is taken, the requests past it are 429",
        (10..=11).contains(&taken) && taken + limited == 14,
    );
    let head = curl_head(&obligations, &a);
    println!("  past the rate: {}", head.lines().next().unwrap_or(""));
    c.check(
        "past the rate: 429 RATE_LIMITED with Retry-After (curl)",
        head.starts_with("http/1.1 429")
            && head.contains("retry-after: 1")
            && head.contains("rate_limited"),
    );
    c.check(
        "agent B has its own bucket (200 meanwhile)",
        get(&obligations, Some(&b)).0 == 200,
    );
    let holds: Vec<u16> = (0..15)
        .map(|_| post(&format!("{u}/v1/operator/hold"), Some(&op), b"{}").0)
        .collect();
    println!("  15 operator holds at once: {holds:?}");
    c.check(
        "the operator's commands are never rate limited (15 holds at once, none 429)",
        !holds.contains(&429),
    );
    std::thread::sleep(Duration::from_millis(1100));
    c.check(
        "agent A is taken again after the wait",
        get(&obligations, Some(&a)).0 == 200,
    );
    c.check(
        "/metrics counts agent A's refusals",
        metric(&u, "halo_rate_limited_total{principal=\"agent-a\"} ") >= 4,
    );
    // Streams: two per principal.
    let held: Vec<std::process::Child> = (0..2)
        .map(|_| {
            Command::new("curl")
                .args(["-sS", "-N", "--max-time", "20", "-H"])
                .arg(format!("Authorization: Bearer {a}"))
                .arg(format!("{u}/v1/events"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_until(10, "agent A's two streams", || {
        metric(&u, "halo_event_streams ") == 2
    });
    let third = curl_head(&format!("{u}/v1/events"), &a);
    c.check(
        "agent A's third stream is 429 TOO_MANY_STREAMS naming the principal",
        third.starts_with("http/1.1 429")
            && third.contains("too_many_streams")
            && third.contains("agent-a"),
    );
    c.check(
        "agent B still opens a stream (200)",
        stream_status(&u, &b) == "200",
    );
    c.check(
        "/metrics counts the refused stream under agent A",
        metric(
            &u,
            "halo_event_streams_refused_total{principal=\"agent-a\"} ",
        ) == 1,
    );
    for mut h in held {
        let _ = h.kill();
        let _ = h.wait();
    }
    // MCP sessions: one per principal here.
    let (first, _) = mcp_initialize(&u, &a);
    let (second, _) = mcp_initialize(&u, &a);
    c.check(
        "agent A's second MCP session is 429 TOO_MANY_STREAMS (one per principal); its first was taken",
        first.starts_with("http/1.1 200") && second.starts_with("http/1.1 429"),
    );
    // Agent B's six `initialize` at once race for its one place.
    let racing: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6)
            .map(|_| sc.spawn(|| mcp_initialize(&u, &b).0))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let taken = racing
        .iter()
        .filter(|r| r.starts_with("http/1.1 200"))
        .count();
    let refused = racing
        .iter()
        .filter(|r| r.starts_with("http/1.1 429"))
        .count();
    println!("  agent B's six racing initialize: {taken} taken, {refused} refused");
    c.check("agent B still opens an MCP session (200)", taken >= 1);
    c.check(
        "six racing initialize of agent B: exactly one taken, five 429 (the cap holds under a race)",
        taken == 1 && refused == 5,
    );
    c.check(
        "/metrics counts the refused MCP session under agent A and the two open",
        metric(
            &u,
            "halo_mcp_sessions_refused_total{principal=\"agent-a\"} ",
        ) == 1
            && metric(&u, "halo_mcp_sessions ") >= 1,
    );
    // Backoff: three failures in a row from this address, then even a good credential waits.
    let wrong: Vec<u16> = (0..3)
        .map(|_| get(&obligations, Some("not-a-credential")).0)
        .collect();
    let backed = curl_head(&obligations, &b);
    println!(
        "  after 3 failures {wrong:?}: {}",
        backed.lines().next().unwrap_or("")
    );
    c.check(
        "after 3 failed authentications the address is 429 AUTH_BACKOFF with Retry-After, even with a valid credential",
        wrong == [401, 401, 401]
            && backed.starts_with("http/1.1 429")
            && backed.contains("auth_backoff")
            && backed.contains("retry-after: 1"),
    );
    let (st, _) = get(&format!("{}/v1/status", g.proc.operator_url), Some(&op));
    c.check(
        "the operator's listener keeps a table of its own (200 meanwhile)",
        st == 200,
    );
    std::thread::sleep(Duration::from_millis(1100));
    c.check(
        "after the backoff a valid credential is taken and clears the count",
        get(&obligations, Some(&b)).0 == 200,
    );
    let again: Vec<u16> = (0..3)
        .map(|_| get(&obligations, Some("not-a-credential")).0)
        .collect();
    std::thread::sleep(Duration::from_millis(1100));
    let one_more = get(&obligations, Some("still-not-one")).0;
    let doubled = curl_head(&obligations, &b);
    println!(
        "  after {again:?}, a wait and one more failure ({one_more}): {}",
        doubled
            .lines()
            .find(|l| l.starts_with("retry-after"))
            .unwrap_or("")
    );
    c.check(
        "the count started again after the success, and the next backoff doubles (Retry-After: 2)",
        again == [401, 401, 401] && one_more == 401 && doubled.contains("retry-after: 2"),
    );
    c.check(
        "/metrics counts the failures and the backed-off requests",
        metric(&u, "halo_auth_failures_total ") == 7
            && metric(&u, "halo_auth_backoff_refused_total ") == 2,
    );
    c.check("the gateway stops cleanly", g.stop() == 0);
    c.finish(LIMITS, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The client-certificate suite's checks.
const MTLS: usize = 20;

/// curl over TLS trusting `ca`, with a client certificate when given: (exit code, body,
/// curl's own error text).
fn curl_cert(
    ca: &Path,
    pair: Option<&ClientPair>,
    args: &[&str],
    url: &str,
) -> (i32, String, String) {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10", "--cacert"]).arg(ca);
    if let Some(p) = pair {
        c.arg("--cert").arg(&p.cert).arg("--key").arg(&p.key);
    }
    let out = c.args(args).arg(url).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The HTTP status curl read with `pair`'s certificate (`000`: no HTTP at all).
fn status_with(ca: &Path, pair: Option<&ClientPair>, args: &[&str], url: &str) -> String {
    let mut a = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    a.extend_from_slice(args);
    curl_cert(ca, pair, &a, url).1
}

/// What `openssl s_client -tls1_2` printed presenting `pair` (in TLS 1.2 the server's verdict
/// on a client certificate comes inside the handshake): the alert the server sent, if any.
fn handshake_with(addr: &str, ca: &Path, pair: &ClientPair) -> String {
    s_client(
        addr,
        &[
            "-tls1_2",
            "-CAfile",
            s(ca),
            "-cert",
            s(&pair.cert),
            "-key",
            s(&pair.key),
        ],
    )
}

/// Client certificates as principals (mTLS): a certificate from the configured CA names the
/// principal whose `cert_common_name` is its subject's; one of another CA, out of date or with
/// a revoked serial ends the handshake, each with its own alert as `openssl s_client` reads
/// it; a serial revoked by SIGHUP closes that certificate's open stream and refuses the next
/// request of a connection opened before, and the reissued certificate is taken.
#[test]
fn client_certificates_name_principals_and_a_foreign_expired_or_revoked_one_is_refused() {
    let _timing = common::shared();
    let dir = tmp("network-mtls");
    let pki = make_pki(&dir);
    let creds = dir.join("principals");
    std::fs::create_dir_all(&creds).unwrap();
    let revoked = creds.join("revoked");
    let agent = client_cert(&dir, "ca", "agent-m", "agent-m", false);
    let reissued = client_cert(&dir, "ca", "agent-m", "agent-m-2", false);
    let stranger = client_cert(&dir, "ca", "stranger", "stranger", false);
    let foreign = client_cert(&dir, "other-ca", "agent-m", "foreign", false);
    let expired = client_cert(&dir, "ca", "agent-m", "expired", true);
    let op_cert = client_cert(&dir, "ca", "op-m", "op-m", false);
    let principals = format!(
        "[[principals]]\nname = \"agent-m\"\nrole = \"agent\"\ncert_common_name = \"agent-m\"\n\
         [[principals]]\nname = \"op-m\"\nrole = \"operator\"\ncert_common_name = \"op-m\"\n\
         [[principals]]\nname = \"op\"\nrole = \"operator\"\ntoken_file = \"{}/op.token\"\n",
        creds.display()
    );
    let tls = format!(
        "{}client_ca_file = \"{}\"\n",
        tls_section(&pki.cert, &pki.key),
        pki.ca.display()
    );
    let mut c = Checks::new("network-mtls");
    let v = "[vehicle]\nurl = \"udpin:127.0.0.1:0\"\n";
    let (code, out) = check_config(
        &dir,
        "no-client-ca.toml",
        &format!("{v}{}{principals}", tls_section(&pki.cert, &pki.key)),
    );
    c.check(
        "a certificate principal without listen.tls.client_ca_file is refused (exit 3)",
        code == 3 && out.contains("client_ca_file"),
    );
    let (code, out) = check_config(
        &dir,
        "two-credentials.toml",
        &format!(
            "{v}{tls}{}",
            principals.replace(
                "cert_common_name = \"agent-m\"\n",
                "cert_common_name = \"agent-m\"\ntoken_file = \"/tmp/x.token\"\n"
            )
        ),
    );
    c.check(
        "a principal with a token file and a certificate name is refused",
        code == 3 && out.contains("exactly one credential"),
    );
    let (code, out) = check_config(&dir, "mtls.toml", &format!("{v}{tls}{principals}"));
    c.check(
        "run --check says whose client certificates are taken",
        code == 0 && out.contains(&format!("client certificates of {}", pki.ca.display())),
    );

    let state = dir.join("state");
    let g = Gateway::start_config(
        &dir,
        &state,
        &format!(
            "[vehicle]\nurl = \"sim\"\n[listen]\nhttp = \"127.0.0.1:0\"\n{tls}[auth]\nrevoked_file = \"{}\"\n{principals}[state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            revoked.display(),
            state.display()
        ),
        &[],
    );
    let u = g.url.clone();
    let addr = host_port(&u);
    let op = token(&creds, "op");
    let obligations = format!("{u}/v1/obligations");
    c.check(
        "agent-m's certificate, no bearer credential: its agent routes are taken (200)",
        status_with(&pki.ca, Some(&agent), &[], &obligations) == "200",
    );
    let (_, body, _) = curl_cert(
        &pki.ca,
        Some(&agent),
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
            "{}",
        ],
        &format!("{u}/v1/operator/hold"),
    );
    c.check(
        "the certificate gives agent-m its role and no other: an operator command is 403",
        body.contains("FORBIDDEN_ROLE"),
    );
    c.check(
        "no certificate and no credential: the handshake is taken, the request is 401",
        status_with(&pki.ca, None, &[], &obligations) == "401",
    );
    c.check(
        "the operator's bearer credential is taken on the same listener (200)",
        status_with(
            &pki.ca,
            None,
            &["-H", &format!("Authorization: Bearer {op}")],
            &format!("{u}/v1/status"),
        ) == "200",
    );
    // The operator's command line with a certificate of its own and no token file.
    let with_cert = |action: &str, pair: &ClientPair, url: &str| {
        halo(&[
            "operator",
            action,
            "--url",
            url,
            "--cacert",
            s(&pki.ca),
            "--cert",
            s(&pair.cert),
            "--key",
            s(&pair.key),
            "--state-dir",
            s(&dir.join("no-such-state")),
        ])
    };
    let (code, out) = with_cert("hold", &op_cert, &u);
    let (rcode, rout) = with_cert("release", &op_cert, &u);
    println!("  operator hold --cert op-m: {}", out.trim());
    c.check(
        "halo-gateway operator hold/release --cert --key: op-m's certificate is its credential, no token file read (exit 0)",
        code == 0 && out.contains("the vehicle holds") && rcode == 0 && rout.contains("release"),
    );
    let (code, out) = with_cert("hold", &agent, &u);
    c.check(
        "the command line presents the certificate it is given: agent-m's is refused the operator's command (403 FORBIDDEN_ROLE)",
        code != 0 && out.contains("FORBIDDEN_ROLE"),
    );
    let (code, out) = with_cert("status", &op_cert, &u.replace("https://", "http://"));
    c.check(
        "--cert with an http:// URL is refused before anything is sent, saying mTLS needs https://",
        code != 0 && out.contains("go with an https:// URL"),
    );
    let (_, body, _) = curl_cert(&pki.ca, Some(&stranger), &[], &obligations);
    c.check(
        "a certificate of the CA naming no principal is 401 UNAUTHENTICATED, saying its common name",
        body.contains("UNAUTHENTICATED") && body.contains("(stranger)"),
    );
    // The handshake's verdicts, as OpenSSL's client reads them.
    let good = handshake_with(&addr, &pki.ca, &agent);
    c.check(
        "the judge's control: agent-m's certificate completes a TLS 1.2 handshake with no alert",
        good.contains("Protocol version: TLSv1.2") && !good.contains("alert"),
    );
    let f = handshake_with(&addr, &pki.ca, &foreign);
    println!(
        "  another CA's certificate: {}",
        f.lines().find(|l| l.contains("alert")).unwrap_or("")
    );
    c.check(
        "a certificate of another CA ends the handshake: alert unknown ca (48)",
        f.contains("alert number 48") && !f.contains("Protocol version:"),
    );
    let e = handshake_with(&addr, &pki.ca, &expired);
    println!(
        "  an expired certificate: {}",
        e.lines().find(|l| l.contains("alert")).unwrap_or("")
    );
    c.check(
        "an expired certificate ends the handshake: alert certificate expired (45)",
        e.contains("alert number 45") && !e.contains("Protocol version:"),
    );
    // Revocation by serial during a stream, with a connection opened before it.
    let mut stream = Command::new("curl")
        .args(["-sS", "-N", "--max-time", "30", "--cacert"])
        .arg(&pki.ca)
        .arg("--cert")
        .arg(&agent.cert)
        .arg("--key")
        .arg(&agent.key)
        .arg(format!("{u}/v1/events"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut kept = kept_alive_client(&pki.ca, &agent, &addr);
    let first = kept.next();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(
        &revoked,
        format!("# agent-m's laptop was lost\n{}\n", agent.serial_line),
    )
    .unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &g.proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_until(10, "the credential reload", || {
        let (_, m, _) = curl_cert(&pki.ca, None, &[], &format!("{u}/metrics"));
        m.contains("halo_credential_reloads_total{code=\"ok\"} 1")
    });
    let closed = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        stream.try_wait().unwrap().is_some()
    });
    if !closed {
        let _ = stream.kill();
    }
    let _ = stream.wait();
    c.check(
        "the revoked certificate's open event stream is closed",
        closed,
    );
    let second = kept.next();
    println!("  a connection opened before the revocation: {first} then {second}");
    c.check(
        "a connection opened before the revocation: 200, then 401 CREDENTIAL_REVOKED at its next request (Python http.client)",
        first.starts_with("200") && second.starts_with("401") && second.contains("CREDENTIAL_REVOKED"),
    );
    let r = handshake_with(&addr, &pki.ca, &agent);
    println!(
        "  the revoked certificate: {}",
        r.lines().find(|l| l.contains("alert")).unwrap_or("")
    );
    c.check(
        "a new handshake with the revoked certificate ends: alert certificate revoked (44)",
        r.contains("alert number 44") && !r.contains("Protocol version:"),
    );
    c.check(
        "agent-m's reissued certificate (a new serial) is taken without a restart (200)",
        status_with(&pki.ca, Some(&reissued), &[], &obligations) == "200",
    );
    let (_, m, _) = curl_cert(&pki.ca, None, &[], &format!("{u}/metrics"));
    c.check(
        "/metrics counts the refused handshakes (another CA, expired, revoked)",
        m.lines()
            .find_map(|l| l.strip_prefix("halo_tls_handshake_failures_total "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n >= 3),
    );
    drop(kept);
    c.check("the gateway stops cleanly", g.stop() == 0);
    c.finish(MTLS, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python `http.client` connection with `pair`'s certificate that stays open: each
/// [`KeptAlive::next`] sends one more `GET /v1/obligations` on it and reads `status body`.
struct KeptAlive {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

fn kept_alive_client(ca: &Path, pair: &ClientPair, addr: &str) -> KeptAlive {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let script = format!(
        "import http.client, ssl, sys\n\
         ctx = ssl.create_default_context(cafile={ca:?})\n\
         ctx.load_cert_chain({cert:?}, {key:?})\n\
         conn = http.client.HTTPSConnection({host:?}, {port}, context=ctx, timeout=10)\n\
         for _ in sys.stdin:\n\
         \x20   conn.request('GET', '/v1/obligations')\n\
         \x20   r = conn.getresponse()\n\
         \x20   print(r.status, r.read().decode().replace('\\n', ' '), flush=True)\n",
        ca = s(ca),
        cert = s(&pair.cert),
        key = s(&pair.key),
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3");
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    KeptAlive { child, out }
}

impl KeptAlive {
    fn next(&mut self) -> String {
        use std::io::{BufRead as _, Write as _};
        let Some(stdin) = self.child.stdin.as_mut() else {
            return String::new();
        };
        if stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return String::new();
        }
        let mut line = String::new();
        let _ = self.out.read_line(&mut line);
        line.trim().to_string()
    }
}

impl Drop for KeptAlive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
