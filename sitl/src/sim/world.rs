//! The simulated world the demos, the service tests and the end-to-end benchmarks fly in, as
//! its providers publish it: one round of updates for the `uav-px4` catalog's provider sources,
//! in the wire form of `POST /v1/state/{source}` (docs/envelope.md). Data, no gateway code.

use serde_json::{Value, json};

/// One round of the demo world's provider updates, as `(source, POST /v1/state body)`: traffic
/// far away, the map at `map_epoch`, corridor `corridor-12` epoch 3, authority, airspace and
/// preflight granted, light wind, the range sensor. The demo, the service tests and the
/// end-to-end benchmarks share this world.
pub fn provider_updates(map_epoch: u64, at_unix_ms: u64) -> Vec<(&'static str, Value)> {
    [
        ("traffic", json!([{"north_m": 300.0, "east_m": -200.0, "down_m": -40.0}]), 41, "utm-feed-a"),
        ("map", Value::Null, map_epoch, "map-service"),
        ("bounds", json!({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.5}), 3, "corridor-12"),
        ("authority", json!(true), 1, "operator"),
        ("airspace", json!(true), 1, "laanc"),
        ("preflight", json!(true), 1, "operator"),
        ("wind", json!(4.0), 1, "weather"),
        ("z_range", json!(5.1), 1, "rangefinder"),
    ]
    .into_iter()
    .map(|(s, v, e, p)| {
        (
            s,
            json!({"value": v, "epoch": e, "provenance": p, "generated_at_unix_ms": at_unix_ms}),
        )
    })
    .collect()
}
