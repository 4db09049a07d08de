//! The recovery-route panel through the running service (`recovery-routes`): 24 ways a
//! component is withheld (`halo-eval/data/recovery-routes.json`), each run twice in one flight
//! per cold start — alone, and with a status that waits for it — 48 routes, then six controls.
//!
//! Whether a route is executable or terminal comes from this module's own reading of the
//! catalog's TOML (the `recoverable` list of the component's type), not from the core: an
//! executable route must leave an obligation, and the agent's fresh candidate — sent after the
//! world is back to the baseline, to a target of its own — must be readmitted, dispatched with a
//! sequence new to the flight (its dependent status emitted) and taken by the vehicle; a
//! terminal route must leave no obligation. Either way the withheld component must have the
//! reason the data file names, its dependent status must be withheld as `PARENT_WITHHELD`, and
//! the vehicle must never take the withheld target.
//!
//! The controls, each on an obligation of its own, must be refused with nothing of them taken
//! by the vehicle: the withheld response sent again whole, a used candidate sent again, a
//! candidate with the obligation's own generation, a candidate naming the withheld action's
//! certificate, the withheld action itself as its candidate (five attempts to reuse a prior
//! authorization), and a candidate naming a component outside the obligation's scope.

#![allow(
    clippy::indexing_slicing,
    reason = "serde_json::Value and toml::Value indexing return Null or panic-free lookups"
)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::demo::{DemoError, err};
use crate::px4_panels::{Peer, PeerObserver, fingerprint, ns_since};
use crate::px4_profiles::{ActionSpec, Agent, Condition, DWELL, Step, one_cold_start};
use halo_core::catalog::Catalog;

/// The data file, compiled in so the binary runs from any directory.
const ROUTES: &str = include_str!("../data/recovery-routes.json");

/// One route of the data file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    name: String,
    #[serde(default)]
    setup: Vec<Step>,
    #[serde(default)]
    action: ActionSpec,
    expect: String,
}

/// The 48 routes: each of the file's 24 alone and with a dependent status, as conditions, with
/// `recover` set from `recoverable` (this module's reading of the catalog).
///
/// # Errors
/// [`DemoError`] when the file does not parse, a name repeats or an expectation is not a
/// reason code.
fn routes(recoverable: &dyn Fn(&str, &str) -> bool) -> Result<Vec<Condition>, DemoError> {
    #[derive(Deserialize)]
    struct File {
        #[allow(dead_code, reason = "documentation in the data file")]
        note: String,
        routes: Vec<RouteSpec>,
    }
    let f: File = serde_json::from_str(ROUTES).map_err(err("recovery-routes.json"))?;
    let mut out = Vec::new();
    for dependent in [false, true] {
        for r in &f.routes {
            if halo_core::ReasonCode::from_name(&r.expect).is_none() {
                return Err(DemoError(format!(
                    "`{}`: `{}` is not a reason code",
                    r.name, r.expect
                )));
            }
            if out
                .iter()
                .any(|c: &Condition| c.name == r.name && c.dependent == dependent)
            {
                return Err(DemoError(format!("route `{}` repeats", r.name)));
            }
            let kind = r.action.kind.as_deref().unwrap_or("route_action");
            let mut action = r.action.clone();
            if dependent {
                // A target of its own in the second pass too (one metre east).
                action.target_m = action.target_m.map(|t| [t[0], t[1] + 1.0, t[2]]);
            }
            out.push(Condition {
                name: r.name.clone(),
                class: "route".into(),
                profile: if dependent { "with status" } else { "alone" }.into(),
                setup: r.setup.clone(),
                action,
                expect: r.expect.clone(),
                recover: recoverable(kind, &r.expect),
                dependent,
            });
        }
    }
    Ok(out)
}

/// This module's reading of the catalog: whether the catalog lets `kind` recover from
/// `reason` (the reason is in `[types.KIND.recovery].recoverable`).
///
/// # Errors
/// [`DemoError`] when the text is not TOML.
fn recoverable_reading(catalog_toml: &str) -> Result<impl Fn(&str, &str) -> bool, DemoError> {
    let doc: toml::Value = toml::from_str(catalog_toml).map_err(err("catalog"))?;
    Ok(move |kind: &str, reason: &str| {
        doc.get("types")
            .and_then(|t| t.get(kind))
            .and_then(|t| t.get("recovery"))
            .and_then(|r| r.get("recoverable"))
            .and_then(toml::Value::as_array)
            .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(reason)))
    })
}

/// What one route did.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteOutcome {
    /// The route's name.
    pub name: String,
    /// Run with a dependent status.
    pub dependent: bool,
    /// Executable by this module's reading of the catalog.
    pub executable: bool,
    /// What the gateway answered and the vehicle did (see [`crate::px4_profiles::Outcome`]).
    pub outcome: crate::px4_profiles::Outcome,
}

impl RouteOutcome {
    /// The reason, the obligation (present exactly when executable), the dependent status,
    /// the vehicle's record and the recovery all as this module expects.
    pub fn matched(&self) -> bool {
        let o = &self.outcome;
        // An executable route is withheld and owed an obligation; a terminal one is withheld
        // (a non-action) or invalidated (an action) and owed nothing.
        let phase_ok = if self.executable {
            o.phase == "withheld"
        } else {
            o.phase == "withheld" || o.phase == "invalidated"
        };
        let status_ok = o.dependent.as_deref()
            == if self.executable || o.phase == "withheld" {
                Some("PARENT_WITHHELD")
            } else {
                Some("PARENT_FAILED")
            };
        o.decided == o.expect
            && phase_ok
            && !o.seen
            && o.obligation.is_some() == self.executable
            && (!self.dependent || status_ok)
            && match (&o.recovery, self.executable) {
                (Some(r), true) => r.dispatched && r.fresh_sequence && r.seen,
                (None, false) => true,
                _ => false,
            }
    }
}

/// One control's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Control {
    /// What was attempted.
    pub name: &'static str,
    /// `reuse` (a prior authorization) or `scope`.
    pub kind: &'static str,
    /// The gateway refused it (an error answer, or nothing dispatched).
    pub refused: bool,
    /// The refusal's code, or what was answered.
    pub code: String,
    /// The vehicle took its target.
    pub seen: bool,
}

/// The panel's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cold starts run.
    pub cold_starts: usize,
    /// Every route of every cold start.
    pub routes: Vec<RouteOutcome>,
    /// Every control of every cold start.
    pub controls: Vec<Control>,
    /// Wall time, s.
    pub wall_s: f64,
}

impl Report {
    /// `(matched, routes)`.
    pub fn matched(&self) -> (usize, usize) {
        (
            self.routes.iter().filter(|r| r.matched()).count(),
            self.routes.len(),
        )
    }

    /// `(executable routes that recovered fresh, executable routes)`.
    pub fn executable(&self) -> (usize, usize) {
        let e: Vec<&RouteOutcome> = self.routes.iter().filter(|r| r.executable).collect();
        (e.iter().filter(|r| r.matched()).count(), e.len())
    }

    /// `(terminal routes that ended with no obligation and nothing dispatched, terminal
    /// routes)`.
    pub fn terminal(&self) -> (usize, usize) {
        let t: Vec<&RouteOutcome> = self.routes.iter().filter(|r| !r.executable).collect();
        (t.iter().filter(|r| r.matched()).count(), t.len())
    }

    /// Withheld targets the vehicle took (unauthorized dispatch).
    pub fn unauthorized(&self) -> usize {
        self.routes.iter().filter(|r| r.outcome.seen).count()
    }

    /// `(controls refused with nothing taken by the vehicle, controls)`.
    pub fn controls_refused(&self) -> (usize, usize) {
        (
            self.controls
                .iter()
                .filter(|c| c.refused && !c.seen)
                .count(),
            self.controls.len(),
        )
    }

    /// Draws the panel as an SVG at `path`.
    ///
    /// # Errors
    /// [`DemoError`] when the file cannot be written.
    pub fn plot(&self, path: &Path) -> Result<(), DemoError> {
        let taken = |exec: bool| {
            let r: Vec<&RouteOutcome> = self
                .routes
                .iter()
                .filter(|r| r.executable == exec)
                .collect();
            (r.iter().filter(|r| r.outcome.seen).count(), r.len())
        };
        let (c, cn) = self.controls_refused();
        let seen = self.controls.iter().filter(|c| c.seen).count();
        crate::plots::grouped_shares(
            path,
            &format!(
                "recovery-routes through the running service ({})",
                crate::px4_panels::cold_starts_text(self.cold_starts)
            ),
            &[
                "as expected (recovered fresh / no authority / refused)",
                "withheld target taken by the vehicle",
            ],
            &[
                ("executable".into(), vec![self.executable(), taken(true)]),
                ("terminal".into(), vec![self.terminal(), taken(false)]),
                ("controls".into(), vec![(c, cn), (seen, cn)]),
            ],
        )
    }

    /// Prints the panel with its denominators.
    pub fn print(&self) {
        let (m, n) = self.matched();
        let (e, en) = self.executable();
        let (t, tn) = self.terminal();
        let (c, cn) = self.controls_refused();
        println!(
            "recovery-routes: {m}/{n} matched ({}; {:.0} s wall)",
            crate::px4_panels::cold_starts_text(self.cold_starts),
            self.wall_s
        );
        println!("  fresh executable recovery   {e}/{en}");
        println!("  terminal, no authority      {t}/{tn}");
        println!("  unauthorized dispatch       {}/{n}", self.unauthorized());
        println!(
            "  controls refused            {c}/{cn} (reuse of a prior authorization {}, out of scope {})",
            self.controls.iter().filter(|c| c.kind == "reuse").count(),
            self.controls.iter().filter(|c| c.kind == "scope").count()
        );
        let per_start = self.controls.len() / self.cold_starts.max(1);
        for ctl in self.controls.iter().take(per_start) {
            println!(
                "    {:<52} {}{}",
                ctl.name,
                ctl.code,
                if ctl.seen {
                    " (taken by the vehicle)"
                } else {
                    ""
                }
            );
        }
        for r in self.routes.iter().filter(|r| !r.matched()) {
            let o = &r.outcome;
            println!(
                "  not matched: {} ({}, {}) expected {}, the gateway answered {} {}{}, {} obligation, the vehicle {} it{}",
                r.name,
                o.profile,
                if r.executable {
                    "executable"
                } else {
                    "terminal"
                },
                o.expect,
                o.phase,
                o.decided,
                o.dependent
                    .as_ref()
                    .map_or(String::new(), |d| format!(" (its status {d})")),
                if o.obligation.is_some() { "an" } else { "no" },
                if o.seen { "took" } else { "never took" },
                o.recovery.as_ref().map_or(String::new(), |x| format!(
                    "; its recovery {}dispatched, {}a new sequence, {}taken",
                    if x.dispatched { "" } else { "not " },
                    if x.fresh_sequence { "" } else { "not " },
                    if x.seen { "" } else { "not " }
                ))
            );
        }
    }
}

/// Runs `cold_starts` cold starts of the 48 routes and the six controls against `catalog_toml`
/// (the service loads it; this module reads it on its own for the expected outcomes).
///
/// # Errors
/// [`DemoError`] when the catalog or the data file is wrong, a step cannot run, or the vehicle
/// does not respond (a harness error, not a result).
pub async fn run(
    catalog_toml: &str,
    out: &Path,
    cold_starts: usize,
    peer: &Peer,
) -> Result<Report, DemoError> {
    run_with(catalog_toml, catalog_toml, out, cold_starts, peer, |_| true).await
}

/// [`run`] with the service on `service_toml` and the expectations read from `oracle_toml`
/// (they differ only to show the panel catching a planted defect), over the routes `keep`
/// selects by name.
///
/// # Errors
/// As [`run`], and when `keep` selects nothing.
pub async fn run_with(
    service_toml: &str,
    oracle_toml: &str,
    out: &Path,
    cold_starts: usize,
    peer: &Peer,
    keep: impl Fn(&str) -> bool,
) -> Result<Report, DemoError> {
    let catalog = Catalog::parse(service_toml, "catalog").map_err(err("catalog"))?;
    let reading = recoverable_reading(oracle_toml)?;
    let conds: Vec<Condition> = routes(&reading)?
        .into_iter()
        .filter(|c| keep(&c.name))
        .collect();
    if conds.is_empty() {
        return Err(DemoError("no route selected".into()));
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
        let run = one_cold_start(
            &catalog,
            &dir,
            k,
            peer,
            origin,
            observer.get(),
            &crate::demo::Eval::default(),
            move |agent, _| {
                let mut outcomes = Vec::new();
                for (n, c) in script_conds.iter().enumerate() {
                    let o = agent.condition(k, n, c)?;
                    outcomes.push(RouteOutcome {
                        name: c.name.clone(),
                        dependent: c.dependent,
                        executable: c.recover,
                        outcome: o,
                    });
                }
                Ok((outcomes, controls(agent, k)?))
            },
        )
        .await;
        match run {
            Ok((r, c)) => {
                report.routes.extend(r);
                report.controls.extend(c);
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        println!(
            "  cold start {}/{cold_starts}: {} routes and 6 controls, {:.0} s so far",
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

/// A route action the gateway withholds for a map epoch the agent planned against before the
/// current one: `(envelope, obligation, certificate id, target)`.
fn withheld(
    agent: &mut Agent<'_>,
    rid: &str,
    target: [f64; 4],
) -> Result<(Value, u64, String), DemoError> {
    agent.claim(target)?;
    let cert = format!("cert-{rid}");
    let stale = ActionSpec {
        claims: serde_json::from_value(json!({"map": {"epoch": 6}})).ok(),
        ..ActionSpec::default()
    };
    let env = agent.envelope(rid, target, &stale, &cert, false);
    agent.certify(&env, &cert, 30_000)?;
    let rep = agent.c.submit("/v1/responses", &env)?;
    let oid = rep["components"][0]["obligation"].as_u64().ok_or_else(|| {
        DemoError(format!(
            "{rid}: the control's withheld action has no obligation: {rep}"
        ))
    })?;
    Ok((env, oid, cert))
}

/// Sends `cand` to obligation `oid`; `(refused, code)`.
fn send_candidate(agent: &mut Agent<'_>, oid: u64, cand: &Value) -> (bool, String) {
    let (st, rep) = agent.c.call(
        "POST",
        &format!("/v1/obligations/{oid}/candidates"),
        &agent.c.agent.clone(),
        cand,
    );
    if st != 200 {
        return (
            true,
            rep["error"]["code"]
                .as_str()
                .unwrap_or("refused")
                .to_string(),
        );
    }
    let (decided, seq) = Agent::decision(&rep["current"]["components"][0]);
    if let Some(s) = seq {
        agent.sequences.insert(s);
    }
    (decided != "dispatched", decided)
}

fn as_candidate(mut env: Value, oid: u64) -> Value {
    if let Some(o) = env.as_object_mut() {
        o.insert("obligation".into(), json!(oid));
    }
    env
}

/// The six controls, each on an obligation of its own.
fn controls(agent: &mut Agent<'_>, k: usize) -> Result<Vec<Control>, DemoError> {
    let h = agent.hover;
    let at = |i: f64| {
        [
            (h[0] - 2.0 - i).round(),
            (h[1] - 2.0).round(),
            (h[2] * 10.0).round() / 10.0,
            0.0,
        ]
    };
    let mut out = Vec::new();
    let mut judge = |agent: &mut Agent<'_>,
                     name: &'static str,
                     kind: &'static str,
                     target: [f64; 4],
                     post_ns: u64,
                     (refused, code): (bool, String)| {
        std::thread::sleep(DWELL);
        let seen = agent.taken(&fingerprint(target), post_ns, Duration::ZERO);
        out.push(Control {
            name,
            kind,
            refused,
            code,
            seen,
        });
    };

    // 1. The withheld response sent again whole.
    let t = at(0.0);
    let (env, _, _) = withheld(agent, &format!("ctl-{k}-1"), t)?;
    let post = ns_since(agent.origin);
    let (st, rep) = agent
        .c
        .call("POST", "/v1/responses", &agent.c.agent.clone(), &env);
    let answer = if st == 200 {
        (false, Agent::decision(&rep["components"][0]).0)
    } else {
        (
            true,
            rep["error"]["code"]
                .as_str()
                .unwrap_or("refused")
                .to_string(),
        )
    };
    judge(
        agent,
        "the withheld response sent again whole",
        "reuse",
        t,
        post,
        answer,
    );

    // 2. A used candidate sent again, after it was readmitted and flown.
    let t = at(1.0);
    let rid = format!("ctl-{k}-2");
    let (_, oid, _) = withheld(agent, &rid, at(6.0))?;
    agent.claim(t)?;
    let cert = format!("cert-{rid}-fresh");
    let fresh = agent.envelope(&rid, t, &ActionSpec::default(), &cert, false);
    agent.certify(&fresh, &cert, 30_000)?;
    let cand = as_candidate(fresh, oid);
    let first = send_candidate(agent, oid, &cand);
    if first.0 {
        return Err(DemoError(format!(
            "{rid}: the first, fresh candidate was refused ({}), so the control cannot run",
            first.1
        )));
    }
    // Another target streams first, so a second flight of `t` would show.
    let other = at(7.0);
    agent.claim(other)?;
    let rid_b = format!("ctl-{k}-2b");
    let cert_b = format!("cert-{rid_b}");
    let env_b = agent.envelope(&rid_b, other, &ActionSpec::default(), &cert_b, false);
    agent.certify(&env_b, &cert_b, 30_000)?;
    agent.c.submit("/v1/responses", &env_b)?;
    if !agent.taken(&fingerprint(other), 0, Duration::from_secs(3)) {
        return Err(DemoError(format!("{rid_b}: the vehicle never took it")));
    }
    let post = ns_since(agent.origin);
    let answer = send_candidate(agent, oid, &cand);
    judge(
        agent,
        "a used candidate sent again",
        "reuse",
        t,
        post,
        answer,
    );

    // 3. A candidate with the obligation's own generation.
    let t = at(2.0);
    let rid = format!("ctl-{k}-3");
    let (env, oid, _) = withheld(agent, &rid, at(8.0))?;
    agent.claim(t)?;
    let cert = format!("cert-{rid}-fresh");
    let mut cand = agent.envelope(&rid, t, &ActionSpec::default(), &cert, false);
    cand["generation"] = env["generation"].clone();
    agent.certify(&cand, &cert, 30_000)?;
    let post = ns_since(agent.origin);
    let answer = send_candidate(agent, oid, &as_candidate(cand, oid));
    judge(
        agent,
        "a candidate with the withheld response's generation",
        "reuse",
        t,
        post,
        answer,
    );

    // 4. A fresh candidate naming the withheld action's certificate.
    let t = at(3.0);
    let rid = format!("ctl-{k}-4");
    let (_, oid, old_cert) = withheld(agent, &rid, at(9.0))?;
    agent.claim(t)?;
    let cand = agent.envelope(&rid, t, &ActionSpec::default(), &old_cert, false);
    let post = ns_since(agent.origin);
    let answer = send_candidate(agent, oid, &as_candidate(cand, oid));
    judge(
        agent,
        "a candidate naming the withheld action's certificate",
        "reuse",
        t,
        post,
        answer,
    );

    // 5. The withheld action itself as its own candidate (a later generation).
    let rid = format!("ctl-{k}-5");
    let t = at(4.0);
    let (env, oid, _) = withheld(agent, &rid, t)?;
    let mut cand = env;
    agent.generation += 1;
    cand["generation"] = json!(agent.generation);
    let post = ns_since(agent.origin);
    let answer = send_candidate(agent, oid, &as_candidate(cand, oid));
    judge(
        agent,
        "the withheld action again as its own candidate",
        "reuse",
        t,
        post,
        answer,
    );

    // 6. A candidate naming a component outside the obligation's scope.
    let t = at(5.0);
    let rid = format!("ctl-{k}-6");
    let (_, oid, _) = withheld(agent, &rid, at(10.0))?;
    agent.claim(t)?;
    let cert = format!("cert-{rid}-fresh");
    let mut cand = agent.envelope(&rid, t, &ActionSpec::default(), &cert, false);
    cand["components"][0]["id"] = json!("b");
    agent.certify(&cand, &cert, 30_000)?;
    let post = ns_since(agent.origin);
    let answer = send_candidate(agent, oid, &as_candidate(cand, oid));
    judge(
        agent,
        "a candidate outside the obligation's scope",
        "scope",
        t,
        post,
        answer,
    );
    Ok(out)
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
        let (c, cn) = self.controls_refused();
        m == n && c == cn
    }
}
