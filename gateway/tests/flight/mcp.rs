//! The MCP server with two real clients: `rmcp`'s own client in Rust, and the official Python
//! `mcp` SDK's client (`tests/py/mcp_peer.py`, an independent peer), each over streamable HTTP
//! (`/mcp`, the agent credential) and over stdio (the client spawns `halo-gateway run --mcp
//! stdio`). Each lists the tools, flies through the gate, gets a withheld action's obligation
//! as a notification and answers it with a fresh candidate that flies; the Python peer also
//! tries the obvious escapes. The evidence that something flew is the simulated vehicle's own
//! setpoint log, never the gateway's answer. Prints `mcp: N/M matched`.
#![allow(
    deprecated,
    reason = "MCP logging notifications are the protocol 2025-11-25 the server speaks"
)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, JsonObject, LoggingMessageNotificationParam};
use rmcp::service::{NotificationContext, RoleClient};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use crate::common::service::*;
use crate::common::{BIN, exclusive};

/// The Rust peer's notifications.
#[derive(Clone, Default)]
struct Notes(Arc<Mutex<Vec<Value>>>);

impl ClientHandler for Notes {
    async fn on_logging_message(
        &self,
        p: LoggingMessageNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(p.data);
    }
}

struct Checks(Vec<(String, bool)>);

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) {
        if !ok {
            eprintln!("mcp: not matched: {name}: {detail}");
        }
        self.0.push((name.to_string(), ok));
    }
}

/// The certifier the tests play: the digest from `POST /v1/digest`, a certificate with the
/// provider credential.
fn certified_route(
    url: &str,
    provider: &str,
    id: &str,
    t: [f64; 4],
    support: &Value,
    cert: &str,
) -> Value {
    let c = json!({"id": id, "type": "route_action",
        "payload": {"frame": "local_ned", "north_m": t[0], "east_m": t[1], "down_m": t[2], "yaw_deg": t[3], "duration_s": 8.0},
        "support": support, "certificate": cert});
    let (st, v) = post(
        &format!("{url}/v1/digest"),
        Some(provider),
        json!({"component": c}).to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    let digest = v["components"][0]["digest"].as_str().unwrap().to_string();
    let (st, v) = post(
        &format!("{url}/v1/certificates"),
        Some(provider),
        json!({"id": cert, "covers": digest, "valid_for_ms": 60000, "issuer": "rmcp-peer"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
    c
}

fn claims(status: &Value) -> Value {
    let by = |n: &str| {
        status["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == n)
            .unwrap()
            .clone()
    };
    json!({"map": {"epoch": by("map")["epoch"]}, "traffic": {"epoch": by("traffic")["epoch"]},
           "bounds": {"epoch": by("bounds")["epoch"], "provenance": by("bounds")["provenance"]}})
}

fn args(v: Value) -> JsonObject {
    serde_json::from_value(v).unwrap()
}

/// The Rust peer's flight: returns the targets the vehicle must take.
async fn rust_flow(
    client: &rmcp::service::RunningService<RoleClient, Notes>,
    notes: &Notes,
    url: &str,
    provider_token: impl Fn() -> String,
    tag: &str,
    auto: bool,
    c: &mut Checks,
) -> Vec<[f64; 4]> {
    // `auto`: the gateway's reference certifier certifies (no `certificate` in the call);
    // otherwise the test certifies as an external certifier would.
    let route_args = |r: &Value| {
        if auto {
            json!({"id": r["id"], "payload": r["payload"], "support": r["support"]})
        } else {
            json!({"id": r["id"], "payload": r["payload"], "support": r["support"], "certificate": r["certificate"]})
        }
    };
    let certified = |id: &str, t: [f64; 4], support: &Value, cert: &str| {
        if auto {
            json!({"id": id, "type": "route_action",
                "payload": {"frame": "local_ned", "north_m": t[0], "east_m": t[1], "down_m": t[2], "yaw_deg": t[3], "duration_s": 8.0},
                "support": support})
        } else {
            certified_route(url, &provider_token(), id, t, support, cert)
        }
    };
    let call = |name: &str, a: Value| {
        let p = CallToolRequestParams::new(name.to_string()).with_arguments(args(a));
        async move { client.call_tool(p).await.unwrap() }
    };
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    c.check(
        "rmcp: tools listed",
        [
            "route_action",
            "submit_candidate",
            "obligations",
            "vehicle_status",
            "explain",
        ]
        .iter()
        .all(|n| names.iter().any(|x| x == n))
            && !names.iter().any(|n| n.contains("arm")),
        format!("{names:?}"),
    );
    // Wait for the operator to hand the gateway a flying vehicle.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut status = Value::Null;
    while Instant::now() < deadline {
        status = call("vehicle_status", json!({}))
            .await
            .structured_content
            .unwrap_or_default();
        let v = &status["vehicle"];
        if v["control"] == "gateway"
            && v["landed_state"] == "in air"
            && v["mode"] == "AUTO.LOITER"
            && status["sources"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|x| x["source"] == "map" && x["epoch"].is_u64())
            })
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    c.check(
        "rmcp: vehicle handed over",
        status["vehicle"]["control"] == "gateway",
        &status,
    );
    let support = claims(&status);
    let t1 = [10.0, -2.0, -9.0, 45.0];
    let r = certified("a1", t1, &support, &format!("cert-rs-{tag}-1"));
    let res = call("route_action", route_args(&r)).await;
    let s = res.structured_content.clone().unwrap_or_default();
    c.check(
        "rmcp: route action dispatched",
        s["components"][0]["phase"] == "dispatched",
        &s,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Planned against an old map epoch: withheld, with an obligation and its notification.
    let mut stale = support.clone();
    stale["map"]["epoch"] = json!(support["map"]["epoch"].as_u64().unwrap() - 1);
    let t2 = [14.0, 2.0, -9.0, 0.0];
    let r = certified("a2", t2, &stale, &format!("cert-rs-{tag}-2"));
    let res = call("route_action", route_args(&r)).await;
    let s = res.structured_content.clone().unwrap_or_default();
    let ob = s["components"][0]["obligation"].clone();
    c.check(
        "rmcp: stale plan withheld with an obligation",
        s["components"][0]["phase"] == "withheld"
            && s["components"][0]["reason"] == "EPOCH_CHANGED"
            && ob["open"] == true
            && ob["refresh"] == json!(["map"]),
        &s,
    );
    let oid = ob["id"].as_u64().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let heard = || {
        notes
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|n| n["event"] == "obligation_created" && n["data"]["id"] == oid)
    };
    while !heard() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.check(
        "rmcp: obligation notified",
        heard(),
        format!("{:?}", notes.0.lock().unwrap()),
    );
    let status = call("vehicle_status", json!({}))
        .await
        .structured_content
        .unwrap_or_default();
    let fresh = certified("a2", t2, &claims(&status), &format!("cert-rs-{tag}-3"));
    let res = call(
        "submit_candidate",
        json!({"obligation": oid, "components": [fresh]}),
    )
    .await;
    let s = res.structured_content.clone().unwrap_or_default();
    c.check(
        "rmcp: fresh candidate dispatched",
        s["components"][0]["phase"] == "dispatched",
        &s,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    vec![t1, t2]
}

/// The Python peer's lines: its checks and the targets it flew.
fn python_peer(args: &[String], c: &mut Checks, who: &str) -> Vec<[f64; 4]> {
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/mcp_peer.py"))
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("python3 with the mcp SDK (scripts/test.sh installs it into target/pyenv)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut targets = Vec::new();
    let mut done = false;
    for l in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        if let Some(name) = v["check"].as_str() {
            c.check(&format!("{who}: {name}"), v["ok"] == true, &v);
        } else if let Some(t) = v["target"].as_array() {
            let t: Vec<f64> = t.iter().filter_map(Value::as_f64).collect();
            targets.push([t[0], t[1], t[2], t[3]]);
        } else if v["done"] == true {
            done = true;
        }
    }
    c.check(&format!("{who}: ran to the end"), done, &text);
    targets
}

fn flew(sim: &Sim, targets: &[[f64; 4]], after_ns: u64, c: &mut Checks, who: &str) {
    for t in targets {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the simulator's f32 fingerprint"
        )]
        let f = fp(t[0] as f32, t[1] as f32, t[2] as f32, t[3] as f32);
        c.check(
            &format!("{who}: the vehicle took {t:?}"),
            sim.taken_after(&f, after_ns) > 0,
            format!("{:?}", sim.fingerprints().last()),
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A configuration for a gateway an MCP client spawns: a fixed port (the client owns the
/// process; the test reaches its HTTP side there) on the simulator at `sim`.
fn stdio_config(dir: &std::path::Path, sim: &Sim, port: u16) -> std::path::PathBuf {
    let cfg = dir.join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[vehicle]\nurl = \"udpout:{}\"\n[listen]\nhttp = \"127.0.0.1:{port}\"\noperator = \"127.0.0.1:0\"\n\
             [state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
            sim.addr,
            dir.join("state").display()
        ),
    )
    .unwrap();
    cfg
}

/// The operator's side for a gateway an MCP client spawned: wait for its listener, publish the
/// providers' sources, arm and take off. Returns the providers (they publish until dropped).
fn operate(url: String, state: std::path::PathBuf, sim: &Sim) -> Providers {
    let addr = url.trim_start_matches("http://").to_string();
    wait_until(60, "the spawned gateway's listener", || {
        std::net::TcpStream::connect(&addr).is_ok()
            && get(&format!("{url}/v1/status"), None).0 == 200
            && state.join("credentials/operator.token").exists()
    });
    let read = |r: &str| {
        std::fs::read_to_string(state.join(format!("credentials/{r}.token")))
            .unwrap()
            .trim()
            .to_string()
    };
    let providers = Providers::start(&url, &read("provider"));
    take_off_at(&url, &read("operator"), sim);
    providers
}

#[test]
fn mcp_peers_fly_through_the_gate() {
    let _x = exclusive();
    let mut c = Checks(Vec::new());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // Streamable HTTP: one gateway, both peers.
    {
        let dir = tmp("mcp-http");
        let g = Gateway::start(&dir, "sim", "[certifier]\nenabled = true\n");
        let sim = g.own_sim.as_ref().unwrap();
        let _providers = Providers::start(&g.url, &g.provider);
        take_off(&g, sim);
        let mcp_url = format!("{}/mcp", g.url);
        // Without the agent credential: 401 before any MCP is spoken; the provider's: 403.
        let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        let (st, v) = post(&mcp_url, None, init);
        c.check("http: no credential is 401", st == 401, &v);
        let (st, v) = post(&mcp_url, Some(&g.provider), init);
        c.check(
            "http: the provider credential is 403",
            st == 403 && v["error"]["code"] == "FORBIDDEN_ROLE",
            &v,
        );
        let t0 = sim.now_ns();
        let notes = Notes::default();
        let targets = rt.block_on(async {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    mcp_url.clone(),
                )
                .auth_header(g.agent.clone()),
            );
            let client = notes.clone().serve(transport).await.unwrap();
            let provider = g.provider.clone();
            let t = rust_flow(
                &client,
                &notes,
                &g.url,
                || provider.clone(),
                "http",
                true,
                &mut c,
            )
            .await;
            let _ = client.cancel().await;
            t
        });
        flew(sim, &targets, t0, &mut c, "rmcp over http");
        let t0 = sim.now_ns();
        let targets = python_peer(
            &[
                "--http".into(),
                mcp_url,
                "--token".into(),
                g.agent.clone(),
                "--gateway".into(),
                g.url.clone(),
                "--state".into(),
                g.state.display().to_string(),
                "--tag".into(),
                "http".into(),
            ],
            &mut c,
            "python over http",
        );
        flew(sim, &targets, t0, &mut c, "python over http");
        // Obligations on the HTTP API: snake case, a `kind` tag, Unix milliseconds, a filter.
        let (st, all) = get(
            &format!("{}/v1/obligations?state=all", g.url),
            Some(&g.agent),
        );
        let now = unix_ms();
        let shaped = all.as_array().is_some_and(|a| {
            a.len() >= 2
                && a.iter().all(|o| {
                    o["discharge"]["kind"] == "fresh_candidate"
                        && o["state"]
                            .as_str()
                            .is_some_and(|s| s == s.to_ascii_lowercase())
                        && o["created_at_unix_ms"]
                            .as_u64()
                            .is_some_and(|t| t <= now && t + 600_000 > now)
                        && o["expires_at_unix_ms"].as_u64() > o["created_at_unix_ms"].as_u64()
                })
        });
        c.check(
            "http: obligations in snake case with Unix milliseconds",
            st == 200 && shaped,
            &all,
        );
        let (st, open) = get(
            &format!("{}/v1/obligations?state=open", g.url),
            Some(&g.agent),
        );
        let expected: Vec<&Value> = all
            .as_array()
            .map(|a| a.iter().filter(|o| o["open"] == true).collect())
            .unwrap_or_default();
        c.check(
            "http: ?state=open keeps the open ones",
            st == 200 && open.as_array().map(|a| a.iter().collect::<Vec<_>>()) == Some(expected),
            &open,
        );
        let (st, v) = get(
            &format!("{}/v1/obligations?state=maybe", g.url),
            Some(&g.agent),
        );
        c.check(
            "http: an unknown filter is INVALID_REQUEST",
            st == 400 && v["error"]["code"] == "INVALID_REQUEST",
            &v,
        );
        // The reference certifier refuses what its tube check does not pass, with the rule's code.
        let status = get(&format!("{}/v1/status", g.url), None).1;
        let support = claims(&status);
        let ask = |t: [f64; 4], dur: f64, cert: &str| {
            let comp = json!({"id": "q", "type": "route_action",
                "payload": {"frame": "local_ned", "north_m": t[0], "east_m": t[1], "down_m": t[2], "yaw_deg": t[3], "duration_s": dur},
                "support": support, "certificate": cert});
            post(
                &format!("{}/v1/certify", g.url),
                Some(&g.agent),
                json!({ "component": comp }).to_string().as_bytes(),
            )
        };
        let (st, v) = ask([200.0, 0.0, -10.0, 0.0], 8.0, "q-1");
        c.check(
            "certifier: a target outside the corridor is OUT_OF_BOUNDS",
            st == 422 && v["error"]["code"] == "OUT_OF_BOUNDS",
            &v,
        );
        // The intruder at (300, -200, -40) m: 251 m from this target, within 30 m of
        // separation plus 20 s at 15 m/s.
        let (st, v) = ask([99.0, -49.0, -40.0, 0.0], 20.0, "q-2");
        c.check(
            "certifier: an intruder's reach is SEPARATION_LOST",
            st == 422 && v["error"]["code"] == "SEPARATION_LOST",
            &v,
        );
        let (st, v) = ask([99.0, -49.0, -40.0, 0.0], 8.0, "q-3");
        c.check(
            "certifier: the same target over 8 s is certified",
            st == 200
                && v["certificate"] == "q-3"
                && v["covers"].as_str().is_some_and(|d| d.len() == 64),
            &v,
        );
        g.stop();
    }

    // stdio, the rmcp client spawning the gateway.
    {
        let dir = tmp("mcp-stdio-rs");
        let sim = Sim::start(&dir.join("vehicle.jsonl"));
        let port = free_port();
        let cfg = stdio_config(&dir, &sim, port);
        let url = format!("http://127.0.0.1:{port}");
        let state = dir.join("state");
        let t0 = sim.now_ns();
        let notes = Notes::default();
        let targets = std::thread::scope(|s| {
            let (u, st) = (url.clone(), state.clone());
            let sim_ref = &sim;
            let operator = s.spawn(move || operate(u, st, sim_ref));
            let targets = rt.block_on(async {
                let mut cmd = tokio::process::Command::new(BIN);
                cmd.args(["run", "--mcp", "stdio", "--config"]).arg(&cfg);
                let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
                let client = notes.clone().serve(transport).await.unwrap();
                let st = state.clone();
                let provider = move || {
                    std::fs::read_to_string(st.join("credentials/provider.token"))
                        .unwrap()
                        .trim()
                        .to_string()
                };
                let t = rust_flow(&client, &notes, &url, provider, "stdio", false, &mut c).await;
                // This gateway's reference certifier is off (the default).
                let agent = std::fs::read_to_string(state.join("credentials/agent.token")).unwrap();
                let (st, v) = post(
                    &format!("{url}/v1/certify"),
                    Some(agent.trim()),
                    br#"{"component": {"id": "q", "type": "notice", "payload": {"text": "x"}}}"#,
                );
                c.check(
                    "certifier: off by default, CERTIFIER_DISABLED",
                    st == 409 && v["error"]["code"] == "CERTIFIER_DISABLED",
                    &v,
                );
                let _ = client.cancel().await;
                t
            });
            drop(operator.join().unwrap());
            targets
        });
        flew(&sim, &targets, t0, &mut c, "rmcp over stdio");
    }

    // stdio, the Python SDK spawning the gateway.
    {
        let dir = tmp("mcp-stdio-py");
        let sim = Sim::start(&dir.join("vehicle.jsonl"));
        let port = free_port();
        let cfg = stdio_config(&dir, &sim, port);
        let url = format!("http://127.0.0.1:{port}");
        let state = dir.join("state");
        let t0 = sim.now_ns();
        let targets = std::thread::scope(|s| {
            let (u, st) = (url.clone(), state.clone());
            let sim_ref = &sim;
            let operator = s.spawn(move || operate(u, st, sim_ref));
            let t = python_peer(
                &[
                    "--gateway".into(),
                    url.clone(),
                    "--state".into(),
                    state.display().to_string(),
                    "--tag".into(),
                    "stdio".into(),
                    "--stdio".into(),
                    BIN.into(),
                    "run".into(),
                    "--mcp".into(),
                    "stdio".into(),
                    "--config".into(),
                    cfg.display().to_string(),
                ],
                &mut c,
                "python over stdio",
            );
            drop(operator.join().unwrap());
            t
        });
        flew(&sim, &targets, t0, &mut c, "python over stdio");
    }

    let matched = c.0.iter().filter(|(_, ok)| *ok).count();
    println!("mcp: {matched}/{} matched", c.0.len());
    assert_eq!(
        (matched, c.0.len()),
        (EXPECTED, EXPECTED),
        "not matched: {:?}",
        c.0.iter().filter(|(_, ok)| !ok).collect::<Vec<_>>()
    );
}

/// The suite's checks: the HTTP credential checks (2), the rmcp peer's 6 checks and 2 flown
/// targets on each transport (16; over HTTP the gateway's reference certifier certifies), the
/// Python peer's 18 checks, its end line and 2 flown targets on each transport (42), the
/// reference certifier's refusals, a pass, and its default off (4), the obligations' shape and
/// filter on the HTTP API (3).
const EXPECTED: usize = 2 + 16 + 42 + 4 + 3;
