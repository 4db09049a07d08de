//! The mechanism panel through the running service (`px4-mechanisms`, the HALO paper's Table
//! 12): the 12 shared conditions of the in-process `mechanisms` suite
//! (`halo-core/tests/data/mechanisms/conditions.json`, with their hand-written supported sets)
//! through `halo-gateway run` running as each mechanism variant, one fresh simulated PX4 and
//! one fresh service per variant and cold start, the 12 conditions back to back in one flight.
//!
//! Each condition is the running example — notice `e1`, range report `e2`, certified route
//! action `e3` to a target of its own, status `e4` after `e3` dispatched (or after `e2` emitted)
//! — with the condition's drift: before admission (`pre`, and a report left to age), or between
//! admission and the final gate (`post`, a revoked certificate, traffic that ages out). The
//! service runs with its evaluation-only gate delay ([`GATE_DELAY`]) so the late drift lands
//! between the two, and the runner refuses a run whose order does not hold: admission <
//! mutation < final gate (the gateway's own receipts, on its clock) < first vehicle setpoint
//! (the simulator's record; both clocks are one process's `Instant`, so they compare exactly).
//!
//! What proceeded is read from outside the gateway's decision code: the route action from the
//! simulated vehicle's own record of the setpoints its controller took (the target's
//! fingerprint), the notice, report and status from the gateway's answer to
//! `GET /v1/responses/{id}` (host notices, as the paper counts dependency leaks). Columns:
//! supported components kept, stale setpoints at the vehicle (an unsupported `e3` taken),
//! orphan leaks (an unsupported `e4` emitted while what it waits for did not proceed),
//! supported components blocked.
//!
//! Two conditions of the shared file change sources the service takes only from the vehicle
//! (`link`, `vehicle`; a provider may not write them): through the service the lost link is
//! the same rule class published by a provider (`preflight` false: OPS-1, in `e3`'s footprint
//! and rules, with the same supported set) and the unclaimed epoch change is on `wind` (in
//! `e3`'s footprint, not claimed), both said in the table's notes.

#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value indexing returns Null, never panics"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::demo::{DemoError, Eval, err};
use crate::px4_panels::{Peer, PeerObserver, ns_since};
use crate::px4_profiles::{ActionSpec, Agent, DWELL, one_cold_start};
use halo_core::Variant;
use halo_core::catalog::Catalog;

/// The shared conditions, compiled in.
const CONDITIONS: &str = include_str!("../../halo-core/tests/data/mechanisms/conditions.json");

/// How long after an action's token is ready the service runs its final gate: room for the
/// late drift, and for traffic paused 1.5 s before admission (age at most about 1.75 s then) to
/// pass its 2 s limit by the gate.
pub const GATE_DELAY: Duration = Duration::from_millis(1000);

/// The four variants of the paper's Table 12, the product last.
pub const TABLE_12: [Variant; 4] = [
    Variant::WholeResponse,
    Variant::IndependentFilter,
    Variant::AdmissionOnly,
    Variant::Full,
];

#[derive(Clone, Debug, Deserialize)]
struct Mutation {
    source: String,
    value: Value,
    epoch: u64,
    provenance: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cond {
    name: String,
    supported: Vec<String>,
    #[serde(default)]
    pre: Vec<Mutation>,
    #[serde(default)]
    post: Vec<Mutation>,
    post_revoke: Option<String>,
    status_after: Option<String>,
    pre_advance_ms: Option<u64>,
    gate_at: Option<u64>,
}

fn conditions() -> Result<Vec<Cond>, DemoError> {
    #[derive(Deserialize)]
    struct File {
        #[allow(dead_code, reason = "documentation in the data file")]
        note: String,
        conditions: Vec<Cond>,
    }
    let f: File = serde_json::from_str(CONDITIONS).map_err(err("mechanisms/conditions.json"))?;
    Ok(f.conditions)
}

/// A mutation of a source the service takes only from the vehicle, as a provider can make the
/// same kind of change (see the module's notes).
fn through_a_provider(m: &Mutation) -> Mutation {
    match m.source.as_str() {
        "link" => Mutation {
            source: "preflight".into(),
            value: json!(false),
            epoch: 1,
            provenance: "operator".into(),
        },
        "vehicle" => Mutation {
            source: "wind".into(),
            value: json!(4.0),
            epoch: 2,
            provenance: "weather".into(),
        },
        _ => m.clone(),
    }
}

/// What one condition did under one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The variant.
    pub variant: Variant,
    /// The condition.
    pub condition: String,
    /// The components correct semantics keeps (the data file's, by hand).
    pub supported: Vec<String>,
    /// The components that proceeded: `e3` taken by the vehicle, the others emitted.
    pub proceeded: Vec<String>,
    /// What `e4` waits for (`e3`, or `e2`).
    pub parent: String,
}

impl Run {
    fn has(v: &[String], c: &str) -> bool {
        v.iter().any(|x| x == c)
    }
    /// `(kept, supported)`.
    pub fn kept(&self) -> (usize, usize) {
        (
            self.supported
                .iter()
                .filter(|c| Self::has(&self.proceeded, c))
                .count(),
            self.supported.len(),
        )
    }
    /// `(stale setpoint at the vehicle, opportunity)`: `e3` unsupported.
    pub fn stale(&self) -> (usize, usize) {
        let opp = !Self::has(&self.supported, "e3");
        (
            usize::from(opp && Self::has(&self.proceeded, "e3")),
            usize::from(opp),
        )
    }
    /// `(orphan leak, opportunity)`: `e4` unsupported is the opportunity; the leak is `e4`
    /// emitted while the prerequisite it waits for did not proceed.
    pub fn orphan(&self) -> (usize, usize) {
        let opp = !Self::has(&self.supported, "e4");
        (
            usize::from(
                opp && Self::has(&self.proceeded, "e4")
                    && !Self::has(&self.proceeded, &self.parent),
            ),
            usize::from(opp),
        )
    }
    /// Exactly the supported components proceeded.
    pub fn exact(&self) -> bool {
        let mut a = self.supported.clone();
        let mut b = self.proceeded.clone();
        a.sort();
        b.sort();
        a == b
    }
}

/// Per variant: kept, stale, orphan, blocked cells as `(n, of)`.
pub type Cells = [(usize, usize); 4];

/// The panel's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cold starts run.
    pub cold_starts: usize,
    /// The variants run, in order.
    pub variants: Vec<Variant>,
    /// Every run.
    pub runs: Vec<Run>,
    /// Wall time, s.
    pub wall_s: f64,
}

impl Report {
    /// The four cells of `v`: supported kept, stale setpoints, orphan leaks, supported blocked.
    pub fn cells(&self, v: Variant) -> Cells {
        let mut c: Cells = [(0, 0); 4];
        for r in self.runs.iter().filter(|r| r.variant == v) {
            let (k, s) = r.kept();
            let (st, so) = r.stale();
            let (o, oo) = r.orphan();
            c[0] = (c[0].0 + k, c[0].1 + s);
            c[1] = (c[1].0 + st, c[1].1 + so);
            c[2] = (c[2].0 + o, c[2].1 + oo);
            c[3] = (c[3].0 + (s - k), c[3].1 + s);
        }
        c
    }

    /// `(Full's runs where exactly the supported components proceeded, Full's runs)`.
    pub fn matched(&self) -> (usize, usize) {
        let full: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.variant == Variant::Full)
            .collect();
        (full.iter().filter(|r| r.exact()).count(), full.len())
    }

    /// Draws the table as grouped bars per variant, an SVG at `path`.
    ///
    /// # Errors
    /// [`DemoError`] when the file cannot be written.
    pub fn plot(&self, path: &Path) -> Result<(), DemoError> {
        let groups: Vec<(String, Vec<(usize, usize)>)> = self
            .variants
            .iter()
            .map(|v| (v.name().to_string(), self.cells(*v).to_vec()))
            .collect();
        crate::plots::grouped_shares(
            path,
            &format!(
                "px4-mechanisms through the running service ({})",
                crate::px4_panels::cold_starts_text(self.cold_starts)
            ),
            &[
                "supported kept",
                "stale setpoints at the vehicle",
                "orphan leaks",
                "supported blocked",
            ],
            &groups,
        )
    }

    /// Prints the table with its denominators.
    pub fn print(&self) {
        let (m, n) = self.matched();
        println!(
            "px4-mechanisms: {m}/{n} matched (Full: exactly the supported components proceeded; {} x 12 conditions x {} variants through the running service; {:.0} s wall)",
            crate::px4_panels::cold_starts_text(self.cold_starts),
            self.variants.len(),
            self.wall_s
        );
        println!(
            "  {:<18} {:>16} {:>20} {:>14} {:>18}",
            "variant",
            "supported kept",
            "stale at the vehicle",
            "orphan leaks",
            "supported blocked"
        );
        for v in &self.variants {
            let c = self.cells(*v);
            let f = |x: (usize, usize)| format!("{}/{}", x.0, x.1);
            println!(
                "  {:<18} {:>16} {:>20} {:>14} {:>18}",
                v.name(),
                f(c[0]),
                f(c[1]),
                f(c[2]),
                f(c[3])
            );
        }
        println!(
            "  (link-lost-at-admission publishes preflight false and post-admission-unclaimed-epoch moves wind's epoch: the service takes link and vehicle only from the vehicle)"
        );
        for r in self
            .runs
            .iter()
            .filter(|r| r.variant == Variant::Full && !r.exact())
        {
            println!(
                "  not matched (Full): {} supported [{}], proceeded [{}]",
                r.condition,
                r.supported.join(", "),
                r.proceeded.join(", ")
            );
        }
    }
}

/// Runs `cold_starts` cold starts of the 12 conditions through every variant of `variants`.
///
/// # Errors
/// [`DemoError`] when a step cannot run, the vehicle does not respond, or a run's order does
/// not hold (a harness error, not a result).
pub async fn run(
    catalog: Catalog,
    out: &Path,
    cold_starts: usize,
    variants: &[Variant],
    peer: &Peer,
) -> Result<Report, DemoError> {
    let conds = conditions()?;
    let origin = Instant::now();
    let observer = PeerObserver::start(peer, origin)?;
    let mut report = Report {
        cold_starts,
        variants: variants.to_vec(),
        ..Report::default()
    };
    let mut result = Ok(());
    'all: for k in 0..cold_starts {
        for (vi, v) in variants.iter().enumerate() {
            let dir = out.join(format!("cold-{k}-{}", v.name()));
            let eval = Eval {
                variant: Some(*v),
                gate_delay: Some(GATE_DELAY),
            };
            let script_conds = conds.clone();
            let variant = *v;
            let r = one_cold_start(
                &catalog,
                &dir,
                k * variants.len() + vi,
                peer,
                origin,
                observer.get(),
                &eval,
                move |agent, svc| {
                    let offset = svc.origin().saturating_duration_since(origin);
                    let offset = u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX);
                    let mut runs = Vec::new();
                    for (n, c) in script_conds.iter().enumerate() {
                        runs.push(condition(agent, k, n, c, variant)?);
                    }
                    Ok((runs, offset, svc.receipts_path().to_path_buf()))
                },
            )
            .await;
            match r.and_then(|(runs, offset, receipts)| {
                check_order(&receipts, offset, &runs)?;
                Ok(runs)
            }) {
                Ok(runs) => report.runs.extend(runs.into_iter().map(|(r, _)| r)),
                Err(e) => {
                    result = Err(e);
                    break 'all;
                }
            }
            println!(
                "  cold start {}/{cold_starts}, {}: 12 conditions, {:.0} s so far",
                k + 1,
                v.name(),
                origin.elapsed().as_secs_f64()
            );
        }
    }
    observer.stop().await;
    result?;
    report.wall_s = origin.elapsed().as_secs_f64();
    Ok(report)
}

/// The runner's instants of one run, on its own clock (ns since its origin).
#[derive(Clone, Debug, Default)]
pub struct Instants {
    rid: String,
    /// The last late mutation was applied (its POST answered).
    mutation: Option<u64>,
    /// The vehicle first took `e3`'s target.
    vehicle: Option<u64>,
}

fn condition(
    agent: &mut Agent<'_>,
    k: usize,
    n: usize,
    c: &Cond,
    variant: Variant,
) -> Result<(Run, Instants), DemoError> {
    let h = agent.hover;
    #[allow(clippy::cast_precision_loss, reason = "small indices")]
    let target = [
        (h[0] + 1.0 + (n % 4) as f64).round(),
        (h[1] + 1.0 + (n / 4) as f64).round(),
        (h[2] * 10.0).round() / 10.0,
        0.0,
    ];
    for m in c.pre.iter().map(through_a_provider) {
        agent.publish(&m.source, &m.value, m.epoch, &m.provenance);
    }
    if !c.pre.is_empty() {
        std::thread::sleep(Duration::from_millis(250));
    }
    if let Some(ms) = c.pre_advance_ms {
        pause(agent, "z_range", ms + 100);
    }
    if c.gate_at.is_some() {
        pause(agent, "traffic", 1500);
    }
    let fp = agent.claim(target)?;
    let rid = format!("mech-{k}-{n}");
    let cert = c
        .post_revoke
        .clone()
        .unwrap_or_else(|| format!("cert-{k}-{n}"));
    // The running example around the route action `e3`, certified alone (its digest does not
    // depend on its siblings).
    let mut env = agent.envelope(&rid, target, &ActionSpec::default(), &cert, false);
    env["components"][0]["id"] = json!("e3");
    agent.certify(&env, &cert, 30_000)?;
    let after = match c.status_after.as_deref() {
        Some("e2") => json!({"id": "e2", "phase": "emitted"}),
        _ => json!({"id": "e3", "phase": "dispatched"}),
    };
    let e3 = env["components"][0].clone();
    env["components"] = json!([
        {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
        {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}},
        e3,
        {"id": "e4", "type": "status", "payload": {"text": "En route"}, "requires": [after]}
    ]);
    let post_ns = ns_since(agent.origin);
    agent.c.submit("/v1/responses", &env)?;
    let mut inst = Instants {
        rid: rid.clone(),
        ..Instants::default()
    };
    for m in c.post.iter().map(through_a_provider) {
        agent.publish(&m.source, &m.value, m.epoch, &m.provenance);
        inst.mutation = Some(ns_since(agent.origin));
    }
    if let Some(id) = &c.post_revoke {
        let (st, v) = agent.c.call(
            "DELETE",
            &format!("/v1/certificates/{id}"),
            &agent.c.provider.clone(),
            &Value::Null,
        );
        if st != 200 {
            return Err(DemoError(format!("{}: revocation refused: {v}", c.name)));
        }
        inst.mutation = Some(ns_since(agent.origin));
    }
    // The deferred gate, then the vehicle: an action the gateway says it dispatched may take
    // PX4 a second to fly (entering OFFBOARD from HOLD); anything else gets the dwell.
    std::thread::sleep(GATE_DELAY + Duration::from_millis(100));
    let (_, rep) = agent.c.call(
        "GET",
        &format!("/v1/responses/{rid}"),
        &agent.c.agent.clone(),
        &Value::Null,
    );
    let dispatched = rep["components"].as_array().into_iter().flatten().any(|x| {
        x["id"] == "e3" && (x["phase"] == "dispatched" || x["phase"] == "observed_success")
    });
    let wait = if dispatched {
        Duration::from_secs(3)
    } else {
        DWELL
    };
    let taken = agent.taken(&fp, post_ns, wait);
    if !dispatched {
        // The dwell is the wait; `taken` looked once at its start.
        std::thread::sleep(DWELL);
    }
    inst.vehicle = if taken || agent.taken(&fp, post_ns, Duration::ZERO) {
        agent
            .vehicle
            .records_after(post_ns)
            .into_iter()
            .find(|(_, f)| *f == fp)
            .map(|(t, _)| t)
    } else {
        None
    };
    let mut proceeded = Vec::new();
    for comp in rep["components"].as_array().into_iter().flatten() {
        let id = comp["id"].as_str().unwrap_or("");
        if id != "e3" && comp["phase"] == "emitted" {
            proceeded.push(id.to_string());
        }
    }
    if inst.vehicle.is_some() {
        proceeded.push("e3".into());
    }
    agent.restore(false, false)?;
    Ok((
        Run {
            variant,
            condition: c.name.clone(),
            supported: c.supported.clone(),
            proceeded,
            parent: c.status_after.clone().unwrap_or_else(|| "e3".into()),
        },
        inst,
    ))
}

fn pause(agent: &Agent<'_>, source: &str, ms: u64) {
    if let Ok(mut w) = agent.world.lock() {
        w.paused.insert(source.to_string());
    }
    std::thread::sleep(Duration::from_millis(ms));
}

/// Refuses a cold start whose instants are out of order: admission < late mutation < final
/// gate < first vehicle setpoint, with the gateway's instants from its receipts (`at_ns` on its
/// clock, `offset` ns after the runner's origin).
fn check_order(receipts: &Path, offset: u64, runs: &[(Run, Instants)]) -> Result<(), DemoError> {
    let text = std::fs::read_to_string(receipts).map_err(err("receipts"))?;
    // (response, kind) -> first instant on the runner's clock.
    let mut first: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let body = &r["body"];
        let kind = match body["kind"].as_str() {
            Some("admitted") => "admitted",
            Some("gate") if body["component"] == "e3" => "gate",
            _ => continue,
        };
        let Some(rid) = body["response"].as_str() else {
            continue;
        };
        let at = r["at_ns"].as_u64().unwrap_or(0) + offset;
        first.entry((rid.to_string(), kind)).or_insert(at);
    }
    for (run, i) in runs {
        let ta = first.get(&(i.rid.clone(), "admitted")).copied();
        let tc = first.get(&(i.rid.clone(), "gate")).copied();
        let ms = |t: Option<u64>| {
            t.map_or_else(
                || "none".to_string(),
                |t| format!("{:.3} ms", t as f64 / 1e6),
            )
        };
        let lt = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        };
        let ordered = ta.is_some()
            && lt(ta, i.mutation)
            && lt(i.mutation, tc)
            && lt(ta, tc)
            && lt(tc, i.vehicle)
            && (i.vehicle.is_none() || tc.is_some());
        if !ordered {
            return Err(DemoError(format!(
                "{} ({}): the recorded instants are out of order, so the run is refused (admission {}, late mutation {}, final gate {}, first vehicle setpoint {})",
                run.condition,
                run.variant.name(),
                ms(ta),
                ms(i.mutation),
                ms(tc),
                ms(i.vehicle)
            )));
        }
    }
    Ok(())
}

impl crate::px4_panels::PanelReport for Report {
    fn print(&self) {
        Report::print(self);
    }
    fn plot(&self, path: &Path) -> Result<(), DemoError> {
        Report::plot(self, path)
    }
    fn passed(&self) -> bool {
        let (m, n) = self.matched();
        m == n
    }
}
