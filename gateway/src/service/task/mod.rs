//! The service task: the one owner of the protocol core, the supervisor, the vehicle adapter and
//! the receipt log.
//!
//! Every interface (HTTP, stdio, the operator CLI through HTTP) sends it a [`Cmd`] over a
//! bounded channel and awaits the answer; the bridge sends it vehicle events. After every input
//! it follows the core's call order (DESIGN §3): drain events to the hub, pass every ready
//! token to the final gate, append every receipt. The gate call itself is synchronous: nothing
//! in [`Task::pump`] awaits.
//!
//! The safety decisions around the core (deny-hold, control and overrides, operator commands
//! and their deadlines, arrival, the receipt log's failure, the shutdown) are the
//! [`Supervisor`]'s, a sans-IO machine with time passed in; this task translates the bridges'
//! events into its observations and carries out what it decides.
//!
//! - `audit`: receipts written before what they record leaves, checkpoints, signed heads.
//! - `px4`, `crazyflie`: each bridge's events as vehicle sources, observations and events.
//! - `requests`: the bodies of the interfaces' requests, read strictly and answered.

mod audit;
mod console;
mod crazyflie;
mod px4;
mod requests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use px4_bridge::Event as BridgeEvent;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

pub use super::clock::wall_now_ms;
use super::clock::{Arrival, Clock};
use super::hub::Hub;
use super::metrics::{Metrics, OutcomeLabel, SourceLabel};
use super::pilot_text::Told;
use crate::supervisor::{Output, Refusal, Supervisor, Ticket};
use crate::vehicle::px4::source_update;
use crate::vehicle::{VehicleAdapter, VehicleLink};
use halo_core::contract::{Monitor, Role as ContractRole};
use halo_core::engine::{Event, Gateway};
use halo_core::envelope::{MAX_RESPONSE_BYTES, Rejection};
use halo_core::gate::GateOutcome;
use halo_core::ids::Id;
use halo_core::reason::ReasonCode;
use halo_core::state::{SourceUpdate, Value};
use halo_core::time::Nanos;

pub use crate::supervisor::{FullAction, OperatorOp};
pub use audit::{PreviousHead, ReceiptSummary, Signing};
pub use requests::{
    CertificateBody, UpdateBody, read_certificate, read_contract_op, read_update, read_update_at,
};

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
    pub(crate) status: u16,
    /// Stable reason code.
    pub(crate) code: ReasonCode,
    /// A message for people.
    pub(crate) message: String,
    /// Offending ids, if any.
    pub(crate) ids: Vec<String>,
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

    /// An error naming the offending ids.
    pub fn with_ids(
        status: u16,
        code: ReasonCode,
        message: impl Into<String>,
        ids: Vec<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            ids,
        }
    }

    /// The offending ids.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The stable reason code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
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

    /// A supervisor's refusal of an operator request, with its HTTP status.
    fn refusal(r: Refusal) -> ApiError {
        let status = match r.code {
            ReasonCode::INVALID_REQUEST => 422,
            ReasonCode::NO_VEHICLE_LINK | ReasonCode::SERVICE_BUSY => 503,
            _ => 409,
        };
        ApiError::new(status, r.code, r.message)
    }

    /// A core rejection, with its HTTP status.
    pub(crate) fn rejection(r: &Rejection) -> ApiError {
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

/// Sends one request to the service task and waits for its answer: the one way every interface
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

/// One request to the service task.
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
        caller: halo_core::catalog::Owner,
        /// Source name.
        source: String,
        /// The update body.
        bytes: Vec<u8>,
        /// When the request arrived (to map the provider's generation time).
        arrival: Arrival,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/certificates`.
    Certificate {
        /// The certificate body.
        bytes: Vec<u8>,
        /// When the request arrived.
        arrival: Arrival,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/certify`: the reference certifier checks a route action and certifies it.
    Certify {
        /// `{"component": {...}}` or a one-component envelope.
        bytes: Vec<u8>,
        /// When the request arrived.
        arrival: Arrival,
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
    /// `GET /v1/responses`: every live response, for the console.
    Responses {
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
    /// Local position, NED m. PX4's local frame does not put the ground at 0 (measured
    /// −0.4 … +1.6 m, moving at each landing): read height from `height_above_home_m`.
    pub position_ned_m: Option<[f32; 3]>,
    /// Height above home, m: PX4's own (GLOBAL_POSITION_INT `relative_alt`); a Crazyflie's
    /// estimate's height (its home is where it booted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height_above_home_m: Option<f64>,
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
    /// Set while the PX4 bridge asks for the EKF origin (`GPS_GLOBAL_ORIGIN`) and none has
    /// come: until then the `origin` source is missing and route actions are withheld.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for_origin: Option<OriginWait>,
}

/// The PX4 bridge is asking for the EKF origin ([`VehicleView::waiting_for_origin`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct OriginWait {
    /// `MAV_CMD_REQUEST_MESSAGE`s sent since the link came up.
    pub requests: u32,
    /// What it means, for people.
    pub note: &'static str,
}

/// The service task's state.
pub struct Task {
    /// The protocol core.
    gw: Gateway,
    /// The gate's adapter: the vehicle's bridge, open while the supervisor says so.
    adapter: VehicleAdapter,
    /// The safety decisions around the core.
    sup: Supervisor,
    /// The mission-contract monitor (its conjunct is active once a root is registered).
    monitor: Monitor,
    /// The shared monotonic clock and the wall time at its origin.
    clock: Clock,
    /// The vehicle URL, for people.
    vehicle_url: String,
    /// The receipt log (`None`: receipts are sealed and counted, not kept).
    receipts: Option<super::receipts::ReceiptLog>,
    /// Its path.
    receipts_path: Option<std::path::PathBuf>,
    /// Receipts sealed without a log.
    receipts_unlogged: u64,
    /// The previous start's last signed checkpoint.
    previous_head: Option<PreviousHead>,
    /// The event hub.
    hub: Hub,
    /// Metrics.
    metrics: Arc<Metrics>,
    /// The vehicle, for people (`GET /v1/status`).
    vehicle: VehicleView,
    /// Boot epoch.
    boot_epoch: u64,
    /// Operator requests the supervisor has not answered yet, by ticket.
    replies: BTreeMap<Ticket, Reply>,
    next_ticket: u64,
    /// Streams the supervisor ended, for the core at the end of the pump.
    ended: Vec<[u8; 32]>,
    last_housekeeping: Instant,
    audit: Option<Signing>,
    /// The last receipts could not be written at shutdown (the log had not refused before).
    late_failure: Option<String>,
    /// Runs the receipt log's checkpoint syncs off this task.
    syncer: Option<super::receipts::SyncWorker>,
    /// What the sync worker finished.
    synced: Option<mpsc::Receiver<super::receipts::Synced>>,
    next_sync: u64,
    /// The epoch of the vehicle's own sources: 1 for PX4; a Crazyflie's connection count.
    vehicle_epoch: u64,
    /// The `origin` source from PX4's global origin and home (its own epochs).
    geo_origin: crate::vehicle::px4::OriginTrack,
    /// The reference certifier (`[certifier]`).
    certifier: super::certifier::CertifierConfig,
    /// Evaluation only: how long after a token is polled its final gate runs.
    gate_delay: Option<Duration>,
    /// Evaluation only: tokens waiting for their gate, in polling order (bounded by the core's
    /// live tokens).
    deferred: std::collections::VecDeque<(Instant, halo_core::DispatchToken)>,
    /// Lines for the pilot's ground station (`vehicle.statustext`, PX4 only).
    pilot: Option<super::pilot_text::PilotTexts>,
    /// The last decisions in words, newest last (at most [`RECENT`]), for `GET /v1/status`.
    recent: std::collections::VecDeque<(u64, super::pilot_text::PilotLine)>,
}

/// Decisions kept in words for `GET /v1/status`.
pub const RECENT: usize = 8;

fn gate_label(o: &GateOutcome) -> &'static str {
    match o {
        GateOutcome::Dispatched { .. } => "dispatched",
        GateOutcome::Denied { .. } => "denied",
        GateOutcome::Refused { .. } => "refused",
        GateOutcome::EnqueueFailed { .. } => "enqueue_failed",
    }
}

impl Task {
    /// A service task over `gw`, driving `handle`.
    #[allow(
        clippy::too_many_arguments,
        reason = "one constructor wires the task once"
    )]
    pub fn new(
        gw: Gateway,
        monitor: Monitor,
        link: VehicleLink,
        clock: Clock,
        receipts: Option<super::receipts::ReceiptLog>,
        hub: Hub,
        metrics: Arc<Metrics>,
        boot_epoch: u64,
    ) -> Task {
        let receipts_path = receipts.as_ref().map(|r| r.current().to_path_buf());
        // Without a thread for it, checkpoint syncs run in place (as before the worker).
        let (syncer, synced) = match receipts
            .as_ref()
            .map(|_| super::receipts::SyncWorker::start())
        {
            Some(Ok((w, r))) => (Some(w), Some(r)),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "no thread for receipt syncs: they run on the service task");
                (None, None)
            }
            None => (None, None),
        };
        // PX4: the bridge's permission (`vehicle.control_at_start`); a Crazyflie: granted by an
        // operator takeoff or release.
        let (kind, granted) = match &link {
            VehicleLink::Px4(h) => (crate::supervisor::VehicleKind::Px4, h.offboard_permitted()),
            VehicleLink::Crazyflie(_) => (crate::supervisor::VehicleKind::Crazyflie, false),
        };
        Task {
            gw,
            adapter: VehicleAdapter::new(link),
            sup: Supervisor::new(kind, "", boot_epoch, Nanos::ZERO, granted),
            monitor,
            clock,
            receipts,
            receipts_path,
            receipts_unlogged: 0,
            previous_head: None,
            vehicle_url: String::new(),
            hub,
            metrics,
            vehicle: VehicleView::default(),
            boot_epoch,
            replies: BTreeMap::new(),
            next_ticket: 0,
            ended: Vec::new(),
            last_housekeeping: clock.origin(),
            audit: None,
            late_failure: None,
            syncer,
            synced,
            next_sync: 0,
            vehicle_epoch: 1,
            geo_origin: crate::vehicle::px4::OriginTrack::default(),
            gate_delay: None,
            certifier: super::certifier::CertifierConfig::default(),
            deferred: std::collections::VecDeque::new(),
            pilot: None,
            recent: std::collections::VecDeque::with_capacity(RECENT),
        }
    }

    /// Tells the pilot's ground station the gateway's decisions (`vehicle.statustext`; PX4
    /// only, a Crazyflie has no ground station link).
    #[must_use]
    pub fn with_pilot_texts(mut self, on: bool) -> Task {
        self.pilot = (on && self.adapter.px4().is_some()).then(super::pilot_text::PilotTexts::new);
        self
    }

    /// One decision in words: kept among the last decisions, and queued for the ground station.
    fn tell(&mut self, t: &super::pilot_text::Told<'_>) {
        let l = super::pilot_text::line(t);
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        let at = self.wall_ms(self.now());
        self.recent.push_back((at, l.clone()));
        if t.for_pilot()
            && let Some(p) = self.pilot.as_mut()
        {
            p.push(l);
        }
    }

    /// A supervisor notice that the pilot should hear of.
    fn tell_notice(&mut self, name: &str, data: &serde_json::Value) {
        let text = |k: &str| data.get(k).and_then(serde_json::Value::as_str);
        let reason = text("reason").and_then(ReasonCode::from_name);
        match name {
            "deny_hold" if data.get("held") == Some(&serde_json::Value::Bool(true)) => {
                self.tell(&Told::DenyHold {
                    component: text("component").unwrap_or("?"),
                    reason,
                });
            }
            "vehicle_override" => self.tell(&Told::Override {
                to: text("to").unwrap_or("?"),
            }),
            "operator_hold" => self.tell(&Told::OperatorHold(
                data.get("held") == Some(&serde_json::Value::Bool(true)),
            )),
            _ => {}
        }
    }

    /// Hands the next due line to the bridge (one per `pilot_text::INTERVAL`).
    fn flush_pilot_texts(&mut self) {
        let now = self.now();
        let (Some(p), Some(h)) = (self.pilot.as_mut(), self.adapter.px4()) else {
            return;
        };
        if !h.link_up() {
            return;
        }
        if let Some(l) = p.poll(now)
            && let Err(e) = h.status_text(l.severity, &l.text)
        {
            tracing::debug!(error = %e, text = %l.text, "status text for the ground station not sent");
        }
    }

    /// The vehicle URL, named in warnings and refusals.
    #[must_use]
    pub fn with_vehicle_url(mut self, url: &str) -> Task {
        self.vehicle_url = url.to_string();
        self.sup = self.sup.with_vehicle_url(url);
        self
    }

    /// The previous start's last signed checkpoint, offered at `GET /v1/audit/head`.
    #[must_use]
    pub fn with_previous_head(mut self, head: Option<PreviousHead>) -> Task {
        self.previous_head = head;
        self
    }

    /// What to do with the vehicle when the receipt log refuses.
    #[must_use]
    pub fn with_full_action(mut self, action: FullAction) -> Task {
        self.sup = self.sup.with_full_action(action);
        self
    }

    /// The reference certifier's settings.
    #[must_use]
    pub fn with_certifier(mut self, c: super::certifier::CertifierConfig) -> Task {
        self.certifier = c;
        self
    }

    /// Evaluation only: gates each ready token `delay` after it was polled (see
    /// `Embedded::gate_delay`).
    #[must_use]
    pub fn with_gate_delay(mut self, delay: Option<Duration>) -> Task {
        self.gate_delay = delay;
        self
    }

    /// Signs checkpoints into the receipt chain.
    #[must_use]
    pub fn with_signing(mut self, signing: Signing) -> Task {
        self.audit = Some(signing);
        self
    }

    /// Now on the shared monotonic clock.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Unix milliseconds of an instant on the service's monotonic clock.
    fn wall_ms(&self, at: Nanos) -> u64 {
        self.clock.wall_ms(at)
    }

    /// An obligation as the HTTP, stdio and MCP interfaces show it: states and the discharge
    /// condition in snake case (the discharge with a `kind` tag), instants as Unix
    /// milliseconds, and whether a candidate may still answer it (`open`).
    fn obligation_view(&self, o: &halo_core::obligation::Obligation) -> serde_json::Value {
        let halo_core::obligation::Discharge::FreshCandidate { after } = o.discharge;
        json!({
            "id": o.id.0,
            "response": o.component.response(),
            "component": o.component.id(),
            "reason": o.reason,
            "required": o.required,
            "scope": o.scope,
            "assignee": o.assignee,
            "route": o.route,
            "state": o.state.name().to_ascii_lowercase(),
            "open": o.state.is_live(),
            "discharge": {"kind": "fresh_candidate", "after_unix_ms": self.wall_ms(after)},
            "attempts": o.attempts,
            "retry_limit": o.retry_limit,
            "created_at_unix_ms": self.wall_ms(o.created_at),
            "expires_at_unix_ms": self.wall_ms(o.expiry),
        })
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
                if let Some(d) = self.gate_delay {
                    self.deferred.push_back((Instant::now() + d, tok));
                    continue;
                }
                self.gate(tok);
                progressed = true;
            }
            while self
                .deferred
                .front()
                .is_some_and(|(at, _)| *at <= Instant::now())
            {
                if let Some((_, tok)) = self.deferred.pop_front() {
                    self.gate(tok);
                }
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        self.after_gates();
    }

    /// The final gate for one ready token, and what follows it at once.
    fn gate(&mut self, tok: halo_core::DispatchToken) {
        let t0 = Instant::now();
        let out = self
            .gw
            .final_gate_with(self.now(), tok, &mut self.adapter, &mut self.monitor);
        self.metrics
            .gate_seconds
            .observe(t0.elapsed().as_secs_f64());
        for (binding, what) in self.adapter.take_enqueued() {
            self.sup.handle_enqueued(binding, what);
        }
        self.supervised();
        self.contract_receipts();
        self.on_gate(&out);
    }

    /// After the gates of a pump: ended streams released, receipts written, then what the
    /// gates staged handed to the bridge.
    fn after_gates(&mut self) {
        // Streams the supervisor ended (replaced, held, expired) no longer watch their support.
        for b in std::mem::take(&mut self.ended) {
            if let Some((r, c)) = self.adapter.attribute(&b) {
                let (r, c) = (r.clone(), c.clone());
                self.gw.stream_ended(&r, &c);
            }
        }
        // INVARIANT (receipt before setpoint): what the gate staged reaches the bridge only
        // after the receipts of this pump, its own among them, were appended whole.
        if self.write_receipts() {
            self.adapter.release_staged();
        } else {
            let dropped = self.adapter.discard_staged_targets();
            self.fail_closed(&dropped);
        }
    }

    /// Carries out what the supervisor decided, in order, and opens or closes the gate's
    /// adapter as it says.
    fn supervised(&mut self) {
        while let Some(o) = self.sup.poll_output() {
            let now = self.now();
            match o {
                Output::StreamEnded(b) => self.ended.push(b),
                Output::Observed(b) => {
                    if let Some((r, c)) = self.adapter.attribute(&b) {
                        let (r, c) = (r.clone(), c.clone());
                        let _ = self.gw.handle_observation(now, &r, &c, true);
                    }
                }
                Output::Control(granted) => {
                    self.push_vehicle_source("control", now, Value::Flag(granted));
                }
                Output::LinkHeard(at) => self.push_vehicle_source("link", at, Value::Flag(true)),
                Output::Answer(ticket, a) => {
                    if let Some(reply) = self.replies.remove(&ticket) {
                        let _ = reply.send(a.map_err(ApiError::refusal));
                    }
                }
                Output::Record(what, detail) => self.gw.record_external(now, what, detail),
                Output::Notice(name, data) => {
                    if name == "vehicle_override" {
                        self.metrics.overrides.inc();
                    }
                    self.tell_notice(name, &data);
                    self.publish(name, &data);
                }
                Output::DenyHoldLatency(latency) => {
                    #[allow(clippy::cast_precision_loss, reason = "seconds for a histogram")]
                    self.metrics
                        .deny_hold_seconds
                        .observe(latency.0 as f64 / 1e9);
                }
                Output::Silent(silent) => {
                    let secs = silent.0 / 1_000_000_000;
                    tracing::warn!(
                        vehicle = %self.vehicle_url,
                        silent_s = secs,
                        "no heartbeat from the vehicle for {secs} s: {}",
                        crate::supervisor::link_hint(&self.vehicle_url)
                    );
                }
            }
        }
        self.adapter.set_open(self.sup.dispatch_open());
    }

    fn on_core_event(&mut self, e: &Event) {
        match e {
            Event::Phase {
                component: at,
                phase,
                reason,
            } => {
                let (response, component) = (at.response(), at.id());
                self.metrics.decision(reason.map(|r| r.name()));
                if *phase == halo_core::Phase::Withheld
                    && self
                        .gw
                        .component_report(response, component)
                        .is_some_and(|c| c.action)
                {
                    self.tell(&Told::Withheld {
                        component: component.as_str(),
                        reason: *reason,
                    });
                }
                if let Some(r) = reason {
                    tracing::info!(%response, %component, %phase, reason = %r, "phase");
                } else {
                    tracing::debug!(%response, %component, %phase, "phase");
                }
                self.publish("phase", e);
            }
            Event::Emit {
                component: at,
                path,
                payload,
            } => {
                let (response, component) = (at.response(), at.id());
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
            Event::ObligationCreated { id } => {
                // The core keeps the obligation until its event has been polled.
                let Some(obligation) = self.gw.obligation(*id).cloned() else {
                    tracing::warn!(obligation = id.0, "obligation created and already gone");
                    return;
                };
                self.tell(&Told::Refresh {
                    component: obligation.component.id().as_str(),
                    sources: &obligation.required,
                });
                tracing::info!(
                    obligation = obligation.id.0,
                    response = %obligation.component.response(),
                    component = %obligation.component.id(),
                    reason = %obligation.reason,
                    "obligation created: refresh requested"
                );
                let view = self.obligation_view(&obligation);
                self.publish(
                    "obligation_created",
                    &json!({"event": "obligation_created", "obligation": view}),
                );
            }
            Event::ObligationChanged { id, state } => self.publish(
                "obligation_changed",
                &json!({"event": "obligation_changed", "id": id.0,
                        "state": state.name().to_ascii_lowercase(), "open": state.is_live()}),
            ),
            Event::SupportLost {
                component: at,
                binding,
                code,
            } => {
                let now = self.now();
                self.sup.handle_support_lost(
                    now,
                    at.response(),
                    at.id(),
                    binding.0,
                    *code,
                    &mut self.adapter,
                );
                self.supervised();
            }
        }
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
                self.tell(&Told::Dispatched {
                    component: component.as_str(),
                });
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
        let view = self.gate_view(out);
        self.publish("gate", &view);
    }

    /// A gate outcome as the event stream shows it: the outcome tag and fields as the core
    /// names them, the end of a dispatched interval as Unix milliseconds.
    fn gate_view(&self, out: &GateOutcome) -> serde_json::Value {
        let mut v = serde_json::to_value(out).unwrap_or(serde_json::Value::Null);
        if let (GateOutcome::Dispatched { valid_until, .. }, Some(m)) = (out, v.as_object_mut()) {
            m.remove("valid_until");
            m.insert(
                "valid_until_unix_ms".into(),
                json!(self.wall_ms(*valid_until)),
            );
        }
        v
    }

    /// An update of one of the vehicle's own sources (provenance and epoch the vehicle's).
    fn push_vehicle_source(&mut self, name: &str, at: Nanos, value: Value) {
        let now = self.now();
        let (provenance, epoch) = (self.adapter.provenance(), self.vehicle_epoch);
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
    fn vehicle_update(&mut self, now: Nanos, u: SourceUpdate) {
        let u = crate::vehicle::px4::monotonic(self.gw.snapshot(), u);
        if let Err(e) = self.gw.handle_source_update(now, u) {
            // Receipted by the core; a future stamp is clock trouble worth a line.
            tracing::debug!(code = %e.code(), "a vehicle source update was refused: {}", e.message());
        }
    }

    /// Feeds one observation of the vehicle to the supervisor and carries out what it decides.
    fn observe(&mut self, o: crate::supervisor::Observation) {
        let now = self.now();
        self.sup.handle_observation(now, o, &mut self.adapter);
        self.supervised();
    }

    /// `POST /v1/responses`: admission, the pump (the gate for what became ready), and the
    /// decisions as they stand after it.
    fn response(&mut self, bytes: &[u8]) -> Answer {
        let t0 = Instant::now();
        let now = self.now();
        let r = self.gw.handle_response(now, bytes);
        if let Ok(rep) = &r {
            self.publish_admitted(&rep.response, &rep.components);
            // Withheld at admission: told before the refresh requests the pump publishes.
            for c in rep
                .components
                .iter()
                .filter(|c| c.action && c.phase == halo_core::Phase::Withheld)
            {
                self.tell(&Told::Withheld {
                    component: c.id.as_str(),
                    reason: c.reason,
                });
            }
        }
        self.pump();
        self.metrics
            .admission_seconds
            .observe(t0.elapsed().as_secs_f64());
        // The receipts of this very response could not be written: what it would have
        // dispatched was dropped, so the report would not be true.
        if let Some(e) = self.receipts_refusal() {
            return Err(e);
        }
        match r {
            Ok(rep) => {
                let current = self.gw.response_report(&rep.response).unwrap_or(rep);
                for c in current.components.iter() {
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
        }
    }

    /// `DELETE /v1/certificates/{id}`: a held certificate revoked (what it covered loses its
    /// support).
    fn revoke(&mut self, id: &str) -> Answer {
        match Id::new(id) {
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
        }
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
                | Cmd::Certify { reply, .. }
                | Cmd::Contract { reply, .. },
            ) => {
                let _ = reply.send(Err(e));
                return;
            }
            (_, cmd) => cmd,
        };
        match cmd {
            Cmd::Response { bytes, reply } => {
                let answer = self.response(&bytes);
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
                arrival,
                reply,
            } => {
                let answer = self.state_update(caller, &source, &bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Certificate {
                bytes,
                arrival,
                reply,
            } => {
                let answer = self.certificate(&bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Certify {
                bytes,
                arrival,
                reply,
            } => {
                let answer = self.certify(&bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Revoke { id, reply } => {
                let answer = self.revoke(&id);
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
            Cmd::Responses { reply } => {
                let _ = reply.send(Ok(self.responses_view()));
            }
            Cmd::Obligations { reply } => {
                let all: Vec<_> = self
                    .gw
                    .obligations()
                    .map(|o| self.obligation_view(o))
                    .collect();
                let _ = reply.send(Ok(serde_json::Value::Array(all)));
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

    /// An operator request: the supervisor decides, now or when the vehicle answers.
    fn operator(&mut self, op: OperatorOp, reply: Reply) {
        let now = self.now();
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        self.replies.insert(ticket, reply);
        self.sup
            .handle_operator(now, ticket, op, &mut self.adapter, &mut self.monitor);
        // A takeoff's contract effect leaves the monitor's receipts.
        self.contract_receipts();
        self.supervised();
        self.pump();
    }

    fn status(&self) -> serde_json::Value {
        let now = self.now();
        let cat = self.gw.catalog();
        let sources: Vec<_> = cat
            .sources()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ix = halo_core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
                let st = self.gw.snapshot().source(ix);
                let mut v = json!({
                    "source": s.name,
                    "age_ms": self.gw.snapshot().age(ix, now).map(Nanos::as_ms),
                    "limit_ms": console::action_age_limit(cat, ix).map(Nanos::as_ms),
                    "epoch": st.map(|x| x.epoch),
                    "provenance": st.map(|x| x.provenance.clone()),
                });
                if let (Some(Value::Bounds(b)), Some(m)) = (st.map(|x| &x.value), v.as_object_mut())
                {
                    m.insert("bounds".into(), json!(b));
                }
                v
            })
            .collect();
        let live_obligations = self.gw.obligations().filter(|o| o.state.is_live()).count();
        json!({
            "service": "halo-gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "boot_epoch": self.boot_epoch,
            "uptime_s": self.clock.origin().elapsed().as_secs(),
            "catalog": {"id": cat.id(), "version": cat.version()},
            "vehicle": VehicleView {
                setpoints_sent: self.adapter.setpoints_sent(),
                control: self.sup.control_name(),
                override_mode: self.sup.vehicle().override_mode.clone(),
                ..self.vehicle.clone()
            },
            "operator_hold": self.sup.held(),
            "audit": {
                "public_key": self.audit.as_ref().map(Signing::public_hex),
                "last_checkpoint": self.audit.as_ref().and_then(Signing::latest_count),
            },
            "contract": self.contract_status(),
            "responses_live": self.gw.response_ids().count(),
            "obligations_live": live_obligations,
            "sources": sources,
            "receipts": {"first": self.receipts_path,
                         "current": self.receipts.as_ref().map(|r| r.current().to_path_buf()),
                         "written": self.receipt_summary().written,
                         "lost": self.receipt_summary().lost,
                         "state": if self.sup.failed().is_some() { "refusing" } else { "ok" },
                         "reason": self.sup.failed()},
            "events_next_id": self.hub.next_id(),
            "vehicle_url": self.vehicle_url,
            "last_decisions": self.recent.iter().map(|(at, l)| json!({
                "at_unix_ms": at, "severity": l.severity, "text": l.text,
            })).collect::<Vec<_>>(),
            "statustext": self.pilot.as_ref().map(|p| json!({
                "sent": p.sent_total(), "dropped": p.dropped_total(),
            })),
        })
    }

    /// Periodic work: the supervisor's deadlines, checkpoints that are due, metrics.
    fn housekeeping(&mut self) {
        self.flush_pilot_texts();
        let t = Instant::now();
        let now = self.now();
        if self.sup.poll_timeout().is_some_and(|d| d <= now) {
            self.sup.handle_timeout(now, &mut self.adapter);
            self.supervised();
        }
        if t.duration_since(self.last_housekeeping) < Duration::from_millis(500) {
            return;
        }
        self.last_housekeeping = t;
        if self.audit.as_ref().is_some_and(|a| a.due(t)) {
            let ok = self.checkpoint(false);
            if !ok && self.sup.failed().is_none() {
                let dropped = self.adapter.discard_staged_targets();
                self.fail_closed(&dropped);
            }
        }
        let now = self.now();
        let cat = self.gw.catalog();
        for (i, s) in cat.sources().iter().enumerate() {
            let ix = halo_core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
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
        let v = &self.adapter;
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
            self.metrics
                .unsigned_refused
                .set(i64::try_from(px4.unsigned_refused()).unwrap_or(i64::MAX));
            let (to_vehicle, to_gcs, forged, _) = px4.gcs_relay();
            let g = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.metrics.gcs_to_vehicle.set(g(to_vehicle));
            self.metrics.gcs_to_gcs.set(g(to_gcs));
            self.metrics.gcs_forged.set(g(forged));
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
    ) -> Task {
        loop {
            let now = self.now();
            let next = [self.gw.poll_timeout(), self.sup.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let wake = next
                .map_or(Duration::from_millis(100), |t| {
                    Duration::from_nanos(t.0.saturating_sub(now.0))
                })
                .min(Duration::from_millis(100))
                .min(self.deferred.front().map_or(Duration::MAX, |(at, _)| {
                    at.saturating_duration_since(Instant::now())
                }));
            self.metrics
                .input_queue_depth
                .set(i64::try_from(cmds.len()).unwrap_or(i64::MAX));
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { break; }
                }
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                Some((id, r)) = next_synced(&mut self.synced) => self.on_synced(id, r),
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

    /// Holds the vehicle (the supervisor makes it safe), waits at most `settle` for it to
    /// settle or for the link to go, then writes the last receipts and the final checkpoint.
    async fn shutdown(&mut self, bridge: &mut VehicleEvents, settle: Duration) {
        self.publish("shutdown", &json!({"reason": "signal"}));
        self.sup.begin_shutdown(&mut self.adapter);
        self.supervised();
        let deadline = tokio::time::Instant::now() + settle;
        let mut settled = self.sup.shutdown_settled(&self.adapter);
        while !settled {
            tokio::select! {
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                () = tokio::time::sleep_until(deadline) => break,
            }
            self.pump();
            settled = self.sup.shutdown_settled(&self.adapter);
        }
        self.sup.finish_shutdown(settled, &mut self.adapter);
        self.supervised();
        let now = self.now();
        self.gw.flush_summaries(now);
        self.pump();
        if !self.checkpoint(true) && self.sup.failed().is_none() {
            self.record_shutdown_failure();
        }
    }
}

/// The next finished receipt sync; never, without a sync worker.
async fn next_synced(
    synced: &mut Option<mpsc::Receiver<super::receipts::Synced>>,
) -> Option<super::receipts::Synced> {
    match synced {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

fn verdict_name(v: halo_core::contract::Verdict) -> &'static str {
    match v {
        halo_core::contract::Verdict::Allow => "allow",
        halo_core::contract::Verdict::Deny => "deny",
        halo_core::contract::Verdict::Indeterminate => "indeterminate",
        halo_core::contract::Verdict::Reauthorize => "reauthorize",
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
        | Cmd::Certify { reply, .. }
        | Cmd::Revoke { reply, .. }
        | Cmd::GetResponse { reply, .. }
        | Cmd::Responses { reply }
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
