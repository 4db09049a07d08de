//! `halo-sitl`: start a simulated vehicle by hand.
//!
//! ```text
//! halo-sitl px4 --port 14540            # send to 127.0.0.1:14540 from 0.0.0.0:14580, like PX4 SITL
//! halo-sitl px4 --instance 1            # ports + 1, like a second PX4 SITL instance
//! halo-sitl px4 --gcs-port 18570        # a ground station (pymavlink, QGC) on udp 18570
//! halo-sitl px4 --log setpoints.jsonl --drop 0.05 --delay-ms 20 --clock-offset-ms 5000
//! halo-sitl crazyflie --port 19850      # a Crazyflie: one UDP datagram = one CRTP packet
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use clap::{Parser, Subcommand};
use sitl::sim::px4::{LossAction, SimConfig};
use sitl::sim::udp::{SimControl, UdpOptions};

#[derive(Parser)]
#[command(
    name = "halo-sitl",
    version,
    about = "Simulated vehicles for halo-gateway"
)]
struct Cli {
    #[command(subcommand)]
    vehicle: Vehicle,
}

#[derive(Subcommand)]
enum Vehicle {
    /// A PX4 multicopter over MAVLink 2 / UDP.
    Px4 {
        /// Offboard port the vehicle sends to (PX4 SITL: 14540).
        #[arg(long, default_value_t = 14540)]
        port: u16,
        /// Host the vehicle sends to.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
        /// Local port the vehicle sends from (PX4 SITL: 14580).
        #[arg(long, default_value_t = 14580)]
        bind_port: u16,
        /// Instance number; adds N to both ports, like PX4 SITL's `-i`.
        #[arg(long, default_value_t = 0)]
        instance: u16,
        /// Append every setpoint the controller takes to this JSON-lines file.
        #[arg(long)]
        log: Option<PathBuf>,
        /// Packet loss probability, both directions.
        #[arg(long, default_value_t = 0.0)]
        drop: f64,
        /// One-way delay on what the vehicle sends, ms.
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// The autopilot clock runs this far ahead, ms.
        #[arg(long, default_value_t = 0)]
        clock_offset_ms: i64,
        /// The autopilot clock's rate error, ppm (PX4 SITL under load: about -10000, 1 % slow).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        clock_drift_ppm: i64,
        /// What to do when the offboard stream stops in the air.
        #[arg(long, value_enum, default_value = "posctl")]
        loss_action: Loss,
        /// Stop after this many seconds (runs until Ctrl-C otherwise).
        #[arg(long)]
        duration_s: Option<u64>,
        /// Ground-station port (PX4 SITL's GCS link: 18570; 0 for none). A ground station that
        /// sends from it (pymavlink `udpout:HOST:18570`) gets the vehicle's stream and can
        /// switch modes as a pilot would.
        #[arg(long, default_value_t = 18570)]
        gcs_port: u16,
    },
    /// A Crazyflie 2.1 speaking CRTP over UDP: one datagram is one packet (header byte first);
    /// replies go to the newest sender.
    Crazyflie {
        /// UDP port to listen on (127.0.0.1).
        #[arg(long, default_value_t = 19850)]
        port: u16,
        /// Append every setpoint the vehicle takes to this JSON-lines file.
        #[arg(long)]
        log: Option<PathBuf>,
        /// Stop after this many seconds (runs until Ctrl-C otherwise).
        #[arg(long)]
        duration_s: Option<u64>,
    },
}

/// A single-threaded tokio runtime, or `None` after saying why not.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            None
        }
    }
}

fn crazyflie(port: u16, log: Option<PathBuf>, duration_s: Option<u64>) -> std::process::ExitCode {
    let Some(rt) = runtime() else {
        return std::process::ExitCode::FAILURE;
    };
    let result = rt.block_on(async move {
        let v = sitl::sim::crazyflie::SimCrazyflie::start(
            sitl::sim::crazyflie::CfSimConfig::default(),
            log.as_deref(),
        )?;
        let bind = SocketAddr::from(([127, 0, 0, 1], port));
        let sock = tokio::net::UdpSocket::bind(bind).await?;
        println!("halo-sitl crazyflie: CRTP over udp {bind} (one datagram per packet)");
        sitl::sim::crazyflie::serve_udp(sock, v, async move {
            match duration_s {
                Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        })
        .await
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Loss {
    Posctl,
    Hold,
    Land,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cli = Cli::parse();
    if let Vehicle::Crazyflie {
        port,
        log,
        duration_s,
    } = cli.vehicle
    {
        return crazyflie(port, log, duration_s);
    }
    let Vehicle::Px4 {
        port,
        host,
        bind_port,
        instance,
        log,
        drop,
        delay_ms,
        clock_offset_ms,
        clock_drift_ppm,
        loss_action,
        duration_s,
        gcs_port,
    } = cli.vehicle
    else {
        return std::process::ExitCode::FAILURE;
    };
    if !(0.0..=1.0).contains(&drop) {
        eprintln!("error: --drop must be between 0 and 1");
        return std::process::ExitCode::from(2);
    }
    let Some(rt) = runtime() else {
        return std::process::ExitCode::FAILURE;
    };
    let result = rt.block_on(async move {
        let bind: SocketAddr = SocketAddr::new([0, 0, 0, 0].into(), bind_port.saturating_add(instance));
        let remote = SocketAddr::new(host, port.saturating_add(instance));
        let gcs = (gcs_port != 0).then(|| {
            SocketAddr::new([0, 0, 0, 0].into(), gcs_port.saturating_add(instance))
        });
        let socket = sitl::sim::udp::bind(bind).await?;
        let control = SimControl::default();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked range")]
        control.drop_ppm.store((drop * 1e6) as u32, Ordering::Relaxed);
        control.delay_ms.store(delay_ms, Ordering::Relaxed);
        let config = SimConfig {
            clock_offset_ms,
            clock_drift_ppm,
            loss_action: match loss_action {
                Loss::Posctl => LossAction::Posctl,
                Loss::Hold => LossAction::Hold,
                Loss::Land => LossAction::Land,
            },
            ..SimConfig::default()
        };
        println!("halo-sitl px4: system 1 on udp {bind}, sending to {remote}");
        let (tx, rx) = tokio::sync::broadcast::channel(1);
        let opts = UdpOptions { bind, remote: Some(remote), config, setpoint_log: log, seed: 1, gcs, signing_key: None };
        let c2 = control.clone();
        let sim = tokio::spawn(async move { sitl::sim::udp::run(socket, opts, c2, rx).await });
        let status = control.clone();
        let reporter = tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                let v = status.view();
                println!(
                    "mode {}.{} {} height {:.2} m  n {:.2} e {:.2}  battery {:.1}%  setpoints taken {}",
                    v.mode.0,
                    v.mode.1,
                    if v.armed { "armed" } else { "disarmed" },
                    v.height_m,
                    v.position[0],
                    v.position[1],
                    v.battery_pct,
                    v.stats.setpoints_accepted
                );
            }
        });
        match duration_s {
            Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        let _ = tx.send(());
        reporter.abort();
        sim.await.map_err(std::io::Error::other)?
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
