//! The service's end-to-end fixtures: a `halo-gateway run` process, the simulated PX4 on its
//! own UDP socket in the test process, HTTP helpers, providers, the operator's takeoff.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("halo-service-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn unix_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A running gateway process.
pub struct Gateway {
    pub proc: super::Spawned,
    pub url: String,
    pub agent: String,
    pub provider: String,
    pub operator: String,
    pub state: PathBuf,
    /// The simulated PX4 this gateway flies when the test asked for `"sim"` and named no
    /// vehicle of its own (dropped after the process).
    pub own_sim: Option<Sim>,
}

impl Gateway {
    pub fn start(dir: &Path, vehicle: &str, extra: &str) -> Gateway {
        Gateway::start_in(dir, &dir.join("state"), vehicle, extra)
    }

    /// A gateway with a whole configuration file of the caller's (its `[state] dir` must be
    /// `state`), and extra environment variables.
    /// `url = "sim"` in it: a simulated PX4 of its own in this process, as [`Gateway::start_in`].
    pub fn start_config(dir: &Path, state: &Path, config: &str, env: &[(&str, &str)]) -> Gateway {
        let own_sim = config
            .contains("url = \"sim\"")
            .then(|| Sim::start(&dir.join("own-vehicle.jsonl")));
        let config = match &own_sim {
            Some(s) => config.replace("url = \"sim\"", &format!("url = \"udpout:{}\"", s.addr)),
            None => config.to_string(),
        };
        let proc = super::Spawned::start_env(super::BIN, dir, &config, state, env);
        let [agent, provider, operator] = proc.creds.clone();
        Gateway {
            url: proc.url.clone(),
            agent,
            provider,
            operator,
            state: state.to_path_buf(),
            proc,
            own_sim,
        }
    }

    /// As [`Gateway::start`], with the state directory at `state`. `vehicle = "sim"`: a
    /// simulated PX4 of its own in this process, its setpoint log `dir/own-vehicle.jsonl` (the
    /// flight binary has no embedded simulator).
    pub fn start_in(dir: &Path, state: &Path, vehicle: &str, extra: &str) -> Gateway {
        let state = state.to_path_buf();
        let own_sim = (vehicle == "sim").then(|| Sim::start(&dir.join("own-vehicle.jsonl")));
        let url = own_sim
            .as_ref()
            .map_or_else(|| vehicle.to_string(), |s| format!("udpout:{}", s.addr));
        let vehicle = url.as_str();
        let proc = super::Spawned::start(
            super::BIN,
            dir,
            &format!(
                "[vehicle]\nurl = \"{vehicle}\"\n{extra}\n[listen]\nhttp = \"127.0.0.1:0\"\n\
                 [state]\ndir = \"{}\"\n[log]\nlevel = \"warn\"\n",
                state.display()
            ),
            &state,
        );
        let [agent, provider, operator] = proc.creds.clone();
        Gateway {
            url: proc.url.clone(),
            agent,
            provider,
            operator,
            state,
            proc,
            own_sim,
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(self) -> i32 {
        self.proc.stop()
    }

    /// SIGKILL: a crash, no clean shutdown.
    pub fn kill(self) {
        self.proc.kill();
    }
}

/// The CA the helpers trust for `https://` URLs ([`trust_ca`]); none: plain HTTP only.
static TRUSTED_CA: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// From now on the helpers ([`get`], [`post`], [`Providers`], [`take_off`]) trust `ca_pem` for
/// `https://` URLs (a test of a TLS gateway; it holds [`super::exclusive`]).
pub fn trust_ca(ca_pem: Option<&[u8]>) {
    *TRUSTED_CA.lock().unwrap() = ca_pem.map(<[u8]>::to_vec);
}

pub fn http() -> ureq::Agent {
    let t = Some(Duration::from_secs(30));
    match TRUSTED_CA.lock().unwrap().as_deref() {
        Some(ca) => sitl::client::agent_trusting(t, ca).unwrap(),
        None => sitl::client::agent(t),
    }
}

/// One request: the method, an optional bearer credential, an optional body; returns
/// (status, JSON body) ([`sitl::client::request`]).
pub fn request(method: &str, url: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, Value) {
    sitl::client::request(&http(), method, url, token, body).unwrap()
}

/// The Prometheus text of `GET /metrics`.
pub fn metrics_text(url: &str) -> String {
    http()
        .get(format!("{url}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

pub fn post(url: &str, token: Option<&str>, body: &[u8]) -> (u16, Value) {
    request("POST", url, token, Some(body))
}

pub fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    request("GET", url, token, None)
}

pub fn delete(url: &str, token: Option<&str>) -> (u16, Value) {
    request("DELETE", url, token, None)
}

/// The simulated PX4 on its own loopback UDP socket, in this process.
pub struct Sim {
    pub rt: tokio::runtime::Runtime,
    pub control: sitl::sim::udp::SimControl,
    pub stop: tokio::sync::broadcast::Sender<()>,
    pub addr: std::net::SocketAddr,
    /// The simulator's clock origin.
    pub origin: Instant,
}

impl Sim {
    pub fn start(log: &Path) -> Sim {
        Sim::start_with(log, None, sitl::sim::px4::SimConfig::default())
    }

    /// A simulator that, like PX4 SITL, sends to `remote` until someone sends to it.
    pub fn start_with(
        log: &Path,
        remote: Option<std::net::SocketAddr>,
        config: sitl::sim::px4::SimConfig,
    ) -> Sim {
        Sim::start_keyed(log, remote, config, None)
    }

    /// As [`Sim::start_with`], with MAVLink 2 signing on both links when `key` is given (a PX4
    /// with that key provisioned: unsigned frames refused).
    pub fn start_keyed(
        log: &Path,
        remote: Option<std::net::SocketAddr>,
        config: sitl::sim::px4::SimConfig,
        key: Option<[u8; 32]>,
    ) -> Sim {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (stop, _) = tokio::sync::broadcast::channel(1);
        let control = sitl::sim::udp::SimControl::default();
        let sock = rt
            .block_on(sitl::sim::udp::bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let opts = sitl::sim::udp::UdpOptions {
            bind: addr,
            remote,
            config,
            setpoint_log: Some(log.to_path_buf()),
            seed: 3,
            gcs: "127.0.0.1:0".parse().ok(),
            signing_key: key,
        };
        let origin = Instant::now();
        rt.spawn(sitl::sim::udp::run_with_origin(
            sock,
            opts,
            control.clone(),
            stop.subscribe(),
            origin,
        ));
        Sim {
            rt,
            control,
            stop,
            addr,
            origin,
        }
    }

    /// Now on the simulator's clock (the `t_ns` of its setpoint records).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap()
    }

    /// The setpoints the vehicle's controller took with fingerprint `fp` from `after_ns` on.
    pub fn taken_after(&self, fp: &str, after_ns: u64) -> usize {
        self.control
            .view()
            .setpoints
            .iter()
            .filter(|r| r.fingerprint == fp && r.t_ns >= after_ns)
            .count()
    }

    /// Height above the ground, m (PX4's local z is not: the ground is off its origin).
    pub fn alt(&self) -> f64 {
        self.control.view().height_m
    }

    pub fn fingerprints(&self) -> Vec<String> {
        self.control
            .view()
            .setpoints
            .iter()
            .map(|r| r.fingerprint.clone())
            .collect()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        std::thread::sleep(Duration::from_millis(50));
        let _ = &self.rt;
    }
}

pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Publishes every provider source every 200 ms, like a UTM feed, a map service, a corridor
/// service and the operator's authority flags would.
pub struct Providers {
    pub stop: Arc<AtomicBool>,
    pub map_epoch: Arc<AtomicU64>,
    pub refused: Arc<AtomicU64>,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

impl Providers {
    /// Publishes once and returns when every update was accepted (so a test never races the
    /// first publication), then keeps publishing in the background.
    pub fn start(url: &str, token: &str) -> Providers {
        Providers::start_with(url, token, true)
    }

    /// As [`Providers::start`]; with `strict = false` a refused update is counted in
    /// [`Providers::refused`] and publishing goes on (a fault test where refusals are right).
    pub fn start_with(url: &str, token: &str, strict: bool) -> Providers {
        if strict {
            Providers::publish_once(url, token, 7);
        } else {
            for (source, body) in sitl::sim::world::provider_updates(7, unix_ms()) {
                let _ = post(
                    &format!("{url}/v1/state/{source}"),
                    Some(token),
                    body.to_string().as_bytes(),
                );
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let map_epoch = Arc::new(AtomicU64::new(7));
        let (s, m, url, token) = (
            Arc::clone(&stop),
            Arc::clone(&map_epoch),
            url.to_string(),
            token.to_string(),
        );
        let refused = Arc::new(AtomicU64::new(0));
        let r = Arc::clone(&refused);
        let thread = std::thread::spawn(move || {
            let addr = url
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .to_string();
            while !s.load(Ordering::Relaxed) {
                // A gateway that stopped (an MCP client closed the session it spawned) ends
                // the publishing; every request of a test still checks its own answer.
                if std::net::TcpStream::connect(&addr).is_err() {
                    break;
                }
                if strict {
                    Providers::publish_once(&url, &token, m.load(Ordering::Relaxed));
                } else {
                    for (source, body) in
                        sitl::sim::world::provider_updates(m.load(Ordering::Relaxed), unix_ms())
                    {
                        let (st, _) = post(
                            &format!("{url}/v1/state/{source}"),
                            Some(&token),
                            body.to_string().as_bytes(),
                        );
                        if st != 200 {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Providers {
            stop,
            map_epoch,
            refused,
            thread: Some(thread),
        }
    }

    /// Updates refused so far (with `strict = false`).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn publish_once(url: &str, token: &str, map_epoch: u64) {
        for (source, body) in sitl::sim::world::provider_updates(map_epoch, unix_ms()) {
            let (st, v) = post(
                &format!("{url}/v1/state/{source}"),
                Some(token),
                body.to_string().as_bytes(),
            );
            assert_eq!(st, 200, "{source}: {v}");
        }
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The operator arms (retrying until PX4 is ready) and takes off to 5 m; returns once PX4 is in
/// HOLD there (it leaves AUTO.TAKEOFF for HOLD, and offboard targets are taken from HOLD).
pub fn take_off(g: &Gateway, sim: &Sim) {
    take_off_at(&g.url, &g.operator, sim);
}

/// As [`take_off`], for a gateway at `u` with the operator credential `operator` (one the test
/// did not start itself: an MCP client spawned it).
pub fn take_off_at(u: &str, operator: &str, sim: &Sim) {
    wait_until(20, "the vehicle link", || {
        get(&format!("{u}/v1/status"), None).1["vehicle"]["link_up"] == true
    });
    // PX4 (and the simulator, as measured) takes a takeoff while disarmed and climbs the
    // moment it is armed: the gateway refuses it before it reaches the vehicle.
    let (st, v) = post(
        &format!("{u}/v1/operator/takeoff"),
        Some(operator),
        br#"{"altitude_m": 5.0}"#,
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("VEHICLE_NOT_ARMED")),
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(
        sim.control.view().mode,
        (4, 2),
        "the takeoff reached the vehicle"
    );
    wait_until(20, "arming", || {
        let ok = post(&format!("{u}/v1/operator/arm"), Some(operator), b"{}").0 == 200;
        if !ok {
            std::thread::sleep(Duration::from_millis(500));
        }
        ok
    });
    let (st, v) = post(
        &format!("{u}/v1/operator/takeoff"),
        Some(operator),
        br#"{"altitude_m": 5.0}"#,
    );
    assert_eq!(st, 200, "{v}");
    wait_until(30, "HOLD at 5 m", || {
        sim.alt() > 4.8 && {
            let v = get(&format!("{u}/v1/status"), None).1;
            v["vehicle"]["mode"] == "AUTO.LOITER" && v["vehicle"]["landed_state"] == "in air"
        }
    });
}

/// An 8 s route action ([`sitl::client::route_action`]).
pub fn route(id: &str, t: [f64; 4], map_epoch: u64, cert: &str) -> Value {
    sitl::client::route_action(id, t, 8.0, map_epoch, cert)
}

/// The digest a certificate must cover, as `halo-gateway digest` prints it.
/// The embedded catalog with one change: a route action may wait for another's observed success.
pub fn seq_catalog_text() -> String {
    let cat = halo_gateway::io::EMBEDDED_CATALOG
        .replace("id = \"uav-px4\"\nversion = 6", "id = \"uav-px4-seq\"\nversion = 1")
        .replace(
            "temporal = \"interval\"\nrules",
            "temporal = \"interval\"\nprerequisites = [{ type = \"route_action\", phases = [\"observed_success\"] }]\nrules",
        );
    assert!(cat.contains("uav-px4-seq") && cat.contains("phases = [\"observed_success\"] }]"));
    cat
}

pub fn digest_of(envelope: &Value, component: &str) -> String {
    let cat = if envelope["catalog"]["id"] == "uav-px4-seq" {
        halo_core::catalog::Catalog::parse(&seq_catalog_text(), "seq.toml").unwrap()
    } else {
        halo_gateway::service::Config::default().catalog().unwrap()
    };
    let bytes = envelope.to_string();
    let raw = halo_core::envelope::parse_envelope(bytes.as_bytes()).unwrap();
    let v = halo_core::graph::validate(&cat, &raw).unwrap();
    let i = v.graph.index_of(&component.parse().unwrap()).unwrap();
    v.graph.component(i).unwrap().digest.to_hex()
}

pub fn certify(g: &Gateway, envelope: &Value, component: &str, id: &str) {
    let body = json!({"id": id, "covers": digest_of(envelope, component), "valid_for_ms": 30000, "issuer": "tube-verifier"});
    let (st, v) = post(
        &format!("{}/v1/certificates", g.url),
        Some(&g.provider),
        body.to_string().as_bytes(),
    );
    assert_eq!(st, 200, "{v}");
}

pub fn phases(report: &Value) -> Vec<(String, String)> {
    report["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub fn fp(n: f32, e: f32, d: f32, yaw: f32) -> String {
    sitl::sim::px4::fingerprint(n, e, d, yaw)
}

/// Reads the SSE stream into `(id, event, data)` triples until `stop`.
pub fn sse_reader(
    url: String,
    token: String,
    last_id: Option<u64>,
    out: Arc<Mutex<Vec<(u64, String, String)>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_recv_body(None)
            .build()
            .new_agent();
        let mut req = agent
            .get(format!("{url}/v1/events"))
            .header("Authorization", &format!("Bearer {token}"));
        if let Some(l) = last_id {
            req = req.header("Last-Event-ID", &format!("1.{l}"));
        }
        let resp = req.call().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let reader = BufReader::new(resp.into_body().into_reader());
        let (mut id, mut ev, mut data) = (0u64, String::new(), String::new());
        for line in reader.lines() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(line) = line else { break };
            if let Some(x) = line.strip_prefix("id: ").or(line.strip_prefix("id:")) {
                // `BOOT.N`: this start's event number.
                id = x
                    .trim()
                    .split_once('.')
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(0);
            } else if let Some(x) = line.strip_prefix("event: ").or(line.strip_prefix("event:")) {
                ev = x.trim().to_string();
            } else if let Some(x) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) {
                data.push_str(x);
            } else if line.is_empty() && !ev.is_empty() {
                out.lock()
                    .unwrap()
                    .push((id, std::mem::take(&mut ev), std::mem::take(&mut data)));
            }
        }
    })
}
