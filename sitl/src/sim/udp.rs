//! The simulated PX4 on a real UDP socket, as PX4 SITL runs: it sends from its bind port to the
//! offboard port (14540 by default) and replies to whoever sends to it.
//!
//! Test controls (link loss, delay, packet drop) are live through [`SimControl`]; the clock
//! offset is part of [`SimConfig`]. Every setpoint the vehicle's controller takes is appended to
//! a JSON-lines log when one is given.

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::broadcast;

use crate::sim::px4::{Px4Sim, SetpointRecord, SimConfig, SimStats};
use crate::sim::wire;

/// Live controls and a view of the vehicle.
#[derive(Clone, Default)]
pub struct SimControl {
    /// Drop everything in both directions.
    pub link_down: Arc<AtomicBool>,
    /// One-way delay added to what the vehicle sends, ms.
    pub delay_ms: Arc<AtomicU64>,
    /// Loss probability in parts per million, both directions.
    pub drop_ppm: Arc<AtomicU32>,
    /// The ground-station port once bound (0 before, or without one).
    pub gcs_port: Arc<AtomicU32>,
    /// With a signing key: frames refused because they were not validly signed, both links.
    pub unsigned_refused: Arc<AtomicU64>,
    /// A battery charge to report from now on, percent (taken by the simulator's next turn;
    /// it then drains from there as before).
    pub set_battery: Arc<Mutex<Option<f64>>>,
    view: Arc<Mutex<SimView>>,
}

/// A snapshot of the vehicle, refreshed by the running simulator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimView {
    /// Position in PX4's local frame, NED m (the ground is not at 0: see `height_m`).
    pub position: [f64; 3],
    /// Height above the ground, m.
    pub height_m: f64,
    /// Armed.
    pub armed: bool,
    /// (main, sub) mode.
    pub mode: (u8, u8),
    /// On the ground.
    pub on_ground: bool,
    /// Battery, percent.
    pub battery_pct: f64,
    /// Counters.
    pub stats: SimStats,
    /// Every accepted setpoint so far.
    pub setpoints: Vec<SetpointRecord>,
    /// With `SimConfig::record_arrivals`: every setpoint that arrived in OFFBOARD, used by the
    /// controller or replaced before its next tick (`t_ns` = `arrived_ns` here).
    pub arrivals: Vec<SetpointRecord>,
}

impl SimControl {
    /// The latest snapshot.
    pub fn view(&self) -> SimView {
        self.view.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// How to run the simulator.
#[derive(Clone, Debug)]
pub struct UdpOptions {
    /// Local address to bind (PX4 SITL: 0.0.0.0:14580).
    pub bind: SocketAddr,
    /// Where to send until someone sends to us (PX4 SITL: 127.0.0.1:14540); `None`: send
    /// nothing until someone does (the embedded simulator: it never speaks to a well-known
    /// port another program may own).
    pub remote: Option<SocketAddr>,
    /// The vehicle.
    pub config: SimConfig,
    /// Accepted-setpoint log (JSON lines).
    pub setpoint_log: Option<PathBuf>,
    /// Seed for packet loss.
    pub seed: u64,
    /// A ground-station port (PX4 SITL's GCS link; QGroundControl listens on 14550): once a
    /// ground station has sent to it, it receives the GCS link's own streams (with
    /// POSITION_TARGET_LOCAL_NED at about 50 Hz, as PX4 SITL sends) plus command ACKs and
    /// STATUSTEXT, and its commands (a mode switch, as a pilot would make) reach the vehicle.
    /// The offboard link's test controls (loss, delay, drop) do not apply to it. `None`: no
    /// GCS link.
    pub gcs: Option<SocketAddr>,
    /// MAVLink 2 signing on both links, as a PX4 with this key provisioned: what it sends is
    /// signed, and what it receives unsigned or signed with another key is refused
    /// ([`SimControl::unsigned_refused`]). `None`: unsigned, as PX4 without a key.
    pub signing_key: Option<[u8; 32]>,
}

fn rand(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    #[allow(clippy::cast_precision_loss, reason = "a uniform draw")]
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    u
}

/// Receives on the ground-station socket, or never when there is none.
async fn recv_gcs(gcs: Option<&UdpSocket>, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    match gcs {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

/// Binds the socket. Separate from [`run`] so callers can learn the bound port first.
///
/// # Errors
/// The OS error when the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    UdpSocket::bind(addr).await
}

/// Runs the simulator on `socket` until `shutdown` fires.
///
/// # Errors
/// An I/O error from the socket or the log.
pub async fn run(
    socket: UdpSocket,
    opts: UdpOptions,
    control: SimControl,
    shutdown: broadcast::Receiver<()>,
) -> std::io::Result<()> {
    run_with_origin(socket, opts, control, shutdown, Instant::now()).await
}

/// As [`run`], measuring simulation time (the `t_ns` of every setpoint record) from `origin`,
/// so a caller in the same process can put the vehicle's receive times on its own clock.
///
/// # Errors
/// An I/O error from the socket or the log.
pub async fn run_with_origin(
    socket: UdpSocket,
    opts: UdpOptions,
    control: SimControl,
    mut shutdown: broadcast::Receiver<()>,
    origin: Instant,
) -> std::io::Result<()> {
    let now = || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut sim = Px4Sim::new(opts.config, now());
    if opts.gcs.is_some() {
        sim.enable_gcs_link(now());
    }
    let mut gcs_seq = 0u8;
    let mut log = match &opts.setpoint_log {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => None,
    };
    let mut peer: Option<SocketAddr> = None;
    let mut seq = 0u8;
    let mut rng = opts.seed;
    let mut delayed: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; 2048];
    let mut gcs_buf = vec![0u8; 2048];
    let gcs = match opts.gcs {
        Some(a) => Some(UdpSocket::bind(a).await?),
        None => None,
    };
    if let Some(g) = gcs.as_ref() {
        control
            .gcs_port
            .store(u32::from(g.local_addr()?.port()), Ordering::Relaxed);
    }
    let mut gcs_peer: Option<SocketAddr> = None;
    let mut last_view = 0u64;
    let signing = opts.signing_key.map(wire::Signing::new);
    // Every frame in and out goes through here: signed and verified when keyed.
    let decode = |bytes: &[u8]| match &signing {
        Some(s) => {
            let (msgs, _, refused) = s.decode(bytes);
            control
                .unsigned_refused
                .fetch_add(u64::from(refused), Ordering::Relaxed);
            msgs
        }
        None => wire::decode(bytes).0,
    };
    let encode =
        |h: mavlink::MavHeader, m: &mavlink::dialects::common::MavMessage, seq: &mut u8| {
            match &signing {
                Some(s) => s.encode(h, m, seq),
                None => wire::encode(h, m, seq),
            }
        };
    loop {
        let wake = sim
            .poll_timeout()
            .min(delayed.front().map_or(u64::MAX, |d| d.0));
        let wait = Duration::from_nanos(wake.saturating_sub(now()).min(50_000_000));
        tokio::select! {
            biased;
            _ = shutdown.recv() => break,
            () = tokio::time::sleep(wait) => sim.handle_timeout(now()),
            r = recv_gcs(gcs.as_ref(), &mut gcs_buf) => {
                let (n, from) = r?;
                gcs_peer = Some(from);
                let msgs = decode(gcs_buf.get(..n).unwrap_or(&[]));
                let t = now();
                for (h, m) in msgs {
                    sim.handle_gcs_message(t, &h, &m);
                }
            }
            r = socket.recv_from(&mut buf) => {
                let (n, from) = r?;
                let down = control.link_down.load(Ordering::Relaxed);
                let p = f64::from(control.drop_ppm.load(Ordering::Relaxed)) / 1e6;
                if !down && rand(&mut rng) >= p {
                    peer = Some(from);
                    let msgs = decode(buf.get(..n).unwrap_or(&[]));
                    let t = now();
                    for (h, m) in msgs {
                        sim.handle_message(t, &h, &m);
                    }
                }
            }
        }
        let t = now();
        if let Some(pct) = control.set_battery.lock().ok().and_then(|mut b| b.take()) {
            sim.set_battery_pct(pct);
        }
        let delay = control.delay_ms.load(Ordering::Relaxed) * 1_000_000;
        while let Some(m) = sim.poll_transmit() {
            delayed.push_back((t + delay, encode(sim.header(), &m, &mut seq)));
        }
        let to = peer.or(opts.remote);
        while delayed.front().is_some_and(|d| d.0 <= t) {
            let Some((_, bytes)) = delayed.pop_front() else {
                break;
            };
            let down = control.link_down.load(Ordering::Relaxed);
            let p = f64::from(control.drop_ppm.load(Ordering::Relaxed)) / 1e6;
            if down || rand(&mut rng) < p {
                continue;
            }
            // A send error (nobody listening yet) is not fatal for a UDP autopilot.
            if let Some(to) = to {
                let _ = socket.send_to(&bytes, to).await;
            }
        }
        while let Some(m) = sim.poll_transmit_gcs() {
            if let (Some(g), Some(p)) = (gcs.as_ref(), gcs_peer) {
                let _ = g.send_to(&encode(sim.header(), &m, &mut gcs_seq), p).await;
            }
        }
        while let Some((h, m)) = sim.poll_forward_gcs() {
            if let (Some(g), Some(p)) = (gcs.as_ref(), gcs_peer) {
                let mut seq = h.sequence;
                let _ = g.send_to(&encode(h, &m, &mut seq), p).await;
            }
        }
        while let Some(r) = sim.poll_setpoint() {
            if let Some(w) = log.as_mut()
                && let Ok(line) = serde_json::to_string(&r)
            {
                writeln!(w, "{line}")?;
                w.flush()?;
            }
            // Appended in place: the view never copies the whole record list.
            if let Ok(mut v) = control.view.lock() {
                v.setpoints.push(r);
            }
        }
        while let Some(r) = sim.poll_arrival() {
            if let Ok(mut v) = control.view.lock() {
                v.arrivals.push(r);
            }
        }
        if t.saturating_sub(last_view) > 20_000_000 {
            last_view = t;
            if let Ok(mut v) = control.view.lock() {
                *v = SimView {
                    position: sim.position(),
                    height_m: sim.height_m(),
                    armed: sim.armed(),
                    mode: sim.mode(),
                    on_ground: sim.on_ground(),
                    battery_pct: sim.battery_pct(),
                    stats: sim.stats(),
                    setpoints: std::mem::take(&mut v.setpoints),
                    arrivals: std::mem::take(&mut v.arrivals),
                };
            }
        }
    }
    if let Ok(mut v) = control.view.lock() {
        v.stats = sim.stats();
        v.position = sim.position();
        v.height_m = sim.height_m();
        v.armed = sim.armed();
        v.mode = sim.mode();
    }
    Ok(())
}
