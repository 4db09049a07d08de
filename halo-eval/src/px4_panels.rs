//! The PX4 panels through the running service: what reached the simulated PX4 when an agent
//! and providers drive `halo-gateway run` over its HTTP agent link and the gateway flies the
//! vehicle over MAVLink (UDP), with the vehicle's own setpoint record as the only evidence of
//! what was flown.
//!
//! Two panels so far (issue 24 names five; the mechanism, profile and recovery-route panels
//! are not built yet):
//!
//! - `deny-hold`: a certified route action streams; a provider moves the map epoch its support
//!   names; the time from that update leaving the provider to the first hold setpoint the
//!   vehicle's controller takes, and whether the vehicle took any setpoint of the action after
//!   it. Matched when the hold reached the vehicle and nothing of the action did after it.
//! - `px4-latency`: the same actions, decomposed: the gateway's own admission and final-gate
//!   time (its `halo_admission_seconds` and `halo_gate_seconds`, read around each request:
//!   protocol computation), the agent's POST to its reply (that plus HTTP), the POST to the
//!   first setpoint of the action taken by the vehicle's controller (plus the bridge, UDP and
//!   PX4's 20 ms control tick), and the vehicle's convergence (within 0.3 m). Matched when the
//!   order admission < reply and POST < first vehicle setpoint < convergence held; a run where
//!   it does not is refused as a harness error, not reported as a result.
//!
//! Every cold start is a fresh simulator (its own seed: a new ground offset, heartbeat
//! phase) and a fresh service with an empty state directory; the conditions of one cold start
//! run back to back in one flight, as the paper's sessions did. Host times are one clock: the
//! simulator measures its time from the instant this module hands it, so a setpoint record's
//! `t_ns` and the agent's timestamps are comparable to the nanosecond.
//!
//! Against a real PX4 ([`Peer::Px4`]) the simulator is skipped: each cold start is a fresh
//! service pointed at the PX4's onboard link (the PX4 itself is not restarted), and the
//! evidence is PX4's own report of the target its position controller holds,
//! POSITION_TARGET_LOCAL_NED on its ground-station link (50 Hz on PX4 v1.16 SITL), received by
//! this runner on the ground-station port and stamped on the same clock. PX4's ULog
//! `trajectory_setpoint` (5 Hz by default) is the after-the-fact cross-check (docs/px4.md).

#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value indexing returns Null, never panics"
)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::demo::{Client, DemoError, demo_config, err, feed, stop_service};
use crate::service::Service;
use halo_core::catalog::Catalog;

/// What the command line needs of a PX4 panel's result.
pub trait PanelReport {
    /// Prints the panel with its denominators.
    fn print(&self);
    /// Draws its picture as an SVG at `path`.
    ///
    /// # Errors
    /// [`DemoError`] when the file cannot be written.
    fn plot(&self, path: &Path) -> Result<(), DemoError>;
    /// Every run matched.
    fn passed(&self) -> bool;
}

impl PanelReport for Report {
    fn print(&self) {
        Report::print(self);
    }
    fn plot(&self, path: &Path) -> Result<(), DemoError> {
        Report::plot(self, path)
    }
    fn passed(&self) -> bool {
        self.deny_hold_matched() == self.samples.len()
    }
}

/// Whose setpoints are the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The simulated PX4, started per cold start; its controller's own record.
    Sim,
    /// A running PX4 (SITL or real) at `url` (the onboard link, e.g. `udpin:0.0.0.0:14540`); its
    /// POSITION_TARGET_LOCAL_NED and LOCAL_POSITION_NED as it sends them to a ground station
    /// on UDP port `gcs_port` (PX4 SITL: 14550).
    Px4 {
        /// The vehicle URL the service flies.
        url: String,
        /// The ground-station port this runner listens on.
        gcs_port: u16,
    },
}

/// What the vehicle took, as one of the two peers reports it: `(t_ns, fingerprint)` in time
/// order, and where the vehicle is.
pub(crate) trait Evidence {
    /// Every target record from `after` on.
    fn records_after(&self, after: u64) -> Vec<(u64, String)>;
    /// The vehicle's position, local NED m.
    fn position(&self) -> Option<[f64; 3]>;
    /// Makes the vehicle report `pct` percent of battery from now on; false when this peer
    /// cannot (a real PX4).
    fn set_battery(&self, _pct: f64) -> bool {
        false
    }
}

impl Evidence for sitl::sim::udp::SimControl {
    fn records_after(&self, after: u64) -> Vec<(u64, String)> {
        self.view()
            .setpoints
            .iter()
            .filter(|r| r.t_ns >= after)
            .map(|r| (r.t_ns, r.fingerprint.clone()))
            .collect()
    }
    fn position(&self) -> Option<[f64; 3]> {
        Some(self.view().position)
    }
    fn set_battery(&self, pct: f64) -> bool {
        self.set_battery.lock().map(|mut b| *b = Some(pct)).is_ok()
    }
}

/// The ground-station observer a panel needs for its peer: none for the simulator (its own
/// record is the evidence), a [`GcsObserver`] on the ground-station port for a real PX4.
pub(crate) struct PeerObserver(Option<(Arc<GcsObserver>, std::thread::JoinHandle<()>)>);

impl PeerObserver {
    /// Starts the observer `peer` needs, on the runner's clock (`origin`).
    ///
    /// # Errors
    /// [`DemoError`] when the ground-station port cannot be bound.
    pub(crate) fn start(peer: &Peer, origin: Instant) -> Result<PeerObserver, DemoError> {
        Ok(PeerObserver(match peer {
            Peer::Px4 { gcs_port, .. } => Some(GcsObserver::start(*gcs_port, origin)?),
            Peer::Sim => None,
        }))
    }

    /// The observer, for a real PX4.
    pub(crate) fn get(&self) -> Option<&Arc<GcsObserver>> {
        self.0.as_ref().map(|(o, _)| o)
    }

    /// Stops its thread and waits for it.
    pub(crate) async fn stop(self) {
        if let Some((o, thread)) = self.0 {
            o.stop.store(true, Ordering::Relaxed);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// PX4's reports to a ground station, received on its ground-station port by a thread.
pub(crate) struct GcsObserver {
    targets: std::sync::Mutex<Vec<(u64, String)>>,
    position: std::sync::Mutex<Option<[f64; 3]>>,
    pub(crate) stop: AtomicBool,
}

/// At most this many target reports are kept (one hour at 50 Hz).
const MAX_REPORTS: usize = 180_000;

impl GcsObserver {
    /// Listens on `port` until [`GcsObserver::stop`]; times are nanoseconds since `origin`.
    pub(crate) fn start(
        port: u16,
        origin: Instant,
    ) -> Result<(Arc<GcsObserver>, std::thread::JoinHandle<()>), DemoError> {
        let sock = std::net::UdpSocket::bind(("0.0.0.0", port))
            .map_err(|e| DemoError(format!("the ground-station port {port}: {e}")))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(err("ground-station socket"))?;
        let obs = Arc::new(GcsObserver {
            targets: std::sync::Mutex::new(Vec::new()),
            position: std::sync::Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let o = Arc::clone(&obs);
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while !o.stop.load(Ordering::Relaxed) {
                let Ok((n, _)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let t = ns_since(origin);
                let (msgs, _) = sitl::sim::wire::decode(buf.get(..n).unwrap_or(&[]));
                for (h, m) in msgs {
                    if h.component_id != 1 {
                        continue;
                    }
                    o.take(t, &m);
                }
            }
        });
        Ok((obs, thread))
    }

    fn take(&self, t: u64, m: &px4_bridge::mavlink::dialects::common::MavMessage) {
        use px4_bridge::mavlink::dialects::common::MavMessage;
        match m {
            MavMessage::POSITION_TARGET_LOCAL_NED(p) if p.x.is_finite() => {
                let yaw = if p.yaw.is_finite() {
                    p.yaw.to_degrees()
                } else {
                    0.0
                };
                let fp = sitl::sim::px4::fingerprint(p.x, p.y, p.z, yaw);
                if let Ok(mut v) = self.targets.lock()
                    && v.len() < MAX_REPORTS
                {
                    v.push((t, fp));
                }
            }
            MavMessage::LOCAL_POSITION_NED(p) => {
                if let Ok(mut v) = self.position.lock() {
                    *v = Some([f64::from(p.x), f64::from(p.y), f64::from(p.z)]);
                }
            }
            _ => {}
        }
    }
}

impl Evidence for GcsObserver {
    fn records_after(&self, after: u64) -> Vec<(u64, String)> {
        self.targets.lock().map_or_else(
            |_| Vec::new(),
            |v| v.iter().filter(|(t, _)| *t >= after).cloned().collect(),
        )
    }
    fn position(&self) -> Option<[f64; 3]> {
        self.position.lock().ok().and_then(|p| *p)
    }
}

/// One route action's measurements, host nanoseconds from the cold start's origin.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Before the agent's POST.
    pub post_ns: u64,
    /// The reply arrived (the gate had run).
    pub reply_ns: u64,
    /// The gateway's admission time for this response, from its own histogram.
    pub admission_ns: u64,
    /// The gateway's final-gate time, from its own histogram.
    pub gate_ns: u64,
    /// The vehicle's controller first took the action's setpoint.
    pub vehicle_ns: u64,
    /// The vehicle came within 0.3 m of the target.
    pub converged_ns: u64,
    /// The map update left the provider.
    pub loss_ns: u64,
    /// The vehicle's controller first took a hold setpoint after it.
    pub hold_ns: Option<u64>,
    /// Setpoints of the action the vehicle took after the hold.
    pub stale_after_hold: usize,
    /// The response id.
    pub rid: String,
    /// The gateway's final gate dispatched the action (its receipt).
    pub gate_at_ns: u64,
    /// The bridge first sent the action's target (its setpoint log).
    pub sent_at_ns: u64,
    /// The gateway recorded the action's support lost (its receipt).
    pub lost_at_ns: Option<u64>,
}

/// What the panels found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Cold starts run.
    pub cold_starts: usize,
    /// Every action measured.
    pub samples: Vec<Sample>,
    /// Wall time, s.
    pub wall_s: f64,
}

impl Report {
    /// Actions whose hold reached the vehicle with nothing of the action after it.
    pub fn deny_hold_matched(&self) -> usize {
        self.samples
            .iter()
            .filter(|s| s.hold_ns.is_some() && s.stale_after_hold == 0)
            .count()
    }

    /// Draws the deny-hold and latency distributions as an SVG at `path`.
    ///
    /// # Errors
    /// [`DemoError`] when the file cannot be written.
    pub fn plot(&self, path: &Path) -> Result<(), DemoError> {
        let ms = |f: &dyn Fn(&Sample) -> Option<u64>| -> Vec<f64> {
            self.samples
                .iter()
                .filter_map(f)
                .map(|t| t as f64 / 1e6)
                .collect()
        };
        crate::plots::distribution(
            path,
            &format!(
                "deny-hold and px4-latency through the running service ({})",
                crate::px4_panels::cold_starts_text(self.cold_starts)
            ),
            &[
                (
                    "admission + final gate, the gateway's own",
                    ms(&|s| Some(s.admission_ns + s.gate_ns)),
                ),
                (
                    "map update to the first hold setpoint",
                    ms(&|s| s.hold_ns.map(|h| h - s.loss_ns)),
                ),
                (
                    "gate's receipt to the first vehicle setpoint",
                    ms(&|s| Some(s.vehicle_ns - s.gate_at_ns)),
                ),
                (
                    "agent POST to the first vehicle setpoint",
                    ms(&|s| Some(s.vehicle_ns - s.post_ns)),
                ),
            ],
        )
    }

    /// Prints both panels with their denominators.
    pub fn print(&self) {
        let n = self.samples.len();
        let ms = |v: &mut Vec<f64>, q: f64| quantile(v, q);
        let mut loss: Vec<f64> = self
            .samples
            .iter()
            .filter_map(|s| s.hold_ns.map(|h| (h - s.loss_ns) as f64 / 1e6))
            .collect();
        println!(
            "deny-hold: {}/{n} matched ({}; map epoch moved while the action streamed: loss to the first hold setpoint taken by the vehicle p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; setpoints of the action taken after the hold: {})",
            self.deny_hold_matched(),
            crate::px4_panels::cold_starts_text(self.cold_starts),
            ms(&mut loss, 0.5),
            ms(&mut loss, 0.99),
            ms(&mut loss, 1.0),
            self.samples
                .iter()
                .map(|s| s.stale_after_hold)
                .sum::<usize>()
        );
        println!("px4-latency: {n}/{n} matched (ordering held in every run)");
        println!("  segment (ms)                                   p50      p95      p99");
        let rows: [Row; 10] = [
            ("admission (gateway's own)", |s| s.admission_ns),
            ("final gate (gateway's own)", |s| s.gate_ns),
            ("agent POST to reply (+ HTTP)", |s| s.reply_ns - s.post_ns),
            ("agent POST to the gate's receipt", |s| {
                s.gate_at_ns - s.post_ns
            }),
            ("gate's receipt to the bridge's first send", |s| {
                s.sent_at_ns - s.gate_at_ns
            }),
            ("bridge's first send to first vehicle setpoint", |s| {
                s.vehicle_ns - s.sent_at_ns
            }),
            ("agent POST to first vehicle setpoint", |s| {
                s.vehicle_ns - s.post_ns
            }),
            ("first setpoint to within 0.3 m", |s| {
                s.converged_ns - s.vehicle_ns
            }),
            ("map update to the support-lost receipt", |s| {
                s.lost_at_ns.unwrap_or(s.loss_ns) - s.loss_ns
            }),
            ("support-lost receipt to first hold setpoint", |s| {
                s.hold_ns
                    .unwrap_or(0)
                    .saturating_sub(s.lost_at_ns.unwrap_or(0))
            }),
        ];
        for (name, f) in rows {
            let mut v: Vec<f64> = self.samples.iter().map(|s| f(s) as f64 / 1e6).collect();
            println!(
                "  {name:<44} {:>8.2} {:>8.2} {:>8.2}",
                ms(&mut v, 0.5),
                ms(&mut v, 0.95),
                ms(&mut v, 0.99)
            );
        }
        println!(
            "  protocol computation (admission + gate) is the first two rows; the rest is HTTP and the service's queue (POST to the gate's receipt), the receipt's write and the release to the bridge's stream (receipt to the bridge's first send), UDP and PX4's 20 ms control tick (send to first vehicle setpoint), the vehicle's flight; the deny path splits at the gateway's support-lost receipt ({:.0} s wall)",
            self.wall_s
        );
    }
}

/// A table row: its label and the segment it reads from a sample.
type Row = (&'static str, fn(&Sample) -> u64);

/// The `q` quantile (nearest rank) of `v`, 0 when empty.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a rank within the slice"
    )]
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied().unwrap_or(0.0)
}

/// "1 cold start", "10 cold starts".
pub(crate) fn cold_starts_text(n: usize) -> String {
    format!("{n} cold start{}", if n == 1 { "" } else { "s" })
}

pub(crate) fn ns_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[allow(
    clippy::cast_possible_truncation,
    reason = "as the bridge sends them (f32)"
)]
pub(crate) fn fingerprint(t: [f64; 4]) -> String {
    sitl::sim::px4::fingerprint(t[0] as f32, t[1] as f32, t[2] as f32, t[3] as f32)
}

/// A histogram's `_sum` from the gateway's Prometheus text, s.
fn metric_sum(c: &Client, name: &str) -> f64 {
    let url = format!("{}/metrics", c.url);
    let text = c
        .http
        .get(&url)
        .header("Authorization", &format!("Bearer {}", c.operator))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    let key = format!("halo_{name}_sum ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn secs_to_ns(s: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a non-negative duration"
    )]
    let ns = (s.max(0.0) * 1e9).round() as u64;
    ns
}

/// Runs `cold_starts` cold starts of `per_start` actions each, writing each cold start's files
/// under `out/cold-N/`.
///
/// # Errors
/// [`DemoError`] when a step cannot run, the vehicle does not respond, or a run's ordering
/// does not hold (a harness error).
pub async fn run(
    catalog: Catalog,
    out: &Path,
    cold_starts: usize,
    per_start: usize,
    peer: &Peer,
) -> Result<Report, DemoError> {
    let t0 = Instant::now();
    let mut report = Report {
        cold_starts,
        ..Report::default()
    };
    // One clock for the whole run: the simulator's records, PX4's reports and the agent's
    // instants are all nanoseconds since `origin`.
    let origin = t0;
    let observer = PeerObserver::start(peer, origin)?;
    let result = cold_starts_run(
        &catalog,
        out,
        cold_starts,
        per_start,
        peer,
        origin,
        observer.get(),
    )
    .await;
    observer.stop().await;
    report.samples = result?;
    report.wall_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

async fn cold_starts_run(
    catalog: &Catalog,
    out: &Path,
    cold_starts: usize,
    per_start: usize,
    peer: &Peer,
    origin: Instant,
    observer: Option<&Arc<GcsObserver>>,
) -> Result<Vec<Sample>, DemoError> {
    let mut all = Vec::new();
    for k in 0..cold_starts {
        let dir = out.join(format!("cold-{k}"));
        let (svc, evidence) = cold_start(
            peer,
            catalog,
            &dir,
            k,
            origin,
            observer,
            &crate::demo::Eval::default(),
        )
        .await?;
        let map_epoch = Arc::new(AtomicU64::new(7));
        let stop = Arc::new(AtomicBool::new(false));
        let me = Arc::clone(&map_epoch);
        let feeds = feed(
            svc.url(),
            svc.credentials().provider.expose().to_string(),
            Arc::clone(&stop),
            move |at| sitl::sim::world::provider_updates(me.load(Ordering::Relaxed), at),
        );
        let mut client = Client::for_service(&svc, catalog.clone(), &dir, origin, true)?;
        let me = Arc::clone(&map_epoch);
        let samples = tokio::task::spawn_blocking(move || {
            flight(&mut client, evidence.as_ref(), &me, origin, k, per_start)
        })
        .await
        .map_err(err("panel script"))?;
        stop.store(true, Ordering::Relaxed);
        let _ = tokio::task::spawn_blocking(move || feeds.join()).await;
        let offset = u64::try_from(svc.origin().saturating_duration_since(origin).as_nanos())
            .unwrap_or(u64::MAX);
        let receipts = svc.receipts_path().to_path_buf();
        stop_service(svc, &dir).await?;
        crate::demo::draw_panel_run(&receipts, &dir);
        let mut samples = samples?;
        gateway_instants(
            &receipts,
            &dir.join("bridge-setpoints.jsonl"),
            offset,
            &mut samples,
        )?;
        all.extend(samples);
        println!(
            "  cold start {}/{cold_starts}: {} actions, {:.0} s so far",
            k + 1,
            per_start,
            origin.elapsed().as_secs_f64()
        );
    }
    Ok(all)
}

/// Fills in each sample's instants from the gateway's own records, on its clock (`offset` ns
/// after the runner's origin): its final gate for the action and the support loss (its
/// receipts), the bridge's first send of the action's target (its setpoint log, by binding);
/// then refuses a run whose order does not hold (POST < gate < send < first vehicle setpoint;
/// map update < support lost < first hold setpoint).
///
/// # Errors
/// [`DemoError`] when the records cannot be read or an order does not hold.
fn gateway_instants(
    receipts: &Path,
    bridge_log: &Path,
    offset: u64,
    samples: &mut [Sample],
) -> Result<(), DemoError> {
    let text = std::fs::read_to_string(receipts).map_err(err("receipts"))?;
    let mut sent = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(bridge_log)
        .map_err(err("the bridge's setpoint log"))?
        .lines()
    {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let (Some(b), Some(t)) = (r["binding"].as_str(), r["t_ns"].as_u64()) {
            sent.entry(b.to_string())
                .or_insert(t.saturating_add(offset));
        }
    }
    let mut binding = std::collections::BTreeMap::new();
    let mut gate = std::collections::BTreeMap::new();
    let mut lost = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let b = &r["body"];
        let (Some(kind), Some(rid)) = (b["kind"].as_str(), b["response"].as_str()) else {
            continue;
        };
        let at = r["at_ns"].as_u64().unwrap_or(0).saturating_add(offset);
        match kind {
            "gate" if b["outcome"] == "dispatched" => {
                gate.entry(rid.to_string()).or_insert(at);
                if let Some(x) = b["binding"].as_str() {
                    binding.entry(rid.to_string()).or_insert(x.to_string());
                }
            }
            "support_lost" => {
                lost.entry(rid.to_string()).or_insert(at);
            }
            _ => {}
        }
    }
    for s in samples.iter_mut() {
        s.gate_at_ns = gate.get(&s.rid).copied().unwrap_or(0);
        s.sent_at_ns = binding
            .get(&s.rid)
            .and_then(|b| sent.get(b))
            .copied()
            .unwrap_or(0);
        s.lost_at_ns = lost.get(&s.rid).copied();
        let ordered = s.post_ns < s.gate_at_ns
            && s.gate_at_ns <= s.sent_at_ns
            && s.sent_at_ns < s.vehicle_ns
            && s.lost_at_ns.is_some_and(|l| s.loss_ns < l)
            && s.lost_at_ns.zip(s.hold_ns).is_none_or(|(l, h)| l < h);
        if !ordered {
            let ms = |t: u64| format!("{:.3} ms", t as f64 / 1e6);
            return Err(DemoError(format!(
                "{}: the gateway's instants are out of order with the runner's, so the run is refused (POST {}, final gate {}, the bridge's first send {}, first vehicle setpoint {}, map update {}, support lost {}, hold {})",
                s.rid,
                ms(s.post_ns),
                ms(s.gate_at_ns),
                ms(s.sent_at_ns),
                ms(s.vehicle_ns),
                ms(s.loss_ns),
                s.lost_at_ns.map_or_else(|| "none".into(), ms),
                s.hold_ns.map_or_else(|| "none".into(), ms)
            )));
        }
    }
    Ok(())
}

/// A fresh service for cold start `k` writing under `dir`, flying the peer: a fresh simulated
/// PX4 (seed `1000 + k`: its own ground offset and heartbeat phase) or the running PX4 whose
/// reports `observer` receives. Returns the service and the evidence of what the vehicle took.
///
/// # Errors
/// [`DemoError`] when the simulator or the service cannot start.
pub(crate) async fn cold_start(
    peer: &Peer,
    catalog: &Catalog,
    dir: &Path,
    k: usize,
    origin: Instant,
    observer: Option<&Arc<GcsObserver>>,
    eval: &crate::demo::Eval,
) -> Result<(Service, Arc<dyn Evidence + Send + Sync>), DemoError> {
    let mut cfg = demo_config(dir)?;
    Ok(match peer {
        Peer::Sim => {
            let sim_cfg = sitl::sim::px4::SimConfig {
                seed: 1000 + k as u64,
                ..sitl::sim::px4::SimConfig::default()
            };
            let (svc, sim) = crate::demo::start_on_sim_as(
                cfg,
                catalog,
                &dir.join("vehicle-setpoints.jsonl"),
                sim_cfg,
                origin,
                eval,
            )
            .await?;
            (svc, Arc::new(sim))
        }
        Peer::Px4 { url, .. } => {
            let obs: Arc<dyn Evidence + Send + Sync> = match observer {
                Some(o) => Arc::clone(o) as Arc<dyn Evidence + Send + Sync>,
                None => return Err(DemoError("no ground-station observer".into())),
            };
            cfg.vehicle.url = Some(url.clone());
            let embedded = crate::service::Embedded {
                variant: eval.variant,
                gate_delay: eval.gate_delay,
                ..crate::service::Embedded::default()
            };
            let svc = Service::start_with(cfg, catalog.clone(), embedded)
                .await
                .map_err(err("service"))?;
            (svc, obs)
        }
    })
}

/// One cold start's flight: take off, then `per_start` actions back to back, each streamed,
/// observed at the vehicle, then lost to a map epoch change.
fn flight(
    c: &mut Client,
    sim: &dyn Evidence,
    map_epoch: &Arc<AtomicU64>,
    origin: Instant,
    k: usize,
    per_start: usize,
) -> Result<Vec<Sample>, DemoError> {
    c.arm_and_take_off(5.0)?;
    // Targets a few metres apart around the hover point, in PX4's local frame.
    let down = sim
        .position()
        .ok_or_else(|| DemoError("no position from the vehicle".into()))?[2]
        - 1.0;
    let mut samples = Vec::new();
    for i in 0..per_start {
        let epoch = map_epoch.load(Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss, reason = "a small index")]
        let step = (i % 4) as f64;
        let target = [
            2.0 + step,
            1.0 + step * 0.5,
            (down * 10.0).round() / 10.0,
            0.0,
        ];
        let rid = format!("panel-{k}-{i}");
        let cert = format!("cert-{k}-{i}");
        let comp = json!({"id": "a", "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": target[0], "east_m": target[1],
                        "down_m": target[2], "yaw_deg": target[3], "duration_s": 20.0},
            "support": {"map": {"epoch": epoch}, "traffic": {"epoch": 41},
                        "bounds": {"epoch": 3, "provenance": "corridor-12"}},
            "certificate": cert});
        let env = json!({"response_id": rid, "agent_id": "planner-1", "generation": i + 1,
            "catalog": {"id": "uav-px4", "version": 6}, "components": [comp]});
        c.certify(&env, "a", &cert)?;
        let (adm0, gate0) = (
            metric_sum(c, "admission_seconds"),
            metric_sum(c, "gate_seconds"),
        );
        let post_ns = ns_since(origin);
        let rep = c.submit("/v1/responses", &env)?;
        let reply_ns = ns_since(origin);
        if rep["components"][0]["phase"] != "dispatched" {
            return Err(DemoError(format!("{rid} was not dispatched: {rep}")));
        }
        let (adm1, gate1) = (
            metric_sum(c, "admission_seconds"),
            metric_sum(c, "gate_seconds"),
        );
        let fp = fingerprint(target);
        let taken = |after: u64| {
            sim.records_after(after)
                .into_iter()
                .find(|(_, f)| *f == fp)
                .map(|(t, _)| t)
        };
        if !c.wait(10, |_| taken(post_ns).is_some()) {
            return Err(DemoError(format!(
                "{rid}: the vehicle never took the action"
            )));
        }
        let vehicle_ns = taken(post_ns).unwrap_or(0);
        let near = || {
            sim.position().is_some_and(|p| {
                ((p[0] - target[0]).powi(2)
                    + (p[1] - target[1]).powi(2)
                    + (p[2] - target[2]).powi(2))
                .sqrt()
                    < 0.3
            })
        };
        if !c.wait(15, |_| near()) {
            return Err(DemoError(format!(
                "{rid}: the vehicle did not reach its target"
            )));
        }
        let converged_ns = ns_since(origin);
        // The map moves while the action streams: its support is lost.
        let new_epoch = epoch + 1;
        map_epoch.store(new_epoch, Ordering::Relaxed);
        let update = sitl::sim::world::provider_updates(
            new_epoch,
            crate::service::infra::clock::wall_now_ms(),
        )
        .into_iter()
        .find(|(s, _)| *s == "map")
        .map(|(_, b)| b)
        .unwrap_or(Value::Null);
        let loss_ns = ns_since(origin);
        let (st, v) = c.call("POST", "/v1/state/map", &c.provider.clone(), &update);
        if st != 200 {
            return Err(DemoError(format!("map update refused: {v}")));
        }
        let hold = |after: u64| {
            sim.records_after(after)
                .into_iter()
                .find(|(_, f)| *f != fp)
                .map(|(t, _)| t)
        };
        c.wait(3, |_| hold(loss_ns).is_some());
        std::thread::sleep(Duration::from_millis(300));
        let hold_ns = hold(loss_ns);
        let stale_after_hold = hold_ns.map_or(0, |h| {
            sim.records_after(h + 1)
                .iter()
                .filter(|(_, f)| *f == fp)
                .count()
        });
        let s = Sample {
            post_ns,
            reply_ns,
            admission_ns: secs_to_ns(adm1 - adm0),
            gate_ns: secs_to_ns(gate1 - gate0),
            vehicle_ns,
            converged_ns,
            loss_ns,
            hold_ns,
            stale_after_hold,
            rid: rid.clone(),
            gate_at_ns: 0,
            sent_at_ns: 0,
            lost_at_ns: None,
        };
        // A run whose order does not hold is the harness's error, not a result.
        let ordered = s.post_ns < s.reply_ns
            && s.post_ns < s.vehicle_ns
            && s.vehicle_ns < s.converged_ns
            && s.converged_ns < s.loss_ns
            && s.hold_ns.is_none_or(|h| h > s.loss_ns)
            && s.admission_ns > 0
            && s.admission_ns < s.reply_ns - s.post_ns;
        if !ordered {
            let ms = |t: u64| format!("{:.3} ms", t as f64 / 1e6);
            return Err(DemoError(format!(
                "{rid}: the recorded instants are out of order, so the run is refused (POST {}, reply {}, first vehicle setpoint {}, converged {}, map update {}, hold {}; admission {}, gate {})",
                ms(s.post_ns),
                ms(s.reply_ns),
                ms(s.vehicle_ns),
                ms(s.converged_ns),
                ms(s.loss_ns),
                s.hold_ns.map_or_else(|| "none".into(), ms),
                ms(s.admission_ns),
                ms(s.gate_ns)
            )));
        }
        samples.push(s);
    }
    let _ = c.operator("land", &json!({}));
    c.wait(30, |c| c.status()["vehicle"]["armed"] == false);
    Ok(samples)
}
