//! The core task: the one owner of the protocol core, its adapter and its receipt log.
//!
//! Every interface (HTTP, stdio, the operator CLI through HTTP) sends it a [`Cmd`] over a
//! bounded channel and awaits the answer; the bridge sends it vehicle events. After every input
//! it follows the core's call order (DESIGN §3): drain events to the hub, pass every ready
//! token to the final gate, append every receipt. The gate call itself is synchronous: nothing
//! in [`Core::pump`] awaits.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use px4_bridge::telemetry::{LandedState, Telemetry};
use px4_bridge::{Command, CommandOutcome, Event as BridgeEvent, Px4Mode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use super::hub::Hub;
use super::metrics::{Metrics, OutcomeLabel, SourceLabel};
use crate::contract::{Monitor, Op, Request as ContractRequest, Role as ContractRole};
use crate::core::digest::Digest;
use crate::core::engine::{Event, Gateway};
use crate::core::envelope::{MAX_RESPONSE_BYTES, Rejection};
use crate::core::gate::{Adapter, AdapterError, EffectGate, EnqueueRequest, GateOutcome};
use crate::core::ids::Id;
use crate::core::reason::ReasonCode;
use crate::core::state::{Certificate, SourceState, SourceUpdate, Value};
use crate::core::time::Nanos;
use crate::vehicle::px4::{source_update, telemetry_updates};
use crate::vehicle::{VehicleAdapter, VehicleLink};

mod crazyflie;

/// The vehicle bridge's event stream.
pub enum VehicleEvents {
    /// From the PX4 bridge.
    Px4(mpsc::Receiver<BridgeEvent>),
    /// From the Crazyflie bridge.
    Crazyflie(mpsc::Receiver<crazyflie_bridge::shell::BridgeEvent>),
}

enum VehicleEvent {
    Px4(BridgeEvent),
    Crazyflie(crazyflie_bridge::shell::BridgeEvent),
}

impl VehicleEvents {
    async fn recv(&mut self) -> Option<VehicleEvent> {
        match self {
            VehicleEvents::Px4(r) => r.recv().await.map(VehicleEvent::Px4),
            VehicleEvents::Crazyflie(r) => r.recv().await.map(VehicleEvent::Crazyflie),
        }
    }
}

/// An error answer: HTTP status, stable code, message, offending ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable reason code.
    pub code: ReasonCode,
    /// A message for people.
    pub message: String,
    /// Offending ids, if any.
    pub ids: Vec<String>,
}

impl ApiError {
    /// An error without ids.
    pub fn new(status: u16, code: ReasonCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            ids: Vec::new(),
        }
    }

    /// The JSON body: `{"error": {"code", "number", "message", "ids"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "code": self.code.name(),
            "number": self.code.number(),
            "message": self.message,
            "ids": self.ids,
        }})
    }

    fn rejection(r: &Rejection) -> ApiError {
        let status = match r.code() {
            ReasonCode::RESPONSE_TOO_LARGE => 413,
            ReasonCode::DUPLICATE_RESPONSE => 409,
            ReasonCode::TOO_MANY_RESPONSES => 429,
            ReasonCode::NO_OBLIGATION | ReasonCode::RESPONSE_UNKNOWN => 404,
            _ => 422,
        };
        ApiError {
            status,
            code: r.code(),
            message: r.message().to_string(),
            ids: r.ids().to_vec(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.message)
    }
}

/// An answer to an interface.
pub type Answer = Result<serde_json::Value, ApiError>;
/// Where the answer goes.
pub type Reply = oneshot::Sender<Answer>;

/// Sends one request to the core task and waits for its answer: the one way every interface
/// (HTTP, stdio) reaches the core. The queue is bounded and never waited on: a full queue is
/// `SERVICE_BUSY` at once.
pub async fn ask(cmds: &mpsc::Sender<Cmd>, make: impl FnOnce(Reply) -> Cmd) -> Answer {
    let shutting = || {
        ApiError::new(
            503,
            ReasonCode::SHUTTING_DOWN,
            "the gateway is shutting down",
        )
    };
    let (tx, rx) = oneshot::channel();
    match cmds.try_send(make(tx)) {
        Ok(()) => rx.await.unwrap_or_else(|_| Err(shutting())),
        Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::new(
            503,
            ReasonCode::SERVICE_BUSY,
            "the gateway's input queue is full; retry",
        )),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(shutting()),
    }
}

/// What the operator can ask of the vehicle and the gateway.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OperatorOp {
    /// Arm the vehicle.
    Arm,
    /// Disarm (on the ground).
    Disarm,
    /// PX4 takeoff to this height above home, m.
    Takeoff {
        /// Height above home, m.
        altitude_m: f64,
    },
    /// PX4 LAND at the current position.
    Land,
    /// PX4 RTL.
    ReturnToLaunch,
    /// Stop the current target and hold; no agent action dispatches until released.
    Hold,
    /// Release a hold and hand the vehicle (back) to the gateway after an override: agent
    /// actions may dispatch again.
    Release,
}

impl OperatorOp {
    /// The name used in URLs and receipts.
    pub fn name(&self) -> &'static str {
        match self {
            OperatorOp::Arm => "arm",
            OperatorOp::Disarm => "disarm",
            OperatorOp::Takeoff { .. } => "takeoff",
            OperatorOp::Land => "land",
            OperatorOp::ReturnToLaunch => "rtl",
            OperatorOp::Hold => "hold",
            OperatorOp::Release => "release",
        }
    }
}

/// One request to the core task.
pub enum Cmd {
    /// `POST /v1/responses`.
    Response {
        /// The envelope bytes.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/obligations/{id}/candidates`.
    Candidate {
        /// The obligation named by the path.
        obligation: u64,
        /// The candidate bytes.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/state/{source}`.
    State {
        /// Who writes: a provider or the operator (checked against the source's owner).
        caller: crate::core::catalog::Owner,
        /// Source name.
        source: String,
        /// The update body.
        bytes: Vec<u8>,
        /// When the request arrived, Unix ms (to map the provider's generation time).
        wall_ms: u64,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/certificates`.
    Certificate {
        /// The certificate body.
        bytes: Vec<u8>,
        /// Arrival time, Unix ms.
        wall_ms: u64,
        /// Answer.
        reply: Reply,
    },
    /// `DELETE /v1/certificates/{id}`.
    Revoke {
        /// Certificate id.
        id: String,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/responses/{id}`.
    GetResponse {
        /// Response id.
        id: String,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/obligations`.
    Obligations {
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/status`.
    Status {
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/audit/head`: the audit key and the latest signed checkpoint.
    AuditHead {
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/audit/exported`: the operator kept a signed head off the machine.
    HeadExported {
        /// `{"log", "count", "head"}`.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/contract` (operator, provider) and `POST /v1/goals` (agent): one
    /// mission-contract operation, as the monitor's JSON request body.
    Contract {
        /// Who calls.
        caller: ContractRole,
        /// The operation JSON (`{"op": "propose_goal", ...}`).
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/contract`.
    ContractStatus {
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/goals/witness`: the witness claim for an edit at current versions.
    Witness {
        /// `{"parent": .., "goal": GoalSpec}`.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/operator/{op}`.
    Operator {
        /// What.
        op: OperatorOp,
        /// Answer, once the vehicle answered (or at once for hold and release).
        reply: Reply,
    },
}

/// A provider's update as sent to `POST /v1/state/{source}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateBody {
    /// Typed value, per the catalog's kind for the source (`null` for epoch-only sources).
    #[serde(default)]
    pub value: serde_json::Value,
    /// Epoch or version.
    pub epoch: u64,
    /// Who produced it.
    pub provenance: Id,
    /// When the data was generated, Unix ms on the provider's clock.
    pub generated_at_unix_ms: u64,
}

/// A certificate as sent to `POST /v1/certificates`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateBody {
    /// Certificate id, as components reference it.
    pub id: Id,
    /// The exact component digest it covers (64 hex digits; `halo-gateway digest` prints it).
    pub covers: String,
    /// End of the certified interval, Unix ms.
    #[serde(default)]
    pub valid_until_unix_ms: Option<u64>,
    /// Or: length of the certified interval from now, ms.
    #[serde(default)]
    pub valid_for_ms: Option<u64>,
    /// Who issued it.
    pub issuer: Id,
}

/// The adapter the gate calls: the vehicle's bridge, closed while the operator holds and once
/// the receipt log refuses.
pub struct ServiceAdapter {
    /// The bridge adapter.
    pub vehicle: VehicleAdapter,
    /// While true every enqueue is refused (`NotReady`).
    pub held: bool,
    /// False once a receipt could not be written (or the file cap was reached): every enqueue
    /// is refused for the rest of the process.
    pub receipts_ok: bool,
}

impl Adapter for ServiceAdapter {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        if self.held || !self.receipts_ok {
            return Err(AdapterError::NotReady);
        }
        self.vehicle.try_enqueue(req)
    }
}

/// The mission contract's conjunct at the final gate, over the monitor.
pub struct ContractGate<'a> {
    /// The monitor.
    pub monitor: &'a mut Monitor,
}

impl ContractGate<'_> {
    /// The current witness path's leaf (the path runs leaf first, up to the root); without a
    /// current path (a suspended root) the root goal, so the monitor answers why.
    fn leaf(&self) -> String {
        self.monitor
            .witness_path()
            .and_then(|p| p.first().cloned())
            .or_else(|| {
                self.monitor
                    .goal_revisions()
                    .into_keys()
                    .find(|g| self.monitor.parent_of(g).is_none())
            })
            .unwrap_or_default()
    }
}

impl EffectGate for ContractGate<'_> {
    fn active(&self) -> bool {
        self.monitor.root_state().is_some()
    }

    fn authorize(&mut self, effect: &str) -> Result<u64, ReasonCode> {
        let goal = self.leaf();
        let d = self.monitor.handle(ContractRequest {
            caller: ContractRole::Agent,
            op: Op::AuthorizeEffect {
                effect: effect.to_string(),
                goal,
            },
        });
        match (d.allowed(), d.reservation) {
            (true, Some(r)) => Ok(r),
            _ => Err(d.reason.unwrap_or(ReasonCode::EFFECT_NOT_ADMITTED)),
        }
    }

    fn commit(&mut self, reservation: u64, effect: &str, key: &str) -> Result<(), ReasonCode> {
        let d = self.monitor.handle(ContractRequest {
            caller: ContractRole::Agent,
            op: Op::CommitEffect {
                effect: effect.to_string(),
                key: key.to_string(),
                reservation,
            },
        });
        if d.allowed() {
            Ok(())
        } else {
            Err(d.reason.unwrap_or(ReasonCode::EFFECT_MISMATCH))
        }
    }
}

/// What the service knows of the vehicle, from the bridge's events.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VehicleView {
    /// Link up.
    pub link_up: bool,
    /// PX4 mode name.
    pub mode: Option<String>,
    /// Armed.
    pub armed: bool,
    /// Landed state.
    pub landed_state: Option<String>,
    /// Local position, NED m.
    pub position_ned_m: Option<[f32; 3]>,
    /// Battery, percent (PX4).
    pub battery_pct: Option<f32>,
    /// Battery, volts (Crazyflie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub battery_v: Option<f32>,
    /// Downward range, m (Crazyflie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub z_range_m: Option<f32>,
    /// The newest ping round trip to the Crazyflie, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_latency_ms: Option<f64>,
    /// The Crazyradio's average retries per acknowledged packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_retries: Option<f32>,
    /// The Crazyflie's supervisor latched Locked (a watchdog cut the motors; power-cycle it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
    /// Home altitude AMSL, m (from GLOBAL_POSITION_INT).
    pub home_amsl_m: Option<f64>,
    /// Setpoints sent since start.
    pub setpoints_sent: u64,
    /// Who flies: `gateway` (the operator handed it the vehicle), `operator_hold` (held by
    /// the operator), `operator` (not handed over yet, or taken back by an override).
    pub control: &'static str,
    /// The mode of the last override (a mode change the gateway did not command), until the
    /// operator releases.
    pub override_mode: Option<String>,
}

struct Pending {
    op: OperatorOp,
    command: Command,
    reply: Reply,
    deadline: Instant,
}

/// The core task's state.
pub struct Core {
    /// The protocol core.
    pub gw: Gateway,
    /// The adapter.
    pub adapter: ServiceAdapter,
    /// The mission-contract monitor (its conjunct is active once a root is registered).
    pub monitor: Monitor,
    operator_effects: u64,
    /// The shared monotonic origin.
    pub origin: Instant,
    /// The vehicle URL, for people.
    vehicle_url: String,
    /// Since when no heartbeat was heard (start, or the link's loss), and the last warning.
    silent_since: Option<Instant>,
    last_silence_warning: Option<Instant>,
    /// Wall-clock Unix ms at `origin`.
    pub origin_wall_ms: u64,
    /// The receipt log (`None`: receipts are sealed and counted, not kept).
    pub receipts: Option<super::receipts::ReceiptLog>,
    /// Its path.
    pub receipts_path: Option<PathBuf>,
    /// Receipts sealed without a log.
    receipts_unlogged: u64,
    /// Why dispatch closed for good: the receipt log refused (a failed write, the file cap).
    failed_closed: Option<String>,
    /// What to do with the vehicle when the receipt log refuses.
    full_action: FullAction,
    /// The previous start's last signed checkpoint.
    previous_head: Option<PreviousHead>,
    /// The event hub.
    pub hub: Hub,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The vehicle.
    pub vehicle: VehicleView,
    /// Boot epoch.
    pub boot_epoch: u64,
    pending: VecDeque<Pending>,
    /// A deny-hold asked of the bridge: binding and the instant support was lost.
    deny_hold_since: Option<([u8; 32], Nanos)>,
    last_link_refresh: Nanos,
    /// The bridge's last reported permission to fly (the operator handed it the vehicle and no
    /// override took it back since).
    control_granted: bool,
    last_housekeeping: Instant,
    audit: Option<Signing>,
    /// The epoch of the vehicle's own sources: 1 for PX4; a Crazyflie's connection count.
    vehicle_epoch: u64,
}

/// What the service does with the vehicle when receipts cannot be written (`receipts.full_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FullAction {
    /// Stop dispatching, hold the vehicle (PX4 HOLD) and refuse new work; the operator lands.
    #[default]
    Refuse,
    /// As `Refuse`, and command a landing where the vehicle is.
    Land,
}

/// How the receipts of a start ended, for the exit code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptSummary {
    /// Receipts on disk.
    pub written: u64,
    /// Receipts that could not be written.
    pub lost: u64,
    /// Why the log refused, if it did.
    pub failure: Option<String>,
}

/// The last signed checkpoint of the start before this one, found at the end of its log at
/// start (its shutdown checkpoint after a clean stop), so the operator can keep it: it is
/// written as that start stops, after the last head a follower could fetch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PreviousHead {
    /// Its log (`boot-3`).
    pub log: String,
    /// The checkpoint.
    pub checkpoint: crate::core::receipt::Checkpoint,
}

impl PreviousHead {
    /// The newest receipt file in `dir` that is not `current`'s log, if it ends with a signed
    /// checkpoint.
    pub fn find(dir: &std::path::Path, current: &std::path::Path) -> Option<PreviousHead> {
        use super::receipts::{files_in, last_line, stem_of};
        let now = stem_of(current);
        let files = files_in(dir, "");
        let last = files.iter().rev().find(|p| stem_of(p) != now)?;
        let line = last_line(last).ok()??;
        let r = crate::audit::parse_line(&line).ok()?;
        let checkpoint = crate::core::receipt::Checkpoint::from_body(&r.body).ok()??;
        Some(PreviousHead {
            log: stem_of(last)?,
            checkpoint,
        })
    }
}

/// Checkpoint signing: the key, when checkpoints are due, and the latest one.
pub struct Signing {
    signer: crate::audit::Signer,
    every: u64,
    interval: Duration,
    /// Receipts written since the last checkpoint.
    since: u64,
    /// When the oldest of them was written.
    since_at: Option<Instant>,
    latest: Option<crate::core::receipt::Checkpoint>,
    /// The newest checkpoints written this start, `(count, head)`, for the operator's
    /// confirmation that one was kept ([`ISSUED_KEPT`] at most).
    issued: VecDeque<(u64, Digest)>,
}

/// Checkpoints remembered for `POST /v1/audit/exported`.
const ISSUED_KEPT: usize = 64;

impl Signing {
    /// Signs with `signer` after at most `every` receipts or `interval` after the oldest
    /// receipt no checkpoint covers yet, and at shutdown.
    pub fn new(signer: crate::audit::Signer, every: u64, interval: Duration) -> Signing {
        Signing {
            signer,
            every: every.max(1),
            interval,
            since: 0,
            since_at: None,
            latest: None,
            issued: VecDeque::new(),
        }
    }
}

/// The usual causes of a vehicle link without heartbeats, for the URL in use.
pub fn link_hint(url: &str) -> String {
    let u = url.trim_start_matches("udp://");
    if u.starts_with("udpin:") {
        format!(
            "nothing sends to {}: PX4 SITL sends to 14540 (its offboard link; 14550 is the ground              station's), a real PX4 needs a MAVLink instance in Onboard mode (MAV_x_MODE) sending              to this address, and a firewall may drop the datagrams",
            u.trim_start_matches("udpin:")
        )
    } else if u.starts_with("udpout:") || u.starts_with("tcpout:") {
        format!("nothing answers at {}", &u[7..])
    } else if let Some(dev) = u.strip_prefix("serial:") {
        format!(
            "check the cable and {dev}: the baud rate (PX4's SER_TEL2_BAUD), PX4's MAV_1_CONFIG =              TELEM 2 and MAV_1_MODE = Onboard, that no serial console uses the port, and that this              user is in the device's group (dialout)"
        )
    } else if url.starts_with("radio://") || url.starts_with("usb://") {
        "check the Crazyradio, its channel and address, and that the Crazyflie is on".into()
    } else {
        "check the vehicle URL".into()
    }
}

/// Unix ms now.
pub fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn mode_name(m: Px4Mode) -> String {
    m.to_string()
}

/// A vehicle command as people read it.
pub fn command_text(c: &Command) -> String {
    match c {
        Command::Arm => "arm".into(),
        Command::Disarm => "disarm".into(),
        Command::SetMode { mode } => format!("set mode {mode}"),
        Command::Takeoff {
            altitude_amsl_m: Some(a),
        } => format!("takeoff to {a:.1} m AMSL"),
        Command::Takeoff {
            altitude_amsl_m: None,
        } => "takeoff to the default altitude".into(),
        Command::Land => "land".into(),
        Command::ReturnToLaunch => "return to launch".into(),
        Command::SetMessageInterval {
            message_id,
            interval_us,
        } => {
            if *interval_us > 0 {
                format!(
                    "stream message {message_id} at {:.1} Hz",
                    1e6 / f64::from(*interval_us)
                )
            } else {
                format!("stop message {message_id}")
            }
        }
    }
}

/// A command outcome as people read it.
pub fn outcome_text(o: CommandOutcome) -> &'static str {
    match o {
        CommandOutcome::Accepted => "accepted",
        CommandOutcome::Denied => "denied",
        CommandOutcome::TemporarilyRejected => "temporarily rejected",
        CommandOutcome::Unsupported => "unsupported",
        CommandOutcome::Failed => "failed",
        CommandOutcome::Cancelled => "cancelled",
        CommandOutcome::TimedOut => "timed out (no answer after every retry)",
        CommandOutcome::NotConfirmed => "acknowledged but the mode never showed",
        CommandOutcome::LinkLost => "link lost before an answer",
    }
}

fn landed_text(s: LandedState) -> &'static str {
    match s {
        LandedState::OnGround => "on ground",
        LandedState::InAir => "in air",
        LandedState::Takeoff => "taking off",
        LandedState::Landing => "landing",
        LandedState::Undefined => "unknown",
    }
}

fn gate_label(o: &GateOutcome) -> &'static str {
    match o {
        GateOutcome::Dispatched { .. } => "dispatched",
        GateOutcome::Denied { .. } => "denied",
        GateOutcome::Refused { .. } => "refused",
        GateOutcome::EnqueueFailed { .. } => "enqueue_failed",
    }
}

impl Core {
    /// A core task over `gw`, driving `handle`.
    #[allow(
        clippy::too_many_arguments,
        reason = "one constructor wires the task once"
    )]
    pub fn new(
        gw: Gateway,
        monitor: Monitor,
        link: VehicleLink,
        origin: Instant,
        origin_wall_ms: u64,
        receipts: Option<super::receipts::ReceiptLog>,
        hub: Hub,
        metrics: Arc<Metrics>,
        boot_epoch: u64,
    ) -> Core {
        let receipts_path = receipts.as_ref().map(|r| r.current().to_path_buf());
        // PX4: the bridge's permission (`vehicle.control_at_start`); a Crazyflie: granted by an
        // operator takeoff or release.
        let control_granted = match &link {
            VehicleLink::Px4(h) => h.offboard_permitted(),
            VehicleLink::Crazyflie(_) => false,
        };
        Core {
            gw,
            adapter: ServiceAdapter {
                vehicle: VehicleAdapter::new(link),
                held: false,
                receipts_ok: true,
            },
            monitor,
            operator_effects: 0,
            origin,
            origin_wall_ms,
            receipts,
            receipts_path,
            receipts_unlogged: 0,
            failed_closed: None,
            full_action: FullAction::Refuse,
            previous_head: None,
            vehicle_url: String::new(),
            silent_since: Some(origin),
            last_silence_warning: None,
            hub,
            metrics,
            vehicle: VehicleView::default(),
            boot_epoch,
            pending: VecDeque::new(),
            deny_hold_since: None,
            last_link_refresh: Nanos::ZERO,
            control_granted,
            last_housekeeping: origin,
            audit: None,
            vehicle_epoch: 1,
        }
    }

    /// The vehicle URL, named in warnings and refusals.
    #[must_use]
    pub fn with_vehicle_url(mut self, url: &str) -> Core {
        self.vehicle_url = url.to_string();
        self
    }

    /// While no heartbeat arrives: a warning every five seconds naming the URL and the usual
    /// causes.
    fn warn_if_silent(&mut self, t: Instant) {
        let Some(since) = self.silent_since else {
            return;
        };
        let silent = t.duration_since(since);
        if silent < Duration::from_secs(3)
            || self
                .last_silence_warning
                .is_some_and(|w| t.duration_since(w) < Duration::from_secs(5))
        {
            return;
        }
        self.last_silence_warning = Some(t);
        tracing::warn!(
            vehicle = %self.vehicle_url,
            silent_s = silent.as_secs(),
            "no heartbeat from the vehicle for {} s: {}",
            silent.as_secs(),
            link_hint(&self.vehicle_url)
        );
    }

    /// The previous start's last signed checkpoint, offered at `GET /v1/audit/head`.
    #[must_use]
    pub fn with_previous_head(mut self, head: Option<PreviousHead>) -> Core {
        self.previous_head = head;
        self
    }

    /// What to do with the vehicle when the receipt log refuses.
    #[must_use]
    pub fn with_full_action(mut self, action: FullAction) -> Core {
        self.full_action = action;
        self
    }

    /// How the receipts ended: on disk, lost, and why the log refused.
    pub fn receipt_summary(&self) -> ReceiptSummary {
        match &self.receipts {
            Some(r) => ReceiptSummary {
                written: r.written(),
                lost: r.lost(),
                failure: self.failed_closed.clone(),
            },
            None => ReceiptSummary {
                written: self.receipts_unlogged,
                lost: 0,
                failure: None,
            },
        }
    }

    /// Signs checkpoints into the receipt chain.
    #[must_use]
    pub fn with_signing(mut self, signing: Signing) -> Core {
        self.audit = Some(signing);
        self
    }

    /// Now on the shared monotonic clock.
    pub fn now(&self) -> Nanos {
        Nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Maps a remote wall-clock time onto the monotonic clock, given the wall time `wall_now`
    /// that corresponds to `now`. Times before the origin map to 0 (they are stale anyway).
    fn map_wall(now: Nanos, wall_now_ms: u64, remote_ms: u64) -> Nanos {
        let delta_ns = (i128::from(remote_ms) - i128::from(wall_now_ms)) * 1_000_000;
        let t = i128::from(now.0) + delta_ns;
        Nanos(u64::try_from(t.clamp(0, i128::from(u64::MAX))).unwrap_or(0))
    }

    fn publish(&self, name: &'static str, data: &impl Serialize) {
        if let Ok(s) = serde_json::to_string(data) {
            self.hub.publish(name, s);
            self.metrics.events.inc();
        }
    }

    /// The core's output side, in the documented order: events, the final gate for every
    /// ready token, receipts. Synchronous.
    pub fn pump(&mut self) {
        let now = self.now();
        self.gw.handle_timeout(now);
        loop {
            let mut progressed = false;
            while let Some(e) = self.gw.poll_event() {
                self.on_core_event(&e);
                progressed = true;
            }
            while let Some(tok) = self.gw.poll_dispatch() {
                let t0 = Instant::now();
                let out = self.gw.final_gate_with(
                    self.now(),
                    tok,
                    &mut self.adapter,
                    &mut ContractGate {
                        monitor: &mut self.monitor,
                    },
                );
                self.metrics
                    .gate_seconds
                    .observe(t0.elapsed().as_secs_f64());
                self.contract_receipts();
                self.on_gate(&out);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        // Streams the adapter ended (replaced, held, expired) no longer watch their support.
        for (r, c) in self.adapter.vehicle.take_ended() {
            self.gw.stream_ended(&r, &c);
        }
        // INVARIANT (receipt before setpoint): what the gate staged reaches the bridge only
        // after the receipts of this pump, its own among them, were appended whole.
        if self.write_receipts() {
            self.adapter.vehicle.release_staged();
        } else {
            let dropped = self.adapter.vehicle.discard_staged_targets();
            self.fail_closed(&dropped);
        }
    }

    /// The receipt log refused: no dispatch from now on, the vehicle holds (and lands with
    /// `receipts.full_action = "land"`), an alarm for people; the records saying so go into the
    /// space the log's reserve freed. Runs once.
    fn fail_closed(&mut self, dropped: &[[u8; 32]]) {
        let now = self.now();
        let why = match self.receipts.as_ref().map(|r| r.health().clone()) {
            Some(super::receipts::Health::Refusing(w)) => w.to_string(),
            _ => "receipts could not be written".to_string(),
        };
        let first = self.failed_closed.is_none();
        self.adapter.receipts_ok = false;
        self.metrics.receipts_refusing.set(1);
        let withheld: Vec<(Id, Id)> = dropped
            .iter()
            .filter_map(|b| self.adapter.vehicle.attribute(b))
            .map(|(r, c)| (r.clone(), c.clone()))
            .collect();
        for (r, c) in &withheld {
            self.gw.stream_ended(r, c);
        }
        if first {
            self.failed_closed = Some(why.clone());
            let streaming = self.adapter.vehicle.last_target.is_some() || !dropped.is_empty();
            let hold = self.adapter.vehicle.hold();
            self.adapter.vehicle.target_ended();
            if self.full_action == FullAction::Land {
                if let Some(px4) = self.adapter.vehicle.px4() {
                    let _ = px4.command(Command::Land);
                } else if let Some(cf) = self.adapter.vehicle.crazyflie() {
                    let _ = cf.land();
                }
            }
            tracing::error!(
                reason = %why,
                withheld = withheld.len(),
                "receipts unavailable: nothing dispatches, the vehicle holds{}; restart with room for receipts",
                if self.full_action == FullAction::Land { " and lands" } else { "" }
            );
            let ids: Vec<_> = withheld
                .iter()
                .map(|(r, c)| json!({"response": r, "component": c}))
                .collect();
            self.gw.record_external(
                now,
                "receipts_unavailable",
                json!({"reason": why, "withheld": ids, "hold": hold.is_ok(), "was_streaming": streaming,
                       "action": match self.full_action { FullAction::Refuse => "hold", FullAction::Land => "land" }}),
            );
            self.publish(
                "receipts_unavailable",
                &json!({"reason": why, "withheld": ids, "action": match self.full_action { FullAction::Refuse => "hold", FullAction::Land => "land" }}),
            );
            self.publish_control();
        }
        // The records of the hold go out now (into the freed reserve); nothing is staged but
        // holds, which are released whatever the outcome.
        let _ = self.write_receipts();
        self.adapter.vehicle.discard_staged_targets();
    }

    fn receipts_refusal(&self) -> Option<ApiError> {
        self.failed_closed.as_ref().map(|why| {
            ApiError::new(
                503,
                ReasonCode::RECEIPTS_UNAVAILABLE,
                format!("receipts cannot be written ({why}); the gateway holds the vehicle and takes no new work until it is restarted with room for receipts"),
            )
        })
    }

    /// Moves the monitor's sealed receipts into the one log, whole (its own chain inside).
    fn contract_receipts(&mut self) {
        let now = self.now();
        while let Some(r) = self.monitor.poll_receipt() {
            let v = serde_json::to_value(&r).unwrap_or(serde_json::Value::Null);
            self.gw.record_external(now, "contract", v);
        }
    }

    /// Seals every pending receipt and appends them (a signed checkpoint too when one is due);
    /// true when every one of them was written whole and the log still takes records.
    fn write_receipts(&mut self) -> bool {
        let due = self
            .audit
            .as_ref()
            .is_some_and(|a| a.since.saturating_add(self.gw.pending_receipts() as u64) >= a.every);
        if due {
            return self.checkpoint(false);
        }
        let base = self.origin_wall_ms;
        let mut lines = Vec::new();
        while let Some(r) = self
            .gw
            .poll_receipt_with_wall(|at| Some(base.saturating_add(at.as_ms())))
        {
            lines.push(r.to_json_line());
        }
        let n = lines.len() as u64;
        let ok = self.append(&lines);
        if n > 0 {
            if let Some(a) = self.audit.as_mut() {
                a.since += n;
                a.since_at.get_or_insert_with(Instant::now);
            }
        }
        ok
    }

    /// Appends sealed receipts to the log and counts them; true when all were written and the
    /// log still takes records.
    fn append(&mut self, lines: &[String]) -> bool {
        let Some(log) = self.receipts.as_mut() else {
            self.receipts_unlogged += lines.len() as u64;
            return true;
        };
        if lines.is_empty() {
            return log.health() == &super::receipts::Health::Ok;
        }
        let errors_before = log.write_errors();
        let a = log.append(lines);
        self.metrics.receipts_written.inc_by(a.written);
        if a.lost > 0 {
            self.metrics.receipts_lost.inc_by(a.lost);
        }
        let errors = log.write_errors() - errors_before;
        if errors > 0 {
            self.metrics.receipt_write_errors.inc_by(errors);
        }
        a.lost == 0 && !a.failed_now && log.health() == &super::receipts::Health::Ok
    }

    /// Seals what is pending and a signed checkpoint over the whole chain so far (`last` at
    /// shutdown), writes them and syncs the log. No checkpoint is signed once a receipt was
    /// lost: its signature would cover records that are not on disk. True as
    /// [`Core::write_receipts`].
    fn checkpoint(&mut self, last: bool) -> bool {
        let may_sign = self
            .receipts
            .as_ref()
            .is_none_or(super::receipts::ReceiptLog::may_sign);
        let now = self.now();
        let base = self.origin_wall_ms;
        let wall = base.saturating_add(now.as_ms());
        let (lines, signed) = match self.audit.as_mut() {
            Some(a) if may_sign => {
                let mut signed = None;
                let rs = self.gw.seal_with_checkpoint(
                    now,
                    |at| Some(base.saturating_add(at.as_ms())),
                    |head, count| {
                        let cp = a.signer.checkpoint(head, count, now.0, wall, last);
                        signed = Some(cp.clone());
                        cp
                    },
                );
                a.since = 0;
                a.since_at = None;
                (
                    rs.iter()
                        .map(crate::core::Receipt::to_json_line)
                        .collect::<Vec<_>>(),
                    signed,
                )
            }
            _ => {
                let rs: Vec<String> = std::iter::from_fn(|| {
                    self.gw
                        .poll_receipt_with_wall(|at| Some(base.saturating_add(at.as_ms())))
                })
                .map(|r| r.to_json_line())
                .collect();
                (rs, None)
            }
        };
        let ok = self.append(&lines);
        let synced = match self.receipts.as_mut() {
            Some(w) => w.sync().is_ok(),
            None => true,
        };
        if let (Some(cp), true) = (signed, ok && synced) {
            tracing::debug!(count = cp.count, head = %cp.head.short(), last, "signed checkpoint");
            if let Some(a) = self.audit.as_mut() {
                if a.issued.len() == ISSUED_KEPT {
                    a.issued.pop_front();
                }
                a.issued.push_back((cp.count, cp.head));
                a.latest = Some(cp);
            }
        }
        ok && synced
    }

    /// `GET /v1/audit/head`: the audit key, this start's newest signed checkpoint (only one
    /// whose record is on disk), the previous start's last one, and what the operator confirmed
    /// as kept off the machine. `halo-gateway audit verify --head` reads this body as it is.
    fn audit_head(&self) -> serde_json::Value {
        let log = self.receipts.as_ref().map(|r| r.stem().to_string());
        let exported = self.receipts.as_ref().map(|r| {
            let e = r.exported();
            let mut m = serde_json::Map::new();
            if let Some(l) = &log {
                m.insert(l.clone(), e.covered(l).into());
            }
            if let Some(p) = &self.previous_head {
                m.insert(p.log.clone(), e.covered(&p.log).into());
            }
            m
        });
        json!({
            "public_key": self.audit.as_ref().map(|a| a.signer.public_hex()),
            "log": log,
            "checkpoint": self.audit.as_ref().and_then(|a| a.latest.as_ref()),
            "previous": self.previous_head,
            "exported": exported,
        })
    }

    /// `POST /v1/audit/exported`: the operator kept this signed head off the machine, so
    /// rotation may delete what it covers once the log is of an earlier start.
    fn head_exported(&mut self, bytes: &[u8]) -> Answer {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Kept {
            log: String,
            count: u64,
            head: String,
        }
        let k: Kept = serde_json::from_slice(bytes).map_err(|err| {
            let e = crate::core::strict::explain(bytes, &err);
            ApiError::new(
                400,
                ReasonCode::INVALID_REQUEST,
                format!("expected {{\"log\", \"count\", \"head\"}} of a signed head: {e}"),
            )
        })?;
        let head = Digest::from_hex(&k.head)
            .map_err(|e| ApiError::new(400, ReasonCode::INVALID_REQUEST, format!("`head`: {e}")))?;
        let ours = self.receipts.as_ref().map(|r| r.stem().to_string());
        let known = if Some(&k.log) == ours.as_ref() {
            self.audit
                .as_ref()
                .is_some_and(|a| a.issued.iter().any(|(c, h)| *c == k.count && *h == head))
        } else {
            self.previous_head.as_ref().is_some_and(|p| {
                p.log == k.log && p.checkpoint.count == k.count && p.checkpoint.head == head
            })
        };
        if !known {
            return Err(ApiError::new(
                404,
                ReasonCode::NOT_FOUND,
                format!(
                    "`{}` has no signed head at receipt {} with that chain head that this gateway issued or found",
                    k.log, k.count
                ),
            ));
        }
        let Some(log) = self.receipts.as_mut() else {
            return Err(ApiError::new(
                404,
                ReasonCode::NOT_FOUND,
                "this gateway keeps no receipt log",
            ));
        };
        let moved = log.mark_exported(&k.log, k.count + 1).map_err(|e| {
            ApiError::new(
                503,
                ReasonCode::RECEIPTS_UNAVAILABLE,
                format!("cannot record the exported head: {e}"),
            )
        })?;
        let now = self.now();
        if moved {
            self.gw.record_external(
                now,
                "head_exported",
                json!({"log": k.log, "count": k.count, "head": head}),
            );
            self.pump();
        }
        Ok(json!({"log": k.log, "covered": k.count + 1, "recorded": moved}))
    }

    fn on_core_event(&mut self, e: &Event) {
        match e {
            Event::Phase {
                response,
                component,
                phase,
                reason,
            } => {
                self.metrics.decision(reason.map(|r| r.name()));
                if let Some(r) = reason {
                    tracing::info!(%response, %component, %phase, reason = %r, "phase");
                } else {
                    tracing::debug!(%response, %component, %phase, "phase");
                }
                self.publish("phase", e);
            }
            Event::Emit {
                response,
                component,
                path,
                payload,
            } => {
                tracing::info!(%response, %component, path = %path, "emitted");
                // The payload as the agent wrote it, without the kind's enum tag.
                let body = match serde_json::to_value(payload.as_ref()) {
                    Ok(serde_json::Value::Object(m)) if m.len() == 1 => m
                        .into_iter()
                        .next()
                        .map_or(serde_json::Value::Null, |(_, v)| v),
                    Ok(v) => v,
                    Err(_) => serde_json::Value::Null,
                };
                self.publish(
                    "emit",
                    &json!({"event": "emit", "response": response, "component": component,
                            "path": path, "payload": body}),
                );
            }
            Event::ObligationCreated { obligation } => {
                tracing::info!(
                    obligation = obligation.id.0,
                    response = %obligation.response,
                    component = %obligation.component,
                    reason = %obligation.reason,
                    "obligation created: refresh requested"
                );
                self.publish("obligation_created", e);
            }
            Event::ObligationChanged { .. } => self.publish("obligation_changed", e),
            Event::SupportLost {
                response,
                component,
                binding,
                code,
            } => self.deny_hold(response, component, *binding, *code),
        }
    }

    /// A streaming action lost its support: hold at once if the bridge still streams it.
    fn deny_hold(&mut self, response: &Id, component: &Id, binding: Digest, code: ReasonCode) {
        let now = self.now();
        // Only the newest target handed to the bridge is held, and only while the bridge says
        // a setpoint would be taken: when PX4 or a pilot owns the vehicle (a landing, RTL, a
        // manual mode) the bridge is not offboard-capable and nothing here interrupts them.
        // The bridge takes inputs in order, so a hold sent right after an enqueue it has not
        // processed yet still stops that target.
        let streaming = self.adapter.vehicle.last_target == Some(binding.0)
            && self.adapter.vehicle.takes_setpoints();
        if streaming {
            let r = self.adapter.vehicle.hold();
            self.adapter.vehicle.target_ended();
            self.deny_hold_since = r.is_ok().then_some((binding.0, now));
            tracing::warn!(%response, %component, reason = %code, "support lost while streaming: deny-hold");
        }
        self.gw.record_external(
            now,
            "deny_hold",
            json!({"response": response, "component": component, "binding": binding,
                   "code": code, "held": streaming}),
        );
        self.publish(
            "deny_hold",
            &json!({"response": response, "component": component, "binding": binding,
                    "reason": code, "held": streaming}),
        );
    }

    fn on_gate(&mut self, out: &GateOutcome) {
        self.metrics
            .gate_outcomes
            .get_or_create(&OutcomeLabel {
                outcome: gate_label(out).into(),
            })
            .inc();
        match out {
            GateOutcome::Dispatched {
                response,
                component,
                binding,
                ..
            } => {
                tracing::info!(%response, %component, binding = %binding.short(), "final gate: dispatched");
            }
            GateOutcome::Denied {
                response,
                component,
                code,
                ..
            } => tracing::warn!(%response, %component, reason = %code, "final gate: denied"),
            GateOutcome::Refused { code } => {
                tracing::warn!(reason = %code, "final gate: token refused");
            }
            GateOutcome::EnqueueFailed {
                response,
                component,
                error,
                ..
            } => {
                tracing::warn!(%response, %component, error = %error, "final gate: the vehicle adapter refused the enqueue");
            }
        }
        self.publish("gate", out);
    }

    /// Feeds one bridge event.
    pub fn on_bridge_event(&mut self, ev: &BridgeEvent) {
        let now = self.now();
        for u in telemetry_updates(self.gw.catalog(), ev, now) {
            self.vehicle_update(now, u);
        }
        if let BridgeEvent::TargetObserved { binding, .. } = ev {
            self.observed(now, binding);
        }
        match ev {
            BridgeEvent::Telemetry(u) => {
                self.refresh_link(now, u.generated_at.0, u.uncertainty_ns);
                match &u.data {
                    Telemetry::LocalPosition {
                        north_m,
                        east_m,
                        down_m,
                        ..
                    } => self.vehicle.position_ned_m = Some([*north_m, *east_m, *down_m]),
                    Telemetry::Battery {
                        remaining_pct: Some(p),
                        ..
                    } => self.vehicle.battery_pct = Some(*p),
                    Telemetry::GlobalPosition {
                        alt_m,
                        relative_alt_m,
                        ..
                    } => {
                        self.vehicle.home_amsl_m = Some(f64::from(*alt_m - *relative_alt_m));
                    }
                    Telemetry::Landed { state } => {
                        self.vehicle.landed_state = Some(landed_text(*state).into());
                    }
                    _ => {}
                }
            }
            BridgeEvent::AutopilotDiscovered {
                system_id,
                component_id,
            } => {
                tracing::info!(system_id, component_id, "autopilot found");
                self.publish(
                    "vehicle_found",
                    &json!({"system_id": system_id, "component_id": component_id}),
                );
            }
            BridgeEvent::Link { up, silent_ms } => {
                self.vehicle.link_up = *up;
                self.silent_since = if *up {
                    None
                } else {
                    Some(Instant::now() - Duration::from_millis(*silent_ms))
                };
                self.last_silence_warning = None;
                self.metrics.link_up.set(i64::from(*up));
                if *up {
                    tracing::info!("autopilot link up");
                } else {
                    tracing::warn!(silent_ms, "autopilot link down: no heartbeat");
                }
                self.publish("vehicle_link", &json!({"up": up, "silent_ms": silent_ms}));
            }
            BridgeEvent::ModeChanged { from, to } => {
                let from_s = from.map(mode_name);
                tracing::info!(from = from_s.as_deref().unwrap_or("unknown"), to = %to, "PX4 mode");
                self.vehicle.mode = Some(mode_name(*to));
                self.publish(
                    "vehicle_mode",
                    &json!({"from": from_s, "to": mode_name(*to)}),
                );
            }
            BridgeEvent::ArmedChanged { armed } => {
                self.vehicle.armed = *armed;
                tracing::info!(armed, "PX4 {}", if *armed { "armed" } else { "disarmed" });
                self.publish("vehicle_armed", &json!({"armed": armed}));
            }
            BridgeEvent::Command {
                command, outcome, ..
            } => {
                let text = command_text(command);
                if !matches!(command, Command::SetMessageInterval { .. }) {
                    tracing::info!(command = %text, outcome = outcome_text(*outcome), "PX4 command");
                }
                self.publish(
                    "vehicle_command",
                    &json!({"command": text, "outcome": outcome_text(*outcome)}),
                );
                if let Some(i) = self.pending.iter().position(|p| p.command == *command) {
                    if let Some(p) = self.pending.remove(i) {
                        self.finish_operator(p, *outcome);
                    }
                }
            }
            BridgeEvent::StatusText { severity, text } => {
                if *severity <= 4 {
                    tracing::warn!(severity, "PX4: {text}");
                } else {
                    tracing::info!(severity, "PX4: {text}");
                }
                self.publish("vehicle_text", &json!({"severity": severity, "text": text}));
            }
            BridgeEvent::TargetStarted {
                binding,
                fingerprint,
                valid_until,
            } => self.target_started(binding, &fingerprint.to_string(), valid_until.0),
            BridgeEvent::TargetExpired {
                binding,
                fingerprint,
            } => self.target_expired(binding, &fingerprint.to_string()),
            BridgeEvent::Holding { kind, reason } => {
                self.holding(now, json!(kind));
                self.publish("vehicle_hold", &json!({"kind": kind, "reason": reason}));
            }
            BridgeEvent::EnqueueDropped { binding, reason } => {
                self.adapter.vehicle.target_ended_if(binding);
                tracing::warn!(reason = %reason, "the bridge dropped an enqueued target");
                self.publish(
                    "vehicle_target",
                    &json!({"state": "dropped", "binding": Digest(*binding), "reason": reason.to_string()}),
                );
            }
            BridgeEvent::Override { from, to } => {
                // The pilot wins: the bridge already stopped streaming and will not fly until
                // the operator releases; pending actions meet a closed adapter at the gate.
                self.adapter.vehicle.target_ended();
                let from_s = from.map(mode_name);
                tracing::warn!(
                    from = from_s.as_deref().unwrap_or("unknown"),
                    to = %to,
                    "operator override: PX4 is in {to}, which the gateway did not command; streaming stopped until the operator releases (`halo-gateway operator release`)"
                );
                self.vehicle.override_mode = Some(mode_name(*to));
                self.metrics.overrides.inc();
                self.gw.record_external(
                    now,
                    "operator_override",
                    json!({"from": from_s, "to": mode_name(*to)}),
                );
                self.publish(
                    "vehicle_override",
                    &json!({"from": from_s, "to": mode_name(*to)}),
                );
            }
            BridgeEvent::Permission { permitted } => {
                self.control_granted = *permitted;
                self.publish_control();
                tracing::info!(
                    permitted,
                    "the gateway {} fly the vehicle",
                    if *permitted { "may" } else { "may not" }
                );
                self.publish("vehicle_control", &json!({"permitted": permitted}));
            }
            BridgeEvent::HeartbeatGap { gap_ms } => {
                tracing::warn!(
                    gap_ms,
                    "autopilot heartbeat gap of {gap_ms} ms (PX4 sends 1 Hz; the link is declared down after vehicle.link_timeout_ms)"
                );
                self.metrics.heartbeat_gaps.inc();
                self.publish(
                    "vehicle_link",
                    &json!({"up": self.vehicle.link_up, "heartbeat_gap_ms": gap_ms}),
                );
            }
            BridgeEvent::TargetObserved { .. } | BridgeEvent::TimeSync { .. } => {}
        }
    }

    /// Any message from the vehicle shows the command link alive; refresh `link` from it
    /// (throttled to 10 Hz), so its age measures the time since we last heard the vehicle
    /// (generated at `at_ns` at the latest, possibly `uncertainty_ns` earlier: fail closed).
    fn refresh_link(&mut self, now: Nanos, at_ns: u64, uncertainty_ns: u64) {
        if now.saturating_sub(self.last_link_refresh) >= Nanos::from_ms(100) && self.vehicle.link_up
        {
            self.last_link_refresh = now;
            self.push_vehicle_source(
                "link",
                crate::vehicle::px4::link_stamp(now, at_ns, uncertainty_ns),
                Value::Flag(true),
            );
            self.publish_control();
        }
    }

    /// The vehicle took the target dispatched with `binding`: its component is observed.
    fn observed(&mut self, now: Nanos, binding: &[u8; 32]) {
        if let Some((r, c)) = self.adapter.vehicle.attribute(binding) {
            let (r, c) = (r.clone(), c.clone());
            let _ = self.gw.handle_observation(now, &r, &c, true);
        }
    }

    /// The bridge streams a target.
    fn target_started(&mut self, binding: &[u8; 32], fingerprint: &str, valid_until_ns: u64) {
        self.publish(
            "vehicle_target",
            &json!({"state": "started", "binding": Digest(*binding), "fingerprint": fingerprint,
                    "valid_until_ns": valid_until_ns}),
        );
    }

    /// The bridge stopped a target at the end of its interval.
    fn target_expired(&mut self, binding: &[u8; 32], fingerprint: &str) {
        self.adapter.vehicle.target_ended_if(binding);
        self.publish(
            "vehicle_target",
            &json!({"state": "expired", "binding": Digest(*binding), "fingerprint": fingerprint}),
        );
    }

    /// The bridge reports its hold: after it sent the first hold command, so the time from the
    /// loss of support to here is the deny-hold latency.
    fn holding(&mut self, now: Nanos, kind: serde_json::Value) {
        if let Some((b, since)) = self.deny_hold_since.take() {
            let latency = now.saturating_sub(since);
            #[allow(clippy::cast_precision_loss, reason = "seconds for a histogram")]
            self.metrics
                .deny_hold_seconds
                .observe(latency.0 as f64 / 1e9);
            self.gw.record_external(
                now,
                "deny_hold_done",
                json!({"binding": Digest(b), "latency_us": latency.0 / 1000, "hold": kind}),
            );
            tracing::info!(latency_us = latency.0 / 1000, "deny-hold: holding");
        }
    }

    /// The catalog's `control` source: whether the gateway may fly now (the operator handed it
    /// the vehicle, no override took it back, no operator hold). Actions that need it lose their
    /// support the instant it turns false: pending ones are withheld with an obligation
    /// (`CONTROL_NOT_GRANTED`).
    fn publish_control(&mut self) {
        let now = self.now();
        let granted = self.control_granted && !self.adapter.held;
        self.push_vehicle_source("control", now, Value::Flag(granted));
    }

    fn push_vehicle_source(&mut self, name: &str, at: Nanos, value: Value) {
        let now = self.now();
        let (provenance, epoch) = (self.adapter.vehicle.provenance(), self.vehicle_epoch);
        if let Some(u) = source_update(self.gw.catalog(), name, at, value, provenance, epoch) {
            self.vehicle_update(now, u);
        }
    }

    /// One update of a source the gateway owns (the vehicle's), monotonic by construction: a
    /// sample's conservative stamp (generation time minus its mapping uncertainty) can fall
    /// behind the previous sample's when the TIMESYNC fit or its uncertainty moves; it is then
    /// the previous stamp, which is still no later than this sample's true generation time
    /// (it was generated after the previous one). So the core never refuses the gateway's own
    /// updates as out of order.
    pub(super) fn vehicle_update(&mut self, now: Nanos, u: SourceUpdate) {
        let u = crate::vehicle::px4::monotonic(self.gw.snapshot(), u);
        if let Err(e) = self.gw.handle_source_update(now, u) {
            // Receipted by the core; a future stamp is clock trouble worth a line.
            tracing::debug!(code = %e.code(), "a vehicle source update was refused: {}", e.message());
        }
    }

    /// The operator hands the vehicle to the gateway (again): the bridge may enter OFFBOARD.
    fn grant_control(&mut self, now: Nanos, by: &str) {
        let bridge = match self.adapter.vehicle.link() {
            VehicleLink::Px4(h) => h
                .permit_offboard()
                .map_or_else(|e| e.to_string(), |()| "permitted".into()),
            VehicleLink::Crazyflie(_) => {
                // No modes to hand over: the gateway's own flag is the permission.
                self.control_granted = true;
                self.publish_control();
                "permitted".into()
            }
        };
        self.vehicle.override_mode = None;
        self.gw
            .record_external(now, "control_granted", json!({"by": by, "bridge": bridge}));
    }

    fn finish_operator(&mut self, p: Pending, outcome: CommandOutcome) {
        let now = self.now();
        let ok = outcome == CommandOutcome::Accepted;
        self.gw.record_external(
            now,
            "operator_command",
            json!({"action": p.op.name(), "command": command_text(&p.command), "outcome": outcome_text(outcome)}),
        );
        // The operator's takeoff through the gateway hands it the vehicle once airborne.
        if ok && matches!(p.op, OperatorOp::Takeoff { .. }) {
            self.grant_control(now, "takeoff");
        }
        let answer = if ok {
            Ok(json!({"action": p.op.name(), "outcome": outcome_text(outcome)}))
        } else {
            Err(ApiError::new(
                409,
                ReasonCode::VEHICLE_COMMAND_FAILED,
                format!(
                    "PX4 did not accept `{}`: {}",
                    command_text(&p.command),
                    outcome_text(outcome)
                ),
            ))
        };
        let _ = p.reply.send(answer);
    }

    /// Handles one interface request.
    pub fn handle(&mut self, cmd: Cmd) {
        // Once receipts cannot be written, no new work is taken: it could not be recorded.
        let cmd = match (self.receipts_refusal(), cmd) {
            (
                Some(e),
                Cmd::Response { reply, .. }
                | Cmd::Candidate { reply, .. }
                | Cmd::Certificate { reply, .. }
                | Cmd::Contract { reply, .. },
            ) => {
                let _ = reply.send(Err(e));
                return;
            }
            (_, cmd) => cmd,
        };
        match cmd {
            Cmd::Response { bytes, reply } => {
                let t0 = Instant::now();
                let now = self.now();
                let r = self.gw.handle_response(now, &bytes);
                self.pump();
                self.metrics
                    .admission_seconds
                    .observe(t0.elapsed().as_secs_f64());
                // The receipts of this very response could not be written: what it would have
                // dispatched was dropped, so the report would not be true.
                if let Some(e) = self.receipts_refusal() {
                    let _ = reply.send(Err(e));
                    return;
                }
                let answer = match r {
                    Ok(rep) => {
                        let current = self.gw.response_report(&rep.response).unwrap_or(rep);
                        for c in &current.components {
                            self.metrics.decision(c.reason.map(|r| r.name()));
                        }
                        let withheld = current
                            .components
                            .iter()
                            .filter(|c| c.reason.is_some())
                            .count();
                        tracing::debug!(
                            response = %current.response,
                            components = current.components.len(),
                            withheld,
                            us = t0.elapsed().as_micros() as u64,
                            "admission"
                        );
                        serde_json::to_value(&current).map_err(internal)
                    }
                    Err(rej) => {
                        self.metrics.decision(Some(rej.code().name()));
                        tracing::debug!(reason = %rej.code(), "admission: response rejected whole");
                        Err(ApiError::rejection(&rej))
                    }
                };
                let _ = reply.send(answer);
            }
            Cmd::Candidate {
                obligation,
                bytes,
                reply,
            } => {
                let answer = self.candidate(obligation, &bytes);
                let _ = reply.send(answer);
            }
            Cmd::State {
                caller,
                source,
                bytes,
                wall_ms,
                reply,
            } => {
                let answer = self.state_update(caller, &source, &bytes, wall_ms);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Certificate {
                bytes,
                wall_ms,
                reply,
            } => {
                let answer = self.certificate(&bytes, wall_ms);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Revoke { id, reply } => {
                let answer = match Id::new(&id) {
                    Ok(cid) => {
                        let held = self.gw.snapshot().certificate(&cid).is_some();
                        if held {
                            let now = self.now();
                            self.gw.handle_certificate_revoked(now, &cid);
                            self.pump();
                            Ok(json!({"revoked": id}))
                        } else {
                            Err(ApiError::new(
                                404,
                                ReasonCode::CERTIFICATE_UNKNOWN,
                                format!("no certificate `{id}` is held"),
                            ))
                        }
                    }
                    Err(e) => Err(ApiError::new(400, ReasonCode::INVALID_ID, e.to_string())),
                };
                let _ = reply.send(answer);
            }
            Cmd::GetResponse { id, reply } => {
                let answer = Id::new(&id)
                    .ok()
                    .and_then(|rid| self.gw.response_report(&rid))
                    .ok_or_else(|| {
                        ApiError::new(
                            404,
                            ReasonCode::RESPONSE_UNKNOWN,
                            format!("no live response `{id}`"),
                        )
                    })
                    .and_then(|r| serde_json::to_value(&r).map_err(internal));
                let _ = reply.send(answer);
            }
            Cmd::Obligations { reply } => {
                let all: Vec<_> = self.gw.obligations().collect();
                let _ = reply.send(serde_json::to_value(&all).map_err(internal));
            }
            Cmd::Status { reply } => {
                let _ = reply.send(Ok(self.status()));
            }
            Cmd::AuditHead { reply } => {
                let _ = reply.send(Ok(self.audit_head()));
            }
            Cmd::HeadExported { bytes, reply } => {
                let _ = reply.send(self.head_exported(&bytes));
            }
            Cmd::Operator { op, reply } => self.operator(op, reply),
            Cmd::Contract {
                caller,
                bytes,
                reply,
            } => {
                let answer = self.contract_op(caller, &bytes);
                self.contract_receipts();
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::ContractStatus { reply } => {
                let _ = reply.send(Ok(self.contract_status()));
            }
            Cmd::Witness { bytes, reply } => {
                let _ = reply.send(self.witness(&bytes));
            }
        }
    }

    fn contract_op(&mut self, caller: ContractRole, bytes: &[u8]) -> Answer {
        let op = read_contract_op(bytes)?;
        let name = op.name();
        let d = self.monitor.handle(ContractRequest { caller, op });
        tracing::info!(
            op = name,
            verdict = verdict_name(d.verdict),
            reason = d.reason.map(|r| r.name()).unwrap_or("none"),
            "mission contract"
        );
        let mut v = serde_json::to_value(&d).map_err(internal)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("op".into(), name.into());
        }
        self.publish("contract", &v);
        Ok(v)
    }

    fn contract_status(&self) -> serde_json::Value {
        let m = &self.monitor;
        json!({
            "registered": m.root_state().is_some(),
            "root_state": m.root_state(),
            "versions": m.versions(),
            "witness_path": m.witness_path(),
            "trace": m.trace(),
            "trace_digest": m.trace_digest(),
            "goal_revisions": m.goal_revisions(),
            "domain": m.domain().id,
        })
    }

    fn witness(&self, bytes: &[u8]) -> Answer {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Req {
            parent: String,
            goal: crate::contract::GoalSpec,
        }
        let r: Req = serde_json::from_slice(bytes).map_err(|err| {
            let e = crate::core::strict::explain(bytes, &err);
            ApiError::new(
                400,
                ReasonCode::SCHEMA_INVALID,
                format!("expected {{\"parent\", \"goal\"}}: {e}"),
            )
        })?;
        let digest = crate::contract::monitor::edit_digest(&r.goal);
        serde_json::to_value(self.monitor.witness_for(&r.parent, &digest)).map_err(internal)
    }

    fn candidate(&mut self, obligation: u64, bytes: &[u8]) -> Answer {
        let named = crate::core::envelope::parse_candidate(bytes).map(|c| c.obligation);
        if let Ok(n) = named {
            if n != obligation {
                return Err(ApiError::new(
                    400,
                    ReasonCode::OBLIGATION_MISMATCH,
                    format!("the URL names obligation {obligation}, the candidate names {n}"),
                ));
            }
        }
        let now = self.now();
        let r = self.gw.handle_candidate(now, bytes);
        self.pump();
        if let Some(e) = self.receipts_refusal() {
            return Err(e);
        }
        match r {
            Ok(rep) => {
                let current = self.gw.response_report(&rep.response);
                Ok(
                    json!({"response": rep.response, "obligation": rep.obligation,
                          "readmitted": rep.components, "current": current}),
                )
            }
            Err(rej) => Err(ApiError::rejection(&rej)),
        }
    }

    fn state_update(
        &mut self,
        caller: crate::core::catalog::Owner,
        source: &str,
        bytes: &[u8],
        wall_ms: u64,
    ) -> Answer {
        use crate::core::catalog::Owner;
        let cat = self.gw.catalog();
        let Some(ix) = cat.source_ix(source) else {
            return Err(ApiError::new(
                404,
                ReasonCode::UNKNOWN_SOURCE,
                format!("the catalog defines no source `{source}`"),
            ));
        };
        // Only the source's owner writes it: the vehicle's own sources come from the vehicle
        // link alone, so no credential can forge a landed state, a link or the control grant.
        let owner = cat.source(ix).map_or(Owner::Provider, |s| s.owner);
        if owner != caller {
            let who = match owner {
                Owner::Vehicle => "the gateway itself, from the vehicle link".to_string(),
                o => format!("the {} credential", o.name()),
            };
            return Err(ApiError::new(
                403,
                ReasonCode::SOURCE_NOT_WRITABLE,
                format!(
                    "source `{source}` is written by {who}, not the {} credential",
                    caller.name()
                ),
            ));
        }
        let (body, value) = read_update(cat, ix, source, bytes)?;
        let now = self.now();
        let generated_at = Core::map_wall(now, wall_ms, body.generated_at_unix_ms);
        let u = SourceUpdate {
            source: ix,
            state: SourceState {
                generated_at,
                epoch: body.epoch,
                provenance: body.provenance,
                value,
            },
        };
        match self.gw.handle_source_update(now, u) {
            Ok(()) => {
                let age_ms = now.saturating_sub(generated_at).as_ms();
                Ok(json!({"source": source, "epoch": body.epoch, "age_ms": age_ms}))
            }
            Err(e) => {
                self.metrics
                    .updates_refused
                    .get_or_create(&super::metrics::CodeLabel {
                        code: e.code().name().into(),
                    })
                    .inc();
                Err(ApiError::new(422, e.code(), e.message().to_string()))
            }
        }
    }

    fn certificate(&mut self, bytes: &[u8], wall_ms: u64) -> Answer {
        let (body, covers) = read_certificate(bytes)?;
        let now = self.now();
        let valid_until = match (body.valid_until_unix_ms, body.valid_for_ms) {
            (Some(u), None) => Core::map_wall(now, wall_ms, u),
            (None, Some(ms)) => now.saturating_add(Nanos::from_ms(ms)),
            _ => {
                return Err(ApiError::new(
                    422,
                    ReasonCode::INVALID_UPDATE,
                    "give exactly one of `valid_until_unix_ms` and `valid_for_ms`",
                ));
            }
        };
        if valid_until <= now {
            return Err(ApiError::new(
                422,
                ReasonCode::CERTIFICATE_EXPIRED,
                "the certificate's interval has already ended",
            ));
        }
        let cert = Certificate {
            id: body.id.clone(),
            covers,
            valid_until,
            issuer: body.issuer,
        };
        self.gw
            .handle_certificate(now, cert)
            .map_err(|e| ApiError::new(422, e.code(), e.message().to_string()))?;
        Ok(json!({"certificate": body.id, "covers": covers,
                  "valid_for_ms": valid_until.saturating_sub(now).as_ms()}))
    }

    fn operator(&mut self, op: OperatorOp, reply: Reply) {
        let now = self.now();
        // A bad request is refused as such first, whatever the link.
        if let OperatorOp::Takeoff { altitude_m } = op {
            let crazyflie = self.adapter.vehicle.crazyflie().is_some();
            let (lo, hi, what) = if crazyflie {
                (0.2, 2.0, "a Crazyflie on the bench")
            } else {
                (1.0, 120.0, "above home")
            };
            if !(altitude_m.is_finite() && (lo..=hi).contains(&altitude_m)) {
                let _ = reply.send(Err(ApiError::new(
                    422,
                    ReasonCode::INVALID_REQUEST,
                    if crazyflie {
                        format!("takeoff height {altitude_m} m is outside {lo}..{hi} m ({what})")
                    } else {
                        format!("takeoff altitude {altitude_m} m is outside {lo}..{hi} m {what}")
                    },
                )));
                return;
            }
        }
        // A vehicle command without a link cannot be sent: say so at once rather than after
        // every retry. Hold and release are the gateway's own and need no link.
        let link_up = match self.adapter.vehicle.link() {
            VehicleLink::Px4(h) => h.link_up(),
            VehicleLink::Crazyflie(h) => h.link_up(),
        };
        if !matches!(op, OperatorOp::Hold | OperatorOp::Release) && !link_up {
            let _ = reply.send(Err(ApiError::new(
                503,
                ReasonCode::NO_VEHICLE_LINK,
                format!(
                    "no heartbeat from the vehicle at {}: `{}` cannot be sent ({})",
                    self.vehicle_url,
                    op.name(),
                    link_hint(&self.vehicle_url)
                ),
            )));
            return;
        }
        if !matches!(op, OperatorOp::Hold | OperatorOp::Release) {
            if let Some(h) = self.adapter.vehicle.crazyflie().cloned() {
                self.operator_crazyflie(&h, op, reply);
                return;
            }
        }
        let command = match op {
            OperatorOp::Hold => {
                self.adapter.held = true;
                let r = self.adapter.vehicle.hold();
                self.adapter.vehicle.target_ended();
                self.gw.record_external(
                    now,
                    "operator_hold",
                    json!({"held": true, "bridge": r.as_ref().map_or_else(Clone::clone, |()| "holding".into())}),
                );
                self.publish("operator_hold", &json!({"held": true}));
                self.publish_control();
                tracing::warn!("operator hold: agent actions will not dispatch until released");
                self.pump();
                let _ = reply.send(Ok(json!({"action": "hold", "held": true})));
                return;
            }
            OperatorOp::Release => {
                self.adapter.held = false;
                self.grant_control(now, "release");
                self.gw
                    .record_external(now, "operator_hold", json!({"held": false}));
                self.publish("operator_hold", &json!({"held": false}));
                self.publish_control();
                tracing::info!("operator released the hold");
                self.pump();
                let _ = reply.send(Ok(json!({"action": "release", "held": false})));
                return;
            }
            OperatorOp::Arm => Command::Arm,
            OperatorOp::Disarm => Command::Disarm,
            OperatorOp::Land => Command::Land,
            OperatorOp::ReturnToLaunch => Command::ReturnToLaunch,
            OperatorOp::Takeoff { altitude_m } => {
                if !(altitude_m.is_finite() && (1.0..=120.0).contains(&altitude_m)) {
                    let _ = reply.send(Err(ApiError::new(
                        422,
                        ReasonCode::INVALID_REQUEST,
                        format!("takeoff altitude {altitude_m} m is outside 1..120 m above home"),
                    )));
                    return;
                }
                let Some(home) = self.vehicle.home_amsl_m else {
                    let _ = reply.send(Err(ApiError::new(
                        409,
                        ReasonCode::VEHICLE_COMMAND_FAILED,
                        "home altitude is not known yet (no GLOBAL_POSITION_INT from PX4)",
                    )));
                    return;
                };
                if let Err(e) = self.contract_takeoff() {
                    let _ = reply.send(Err(e));
                    self.pump();
                    return;
                }
                #[allow(clippy::cast_possible_truncation, reason = "MAVLink carries f32")]
                let amsl = (home + altitude_m) as f32;
                Command::Takeoff {
                    altitude_amsl_m: Some(amsl),
                }
            }
        };
        let Some(px4) = self.adapter.vehicle.px4() else {
            return;
        };
        if let Err(e) = px4.command(command) {
            let _ = reply.send(Err(ApiError::new(
                503,
                ReasonCode::SERVICE_BUSY,
                format!("bridge: {e}"),
            )));
            return;
        }
        self.pending.push_back(Pending {
            op,
            command,
            reply,
            deadline: Instant::now() + Duration::from_secs(15),
        });
    }

    /// With a mission contract the takeoff is its first effect: committed before the command
    /// goes out, refused when the contract does not admit it.
    fn contract_takeoff(&mut self) -> Result<(), ApiError> {
        if self.monitor.root_state().is_none() {
            return Ok(());
        }
        self.operator_effects += 1;
        let key = format!(
            "halo-{}-operator-{}",
            self.boot_epoch, self.operator_effects
        );
        let leaf = ContractGate {
            monitor: &mut self.monitor,
        }
        .leaf();
        let d = self.monitor.gate_effect(&leaf, "takeoff", &key);
        self.contract_receipts();
        if d.allowed() {
            return Ok(());
        }
        let code = d.reason.unwrap_or(ReasonCode::EFFECT_NOT_ADMITTED);
        Err(ApiError::new(
            409,
            code,
            format!("the mission contract refuses the takeoff: {}", d.detail),
        ))
    }

    fn status(&self) -> serde_json::Value {
        let now = self.now();
        let cat = self.gw.catalog();
        let sources: Vec<_> = cat
            .sources()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ix = crate::core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
                let st = self.gw.snapshot().source(ix);
                json!({
                    "source": s.name,
                    "age_ms": self.gw.snapshot().age(ix, now).map(Nanos::as_ms),
                    "epoch": st.map(|x| x.epoch),
                    "provenance": st.map(|x| x.provenance.clone()),
                })
            })
            .collect();
        let live_obligations = self.gw.obligations().filter(|o| o.state.is_live()).count();
        json!({
            "service": "halo-gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "boot_epoch": self.boot_epoch,
            "uptime_s": self.origin.elapsed().as_secs(),
            "catalog": {"id": cat.id(), "version": cat.version()},
            "vehicle": VehicleView {
                setpoints_sent: self.adapter.vehicle.setpoints_sent(),
                control: if self.adapter.held {
                    "operator_hold"
                } else if self.control_granted {
                    "gateway"
                } else {
                    "operator"
                },
                ..self.vehicle.clone()
            },
            "operator_hold": self.adapter.held,
            "audit": {
                "public_key": self.audit.as_ref().map(|a| a.signer.public_hex()),
                "last_checkpoint": self.audit.as_ref().and_then(|a| a.latest.as_ref()).map(|c| c.count),
            },
            "contract": self.contract_status(),
            "responses_live": self.gw.response_ids().count(),
            "obligations_live": live_obligations,
            "sources": sources,
            "receipts": {"first": self.receipts_path,
                         "current": self.receipts.as_ref().map(|r| r.current().to_path_buf()),
                         "written": self.receipt_summary().written,
                         "lost": self.receipt_summary().lost,
                         "state": if self.failed_closed.is_some() { "refusing" } else { "ok" },
                         "reason": self.failed_closed},
            "events_next_id": self.hub.next_id(),
        })
    }

    /// Periodic work: operator commands that never got an answer, metrics.
    fn housekeeping(&mut self) {
        let t = Instant::now();
        self.warn_if_silent(t);
        while self.pending.front().is_some_and(|p| p.deadline <= t) {
            if let Some(p) = self.pending.pop_front() {
                self.finish_operator(p, CommandOutcome::TimedOut);
            }
        }
        if t.duration_since(self.last_housekeeping) < Duration::from_millis(500) {
            return;
        }
        self.last_housekeeping = t;
        if self
            .audit
            .as_ref()
            .and_then(|a| a.since_at.map(|at| t.duration_since(at) >= a.interval))
            .unwrap_or(false)
        {
            let ok = self.checkpoint(false);
            if !ok && self.failed_closed.is_none() {
                let dropped = self.adapter.vehicle.discard_staged_targets();
                self.fail_closed(&dropped);
            }
        }
        let now = self.now();
        let cat = self.gw.catalog();
        for (i, s) in cat.sources().iter().enumerate() {
            let ix = crate::core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
            if let Some(age) = self.gw.snapshot().age(ix, now) {
                #[allow(clippy::cast_precision_loss, reason = "seconds for a gauge")]
                let secs = age.0 as f64 / 1e9;
                self.metrics
                    .aoi_seconds
                    .get_or_create(&SourceLabel {
                        source: s.name.to_string(),
                    })
                    .set(secs);
            }
        }
        let v = &self.adapter.vehicle;
        self.metrics
            .setpoints_streamed
            .set(i64::try_from(v.setpoints_sent()).unwrap_or(i64::MAX));
        self.metrics
            .bridge_events_dropped
            .set(i64::try_from(v.dropped_events()).unwrap_or(i64::MAX));
        if let Some(px4) = v.px4() {
            self.metrics
                .foreign_datagrams
                .set(i64::try_from(px4.foreign_datagrams()).unwrap_or(i64::MAX));
        }
    }

    /// Runs until `shutdown` turns true, then holds the vehicle and waits (at most
    /// `settle`) for it to leave OFFBOARD or for the link to go, flushing receipts.
    pub async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Cmd>,
        mut bridge: VehicleEvents,
        mut shutdown: watch::Receiver<bool>,
        settle: Duration,
    ) -> Core {
        loop {
            let now = self.now();
            let wake = self
                .gw
                .poll_timeout()
                .map_or(Duration::from_millis(100), |t| {
                    Duration::from_nanos(t.0.saturating_sub(now.0))
                })
                .min(Duration::from_millis(100));
            self.metrics
                .input_queue_depth
                .set(i64::try_from(cmds.len()).unwrap_or(i64::MAX));
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { break; }
                }
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                Some(cmd) = cmds.recv() => self.handle(cmd),
                () = tokio::time::sleep(wake) => {}
            }
            self.pump();
            self.housekeeping();
        }
        self.shutdown(&mut bridge, settle).await;
        // Refuse what is still queued.
        cmds.close();
        while let Ok(cmd) = cmds.try_recv() {
            refuse(cmd);
        }
        self
    }

    fn on_vehicle_event(&mut self, ev: &VehicleEvent) {
        match ev {
            VehicleEvent::Px4(e) => self.on_bridge_event(e),
            VehicleEvent::Crazyflie(e) => self.on_cf_event(e),
        }
    }

    async fn shutdown(&mut self, bridge: &mut VehicleEvents, settle: Duration) {
        let now = self.now();
        self.adapter.held = true;
        self.publish("shutdown", &json!({"reason": "signal"}));
        if let VehicleLink::Crazyflie(h) = self.adapter.vehicle.link() {
            let h = h.clone();
            self.shutdown_crazyflie(&h, bridge, settle).await;
            self.finish_shutdown();
            return;
        }
        let _ = self.adapter.vehicle.hold();
        self.adapter.vehicle.target_ended();
        let Some(px4) = self.adapter.vehicle.px4().cloned() else {
            return;
        };
        let in_offboard = self.vehicle.mode.as_deref() == Some(&mode_name(Px4Mode::OFFBOARD));
        if self.vehicle.armed && in_offboard && self.vehicle.link_up {
            let _ = px4.command(Command::SetMode {
                mode: Px4Mode::HOLD,
            });
        }
        self.gw
            .record_external(now, "shutdown", json!({"hold_requested": true}));
        tracing::info!("shutting down: holding the vehicle");
        let deadline = tokio::time::Instant::now() + settle;
        loop {
            let safe = !self.vehicle.link_up
                || !self.vehicle.armed
                || self.vehicle.mode.as_deref() != Some(&mode_name(Px4Mode::OFFBOARD));
            if safe {
                break;
            }
            tokio::select! {
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!("the vehicle is still in OFFBOARD; stopping the stream (PX4's offboard-loss failsafe takes over)");
                    break;
                }
            }
            self.pump();
        }
        let now = self.now();
        self.gw.record_external(
            now,
            "shutdown",
            json!({"mode": self.vehicle.mode, "armed": self.vehicle.armed, "link_up": self.vehicle.link_up}),
        );
        self.finish_shutdown();
    }

    /// The receipts' end of a shutdown: pending operator commands cancelled, summaries and the
    /// last checkpoint written, the log synced.
    fn finish_shutdown(&mut self) {
        let now = self.now();
        while let Some(p) = self.pending.pop_front() {
            self.finish_operator(p, CommandOutcome::Cancelled);
        }
        self.gw.flush_summaries(now);
        self.pump();
        if !self.checkpoint(true) && self.failed_closed.is_none() {
            self.failed_closed = Some("the last receipts could not be written at shutdown".into());
        }
    }
}

/// A provider update's body for `source` (index `ix`), read strictly and typed against the
/// source's kind. Pure: the fuzz target `service_bodies` drives it.
///
/// # Errors
/// `DUPLICATE_KEY`, `INVALID_UPDATE` (not JSON, or not the update's shape),
/// `UNKNOWN_SOURCE`, `VALUE_KIND_MISMATCH`.
pub fn read_update(
    cat: &crate::core::catalog::Catalog,
    ix: crate::core::catalog::SourceIx,
    source: &str,
    bytes: &[u8],
) -> Result<(StateBody, Value), ApiError> {
    // Duplicate keys anywhere (the value is untyped JSON) are refused, as in envelopes; text
    // that is not JSON at all is a malformed update, named as such.
    crate::core::strict::check_keys(bytes).map_err(|e| {
        ApiError::new(
            400,
            if e.duplicate {
                ReasonCode::DUPLICATE_KEY
            } else {
                ReasonCode::INVALID_UPDATE
            },
            format!("source `{source}`: {}", e.message),
        )
    })?;
    let body: StateBody = serde_json::from_slice(bytes).map_err(|err| {
        let e = crate::core::strict::explain(bytes, &err);
        ApiError::new(
            400,
            ReasonCode::INVALID_UPDATE,
            format!("source `{source}`: {e}"),
        )
    })?;
    let Some(kind) = cat.source(ix).map(|s| s.value) else {
        return Err(ApiError::new(
            404,
            ReasonCode::UNKNOWN_SOURCE,
            format!("the catalog defines no source `{source}`"),
        ));
    };
    let value = Value::parse(kind, &body.value).map_err(|e| {
        ApiError::new(
            422,
            ReasonCode::VALUE_KIND_MISMATCH,
            format!("source `{source}`: {e}"),
        )
    })?;
    Ok((body, value))
}

/// A certificate's body and the digest it covers, read strictly. Pure.
///
/// # Errors
/// `DUPLICATE_KEY`, `INVALID_UPDATE`.
pub fn read_certificate(bytes: &[u8]) -> Result<(CertificateBody, Digest), ApiError> {
    crate::core::strict::check_keys(bytes).map_err(|e| {
        ApiError::new(
            400,
            if e.duplicate {
                ReasonCode::DUPLICATE_KEY
            } else {
                ReasonCode::INVALID_UPDATE
            },
            format!("certificate: {}", e.message),
        )
    })?;
    let body: CertificateBody = serde_json::from_slice(bytes).map_err(|err| {
        let e = crate::core::strict::explain(bytes, &err);
        ApiError::new(400, ReasonCode::INVALID_UPDATE, format!("certificate: {e}"))
    })?;
    let covers = Digest::from_hex(&body.covers).map_err(|e| {
        ApiError::new(
            422,
            ReasonCode::INVALID_UPDATE,
            format!("certificate `covers`: {e}"),
        )
    })?;
    Ok((body, covers))
}

/// A mission-contract operation's body, read; effects are the gate's alone. Pure.
///
/// # Errors
/// `SCHEMA_INVALID`, `FORBIDDEN_ROLE`.
pub fn read_contract_op(bytes: &[u8]) -> Result<Op, ApiError> {
    let op: Op = serde_json::from_slice(bytes).map_err(|err| {
        let e = crate::core::strict::explain(bytes, &err);
        ApiError::new(
            400,
            ReasonCode::SCHEMA_INVALID,
            format!("not a contract operation: {e}"),
        )
    })?;
    if matches!(op, Op::AuthorizeEffect { .. } | Op::CommitEffect { .. }) {
        return Err(ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            "effects are authorized and committed only at the final gate",
        ));
    }
    Ok(op)
}

fn verdict_name(v: crate::contract::Verdict) -> &'static str {
    match v {
        crate::contract::Verdict::Allow => "allow",
        crate::contract::Verdict::Deny => "deny",
        crate::contract::Verdict::Indeterminate => "indeterminate",
        crate::contract::Verdict::Reauthorize => "reauthorize",
    }
}

fn internal(e: serde_json::Error) -> ApiError {
    ApiError::new(500, ReasonCode::INVALID_REQUEST, format!("internal: {e}"))
}

fn refuse(cmd: Cmd) {
    let err = || {
        Err(ApiError::new(
            503,
            ReasonCode::SHUTTING_DOWN,
            "the gateway is shutting down",
        ))
    };
    let reply = match cmd {
        Cmd::Response { reply, .. }
        | Cmd::Candidate { reply, .. }
        | Cmd::State { reply, .. }
        | Cmd::Certificate { reply, .. }
        | Cmd::Revoke { reply, .. }
        | Cmd::GetResponse { reply, .. }
        | Cmd::Obligations { reply }
        | Cmd::Status { reply }
        | Cmd::AuditHead { reply }
        | Cmd::HeadExported { reply, .. }
        | Cmd::Operator { reply, .. }
        | Cmd::Contract { reply, .. }
        | Cmd::ContractStatus { reply }
        | Cmd::Witness { reply, .. } => reply,
    };
    let _ = reply.send(err());
}

/// Largest body for a response or candidate.
pub const RESPONSE_LIMIT: usize = MAX_RESPONSE_BYTES;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_times_map_onto_the_monotonic_clock() {
        let now = Nanos::from_ms(10_000);
        assert_eq!(
            Core::map_wall(now, 1_000_000, 999_800),
            Nanos::from_ms(9_800)
        );
        assert_eq!(
            Core::map_wall(now, 1_000_000, 1_000_030),
            Nanos::from_ms(10_030)
        );
        assert_eq!(Core::map_wall(now, 1_000_000, 0), Nanos::ZERO);
    }
}
