//! End-to-end cost of `halo-gateway run`, measured from outside (run through
//! `scripts/bench_e2e.sh`; never a test).
//!
//! `latency N`: the simulated PX4 runs in this process on its own UDP socket, its clock the
//! bench's; the service runs in this process too, reached over loopback HTTP. For each of N
//! bundles (one route action with its certificate, a new target each time) the time runs from
//! just before the agent's `POST /v1/responses` to the simulator's receipt of the first setpoint
//! carrying that target. Excluded: issuing the certificate (a provider's call made before), the
//! providers' own updates (a thread publishes every 200 ms throughout; each one re-evaluates
//! every live response that uses the source, so they are load the bundles contend with). The
//! service runs with the default live limit (64 responses); finished responses retire after
//! 100 ms instead of 10 s so that the bench's pace (a bundle every few ms) stays under it.
//!
//! `latency N --neighbour` (or `--neighbours K`): the same with one (K) CPU-bound neighbour
//! processes on the host (this program started again as a busy loop, at the default
//! scheduler), as on a companion that also runs a camera or mapping job. `--realtime P`: this
//! process's threads (the service's, and with them the simulator's and the client's, which are
//! the instrument) run `SCHED_FIFO` at priority P, as `[realtime] priority` sets them in
//! `halo-gateway run`; the neighbours, started before, do not.
//!
//! `memory SECONDS BINARY`: spawns `BINARY run` against the simulator, holds one long target
//! streaming at 20 Hz while PX4 telemetry arrives at 50 Hz, and samples the process's resident
//! memory and CPU time every second from /proc.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "a measurement program: a failure stops it loudly"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The one client of the service's API ([`sitl::client`]).
fn http() -> ureq::Agent {
    sitl::client::agent(Some(Duration::from_secs(30)))
}

fn post(a: &ureq::Agent, url: &str, token: &str, body: &Value) -> (u16, Value) {
    sitl::client::request(
        a,
        "POST",
        url,
        Some(token),
        Some(body.to_string().as_bytes()),
    )
    .unwrap()
}

fn get(a: &ureq::Agent, url: &str) -> Value {
    sitl::client::request(a, "GET", url, None, None).unwrap().1
}

struct Sim {
    control: sitl::sim::udp::SimControl,
    origin: Instant,
    addr: std::net::SocketAddr,
    _stop: tokio::sync::broadcast::Sender<()>,
}

fn start_sim(rt: &tokio::runtime::Runtime, drain_flying: f64) -> Sim {
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
            drain_flying,
            record_arrivals: true,
            ..sitl::sim::px4::SimConfig::default()
        },
        setpoint_log: None,
        seed: 5,
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

fn providers(url: String, token: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let a = http();
        while !stop.load(Ordering::Relaxed) {
            let at = halo_gateway::service::infra::clock::wall_now_ms();
            for (source, body) in sitl::sim::world::provider_updates(7, at) {
                post(&a, &format!("{url}/v1/state/{source}"), &token, &body);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

fn take_off(a: &ureq::Agent, url: &str, op: &str, sim: &Sim) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while post(a, &format!("{url}/v1/operator/arm"), op, &json!({})).0 != 200 {
        assert!(Instant::now() < deadline, "no arming");
        std::thread::sleep(Duration::from_millis(500));
    }
    let (st, v) = post(
        a,
        &format!("{url}/v1/operator/takeoff"),
        op,
        &json!({"altitude_m": 5.0}),
    );
    assert_eq!(st, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let alt = sim.control.view().height_m;
        let v = get(a, &format!("{url}/v1/status"))["vehicle"].clone();
        if alt > 4.8 && v["mode"] == "AUTO.LOITER" && v["landed_state"] == "in air" {
            break;
        }
        assert!(Instant::now() < deadline, "no takeoff");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn route(t: [f64; 4], dur: f64, cert: &str) -> Value {
    sitl::client::route_action("a", t, dur, 7, cert)
}

fn digest(cat: &halo_core::catalog::Catalog, env: &Value) -> String {
    let text = env.to_string();
    let raw = halo_core::envelope::parse_envelope(text.as_bytes()).unwrap();
    let v = halo_core::graph::validate(cat, &raw).unwrap();
    v.graph.components()[0].digest.to_hex()
}

fn pct(v: &[f64], p: f64) -> f64 {
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// A CPU-bound neighbour: this program again, spinning in its own process until dropped.
struct Neighbour(std::process::Child);

impl Neighbour {
    fn start() -> Neighbour {
        let exe = std::env::current_exe().unwrap();
        Neighbour(std::process::Command::new(exe).arg("spin").spawn().unwrap())
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn latency(n: usize, neighbours: usize, realtime: Option<u8>) {
    // The neighbours first: a process started afterwards would inherit SCHED_FIFO.
    let running: Vec<Neighbour> = (0..neighbours).map(|_| Neighbour::start()).collect();
    if let Some(p) = realtime {
        let cfg = halo_gateway::service::infra::realtime::RealtimeConfig { priority: Some(p) };
        if let Err(e) = halo_gateway::service::infra::realtime::apply(&cfg) {
            eprintln!("bench_e2e: {e}");
            drop(running);
            std::process::exit(1);
        }
    }
    println!(
        "bench_e2e latency: {neighbours} CPU-bound neighbour process(es) on {} cores, {}",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        halo_gateway::service::infra::realtime::current()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sim = start_sim(&rt, sitl::sim::px4::SimConfig::default().drain_flying);
    let dir = std::env::temp_dir().join(format!("halo-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = halo_gateway::service::Config::default();
    cfg.vehicle.url = Some(format!("udpout:{}", sim.addr));
    cfg.listen.http = "127.0.0.1:0".parse().unwrap();
    cfg.state.dir = Some(dir.clone());
    // The default live limit (64). At this bench's pace (a bundle every few ms) finished
    // responses retire after 100 ms instead of the default 10 s, so about as many stay live
    // as the default limit allows at most, and every provider update re-evaluates that many.
    cfg.limits.done_retention_ms = 100;
    cfg.log.level = "error".into();
    let cat = cfg.catalog().unwrap();
    let svc = rt
        .block_on(halo_gateway::service::Service::start(cfg, cat.clone()))
        .unwrap();
    let url = svc.url();
    let a = http();
    take_off(&a, &url, svc.credentials().operator.expose(), &sim);
    let stop = Arc::new(AtomicBool::new(false));
    let feeds = providers(
        url.clone(),
        svc.credentials().provider.expose().to_string(),
        Arc::clone(&stop),
    );
    std::thread::sleep(Duration::from_millis(600));
    // Warm-up: PX4 enters OFFBOARD after a second of streaming; only then does it take targets.
    let mut sent: Vec<(String, Instant)> = Vec::with_capacity(n);
    let mut answered: Vec<f64> = Vec::with_capacity(n);
    let mut live_max = 0u64;
    let warm = 40usize;
    for i in 0..(n + warm) {
        let t = [
            10.0 + (i % 100) as f64 * 0.01,
            3.0 + ((i / 100) % 100) as f64 * 0.01,
            -10.0,
            90.0,
        ];
        let cert = format!("cert-{i}");
        let env = json!({"response_id": format!("b-{i}"), "agent_id": "bench", "generation": i + 1,
            "catalog": {"id": "uav-px4", "version": 6}, "components": [route(t, 1.0, &cert)]});
        let c = json!({"id": cert, "covers": digest(&cat, &env), "valid_for_ms": 1500, "issuer": "tube-verifier"});
        let (st, v) = post(
            &a,
            &format!("{url}/v1/certificates"),
            svc.credentials().provider.expose(),
            &c,
        );
        assert_eq!(st, 200, "{v}");
        let t0 = Instant::now();
        let (st, rep) = post(
            &a,
            &format!("{url}/v1/responses"),
            svc.credentials().agent.expose(),
            &env,
        );
        assert_eq!(st, 200, "bundle {i}: {rep}");
        assert_eq!(
            rep["components"][0]["phase"], "dispatched",
            "bundle {i}: {rep}"
        );
        if i == warm - 1 {
            std::thread::sleep(Duration::from_millis(1500));
        }
        if i >= warm {
            #[allow(clippy::cast_possible_truncation, reason = "as the bridge sends f32")]
            let fp =
                sitl::sim::px4::fingerprint(t[0] as f32, t[1] as f32, t[2] as f32, t[3] as f32);
            sent.push((fp, t0));
            answered.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        // Pace so that each target streams at least once before the next replaces it.
        std::thread::sleep(Duration::from_millis(2));
        if i % 50 == 0 {
            let live = get(&a, &format!("{url}/v1/status"))["responses_live"]
                .as_u64()
                .unwrap_or(0);
            live_max = live_max.max(live);
        }
        if i % 1000 == 0 {
            eprintln!("bench_e2e: {i}/{} bundles", n + warm);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let _ = feeds.join();
    let view = sim.control.view();
    let mut first: HashMap<&str, u64> = HashMap::new();
    // When each setpoint reached the vehicle's socket, whether or not the controller's next
    // 20 ms tick used it (a bundle every few ms replaces most before that): the gateway's path
    // ends at the vehicle.
    for r in &view.arrivals {
        first.entry(r.fingerprint.as_str()).or_insert(r.arrived_ns);
    }
    let mut lat: Vec<f64> = Vec::new();
    let mut missing = 0usize;
    for (fp, t0) in &sent {
        match first.get(fp.as_str()) {
            Some(t) => {
                let recv = sim.origin + Duration::from_nanos(*t);
                lat.push(recv.saturating_duration_since(*t0).as_secs_f64() * 1e3);
            }
            None => missing += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "bench_e2e latency: {} bundles, {} matched at the vehicle, {missing} not seen",
        sent.len(),
        lat.len()
    );
    if !lat.is_empty() {
        println!(
            "  bundle POST -> first setpoint at the simulator: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            pct(&lat, 0.5),
            pct(&lat, 0.9),
            pct(&lat, 0.99),
            lat[lat.len() - 1]
        );
    }
    answered.sort_by(f64::total_cmp);
    if !answered.is_empty() {
        println!(
            "  bundle POST -> its decisions answered: p50 {:.3} ms, p99 {:.3} ms; live responses at most {live_max} (sampled every 50 bundles)",
            pct(&answered, 0.5),
            pct(&answered, 0.99),
        );
    }
    svc.shutdown();
    let _ = rt.block_on(svc.wait());
    let _ = std::fs::remove_dir_all(&dir);
}

fn proc_sample(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((rss_kb, ticks))
}

fn memory(seconds: u64, binary: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // A battery that lasts the run (the default drains to the catalog's 25 % floor in about
    // eight minutes of flight, and ENERGY_LOW then rightly stops every route action).
    let sim = start_sim(&rt, 0.05);
    let dir = std::env::temp_dir().join(format!("halo-bench-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = std::process::Command::new(binary)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "error",
            "--vehicle",
        ])
        .arg(format!("udpout:{}", sim.addr))
        .arg("--state-dir")
        .arg(&dir)
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
        std::fs::read_to_string(dir.join(format!("credentials/{r}.token")))
            .unwrap()
            .trim()
            .to_string()
    };
    let a = http();
    take_off(&a, &url, &token("operator"), &sim);
    let stop = Arc::new(AtomicBool::new(false));
    let feeds = providers(url.clone(), token("provider"), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(600));
    let pid = child.id();
    let hz = 100.0; // USER_HZ on Linux
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    let t0 = Instant::now();
    let mut k = 0u64;
    // One certified target per 60 s keeps a 20 Hz setpoint stream going the whole time.
    while t0.elapsed() < Duration::from_secs(seconds) {
        if t0.elapsed() >= Duration::from_secs(k * 60) {
            let cert = format!("cert-m{k}");
            let t = [10.0 + (k % 5) as f64, 3.0, -10.0, 90.0];
            let env = json!({"response_id": format!("m-{k}"), "agent_id": "bench", "generation": k + 1,
                "catalog": {"id": "uav-px4", "version": 6}, "components": [route(t, 59.0, &cert)]});
            let cat = halo_gateway::service::Config::default().catalog().unwrap();
            let c = json!({"id": cert, "covers": digest(&cat, &env), "valid_for_ms": 120000, "issuer": "tube-verifier"});
            post(
                &a,
                &format!("{url}/v1/certificates"),
                &token("provider"),
                &c,
            );
            let (_, rep) = post(&a, &format!("{url}/v1/responses"), &token("agent"), &env);
            assert_eq!(rep["components"][0]["phase"], "dispatched", "{rep}");
            k += 1;
        }
        if let Some((rss, ticks)) = proc_sample(pid) {
            samples.push((t0.elapsed().as_secs_f64(), rss, ticks));
            if samples.len().is_multiple_of(60) {
                eprintln!(
                    "bench_e2e memory: {:>4.0} s  RSS {:.1} MB",
                    t0.elapsed().as_secs_f64(),
                    rss as f64 / 1024.0
                );
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = feeds.join();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    let setpoints = sim.control.view().setpoints.len();
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let cpu_s = (last.2 - first.2) as f64 / hz;
    let wall = last.0 - first.0;
    println!(
        "bench_e2e memory: {seconds} s streaming ({setpoints} setpoints taken by the vehicle, {:.1}/s), telemetry 50 Hz",
        setpoints as f64 / seconds as f64
    );
    println!(
        "  resident memory of `run`: {:.1} MB after takeoff, {:.1} MB at the end, {:.1} MB max",
        first.1 as f64 / 1024.0,
        last.1 as f64 / 1024.0,
        max as f64 / 1024.0
    );
    println!(
        "  CPU: {:.1} ms per second of streaming ({:.2} % of one core)",
        cpu_s / wall * 1e3,
        cpu_s / wall * 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("latency") => {
            let n = args
                .get(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or(10_000usize);
            let neighbours = match args.iter().position(|a| a == "--neighbours") {
                Some(i) => args.get(i + 1).and_then(|k| k.parse().ok()).unwrap_or(1),
                None => usize::from(args.iter().any(|a| a == "--neighbour")),
            };
            let realtime = args
                .iter()
                .position(|a| a == "--realtime")
                .map(|i| args.get(i + 1).and_then(|p| p.parse().ok()).unwrap_or(50));
            latency(n, neighbours, realtime);
        }
        Some("spin") => {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        Some("memory") => memory(
            args.get(2).and_then(|n| n.parse().ok()).unwrap_or(600),
            args.get(3)
                .map_or("target/release/halo-gateway", String::as_str),
        ),
        _ => {
            eprintln!(
                "usage: bench_e2e latency [N] [--neighbour | --neighbours K] [--realtime PRIORITY] | memory [SECONDS] [BINARY]"
            );
            std::process::exit(3);
        }
    }
}
