//! The tokio shell over real transports: UDP against the simulator on a socket, and a serial
//! link through a pseudo-terminal pair. Real time; a few seconds each.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use px4_bridge::shell::{BridgeOptions, start};
use px4_bridge::{Command, CommandOutcome, Event, Mono, Px4Mode, Setpoint};
use sitl::peer::PythonPeer;
use sitl::sim::px4::{Px4Sim, SimConfig};
use sitl::sim::udp::{SimControl, UdpOptions};
use tokio::sync::{broadcast, mpsc};

/// How much longer than on an idle machine a wall-clock wait may take before it is a failure.
const SLACK: u64 = 5;

async fn wait_for(
    rx: &mut mpsc::Receiver<Event>,
    log: &mut Vec<Event>,
    secs: u64,
    mut f: impl FnMut(&Event) -> bool,
) -> bool {
    // `secs` is how long it takes on an idle machine; the bound is five times that, so a loaded
    // two-core CI machine passes while a real hang still fails.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs * SLACK);
    if log.iter().any(&mut f) {
        return true;
    }
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) => {
                let hit = f(&e);
                log.push(e);
                if hit {
                    return true;
                }
            }
            _ => return false,
        }
    }
}

/// `tests/py/gcs_watch.py` running against the simulator's ground-station port.
struct GcsWatcher(PythonPeer);

impl GcsWatcher {
    async fn start(port: u32) -> GcsWatcher {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/gcs_watch.py");
        let args = [port.to_string()];
        let peer = tokio::task::spawn_blocking(move || {
            PythonPeer::start(&script, &[args[0].as_str(), "300"], true)
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
        GcsWatcher(peer)
    }

    /// Stops watching (closes its input) and returns its report.
    async fn finish(self) -> serde_json::Value {
        let out = tokio::task::spawn_blocking(move || self.0.finish())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "the ground station failed: {}",
            out.stderr
        );
        out.report().unwrap()
    }
}

async fn command(
    h: &px4_bridge::shell::BridgeHandle,
    rx: &mut mpsc::Receiver<Event>,
    log: &mut Vec<Event>,
    c: Command,
) -> CommandOutcome {
    let before = log.len();
    h.command(c).unwrap();
    let mut out = None;
    assert!(
        wait_for(rx, log, 6, |e| match e {
            Event::Command {
                command, outcome, ..
            } if *command == c => {
                out = Some(*outcome);
                true
            }
            _ => false,
        })
        .await,
        "no outcome for {c:?}"
    );
    let _ = before;
    out.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_bridge_flies_the_simulator_and_survives_a_link_loss() {
    let (tx, _) = broadcast::channel(1);
    let sock = sitl::sim::udp::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let sim_addr: SocketAddr = sock.local_addr().unwrap();
    let control = SimControl::default();
    let opts = UdpOptions {
        bind: sim_addr,
        remote: None,
        config: SimConfig {
            ready_after_ms: 500,
            ..SimConfig::default()
        },
        setpoint_log: None,
        seed: 3,
        gcs: Some("127.0.0.1:0".parse().unwrap()),
        signing_key: None,
    };
    let sim_task = tokio::spawn(sitl::sim::udp::run(
        sock,
        opts,
        control.clone(),
        tx.subscribe(),
    ));
    // An independent observer: a pymavlink ground station on the simulator's GCS port, which
    // records what the vehicle reports as its target.
    let mut gcs_port = 0;
    for _ in 0..500 {
        gcs_port = control.gcs_port.load(std::sync::atomic::Ordering::Relaxed);
        if gcs_port != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(gcs_port, 0, "the simulator bound no ground-station port");
    let watcher = GcsWatcher::start(gcs_port).await;

    let mut bopts = BridgeOptions::new(&format!("udpout:{sim_addr}"), std::time::Instant::now());
    // The test is the operator who handed the vehicle to the bridge.
    bopts.config.offboard_permitted_at_start = true;
    let (h, mut rx, task) = start(bopts, tx.subscribe()).await.unwrap();
    let mut log = Vec::new();
    assert!(
        wait_for(&mut rx, &mut log, 5, |e| matches!(
            e,
            Event::Link { up: true, .. }
        ))
        .await,
        "no link"
    );
    assert!(
        wait_for(&mut rx, &mut log, 5, |e| matches!(
            e,
            Event::TimeSync { synced: true, .. }
        ))
        .await,
        "no TIMESYNC"
    );

    // Stream, enter OFFBOARD, arm, climb to 3 m.
    let climb = Setpoint {
        north_m: 0.0,
        east_m: 0.0,
        down_m: -3.0,
        yaw_deg: 0.0,
    };
    h.try_enqueue(climb, [1; 32], Mono(h.now().0 + 30_000_000_000))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        command(
            &h,
            &mut rx,
            &mut log,
            Command::SetMode {
                mode: Px4Mode::OFFBOARD
            }
        )
        .await,
        CommandOutcome::Accepted
    );
    assert_eq!(
        command(&h, &mut rx, &mut log, Command::Arm).await,
        CommandOutcome::Accepted
    );
    let t0 = Instant::now();
    while -control.view().position[2] < 2.8 {
        assert!(
            t0.elapsed() < Duration::from_secs(12 * SLACK),
            "did not climb"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Fly 3 m east for an 8 s interval; the vehicle's log shows the exact target.
    let go = Setpoint {
        north_m: 0.0,
        east_m: 3.0,
        down_m: -3.0,
        yaw_deg: 90.0,
    };
    let until = Mono(h.now().0 + 8_000_000_000);
    h.try_enqueue(go, [2; 32], until).unwrap();
    assert!(
        wait_for(
            &mut rx,
            &mut log,
            6,
            |e| matches!(e, Event::TargetObserved { binding, .. } if *binding == [2; 32])
        )
        .await
    );
    assert!(
        wait_for(
            &mut rx,
            &mut log,
            10,
            |e| matches!(e, Event::TargetExpired { binding, .. } if *binding == [2; 32])
        )
        .await
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let v = control.view();
    let fp = go.fingerprint().to_string();
    assert!(v.setpoints.iter().filter(|r| r.fingerprint == fp).count() > 20);
    // PX4 holds 0.2–0.6 m off its target (docs/px4.md).
    assert!((v.position[1] - 3.0).abs() < 0.7, "east {}", v.position[1]);

    // What the ground station saw: PX4's target report at about 50 Hz; the target, then the
    // bridge's hold at the vehicle's position (distinguishable: PX4 held off the target), and
    // never the target again; the switch where the vehicle's own log puts it.
    let seen = watcher.finish().await;
    let rate = seen["count"].as_f64().unwrap() / seen["seconds"].as_f64().unwrap();
    assert!(
        (40.0..=60.0).contains(&rate),
        "target reports at {rate:.1} Hz"
    );
    let runs = seen["runs"].as_array().unwrap();
    let at = runs
        .iter()
        .position(|r| r["fp"] == fp.as_str())
        .unwrap_or_else(|| panic!("the ground station never saw {fp}: {runs:?}"));
    let hold = runs.get(at + 1).expect("a hold after the target");
    let off = |r: &serde_json::Value, k: &str, v: f32| r[k].as_f64().unwrap() - f64::from(v);
    let moved = off(hold, "x", go.north_m).hypot(off(hold, "y", go.east_m));
    assert!(
        (0.1..=0.8).contains(&moved),
        "the hold is {moved:.2} m from the expired target"
    );
    assert!(
        runs[at + 1..].iter().all(|r| r["fp"] != fp.as_str()),
        "the target was reported again after the hold: {runs:?}"
    );
    let hold_fp = hold["fp"].as_str().unwrap();
    let hold_taken_ms = v
        .setpoints
        .iter()
        .find(|r| r.fingerprint == hold_fp)
        .expect("the vehicle's log has the hold")
        .time_boot_ms;
    let (last_go, first_hold) = (
        runs[at]["last_ms"].as_u64().unwrap(),
        hold["first_ms"].as_u64().unwrap(),
    );
    assert!(
        last_go < hold_taken_ms && first_hold >= hold_taken_ms && first_hold - last_go <= 45,
        "reports: target until {last_go} ms, hold from {first_hold} ms; the log: hold taken at {hold_taken_ms} ms"
    );
    println!(
        "ground station: {rate:.1} Hz target reports; hold {moved:.2} m off the target; target last reported {} ms before the hold was taken",
        hold_taken_ms - last_go
    );

    // Link loss: the vehicle fails safe (POSCTL), the bridge reports the link down.
    control
        .link_down
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let t1 = Instant::now();
    while control.view().mode.0 != 3 {
        assert!(t1.elapsed() < Duration::from_secs(4 * SLACK), "no failsafe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        wait_for(&mut rx, &mut log, 3, |e| matches!(
            e,
            Event::Link { up: false, .. }
        ))
        .await
    );
    assert_eq!(
        h.try_enqueue(go, [3; 32], Mono(h.now().0 + 5_000_000_000)),
        Err(px4_bridge::EnqueueError::LinkDown)
    );
    control
        .link_down
        .store(false, std::sync::atomic::Ordering::Relaxed);
    log.clear();
    assert!(
        wait_for(&mut rx, &mut log, 3, |e| matches!(
            e,
            Event::Link { up: true, .. }
        ))
        .await,
        "no reconnect"
    );
    assert!(h.link_up());

    let _ = tx.send(());
    let _ = task.await;
    let _ = sim_task.await;
}

/// The simulated PX4 on a byte stream (a pty master, a TCP connection) in a plain thread until
/// `stop`: it reads frames from the stream and writes its own; `taken` counts the setpoints its
/// controller takes. The stream must be non-blocking.
fn stream_vehicle<S: Read + Write + Send + 'static>(
    mut io: S,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    taken: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let origin = Instant::now();
        let now = || u64::try_from(origin.elapsed().as_nanos()).unwrap();
        let mut sim = Px4Sim::new(
            SimConfig {
                ready_after_ms: 0,
                ..SimConfig::default()
            },
            now(),
        );
        let mut seq = 0u8;
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = [0u8; 512];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match io.read(&mut buf) {
                Ok(n) if n > 0 => pending.extend_from_slice(&buf[..n]),
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
            // Decode whole frames from the stream; keep a partial frame for the next read.
            loop {
                let Some(start) = pending.iter().position(|b| *b == 0xFD) else {
                    pending.clear();
                    break;
                };
                pending.drain(..start);
                if pending.len() < 12 {
                    break;
                }
                let len = 12 + usize::from(pending[1]) + if pending[2] & 1 == 1 { 13 } else { 0 };
                if pending.len() < len {
                    break;
                }
                let frame: Vec<u8> = pending.drain(..len).collect();
                let (msgs, _) = sitl::sim::wire::decode(&frame);
                for (h, m) in msgs {
                    sim.handle_message(now(), &h, &m);
                }
            }
            sim.handle_timeout(now());
            while let Some(m) = sim.poll_transmit() {
                let bytes = sitl::sim::wire::encode(sim.header(), &m, &mut seq);
                let _ = io.write_all(&bytes);
            }
            while sim.poll_setpoint().is_some() {
                taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
}

/// The bridge on `url` against a vehicle already on the other end of the stream: discovered,
/// link up, OFFBOARD and armed by command, setpoints taken by the vehicle.
async fn fly_over_a_stream(url: String, taken: &std::sync::atomic::AtomicU64, what: &str) {
    let (tx, _) = broadcast::channel(1);
    let mut bopts = BridgeOptions::new(&url, std::time::Instant::now());
    // The test is the operator who handed the vehicle to the bridge.
    bopts.config.offboard_permitted_at_start = true;
    let (h, mut rx, task) = start(bopts, tx.subscribe()).await.unwrap();
    let mut log = Vec::new();
    assert!(
        wait_for(&mut rx, &mut log, 5, |e| matches!(
            e,
            Event::AutopilotDiscovered {
                system_id: 1,
                component_id: 1
            }
        ))
        .await
    );
    assert!(
        wait_for(&mut rx, &mut log, 5, |e| matches!(
            e,
            Event::Link { up: true, .. }
        ))
        .await
    );
    let sp = Setpoint {
        north_m: 0.0,
        east_m: 0.0,
        down_m: -2.0,
        yaw_deg: 0.0,
    };
    h.try_enqueue(sp, [4; 32], Mono(h.now().0 + 20_000_000_000))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        command(
            &h,
            &mut rx,
            &mut log,
            Command::SetMode {
                mode: Px4Mode::OFFBOARD
            }
        )
        .await,
        CommandOutcome::Accepted
    );
    assert_eq!(
        command(&h, &mut rx, &mut log, Command::Arm).await,
        CommandOutcome::Accepted
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        taken.load(std::sync::atomic::Ordering::Relaxed) > 5,
        "setpoints did not reach the vehicle over {what}"
    );
    let _ = tx.send(());
    let _ = task.await;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn serial_transport_through_a_pseudo_terminal() {
    // The vehicle side runs on the pty master in a plain thread; the bridge opens the slave.
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave_path = nix::unistd::ttyname(&pty.slave).unwrap();
    let master = std::fs::File::from(pty.master);
    // Raw mode on the line, so no byte is translated.
    let mut t = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
    nix::sys::termios::cfmakeraw(&mut t);
    nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &t).unwrap();
    // Non-blocking reads so the vehicle keeps its own schedule.
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let vehicle = stream_vehicle(master, stop.clone(), taken.clone());
    let url = format!("serial:{}:921600", slave_path.display());
    runtime().block_on(fly_over_a_stream(url, &taken, "serial"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    vehicle.join().unwrap();
}

/// `tcpin:`: the bridge listens and the flight controller (or a router) connects to it; the
/// start waits for that one connection.
#[test]
fn tcpin_takes_the_flight_controller_that_connects() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (stop2, taken2) = (stop.clone(), taken.clone());
    // The vehicle dials until the bridge listens, as a router configured with the companion's
    // address does.
    let dialer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                s.set_nonblocking(true).unwrap();
                return stream_vehicle(s, stop2, taken2);
            }
            assert!(Instant::now() < deadline, "the bridge never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // MAVSDK's spelling, resolved host name.
    let url = format!("tcpin://localhost:{port}");
    runtime().block_on(fly_over_a_stream(url, &taken, "tcpin"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    dialer.join().unwrap().join().unwrap();
}
