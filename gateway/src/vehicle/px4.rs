//! PX4 telemetry as provider updates (the adapter is [`super::VehicleAdapter`]).

use px4_bridge::Event as BridgeEvent;
use px4_bridge::telemetry::{LandedState, Telemetry};

use halo_core::catalog::Catalog;
use halo_core::digest::Digest;
use halo_core::ids::Id;
use halo_core::state::Snapshot;
use halo_core::state::{SourceUpdate, Value};
use halo_core::time::Nanos;

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
            let at = u.generated_at.sub_ns(u.uncertainty_ns);
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
                    Value::Position(halo_core::state::Point {
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

/// The `origin` source (a `geo_origin` value) from PX4's `GPS_GLOBAL_ORIGIN` and
/// `HOME_POSITION`: where the local frame every setpoint is flown in sits on the globe.
///
/// Its epoch changes exactly when the value does (a moved EKF origin, a new home altitude), so
/// an action planned against the old origin (its claim, its admission witness) is withheld.
/// Epochs are `base + n` with `base` from the gateway's boot epoch, so no epoch of an earlier
/// start ever names a different origin. PX4 announces the origin when it changes (it need not
/// repeat it), so the value is re-stamped at every heartbeat while the vehicle is heard.
#[derive(Clone, Debug, Default)]
pub struct OriginTrack {
    origin: Option<(f64, f64, f64)>,
    home_alt_m: Option<f64>,
    current: Option<halo_core::value::GeoOrigin>,
    changes: u64,
}

/// Origin changes one start can number (the epoch's low part).
pub const ORIGIN_EPOCHS_PER_BOOT: u64 = 1_000_000;

impl OriginTrack {
    /// Takes `GPS_GLOBAL_ORIGIN`.
    pub fn origin(&mut self, lat_deg: f64, lon_deg: f64, alt_m: f64) {
        self.origin = Some((lat_deg, lon_deg, alt_m));
    }

    /// Takes `HOME_POSITION`'s altitude above mean sea level.
    pub fn home_alt(&mut self, alt_m: f64) {
        self.home_alt_m = Some(alt_m);
    }

    /// The value to publish and its epoch (`boot × ORIGIN_EPOCHS_PER_BOOT + n`, n counting the
    /// values seen in this start from 1), once both messages were heard and the value is
    /// usable; `None` before.
    pub fn value(&mut self, boot: u64) -> Option<(halo_core::value::GeoOrigin, u64)> {
        let ((lat_deg, lon_deg, alt_m), home_alt_m) = (self.origin?, self.home_alt_m?);
        let v = halo_core::value::GeoOrigin {
            lat_deg,
            lon_deg,
            alt_m,
            home_alt_m,
        };
        v.check().ok()?;
        if self.current != Some(v) {
            self.current = Some(v);
            self.changes = self
                .changes
                .saturating_add(1)
                .min(ORIGIN_EPOCHS_PER_BOOT - 1);
        }
        Some((
            v,
            boot.saturating_mul(ORIGIN_EPOCHS_PER_BOOT)
                .saturating_add(self.changes),
        ))
    }
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

pub use halo_supervisor::link_stamp;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_origin_epoch_moves_exactly_when_the_value_does() {
        let mut t = OriginTrack::default();
        assert!(t.value(3).is_none());
        t.origin(47.397_742, 8.545_594, 488.0);
        assert!(t.value(3).is_none(), "no home altitude yet");
        t.home_alt(488.0);
        let (v, e1) = t.value(3).unwrap();
        assert_eq!(
            (v.lat_deg, v.home_alt_m, e1),
            (47.397_742, 488.0, 3_000_001)
        );
        // The same origin again, as PX4 repeats it: the same epoch.
        t.origin(47.397_742, 8.545_594, 488.0);
        t.home_alt(488.0);
        assert_eq!(t.value(3).unwrap().1, e1);
        // A moved origin, then a new home altitude: a new epoch each.
        t.origin(47.398_742, 8.545_594, 488.0);
        assert_eq!(t.value(3).unwrap().1, e1 + 1);
        t.home_alt(489.5);
        assert_eq!(t.value(3).unwrap().1, e1 + 2);
        // An unusable origin publishes nothing.
        t.origin(f64::NAN, 8.5, 488.0);
        assert!(t.value(3).is_none());
    }
}
