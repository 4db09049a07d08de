//! PX4 telemetry as provider updates (the adapter is [`super::VehicleAdapter`]).

use px4_bridge::Event as BridgeEvent;
use px4_bridge::telemetry::{LandedState, Telemetry};

use crate::core::catalog::Catalog;
use crate::core::digest::Digest;
use crate::core::ids::Id;
use crate::core::state::Snapshot;
use crate::core::state::{SourceUpdate, Value};
use crate::core::time::Nanos;

/// A vehicle source update from PX4 (provenance `px4`, epoch 1), or `None` when the catalog has
/// no such source or gives it another kind of value.
pub fn vehicle_update(cat: &Catalog, name: &str, at: Nanos, value: Value) -> Option<SourceUpdate> {
    source_update(cat, name, at, value, "px4", 1)
}

/// An update of the catalog's vehicle source `name` from `provenance` at `epoch`, built by the
/// core's one constructor, or `None` when the catalog has no such source or gives it another
/// kind of value (a catalog need not define every source a vehicle reports).
pub fn source_update(
    cat: &Catalog,
    name: &str,
    at: Nanos,
    value: Value,
    provenance: &str,
    epoch: u64,
) -> Option<SourceUpdate> {
    let provenance = Id::new(provenance).ok()?;
    SourceUpdate::typed(cat, name, value, epoch, provenance, at).ok()
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

/// A vehicle source update made monotonic against the state held (the service applies it to
/// every update of the vehicle's own sources): a stamp behind the held one becomes the held
/// one. Conservative: a newer sample was generated no earlier than the previous one,
/// whose stamp was already no later than its own true generation time.
pub fn monotonic(snapshot: &Snapshot, mut u: SourceUpdate) -> SourceUpdate {
    if let Some(cur) = snapshot.source(u.source)
        && u.state.generated_at < cur.generated_at
    {
        u.state.generated_at = cur.generated_at;
    }
    u
}

pub use crate::supervisor::link_stamp;
