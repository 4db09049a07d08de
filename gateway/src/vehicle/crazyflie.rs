//! Crazyflie telemetry as provider updates.
//!
//! Sources (provenance `crazyflie`; sources the catalog does not define are skipped):
//!
//! - `position`: the state estimate in local NED (north = x, east = −y, down = −z); its epoch is
//!   the bridge's connection count, since a reconnect may follow a reboot that reset the
//!   estimator;
//! - `z_range`: `range.zrange` in metres (out of range: no update, so the source ages);
//! - `battery`: `pm.vbat` in volts;
//! - `vehicle`: `airborne` while the supervisor says flying, else `landed`;
//! - `link`: false when the bridge declares the link down (the service refreshes it to true from
//!   telemetry, as for PX4).

use crazyflie_bridge::shell::BridgeEvent;
use crazyflie_bridge::telemetry::sup;
use crazyflie_bridge::{Event, Telemetry};

use crate::vehicle::px4::source_update;
use halo_core::catalog::Catalog;
use halo_core::ids::Id;
use halo_core::state::{Point, SourceUpdate, Value};
use halo_core::time::Nanos;

/// The Crazyflie's estimate in the gateway's local NED, m.
pub fn to_ned(p: [f32; 3]) -> [f64; 3] {
    [f64::from(p[0]), -f64::from(p[1]), -f64::from(p[2])]
}

/// Provider updates for one bridge event; `epoch` is the connection count.
pub fn telemetry_updates(
    cat: &Catalog,
    ev: &BridgeEvent,
    now: Nanos,
    epoch: u64,
) -> Vec<SourceUpdate> {
    let mut out = Vec::new();
    let mut push = |name: &str, at: Nanos, value: Value| {
        out.extend(source_update(cat, name, at, value, "crazyflie", epoch));
    };
    match ev {
        BridgeEvent::Telemetry(u) => {
            // Fail closed: a sample counts as old as its uncertainty allows.
            let at = u.generated_at.sub_ns(u.uncertainty_ns);
            match &u.data {
                Telemetry::State { position_m, .. } if position_m.iter().all(|v| v.is_finite()) => {
                    let [north_m, east_m, down_m] = to_ned(*position_m);
                    push(
                        "position",
                        at,
                        Value::Position(Point {
                            north_m,
                            east_m,
                            down_m,
                        }),
                    );
                }
                Telemetry::Range { z_range_m: Some(m) } => {
                    push("z_range", at, Value::Number(f64::from(*m)))
                }
                Telemetry::Power { vbat_v, .. } => {
                    push("battery", at, Value::Number(f64::from(*vbat_v)));
                }
                Telemetry::Supervisor { bits } => {
                    let s = if bits & sup::IS_FLYING != 0 {
                        "airborne"
                    } else {
                        "landed"
                    };
                    if let Ok(id) = Id::new(s) {
                        push("vehicle", at, Value::Text(id));
                    }
                }
                _ => {}
            }
        }
        BridgeEvent::Pacer(Event::Link { up: false, .. }) | BridgeEvent::Disconnected { .. } => {
            push("link", now, Value::Flag(false));
        }
        _ => {}
    }
    out
}
