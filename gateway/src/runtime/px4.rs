//! The PX4 bridge as the gate's adapter, and PX4 telemetry as provider updates.

use std::collections::BTreeMap;

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

/// The governed adapter for PX4: exact setpoints through the bridge's non-blocking queue.
pub struct Px4Adapter {
    handle: BridgeHandle,
    /// Every binding the bridge took, with the response and component it belongs to, so a
    /// later observation can be attributed.
    pub dispatched: BTreeMap<[u8; 32], (Id, Id)>,
    /// The newest position target handed to the bridge (a hold or a land ends it).
    pub last_target: Option<[u8; 32]>,
}

impl Px4Adapter {
    /// Wraps a bridge handle.
    pub fn new(handle: BridgeHandle) -> Px4Adapter {
        Px4Adapter {
            handle,
            dispatched: BTreeMap::new(),
            last_target: None,
        }
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
        | EnqueueError::InvalidSetpoint
        | EnqueueError::Expired => AdapterError::NotReady,
    }
}

impl Adapter for Px4Adapter {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        let binding: [u8; 32] = req.binding.0;
        // The gateway and the bridge share one clock origin, so the instants carry over as is.
        let valid_until = Mono(req.valid_until.0);
        let r = match req.command {
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
        };
        r.map_err(adapter_error)?;
        self.last_target = matches!(req.command, ActionCommand::Route(_)).then_some(binding);
        self.dispatched
            .insert(binding, (req.response.clone(), req.component.clone()));
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
            let at = Nanos(u.generated_at.0);
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
