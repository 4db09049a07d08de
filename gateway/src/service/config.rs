//! The service configuration: one TOML file, every key optional, unknown keys refused.
//!
//! ```toml
//! [vehicle]
//! url = "udpin:127.0.0.1:14540"       # a MAVLink URL (udpin:/udpout:/tcpin:/tcpout:/serial:) or radio://
//! [listen]
//! http = "127.0.0.1:8640"
//! [state]
//! dir = "/var/lib/halo-gateway"
//! ```
//!
//! The annotated examples live in `configs/`; `docs/run.md` lists every key. A file that does not
//! parse is refused with its path, line and the offending key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The whole configuration, after defaults.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The flight controller.
    pub vehicle: VehicleConfig,
    /// The domain catalog; the embedded `uav-px4` catalog when absent.
    pub catalog: CatalogConfig,
    /// The mission-contract domain.
    pub contract: ContractConfig,
    /// Where the service listens.
    pub listen: ListenConfig,
    /// Credentials.
    pub auth: AuthConfig,
    /// The state directory: boot epoch, credentials, receipts.
    pub state: StateConfig,
    /// The receipt log.
    pub receipts: ReceiptConfig,
    /// Logging.
    pub log: LogConfig,
    /// Limits of the protocol core.
    pub limits: LimitsConfig,
    /// The reference certifier (off by default).
    pub certifier: crate::service::task::certifier::CertifierConfig,
    /// The pilot's ground station, kept in the loop (PX4 only).
    pub gcs: GcsConfig,
    /// The optional real-time scheduling of the gateway's threads (off by default).
    pub realtime: crate::service::infra::realtime::RealtimeConfig,
    /// Named principals (`[[principals]]`): several agents and providers, each with its own
    /// credential. None: the three role credentials of `[auth]`.
    pub principals: Vec<PrincipalConfig>,
}

/// `[[principals]]`: one named party, its role and its credential.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// Its name, in receipts, logs and metrics: 1 to 64 of `a-z 0-9 - _ .`.
    pub name: String,
    /// `agent`, `provider` or `operator`.
    pub role: RoleName,
    /// Its bearer credential's file (created with a fresh credential, mode 0600, when absent).
    /// Exactly one of `token_file` and `cert_common_name`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Or: the subject common name (`CN=`) of its client certificate, signed by
    /// `listen.tls.client_ca_file` (mTLS).
    #[serde(default)]
    pub cert_common_name: Option<String>,
    /// A provider's sources: the catalog sources it writes, and nothing else (each source at
    /// most one provider's). None given: it writes no source (certificates only).
    #[serde(default)]
    pub sources: Vec<String>,
}

impl PrincipalConfig {
    /// Its credential (checked by `run --check` to be exactly one of the two).
    pub fn credential(&self) -> crate::service::infra::principals::CredentialSpec {
        use crate::service::infra::principals::CredentialSpec;
        match (&self.token_file, &self.cert_common_name) {
            (Some(f), _) => CredentialSpec::TokenFile(f.clone()),
            (None, Some(cn)) => CredentialSpec::CertCommonName(cn.clone()),
            (None, None) => CredentialSpec::TokenFile(PathBuf::new()),
        }
    }
}

/// A principal's role, as the configuration names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    /// The untrusted planner.
    Agent,
    /// A state provider or certificate issuer.
    Provider,
    /// The operator.
    Operator,
}

impl RoleName {
    /// The route table's role.
    pub fn role(self) -> crate::service::api::routes::Role {
        use crate::service::api::routes::Role;
        match self {
            RoleName::Agent => Role::Agent,
            RoleName::Provider => Role::Provider,
            RoleName::Operator => Role::Operator,
        }
    }
}

/// A principal's name as the configuration may spell it.
fn principal_name_ok(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

/// `[gcs]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GcsConfig {
    /// Relay the flight controller's traffic to a ground station and the ground station's to
    /// the flight controller: `udpout:HOST:PORT` (QGroundControl listening on 14550) or
    /// `udpin:ADDR:PORT` (a ground station that connects to the companion). None: no relay.
    pub forward: Option<String>,
}

/// `[limits]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Most responses live at once; one more is refused `TOO_MANY_RESPONSES`. A response stays
    /// live until every component settled, its actions stopped streaming, and
    /// `done_retention_ms` after.
    pub max_live_responses: usize,
    /// How long a finished response stays live (readable at `GET /v1/responses/{id}`, and
    /// re-evaluated on every relevant update as the protocol's retained set requires), ms.
    pub done_retention_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> LimitsConfig {
        LimitsConfig {
            max_live_responses: 64,
            done_retention_ms: 10_000,
        }
    }
}

/// Which vehicle the gateway flies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum VehicleKind {
    /// PX4 over MAVLink (offboard setpoints).
    #[default]
    Px4,
    /// A Crazyflie 2.1 over a Crazyradio or USB (bitcraze's crazyflie-lib).
    Crazyflie,
}

impl VehicleKind {
    /// `px4`, `crazyflie`.
    pub fn name(self) -> &'static str {
        match self {
            VehicleKind::Px4 => "px4",
            VehicleKind::Crazyflie => "crazyflie",
        }
    }
}

/// `[vehicle]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VehicleConfig {
    /// `px4` (default) or `crazyflie`. A `radio://` or `usb://` URL implies `crazyflie`.
    pub kind: VehicleKind,
    /// With `kind = "crazyflie"`: the table-of-contents cache directory (default
    /// `STATE/crazyflie-toc`), so a reconnect skips fetching the log and parameter tables.
    pub toc_cache_dir: Option<PathBuf>,
    /// With `kind = "crazyflie"`: limit on one whole connect, ms.
    pub connect_timeout_ms: u64,
    /// The vehicle, no default: a MAVLink URL (`udpin:127.0.0.1:14540` for PX4 SITL,
    /// `udpout:HOST:PORT`, `tcpin:`/`tcpout:HOST:PORT`, `serial:/dev/ttyAMA0:921600` for a Pixhawk on
    /// TELEM2) or a Crazyflie URI (`radio://0/80/2M/E7E7E7E7E7`, `usb://0`). `sim` names the
    /// evaluation binary's embedded simulator (`halo-eval run`); the flight binary refuses it.
    pub url: Option<String>,
    /// Append every setpoint the bridge enqueues to this JSON-lines file.
    pub setpoint_log: Option<PathBuf>,
    /// The link is down after this long without an autopilot heartbeat, ms.
    pub link_timeout_ms: u64,
    /// Setpoint stream rate, Hz.
    pub stream_hz: f64,
    /// Whether the gateway may fly from the start. Off by default: the operator hands it the
    /// vehicle with a takeoff through the gateway or `operator release`; a mode change the
    /// gateway did not command (the pilot, a ground station, a failsafe) takes it back.
    pub control_at_start: bool,
    /// PX4: tell the pilot's ground station each withheld action, deny-hold, expiry hold,
    /// override, operator hold and refresh request as a short `STATUSTEXT` (rate-limited), which
    /// PX4 forwards to the ground station.
    pub statustext: bool,
    /// PX4: the gateway's MAVLink system id, the vehicle's own (PX4's `MAV_SYS_ID`, 1 unless
    /// changed): an onboard computer is part of the system it flies.
    pub system_id: u8,
    /// PX4: the gateway's MAVLink component id, `MAV_COMP_ID_ONBOARD_COMPUTER` (191); a second
    /// onboard computer on the same vehicle takes 192–194 (`ONBOARD_COMPUTER2..4`).
    pub component_id: u8,
    /// PX4: take only the autopilot with this system id; none takes the first PX4 autopilot
    /// heard (on a `udpin` link, the one it then locks onto).
    pub autopilot_system_id: Option<u8>,
    /// PX4: MAVLink 2 signing with this key (32 raw bytes or 64 hex digits; the file must be
    /// private to the service's user): everything sent is signed, and what is received must be
    /// validly signed. None: unsigned, as a PX4 without a key.
    pub signing_key_file: Option<PathBuf>,
    /// PX4: the link id written into each signature.
    pub signing_link_id: u8,
    /// PX4, with a signing key: take unsigned frames from the vehicle too (while the flight
    /// controller is not keyed yet). Off by default: an unsigned frame is refused and counted.
    pub accept_unsigned: bool,
}

impl Default for VehicleConfig {
    fn default() -> VehicleConfig {
        VehicleConfig {
            kind: VehicleKind::Px4,
            toc_cache_dir: None,
            connect_timeout_ms: 15_000,
            url: None,
            setpoint_log: None,
            link_timeout_ms: 1500,
            stream_hz: 20.0,
            control_at_start: false,
            statustext: true,
            system_id: 1,
            component_id: 191,
            autopilot_system_id: None,
            signing_key_file: None,
            signing_link_id: 0,
            accept_unsigned: false,
        }
    }
}

impl VehicleConfig {
    /// The MAVLink signing key `signing_key_file` names, read and checked (private to this
    /// user, the right size, not all zeros); `None` without one.
    ///
    /// # Errors
    /// What is wrong with the file, naming it (never its contents).
    pub fn signing_key(
        &self,
    ) -> Result<Option<px4_bridge::signing::SigningKey>, crate::error::Error> {
        use crate::error::Error;
        let Some(path) = self.signing_key_file.as_deref() else {
            return Ok(None);
        };
        let name = path.display();
        if self.effective_kind() != VehicleKind::Px4 {
            return Err(Error::config(format!(
                "vehicle.signing_key_file: {name}: MAVLink signing is for a PX4 link; a Crazyflie has none"
            )));
        }
        crate::io::check_private(path, "MAVLink signing key")?;
        let bytes = crate::io::read_capped(path, 256, "MAVLink signing key").map_err(|e| {
            Error::new(
                crate::error::Error::from(e.clone()).kind(),
                format!("vehicle.signing_key_file: {e}"),
            )
        })?;
        let secret = px4_bridge::signing::SigningKey::parse_secret(&bytes)
            .map_err(|e| Error::key(format!("vehicle.signing_key_file: {name}: {e}")))?;
        Ok(Some(px4_bridge::signing::SigningKey::new(
            secret,
            self.signing_link_id,
            self.accept_unsigned,
        )))
    }

    /// The vehicle kind, `kind` or what the URL implies (`radio://`, `usb://`: a Crazyflie).
    pub fn effective_kind(&self) -> VehicleKind {
        let url = self.url.as_deref().unwrap_or("");
        if url.starts_with("radio://") || url.starts_with("usb://") {
            VehicleKind::Crazyflie
        } else {
            self.kind
        }
    }

    /// Checks the URL against the vehicle kind.
    ///
    /// # Errors
    /// [`VehicleUrlError`]: not a URL the kind's bridge opens.
    pub fn check_url(&self) -> Result<(), VehicleUrlError> {
        let Some(url) = self.url.as_deref() else {
            return Ok(());
        };
        if url == SIM_URL {
            return Ok(());
        }
        match self.effective_kind() {
            VehicleKind::Crazyflie => {
                crazyflie_bridge::uri::check(url).map_err(|error| VehicleUrlError::Crazyflie {
                    error,
                    not_a_uri: self.kind == VehicleKind::Crazyflie
                        && !url.starts_with("radio://")
                        && !url.starts_with("usb://"),
                })
            }
            VehicleKind::Px4 => px4_bridge::url::TransportUrl::parse(url)
                .map(|_| ())
                .map_err(VehicleUrlError::Mavlink),
        }
    }

    /// The URL a real link opens: refuses none and [`SIM_URL`].
    ///
    /// # Errors
    /// [`VehicleUrlError::Missing`], [`VehicleUrlError::Simulator`]: what to set, for people.
    pub fn url_or_refuse(&self) -> Result<String, VehicleUrlError> {
        match self.url.as_deref() {
            None => Err(VehicleUrlError::Missing),
            Some(SIM_URL) => Err(VehicleUrlError::Simulator),
            Some(u) => Ok(u.to_string()),
        }
    }
}

/// The URL that names the evaluation binary's embedded simulator.
pub const SIM_URL: &str = "sim";

/// Why `vehicle.url` cannot be flown.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VehicleUrlError {
    /// None is set: the flight binary flies only the vehicle it is told.
    Missing,
    /// `sim`: the evaluation binary's embedded simulator, which the flight binary does not link.
    Simulator,
    /// Not a MAVLink URL PX4's bridge opens.
    Mavlink(px4_bridge::url::UrlError),
    /// Not a Crazyflie URI (`not_a_uri`: it does not even start like one).
    Crazyflie {
        /// The bridge's reason.
        error: crazyflie_bridge::uri::UriError,
        /// It starts neither `radio://` nor `usb://`.
        not_a_uri: bool,
    },
}

impl std::fmt::Display for VehicleUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VehicleUrlError::Missing => f.write_str(
                "no vehicle: set vehicle.url in the configuration or pass --vehicle (a MAVLink URL such as udpin:127.0.0.1:14540 for PX4 SITL or serial:/dev/ttyAMA0:921600 for a Pixhawk on TELEM2, or a Crazyflie radio:// URI); to try the gateway on a simulated vehicle, run scripts/run_sim.sh (`halo-eval run`)",
            ),
            VehicleUrlError::Simulator => f.write_str(
                "vehicle.url = \"sim\" is the evaluation binary's embedded simulator: scripts/run_sim.sh (`halo-eval run`) runs this service on it; the flight binary links no simulator",
            ),
            VehicleUrlError::Mavlink(e) => e.fmt(f),
            VehicleUrlError::Crazyflie {
                error,
                not_a_uri: true,
            } => write!(
                f,
                "{error} (a Crazyflie is reached by radio://DONGLE/CHANNEL/RATE/ADDRESS or usb://N)"
            ),
            VehicleUrlError::Crazyflie { error, .. } => error.fmt(f),
        }
    }
}

impl std::error::Error for VehicleUrlError {}

/// `[catalog]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// A catalog file; the embedded `uav-px4` catalog when absent.
    pub path: Option<PathBuf>,
}

/// `[contract]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    /// The registered contract domain; the embedded `uav-survey` domain when absent.
    pub domain: Option<PathBuf>,
}

/// `[listen]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// The HTTP listener (agent, providers, operator, metrics). Port 0 picks a free port.
    pub http: SocketAddr,
    /// The operator's own listener: the same routes, the operator credential only, with
    /// connection caps of its own, so a hold is answered while the main listener is
    /// saturated. Default: `http`'s address with the next port (8641), or a free port when
    /// `http`'s port is 0.
    pub operator: Option<SocketAddr>,
    /// Open connections at most on the main listener.
    pub max_connections: usize,
    /// Open connections from one address at most on the main listener.
    pub max_connections_per_peer: usize,
    /// Open connections at most on the operator's listener (and 8 from one address).
    pub operator_max_connections: usize,
    /// A request's headers must arrive within this long of the connection opening or of its
    /// previous response (closes slow and idle connections), ms.
    pub header_timeout_ms: u64,
    /// A request body must keep arriving: no gap between its parts longer than this, ms.
    pub body_timeout_ms: u64,
    /// A request must be answered within this, ms (operator commands wait for the vehicle,
    /// up to 15 s); event streams answer at once and then stream.
    pub request_timeout_ms: u64,
    /// A client that stops reading is closed once a write has waited this long, ms (an event
    /// stream resumes with `Last-Event-ID`).
    pub write_timeout_ms: u64,
    /// Open event streams per role (agent, operator) at most.
    pub max_event_streams: usize,
    /// Open event streams of one principal at most (default: `max_event_streams`, which is
    /// the same thing with the one agent and one operator of `[auth]`).
    pub max_event_streams_per_principal: Option<usize>,
    /// Requests per second one principal may send, sustained; past it `429 RATE_LIMITED`
    /// with `Retry-After`. The operator's commands are never limited.
    pub requests_per_second_per_principal: u32,
    /// Requests one principal may send at once before the rate applies.
    pub burst_per_principal: u32,
    /// Failed authentications in a row from one address before that address is refused
    /// `429 AUTH_BACKOFF` for a while (1 s, doubling).
    pub auth_failures_before_backoff: u32,
    /// The longest authentication backoff, ms.
    pub auth_backoff_max_ms: u64,
    /// MCP sessions on `/mcp` at once (streamable HTTP); one more `initialize` is refused
    /// `429 TOO_MANY_STREAMS`. A session idle for five minutes is closed.
    pub max_mcp_sessions: usize,
    /// MCP sessions one principal may hold open at once (default: `max_mcp_sessions`, the
    /// same thing with the one agent of `[auth]`); one more `initialize` from it is refused
    /// `429 TOO_MANY_STREAMS` naming it.
    pub max_mcp_sessions_per_principal: Option<usize>,
    /// TLS on both listeners (`[listen.tls]`). Required when a listener's address is not
    /// loopback, unless `insecure_plaintext` says otherwise.
    pub tls: Option<ListenTlsConfig>,
    /// Serve plaintext HTTP on an address other machines reach: every credential crosses the
    /// network in clear. Off by default; when on, the gateway warns at start and every minute.
    pub insecure_plaintext: bool,
}

/// `[listen.tls]`: the certificate chain and key both listeners serve, TLS 1.2 and 1.3 only.
/// Re-read on SIGHUP; a pair that does not load keeps the old one in use.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenTlsConfig {
    /// The chain, PEM: the gateway's certificate first, then any intermediates.
    pub cert_file: PathBuf,
    /// Its private key, PEM.
    pub key_file: PathBuf,
    /// The CA, PEM, whose client certificates name principals (`[[principals]]
    /// cert_common_name`). With it the listeners ask each client for a certificate; one that
    /// does not chain to this CA, is out of its dates or has a revoked serial ends the
    /// handshake. A client without one may still use a bearer credential.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

impl ListenTlsConfig {
    /// The files the listeners load.
    pub fn files(&self) -> crate::service::infra::tls::TlsFiles {
        crate::service::infra::tls::TlsFiles {
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            client_ca_file: self.client_ca_file.clone(),
        }
    }
}

impl Default for ListenConfig {
    fn default() -> ListenConfig {
        ListenConfig {
            http: SocketAddr::from(([127, 0, 0, 1], 8640)),
            operator: None,
            max_connections: 256,
            max_connections_per_peer: 64,
            operator_max_connections: 32,
            header_timeout_ms: 10_000,
            body_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            write_timeout_ms: 10_000,
            max_event_streams: 32,
            max_event_streams_per_principal: None,
            requests_per_second_per_principal: 500,
            burst_per_principal: 1000,
            auth_failures_before_backoff: 5,
            auth_backoff_max_ms: 60_000,
            max_mcp_sessions: 16,
            max_mcp_sessions_per_principal: None,
            tls: None,
            insecure_plaintext: false,
        }
    }
}

impl ListenConfig {
    /// The request rate per principal and the authentication backoff (checked to be in
    /// range by `run --check`; a zero is taken as one).
    pub fn limit_settings(&self) -> crate::service::infra::limits::LimitSettings {
        let one = |n: u32| std::num::NonZeroU32::new(n).unwrap_or(std::num::NonZeroU32::MIN);
        crate::service::infra::limits::LimitSettings {
            per_second: one(self.requests_per_second_per_principal),
            burst: one(self.burst_per_principal),
            failures_before_backoff: self.auth_failures_before_backoff,
            max_backoff: std::time::Duration::from_millis(self.auth_backoff_max_ms),
        }
    }

    /// Open event streams of one principal at most.
    pub fn streams_per_principal(&self) -> usize {
        self.max_event_streams_per_principal
            .unwrap_or(self.max_event_streams)
    }

    /// MCP sessions of one principal at most.
    pub fn mcp_sessions_per_principal(&self) -> usize {
        self.max_mcp_sessions_per_principal
            .unwrap_or(self.max_mcp_sessions)
    }

    /// `https` with `[listen.tls]`, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The listeners other machines can reach that would serve plaintext: the reason `run`
    /// refuses a configuration without `[listen.tls]` or `insecure_plaintext`.
    pub fn plaintext_exposed(&self) -> Vec<(&'static str, SocketAddr)> {
        if self.tls.is_some() {
            return Vec::new();
        }
        [
            ("listen.http", self.http),
            ("listen.operator", self.operator_addr()),
        ]
        .into_iter()
        .filter(|(_, a)| !a.ip().is_loopback())
        .collect()
    }

    /// The operator's listener after defaults.
    pub fn operator_addr(&self) -> SocketAddr {
        self.operator.unwrap_or_else(|| {
            let port = match self.http.port() {
                0 => 0,
                p => p.saturating_add(1),
            };
            SocketAddr::new(self.http.ip(), port)
        })
    }
}

/// `[auth]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The agent's bearer credential file; `STATE/credentials/agent.token` when absent.
    pub agent_file: Option<PathBuf>,
    /// The providers' bearer credential file.
    pub provider_file: Option<PathBuf>,
    /// The operator's bearer credential file.
    pub operator_file: Option<PathBuf>,
    /// Require a credential (any role) for `/metrics` and `/v1/status` too. Off by default;
    /// turn it on whenever the listener is not loopback.
    pub require_for_read: bool,
    /// Revoked principals: a file of principal names, one per line (`#` starts a comment),
    /// re-read with the credentials on SIGHUP. A revoked principal is refused everywhere and
    /// its open event streams and MCP sessions are closed.
    pub revoked_file: Option<PathBuf>,
}

/// `[state]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// The state directory; `$HALO_STATE_DIR`, else `$XDG_STATE_HOME/halo-gateway`, else
    /// `~/.local/state/halo-gateway`.
    pub dir: Option<PathBuf>,
}

/// `[receipts]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiptConfig {
    /// The receipt log; `STATE/receipts/boot-<epoch>.jsonl` when absent.
    pub path: Option<PathBuf>,
    /// `decisions`: a provider or telemetry update gets its own receipt only when it changes a
    /// decision, an epoch or a provenance; the rest are summarized per source. `all`: every
    /// update.
    pub policy: ReceiptPolicyName,
    /// Summary period for `decisions`, seconds.
    pub summary_every_s: u64,
    /// A receipt file is closed and the chain continues in the next once it passes this size.
    pub max_file_bytes: u64,
    /// Receipt files kept in the receipts directory (all starts); the oldest go first.
    pub max_files: usize,
    /// The Ed25519 audit key that signs checkpoints (one line of 64 hex digits, mode 0600);
    /// `STATE/audit-key`, created at first start, when absent. An operator-supplied key must
    /// exist. Its public half is written beside it as `KEY.pub`.
    pub signing_key: Option<PathBuf>,
    /// A signed checkpoint after at most this many receipts.
    pub checkpoint_every: u64,
    /// ... and at most this many seconds after the first receipt it does not yet cover.
    pub checkpoint_interval_s: u64,
    /// What happens when receipts cannot be written (a full disk, an I/O error, or
    /// `max_files` reached with nothing that may be deleted): `refuse` (default) stops
    /// dispatching, holds the vehicle and refuses new work; `land` does the same and lands.
    pub full_action: FullActionName,
    /// The ballast kept beside the log and freed when the disk fills, so the records that stop
    /// a flight still fit, bytes (0 turns it off).
    pub reserve_bytes: u64,
}

/// `receipts.full_action`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullActionName {
    /// Hold and refuse new work.
    #[default]
    Refuse,
    /// Hold, refuse new work and land.
    Land,
}

impl Default for ReceiptConfig {
    fn default() -> ReceiptConfig {
        ReceiptConfig {
            path: None,
            policy: ReceiptPolicyName::Decisions,
            summary_every_s: 10,
            max_file_bytes: 64 * 1024 * 1024,
            max_files: 16,
            signing_key: None,
            checkpoint_every: 1000,
            checkpoint_interval_s: 10,
            full_action: FullActionName::Refuse,
            reserve_bytes: crate::service::store::receipts::RESERVE_BYTES,
        }
    }
}

/// `receipts.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptPolicyName {
    /// Decision-changing updates, summaries for the rest.
    Decisions,
    /// Every update.
    All,
}

/// `[log]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `halo_gateway=debug`); `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why a configuration could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Largest configuration file read, bytes.
pub const MAX_CONFIG_BYTES: u64 = 256 * 1024;

fn line_of(src: &str, offset: usize) -> usize {
    src.get(..offset.min(src.len()))
        .map_or(1, |s| s.bytes().filter(|b| *b == b'\n').count() + 1)
}

impl Config {
    /// Parses configuration text; `file` names it in errors.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the line and the key.
    pub fn parse(src: &str, file: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(src).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(src, s.start));
            ConfigError(format!("{file}:{line}: {}", e.message().trim()))
        })?;
        cfg.check(file)?;
        Ok(cfg)
    }

    /// The catalog this configuration names (`catalog.path`), or the one compiled in for its
    /// vehicle kind.
    ///
    /// # Errors
    /// [`halo_core::catalog::CatalogError`] naming the file, the line and the field.
    pub fn catalog(&self) -> Result<halo_core::catalog::Catalog, halo_core::catalog::CatalogError> {
        let embedded = match self.vehicle.effective_kind() {
            VehicleKind::Px4 => crate::io::EmbeddedCatalog::UavPx4,
            VehicleKind::Crazyflie => crate::io::EmbeddedCatalog::Crazyflie,
        };
        crate::io::load_catalog(self.catalog.path.as_deref(), embedded)
    }

    /// The mission-contract domain this configuration names (`contract.domain`), or the one
    /// compiled in.
    ///
    /// # Errors
    /// [`halo_core::contract::DomainError`] naming the file.
    pub fn domain(&self) -> Result<halo_core::contract::Domain, halo_core::contract::DomainError> {
        crate::io::load_domain(self.contract.domain.as_deref())
    }

    /// Reads and parses a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] when the file is missing, too large or invalid.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = crate::io::read_text_capped(path, MAX_CONFIG_BYTES, "configuration")
            .map_err(|e| ConfigError(e.to_string()))?;
        Config::parse(&text, &name)
    }

    fn check(&self, file: &str) -> Result<(), ConfigError> {
        self.check_vehicle(file)?;
        self.check_receipts(file)?;
        self.check_listen(file)?;
        self.check_principals(file)?;
        if !(1..=65_536).contains(&self.limits.max_live_responses) {
            return Err(ConfigError(format!(
                "{file}: limits.max_live_responses: {} is outside 1..65536",
                self.limits.max_live_responses
            )));
        }
        if self.limits.done_retention_ms > 3_600_000 {
            return Err(ConfigError(format!(
                "{file}: limits.done_retention_ms: {} is over one hour (3600000)",
                self.limits.done_retention_ms
            )));
        }
        if self.log.level.trim().is_empty() {
            return Err(ConfigError(format!("{file}: log.level: empty")));
        }
        Ok(())
    }

    /// `[vehicle]`, `[gcs]` and `[realtime]`: rates, timeouts, ids and URLs the bridges can use.
    fn check_vehicle(&self, file: &str) -> Result<(), ConfigError> {
        if !(self.vehicle.stream_hz.is_finite() && (2.5..=200.0).contains(&self.vehicle.stream_hz))
        {
            return Err(ConfigError(format!(
                "{file}: vehicle.stream_hz: {} Hz is outside 2.5..200 (PX4 needs more than 2 Hz)",
                self.vehicle.stream_hz
            )));
        }
        if !(500..=60_000).contains(&self.vehicle.link_timeout_ms) {
            return Err(ConfigError(format!(
                "{file}: vehicle.link_timeout_ms: {} ms is outside 500..60000",
                self.vehicle.link_timeout_ms
            )));
        }
        self.vehicle
            .check_url()
            .map_err(|e| ConfigError(format!("{file}: vehicle.url: {e}")))?;
        if let Some(f) = &self.gcs.forward {
            if self.vehicle.effective_kind() != VehicleKind::Px4 {
                return Err(ConfigError(format!(
                    "{file}: gcs.forward: a ground-station relay is for a PX4 link"
                )));
            }
            px4_bridge::gcs::GcsEndpoint::parse(f)
                .map_err(|e| ConfigError(format!("{file}: gcs.forward: {e}")))?;
        }
        if let Some(p) = self.realtime.priority
            && !crate::service::infra::realtime::PRIORITIES.contains(&p)
        {
            return Err(ConfigError(format!(
                "{file}: realtime.priority: {p} is outside 1..99 (SCHED_FIFO's priorities; 50 leaves room above for the kernel's own threads)"
            )));
        }
        if self.vehicle.system_id == 0 {
            return Err(ConfigError(format!(
                "{file}: vehicle.system_id: 0 is MAVLink's broadcast id; use the vehicle's own (PX4's MAV_SYS_ID, 1 by default)"
            )));
        }
        if matches!(self.vehicle.component_id, 0 | 1) {
            return Err(ConfigError(format!(
                "{file}: vehicle.component_id: {} is {}; an onboard computer is 191 (192-194 for a second one)",
                self.vehicle.component_id,
                if self.vehicle.component_id == 0 {
                    "MAVLink's broadcast id"
                } else {
                    "the autopilot's own id"
                }
            )));
        }
        if self.vehicle.autopilot_system_id == Some(0) {
            return Err(ConfigError(format!(
                "{file}: vehicle.autopilot_system_id: 0 is MAVLink's broadcast id; leave it unset to take the first PX4 heard"
            )));
        }
        if !(1000..=120_000).contains(&self.vehicle.connect_timeout_ms) {
            return Err(ConfigError(format!(
                "{file}: vehicle.connect_timeout_ms: {} ms is outside 1000..120000",
                self.vehicle.connect_timeout_ms
            )));
        }
        Ok(())
    }

    /// `[receipts]`: the log's rotation, summaries, checkpoints and disk reserve.
    fn check_receipts(&self, file: &str) -> Result<(), ConfigError> {
        if !(1..=3600).contains(&self.receipts.summary_every_s) {
            return Err(ConfigError(format!(
                "{file}: receipts.summary_every_s: {} s is outside 1..3600",
                self.receipts.summary_every_s
            )));
        }
        if self.receipts.max_file_bytes < 4096 {
            return Err(ConfigError(format!(
                "{file}: receipts.max_file_bytes: {} is below 4096",
                self.receipts.max_file_bytes
            )));
        }
        if !(1..=1_000_000).contains(&self.receipts.checkpoint_every) {
            return Err(ConfigError(format!(
                "{file}: receipts.checkpoint_every: {} is outside 1..1000000",
                self.receipts.checkpoint_every
            )));
        }
        if !(1..=3600).contains(&self.receipts.checkpoint_interval_s) {
            return Err(ConfigError(format!(
                "{file}: receipts.checkpoint_interval_s: {} s is outside 1..3600",
                self.receipts.checkpoint_interval_s
            )));
        }
        if !(2..=100_000).contains(&self.receipts.max_files) {
            return Err(ConfigError(format!(
                "{file}: receipts.max_files: {} is outside 2..100000",
                self.receipts.max_files
            )));
        }
        if self.receipts.reserve_bytes > 64 * 1024 * 1024 {
            return Err(ConfigError(format!(
                "{file}: receipts.reserve_bytes: {} is over 64 MiB",
                self.receipts.reserve_bytes
            )));
        }
        Ok(())
    }

    /// `[[principals]]`: unique names and credential files, at least one operator, each source
    /// at most one provider's (the catalog's own check is at start and in `run --check`).
    fn check_principals(&self, file: &str) -> Result<(), ConfigError> {
        let ps = &self.principals;
        if ps.is_empty() {
            return Ok(());
        }
        if ps.len() > 256 {
            return Err(ConfigError(format!(
                "{file}: principals: {} is over 256",
                ps.len()
            )));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut files = std::collections::BTreeSet::new();
        let mut common_names = std::collections::BTreeSet::new();
        let mut sources = std::collections::BTreeMap::new();
        for p in ps {
            if !principal_name_ok(&p.name) {
                return Err(ConfigError(format!(
                    "{file}: principals: `{}` is not a principal name (1 to 64 of a-z 0-9 - _ .)",
                    p.name
                )));
            }
            if !names.insert(p.name.as_str()) {
                return Err(ConfigError(format!(
                    "{file}: principals: `{}` is named twice",
                    p.name
                )));
            }
            match (&p.token_file, &p.cert_common_name) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(ConfigError(format!(
                        "{file}: principals: `{}` needs exactly one credential: token_file or cert_common_name",
                        p.name
                    )));
                }
                (Some(t), None) => {
                    if !files.insert(t.clone()) {
                        return Err(ConfigError(format!(
                            "{file}: principals: {} is `{}`'s token_file and another's; each principal needs its own credential",
                            t.display(),
                            p.name
                        )));
                    }
                }
                (None, Some(cn)) => {
                    if cn.is_empty() || cn.len() > 64 || cn.chars().any(char::is_control) {
                        return Err(ConfigError(format!(
                            "{file}: principals: `{}`: cert_common_name must be 1 to 64 printable characters",
                            p.name
                        )));
                    }
                    if !common_names.insert(cn.as_str()) {
                        return Err(ConfigError(format!(
                            "{file}: principals: cert_common_name `{cn}` is `{}`'s and another's; each principal needs its own certificate name",
                            p.name
                        )));
                    }
                    if self
                        .listen
                        .tls
                        .as_ref()
                        .is_none_or(|t| t.client_ca_file.is_none())
                    {
                        return Err(ConfigError(format!(
                            "{file}: principals: `{}` is named by a client certificate, so [listen.tls] needs client_ca_file (the CA that signs it)",
                            p.name
                        )));
                    }
                }
            }
            if p.role != RoleName::Provider && !p.sources.is_empty() {
                return Err(ConfigError(format!(
                    "{file}: principals: `{}` is not a provider: sources are a provider's",
                    p.name
                )));
            }
            for src in &p.sources {
                if let Some(other) = sources.insert(src.as_str(), p.name.as_str()) {
                    return Err(ConfigError(format!(
                        "{file}: principals: source `{src}` is given to `{other}` and to `{}`; each source has one provider",
                        p.name
                    )));
                }
            }
        }
        if !ps.iter().any(|p| p.role == RoleName::Operator) {
            return Err(ConfigError(format!(
                "{file}: principals: none is an operator; with [[principals]] the role credentials of [auth] are not taken, so one must be"
            )));
        }
        Ok(())
    }

    /// The principals' sources against the catalog: each a source it defines that providers
    /// write.
    ///
    /// # Errors
    /// [`ConfigError`] naming the principal and the source.
    pub fn check_principals_against(
        &self,
        catalog: &halo_core::catalog::Catalog,
    ) -> Result<(), ConfigError> {
        for p in &self.principals {
            for src in &p.sources {
                match catalog.source_ix(src).and_then(|ix| catalog.source(ix)) {
                    None => {
                        return Err(ConfigError(format!(
                            "principals: `{}` is given source `{src}`, which catalog `{}` does not define",
                            p.name,
                            catalog.id()
                        )));
                    }
                    Some(s) if s.owner != halo_core::catalog::Owner::Provider => {
                        return Err(ConfigError(format!(
                            "principals: `{}` is given source `{src}`, which the {} writes, not a provider",
                            p.name,
                            match s.owner {
                                halo_core::catalog::Owner::Vehicle => "vehicle link",
                                _ => "operator",
                            }
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// `[listen]`: connection caps and timeouts, and an operator listener of its own.
    fn check_listen(&self, file: &str) -> Result<(), ConfigError> {
        let l = &self.listen;
        for (key, v, lo, hi) in [
            (
                "listen.max_connections",
                l.max_connections as u64,
                4,
                65_536,
            ),
            (
                "listen.max_connections_per_peer",
                l.max_connections_per_peer as u64,
                1,
                65_536,
            ),
            (
                "listen.operator_max_connections",
                l.operator_max_connections as u64,
                2,
                4096,
            ),
            (
                "listen.max_event_streams",
                l.max_event_streams as u64,
                1,
                65_536,
            ),
            (
                "listen.max_mcp_sessions",
                l.max_mcp_sessions as u64,
                1,
                4096,
            ),
            (
                "listen.max_mcp_sessions_per_principal",
                l.mcp_sessions_per_principal() as u64,
                1,
                4096,
            ),
            (
                "listen.max_event_streams_per_principal",
                l.max_event_streams_per_principal
                    .unwrap_or(l.max_event_streams) as u64,
                1,
                65_536,
            ),
            (
                "listen.requests_per_second_per_principal",
                u64::from(l.requests_per_second_per_principal),
                1,
                1_000_000,
            ),
            (
                "listen.burst_per_principal",
                u64::from(l.burst_per_principal),
                1,
                1_000_000,
            ),
            (
                "listen.auth_failures_before_backoff",
                u64::from(l.auth_failures_before_backoff),
                1,
                1000,
            ),
            (
                "listen.auth_backoff_max_ms",
                l.auth_backoff_max_ms,
                1000,
                3_600_000,
            ),
            (
                "listen.header_timeout_ms",
                l.header_timeout_ms,
                100,
                600_000,
            ),
            ("listen.body_timeout_ms", l.body_timeout_ms, 100, 600_000),
            (
                "listen.request_timeout_ms",
                l.request_timeout_ms,
                1000,
                600_000,
            ),
            ("listen.write_timeout_ms", l.write_timeout_ms, 100, 600_000),
        ] {
            if !(lo..=hi).contains(&v) {
                return Err(ConfigError(format!(
                    "{file}: {key}: {v} is outside {lo}..{hi}"
                )));
            }
        }
        if l.operator.is_some() && l.operator_addr() == l.http && l.http.port() != 0 {
            return Err(ConfigError(format!(
                "{file}: listen.operator: {} is the main listener's address; give it its own port",
                l.http
            )));
        }
        if l.tls.is_some() && l.insecure_plaintext {
            return Err(ConfigError(format!(
                "{file}: listen.insecure_plaintext = true with [listen.tls]: the listeners serve TLS; remove one of them"
            )));
        }
        if let Some((key, addr)) = l.plaintext_exposed().first()
            && !l.insecure_plaintext
        {
            return Err(ConfigError(format!(
                "{file}: {key}: {addr} is reachable from other machines and would serve plaintext HTTP, so every credential (the agent's, the providers', the operator's) would cross the network in clear. Give [listen.tls] a cert_file and key_file (docs/deploy.md makes them), listen on 127.0.0.1, or set listen.insecure_plaintext = true on a network you trust"
            )));
        }
        Ok(())
    }

    /// The state directory after defaults.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.state.dir {
            return d.clone();
        }
        if let Some(d) = std::env::var_os("HALO_STATE_DIR") {
            return PathBuf::from(d);
        }
        if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
            return PathBuf::from(d).join("halo-gateway");
        }
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".local/state/halo-gateway"),
            None => PathBuf::from("halo-gateway-state"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::parse("", "x.toml").unwrap(), Config::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = Config::parse("[vehicle]\nurl = \"sim\"\nspeed = 3\n", "c.toml").unwrap_err();
        assert!(e.0.starts_with("c.toml:3:"), "{e}");
        assert!(e.0.contains("speed"), "{e}");
        let e = Config::parse("[vehicel]\n", "c.toml").unwrap_err();
        assert!(e.0.contains("c.toml:1:") && e.0.contains("vehicel"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        let e = Config::parse("[vehicle]\nurl = \"udp:1.2.3.4\"\n", "c.toml").unwrap_err();
        assert!(e.0.contains("vehicle.url"), "{e}");
        let e = Config::parse("[vehicle]\nstream_hz = 1.0\n", "c.toml").unwrap_err();
        assert!(e.0.contains("vehicle.stream_hz"), "{e}");
        let e = Config::parse("[listen]\nhttp = \"nope\"\n", "c.toml").unwrap_err();
        assert!(e.0.contains("c.toml:2:"), "{e}");
        for bad in ["0", "100"] {
            let e =
                Config::parse(&format!("[realtime]\npriority = {bad}\n"), "c.toml").unwrap_err();
            assert!(
                e.0.contains("realtime.priority") && e.0.contains("1..99"),
                "{e}"
            );
        }
        let c = Config::parse("[realtime]\npriority = 50\n", "c.toml").unwrap();
        assert_eq!(c.realtime.priority, Some(50));
        for (bad, key) in [
            ("system_id = 0", "vehicle.system_id"),
            ("component_id = 0", "vehicle.component_id"),
            ("component_id = 1", "vehicle.component_id"),
            ("autopilot_system_id = 0", "vehicle.autopilot_system_id"),
        ] {
            let e = Config::parse(&format!("[vehicle]\n{bad}\n"), "c.toml").unwrap_err();
            assert!(e.0.contains(key), "{bad}: {e}");
        }
        let c = Config::parse(
            "[vehicle]\nsystem_id = 2\ncomponent_id = 192\nautopilot_system_id = 2\nurl = \"udpin://:14540\"\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(
            (
                c.vehicle.system_id,
                c.vehicle.component_id,
                c.vehicle.autopilot_system_id
            ),
            (2, 192, Some(2))
        );
    }

    #[test]
    fn the_vehicle_kind_and_its_url_agree() {
        let c = Config::parse(
            "[vehicle]\nurl = \"radio://0/80/2M/E7E7E7E7E7\"\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(c.vehicle.effective_kind(), VehicleKind::Crazyflie);
        let c = Config::parse("[vehicle]\nkind = \"crazyflie\"\n", "c.toml").unwrap();
        assert_eq!(c.vehicle.effective_kind(), VehicleKind::Crazyflie);
        assert_eq!(c.vehicle.url, None);
        let e = Config::parse(
            "[vehicle]\nkind = \"crazyflie\"\nurl = \"udpin:0.0.0.0:14540\"\n",
            "c.toml",
        )
        .unwrap_err();
        assert!(
            e.0.contains("vehicle.url") && e.0.contains("radio://"),
            "{e}"
        );
        let e = Config::parse("[vehicle]\nurl = \"radio://0/200/2M\"\n", "c.toml").unwrap_err();
        assert!(e.0.contains("channel `200`"), "{e}");
        let e = Config::parse("[vehicle]\nkind = \"bicycle\"\n", "c.toml").unwrap_err();
        assert!(
            e.0.contains("c.toml:2:") && e.0.contains("`px4` or `crazyflie`"),
            "{e}"
        );
        let e = Config::parse("[vehicle]\nconnect_timeout_ms = 10\n", "c.toml").unwrap_err();
        assert!(e.0.contains("vehicle.connect_timeout_ms"), "{e}");
    }

    #[test]
    fn the_shipped_examples_parse() {
        for f in [
            "sim.toml",
            "px4-sitl.toml",
            "pixhawk-telem2.toml",
            "crazyflie.toml",
        ] {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../configs")
                .join(f);
            Config::load(&p).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }
}
