//! `halo-gateway run`: the deployable service between an agent and a flight controller.
//!
//! ```text
//! agent ─HTTP/SSE─┐                         ┌─▶ receipts (JSONL, hash-linked)
//! providers ─HTTP─┼─▶ service task (one owner) ┼─▶ final gate ─▶ PX4 bridge ─MAVLink─▶ PX4
//! operator ─HTTP──┘   Gateway + adapter     └─▶ event hub ─▶ SSE
//!                         ▲
//!                 bridge events (telemetry → vehicle sources, echoes → observations)
//! ```
//!
//! One task owns the protocol core; interfaces send it commands over a bounded queue and await
//! the answer. The gate's critical section is the core's synchronous `final_gate`, whose adapter
//! call is the bridge's non-blocking `try_enqueue`.
//!
//! # Rooms
//!
//! Each depends only on the rooms below it (a test holds the import graph acyclic):
//!
//! - [`faces`]: HTTP/SSE, MCP, stdio and the console: protocols turned into the task's commands;
//! - [`task`]: the engine, the one owner of the core, the supervisor and the adapter;
//! - [`api`]: what the faces share below them: the route table, the schemas, the OpenAPI
//!   document, the error form, the digest computation;
//! - [`store`]: the receipt log and the state directory;
//! - [`infra`]: the clock, the event hub, the listener, metrics, real-time scheduling;
//! - [`config`] and this module: the configuration and the wiring that starts the rest.
//!
//! A plane between gateways (the fleet) is a room of its own beside `faces`: it speaks to the
//! task through the same commands and reads the same hub, and nothing below it knows it exists.

pub mod api;
pub mod config;
pub mod faces;
pub mod infra;
#[cfg(test)]
mod rooms;
pub mod store;
pub mod task;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use px4_bridge::shell::BridgeOptions;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

pub use config::Config;
use halo_core::catalog::Catalog;
use halo_core::engine::{Config as CoreConfig, Gateway, ReceiptPolicy};
use halo_core::time::Nanos;
use store::statedir::{CredentialFiles, Credentials};
use task::Task;

/// What went wrong, for people: its message names the thing (the file, the address, the device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why the service could not start, or did not stop cleanly. Each kind has its own exit code
/// (`halo-gateway run`, docs/run.md): a script can tell a wrong configuration from a vehicle it
/// cannot reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartError {
    /// The configuration, the catalog, the contract domain, the vehicle URL or a key named in
    /// the configuration is wrong (exit 3).
    Config(Problem),
    /// A listener cannot bind its address: taken, or not allowed (exit 5).
    Listen(Problem),
    /// The vehicle link cannot open: no such serial device or radio, an address that cannot be
    /// bound, a Crazyflie that does not answer (exit 6).
    Vehicle(Problem),
    /// The state directory cannot be used: permissions, a full disk, a credential or key file
    /// others can read, a receipt log that exists (exit 7).
    State(Problem),
    /// A task of the running service failed (exit 8).
    Task(Problem),
}

impl StartError {
    fn config(message: impl std::fmt::Display) -> StartError {
        StartError::Config(Problem {
            message: message.to_string(),
        })
    }

    fn listen(message: impl std::fmt::Display) -> StartError {
        StartError::Listen(Problem {
            message: message.to_string(),
        })
    }

    fn vehicle(message: impl std::fmt::Display) -> StartError {
        StartError::Vehicle(Problem {
            message: message.to_string(),
        })
    }

    fn state(message: impl std::fmt::Display) -> StartError {
        StartError::State(Problem {
            message: message.to_string(),
        })
    }

    /// The problem, whatever its kind.
    pub fn problem(&self) -> &Problem {
        match self {
            StartError::Config(p)
            | StartError::Listen(p)
            | StartError::Vehicle(p)
            | StartError::State(p)
            | StartError::Task(p) => p,
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.problem().fmt(f)
    }
}

impl std::error::Error for StartError {}

/// `ctx: error` as a [`StartError`] of kind `kind`.
fn within<E: std::fmt::Display>(
    kind: fn(String) -> StartError,
    ctx: &str,
) -> impl FnOnce(E) -> StartError + '_ {
    move |e| kind(format!("{ctx}: {e}"))
}

/// A running service.
pub struct Service {
    /// The bound HTTP address.
    http_addr: SocketAddr,
    /// The operator's own listener.
    operator_addr: SocketAddr,
    op_http: JoinHandle<()>,
    /// `https` or `http`.
    scheme: &'static str,
    /// What SIGHUP re-reads.
    reloader: Reloader,
    /// The role credentials.
    credentials: Credentials,
    /// Where they are stored.
    credential_files: CredentialFiles,
    /// This start's boot epoch.
    boot_epoch: u64,
    /// The state directory.
    state_dir: PathBuf,
    /// The receipt log.
    receipts_path: PathBuf,
    /// The audit key's public half (hex in a file), for `audit verify --key`.
    audit_public_key: PathBuf,
    /// The vehicle URL the bridge uses.
    vehicle_url: String,
    /// What the vehicle is, when the caller said (the evaluation binary's embedded simulator).
    vehicle_note: Option<String>,
    /// The instant the receipts' `at_ns` counts from.
    origin: Instant,
    shutdown: watch::Sender<bool>,
    shutdown_rx: watch::Receiver<bool>,
    cmds: mpsc::Sender<task::Cmd>,
    hub: infra::hub::Hub,
    /// The MCP server's shared part (`/mcp`, `--mcp stdio`).
    mcp: Arc<faces::mcp::Shared>,
    stop_bridge: broadcast::Sender<()>,
    task: JoinHandle<Task>,
    http: JoinHandle<()>,
    bridge: Option<JoinHandle<()>>,
    /// Kept for the service's lifetime (an embedded simulator's stop handle).
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// What a caller that brings its own vehicle gives [`Service::start_with`]: the evaluation
/// binary's embedded simulators. The flight binary passes the default (nothing: the
/// configured URL is the vehicle).
#[derive(Default)]
pub struct Embedded {
    /// Opens the links to a Crazyflie in place of `vehicle.url`.
    pub crazyflie: Option<Arc<dyn crazyflie_bridge::shell::LinkOpener>>,
    /// Said after the vehicle URL in the banner ("embedded simulated PX4").
    pub note: Option<String>,
    /// Kept until the service stops, then dropped (a simulator's stop handle).
    pub guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Evaluation only (the private `__evaluation` feature): the mechanism variant the core
    /// runs (`Full`, the product, when absent). No configuration key or flag reaches it, and
    /// the flight binary is built without it; the evaluation binary's mechanism panel sets it
    /// to measure what each mechanism buys.
    #[cfg(feature = "__evaluation")]
    pub variant: Option<halo_core::Variant>,
    /// Evaluation only: the final gate runs this long after an action's token is ready rather
    /// than at once, so a harness can change the world between admission and the gate (the
    /// HALO paper's late-drift order: admission, mutation, final gate). Absent: at once.
    /// Only with `__evaluation`, as `variant`.
    #[cfg(feature = "__evaluation")]
    pub gate_delay: Option<Duration>,
}

impl Embedded {
    /// Keeps `guard` (a simulator's stop handle) until the service stops.
    #[must_use]
    pub fn keeping(mut self, guard: impl std::any::Any + Send + Sync) -> Embedded {
        self.guard = Some(Box::new(guard));
        self
    }
}

/// What a start writes in the state directory, once everything is validated and bound.
struct TouchedState {
    boot_epoch: u64,
    credentials: Credentials,
    credential_files: CredentialFiles,
    principals: Arc<infra::principals::Principals>,
    principal_files_created: Vec<PathBuf>,
    signer: crate::audit::Signer,
    audit_public_key: PathBuf,
    receipts: store::receipts::ReceiptLog,
    previous_head: Option<task::PreviousHead>,
}

/// The state directory's part of a start: the boot epoch bumped, the credentials and the audit
/// key loaded or created, the receipt log opened with its reserve. Nothing is deleted.
fn touch_state(
    cfg: &Config,
    state_dir: &Path,
    configured_key: Option<crate::audit::Signer>,
    serials: Arc<infra::client_cert::RevokedSerials>,
) -> Result<TouchedState, StartError> {
    std::fs::create_dir_all(state_dir).map_err(within(
        StartError::state,
        &format!("cannot create the state directory {}", state_dir.display()),
    ))?;
    let boot_epoch = store::statedir::bump_boot_epoch(state_dir).map_err(StartError::state)?;
    let (credentials, credential_files) = store::statedir::credentials(
        state_dir,
        cfg.auth.agent_file.as_deref(),
        cfg.auth.provider_file.as_deref(),
        cfg.auth.operator_file.as_deref(),
    )
    .map_err(StartError::state)?;
    let revoked = cfg.auth.revoked_file.as_deref();
    let (principals, principal_files_created) = if cfg.principals.is_empty() {
        let p = infra::principals::Principals::from_roles(&credential_files, revoked, serials)
            .map_err(StartError::state)?;
        (p, Vec::new())
    } else {
        let specs: Vec<infra::principals::PrincipalSpec> = cfg
            .principals
            .iter()
            .map(|p| infra::principals::PrincipalSpec {
                name: p.name.clone(),
                role: p.role.role(),
                credential: p.credential(),
                sources: p.sources.clone(),
            })
            .collect();
        infra::principals::Principals::configured(&specs, revoked, serials)
            .map_err(StartError::state)?
    };
    let key_path = cfg
        .receipts
        .signing_key
        .clone()
        .unwrap_or_else(|| state_dir.join("audit-key"));
    let signer = match configured_key {
        Some(s) => s,
        None => {
            let (s, created) =
                crate::audit::Signer::load_or_create(&key_path).map_err(StartError::state)?;
            if created {
                tracing::info!(key = %key_path.display(), "created the audit key");
            }
            s
        }
    };
    let audit_public_key = crate::audit::public_path(&key_path);
    if !audit_public_key.exists() {
        signer
            .write_public(&audit_public_key)
            .map_err(StartError::state)?;
    }
    let receipts_path = cfg.receipts.path.clone().unwrap_or_else(|| {
        state_dir
            .join("receipts")
            .join(format!("boot-{boot_epoch}.jsonl"))
    });
    let dir = receipts_path
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let exported = store::receipts::Exported::load(&dir).map_err(StartError::state)?;
    let previous_head = task::PreviousHead::find(&dir, &receipts_path);
    let log = store::receipts::ReceiptLog::open(
        &receipts_path,
        store::receipts::Options {
            max_bytes: cfg.receipts.max_file_bytes,
            max_files: cfg.receipts.max_files,
            reserve_bytes: cfg.receipts.reserve_bytes,
        },
        exported,
    )
    .map_err(|e| {
        StartError::state(if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "the receipt log {} already exists; receipts.path names one start's log: move it away, or leave receipts.path unset for one log per start",
                receipts_path.display()
            )
        } else {
            format!(
                "cannot open the receipt log {}: {e}",
                receipts_path.display()
            )
        })
    })?;
    Ok(TouchedState {
        boot_epoch,
        credentials,
        credential_files,
        principals: Arc::new(principals),
        principal_files_created,
        signer,
        audit_public_key,
        receipts: log,
        previous_head,
    })
}

/// A started vehicle link.
struct StartedVehicle {
    url: String,
    link: crate::vehicle::VehicleLink,
    events: task::VehicleEvents,
    task: Option<JoinHandle<()>>,
}

/// PX4 on the configured MAVLink URL.
async fn start_px4(
    cfg: &Config,
    origin: Instant,
    stop_bridge: &broadcast::Sender<()>,
) -> Result<StartedVehicle, StartError> {
    let vehicle_url = cfg.vehicle.url_or_refuse().map_err(StartError::config)?;
    let mut bopts = BridgeOptions::new(&vehicle_url, origin);
    bopts.setpoint_log = cfg.vehicle.setpoint_log.clone();
    bopts.config.link_timeout_ms = cfg.vehicle.link_timeout_ms;
    bopts.config.stream_hz = cfg.vehicle.stream_hz;
    bopts.config.offboard_permitted_at_start = cfg.vehicle.control_at_start;
    bopts.config.system_id = cfg.vehicle.system_id;
    bopts.config.component_id = cfg.vehicle.component_id;
    bopts.config.autopilot_system = cfg.vehicle.autopilot_system_id;
    bopts.signing = cfg.vehicle.signing_key().map_err(StartError::state)?;
    bopts.gcs = cfg
        .gcs
        .forward
        .as_deref()
        .map(px4_bridge::gcs::GcsEndpoint::parse)
        .transpose()
        .map_err(|e| StartError::config(format!("gcs.forward: {e}")))?;
    if let Ok(url @ px4_bridge::url::TransportUrl::TcpIn(_)) =
        px4_bridge::url::TransportUrl::parse(&vehicle_url)
    {
        eprintln!("waiting for the flight controller to connect to {url}");
    }
    // The bridge has a thread of its own: its stream is never queued behind the service.
    let (handle, bridge_rx, bridge) =
        px4_bridge::shell::start_on_own_thread(bopts, stop_bridge.subscribe())
            .await
            .map_err(within(StartError::vehicle, "vehicle link"))?;
    Ok(StartedVehicle {
        url: vehicle_url,
        link: crate::vehicle::VehicleLink::Px4(handle),
        events: task::VehicleEvents::Px4(bridge_rx),
        task: Some(bridge),
    })
}

/// A Crazyflie on the radio/USB URI (or the caller's opener). The first connect's failure (no
/// dongle, a Crazyflie that does not answer) stops the start with its message.
async fn start_crazyflie(
    cfg: &Config,
    origin: Instant,
    state_dir: &std::path::Path,
    embedded: Option<Arc<dyn crazyflie_bridge::shell::LinkOpener>>,
) -> Result<StartedVehicle, StartError> {
    use crazyflie_bridge::shell::{BridgeOptions as CfOptions, LinkOpener, UriOpener};
    let (opener, url): (Arc<dyn LinkOpener>, String) = match embedded {
        Some(o) => (
            o,
            cfg.vehicle.url.clone().unwrap_or_else(|| "embedded".into()),
        ),
        None => {
            let url = cfg.vehicle.url_or_refuse().map_err(StartError::config)?;
            let o = UriOpener::new(&url).map_err(within(StartError::config, "vehicle.url"))?;
            (Arc::new(o), url)
        }
    };
    let mut o = CfOptions::new(opener, origin);
    o.setpoint_log = cfg.vehicle.setpoint_log.clone();
    o.config.stream_hz = cfg.vehicle.stream_hz;
    o.config.link_timeout_ms = cfg.vehicle.link_timeout_ms;
    o.connect_timeout_ms = cfg.vehicle.connect_timeout_ms;
    o.toc_cache_dir = Some(
        cfg.vehicle
            .toc_cache_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("crazyflie-toc")),
    );
    let (handle, events) = crazyflie_bridge::shell::start(o)
        .await
        .map_err(within(StartError::vehicle, "Crazyflie"))?;
    Ok(StartedVehicle {
        url,
        link: crate::vehicle::VehicleLink::Crazyflie(handle),
        events: task::VehicleEvents::Crazyflie(events),
        task: None,
    })
}

/// What the service task is built from, besides the configuration.
struct CoreParts {
    link: crate::vehicle::VehicleLink,
    clock: infra::clock::Clock,
    log: store::receipts::ReceiptLog,
    hub: infra::hub::Hub,
    metrics: Arc<infra::metrics::Metrics>,
    boot_epoch: u64,
    signer: crate::audit::Signer,
    previous_head: Option<task::PreviousHead>,
    vehicle_url: String,
    #[cfg(feature = "__evaluation")]
    variant: halo_core::Variant,
    #[cfg(feature = "__evaluation")]
    gate_delay: Option<Duration>,
}

/// The service task: the protocol core over `catalog`, the mission-contract monitor over `domain`,
/// the supervisor, the receipt log with its signing, as the configuration sets them.
fn build_task(
    cfg: &Config,
    catalog: Catalog,
    domain: halo_core::contract::Domain,
    p: CoreParts,
) -> Task {
    let receipts_policy = match cfg.receipts.policy {
        config::ReceiptPolicyName::All => ReceiptPolicy::All,
        config::ReceiptPolicyName::Decisions => ReceiptPolicy::Decisions {
            summary_every: halo_core::time::Nanos::from_ms(
                cfg.receipts.summary_every_s.saturating_mul(1000),
            ),
        },
    };
    let gw = Gateway::new(
        catalog,
        CoreConfig {
            boot_epoch: p.boot_epoch,
            receipts: receipts_policy,
            max_live_responses: cfg.limits.max_live_responses,
            done_retention: Nanos::from_ms(cfg.limits.done_retention_ms),
            #[cfg(feature = "__evaluation")]
            variant: p.variant,
            ..CoreConfig::default()
        },
    );
    let task = Task::new(
        gw,
        halo_core::contract::Monitor::new(domain),
        p.link,
        p.clock,
        Some(p.log),
        p.hub,
        p.metrics,
        p.boot_epoch,
    )
    .with_signing(task::Signing::new(
        p.signer,
        cfg.receipts.checkpoint_every,
        Duration::from_secs(cfg.receipts.checkpoint_interval_s),
    ))
    .with_full_action(match cfg.receipts.full_action {
        config::FullActionName::Refuse => task::FullAction::Refuse,
        config::FullActionName::Land => task::FullAction::Land,
    })
    .with_previous_head(p.previous_head)
    .with_vehicle_url(&p.vehicle_url)
    .with_certifier(cfg.certifier.clone())
    .with_pilot_texts(cfg.vehicle.statustext);
    #[cfg(feature = "__evaluation")]
    let task = task.with_gate_delay(p.gate_delay);
    task
}

/// Serves the main listener with `state` and the operator's own listener with the same routes
/// for the operator credential only, each with its caps and timeouts.
fn serve_http(
    cfg: &Config,
    (listener, op_listener): (tokio::net::TcpListener, tokio::net::TcpListener),
    tls: Option<Arc<infra::tls::Tls>>,
    state: faces::http::AppState,
    boot: u64,
) -> (JoinHandle<()>, JoinHandle<()>) {
    let l = &cfg.listen;
    let layers = faces::http::Layers {
        body_timeout: Duration::from_millis(l.body_timeout_ms),
        request_timeout: Duration::from_millis(l.request_timeout_ms),
        boot,
    };
    let (shutdown, metrics) = (state.shutdown.clone(), Arc::clone(&state.metrics));
    // The operator's listener: the same principals' rates, its own backoff table.
    let op_state = faces::http::AppState {
        operator_only: true,
        limits: Arc::new(state.limits.sharing_rates()),
        ..state.clone()
    };
    let app = faces::http::router(state, &layers);
    let op_app = faces::http::router(op_state, &layers);
    let limits = infra::listener::Limits {
        max_connections: l.max_connections,
        max_per_peer: l.max_connections_per_peer,
        header_timeout: Duration::from_millis(l.header_timeout_ms),
        write_timeout: Duration::from_millis(l.write_timeout_ms),
    };
    let op_limits = infra::listener::Limits {
        max_connections: l.operator_max_connections,
        max_per_peer: 8.min(l.operator_max_connections),
        ..limits.clone()
    };
    if l.insecure_plaintext {
        tokio::spawn(warn_plaintext(l.plaintext_exposed(), shutdown.clone()));
    }
    let http = tokio::spawn(infra::listener::serve(
        "main",
        listener,
        app,
        limits,
        tls.clone(),
        shutdown.clone(),
        Arc::clone(&metrics),
    ));
    let op_http = tokio::spawn(infra::listener::serve(
        "operator",
        op_listener,
        op_app,
        op_limits,
        tls,
        shutdown,
        metrics,
    ));
    (http, op_http)
}

/// `listen.insecure_plaintext`: a warning at start and every minute while a listener other
/// machines reach serves plaintext.
async fn warn_plaintext(
    exposed: Vec<(&'static str, SocketAddr)>,
    mut shutdown: watch::Receiver<bool>,
) {
    if exposed.is_empty() {
        return;
    }
    let names = exposed
        .iter()
        .map(|(k, a)| format!("{k} {a}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = every.tick() => tracing::warn!(
                listeners = %names,
                "listen.insecure_plaintext: plaintext HTTP on an address other machines reach; every credential crosses the network in clear (give [listen.tls] a certificate)"
            ),
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
}

/// What SIGHUP re-reads: the listeners' TLS certificate and key. A file that does not load
/// keeps what is in use and says why; nothing else changes.
#[derive(Clone)]
pub struct Reloader {
    tls: Option<Arc<infra::tls::Tls>>,
    principals: Arc<infra::principals::Principals>,
    /// `[[principals]]` (not the three role credentials).
    configured: bool,
    principal_files_created: Vec<PathBuf>,
    metrics: Arc<infra::metrics::Metrics>,
}

impl Reloader {
    /// Re-reads everything reloadable; one line per part, for the log.
    pub fn reload(&self) -> Vec<Result<String, String>> {
        let mut out = Vec::new();
        if let Some(tls) = &self.tls {
            let f = tls.files();
            let r = tls.reload();
            let code = r.as_ref().err().map_or("ok", infra::tls::TlsError::code);
            self.metrics
                .tls_reloads
                .get_or_create(&infra::metrics::CodeLabel { code: code.into() })
                .inc();
            out.push(match r {
                Ok(()) => Ok(format!(
                    "TLS: {} and {} reloaded; new connections use them, open ones keep theirs",
                    f.cert_file.display(),
                    f.key_file.display()
                )),
                Err(e) => Err(format!(
                    "TLS: not reloaded ({}): {e}; the listeners keep the certificate in use",
                    e.code()
                )),
            });
        }
        let r = self.principals.reload();
        let code = if r.is_ok() { "ok" } else { "refused" };
        self.metrics
            .credential_reloads
            .get_or_create(&infra::metrics::CodeLabel { code: code.into() })
            .inc();
        out.push(match r {
            Ok(r) => Ok(format!(
                "credentials: {} principals re-read{}{}; a refused credential's open streams are closed",
                r.principals,
                if r.rotated.is_empty() {
                    String::new()
                } else {
                    format!(", new credentials for {}", r.rotated.join(", "))
                },
                if r.revoked.is_empty() {
                    String::new()
                } else {
                    format!(", revoked now: {}", r.revoked.join(", "))
                }
            )),
            Err(e) => Err(format!(
                "credentials: not reloaded: {}; the credentials in force stay",
                e.message()
            )),
        });
        out
    }

    /// The principals in force.
    pub fn principals(&self) -> &Arc<infra::principals::Principals> {
        &self.principals
    }
}

/// Each source's owner, the map the HTTP face checks a provider's write against.
fn source_owners(
    catalog: &Catalog,
) -> std::collections::BTreeMap<String, halo_core::catalog::Owner> {
    catalog
        .sources()
        .iter()
        .map(|s| (s.name.to_string(), s.owner))
        .collect()
}

/// An evaluation start with a reduced mechanism variant says so loudly.
#[cfg(feature = "__evaluation")]
fn warn_variant(variant: Option<halo_core::Variant>) {
    if let Some(v) = variant.filter(|v| *v != halo_core::Variant::Full) {
        tracing::warn!(
            variant = v.name(),
            "evaluation: the core runs a reduced mechanism variant, not the product"
        );
    }
}

/// Binds the main listener and the operator's own, before anything else is touched.
async fn bind_listeners(
    cfg: &Config,
) -> Result<
    (
        tokio::net::TcpListener,
        tokio::net::TcpListener,
        SocketAddr,
        SocketAddr,
    ),
    StartError,
> {
    let listener = tokio::net::TcpListener::bind(cfg.listen.http)
        .await
        .map_err(within(
            StartError::listen,
            &format!("cannot listen on {}", cfg.listen.http),
        ))?;
    let http_addr = listener
        .local_addr()
        .map_err(within(StartError::listen, "listener"))?;
    let op_want = cfg.listen.operator_addr();
    let op_listener = tokio::net::TcpListener::bind(op_want)
        .await
        .map_err(within(
            StartError::listen,
            &format!("cannot listen on {op_want} (listen.operator, the operator's own listener)"),
        ))?;
    let operator_addr = op_listener
        .local_addr()
        .map_err(within(StartError::listen, "listener"))?;
    Ok((listener, op_listener, http_addr, operator_addr))
}

/// What `/v1/status` and the banner say of the vehicle link besides its URL: the embedder's
/// note, MAVLink signing, the ground-station relay.
fn vehicle_note_of(cfg: &Config, note: Option<String>) -> Option<String> {
    let signing = cfg.vehicle.signing_key_file.as_ref().map(|_| {
        if cfg.vehicle.accept_unsigned {
            "MAVLink signed; unsigned frames accepted"
        } else {
            "MAVLink signed"
        }
    });
    let relay = cfg
        .gcs
        .forward
        .as_ref()
        .map(|f| format!("ground station relayed on {f}"));
    [note, signing.map(str::to_string), relay]
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a}; {b}"))
}

impl Service {
    /// Starts everything: state directory, credentials, the vehicle link, the service task and the
    /// HTTP listeners.
    ///
    /// # Errors
    /// [`StartError`] naming what could not start.
    pub async fn start(cfg: Config, catalog: Catalog) -> Result<Service, StartError> {
        Service::start_with(cfg, catalog, Embedded::default()).await
    }

    /// As [`Service::start`], on a vehicle the caller brings ([`Embedded`]).
    ///
    /// # Errors
    /// [`StartError`] naming what could not start.
    pub async fn start_with(
        cfg: Config,
        catalog: Catalog,
        embedded: Embedded,
    ) -> Result<Service, StartError> {
        // Validate and bind everything first: a start that fails touches no state (no boot
        // epoch bumped, no file created, no receipt log rotated).
        let state_dir = cfg.state_dir();
        let configured_key = match &cfg.receipts.signing_key {
            Some(p) => Some(
                crate::audit::Signer::load(p)
                    .map_err(within(StartError::config, "receipts.signing_key"))?,
            ),
            None => None,
        };
        let domain = cfg.domain().map_err(StartError::config)?;
        cfg.check_principals_against(&catalog)
            .map_err(StartError::config)?;
        // The revoked certificate serials: the handshake reads them, the principals keep them.
        let serials = Arc::new(infra::client_cert::RevokedSerials::default());
        let tls = match &cfg.listen.tls {
            Some(t) => Some(Arc::new(
                infra::tls::Tls::load(t.files(), Arc::clone(&serials))
                    .map_err(within(StartError::config, "listen.tls"))?,
            )),
            None => None,
        };
        let (listener, op_listener, http_addr, operator_addr) = bind_listeners(&cfg).await?;

        // The one clock: the bridges, the task and the faces' arrival stamps count from it.
        let clock = infra::clock::Clock::start();
        let origin = clock.origin();
        let (stop_bridge, _) = broadcast::channel(1);

        let Embedded {
            crazyflie,
            note: vehicle_note,
            guard,
            #[cfg(feature = "__evaluation")]
            variant,
            #[cfg(feature = "__evaluation")]
            gate_delay,
        } = embedded;
        let vehicle_note = vehicle_note_of(&cfg, vehicle_note);
        #[cfg(feature = "__evaluation")]
        warn_variant(variant);
        let vehicle = match cfg.vehicle.effective_kind() {
            config::VehicleKind::Px4 => start_px4(&cfg, origin, &stop_bridge).await?,
            config::VehicleKind::Crazyflie => {
                start_crazyflie(&cfg, origin, &state_dir, crazyflie).await?
            }
        };
        let StartedVehicle {
            url: vehicle_url,
            link,
            events: bridge_rx,
            task: bridge,
        } = vehicle;
        // From here on state is touched; a failure stops the vehicle link it started.
        let stop_vehicle = |e: StartError| {
            let _ = stop_bridge.send(());
            e
        };
        let touched =
            touch_state(&cfg, &state_dir, configured_key, serials).map_err(stop_vehicle)?;
        let TouchedState {
            boot_epoch,
            credentials,
            credential_files,
            principals,
            principal_files_created,
            signer,
            audit_public_key,
            receipts: log,
            previous_head,
        } = touched;
        let receipts_path = log.current().to_path_buf();

        let envelope_schema = Arc::new(api::schema::envelope_schema(&catalog).to_string());
        let owners = Arc::new(source_owners(&catalog));
        let hub = infra::hub::Hub::new(boot_epoch);
        let metrics = Arc::new(infra::metrics::Metrics::new());
        let mcp_catalog = Arc::new(catalog.clone());
        let task = build_task(
            &cfg,
            catalog,
            domain,
            CoreParts {
                link,
                clock,
                log,
                hub: hub.clone(),
                metrics: Arc::clone(&metrics),
                boot_epoch,
                signer,
                previous_head,
                vehicle_url: vehicle_url.clone(),
                #[cfg(feature = "__evaluation")]
                variant: variant.unwrap_or_default(),
                #[cfg(feature = "__evaluation")]
                gate_delay,
            },
        );
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (cmd_tx, cmd_rx) = mpsc::channel(256);
        let mcp = faces::mcp::Shared::new(
            cmd_tx.clone(),
            hub.clone(),
            Arc::clone(&mcp_catalog),
            Arc::clone(&envelope_schema),
            shutdown_rx.clone(),
            cfg.certifier.enabled,
            clock,
        );
        let task = tokio::spawn(task.run(
            cmd_rx,
            bridge_rx,
            shutdown_rx.clone(),
            Duration::from_secs(5),
        ));
        let reloader = Reloader {
            tls: tls.clone(),
            principals: Arc::clone(&principals),
            configured: !cfg.principals.is_empty(),
            principal_files_created,
            metrics: Arc::clone(&metrics),
        };
        let (http, op_http) = serve_http(
            &cfg,
            (listener, op_listener),
            tls,
            faces::http::AppState {
                cmds: cmd_tx.clone(),
                hub: hub.clone(),
                metrics,
                principals: Arc::clone(&principals),
                require_for_read: cfg.auth.require_for_read,
                shutdown: shutdown_rx.clone(),
                schema: envelope_schema,
                streams: Arc::new(faces::http::StreamCaps::new(
                    cfg.listen.max_event_streams,
                    cfg.listen.streams_per_principal(),
                )),
                limits: Arc::new(infra::limits::Limits::new(cfg.listen.limit_settings())),
                operator_only: false,
                owners,
                catalog: Arc::clone(&mcp_catalog),
                mcp: Some(faces::http::McpFace {
                    shared: Arc::clone(&mcp),
                    max_sessions: cfg.listen.max_mcp_sessions,
                    per_principal: cfg.listen.mcp_sessions_per_principal(),
                }),
                clock,
            },
            boot_epoch,
        );
        Ok(Service {
            http_addr,
            operator_addr,
            op_http,
            scheme: cfg.listen.scheme(),
            reloader,
            credentials,
            credential_files,
            boot_epoch,
            state_dir,
            receipts_path,
            audit_public_key,
            vehicle_url,
            vehicle_note,
            origin,
            shutdown,
            shutdown_rx,
            cmds: cmd_tx,
            hub,
            mcp,
            stop_bridge,
            task,
            http,
            bridge,
            guard,
        })
    }

    /// The instant the service's monotonic clock (the receipts' `at_ns`) counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The operator's own listener.
    pub fn operator_addr(&self) -> SocketAddr {
        self.operator_addr
    }

    /// The role credentials.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Where the credentials are stored.
    pub fn credential_files(&self) -> &CredentialFiles {
        &self.credential_files
    }

    /// This start's boot epoch.
    pub fn boot_epoch(&self) -> u64 {
        self.boot_epoch
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// This start's first receipt file.
    pub fn receipts_path(&self) -> &Path {
        &self.receipts_path
    }

    /// The audit public key's file.
    pub fn audit_public_key(&self) -> &Path {
        &self.audit_public_key
    }

    /// The vehicle URL the bridge uses.
    pub fn vehicle_url(&self) -> &str {
        &self.vehicle_url
    }

    /// The base URL of the HTTP interface (`https://` with `[listen.tls]`).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.http_addr)
    }

    /// The base URL of the operator's own listener.
    pub fn operator_url(&self) -> String {
        format!("{}://{}", self.scheme, self.operator_addr)
    }

    /// What SIGHUP re-reads (`cli/run.rs` calls it on the signal).
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Serves the agent link as JSON lines on this process's standard input and output
    /// ([`stdio`]); the task ends at end of input.
    pub fn serve_stdio(&self) -> JoinHandle<()> {
        let input = tokio::io::BufReader::new(tokio::io::stdin());
        tokio::spawn(faces::stdio::serve(
            input,
            tokio::io::stdout(),
            self.cmds.clone(),
            self.hub.clone(),
            self.shutdown_rx.clone(),
        ))
    }

    /// Serves one MCP session on this process's standard input and output ([`mcp`],
    /// `halo-gateway run --mcp stdio`); the task ends when the client closes it.
    pub fn serve_mcp_stdio(&self) -> JoinHandle<Result<(), crate::error::Error>> {
        tokio::spawn(faces::mcp::serve_stdio(
            Arc::clone(&self.mcp),
            tokio::io::stdin(),
            tokio::io::stdout(),
        ))
    }

    /// Asks everything to stop: the core holds the vehicle, the listener closes.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Waits for a clean stop after [`Service::shutdown`]: the core held the vehicle and
    /// flushed its receipts, the listener closed, the bridge stopped.
    ///
    /// # Errors
    /// [`StartError::Task`] when a task failed.
    pub async fn wait(self) -> Result<task::ReceiptSummary, StartError> {
        let task = self.task.await.map_err(|e| {
            StartError::Task(Problem {
                message: format!("service task: {e}"),
            })
        })?;
        let summary = task.receipt_summary();
        let _ = self.stop_bridge.send(());
        let _ = tokio::time::timeout(Duration::from_secs(6), self.http).await;
        let _ = tokio::time::timeout(Duration::from_secs(6), self.op_http).await;
        if let Some(b) = self.bridge {
            let _ = b.await;
        }
        drop(task);
        drop(self.guard);
        Ok(summary)
    }
}

/// Sets up tracing: `RUST_LOG` wins over `level`; `json` writes one object per line.
pub fn init_tracing(format: config::LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    use std::io::IsTerminal as _;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        config::LogFormat::Text => b.try_init(),
        config::LogFormat::Json => b.json().try_init(),
    };
}

/// What `halo-gateway run` prints once it listens. Credentials are named by their files; a
/// credential's value is shown only when it was just created and `show_new_secrets` (standard
/// output is a terminal, so nothing keeps it but the screen).
pub fn banner(s: &Service, show_new_secrets: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "halo-gateway {} listening on {}\n",
        env!("CARGO_PKG_VERSION"),
        s.url()
    ));
    out.push_str(&format!(
        "  operator:  {} (the operator credential only; holds answered when the main listener is busy)\n",
        s.operator_url()
    ));
    out.push_str(&format!(
        "  console:   {}/ (in a browser, with the operator credential)\n",
        s.operator_url()
    ));
    if let Some(tls) = &s.reloader.tls {
        out.push_str(&format!(
            "  tls:       TLS 1.2 and 1.3 with {} (SIGHUP reloads it)\n",
            tls.files().cert_file.display()
        ));
    }
    out.push_str(&format!(
        "  vehicle:   {}{}\n",
        s.vehicle_url,
        s.vehicle_note
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    ));
    out.push_str(&format!(
        "  state:     {} (boot epoch {})\n",
        s.state_dir.display(),
        s.boot_epoch
    ));
    out.push_str(&format!("  receipts:  {}\n", s.receipts_path.display()));
    out.push_str(&format!(
        "  audit key: {} (verify with `halo-gateway audit verify --key {} ...`)\n",
        s.audit_public_key.display(),
        s.audit_public_key.display()
    ));
    if s.reloader.configured {
        let set = s.reloader.principals.current();
        for p in set.list() {
            let sources = p
                .sources()
                .filter(|v| !v.is_empty())
                .map(|v| format!(", writes {}", v.join(", ")))
                .unwrap_or_default();
            out.push_str(&format!(
                "  principal: {} ({}{sources})\n",
                p.name,
                p.role.name()
            ));
        }
        for f in &s.reloader.principal_files_created {
            out.push_str(&format!("  new credential: {}\n", f.display()));
        }
        return out;
    }
    let roles = [
        ("agent", &s.credentials.agent, &s.credential_files.agent),
        (
            "provider",
            &s.credentials.provider,
            &s.credential_files.provider,
        ),
        (
            "operator",
            &s.credentials.operator,
            &s.credential_files.operator,
        ),
    ];
    for (i, (role, token, file)) in roles.iter().enumerate() {
        let created = s.credential_files.created.get(i).copied().unwrap_or(false);
        let value = if created && show_new_secrets {
            format!("  (new: {})", token.expose())
        } else if created {
            "  (new)".to_string()
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  {:<10} {}{value}\n",
            format!("{role}:"),
            file.display(),
        ));
    }
    out.push_str(&format!(
        "  try:       curl {}/v1/status\n  events:    curl -N -H \"Authorization: Bearer $(cat AGENT-FILE)\" {}/v1/events\n",
        s.url(),
        s.url()
    ));
    out
}
