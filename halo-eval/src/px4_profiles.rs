//! The UAV support-profile panel through the running service (`px4-profiles`): 11
//! age-of-information conditions and 30 conditions informed by FAA Part 107 (five profiles of
//! the UAV catalog, six conditions each), read from `halo-eval/data/px4-profiles.json`, run back
//! to back in one flight per cold start.
//!
//! Each condition moves the world away from the baseline the providers publish (a source set to
//! another value, epoch or provenance; a provider that stops publishing; the vehicle's battery;
//! the operator taking control back; a certificate revoked), then the agent sends one certified
//! route action a few metres from the hover point over HTTP. The expected outcome is written by
//! hand in the data file from the catalog: `dispatched`, or the reason code the action is
//! withheld with. A condition matches when
//!
//! - the gateway's answer is the expected one (its phase, and its reason when withheld), and
//! - the vehicle's own record agrees: the action's fingerprint (NED position and yaw, to the
//!   centimetre and the tenth of a degree) is among the setpoints its controller took when it
//!   was expected to fly, and absent for [`DWELL`] (15 control ticks) when it was not, and
//! - where the condition recovers, the agent's fresh candidate (sent after the world is back
//!   to the baseline, planned to a target of its own) is readmitted, dispatched with a sequence
//!   never used before in the flight, and taken by the vehicle.
//!
//! Every cold start is a fresh simulated PX4 and a fresh service (see
//! [`crate::px4_panels`] for the clocks and the real-PX4 peer). On a real PX4 the one condition
//! that needs the simulator (the battery) is reported as not run and left out of the
//! denominators.

#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value indexing returns Null, never panics"
)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::demo::{Client, DemoError, err, feed, stop_service};
use crate::px4_panels::{
    Evidence, GcsObserver, Peer, PeerObserver, cold_start, fingerprint, ns_since,
};
use crate::service::Service;
use halo_core::catalog::Catalog;

/// The data file, compiled in so the binary runs from any directory.
const CONDITIONS: &str = include_str!("../data/px4-profiles.json");

/// How long a withheld action's fingerprint must stay absent from the vehicle's record: 15 of
/// the simulated PX4's 20 ms control ticks (PX4's POSITION_TARGET_LOCAL_NED arrives at 50 Hz on
/// its ground-station link, so the same dwell holds for a real PX4).
pub const DWELL: Duration = Duration::from_millis(300);

/// The map epoch the providers publish throughout.
const MAP_EPOCH: u64 = 7;

/// One condition of the data file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// Unique name.
    pub name: String,
    /// `aoi` or `part107`.
    pub class: String,
    /// `AoI`, or the catalog profile (`AUTH-1`, `AUTH-2`, `AUTH-3`, `OPS-1`, `SEP-1`).
    pub profile: String,
    /// How the world moves from the baseline before the action is sent.
    #[serde(default)]
    pub setup: Vec<Step>,
    /// How the action differs from the condition's default one.
    #[serde(default)]
    pub action: ActionSpec,
    /// `dispatched`, or the reason code the action is withheld with.
    pub expect: String,
    /// Whether the agent answers the obligation with a fresh candidate.
    #[serde(default)]
    pub recover: bool,
    /// Whether the response also carries a status that waits for the component (`s`,
    /// requiring `a` dispatched, or emitted for a report).
    #[serde(default)]
    pub dependent: bool,
}

/// One setup step; exactly one of its kinds is given.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A provider publishes `value`, `epoch` and `provenance` for this source from now on.
    pub set: Option<String>,
    /// The value `set` publishes.
    pub value: Option<Value>,
    /// The epoch `set` publishes.
    pub epoch: Option<u64>,
    /// The provenance `set` publishes.
    pub provenance: Option<String>,
    /// The source's provider stops publishing for `ms`.
    pub pause: Option<String>,
    /// Milliseconds of a pause.
    pub ms: Option<u64>,
    /// The source's provider publishes again.
    pub resume: Option<String>,
    /// The vehicle reports this charge, percent (simulator only).
    pub battery: Option<f64>,
    /// An operator command (`hold`).
    pub operator: Option<String>,
    /// The tube verifier revokes the action's certificate after issuing it.
    pub revoke: Option<bool>,
}

/// How a condition's action differs from the default one.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// An absolute local NED target, m.
    pub target_m: Option<[f64; 3]>,
    /// The action's duration, s (default 10).
    pub duration_s: Option<f64>,
    /// The certificate's validity, ms (default 30,000).
    pub cert_ms: Option<u64>,
    /// A wait after certifying, ms.
    pub cert_wait_ms: Option<u64>,
    /// Claims merged over the baseline's.
    pub claims: Option<serde_json::Map<String, Value>>,
    /// Traffic published at the target plus this north offset, m.
    pub intruder_m: Option<f64>,
    /// The component's type: `route_action` (the default), `hold` or `report`.
    pub kind: Option<String>,
    /// A support claim the action leaves out (`map`, `traffic`, `bounds`).
    pub omit_claim: Option<String>,
    /// How the action names its certificate: `issued` (the default), `none` (it names none),
    /// `unissued` (one never issued), `other` (one issued for another digest).
    pub certificate: Option<String>,
}

/// The conditions of the data file, checked.
///
/// # Errors
/// [`DemoError`] naming the condition when the file does not parse, a name repeats, a step
/// has no kind or more than one, or an expectation is not `dispatched` or a reason code.
pub fn conditions() -> Result<Vec<Condition>, DemoError> {
    #[derive(Deserialize)]
    struct File {
        #[allow(dead_code, reason = "documentation in the data file")]
        note: String,
        conditions: Vec<Condition>,
    }
    let f: File = serde_json::from_str(CONDITIONS).map_err(err("px4-profiles.json"))?;
    let mut names = BTreeSet::new();
    for c in &f.conditions {
        if !names.insert(c.name.clone()) {
            return Err(DemoError(format!("condition `{}` repeats", c.name)));
        }
        if c.class != "aoi" && c.class != "part107" {
            return Err(DemoError(format!("`{}`: unknown class", c.name)));
        }
        if c.expect != "dispatched" && halo_core::ReasonCode::from_name(&c.expect).is_none() {
            return Err(DemoError(format!(
                "`{}`: `{}` is neither `dispatched` nor a reason code",
                c.name, c.expect
            )));
        }
        if c.recover && c.expect == "dispatched" {
            return Err(DemoError(format!(
                "`{}`: only a withheld action recovers",
                c.name
            )));
        }
        for s in &c.setup {
            let kinds = [
                s.set.is_some(),
                s.pause.is_some(),
                s.resume.is_some(),
                s.battery.is_some(),
                s.operator.is_some(),
                s.revoke.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1
                || (s.set.is_some() && (s.value.is_none() || s.epoch.is_none()))
                || (s.pause.is_some() && s.ms.is_none())
            {
                return Err(DemoError(format!(
                    "`{}`: a setup step must be exactly one of set (with value and epoch), pause (with ms), resume, battery, operator, revoke",
                    c.name
                )));
            }
        }
    }
    Ok(f.conditions)
}

/// What one condition did in one cold start.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The condition.
    pub name: String,
    /// `aoi` or `part107`.
    pub class: String,
    /// Its profile.
    pub profile: String,
    /// What was expected.
    pub expect: String,
    /// What the gateway answered: `dispatched`, the reason of a withheld or invalidated
    /// component, or the phase.
    pub decided: String,
    /// The phase it answered (`DISPATCHED`, `WITHHELD`, `INVALIDATED`, ...).
    pub phase: String,
    /// Whether the vehicle took the action's fingerprint.
    pub seen: bool,
    /// The recovery, where the condition has one: readmitted and dispatched, with a sequence
    /// new to the flight, and taken by the vehicle.
    pub recovery: Option<Recovery>,
    /// Not run on this peer (the battery on a real PX4).
    pub skipped: bool,
    /// The obligation the gateway created for the component, if any.
    pub obligation: Option<u64>,
    /// The dependent status's decision, when the response carried one.
    pub dependent: Option<String>,
}

/// A recovery's result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    /// The candidate was readmitted and dispatched (and its dependent status, when it carried
    /// one, emitted).
    pub dispatched: bool,
    /// Its sequence had not been used before in the flight.
    pub fresh_sequence: bool,
    /// The vehicle took its fingerprint.
    pub seen: bool,
}

impl Outcome {
    /// The decision, the vehicle's record and the recovery all as expected.
    pub fn matched(&self) -> bool {
        let admitted = self.expect == "dispatched";
        // Every denial of this panel is recoverable: withheld, not invalidated.
        self.decided == self.expect
            && self.phase == if admitted { "dispatched" } else { "withheld" }
            && self.seen == admitted
            && self
                .recovery
                .as_ref()
                .is_none_or(|r| r.dispatched && r.fresh_sequence && r.seen)
    }
}

/// The panel's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cold starts run.
    pub cold_starts: usize,
    /// Every condition of every cold start, in order.
    pub outcomes: Vec<Outcome>,
    /// Wall time, s.
    pub wall_s: f64,
}

/// Counts over a set of outcomes: `(matched, runs, admitted seen, admitted, denied seen,
/// denied, fresh recoveries, recoveries)`.
type Counts = (usize, usize, usize, usize, usize, usize, usize, usize);

fn counts<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> Counts {
    let mut c: Counts = (0, 0, 0, 0, 0, 0, 0, 0);
    for o in outcomes.filter(|o| !o.skipped) {
        c.1 += 1;
        c.0 += usize::from(o.matched());
        if o.expect == "dispatched" {
            c.3 += 1;
            c.2 += usize::from(o.seen);
        } else {
            c.5 += 1;
            c.4 += usize::from(o.seen);
        }
        if let Some(r) = &o.recovery {
            c.7 += 1;
            c.6 += usize::from(r.dispatched && r.fresh_sequence && r.seen);
        }
    }
    c
}

impl Report {
    /// `(matched, runs)` over every condition run.
    pub fn matched(&self) -> (usize, usize) {
        let c = counts(self.outcomes.iter());
        (c.0, c.1)
    }

    /// Conditions of `class` per cold start.
    fn per_class(&self, class: &str) -> usize {
        self.outcomes.iter().filter(|o| o.class == class).count() / self.cold_starts.max(1)
    }

    /// Counts for one class (`aoi`, `part107`), or all with `None`.
    pub fn counts(&self, class: Option<&str>) -> Counts {
        counts(
            self.outcomes
                .iter()
                .filter(|o| class.is_none_or(|k| o.class == k)),
        )
    }

    /// Draws the panel per subset as an SVG at `path`.
    ///
    /// # Errors
    /// [`DemoError`] when the file cannot be written.
    pub fn plot(&self, path: &Path) -> Result<(), DemoError> {
        let profiles: BTreeSet<&str> = self.outcomes.iter().map(|o| o.profile.as_str()).collect();
        let groups: Vec<(String, Vec<(usize, usize)>)> = profiles
            .into_iter()
            .map(|p| {
                let c = counts(self.outcomes.iter().filter(|o| o.profile == p));
                (p.to_string(), vec![(c.2, c.3), (c.4, c.5), (c.6, c.7)])
            })
            .collect();
        crate::plots::grouped_shares(
            path,
            &format!(
                "px4-profiles through the running service ({})",
                crate::px4_panels::cold_starts_text(self.cold_starts)
            ),
            &[
                "admitted, taken by the vehicle",
                "denied, taken by the vehicle",
                "fresh recoveries",
            ],
            &groups,
        )
    }

    /// Prints the panel with its denominators.
    pub fn print(&self) {
        let (m, n) = self.matched();
        let skipped = self.outcomes.iter().filter(|o| o.skipped).count();
        println!(
            "px4-profiles: {m}/{n} matched ({} of {} AoI and {} Part 107-informed conditions{}; {:.0} s wall)",
            crate::px4_panels::cold_starts_text(self.cold_starts),
            self.per_class("aoi"),
            self.per_class("part107"),
            if skipped > 0 {
                format!("; {skipped} not runnable on this peer")
            } else {
                String::new()
            },
            self.wall_s
        );
        println!(
            "  {:<10} {:>8} {:>9} {:>22} {:>22} {:>18}",
            "subset",
            "replays",
            "matched",
            "admitted taken by PX4",
            "denied taken by PX4",
            "fresh recoveries"
        );
        let mut rows: Vec<(String, Counts)> = vec![
            ("AoI".into(), self.counts(Some("aoi"))),
            ("Part 107".into(), self.counts(Some("part107"))),
        ];
        let profiles: BTreeSet<&str> = self
            .outcomes
            .iter()
            .filter(|o| o.class == "part107")
            .map(|o| o.profile.as_str())
            .collect();
        for p in profiles {
            rows.push((
                format!("  {p}"),
                counts(self.outcomes.iter().filter(|o| o.profile == p)),
            ));
        }
        rows.push(("all".into(), self.counts(None)));
        for (name, c) in rows {
            println!(
                "  {name:<10} {:>8} {:>9} {:>22} {:>22} {:>18}",
                c.1,
                c.0,
                format!("{}/{}", c.2, c.3),
                format!("{}/{}", c.4, c.5),
                format!("{}/{}", c.6, c.7)
            );
        }
        for o in self.outcomes.iter().filter(|o| !o.skipped && !o.matched()) {
            println!(
                "  not matched: {} expected {}, the gateway answered {}, the vehicle {} it{}",
                o.name,
                o.expect,
                o.decided,
                if o.seen { "took" } else { "never took" },
                o.recovery.as_ref().map_or(String::new(), |r| format!(
                    "; its recovery {}dispatched, {}a new sequence, {}taken",
                    if r.dispatched { "" } else { "not " },
                    if r.fresh_sequence { "" } else { "not " },
                    if r.seen { "" } else { "not " }
                ))
            );
        }
    }
}

/// What the providers publish: the baseline, with some sources changed or paused.
#[derive(Default)]
pub(crate) struct World {
    overrides: BTreeMap<String, (Value, u64, String)>,
    pub(crate) paused: BTreeSet<String>,
}

impl World {
    fn updates(&self, at: u64) -> Vec<(&'static str, Value)> {
        sitl::sim::world::provider_updates(MAP_EPOCH, at)
            .into_iter()
            .filter(|(s, _)| !self.paused.contains(*s))
            .map(|(s, body)| match self.overrides.get(s) {
                Some((v, e, p)) => (
                    s,
                    json!({"value": v, "epoch": e, "provenance": p,
                           "generated_at_unix_ms": body["generated_at_unix_ms"]}),
                ),
                None => (s, body),
            })
            .collect()
    }
}

/// Runs `cold_starts` cold starts of every condition, writing each cold start's files under
/// `out/cold-N/`.
///
/// # Errors
/// [`DemoError`] when the data file is wrong, a step cannot run, or the vehicle does not
/// respond (a harness error, not a result).
pub async fn run(
    catalog: Catalog,
    out: &Path,
    cold_starts: usize,
    peer: &Peer,
) -> Result<Report, DemoError> {
    run_selected(catalog, out, cold_starts, peer, |_| true).await
}

/// [`run`] over the conditions `keep` selects (a slice, or the conditions a planted defect
/// should show in).
///
/// # Errors
/// As [`run`], and when `keep` selects nothing.
pub async fn run_selected(
    catalog: Catalog,
    out: &Path,
    cold_starts: usize,
    peer: &Peer,
    keep: impl Fn(&Condition) -> bool,
) -> Result<Report, DemoError> {
    let conds: Vec<Condition> = conditions()?.into_iter().filter(|c| keep(c)).collect();
    if conds.is_empty() {
        return Err(DemoError("no condition selected".into()));
    }
    let origin = Instant::now();
    let observer = PeerObserver::start(peer, origin)?;
    let mut report = Report {
        cold_starts,
        ..Report::default()
    };
    let mut result = Ok(());
    for k in 0..cold_starts {
        let dir = out.join(format!("cold-{k}"));
        let script_conds = conds.clone();
        match one_cold_start(
            &catalog,
            &dir,
            k,
            peer,
            origin,
            observer.get(),
            &crate::demo::Eval::default(),
            move |agent, _| {
                script_conds
                    .iter()
                    .enumerate()
                    .map(|(n, c)| agent.condition(k, n, c))
                    .collect::<Result<Vec<_>, _>>()
            },
        )
        .await
        {
            Ok(o) => report.outcomes.extend(o),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        println!(
            "  cold start {}/{cold_starts}: {} conditions, {:.0} s so far",
            k + 1,
            conds.len(),
            origin.elapsed().as_secs_f64()
        );
    }
    observer.stop().await;
    result?;
    report.wall_s = origin.elapsed().as_secs_f64();
    Ok(report)
}

/// One cold start: a fresh service (and simulator), providers publishing the world, and on a
/// blocking thread the agent's `script` between a takeoff to 5 m and a landing.
///
/// # Errors
/// [`DemoError`] when the service or the vehicle does not come up, or the script fails.
#[allow(
    clippy::too_many_arguments,
    reason = "one cold start's whole setting, passed once"
)]
pub(crate) async fn one_cold_start<T: Send + 'static>(
    catalog: &Catalog,
    dir: &Path,
    k: usize,
    peer: &Peer,
    origin: Instant,
    observer: Option<&Arc<GcsObserver>>,
    eval: &crate::demo::Eval,
    script: impl FnOnce(&mut Agent<'_>, &Service) -> Result<T, DemoError> + Send + 'static,
) -> Result<T, DemoError> {
    let (svc, evidence) = cold_start(peer, catalog, dir, k, origin, observer, eval).await?;
    let svc = Arc::new(svc);
    let service = Arc::clone(&svc);
    let world = Arc::new(Mutex::new(World::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let w = Arc::clone(&world);
    let feeds = feed(
        svc.url(),
        svc.credentials().provider.expose().to_string(),
        Arc::clone(&stop),
        move |at| w.lock().map(|w| w.updates(at)).unwrap_or_default(),
    );
    let mut client = Client::for_service(&svc, catalog.clone(), dir, origin, true)?;
    let result = tokio::task::spawn_blocking(move || {
        flight(&mut client, evidence.as_ref(), &world, origin, |a| {
            script(a, &service)
        })
    })
    .await
    .map_err(err("panel script"));
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || feeds.join()).await;
    let svc = Arc::try_unwrap(svc)
        .map_err(|_| DemoError("the service is still in use after the flight".into()))?;
    let receipts = svc.receipts_path().to_path_buf();
    stop_service(svc, dir).await?;
    crate::demo::draw_panel_run(&receipts, dir);
    result?
}

/// The agent's side of one flight.
pub(crate) struct Agent<'a> {
    pub(crate) c: &'a mut Client,
    pub(crate) vehicle: &'a dyn Evidence,
    pub(crate) world: &'a Mutex<World>,
    pub(crate) origin: Instant,
    pub(crate) generation: u64,
    /// Every sequence the gateway dispatched in this flight.
    pub(crate) sequences: HashSet<String>,
    /// Where the flight's targets start from: the hover point one metre up, local NED m.
    pub(crate) hover: [f64; 3],
    /// Every target fingerprint the agent sent in this flight: each is sent once, so the
    /// vehicle's record (and PX4's log) can tell every action apart.
    pub(crate) targets: HashSet<String>,
}

impl Agent<'_> {
    pub(crate) fn publish(&self, source: &str, value: &Value, epoch: u64, provenance: &str) {
        if let Ok(mut w) = self.world.lock() {
            w.overrides.insert(
                source.to_string(),
                (value.clone(), epoch, provenance.to_string()),
            );
        }
        let body = json!({"value": value, "epoch": epoch, "provenance": provenance,
            "generated_at_unix_ms": crate::service::infra::clock::wall_now_ms()});
        let _ = self.c.call(
            "POST",
            &format!("/v1/state/{source}"),
            &self.c.provider.clone(),
            &body,
        );
    }

    /// Back to the baseline: every source published as the providers do, the battery full,
    /// control handed back.
    pub(crate) fn restore(&self, held: bool, battery: bool) -> Result<(), DemoError> {
        if let Ok(mut w) = self.world.lock() {
            *w = World::default();
        }
        if held {
            let (st, v) = self.c.operator("release", &json!({}));
            if st != 200 {
                return Err(DemoError(format!("operator release refused: {v}")));
            }
        }
        if battery {
            self.vehicle.set_battery(100.0);
            if !self.c.wait(10, |c| {
                c.status()["vehicle"]["battery_pct"]
                    .as_f64()
                    .is_some_and(|b| b > 90.0)
            }) {
                return Err(DemoError("the battery did not come back".into()));
            }
        }
        // Two provider rounds: every source fresh and at the baseline again.
        std::thread::sleep(Duration::from_millis(450));
        Ok(())
    }

    /// The agent's response `rid`: component `a` as `spec` says, naming certificate `cert`,
    /// and with `dependent` a status `s` that waits for it.
    pub(crate) fn envelope(
        &mut self,
        rid: &str,
        target: [f64; 4],
        spec: &ActionSpec,
        cert: &str,
        dependent: bool,
    ) -> Value {
        self.generation += 1;
        let kind = spec.kind.as_deref().unwrap_or("route_action");
        let a = match kind {
            "report" => {
                json!({"id": "a", "type": "report",
                       "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}})
            }
            "hold" => json!({"id": "a", "type": "hold", "payload": {"duration_s": 5.0}}),
            _ => {
                let mut support = json!({"map": {"epoch": MAP_EPOCH}, "traffic": {"epoch": 41},
                    "bounds": {"epoch": 3, "provenance": "corridor-12"}});
                if let Some(s) = support.as_object_mut() {
                    for (k, v) in spec.claims.iter().flatten() {
                        s.insert(k.clone(), v.clone());
                    }
                    if let Some(k) = &spec.omit_claim {
                        s.remove(k);
                    }
                }
                let mut a = json!({"id": "a", "type": "route_action",
                    "payload": {"frame": "local_ned", "north_m": target[0], "east_m": target[1],
                                "down_m": target[2], "yaw_deg": target[3],
                                "duration_s": spec.duration_s.unwrap_or(10.0)},
                    "support": support, "certificate": cert});
                if spec.certificate.as_deref() == Some("none")
                    && let Some(o) = a.as_object_mut()
                {
                    o.remove("certificate");
                }
                a
            }
        };
        let mut components = vec![a];
        if dependent {
            let phase = if kind == "report" {
                "emitted"
            } else {
                "dispatched"
            };
            components.push(json!({"id": "s", "type": "status",
                "payload": {"text": "next leg after a"},
                "requires": [{"id": "a", "phase": phase}]}));
        }
        json!({"response_id": rid, "agent_id": "planner-1", "generation": self.generation,
            "catalog": {"id": "uav-px4", "version": 6}, "components": components})
    }

    pub(crate) fn certify(&self, env: &Value, id: &str, valid_ms: u64) -> Result<(), DemoError> {
        // Only the action is certified: its digest does not depend on its siblings.
        let mut env = env.clone();
        if let Some(c) = env["components"].as_array_mut() {
            c.truncate(1);
        }
        let first = env["components"][0]["id"]
            .as_str()
            .unwrap_or("a")
            .to_string();
        self.c.certify_for(&env, &first, id, valid_ms)
    }

    /// Claims `target` for one action of this flight: a target sent twice is the harness's
    /// error (its evidence would be ambiguous), not a result.
    ///
    /// # Errors
    /// [`DemoError`] when the target was sent before in this flight.
    pub(crate) fn claim(&mut self, target: [f64; 4]) -> Result<String, DemoError> {
        let fp = fingerprint(target);
        if self.targets.insert(fp.clone()) {
            Ok(fp)
        } else {
            Err(DemoError(format!(
                "the target {fp} was sent twice in one flight, so the run is refused"
            )))
        }
    }

    /// Whether the vehicle took `fp` after `after`, waiting up to `wait` for it.
    pub(crate) fn taken(&self, fp: &str, after: u64, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if self
                .vehicle
                .records_after(after)
                .iter()
                .any(|(_, f)| f == fp)
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `dispatched`, the reason of a withheld action, or its phase; and the sequence of a
    /// dispatched one.
    pub(crate) fn decision(component: &Value) -> (String, Option<String>) {
        let phase = component["phase"].as_str().unwrap_or("none");
        match phase {
            "dispatched" => ("dispatched".into(), Some(component["seq"].to_string())),
            "emitted" => ("emitted".into(), None),
            "withheld" | "invalidated" | "failed" => (
                component["reason"]
                    .as_str()
                    .map_or_else(|| format!("{phase} without a reason"), str::to_string),
                None,
            ),
            other => (other.to_string(), None),
        }
    }

    pub(crate) fn condition(
        &mut self,
        k: usize,
        n: usize,
        cond: &Condition,
    ) -> Result<Outcome, DemoError> {
        let hover = self.hover;
        let mut outcome = Outcome {
            name: cond.name.clone(),
            class: cond.class.clone(),
            profile: cond.profile.clone(),
            expect: cond.expect.clone(),
            decided: String::new(),
            phase: String::new(),
            seen: false,
            recovery: None,
            skipped: false,
            obligation: None,
            dependent: None,
        };
        // A target of its own a few metres from the hover point, so its fingerprint is its own.
        #[allow(clippy::cast_precision_loss, reason = "small indices")]
        // Whole metres on a grid six wide (distinct for every condition of a flight, so no
        // target is flown twice and PX4's log can tell them apart); a recovery goes half a
        // metre east of its condition's target, off the grid.
        let own = [
            (hover[0] + 1.0 + (n % 6) as f64).round(),
            (hover[1] + 1.0 + (n / 6) as f64).round(),
            (hover[2] * 10.0).round() / 10.0,
            0.0,
        ];
        let target = cond
            .action
            .target_m
            .map_or(own, |t| [t[0], t[1], t[2], 0.0]);
        let (mut held, mut battery, mut revoke) = (false, false, false);
        for s in &cond.setup {
            if let (Some(src), Some(v), Some(e)) = (&s.set, &s.value, s.epoch) {
                let p = s.provenance.clone().unwrap_or_default();
                self.publish(src, v, e, &p);
                std::thread::sleep(Duration::from_millis(250));
            } else if let (Some(src), Some(ms)) = (&s.pause, s.ms) {
                if let Ok(mut w) = self.world.lock() {
                    w.paused.insert(src.clone());
                }
                std::thread::sleep(Duration::from_millis(ms));
            } else if let Some(src) = &s.resume {
                if let Ok(mut w) = self.world.lock() {
                    w.paused.remove(src);
                }
                std::thread::sleep(Duration::from_millis(450));
            } else if let Some(pct) = s.battery {
                if !self.vehicle.set_battery(pct) {
                    outcome.skipped = true;
                    return Ok(outcome);
                }
                battery = true;
                if !self.c.wait(10, |c| {
                    c.status()["vehicle"]["battery_pct"]
                        .as_f64()
                        .is_some_and(|b| b <= pct + 1.0)
                }) {
                    return Err(DemoError(format!(
                        "{}: the vehicle did not report {pct} % battery",
                        cond.name
                    )));
                }
            } else if let Some(op) = &s.operator {
                let (st, v) = self.c.operator(op, &json!({}));
                if st != 200 {
                    return Err(DemoError(format!(
                        "{}: operator {op} refused: {v}",
                        cond.name
                    )));
                }
                held = true;
            } else if s.revoke == Some(true) {
                revoke = true;
            }
        }
        if let Some(d) = cond.action.intruder_m {
            let intruder = json!([{"north_m": target[0] + d, "east_m": target[1],
                                   "down_m": target[2]}]);
            self.publish("traffic", &intruder, 41, "utm-feed-a");
            std::thread::sleep(Duration::from_millis(250));
        }
        let fp = self.claim(target)?;
        let rid = format!("profile-{k}-{n}");
        let cert = format!("cert-{k}-{n}");
        let env = self.envelope(&rid, target, &cond.action, &cert, cond.dependent);
        let kind = cond.action.kind.as_deref().unwrap_or("route_action");
        match cond.action.certificate.as_deref() {
            _ if kind != "route_action" => {}
            Some("none" | "unissued") => {}
            Some("other") => {
                // Issued for the same action to another target: another digest.
                let other = self.envelope(
                    &rid,
                    [target[0], target[1] + 1.0, target[2], target[3]],
                    &cond.action,
                    &cert,
                    false,
                );
                self.generation -= 1;
                self.certify(&other, &cert, 30_000)?;
            }
            _ => self.certify(&env, &cert, cond.action.cert_ms.unwrap_or(30_000))?,
        }
        if let Some(ms) = cond.action.cert_wait_ms {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if revoke {
            let (st, v) = self.c.call(
                "DELETE",
                &format!("/v1/certificates/{cert}"),
                &self.c.provider.clone(),
                &Value::Null,
            );
            if st != 200 {
                return Err(DemoError(format!("{}: revocation refused: {v}", cond.name)));
            }
        }
        let post_ns = ns_since(self.origin);
        let rep = self.c.submit("/v1/responses", &env)?;
        let comp = &rep["components"][0];
        let (decided, seq) = Self::decision(comp);
        outcome.phase = comp["phase"].as_str().unwrap_or("none").to_string();
        if cond.dependent {
            outcome.dependent = Some(Self::decision(&rep["components"][1]).0);
        }
        outcome.seen = if kind != "route_action" {
            // A report or a hold has no target of its own to find among the setpoints.
            std::thread::sleep(DWELL);
            false
        } else if decided == "dispatched" {
            self.taken(&fp, post_ns, Duration::from_secs(3))
        } else {
            std::thread::sleep(DWELL);
            self.taken(&fp, post_ns, Duration::ZERO)
        };
        if let Some(s) = seq {
            self.sequences.insert(s);
        }
        outcome.decided = decided;
        outcome.obligation = comp["obligation"].as_u64();
        self.restore(held, battery)?;
        if cond.recover {
            outcome.recovery =
                Some(self.recover(&rid, &cert, own, outcome.obligation, cond.dependent)?);
        }
        Ok(outcome)
    }

    /// The agent answers `obligation` with a fresh candidate to a target next to `own`.
    pub(crate) fn recover(
        &mut self,
        rid: &str,
        cert: &str,
        own: [f64; 4],
        obligation: Option<u64>,
        dependent: bool,
    ) -> Result<Recovery, DemoError> {
        let Some(oid) = obligation else {
            return Ok(Recovery::default());
        };
        let fresh = [own[0], own[1] + 0.5, own[2], own[3]];
        let fresh_fp = self.claim(fresh)?;
        let cert = format!("{cert}-fresh");
        let env = self.envelope(rid, fresh, &ActionSpec::default(), &cert, dependent);
        self.certify(&env, &cert, 30_000)?;
        let mut cand = env;
        if let Some(o) = cand.as_object_mut() {
            o.insert("obligation".into(), json!(oid));
        }
        let post_ns = ns_since(self.origin);
        let (st, rep) = self.c.call(
            "POST",
            &format!("/v1/obligations/{oid}/candidates"),
            &self.c.agent.clone(),
            &cand,
        );
        if st != 200 {
            return Ok(Recovery::default());
        }
        let (decided, seq) = Self::decision(&rep["current"]["components"][0]);
        let status_ok =
            !dependent || Self::decision(&rep["current"]["components"][1]).0 == "emitted";
        let fresh_sequence = seq.as_ref().is_some_and(|s| !self.sequences.contains(s));
        if let Some(s) = seq {
            self.sequences.insert(s);
        }
        let dispatched = decided == "dispatched" && status_ok;
        Ok(Recovery {
            dispatched,
            fresh_sequence,
            seen: dispatched && self.taken(&fresh_fp, post_ns, Duration::from_secs(3)),
        })
    }
}

/// One cold start's flight: take off, the script, land.
fn flight<T>(
    c: &mut Client,
    vehicle: &dyn Evidence,
    world: &Mutex<World>,
    origin: Instant,
    script: impl FnOnce(&mut Agent<'_>) -> Result<T, DemoError>,
) -> Result<T, DemoError> {
    c.arm_and_take_off(5.0)?;
    let hover = vehicle
        .position()
        .ok_or_else(|| DemoError("no position from the vehicle".into()))?;
    let mut agent = Agent {
        c,
        vehicle,
        world,
        origin,
        generation: 0,
        sequences: HashSet::new(),
        hover: [hover[0], hover[1], hover[2] - 1.0],
        targets: HashSet::new(),
    };
    let result = script(&mut agent);
    let _ = agent.c.operator("land", &json!({}));
    agent
        .c
        .wait(40, |c| c.status()["vehicle"]["armed"] == false);
    result
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
