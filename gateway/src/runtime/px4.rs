//! The PX4 bridge as the gate's adapter, and PX4 telemetry as provider updates.

use std::collections::VecDeque;

use px4_bridge::shell::BridgeHandle;
use px4_bridge::telemetry::{LandedState, Telemetry};
use px4_bridge::{Command, EnqueueError, Event as BridgeEvent, Mono, Setpoint};

use crate::core::catalog::Catalog;
use crate::core::digest::Digest;
use crate::core::gate::{Adapter, AdapterError, EnqueueRequest};
use crate::core::ids::Id;
use crate::core::payload::ActionCommand;
use crate::core::state::{SourceState, SourceUpdate, Value};
use crate::core::time::Nanos;

/// How many dispatched commands the adapter remembers for attributing PX4's echo of a target.
/// PX4 echoes a target within a few stream periods, long before this many newer ones exist.
const RECENT: usize = 16;

/// The governed adapter for PX4: exact setpoints through the bridge's non-blocking queue.
pub struct Px4Adapter {
    handle: BridgeHandle,
    /// The newest commands the bridge took (at most [`RECENT`], newest last), each with the
    /// response and component it belongs to, so PX4's echo can be attributed.
    recent: VecDeque<([u8; 32], Id, Id)>,
    /// The newest position target handed to the bridge (a hold or a land ends it).
    pub last_target: Option<[u8; 32]>,
    /// Targets whose stream this adapter ended (a later target, a hold or a land replaced
    /// it), as (response, component), for the shell to tell the gateway
    /// (`Gateway::stream_ended`), by binding: the gate's critical section only notes the
    /// binding; the ids are looked up when drained ([`Px4Adapter::take_ended`]).
    ended: Vec<[u8; 32]>,
}

impl Px4Adapter {
    /// Wraps a bridge handle.
    pub fn new(handle: BridgeHandle) -> Px4Adapter {
        Px4Adapter {
            handle,
            recent: VecDeque::with_capacity(RECENT),
            last_target: None,
            ended: Vec::new(),
        }
    }

    /// The response and component a recently dispatched binding belongs to.
    pub fn attribute(&self, binding: &[u8; 32]) -> Option<(&Id, &Id)> {
        self.recent
            .iter()
            .rev()
            .find(|(b, _, _)| b == binding)
            .map(|(_, r, c)| (r, c))
    }

    /// The current target no longer streams (the bridge holds, lands or lost the link).
    pub fn target_ended(&mut self) {
        if let Some(b) = self.last_target.take() {
            self.ended.push(b);
        }
    }

    /// The bridge stopped streaming this target by itself (it expired or was dropped); a
    /// newer target that replaced it meanwhile is unaffected.
    pub fn target_ended_if(&mut self, binding: &[u8; 32]) {
        if self.last_target == Some(*binding) {
            self.target_ended();
        }
    }

    /// The streams ended since the last call, as (response, component).
    pub fn take_ended(&mut self) -> Vec<(Id, Id)> {
        let ended = std::mem::take(&mut self.ended);
        ended
            .iter()
            .filter_map(|b| self.attribute(b).map(|(r, c)| (r.clone(), c.clone())))
            .collect()
    }

    /// The bridge handle.
    pub fn handle(&self) -> &BridgeHandle {
        &self.handle
    }
}

fn adapter_error(e: EnqueueError) -> AdapterError {
    match e {
        EnqueueError::LinkDown => AdapterError::LinkDown,
        EnqueueError::QueueFull => AdapterError::QueueFull,
        EnqueueError::NotOffboardCapable
        | EnqueueError::NotPermitted
        | EnqueueError::InvalidSetpoint
        | EnqueueError::Expired => AdapterError::NotReady,
    }
}

impl Adapter for Px4Adapter {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        let binding: [u8; 32] = req.binding.0;
        // The gateway and the bridge share one clock origin, so the instants carry over as is.
        let valid_until = Mono(req.valid_until.0);
        let r = match &req.command {
            #[allow(clippy::cast_possible_truncation, reason = "MAVLink carries f32")]
            ActionCommand::Route(t) => self.handle.try_enqueue(
                Setpoint {
                    north_m: t.north_m as f32,
                    east_m: t.east_m as f32,
                    down_m: t.down_m as f32,
                    yaw_deg: t.yaw_deg as f32,
                },
                binding,
                valid_until,
            ),
            ActionCommand::Hold { .. } => self.handle.hold(),
            ActionCommand::Land => self.handle.command(Command::Land),
            // Not a vehicle command: the repository-merge domain has its own adapter.
            ActionCommand::Merge { .. } => return Err(AdapterError::Unsupported),
        };
        r.map_err(adapter_error)?;
        if self.last_target != Some(binding) {
            self.target_ended();
        }
        self.last_target = matches!(req.command, ActionCommand::Route(_)).then_some(binding);
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent
            .push_back((binding, req.response.clone(), req.component.clone()));
        Ok(())
    }
}

/// A vehicle source update from PX4 (provenance `px4`, epoch 1), or `None` when the catalog has
/// no such source or gives it another kind of value.
pub fn vehicle_update(cat: &Catalog, name: &str, at: Nanos, value: Value) -> Option<SourceUpdate> {
    let ix = cat.source_ix(name)?;
    if cat.source(ix).map(|s| s.value) != Some(value.kind()) {
        return None;
    }
    Some(SourceUpdate {
        source: ix,
        state: SourceState {
            generated_at: at,
            epoch: 1,
            provenance: Id::new("px4").ok()?,
            value,
        },
    })
}

/// Turns bridge telemetry into provider updates for the catalog's vehicle sources:
/// `vehicle` (landed state as text), `battery` (percent), `link` (flag), `home` (PX4's
/// HOME_POSITION in its local frame, refreshed each time PX4 sends it). Sources the catalog
/// does not define are skipped.
pub fn telemetry_updates(cat: &Catalog, ev: &BridgeEvent, now: Nanos) -> Vec<SourceUpdate> {
    let mut out = Vec::new();
    let mut push = |name: &str, at: Nanos, value: Value| {
        out.extend(vehicle_update(cat, name, at, value));
    };
    match ev {
        BridgeEvent::Telemetry(u) => {
            // Fail closed: a mapped generation time counts as old as its uncertainty allows.
            let at = Nanos(u.generated_at.0.saturating_sub(u.uncertainty_ns));
            match &u.data {
                Telemetry::Heartbeat { .. } => push("link", at, Value::Flag(true)),
                Telemetry::Landed { state } => {
                    let s = match state {
                        LandedState::OnGround => "landed",
                        LandedState::InAir => "airborne",
                        LandedState::Takeoff => "takeoff",
                        LandedState::Landing => "landing",
                        LandedState::Undefined => "unknown",
                    };
                    if let Ok(id) = Id::new(s) {
                        push("vehicle", at, Value::Text(id));
                    }
                }
                Telemetry::Battery {
                    remaining_pct: Some(p),
                    ..
                } => push("battery", at, Value::Number(f64::from(*p))),
                Telemetry::Home {
                    north_m,
                    east_m,
                    down_m,
                    ..
                } => push(
                    "home",
                    at,
                    Value::Position(crate::core::state::Point {
                        north_m: f64::from(*north_m),
                        east_m: f64::from(*east_m),
                        down_m: f64::from(*down_m),
                    }),
                ),
                _ => {}
            }
        }
        BridgeEvent::Link { up: false, .. } => push("link", now, Value::Flag(false)),
        _ => {}
    }
    out
}

/// The binding of an observed target, as a gateway digest.
pub fn observed_binding(ev: &BridgeEvent) -> Option<Digest> {
    match ev {
        BridgeEvent::TargetObserved { binding, .. } => Some(Digest(*binding)),
        _ => None,
    }
}
