//! The embedded simulated vehicles the evaluation binary runs the service on: the simulated
//! PX4 on a loopback UDP port pair of its own (it speaks only to the bridge that speaks to it,
//! never to a well-known port), and the simulated Crazyflie as an in-process link for bitcraze's
//! crazyflie-lib. The flight binary links neither.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crazyflie_bridge::shell::{ConnectError, LinkFuture, LinkOpener};
use halo_gateway::service::config::VehicleKind;
use halo_gateway::service::{Config, Embedded};

/// Opens links to an embedded simulated Crazyflie.
pub struct SimOpener(pub sitl::sim::crazyflie::SimCrazyflie);

impl LinkOpener for SimOpener {
    fn open(&self) -> LinkFuture {
        let v = self.0.clone();
        Box::pin(async move {
            Ok::<_, ConnectError>(crazyflie_link::Connection::new(Box::new(v.link().await)))
        })
    }

    fn describe(&self) -> String {
        "the embedded simulated Crazyflie".into()
    }
}

/// A running embedded simulator and how to reach it.
pub enum Sim {
    /// The simulated PX4 on loopback UDP.
    Px4 {
        /// Its controls and view.
        control: sitl::sim::udp::SimControl,
        /// Its socket.
        addr: SocketAddr,
        /// Stops it.
        stop: tokio::sync::broadcast::Sender<()>,
    },
    /// The simulated Crazyflie.
    Crazyflie(sitl::sim::crazyflie::SimCrazyflie),
}

impl Sim {
    /// The simulated PX4's controls, when that is the vehicle.
    pub fn px4(&self) -> Option<&sitl::sim::udp::SimControl> {
        match self {
            Sim::Px4 { control, .. } => Some(control),
            Sim::Crazyflie(_) => None,
        }
    }
}

/// The simulated PX4 on loopback UDP with `sim` as its settings, its clock (every setpoint
/// record's `t_ns`) measured from `origin`, so that a caller's own timestamps compare with it.
///
/// # Errors
/// The simulator's socket cannot be bound.
pub async fn start_px4_at(
    mut cfg: Config,
    setpoint_log: Option<&Path>,
    sim: sitl::sim::px4::SimConfig,
    origin: std::time::Instant,
) -> Result<(Config, Embedded, Sim), String> {
    let sock = sitl::sim::udp::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("embedded simulator socket: {e}"))?;
    let addr = sock
        .local_addr()
        .map_err(|e| format!("embedded simulator socket: {e}"))?;
    let control = sitl::sim::udp::SimControl::default();
    let (stop, _) = tokio::sync::broadcast::channel(1);
    let opts = sitl::sim::udp::UdpOptions {
        bind: addr,
        // Never a well-known port: it speaks only to the bridge that speaks to it.
        remote: None,
        config: sim,
        setpoint_log: setpoint_log.map(Path::to_path_buf),
        seed: 11,
        gcs: None,
        signing_key: None,
    };
    tokio::spawn(sitl::sim::udp::run_with_origin(
        sock,
        opts,
        control.clone(),
        stop.subscribe(),
        origin,
    ));
    cfg.vehicle.url = Some(format!("udpout:{addr}"));
    Ok((
        cfg,
        Embedded {
            note: Some("embedded simulated PX4".into()),
            ..Embedded::default()
        },
        Sim::Px4 {
            control,
            addr,
            stop,
        },
    ))
}

/// Starts the simulator `cfg`'s vehicle kind calls for (on the current tokio runtime), with its
/// own log of the setpoints it took at `setpoint_log`, and returns the configuration pointed at
/// it, what the service takes in place of a link, and the simulator.
///
/// # Errors
/// The socket or the simulated Crazyflie cannot start.
pub async fn start(
    mut cfg: Config,
    setpoint_log: Option<&Path>,
) -> Result<(Config, Embedded, Sim), String> {
    match cfg.vehicle.effective_kind() {
        VehicleKind::Px4 => {
            start_px4_at(
                cfg,
                setpoint_log,
                sitl::sim::px4::SimConfig::default(),
                std::time::Instant::now(),
            )
            .await
        }
        VehicleKind::Crazyflie => {
            let v = sitl::sim::crazyflie::SimCrazyflie::start(
                sitl::sim::crazyflie::CfSimConfig::default(),
                setpoint_log,
            )
            .map_err(|e| format!("embedded simulated Crazyflie: {e}"))?;
            cfg.vehicle.url = Some("sim".into());
            Ok((
                cfg,
                Embedded {
                    crazyflie: Some(Arc::new(SimOpener(v.clone()))),
                    note: Some("embedded simulated Crazyflie".into()),
                    ..Embedded::default()
                },
                Sim::Crazyflie(v),
            ))
        }
    }
}
