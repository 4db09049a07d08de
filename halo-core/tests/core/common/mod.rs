//! Shared fixtures of the core's tests (the gateway's tests include this file too): catalogs,
//! the example state and response, certificates, receipt logs.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures"
)]

pub mod contract_scale;

use std::path::PathBuf;

use halo_core::statefile::ProviderUpdate;
use halo_core::{Catalog, Gateway, Nanos};

/// A small deterministic generator (xorshift64*), so a failing input can be reproduced from
/// its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The conformance data (`halo-core/tests/data`), from any crate of the workspace.
pub fn data_dir() -> PathBuf {
    repo_root().join("halo-core/tests/data")
}

/// Loads a catalog file.
pub fn load_catalog(path: &std::path::Path) -> Catalog {
    let text = std::fs::read_to_string(path).unwrap();
    Catalog::parse(&text, &path.display().to_string()).unwrap()
}

pub fn uav_catalog() -> Catalog {
    let path = repo_root().join("catalogs/uav-px4.toml");
    load_catalog(&path)
}

/// Applies a provider update given as JSON fields.
pub fn put(
    gw: &mut Gateway,
    now_ms: u64,
    source: &str,
    value: serde_json::Value,
    epoch: u64,
    prov: &str,
    at_ms: u64,
) {
    let u = ProviderUpdate {
        source: source.into(),
        value,
        epoch,
        provenance: prov.parse().unwrap(),
        generated_at_ms: at_ms,
    };
    let typed = u.typed(gw.catalog()).unwrap();
    gw.handle_source_update(Nanos::from_ms(now_ms), typed)
        .unwrap();
}

/// Every UAV source fresh at `at_ms`, healthy values, map epoch 7, traffic epoch 41, corridor
/// `corridor-12` epoch 3, the local origin at PX4 SITL's default home (epoch 1).
pub fn healthy_uav(gw: &mut Gateway, at_ms: u64) {
    use serde_json::json;
    put(
        gw,
        at_ms,
        "traffic",
        json!([{"north_m": 400.0, "east_m": 400.0, "down_m": -50.0}]),
        41,
        "utm-feed-a",
        at_ms,
    );
    put(gw, at_ms, "map", json!(null), 7, "map-service", at_ms);
    put(
        gw,
        at_ms,
        "bounds",
        json!({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.0}),
        3,
        "corridor-12",
        at_ms,
    );
    put(gw, at_ms, "vehicle", json!("airborne"), 1, "px4", at_ms);
    put(
        gw,
        at_ms,
        "home",
        json!({"north_m": 0.0, "east_m": 0.0, "down_m": 0.0}),
        1,
        "px4",
        at_ms,
    );
    put(
        gw,
        at_ms,
        "origin",
        json!({"lat_deg": 47.397742, "lon_deg": 8.545594, "alt_m": 488.0, "home_alt_m": 488.0}),
        1,
        "px4",
        at_ms,
    );
    put(gw, at_ms, "battery", json!(80.0), 1, "px4", at_ms);
    put(gw, at_ms, "link", json!(true), 1, "link-monitor", at_ms);
    put(gw, at_ms, "authority", json!(true), 1, "operator", at_ms);
    put(gw, at_ms, "airspace", json!(true), 1, "laanc", at_ms);
    put(gw, at_ms, "preflight", json!(true), 1, "operator", at_ms);
    put(gw, at_ms, "wind", json!(4.0), 1, "weather", at_ms);
    put(gw, at_ms, "z_range", json!(10.2), 1, "rangefinder", at_ms);
    put(gw, at_ms, "control", json!(true), 1, "px4", at_ms);
}

/// The running example: notice e1, report e2, route action e3, status e4 requiring e3
/// dispatched.
pub fn running_example(response_id: &str, generation: u64) -> String {
    serde_json::json!({
        "response_id": response_id,
        "agent_id": "planner-1",
        "generation": generation,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
            {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 10.2, "unit": "m"}},
            {"id": "e3", "type": "route_action",
             "payload": {"frame": "local_ned", "north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 8.0},
             "support": {"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}},
             "certificate": "cert-9f2c"},
            {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
             "requires": [{"id": "e3", "phase": "dispatched"}]}
        ]
    })
    .to_string()
}

/// The digest of component `cid` in a response, as the gateway computes it.
pub fn digest_of(gw: &Gateway, response: &str, cid: &str) -> halo_core::Digest {
    let raw = halo_core::envelope::parse_envelope(response.as_bytes()).unwrap();
    let v = halo_core::graph::validate(gw.catalog(), &raw).unwrap();
    let i = v.graph.index_of(&cid.parse().unwrap()).unwrap();
    v.graph.component(i).unwrap().digest
}

/// Issues certificate `cert_id` for component `cid` of `response`, valid until `until_ms`.
pub fn certify(
    gw: &mut Gateway,
    now_ms: u64,
    response: &str,
    cid: &str,
    cert_id: &str,
    until_ms: u64,
) {
    let covers = digest_of(gw, response, cid);
    gw.handle_certificate(
        Nanos::from_ms(now_ms),
        halo_core::Certificate {
            id: cert_id.parse().unwrap(),
            covers,
            valid_until: Nanos::from_ms(until_ms),
            issuer: "tube-verifier".parse().unwrap(),
        },
    )
    .unwrap();
}

/// Drains events and returns them.
pub fn drain(gw: &mut Gateway) -> Vec<halo_core::Event> {
    std::iter::from_fn(|| gw.poll_event()).collect()
}

/// Loads a catalog by the short names the conformance data uses.
pub fn catalog_named(name: &str) -> Catalog {
    let path = match name {
        "uav-px4" => repo_root().join("catalogs/uav-px4.toml"),
        "graph-test" => data_dir().join("catalogs/graph.toml"),
        "schedule-test" => data_dir().join("catalogs/schedule.toml"),
        other => panic!("unknown catalog `{other}` in test data"),
    };
    load_catalog(&path)
}

/// Resolves `"covers": {"component": "e3"}` in a state file against a response, then applies
/// the state (sources, certificates) to the gateway at the state's `now_ms`.
pub fn apply_state(gw: &mut Gateway, state: &serde_json::Value, response_text: &str) -> Nanos {
    let mut state = state.clone();
    if let Some(certs) = state.get_mut("certificates").and_then(|c| c.as_array_mut()) {
        // A certificate naming a component the response does not carry is dropped: it could
        // not cover anything.
        certs.retain_mut(|c| {
            let covers = c.get("covers").cloned().unwrap();
            let Some(cid) = covers.get("component").and_then(|v| v.as_str()) else {
                return true;
            };
            let raw = halo_core::envelope::parse_envelope(response_text.as_bytes()).unwrap();
            let v = halo_core::graph::validate(gw.catalog(), &raw).unwrap();
            match v.graph.index_of(&cid.parse().unwrap()) {
                Some(i) => {
                    c["covers"] =
                        serde_json::Value::String(v.graph.component(i).unwrap().digest.to_hex());
                    true
                }
                None => false,
            }
        });
    }
    let bytes = serde_json::to_vec(&state).unwrap();
    let st = halo_core::statefile::parse_state(gw.catalog(), &bytes).unwrap();
    for u in st.updates {
        gw.handle_source_update(st.now, u).unwrap();
    }
    for c in st.certificates {
        gw.handle_certificate(st.now, c).unwrap();
    }
    st.now
}

/// A receipt log's lines as receipts.
pub fn read_log(path: &std::path::Path) -> Vec<halo_core::Receipt> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Writes receipts as the gateway would, after re-linking the chain the way a forger with
/// write access would: indices renumbered, every hash recomputed, and each checkpoint's count
/// and head set to the chain's (its signature cannot be redone without the key).
pub fn write_relinked(path: &std::path::Path, receipts: &[halo_core::Receipt]) {
    use halo_core::Receipt;
    let mut out: Vec<Receipt> = Vec::new();
    for r in receipts {
        let mut body = r.body.value();
        if body["kind"] == "checkpoint" {
            let (count, head) = out
                .last()
                .map_or((0, halo_core::Digest::default()), |p| (p.index + 1, p.hash));
            body["count"] = serde_json::json!(count);
            body["head"] = serde_json::json!(head.to_hex());
        }
        let next = Receipt::next(out.last(), r.at_ns, r.wall_unix_ms, body);
        out.push(next);
    }
    let text: String = out.iter().map(|r| r.to_json_line() + "\n").collect();
    std::fs::write(path, text).unwrap();
}
