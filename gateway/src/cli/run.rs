//! `halo-gateway run`: the service, until a signal (or the end of the stdio agent link).

use std::path::PathBuf;

use super::{EXIT_ERROR, EXIT_OK, EXIT_RECEIPTS};

/// The agent link besides HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentLink {
    /// HTTP only.
    Http,
    /// JSON lines on standard input and output too.
    Stdio,
}

/// The MCP server on standard input and output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum McpLink {
    /// One MCP session on standard input and output, for an agent host that spawns the gateway.
    Stdio,
}

/// `run`'s options (the evaluation binary's `run` takes the same).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Configuration file (TOML); see configs/ and docs/run.md.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Catalog file; overrides the configuration and the embedded catalog.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
    /// Vehicle: a MAVLink URL (`udpin:127.0.0.1:14540` for PX4 SITL,
    /// `serial:/dev/ttyAMA0:921600` for a Pixhawk on TELEM2) or a Crazyflie URI
    /// (`radio://0/80/2M/E7E7E7E7E7`, `usb://0`).
    #[arg(long)]
    pub vehicle: Option<String>,
    /// Vehicle kind: `px4` or `crazyflie`.
    #[arg(long, value_enum)]
    pub vehicle_kind: Option<crate::service::config::VehicleKind>,
    /// HTTP listen address, e.g. 127.0.0.1:8640 (port 0 picks one).
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// State directory (boot epoch, credentials, receipts).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Log filter (`info`, `debug`, `halo_gateway=debug`); `RUST_LOG` wins.
    #[arg(long)]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long, value_enum)]
    pub log_format: Option<crate::service::config::LogFormat>,
    /// Agent link: `http` (always on) or also `stdio`, JSON lines on standard input and
    /// output for an agent that spawns the gateway; end of input stops the gateway.
    #[arg(long, value_enum, default_value = "http")]
    pub agent: AgentLink,
    /// `stdio`: serve the Model Context Protocol on standard input and output (an MCP host
    /// spawns the gateway; standard output carries only MCP, logs go to stderr; the session's
    /// end stops the gateway). MCP over streamable HTTP is always at `/mcp` on the listener.
    #[arg(long, value_enum, conflicts_with = "agent")]
    pub mcp: Option<McpLink>,
    /// Validate the configuration, the catalog, the contract domain and the vehicle URL as
    /// `run` would, print what would run, and exit (0 when all is well) without starting
    /// anything or touching the state directory.
    #[arg(long)]
    pub check: bool,
}

impl RunArgs {
    /// The configuration file (or the defaults) with the command line's overrides.
    ///
    /// # Errors
    /// The configuration error, for people.
    pub fn config(&self) -> Result<crate::service::Config, crate::error::Error> {
        let mut cfg = match &self.config {
            Some(p) => crate::service::Config::load(p)
                .map_err(|e| crate::error::Error::config(e.to_string()))?,
            None => crate::service::Config::default(),
        };
        if let Some(c) = &self.catalog {
            cfg.catalog.path = Some(c.clone());
        }
        if let Some(v) = &self.vehicle {
            cfg.vehicle.url = Some(v.clone());
        }
        if let Some(l) = self.listen {
            cfg.listen.http = l;
        }
        if let Some(d) = &self.state_dir {
            cfg.state.dir = Some(d.clone());
        }
        if let Some(l) = &self.log_level {
            cfg.log.level = l.clone();
        }
        if let Some(f) = self.log_format {
            cfg.log.format = f;
        }
        if let Some(k) = self.vehicle_kind {
            cfg.vehicle.kind = k;
        }
        cfg.vehicle
            .check_url()
            .map_err(|e| crate::error::Error::config(format!("vehicle: {e}")))?;
        Ok(cfg)
    }
}

/// `halo-gateway run`: the flight binary flies the vehicle its configuration names, and only
/// that (it links no simulator).
pub fn run_service(a: &RunArgs) -> i32 {
    let cfg = match a.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    if a.check {
        return super::setup::check_run(&cfg, a.config.as_deref(), false);
    }
    if let Err(e) = cfg.vehicle.url_or_refuse() {
        eprintln!("error: {e}");
        return EXIT_ERROR;
    }
    run_configured(a, cfg, |cfg| async move {
        Ok((cfg, crate::service::Embedded::default()))
    })
}

/// Runs the service on `cfg` after `embed` prepared it inside the runtime (the evaluation
/// binary starts its simulator there and names it in the configuration), until a signal or
/// the end of the stdio link. The exit code as `run`'s.
pub fn run_configured<F, Fut>(a: &RunArgs, cfg: crate::service::Config, embed: F) -> i32
where
    F: FnOnce(crate::service::Config) -> Fut,
    Fut: std::future::Future<
            Output = Result<
                (crate::service::Config, crate::service::Embedded),
                crate::error::Error,
            >,
        >,
{
    use crate::service::{Service, banner, init_tracing};
    init_tracing(cfg.log.format, &cfg.log.level);
    // Before the runtime: its threads, and the ones they start, inherit the setting.
    match crate::service::infra::realtime::apply(&cfg.realtime) {
        Ok(None) => {}
        Ok(Some(p)) => tracing::info!(
            "real-time scheduling: the gateway's threads run SCHED_FIFO at priority {p}"
        ),
        Err(e) => {
            tracing::warn!("{e}");
            eprintln!("warning: {e}");
        }
    }
    let cat = match cfg.catalog() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let Some(rt) = tokio_runtime() else {
        return EXIT_ERROR;
    };
    let mcp_stdio = a.mcp == Some(McpLink::Stdio);
    let stdio = a.agent == AgentLink::Stdio || mcp_stdio;
    rt.block_on(async move {
        let (cfg, embedded) = match embed(cfg).await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        };
        let svc = match Service::start_with(cfg, cat, embedded).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return super::start_exit_code(&e);
            }
        };
        // Stdout may be a closed pipe (a supervisor that stopped reading): never panic on it.
        use std::io::Write as _;
        let say = |s: &str| {
            let mut out = std::io::stdout();
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        };
        // With the stdio agent link, standard output is the protocol: people read stderr.
        let tell = |s: &str| {
            if stdio {
                eprint!("{s}");
            } else {
                say(s);
            }
        };
        use std::io::IsTerminal as _;
        tell(&banner(&svc, !stdio && std::io::stdout().is_terminal()));
        #[cfg(unix)]
        tokio::spawn(reload_on_hangup(svc.reloader()));
        if mcp_stdio {
            let link = svc.serve_mcp_stdio();
            tokio::select! {
                () = wait_for_signal() => {}
                r = link => match r {
                    Ok(Err(e)) => eprintln!("error: {e}"),
                    _ => tell("the MCP client closed the session\n"),
                },
            }
        } else if stdio {
            let link = svc.serve_stdio();
            tokio::select! {
                () = wait_for_signal() => {}
                _ = link => tell("the agent closed standard input\n"),
            }
        } else {
            wait_for_signal().await;
        }
        tell("shutting down: holding the vehicle, flushing receipts\n");
        let receipts = svc.receipts_path().to_path_buf();
        svc.shutdown();
        match svc.wait().await {
            Ok(n) => match &n.failure {
                None => {
                    tell(&format!(
                        "stopped; {} receipts in {}\n",
                        n.written,
                        receipts.display()
                    ));
                    EXIT_OK
                }
                Some(why) => {
                    eprintln!(
                        "error: the receipt log failed during the run ({why}): {} receipts are on disk in {}, {} could not be written{}",
                        n.written,
                        receipts.display(),
                        n.lost,
                        if n.lost == 0 {
                            " (the reserve took every record)"
                        } else {
                            "; `halo-gateway audit verify` checks the part on disk"
                        }
                    );
                    EXIT_RECEIPTS
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                super::start_exit_code(&e)
            }
        }
    })
}

/// The two-worker runtime the service and the demo run on; says why on stderr when it cannot
/// start.
pub fn tokio_runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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

/// SIGHUP re-reads what can change without a restart (the TLS certificate and key), each
/// time, for the life of the process. Without it SIGHUP's default would end the gateway.
#[cfg(unix)]
async fn reload_on_hangup(reloader: crate::service::Reloader) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "cannot take SIGHUP; reload by restarting");
            return;
        }
    };
    while hup.recv().await.is_some() {
        for line in reloader.reload() {
            match line {
                Ok(l) => tracing::info!("{l}"),
                Err(l) => tracing::warn!("{l}"),
            }
        }
    }
}

/// Ctrl-C or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
