//! The service task: the one owner of the protocol core, the supervisor, the vehicle adapter and
//! the receipt log.
//!
//! Every interface (HTTP, stdio, the operator CLI through HTTP) sends it a [`Cmd`] over a
//! bounded channel and awaits the answer; the bridge sends it vehicle events. After every input
//! it follows the core's call order ([`halo_core::engine`]): drain events to the hub, pass every ready
//! token to the final gate, append every receipt. The gate call itself is synchronous: nothing
//! in [`Task::pump`] awaits.
//!
//! The safety decisions around the core (deny-hold, control and overrides, operator commands
//! and their deadlines, arrival, the receipt log's failure, the shutdown) are the
//! [`Supervisor`]'s, a sans-IO machine with time passed in; this task translates the bridges'
//! events into its observations and carries out what it decides.
//!
//! One concern per file:
//!
//! - `cmd`: what an interface may ask ([`Cmd`]), how it asks ([`ask`]) and how each is answered;
//! - `requests`: the bodies of the interfaces' requests, read strictly and answered;
//! - `run`: the loop (the next input, receipt sync or deadline) and the periodic work;
//! - `pump`: the core's call order after every input, the final gate and the supervisor;
//! - `audit`: receipts written before what they record leaves, checkpoints, signed heads;
//! - `vehicle`, `px4`, `crazyflie`: the bridges' events as vehicle sources, observations and
//!   events, and the hold at shutdown;
//! - `view`: `GET /v1/status` and the views events carry;
//! - `tell`, [`pilot_text`]: what the pilot is told over STATUSTEXT, and its words;
//! - [`certifier`]: the reference certifier (`POST /v1/certify`);
//! - `console`: the console's plan and decisions views.

mod audit;
pub mod certifier;
mod cmd;
mod console;
mod crazyflie;
#[cfg(feature = "__evaluation")]
mod late_gate;
pub mod pilot_text;
mod pump;
mod px4;
mod requests;
mod run;
mod tell;
mod vehicle;
mod view;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use px4_bridge::Event as BridgeEvent;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};

use crate::service::infra::clock::{Arrival, Clock};
use crate::service::infra::hub::Hub;
use crate::service::infra::metrics::{Metrics, OutcomeLabel, SourceLabel};
use crate::service::task::pilot_text::Told;
use crate::vehicle::px4::source_update;
use crate::vehicle::{VehicleAdapter, VehicleLink};
use halo_core::contract::{Monitor, Role as ContractRole};
use halo_core::engine::{Event, Gateway};
use halo_core::envelope::MAX_RESPONSE_BYTES;
use halo_core::gate::GateOutcome;
use halo_core::ids::Id;
use halo_core::reason::ReasonCode;
use halo_core::state::{SourceUpdate, Value};
use halo_core::time::Nanos;
use halo_supervisor::{Output, Supervisor, Ticket};

use crate::service::api::ApiError;
pub use audit::{PreviousHead, ReceiptSummary, Signing};
pub use cmd::{Answer, Cmd, Party, Reply, ask};
pub use halo_supervisor::{FullAction, OperatorOp};
pub use requests::{
    CertificateBody, UpdateBody, read_certificate, read_contract_op, read_update, read_update_at,
};
pub use vehicle::VehicleEvents;
pub use view::{OriginWait, VehicleView};

enum VehicleEvent {
    Px4(BridgeEvent),
    Crazyflie(crazyflie_bridge::shell::BridgeEvent),
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
    receipts: Option<crate::service::store::receipts::ReceiptLog>,
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
    syncer: Option<crate::service::store::receipts::SyncWorker>,
    /// What the sync worker finished.
    synced: Option<mpsc::Receiver<crate::service::store::receipts::Synced>>,
    next_sync: u64,
    /// The epoch of the vehicle's own sources: 1 for PX4; a Crazyflie's connection count.
    vehicle_epoch: u64,
    /// The `origin` source from PX4's global origin and home (its own epochs).
    geo_origin: crate::vehicle::px4::OriginTrack,
    /// The reference certifier (`[certifier]`).
    certifier: crate::service::task::certifier::CertifierConfig,
    /// Evaluation only: the final gate run late (`__evaluation` builds only).
    #[cfg(feature = "__evaluation")]
    late: late_gate::LateGate,
    /// Lines for the pilot's ground station (`vehicle.statustext`, PX4 only).
    pilot: Option<crate::service::task::pilot_text::PilotTexts>,
    /// The last decisions in words, newest last (at most [`RECENT`]), for `GET /v1/status`.
    recent: std::collections::VecDeque<(u64, crate::service::task::pilot_text::PilotLine)>,
    /// The agent principal that sent each live response (one sent by the stdio or MCP link has
    /// none): it alone sees it, its obligations and its events, and may send it again.
    owners: std::collections::HashMap<String, Arc<str>>,
    /// The principal whose update each source holds, by source index (a source the vehicle
    /// link writes, or one sent without a principal, has none).
    sent_by: std::collections::HashMap<u8, halo_core::Id>,
}

/// Decisions kept in words for `GET /v1/status`.
pub const RECENT: usize = 8;

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
        receipts: Option<crate::service::store::receipts::ReceiptLog>,
        hub: Hub,
        metrics: Arc<Metrics>,
        boot_epoch: u64,
    ) -> Task {
        let receipts_path = receipts.as_ref().map(|r| r.current().to_path_buf());
        // Without a thread for it, checkpoint syncs run in place (as before the worker).
        let (syncer, synced) = match receipts
            .as_ref()
            .map(|_| crate::service::store::receipts::SyncWorker::start())
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
            VehicleLink::Px4(h) => (halo_supervisor::VehicleKind::Px4, h.offboard_permitted()),
            VehicleLink::Crazyflie(_) => (halo_supervisor::VehicleKind::Crazyflie, false),
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
            #[cfg(feature = "__evaluation")]
            late: late_gate::LateGate::default(),
            certifier: crate::service::task::certifier::CertifierConfig::default(),
            pilot: None,
            recent: std::collections::VecDeque::with_capacity(RECENT),
            owners: std::collections::HashMap::new(),
            sent_by: std::collections::HashMap::new(),
        }
    }

    /// Tells the pilot's ground station the gateway's decisions (`vehicle.statustext`; PX4
    /// only, a Crazyflie has no ground station link).
    #[must_use]
    pub fn with_pilot_texts(mut self, on: bool) -> Task {
        self.pilot = (on && self.adapter.px4().is_some())
            .then(crate::service::task::pilot_text::PilotTexts::new);
        self
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
    pub fn with_certifier(mut self, c: crate::service::task::certifier::CertifierConfig) -> Task {
        self.certifier = c;
        self
    }

    /// Evaluation only: gates each ready token `delay` after it was polled (see
    /// `Embedded::gate_delay`).
    #[cfg(feature = "__evaluation")]
    #[must_use]
    pub fn with_gate_delay(mut self, delay: Option<Duration>) -> Task {
        self.late = late_gate::LateGate::new(delay);
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

    fn publish(&self, name: &'static str, data: &impl Serialize) {
        if let Ok(v) = serde_json::to_value(data) {
            let audience = self.audience(&v);
            self.hub.publish_to(name, v.to_string(), audience);
            self.metrics.events.inc();
        }
    }

    /// The agent principal an event is about: its response's sender (by `response`, its
    /// obligation's response, or the obligation `id` of an `obligation_changed`); none for
    /// the vehicle's, the sources' and the operator's events, which every agent sees.
    fn audience(&self, v: &serde_json::Value) -> Option<Arc<str>> {
        if self.owners.is_empty() {
            return None;
        }
        let response = v
            .get("response")
            .and_then(serde_json::Value::as_str)
            .or_else(|| {
                v.pointer("/obligation/response")
                    .and_then(serde_json::Value::as_str)
            })
            .map(str::to_string)
            .or_else(|| {
                (v.get("event").and_then(serde_json::Value::as_str) == Some("obligation_changed"))
                    .then(|| v.get("id").and_then(serde_json::Value::as_u64))
                    .flatten()
                    .and_then(|id| self.gw.obligation(halo_core::obligation::ObligationId(id)))
                    .map(|o| o.component.response().to_string())
            })?;
        self.owners.get(&response).cloned()
    }

    /// Before a response is admitted: its id is another agent principal's (refused), or it is
    /// claimed for `by` (`Some((id, by))`).
    fn claim(&self, by: &Party, bytes: &[u8]) -> Result<Option<(String, Arc<str>)>, ApiError> {
        let Party::Agent(name) = by else {
            return Ok(None);
        };
        #[derive(serde::Deserialize)]
        struct Head {
            response_id: String,
        }
        // An envelope that does not parse is refused by the core with its own reason.
        let Ok(h) = serde_json::from_slice::<Head>(bytes) else {
            return Ok(None);
        };
        match self.owners.get(&h.response_id) {
            Some(o) if o != name => Err(ApiError::new(
                409,
                ReasonCode::RESPONSE_ID_TAKEN,
                format!(
                    "response id `{}` is another agent principal's; give this response an id of its own",
                    h.response_id
                ),
            )),
            _ => Ok(Some((h.response_id, Arc::clone(name)))),
        }
    }

    /// [`Task::response`] with its sender recorded first (its events are published during
    /// admission), undone when it was refused and was new. The map keeps only responses the
    /// core still holds.
    fn response_by(
        &mut self,
        bytes: &[u8],
        claimed: Option<(String, Arc<str>)>,
        sender: Option<Id>,
    ) -> Answer {
        let Some((id, by)) = claimed else {
            return self.response(bytes, sender);
        };
        let new = self.owners.insert(id.clone(), by).is_none();
        let answer = self.response(bytes, sender);
        if answer.is_err()
            && new
            && Id::new(&id)
                .ok()
                .and_then(|r| self.gw.response_report(&r))
                .is_none()
        {
            self.owners.remove(&id);
        }
        if self.owners.len() > 2 * self.gw.response_ids().count() + 64 {
            let live: std::collections::HashSet<String> = self
                .gw
                .response_ids()
                .map(|r| r.as_str().to_string())
                .collect();
            self.owners.retain(|k, _| live.contains(k));
        }
        answer
    }

    /// Whether `by` may answer obligation `id` (an unknown one is the core's to refuse).
    fn obligation_seen_by(&self, by: &Party, id: u64) -> bool {
        self.gw
            .obligation(halo_core::obligation::ObligationId(id))
            .is_none_or(|o| by.sees(self.owners.get(o.component.response().as_str())))
    }
}

/// The next finished receipt sync; never, without a sync worker.
async fn next_synced(
    synced: &mut Option<mpsc::Receiver<crate::service::store::receipts::Synced>>,
) -> Option<crate::service::store::receipts::Synced> {
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

/// Largest body for a response or candidate.
pub const RESPONSE_LIMIT: usize = MAX_RESPONSE_BYTES;
