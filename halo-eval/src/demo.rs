//! The demo: the running example flown through `halo-gateway run`, in-process, on the embedded
//! simulated PX4.
//!
//! The demo is a client of the service, not a second path: it starts the same [`Service`] a
//! deployment runs (HTTP listener, service task, PX4 bridge over loopback UDP to the simulator)
//! and plays every other party through the same interfaces a deployment uses, each with its own
//! credential:
//!
//! - the operator arms and takes off (`/v1/operator/...`);
//! - providers publish traffic, map, corridor, authority, airspace, preflight, weather and range
//!   (`/v1/state/...`), and a tube verifier certifies each exact route action
//!   (`/v1/certificates`);
//! - the agent submits responses and answers its obligation with a fresh candidate
//!   (`/v1/responses`, `/v1/obligations/{id}/candidates`) and follows `/v1/events`.
//!
//! 1. The running example: notice and report go out, the route action passes the final gate
//!    and flies, the status follows its dispatch.
//! 2. Drift while the agent plans: the map epoch changes, the next route action (planned
//!    against the old epoch) is withheld with an obligation and never reaches the vehicle.
//! 3. Recovery: a fresh candidate planned against the new map is readmitted and flies.
//! 4. A land action goes through the gate; PX4 lands and disarms.
//!
//! The evidence is the simulated vehicle's own record of the setpoints its controller took,
//! matched by fingerprint, and the verified receipt chain.

// Reading `serde_json::Value` by index (`v["error"]["code"]`, `a[0]`) returns `Null` for a
// missing key or position and never panics (only `IndexMut` can), so the lint does not apply.
#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value indexing returns Null, never panics"
)]

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::service::{Config, Service};
use halo_core::catalog::Catalog;

/// What the demo checked at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DemoSummary {
    /// Route actions dispatched through the gate.
    pub dispatched: usize,
    /// Of those, how many the vehicle's controller took (fingerprint found in its log).
    pub reached_vehicle: usize,
    /// Withheld actions.
    pub withheld: usize,
    /// Of those, how many the vehicle took anyway (must be 0).
    pub stale_reached_vehicle: usize,
    /// Fresh readmissions.
    pub readmitted: usize,
    /// Non-actions emitted.
    pub emitted: usize,
    /// Receipts written and verified.
    pub receipts: u64,
    /// Whether the receipt chain verified.
    pub receipts_ok: bool,
    /// Whether the vehicle landed and disarmed.
    pub landed: bool,
}

impl DemoSummary {
    /// True when every check held.
    pub fn ok(&self) -> bool {
        self.dispatched >= 2
            && self.reached_vehicle == self.dispatched
            && self.withheld >= 1
            && self.stale_reached_vehicle == 0
            && self.readmitted >= 1
            && self.receipts_ok
            && self.landed
    }
}

/// Why the demo could not run.
#[derive(Debug)]
pub struct DemoError(pub(crate) String);

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DemoError {}

pub(crate) fn err<E: std::fmt::Display>(ctx: &str) -> impl FnOnce(E) -> DemoError + '_ {
    move |e| DemoError(format!("{ctx}: {e}"))
}

/// The files one run writes, each overwritten per run.
pub const FILES: [(&str, &str); 7] = [
    (
        "receipts.jsonl",
        "every decision, hash-linked and signed; check it with `halo-gateway audit verify --key receipts.pub`",
    ),
    (
        "receipts.pub",
        "the public half of the audit key that signed the receipts' checkpoints",
    ),
    (
        "responses.jsonl",
        "every envelope and candidate the agent sent, to re-check digests",
    ),
    (
        "vehicle-setpoints.jsonl",
        "every setpoint the simulated vehicle's controller took",
    ),
    (
        "bridge-setpoints.jsonl",
        "every target the bridge enqueued, with its binding",
    ),
    (
        "flight.svg",
        "a picture of the flight (`halo-gateway plot`): targets, each component's phases, dispatches and holds",
    ),
    (
        "state/",
        "the service's state directory: boot epoch and credentials",
    ),
];

/// A scripted party's HTTP client: the agent, the providers and the operator, each with its own
/// credential, against one service.
pub struct Client {
    pub(crate) http: ureq::Agent,
    pub(crate) url: String,
    pub(crate) agent: String,
    pub(crate) provider: String,
    pub(crate) operator: String,
    pub(crate) t0: Instant,
    pub(crate) quiet: bool,
    pub(crate) sent: std::fs::File,
    pub(crate) cat: Catalog,
}

impl Client {
    /// A client of the service at `url` (`http://HOST:PORT`) with the three roles' credentials;
    /// every envelope it sends is appended to `sent`; `quiet` silences its narration.
    pub fn new(
        url: String,
        credentials: [String; 3],
        cat: Catalog,
        sent: std::fs::File,
        quiet: bool,
    ) -> Client {
        let [agent, provider, operator] = credentials;
        Client {
            http: sitl::client::agent(Some(Duration::from_secs(30))),
            url,
            agent,
            provider,
            operator,
            t0: Instant::now(),
            quiet,
            sent,
            cat,
        }
    }

    /// A client of an in-process service, its envelopes logged to `out/responses.jsonl`, its
    /// narration timed from `t0`.
    ///
    /// # Errors
    /// [`DemoError`] when the log cannot be created.
    pub(crate) fn for_service(
        svc: &Service,
        cat: Catalog,
        out: &Path,
        t0: Instant,
        quiet: bool,
    ) -> Result<Client, DemoError> {
        let c = svc.credentials();
        let sent =
            std::fs::File::create(out.join("responses.jsonl")).map_err(err("responses log"))?;
        let mut client = Client::new(
            svc.url(),
            [
                c.agent.expose().to_string(),
                c.provider.expose().to_string(),
                c.operator.expose().to_string(),
            ],
            cat,
            sent,
            quiet,
        );
        client.t0 = t0;
        Ok(client)
    }

    pub(crate) fn say(&self, s: &str) {
        if !self.quiet {
            println!("[{:>6.2}s] {s}", self.t0.elapsed().as_secs_f64());
        }
    }

    pub(crate) fn call(&self, method: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let bytes = body.to_string();
        let body = (method == "POST").then_some(bytes.as_bytes());
        sitl::client::request(&self.http, method, &url, Some(token), body)
            .unwrap_or_else(|e| (0, json!({"error": {"message": e.to_string()}})))
    }

    pub(crate) fn operator(&self, action: &str, body: &Value) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/v1/operator/{action}"),
            &self.operator,
            body,
        )
    }

    pub(crate) fn status(&self) -> Value {
        self.call("GET", "/v1/status", &self.operator, &Value::Null)
            .1
    }

    pub(crate) fn submit(&mut self, path: &str, envelope: &Value) -> Result<Value, DemoError> {
        use std::io::Write;
        let _ = writeln!(self.sent, "{envelope}");
        let (st, v) = self.call("POST", path, &self.agent.clone(), envelope);
        if st == 200 {
            Ok(v)
        } else {
            Err(DemoError(format!(
                "the gateway refused {path}: {} {}",
                v["error"]["code"].as_str().unwrap_or("?"),
                v["error"]["message"].as_str().unwrap_or("")
            )))
        }
    }

    /// The gateway's reference certifier (`POST /v1/certify`, asked with the agent credential)
    /// checks the path to `component`'s target and certifies that exact component under the
    /// certificate id it names.
    ///
    /// # Errors
    /// [`DemoError`] with the certifier's refusal.
    pub(crate) fn certify_by_reference(
        &self,
        envelope: &Value,
        component: &str,
    ) -> Result<(), DemoError> {
        let c = envelope["components"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["id"] == component))
            .ok_or_else(|| DemoError(format!("no component {component}")))?;
        let (st, r) = self.call(
            "POST",
            "/v1/certify",
            &self.agent,
            &json!({ "component": c }),
        );
        if st != 200 {
            return Err(DemoError(format!(
                "the reference certifier refused {component}: {} {}",
                r["error"]["code"].as_str().unwrap_or(""),
                r["error"]["message"].as_str().unwrap_or("")
            )));
        }
        self.say(&format!(
            "reference certifier checks {component}'s path (corridor, altitude, traffic) and certifies it (digest {}) for {:.1} s as `{}`",
            r["covers"].as_str().unwrap_or("").get(..16).unwrap_or(""),
            r["valid_for_ms"].as_f64().unwrap_or(0.0) / 1000.0,
            r["certificate"].as_str().unwrap_or("")
        ));
        Ok(())
    }

    /// The tube verifier certifies one exact component for 30 s.
    pub(crate) fn certify(
        &self,
        envelope: &Value,
        component: &str,
        id: &str,
    ) -> Result<(), DemoError> {
        self.certify_for(envelope, component, id, 30_000)
    }

    /// The tube verifier certifies one exact component for `valid_ms`.
    pub(crate) fn certify_for(
        &self,
        envelope: &Value,
        component: &str,
        id: &str,
        valid_ms: u64,
    ) -> Result<(), DemoError> {
        let text = envelope.to_string();
        let raw = halo_core::envelope::parse_envelope(text.as_bytes()).map_err(err("certify"))?;
        let v = halo_core::graph::validate(&self.cat, &raw).map_err(err("certify"))?;
        let cid = component.parse().map_err(err("certify"))?;
        let digest = v
            .graph
            .index_of(&cid)
            .and_then(|i| v.graph.component(i))
            .map(|c| c.digest)
            .ok_or_else(|| DemoError(format!("no component {component}")))?;
        let body = json!({"id": id, "covers": digest, "valid_for_ms": valid_ms,
            "issuer": "tube-verifier"});
        let (st, r) = self.call("POST", "/v1/certificates", &self.provider, &body);
        if st != 200 {
            return Err(DemoError(format!("certificate refused: {r}")));
        }
        self.say(&format!(
            "tube verifier certifies {component} (digest {}) for {:.1} s as `{id}`",
            digest.short(),
            valid_ms as f64 / 1000.0
        ));
        Ok(())
    }

    /// The operator arms (once PX4 is ready: it refuses while its estimator settles) and takes
    /// off to `height_m` above home; returns once PX4 hovers there in HOLD. Heights are PX4's
    /// own (`height_above_home_m`): its local frame's z is not height.
    ///
    /// # Errors
    /// [`DemoError`] when no heartbeat arrives, PX4 refuses to arm for 20 s, refuses the
    /// takeoff, or does not climb within 30 s.
    pub(crate) fn arm_and_take_off(&self, height_m: f64) -> Result<(), DemoError> {
        if !self.wait(10, |c| c.status()["vehicle"]["link_up"] == true) {
            return Err(DemoError("no heartbeat from the vehicle".into()));
        }
        if !self.wait(20, |c| {
            let ok = c.operator("arm", &json!({})).0 == 200;
            if !ok {
                std::thread::sleep(Duration::from_millis(400));
            }
            ok
        }) {
            return Err(DemoError("PX4 refused to arm".into()));
        }
        self.say(&format!(
            "operator: armed; takeoff to {height_m} m above home"
        ));
        let (st, v) = self.operator("takeoff", &json!({"altitude_m": height_m}));
        if st != 200 {
            return Err(DemoError(format!("takeoff refused: {v}")));
        }
        // PX4 reports the mode at once and the landed state at 2 Hz: wait for both, since
        // route actions need the vehicle `airborne`.
        if !self.wait(30, |c| {
            let v = c.status()["vehicle"].clone();
            v["height_above_home_m"]
                .as_f64()
                .is_some_and(|h| h > height_m - 0.3)
                && v["mode"] == "AUTO.LOITER"
                && v["landed_state"] == "in air"
        }) {
            return Err(DemoError(format!(
                "the vehicle did not climb to {height_m} m"
            )));
        }
        Ok(())
    }

    pub(crate) fn wait(&self, secs: u64, mut cond: impl FnMut(&Client) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if cond(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        cond(self)
    }
}

use sitl::sim::world::provider_updates;

/// Providers publishing every source every 200 ms, as feeds do.
fn providers(
    url: String,
    token: String,
    map_epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    feed(url, token, stop, move |at| {
        provider_updates(map_epoch.load(Ordering::Relaxed), at)
    })
}

/// A provider thread: every 200 ms, `updates(now as Unix ms)` posted to `/v1/state/SOURCE`
/// with the provider credential, until `stop`.
pub(crate) fn feed(
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
    updates: impl Fn(u64) -> Vec<(&'static str, Value)> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let http = sitl::client::agent(Some(Duration::from_secs(10)));
        while !stop.load(Ordering::Relaxed) {
            let at = crate::service::infra::clock::wall_now_ms();
            for (source, body) in updates(at) {
                let _ = sitl::client::request(
                    &http,
                    "POST",
                    &format!("{url}/v1/state/{source}"),
                    Some(&token),
                    Some(body.to_string().as_bytes()),
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

/// Prints the event stream for people, and counts what the summary needs.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) emitted: usize,
    pub(crate) dispatched: Vec<(String, String)>,
}

pub(crate) fn narrator(
    vehicle: &'static str,
    url: String,
    token: String,
    t0: Instant,
    quiet: bool,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let http = sitl::client::agent(None);
        let Ok(resp) = http
            .get(format!("{url}/v1/events"))
            .header("Authorization", &format!("Bearer {token}"))
            .call()
        else {
            return;
        };
        let reader = std::io::BufReader::new(resp.into_body().into_reader());
        let mut name = String::new();
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_string();
                continue;
            }
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let Ok(d) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            let s = |k: &str| d[k].as_str().unwrap_or("").to_string();
            let text = match name.as_str() {
                "vehicle_mode" => Some(format!("{vehicle} mode {}", s("to"))),
                "vehicle_command" if !s("command").starts_with("stream message") => {
                    Some(format!("{vehicle} {}: {}", s("command"), s("outcome")))
                }
                "emit" => {
                    if let Ok(mut g) = seen.lock() {
                        g.emitted += 1;
                    }
                    Some(format!(
                        "{}/{} emitted to `{}`",
                        s("response"),
                        s("component"),
                        s("path")
                    ))
                }
                "gate" => {
                    let who = format!("{}/{}", s("response"), s("component"));
                    match d["outcome"].as_str() {
                        Some("dispatched") => {
                            if let Ok(mut g) = seen.lock() {
                                g.dispatched.push((s("response"), s("component")));
                            }
                            let b = s("binding");
                            Some(format!(
                                "final gate: {who} DISPATCHED, binding {} -> {vehicle}",
                                b.get(..8).unwrap_or(&b)
                            ))
                        }
                        Some(o) => Some(format!(
                            "final gate: {who} {} ({})",
                            o.to_uppercase(),
                            d["code"].as_str().unwrap_or("")
                        )),
                        None => None,
                    }
                }
                "phase"
                    if matches!(
                        d["phase"].as_str(),
                        Some("withheld" | "invalidated" | "observed_success")
                    ) =>
                {
                    let why = d["reason"]
                        .as_str()
                        .and_then(halo_core::reason::ReasonCode::from_name)
                        .map(|r| format!(" ({r}: {})", r.description()))
                        .unwrap_or_default();
                    Some(format!(
                        "{}/{} {}{why}",
                        s("response"),
                        s("component"),
                        s("phase")
                    ))
                }
                "obligation_created" => {
                    let o = &d["obligation"];
                    let list = |k: &str| {
                        o[k].as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(Value::as_str)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_default()
                    };
                    Some(format!(
                        "obligation {} for {}/{}: refresh {}, route `{}` to `{}`, may replace {}",
                        o["id"],
                        o["response"].as_str().unwrap_or(""),
                        o["component"].as_str().unwrap_or(""),
                        list("required"),
                        o["route"].as_str().unwrap_or(""),
                        o["assignee"].as_str().unwrap_or(""),
                        list("scope")
                    ))
                }
                "deny_hold" if d["held"] == true => Some(format!(
                    "{}/{} lost its support while streaming ({}): deny-hold, the vehicle holds",
                    s("response"),
                    s("component"),
                    s("reason")
                )),
                "vehicle_flying" => Some(
                    if d["flying"] == true {
                        "the vehicle is flying"
                    } else {
                        "the vehicle is on the ground"
                    }
                    .to_owned(),
                ),
                "shutdown" => break,
                _ => None,
            };
            if let (Some(t), false) = (text, quiet) {
                println!("[{:>6.2}s] {t}", t0.elapsed().as_secs_f64());
            }
        }
    })
}

fn route(id: &str, target: [f64; 4], dur: f64, map_epoch: u64, cert: &str) -> Value {
    sitl::client::route_action(id, target, dur, map_epoch, cert)
}

#[allow(
    clippy::cast_possible_truncation,
    reason = "as the bridge sends them (f32)"
)]
fn fingerprint(t: [f64; 4]) -> String {
    sitl::sim::px4::fingerprint(t[0] as f32, t[1] as f32, t[2] as f32, t[3] as f32)
}

/// What the script saw: withheld and readmitted counts, the targets that should have reached
/// the vehicle and those that never may.
struct Story {
    withheld: usize,
    readmitted: usize,
    dispatched: Vec<[f64; 4]>,
    stale: Vec<[f64; 4]>,
}

/// The scripted parties, on a blocking thread.
fn script(
    c: &mut Client,
    sim: &sitl::sim::udp::SimControl,
    map_epoch: &Arc<AtomicU64>,
) -> Result<Story, DemoError> {
    // Height above the ground, as PX4's local z is not (its ground is off the origin).
    let alt = || sim.view().height_m;
    // 1. The operator arms (once PX4 is ready) and takes off to 5 m.
    c.arm_and_take_off(5.0)?;
    c.say(&format!("airborne at {:.1} m, PX4 HOLD", alt()));
    std::thread::sleep(Duration::from_millis(600));

    // 2. The running example.
    let e3 = [12.0, 3.5, -10.0, 90.0];
    let r1 = json!({"response_id": "resp-0007", "agent_id": "planner-1", "generation": 12,
    "catalog": {"id": "uav-px4", "version": 6},
    "components": [
        {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
        {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}},
        route("e3", e3, 8.0, 7, "cert-9f2c"),
        {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"}, "requires": [{"id": "e3", "phase": "dispatched"}]}
    ]});
    c.certify_by_reference(&r1, "e3")?;
    c.say("agent sends resp-0007: notice e1, report e2, route action e3 to (12, 3.5, -10), status e4 after e3 dispatched");
    let rep = c.submit("/v1/responses", &r1)?;
    c.say(&format!("gateway answers: {}", phases(&rep)));
    let fp3 = fingerprint(e3);
    c.wait(15, |_| {
        sim.view().setpoints.iter().any(|r| r.fingerprint == fp3)
    });
    c.wait(10, |_| {
        let p = sim.view().position;
        (p[0] - 12.0).abs() < 0.5 && (p[1] - 3.5).abs() < 0.5
    });
    c.say(&position_text(sim));

    // 3. The map moves to epoch 8 while the agent plans resp-0008 against epoch 7.
    c.say("the map service publishes epoch 8 while the agent still plans against epoch 7");
    map_epoch.store(8, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(400));
    let stale = [30.0, 20.0, -10.0, 45.0];
    let r2 = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 13,
    "catalog": {"id": "uav-px4", "version": 6},
    "components": [
        route("e5", stale, 8.0, 7, "cert-a001"),
        {"id": "e6", "type": "status", "payload": {"text": "En route to WP4"}, "requires": [{"id": "e5", "phase": "dispatched"}]}
    ]});
    c.certify_by_reference(&r2, "e5")?;
    c.say("agent sends resp-0008: route action e5 to (30, 20, -10) planned against map epoch 7, status e6");
    let rep = c.submit("/v1/responses", &r2)?;
    c.say(&format!("gateway answers: {}", phases(&rep)));
    let withheld = usize::from(rep["components"][0]["phase"] == "withheld");
    let oid = rep["components"][0]["obligation"]
        .as_u64()
        .ok_or_else(|| DemoError("no obligation for e5".into()))?;
    std::thread::sleep(Duration::from_secs(2));

    // 4. Recovery: a fresh candidate planned against the new map.
    let fresh = [30.0, 18.0, -10.0, 45.0];
    let cand_route = route("e5", fresh, 8.0, 8, "cert-a002");
    let as_response = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [cand_route.clone()]});
    c.certify_by_reference(&as_response, "e5")?;
    let cand = json!({"obligation": oid, "response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 6}, "components": [cand_route]});
    c.say(&format!(
        "agent answers obligation {oid} with a fresh e5 to (30, 18, -10) planned against map epoch 8 (generation 14)"
    ));
    let rep = c.submit(&format!("/v1/obligations/{oid}/candidates"), &cand)?;
    let readmitted = usize::from(rep["readmitted"].as_array().is_some_and(|a| !a.is_empty()));
    c.say(&format!("gateway answers: {}", phases(&rep["current"])));
    c.wait(20, |_| {
        let p = sim.view().position;
        (p[0] - 30.0).abs() < 0.5 && (p[1] - 18.0).abs() < 0.5
    });
    c.say(&position_text(sim));

    // 5. Land through the gate.
    let r3 = json!({"response_id": "resp-0009", "agent_id": "planner-1", "generation": 15,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [{"id": "l1", "type": "land", "payload": {}}]});
    c.say("agent sends resp-0009: land");
    let rep = c.submit("/v1/responses", &r3)?;
    c.say(&format!("gateway answers: {}", phases(&rep)));
    let landed = c.wait(40, |_| {
        let v = sim.view();
        !v.armed && v.on_ground
    });
    c.say(if landed {
        "landed and disarmed"
    } else {
        "did not land in time"
    });
    Ok(Story {
        withheld,
        readmitted,
        dispatched: vec![e3, fresh],
        stale: vec![stale],
    })
}

pub(crate) fn phases(rep: &Value) -> String {
    rep["components"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    let reason = c["reason"]
                        .as_str()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default();
                    format!(
                        "{} {}{reason}",
                        c["id"].as_str().unwrap_or("?"),
                        c["phase"].as_str().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn position_text(sim: &sitl::sim::udp::SimControl) -> String {
    let p = sim.view().position;
    format!(
        "vehicle at north {:.1} m, east {:.1} m, altitude {:.1} m",
        p[0], p[1], -p[2]
    )
}

/// A fresh output directory (every file in [`FILES`] is this run's alone) and the service
/// configuration the demos run: the embedded simulated vehicle, loopback on a free port, the
/// state, receipts and both setpoint logs under `out`.
///
/// # Errors
/// [`DemoError`] when `out` cannot be created.
pub(crate) fn demo_config(out: &Path) -> Result<Config, DemoError> {
    std::fs::create_dir_all(out).map_err(err("output directory"))?;
    for (f, _) in FILES {
        let p = out.join(f);
        let _ = if f.ends_with('/') {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
    }
    let mut cfg = Config::default();
    cfg.vehicle.setpoint_log = Some(out.join("bridge-setpoints.jsonl"));
    cfg.listen.http = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.state.dir = Some(out.join("state"));
    cfg.receipts.path = Some(out.join("receipts.jsonl"));
    // The PX4 demo's route actions are certified by the gateway's reference certifier.
    cfg.certifier.enabled = true;
    Ok(cfg)
}

/// Stops the demo's service cleanly and copies the audit public key to `out/receipts.pub`.
///
/// # Errors
/// [`DemoError`] when the service failed or the key cannot be copied.
pub(crate) async fn stop_service(svc: Service, out: &Path) -> Result<(), DemoError> {
    let public_key = svc.audit_public_key().to_path_buf();
    svc.shutdown();
    svc.wait().await.map_err(err("service"))?;
    std::fs::copy(&public_key, out.join("receipts.pub")).map_err(err("public key"))?;
    Ok(())
}

/// Draws one run's flight from its `receipts` and the bridge's setpoint log in `dir` into
/// `dir/flight.svg` (`halo-gateway plot`); what it drew, or why it could not.
///
/// # Errors
/// The plot's own error (no log, nothing to draw, the file cannot be written).
pub(crate) fn draw_run(receipts: &Path, dir: &Path) -> Result<String, String> {
    Ok(halo_gateway::cli::plot::draw_flight(
        receipts,
        Some(&dir.join("bridge-setpoints.jsonl")),
        &dir.join("flight.svg"),
    )?)
}

/// A panel run's picture: drawn next to its logs; a run with nothing to draw says so and goes
/// on (the picture is for people, not part of the panel's verdict).
pub(crate) fn draw_panel_run(receipts: &Path, dir: &Path) {
    if let Err(e) = draw_run(receipts, dir) {
        eprintln!("note: no picture of {}: {e}", dir.display());
    }
}

/// Runs the demo. `out` receives the files in [`FILES`].
///
/// # Errors
/// [`DemoError`] when a step cannot run (sockets, files) or the vehicle does not respond.
pub async fn run(catalog: Catalog, out: &Path, quiet: bool) -> Result<DemoSummary, DemoError> {
    let cfg = demo_config(out)?;
    let (svc, sim) = start_on_sim(
        cfg,
        &catalog,
        &out.join("vehicle-setpoints.jsonl"),
        sitl::sim::px4::SimConfig::default(),
        Instant::now(),
    )
    .await?;
    let t0 = Instant::now();
    if !quiet {
        println!(
            "[{:>6.2}s] halo-gateway run on {} with the embedded simulated PX4 ({})",
            0.0,
            svc.url(),
            svc.vehicle_url()
        );
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let narr = narrator(
        "PX4",
        svc.url(),
        svc.credentials().operator.expose().to_string(),
        t0,
        quiet,
        Arc::clone(&seen),
    );
    let map_epoch = Arc::new(AtomicU64::new(7));
    let stop = Arc::new(AtomicBool::new(false));
    let feeds = providers(
        svc.url(),
        svc.credentials().provider.expose().to_string(),
        Arc::clone(&map_epoch),
        Arc::clone(&stop),
    );
    let mut client = Client::for_service(&svc, catalog, out, t0, quiet)?;
    let sim2 = sim.clone();
    let me = Arc::clone(&map_epoch);
    let result = tokio::task::spawn_blocking(move || script(&mut client, &sim2, &me))
        .await
        .map_err(err("demo script"))?;
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || feeds.join()).await;
    stop_service(svc, out).await?;
    let _ = tokio::task::spawn_blocking(move || narr.join()).await;
    let story = result?;

    // Evidence: what the vehicle's controller took, and the receipt chain.
    let vehicle: BTreeSet<String> = sim
        .view()
        .setpoints
        .iter()
        .map(|r| r.fingerprint.clone())
        .collect();
    let receipts = read_receipts(&out.join("receipts.jsonl"))?;
    let picture = draw_run(&out.join("receipts.jsonl"), out).map_err(DemoError)?;
    println!(
        "the flight's picture: {} ({picture})",
        out.join("flight.svg").display()
    );
    let key = crate::audit::public_key(&out.join("receipts.pub").display().to_string())
        .map_err(|e| DemoError(e.to_string()))?;
    let signed = crate::audit::verify(&receipts, Some(&key))
        .is_ok_and(|v| v.ends_final && v.covered == Some(v.first + v.count));
    let g = seen.lock().map_err(|_| DemoError("narrator".into()))?;
    let route_dispatches = g
        .dispatched
        .iter()
        .filter(|(r, _)| r != "resp-0009")
        .count();
    Ok(DemoSummary {
        dispatched: route_dispatches,
        reached_vehicle: story
            .dispatched
            .iter()
            .filter(|t| vehicle.contains(&fingerprint(**t)))
            .count(),
        withheld: story.withheld,
        stale_reached_vehicle: story
            .stale
            .iter()
            .filter(|t| vehicle.contains(&fingerprint(**t)))
            .count(),
        readmitted: story.readmitted,
        emitted: g.emitted,
        receipts: receipts.len() as u64,
        receipts_ok: signed,
        landed: sim.view().on_ground && !sim.view().armed,
    })
}

/// The service (`run`, in-process) on a fresh simulated PX4 with settings `sim`, the
/// simulator's own setpoint record at `log` and its clock measured from `origin`.
///
/// # Errors
/// [`DemoError`] when the simulator's socket or the service cannot start.
pub(crate) async fn start_on_sim(
    cfg: crate::service::Config,
    catalog: &Catalog,
    log: &Path,
    sim: sitl::sim::px4::SimConfig,
    origin: Instant,
) -> Result<(Service, sitl::sim::udp::SimControl), DemoError> {
    start_on_sim_as(cfg, catalog, log, sim, origin, &Eval::default()).await
}

/// Evaluation-only settings of a service start (see `halo_gateway::service::Embedded`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Eval {
    /// The mechanism variant the core runs (`Full` when absent).
    pub variant: Option<halo_core::Variant>,
    /// How long after a token is ready its final gate runs (at once when absent).
    pub gate_delay: Option<Duration>,
}

/// [`start_on_sim`] with evaluation-only settings.
///
/// # Errors
/// [`DemoError`] when the simulator or the service cannot start.
pub(crate) async fn start_on_sim_as(
    cfg: crate::service::Config,
    catalog: &Catalog,
    log: &Path,
    sim: sitl::sim::px4::SimConfig,
    origin: Instant,
    eval: &Eval,
) -> Result<(Service, sitl::sim::udp::SimControl), DemoError> {
    let (cfg, mut embedded, vehicle) = crate::embedded::start_px4_at(cfg, Some(log), sim, origin)
        .await
        .map_err(|e| DemoError(e.to_string()))?;
    embedded.variant = eval.variant;
    embedded.gate_delay = eval.gate_delay;
    let control = vehicle
        .px4()
        .cloned()
        .ok_or_else(|| DemoError("no embedded simulated PX4".into()))?;
    let svc = Service::start_with(cfg, catalog.clone(), embedded.keeping(vehicle))
        .await
        .map_err(err("service"))?;
    Ok((svc, control))
}

/// Reads a JSON-lines receipt log.
///
/// # Errors
/// [`DemoError`] naming the file and line that does not parse.
pub fn read_receipts(path: &Path) -> Result<Vec<halo_core::receipt::Receipt>, DemoError> {
    // Strictly, record by record, each at most MAX_RECORD_BYTES: a wrong path is an error, not
    // memory; a torn tail is an error here.
    let log =
        crate::audit::read_log(&[path.to_path_buf()]).map_err(|e| DemoError(e.to_string()))?;
    match log.torn {
        Some(t) => Err(DemoError(format!(
            "{}:{}: torn record at byte {}",
            t.file.display(),
            t.line,
            t.offset
        ))),
        None => Ok(log.receipts),
    }
}

/// The default output directory.
pub fn default_out() -> PathBuf {
    PathBuf::from("target/halo-demo")
}
