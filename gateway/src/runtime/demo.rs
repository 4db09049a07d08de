//! The demo: the running example flown on the embedded simulated PX4.
//!
//! The simulator runs in-process on a loopback UDP socket; the gateway reaches it through the
//! real PX4 bridge (MAVLink 2). Scripted providers publish traffic, map, corridor, authority and
//! weather; PX4 telemetry publishes the vehicle's state; a scripted "tube verifier" certifies
//! route actions inside the corridor; a scripted agent sends responses.
//!
//! 1. Take off to 5 m (operator commands).
//! 2. The running example: notice and report are emitted, the route action passes the final
//!    gate and flies, the status message follows its dispatch.
//! 3. Drift: a second route action is admitted, then the map epoch changes before the gate:
//!    it is withheld with an obligation, and never reaches the vehicle.
//! 4. Recovery: a fresh candidate planned against the new map is readmitted and flies.
//! 5. A land action goes through the gate; PX4 lands and disarms.
//!
//! The evidence is the vehicle's own record of the setpoints its controller took, matched by
//! fingerprint, and the verified receipt chain.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use px4_bridge::shell::{BridgeOptions, start};
use px4_bridge::{Command, CommandOutcome, Event as BridgeEvent, Setpoint};
use serde_json::json;
use sitl::px4::SimConfig;
use sitl::udp::{SimControl, UdpOptions};
use tokio::sync::{broadcast, mpsc};

use super::{Note, Runtime};
use crate::core::catalog::Catalog;
use crate::core::engine::{Config, Event, Gateway};
use crate::core::gate::GateOutcome;
use crate::core::phase::Phase;
use crate::core::state::Certificate;
use crate::core::statefile::ProviderUpdate;
use crate::core::time::Nanos;
use crate::service::core_task::{command_text, outcome_text};

/// What the demo checked at the end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DemoSummary {
    /// Route actions dispatched through the gate.
    pub dispatched: usize,
    /// Of those, how many the vehicle's controller took (fingerprint found in its log).
    pub reached_vehicle: usize,
    /// Denied or withheld actions.
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
pub struct DemoError(String);

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DemoError {}

fn err<E: std::fmt::Display>(ctx: &str) -> impl FnOnce(E) -> DemoError + '_ {
    move |e| DemoError(format!("{ctx}: {e}"))
}

struct World {
    rt: Runtime,
    rx: mpsc::Receiver<BridgeEvent>,
    control: SimControl,
    map_epoch: u64,
    t0: Instant,
    quiet: bool,
    summary: DemoSummary,
    withheld_fingerprints: Vec<String>,
    dispatched_fingerprints: Vec<String>,
}

impl World {
    fn say(&self, s: &str) {
        if !self.quiet {
            println!("[{:>6.2}s] {s}", self.t0.elapsed().as_secs_f64());
        }
    }

    fn provide(&mut self) {
        let now = self.rt.now();
        let at = now.as_ms();
        let up = |source: &str, value: serde_json::Value, epoch: u64, prov: &str| {
            prov.parse().ok().map(|provenance| ProviderUpdate {
                source: source.into(),
                value,
                epoch,
                provenance,
                generated_at_ms: at,
            })
        };
        let updates = [
            up(
                "traffic",
                json!([{"north_m": 300.0, "east_m": -200.0, "down_m": -40.0}]),
                41,
                "utm-feed-a",
            ),
            up(
                "map",
                serde_json::Value::Null,
                self.map_epoch,
                "map-service",
            ),
            up(
                "bounds",
                json!({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.5}),
                3,
                "corridor-12",
            ),
            up("authority", json!(true), 1, "operator"),
            up("airspace", json!(true), 1, "laanc"),
            up("preflight", json!(true), 1, "operator"),
            up("wind", json!(4.0), 1, "weather"),
            up("z_range", json!(5.1), 1, "rangefinder"),
        ];
        for u in updates.into_iter().flatten() {
            if let Ok(typed) = u.typed(self.rt.gw.catalog()) {
                let _ = self.rt.gw.handle_source_update(now, typed);
            }
        }
    }

    fn narrate(&mut self, notes: Vec<Note>) {
        for n in notes {
            match n {
                Note::Core(Event::Emit {
                    response,
                    component,
                    path,
                    ..
                }) => {
                    self.summary.emitted += 1;
                    self.say(&format!("{response}/{component} emitted to `{path}`"));
                }
                Note::Core(Event::Phase {
                    response,
                    component,
                    phase,
                    reason,
                }) => {
                    if matches!(
                        phase,
                        Phase::Withheld | Phase::Invalidated | Phase::ObservedSuccess
                    ) {
                        let why = reason
                            .map(|r| format!(" ({r}: {})", r.description()))
                            .unwrap_or_default();
                        self.say(&format!("{response}/{component} {phase}{why}"));
                    }
                }
                Note::Core(Event::ObligationCreated { obligation }) => self.say(&format!(
                    "{} created for {}/{}: refresh {}, route `{}` to `{}`, may replace {}",
                    obligation.id,
                    obligation.response,
                    obligation.component,
                    obligation
                        .required
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    obligation.route,
                    obligation.assignee,
                    obligation
                        .scope
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Note::Core(_) => {}
                Note::Gate(g) => match &g {
                    GateOutcome::Dispatched {
                        response,
                        component,
                        binding,
                        ..
                    } => {
                        self.say(&format!(
                            "final gate: {response}/{component} DISPATCHED, binding {} -> PX4",
                            binding.short()
                        ));
                    }
                    GateOutcome::Denied {
                        response,
                        component,
                        code,
                        ..
                    } => {
                        self.say(&format!(
                            "final gate: {response}/{component} DENIED ({code})"
                        ));
                    }
                    GateOutcome::Refused { code } => {
                        self.say(&format!("final gate: token refused ({code})"));
                    }
                    GateOutcome::EnqueueFailed {
                        response,
                        component,
                        error,
                        ..
                    } => self.say(&format!(
                        "final gate: {response}/{component} passed, the vehicle adapter refused it ({error})"
                    )),
                },
            }
        }
    }

    /// Processes bridge events, refreshes providers and pumps the core until `cond` holds.
    async fn run_until(
        &mut self,
        secs: u64,
        mut cond: impl FnMut(&mut World) -> bool,
    ) -> Result<bool, DemoError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            if cond(self) {
                return Ok(true);
            }
            tokio::select! {
                ev = self.rx.recv() => match ev {
                    Some(ev) => {
                        if let BridgeEvent::Command { command, outcome, .. } = &ev {
                            self.say(&format!(
                                "PX4 {}: {}",
                                command_text(command),
                                outcome_text(*outcome)
                            ));
                        }
                        if let BridgeEvent::ModeChanged { to, .. } = &ev {
                            self.say(&format!("PX4 mode {to}"));
                        }
                        self.rt.on_bridge_event(&ev);
                    }
                    None => return Err(DemoError("the bridge stopped".into())),
                },
                _ = tick.tick() => self.provide(),
                () = tokio::time::sleep_until(deadline) => return Ok(cond(self)),
            }
            let notes = self.rt.pump().map_err(err("receipt log"))?;
            self.narrate(notes);
        }
    }

    async fn command(&mut self, c: Command) -> Result<CommandOutcome, DemoError> {
        self.rt
            .adapter
            .handle()
            .command(c)
            .map_err(err("bridge queue"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        while tokio::time::Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(100), self.rx.recv()).await {
                Ok(Some(ev)) => {
                    self.rt.on_bridge_event(&ev);
                    if let BridgeEvent::Command {
                        command, outcome, ..
                    } = ev
                    {
                        if command == c {
                            self.say(&format!(
                                "PX4 {}: {}",
                                command_text(&c),
                                outcome_text(outcome)
                            ));
                            return Ok(outcome);
                        }
                    }
                }
                Ok(None) => return Err(DemoError("the bridge stopped".into())),
                Err(_) => self.provide(),
            }
            let notes = self.rt.pump().map_err(err("receipt log"))?;
            self.narrate(notes);
        }
        Err(DemoError(format!("no answer to `{}`", command_text(&c))))
    }

    fn certify(&mut self, response: &str, component: &str, id: &str) -> Result<(), DemoError> {
        let raw =
            crate::core::envelope::parse_envelope(response.as_bytes()).map_err(err("certify"))?;
        let v = crate::core::graph::validate(self.rt.gw.catalog(), &raw).map_err(err("certify"))?;
        let cid = component.parse().map_err(err("certify"))?;
        let i = v
            .graph
            .index_of(&cid)
            .ok_or_else(|| DemoError(format!("no component {component}")))?;
        let c = v
            .graph
            .component(i)
            .ok_or_else(|| DemoError("index".into()))?;
        let now = self.rt.now();
        let cert = Certificate {
            id: id.parse().map_err(err("certify"))?,
            covers: c.digest,
            valid_until: now.saturating_add(Nanos::from_ms(30_000)),
            issuer: "tube-verifier".parse().map_err(err("certify"))?,
        };
        self.say(&format!(
            "tube verifier certifies {component} (digest {}) for 30 s as `{id}`",
            c.digest.short()
        ));
        self.rt
            .gw
            .handle_certificate(now, cert)
            .map_err(err("certify"))
    }

    fn fingerprint_of(payload: &serde_json::Value) -> String {
        #[allow(clippy::cast_possible_truncation, reason = "as the adapter sends them")]
        let sp = Setpoint {
            north_m: payload["north_m"].as_f64().unwrap_or(0.0) as f32,
            east_m: payload["east_m"].as_f64().unwrap_or(0.0) as f32,
            down_m: payload["down_m"].as_f64().unwrap_or(0.0) as f32,
            yaw_deg: payload["yaw_deg"].as_f64().unwrap_or(0.0) as f32,
        };
        sp.fingerprint().to_string()
    }

    fn position_text(&self) -> String {
        let p = self.control.view().position;
        format!(
            "vehicle at north {:.1} m, east {:.1} m, altitude {:.1} m",
            p[0], p[1], -p[2]
        )
    }

    fn alt(&self) -> f64 {
        -self.control.view().position[2]
    }
}

/// A route action: target (n, e, d, yaw), flown for `dur` s, planned against `map_epoch`.
fn route(id: &str, target: [f64; 4], dur: f64, map_epoch: u64, cert: &str) -> serde_json::Value {
    let [n, e, d, yaw] = target;
    json!({"id": id, "type": "route_action",
           "payload": {"frame": "local_ned", "north_m": n, "east_m": e, "down_m": d, "yaw_deg": yaw, "duration_s": dur},
           "support": {"map": {"epoch": map_epoch}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}},
           "certificate": cert})
}

/// Runs the demo. `out` receives `receipts.jsonl`, `bridge-setpoints.jsonl` and
/// `vehicle-setpoints.jsonl`.
///
/// # Errors
/// [`DemoError`] when a step cannot run (sockets, files) or the vehicle does not respond.
pub async fn run(catalog: Catalog, out: &Path, quiet: bool) -> Result<DemoSummary, DemoError> {
    std::fs::create_dir_all(out).map_err(err("output directory"))?;
    // Every file is this run's alone (the bridge appends to its log).
    let _ = std::fs::remove_file(out.join("bridge-setpoints.jsonl"));
    let origin = Instant::now();
    let (stop, _) = broadcast::channel(1);

    // The simulated PX4 on loopback.
    let sock = sitl::udp::bind("127.0.0.1:0".parse().map_err(err("address"))?)
        .await
        .map_err(err("simulator socket"))?;
    let sim_addr = sock.local_addr().map_err(err("simulator socket"))?;
    let control = SimControl::default();
    let sim_opts = UdpOptions {
        bind: sim_addr,
        remote: "127.0.0.1:14540".parse().map_err(err("address"))?,
        config: SimConfig::default(),
        setpoint_log: Some(out.join("vehicle-setpoints.jsonl")),
        seed: 11,
    };
    let sim_task = tokio::spawn(sitl::udp::run(
        sock,
        sim_opts,
        control.clone(),
        stop.subscribe(),
    ));

    // The real bridge, talking MAVLink 2 to it.
    let mut bopts = BridgeOptions::new(&format!("udpout:{sim_addr}"));
    bopts.origin = origin;
    bopts.setpoint_log = Some(out.join("bridge-setpoints.jsonl"));
    let (handle, rx, bridge_task) = start(bopts, stop.subscribe())
        .await
        .map_err(err("bridge"))?;

    let gw = Gateway::new(catalog, Config::default());
    let rt = Runtime::new(
        gw,
        super::px4::Px4Adapter::new(handle),
        origin,
        Some(&out.join("receipts.jsonl")),
    )
    .map_err(err("receipt log"))?;
    let mut w = World {
        rt,
        rx,
        control,
        map_epoch: 7,
        t0: Instant::now(),
        quiet,
        summary: DemoSummary::default(),
        withheld_fingerprints: Vec::new(),
        dispatched_fingerprints: Vec::new(),
    };
    w.say(&format!(
        "simulated PX4 on udp {sim_addr}; bridge connected with udpout:{sim_addr}"
    ));

    // 1. Take off.
    if !w.run_until(10, |w| w.rt.adapter.handle().link_up()).await? {
        return Err(DemoError("no heartbeat from the simulated PX4".into()));
    }
    w.run_until(3, |_| false).await?; // estimator ready, telemetry rates set
    if w.command(Command::Arm).await? != CommandOutcome::Accepted {
        return Err(DemoError("PX4 refused to arm".into()));
    }
    w.command(Command::Takeoff {
        altitude_amsl_m: Some(488.0 + 5.0),
    })
    .await?;
    if !w.run_until(20, |w| w.alt() > 4.8).await? {
        return Err(DemoError("the vehicle did not climb to 5 m".into()));
    }
    w.run_until(2, |_| false).await?;
    w.say(&format!("airborne at {:.1} m, PX4 HOLD", w.alt()));

    // 2. The running example.
    let r1 = json!({"response_id": "resp-0007", "agent_id": "planner-1", "generation": 12,
        "catalog": {"id": "uav-px4", "version": 3},
        "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
            {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}},
            route("e3", [12.0, 3.5, -10.0, 90.0], 8.0, 7, "cert-9f2c"),
            {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"}, "requires": [{"id": "e3", "phase": "dispatched"}]}
        ]})
    .to_string();
    w.certify(&r1, "e3", "cert-9f2c")?;
    w.say("agent sends resp-0007: notice e1, report e2, route action e3 to (12, 3.5, -10), status e4 after e3 dispatched");
    let now = w.rt.now();
    let rep =
        w.rt.gw
            .handle_response(now, r1.as_bytes())
            .map_err(err("admission"))?;
    w.say(&format!(
        "admitted: {}",
        rep.components
            .iter()
            .map(|c| format!("{} {}", c.id, c.phase))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    w.dispatched_fingerprints.push(World::fingerprint_of(
        &json!({"north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0}),
    ));
    let notes = w.rt.pump().map_err(err("receipt log"))?;
    w.narrate(notes);
    let r1id = "resp-0007".parse().map_err(err("id"))?;
    let e3 = "e3".parse().map_err(err("id"))?;
    w.run_until(15, |w| {
        w.rt.gw
            .component_report(&r1id, &e3)
            .is_some_and(|c| c.phase == Phase::ObservedSuccess)
    })
    .await?;
    w.run_until(10, |w| {
        let p = w.control.view().position;
        (p[0] - 12.0).abs() < 0.5 && (p[1] - 3.5).abs() < 0.5 && (p[2] + 10.0).abs() < 0.5
    })
    .await?;
    w.say(&w.position_text());

    // 3. Drift between admission and the gate.
    let r2 = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 13,
        "catalog": {"id": "uav-px4", "version": 3},
        "components": [
            route("e5", [30.0, 20.0, -10.0, 45.0], 8.0, 7, "cert-a001"),
            {"id": "e6", "type": "status", "payload": {"text": "En route to WP4"}, "requires": [{"id": "e5", "phase": "dispatched"}]}
        ]})
    .to_string();
    w.certify(&r2, "e5", "cert-a001")?;
    w.say("agent sends resp-0008: route action e5 to (30, 20, -10) planned against map epoch 7, status e6");
    let now = w.rt.now();
    w.rt.gw
        .handle_response(now, r2.as_bytes())
        .map_err(err("admission"))?;
    let stale_fp = World::fingerprint_of(
        &json!({"north_m": 30.0, "east_m": 20.0, "down_m": -10.0, "yaw_deg": 45.0}),
    );
    w.withheld_fingerprints.push(stale_fp);
    w.say("e5 admitted and waiting for the gate; the map service publishes epoch 8 now");
    w.map_epoch = 8;
    w.provide();
    let notes = w.rt.pump().map_err(err("receipt log"))?;
    w.narrate(notes);
    let r2id = "resp-0008".parse().map_err(err("id"))?;
    let e5 = "e5".parse().map_err(err("id"))?;
    let e5r =
        w.rt.gw
            .component_report(&r2id, &e5)
            .ok_or_else(|| DemoError("e5 missing".into()))?;
    if e5r.phase == Phase::Withheld {
        w.summary.withheld += 1;
    }
    w.run_until(3, |_| false).await?;

    // 4. Recovery with a fresh candidate.
    let oid = e5r
        .obligation
        .ok_or_else(|| DemoError("no obligation for e5".into()))?;
    // The agent replans against the new map: a slightly different target.
    let cand_route = route("e5", [30.0, 18.0, -10.0, 45.0], 8.0, 8, "cert-a002");
    let fresh_resp = json!({"response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 3}, "components": [cand_route.clone()]})
    .to_string();
    w.certify(&fresh_resp, "e5", "cert-a002")?;
    let cand = json!({"obligation": oid.0, "response_id": "resp-0008", "agent_id": "planner-1", "generation": 14,
        "catalog": {"id": "uav-px4", "version": 3}, "components": [cand_route]})
    .to_string();
    w.say(&format!("agent answers {oid} with a fresh e5 to (30, 18, -10) planned against map epoch 8 (generation 14)"));
    let now = w.rt.now();
    match w.rt.gw.handle_candidate(now, cand.as_bytes()) {
        Ok(rep) => {
            w.summary.readmitted += 1;
            w.say(&format!(
                "readmitted: {}",
                rep.components
                    .iter()
                    .map(|c| format!("{} {} generation {}", c.id, c.phase, c.generation))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Err(rej) => w.say(&format!("candidate rejected: {rej}")),
    }
    let notes = w.rt.pump().map_err(err("receipt log"))?;
    w.narrate(notes);
    w.run_until(20, |w| {
        let p = w.control.view().position;
        (p[0] - 30.0).abs() < 0.5 && (p[1] - 18.0).abs() < 0.5 && (p[2] + 10.0).abs() < 0.5
    })
    .await?;
    w.say(&w.position_text());

    // 5. Land through the gate.
    let r3 = json!({"response_id": "resp-0009", "agent_id": "planner-1", "generation": 15,
        "catalog": {"id": "uav-px4", "version": 3},
        "components": [{"id": "l1", "type": "land", "payload": {}}]})
    .to_string();
    w.say("agent sends resp-0009: land");
    let now = w.rt.now();
    w.rt.gw
        .handle_response(now, r3.as_bytes())
        .map_err(err("admission"))?;
    let notes = w.rt.pump().map_err(err("receipt log"))?;
    w.narrate(notes);
    let landed = w
        .run_until(40, |w| {
            !w.control.view().armed && w.control.view().on_ground
        })
        .await?;
    w.summary.landed = landed;
    w.say(if landed {
        "landed and disarmed"
    } else {
        "did not land in time"
    });

    // Evidence.
    let _ = stop.send(());
    let _ = bridge_task.await;
    let _ = sim_task.await;
    let vehicle: BTreeSet<String> = w
        .control
        .view()
        .setpoints
        .iter()
        .map(|r| r.fingerprint.clone())
        .collect();
    w.dispatched_fingerprints.push(World::fingerprint_of(
        &json!({"north_m": 30.0, "east_m": 18.0, "down_m": -10.0, "yaw_deg": 45.0}),
    ));
    // Route actions that passed the gate (the land action is a command, not a setpoint).
    w.summary.dispatched =
        w.rt.adapter
            .dispatched
            .values()
            .filter(|(r, _)| r.as_str() != "resp-0009")
            .count();
    w.summary.reached_vehicle = w
        .dispatched_fingerprints
        .iter()
        .filter(|f| vehicle.contains(*f))
        .count();
    w.summary.stale_reached_vehicle = w
        .withheld_fingerprints
        .iter()
        .filter(|f| vehicle.contains(*f))
        .count();
    let receipts = read_receipts(&out.join("receipts.jsonl"))?;
    w.summary.receipts = receipts.len() as u64;
    w.summary.receipts_ok = crate::core::receipt::verify_chain(&receipts).is_ok();
    Ok(w.summary)
}

/// Reads a JSON-lines receipt log.
///
/// # Errors
/// [`DemoError`] naming the file and line that does not parse.
pub fn read_receipts(path: &Path) -> Result<Vec<crate::core::receipt::Receipt>, DemoError> {
    let text = std::fs::read_to_string(path).map_err(err("receipt log"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let r = serde_json::from_str(line)
            .map_err(|e| DemoError(format!("{}:{}: {e}", path.display(), i + 1)))?;
        out.push(r);
    }
    Ok(out)
}

/// The default output directory.
pub fn default_out() -> PathBuf {
    PathBuf::from("target/halo-demo")
}
