//! `halo-gateway run` under load, measured from outside (run through `scripts/bench_load.sh`;
//! never a test).
//!
//! `bench_load SECONDS BINARY [done_retention_ms]`: spawns `BINARY run` against the simulated
//! PX4 (in this process, on its own UDP socket, recording every setpoint that reaches it),
//! takes off, and keeps one certified target streaming for the whole run. Then, for SECONDS:
//! four agent threads post 32-component bundles (6 route actions, 10 notices, 16 statuses with
//! 200 prerequisites) as fast as the gateway accepts them (a 429 is counted and retried after
//! 1 ms), while a provider thread publishes all eight provider sources at 50 Hz. Reported:
//! bundles accepted / refused (429) / lost (anything else), the latency of accepted bundles
//! (POST to answer), the gateway's resident memory and input-queue depth each second, the
//! gaps between setpoints at the vehicle, and the receipt log's bytes per second and per
//! accepted bundle. The principals' request rate (`listen.requests_per_second_per_principal`)
//! is set out of the way: this measures admission, not the limit.
//!
//! The route actions in the bundles carry no certificate (the agent-shaped load without moving
//! the vehicle off its target): each is invalidated at admission (`CERTIFICATE_MISSING` is
//! terminal in the shipped catalog) and its dependents with it, so a bundle settles at once and
//! costs admission, closure and receipts; its notices are emitted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::cast_precision_loss,
    reason = "a measurement program: a failure stops it loudly"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The one client of the service's API ([`sitl::client`]).
fn http() -> ureq::Agent {
    sitl::client::agent(Some(Duration::from_secs(30)))
}

fn post_raw(a: &ureq::Agent, url: &str, token: &str, body: &[u8]) -> Option<(u16, Value)> {
    sitl::client::request(a, "POST", url, Some(token), Some(body)).ok()
}

fn post(a: &ureq::Agent, url: &str, token: &str, body: &Value) -> (u16, Value) {
    post_raw(a, url, token, body.to_string().as_bytes()).unwrap()
}

fn get(a: &ureq::Agent, url: &str) -> Value {
    sitl::client::request(a, "GET", url, None, None).unwrap().1
}

/// A 32-component agent bundle named `rid`.
fn bundle(rid: &str, generation: u64) -> String {
    let claims = json!({"map": {"epoch": 7}, "traffic": {"epoch": 41},
                        "bounds": {"epoch": 3, "provenance": "corridor-12"}});
    let mut comps: Vec<Value> = Vec::new();
    for k in 0..6 {
        comps.push(json!({"id": format!("a{k}"), "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": 20.0 + k as f64, "east_m": 3.5 + k as f64,
                        "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 6.0},
            "support": claims}));
    }
    for k in 0..10 {
        comps.push(json!({"id": format!("n{k}"), "type": "notice",
                          "payload": {"text": format!("Survey leg {k} starts")}}));
    }
    let parents: Vec<(String, &str)> = (0..6)
        .map(|k| (format!("a{k}"), "dispatched"))
        .chain((0..10).map(|k| (format!("n{k}"), "emitted")))
        .collect();
    for s in 0..16 {
        let want = if s < 8 { 13 } else { 12 };
        let req: Vec<Value> = (0..want)
            .map(|j| {
                let (id, phase) = &parents[(s + j) % parents.len()];
                json!({"id": id, "phase": phase})
            })
            .collect();
        comps.push(json!({"id": format!("s{s}"), "type": "status",
                          "payload": {"text": format!("status {s}")}, "requires": req}));
    }
    json!({"response_id": rid, "agent_id": "load", "generation": generation,
           "catalog": {"id": "uav-px4", "version": 6}, "components": comps})
    .to_string()
}

struct Sim {
    control: sitl::sim::udp::SimControl,
    origin: Instant,
    addr: std::net::SocketAddr,
    _stop: tokio::sync::broadcast::Sender<()>,
}

fn start_sim(rt: &tokio::runtime::Runtime) -> Sim {
    let (stop, _) = tokio::sync::broadcast::channel(1);
    let control = sitl::sim::udp::SimControl::default();
    let sock = rt
        .block_on(sitl::sim::udp::bind("127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let addr = sock.local_addr().unwrap();
    let origin = Instant::now();
    let opts = sitl::sim::udp::UdpOptions {
        bind: addr,
        remote: None,
        config: sitl::sim::px4::SimConfig {
            drain_flying: 0.05,
            record_arrivals: true,
            ..sitl::sim::px4::SimConfig::default()
        },
        setpoint_log: None,
        seed: 9,
        gcs: None,
        signing_key: None,
    };
    rt.spawn(sitl::sim::udp::run_with_origin(
        sock,
        opts,
        control.clone(),
        stop.subscribe(),
        origin,
    ));
    Sim {
        control,
        origin,
        addr,
        _stop: stop,
    }
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn metric(a: &ureq::Agent, url: &str, name: &str) -> f64 {
    let text = a
        .get(format!("{url}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "an index"
    )]
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The receipt log's bytes by record kind (each line's length, newline included), largest
/// first: every segment still on disk, so the warm-up's receipts are in it too.
fn bytes_by_kind(dir: &std::path::Path) -> Vec<(String, u64, u64)> {
    let mut kinds: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for e in entries.filter_map(Result::ok) {
        if e.path().extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for line in text.lines() {
            let kind = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["body"]["kind"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "(other)".to_owned());
            let k = kinds.entry(kind).or_default();
            k.0 += 1;
            k.1 += line.len() as u64 + 1;
        }
    }
    let mut v: Vec<_> = kinds.into_iter().map(|(k, (n, b))| (k, n, b)).collect();
    v.sort_by_key(|k| std::cmp::Reverse(k.2));
    v
}

fn run(seconds: u64, binary: &str, retention_ms: Option<u64>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = start_sim(&rt);
    let dir = std::env::temp_dir().join(format!(
        "halo-bench-load-{}-{}",
        std::process::id(),
        retention_ms.unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let limits = retention_ms.map_or(String::new(), |r| {
        format!("[limits]\ndone_retention_ms = {r}\n")
    });
    let cfg = format!(
        "[vehicle]\nurl = \"udpout:{}\"\n[listen]\nhttp = \"127.0.0.1:0\"\nrequests_per_second_per_principal = 1000000\nburst_per_principal = 1000000\n[state]\ndir = \"{}\"\n[log]\nlevel = \"error\"\n{limits}",
        sim.addr,
        dir.join("state").display()
    );
    std::fs::write(dir.join("gateway.toml"), cfg).unwrap();
    let mut child = std::process::Command::new(binary)
        .args(["run", "--config"])
        .arg(dir.join("gateway.toml"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(out));
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split("listening on ").nth(1).map(str::to_string))
        .unwrap();
    std::thread::spawn(move || for _ in lines {});
    let token = |r: &str| {
        std::fs::read_to_string(dir.join(format!("state/credentials/{r}.token")))
            .unwrap()
            .trim()
            .to_string()
    };
    let (agent, provider, operator) = (token("agent"), token("provider"), token("operator"));
    let a = http();
    // Take off.
    let deadline = Instant::now() + Duration::from_secs(30);
    while post(&a, &format!("{url}/v1/operator/arm"), &operator, &json!({})).0 != 200 {
        assert!(Instant::now() < deadline, "no arming");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (st, v) = post(
        &a,
        &format!("{url}/v1/operator/takeoff"),
        &operator,
        &json!({"altitude_m": 5.0}),
    );
    assert_eq!(st, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(40);
    while !(sim.control.view().height_m > 4.8
        && get(&a, &format!("{url}/v1/status"))["vehicle"]["mode"] == "AUTO.LOITER")
    {
        assert!(Instant::now() < deadline, "no takeoff");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Providers at 50 Hz.
    let stop = Arc::new(AtomicBool::new(false));
    let feed = {
        let (url, token, stop) = (url.clone(), provider.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let a = http();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let at = halo_gateway::service::infra::clock::wall_now_ms();
                for (source, body) in sitl::sim::world::provider_updates(7, at) {
                    let _ = post_raw(
                        &a,
                        &format!("{url}/v1/state/{source}"),
                        &token,
                        body.to_string().as_bytes(),
                    );
                }
                std::thread::sleep(Duration::from_millis(20).saturating_sub(t0.elapsed()));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // One target streaming for the whole run.
    let cat = halo_gateway::service::Config::default().catalog().unwrap();
    let target = json!({"response_id": "stream", "agent_id": "load", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "t", "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": 8.0, "east_m": 2.0, "down_m": -10.0, "yaw_deg": 0.0,
                        "duration_s": (seconds + 20) as f64},
            "support": {"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}},
            "certificate": "cert-stream"}]});
    let digest = {
        let text = target.to_string();
        let raw = halo_core::envelope::parse_envelope(text.as_bytes()).unwrap();
        let v = halo_core::graph::validate(&cat, &raw).unwrap();
        v.graph.components()[0].digest.to_hex()
    };
    let (st, v) = post(
        &a,
        &format!("{url}/v1/certificates"),
        &provider,
        &json!({"id": "cert-stream", "covers": digest, "valid_for_ms": (seconds + 60) * 1000, "issuer": "tube-verifier"}),
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = post(&a, &format!("{url}/v1/responses"), &agent, &target);
    assert_eq!(v["components"][0]["phase"], "dispatched", "{st} {v}");
    std::thread::sleep(Duration::from_secs(2));
    let receipts = dir.join("state/receipts");
    let bytes0 = dir_bytes(&receipts);
    // The load.
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    let t_start = Instant::now();
    let v0 = sim.origin.elapsed().as_nanos() as u64;
    let end = t_start + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (url, agent) = (url.clone(), agent.clone());
            let (accepted, refused, lost, next, lat) = (
                Arc::clone(&accepted),
                Arc::clone(&refused),
                Arc::clone(&lost),
                Arc::clone(&next),
                Arc::clone(&lat),
            );
            std::thread::spawn(move || {
                let a = http();
                let mut mine = Vec::new();
                while Instant::now() < end {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let body = bundle(&format!("load-{i}"), i + 2);
                    let t0 = Instant::now();
                    match post_raw(&a, &format!("{url}/v1/responses"), &agent, body.as_bytes()) {
                        Some((200, _)) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            mine.push(t0.elapsed().as_secs_f64() * 1e3);
                        }
                        Some((429, _)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        _ => {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let pid = child.id();
    let mut samples: Vec<(u64, u64, f64)> = Vec::new();
    let mut s = 0u64;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        s += 1;
        let depth = metric(&a, &url, "halo_input_queue_depth");
        samples.push((s, rss_kb(pid), depth));
    }
    for c in clients {
        let _ = c.join();
    }
    let elapsed = t_start.elapsed().as_secs_f64();
    let v1 = sim.origin.elapsed().as_nanos() as u64;
    stop.store(true, Ordering::Relaxed);
    let _ = feed.join();
    let bytes1 = dir_bytes(&receipts);
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let code = child.wait().map(|s| s.code().unwrap_or(-1)).unwrap_or(-1);
    // Setpoint gaps at the vehicle during the load.
    let view = sim.control.view();
    let mut arr: Vec<u64> = view
        .arrivals
        .iter()
        .map(|r| r.arrived_ns)
        .filter(|t| *t >= v0 && *t < v1)
        .collect();
    arr.sort_unstable();
    let gaps: Vec<u64> = arr.windows(2).map(|w| (w[1] - w[0]) / 1_000_000).collect();
    let over = |ms: u64| gaps.iter().filter(|g| **g > ms).count();
    let max_gap = gaps.iter().copied().max().unwrap_or(0);
    let mut l = lat.lock().unwrap().clone();
    l.sort_by(f64::total_cmp);
    let (acc, rf, ls) = (
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        lost.load(Ordering::Relaxed),
    );
    println!(
        "bench_load: {seconds} s, 4 agent clients, providers at 50 Hz, one target streaming at 20 Hz, done_retention_ms = {}",
        retention_ms.map_or("10000 (default)".to_string(), |r| r.to_string())
    );
    println!(
        "  bundles: {acc} accepted ({:.0}/s), {rf} refused 429, {ls} lost; accepted latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        acc as f64 / elapsed,
        pct(&l, 0.5),
        pct(&l, 0.99),
        l.last().copied().unwrap_or(f64::NAN)
    );
    let rss: Vec<u64> = samples.iter().map(|s| s.1).collect();
    let depth_max = samples.iter().map(|s| s.2).fold(0.0, f64::max);
    println!(
        "  resident memory: {:.1} MB at the start, {:.1} MB max, {:.1} MB at the end; input queue depth at most {depth_max:.0} (sampled each second)",
        rss.first().copied().unwrap_or(0) as f64 / 1024.0,
        rss.iter().copied().max().unwrap_or(0) as f64 / 1024.0,
        rss.last().copied().unwrap_or(0) as f64 / 1024.0
    );
    println!(
        "  RSS by second (MB): {}",
        rss.iter()
            .map(|k| format!("{:.0}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  setpoints at the vehicle: {} arrived, gaps over 60 ms: {}, over 100 ms: {}, largest {max_gap} ms",
        arr.len(),
        over(60),
        over(100)
    );
    let grown = bytes1.saturating_sub(bytes0);
    println!(
        "  receipts: {:.2} MB/s; {:.1} KB per accepted bundle (all receipts written during the load over the bundles accepted)",
        grown as f64 / elapsed / 1e6,
        if acc > 0 {
            grown as f64 / acc as f64 / 1e3
        } else {
            f64::NAN
        }
    );
    println!("  the gateway exited {code}");
    let kinds = bytes_by_kind(&receipts);
    let total: u64 = kinds.iter().map(|k| k.2).sum::<u64>().max(1);
    println!("  receipt log by record kind (every segment on disk):");
    for (kind, n, b) in &kinds {
        println!(
            "    {kind:<18} {n:>8} records {:>9.1} KB ({:>4.1} %), {:>6} B each",
            *b as f64 / 1e3,
            *b as f64 * 100.0 / total as f64,
            b / n.max(&1)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(60);
    let binary = args
        .get(2)
        .map_or("target/release/halo-gateway", String::as_str);
    let retention = args.get(3).and_then(|n| n.parse().ok());
    run(seconds, binary, retention);
}
