//! Structured-response replay: the HALO paper's replay panel (Table 3a) over recorded agent
//! responses, through every mechanism variant of the core.
//!
//! A cohort is JSON lines, one recorded response per line:
//! `{"family": NAME, "provenance": {"digest": "sha256:HEX", ...}, "envelope": {...}}`, where the
//! digest is SHA-256 of the envelope as compact JSON with sorted keys (it is checked, so a
//! cohort cannot drift silently). `halo-gateway replay PATH` takes a file or a directory of
//! `.jsonl` files; `halo-core/tests/data/replay/cohort.jsonl` (written by
//! `scripts/gen_replay_cohort.py`) is the repository's cohort.
//!
//! Every response is replayed unchanged under each of twelve conditions (a drift of the world
//! after the agent answered: an epoch the response claims moves, the corridor is re-issued, the
//! link drops, ...) and each variant. The HALO variants decide at admission, before the drift,
//! and recheck later as their mechanisms allow; the AgentSpec comparators decide once, at the
//! protected operation, after the drift (the paper's post-mutation decision point).
//!
//! What should have happened comes from an oracle that shares no code with the core
//! ([`sitl::oracle::replay`]): its own reading of the catalog's text, its own LocalOK over the
//! baseline state and the drift, and its own greatest closed set over the declared
//! prerequisites. It classifies each unsupported component's failure as a stale epoch, wrong
//! bounds or other, and counts the opportunities.

#![allow(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: reading `v[\"key\"]` yields Null for a \
              missing key or a non-object and never panics, and the one write \
              (`payload[\"north_m\"]`) happens after reading a number there, so the payload is an object"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use sitl::oracle::replay::{Failure, Oracle, OracleSource, World, expected, prerequisites};

use halo_core::statefile::parse_state;
use halo_core::variant::Variant;
use halo_core::{
    Catalog, Certificate, Config, DispatchToken, Event, Gateway, Id, Nanos, RecordingAdapter,
    SourceUpdate,
};

/// The largest cohort file read.
pub const MAX_COHORT_BYTES: u64 = 64 << 20;

/// One recorded response.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Its family (structural kind); `malformed-*` families must be rejected whole.
    pub family: String,
    /// `file:line`, for messages.
    pub at: String,
    /// The envelope, unchanged.
    pub envelope: Value,
}

impl Recorded {
    fn malformed(&self) -> bool {
        self.family.starts_with("malformed")
    }
}

/// Reads a cohort: a `.jsonl` file, or every `.jsonl` file of a directory in name order.
///
/// # Errors
/// A message naming the file and line of the first bad record (not JSON, unknown or missing
/// keys, a digest that does not match its envelope).
pub fn read_cohort(path: &Path) -> Result<Vec<Recorded>, String> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        v.sort();
        if v.is_empty() {
            return Err(format!("{}: no .jsonl files", path.display()));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    for f in files {
        let bytes = crate::io::read_capped(&f, MAX_COHORT_BYTES, "replay cohort")
            .map_err(|e| e.to_string())?;
        let text =
            std::str::from_utf8(&bytes).map_err(|e| format!("{}: not UTF-8 ({e})", f.display()))?;
        for (k, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{}:{}", f.display(), k + 1);
            out.push(record(line, &at).map_err(|e| format!("{at}: {e}"))?);
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no recorded responses", path.display()));
    }
    Ok(out)
}

fn record(line: &str, at: &str) -> Result<Recorded, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("a record is a JSON object")?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "family" | "provenance" | "envelope"))
    {
        return Err(format!("unknown key `{k}` (family, provenance, envelope)"));
    }
    let envelope = obj.get("envelope").ok_or("no `envelope`")?.clone();
    let digest = obj
        .get("provenance")
        .and_then(|p| p.get("digest"))
        .and_then(Value::as_str)
        .ok_or("no `provenance.digest`")?;
    let want = envelope_digest(&envelope);
    if digest != want {
        return Err(format!(
            "provenance digest {digest} does not match the envelope ({want})"
        ));
    }
    let family = obj
        .get("family")
        .and_then(Value::as_str)
        .unwrap_or("recorded")
        .to_string();
    Ok(Recorded {
        family,
        at: at.to_string(),
        envelope,
    })
}

/// `sha256:HEX` of the envelope as compact JSON with sorted keys.
pub fn envelope_digest(envelope: &Value) -> String {
    let text = serde_json::to_string(envelope).unwrap_or_default();
    let d = Sha256::digest(text.as_bytes());
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

// --- the conditions ---------------------------------------------------------------------------

/// One drift of the world between the agent's answer and the effect.
#[derive(Clone, Debug)]
pub struct Condition {
    /// Name.
    pub name: &'static str,
    /// Source updates: (source, value, epoch, provenance).
    pub updates: Vec<(&'static str, Value, u64, &'static str)>,
    /// Every route certificate is revoked.
    pub revoke_certificates: bool,
}

/// The twelve conditions, against the baseline `docs/examples/state.json`.
pub fn conditions() -> Vec<Condition> {
    use serde_json::json;
    let bounds = json!({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.0});
    let c = |name, updates| Condition {
        name,
        updates,
        revoke_certificates: false,
    };
    vec![
        c("all-valid", vec![]),
        c(
            "map-epoch-moved",
            vec![("map", Value::Null, 8, "map-service")],
        ),
        c(
            "traffic-epoch-moved",
            vec![(
                "traffic",
                json!([{"north_m": 400.0, "east_m": 400.0, "down_m": -50.0}]),
                42,
                "utm-feed-a",
            )],
        ),
        c(
            "corridor-reissued",
            vec![("bounds", bounds.clone(), 3, "corridor-13")],
        ),
        c(
            "corridor-new-epoch",
            vec![("bounds", bounds, 4, "corridor-13")],
        ),
        c("link-lost", vec![("link", json!(false), 1, "link-monitor")]),
        c(
            "authority-revoked",
            vec![("authority", json!(false), 1, "operator")],
        ),
        c(
            "vehicle-landed",
            vec![("vehicle", json!("landed"), 1, "px4")],
        ),
        c("wind-over-limit", vec![("wind", json!(13.0), 1, "weather")]),
        c("battery-low", vec![("battery", json!(20.0), 1, "px4")]),
        Condition {
            name: "certificates-revoked",
            updates: vec![],
            revoke_certificates: true,
        },
        c(
            "unrelated-drift",
            vec![
                ("z_range", json!(9.0), 2, "rangefinder"),
                ("wind", json!(5.0), 1, "weather"),
            ],
        ),
    ]
}

// --- the runs -------------------------------------------------------------------------------

/// One variant's row of the panel, with its denominators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// Supported components (the oracle's closed set) that reached their output.
    pub kept: usize,
    /// Supported components.
    pub supported: usize,
    /// Actions with a stale claimed epoch that reached the adapter / such actions.
    pub epoch_leak: usize,
    /// Stale-epoch opportunities.
    pub epoch_opp: usize,
    /// Actions with wrong bounds that reached the adapter.
    pub bounds_leak: usize,
    /// Wrong-bounds opportunities.
    pub bounds_opp: usize,
    /// Actions unsupported for another reason that reached the adapter.
    pub other_leak: usize,
    /// Other-unsupported opportunities.
    pub other_opp: usize,
    /// Dependents that reached their output while a prerequisite never reached its phase.
    pub orphan_leak: usize,
    /// Orphan opportunities.
    pub orphan_opp: usize,
    /// Replayed spent tokens that reached the adapter again.
    pub replay_accepted: usize,
    /// Spent tokens replayed.
    pub replay_opp: usize,
    /// Modified instances (an action changed after its certificate was issued) dispatched.
    pub modified_dispatched: usize,
    /// Modified instances presented.
    pub modified_opp: usize,
    /// Malformed responses rejected whole.
    pub malformed_rejected: usize,
    /// Malformed responses.
    pub malformed: usize,
    /// Valid responses rejected whole (a broken cohort or baseline; 0 expected).
    pub valid_rejected: usize,
}

impl Row {
    fn add(&mut self, o: &Row) {
        self.kept += o.kept;
        self.supported += o.supported;
        self.epoch_leak += o.epoch_leak;
        self.epoch_opp += o.epoch_opp;
        self.bounds_leak += o.bounds_leak;
        self.bounds_opp += o.bounds_opp;
        self.other_leak += o.other_leak;
        self.other_opp += o.other_opp;
        self.orphan_leak += o.orphan_leak;
        self.orphan_opp += o.orphan_opp;
        self.replay_accepted += o.replay_accepted;
        self.replay_opp += o.replay_opp;
        self.modified_dispatched += o.modified_dispatched;
        self.modified_opp += o.modified_opp;
        self.malformed_rejected += o.malformed_rejected;
        self.malformed += o.malformed;
        self.valid_rejected += o.valid_rejected;
    }
}

/// The panel: one row per variant, and how many paired evaluations made it.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Rows, in [`Variant::ALL`] order.
    pub rows: Vec<(Variant, Row)>,
    /// Responses replayed (valid and malformed).
    pub responses: usize,
    /// Conditions.
    pub conditions: usize,
    /// Response × condition × variant runs.
    pub runs: usize,
}

/// The environment of one run: the catalog, the baseline state, and the instant of each step.
pub struct Replay {
    catalog: Catalog,
    oracle: Oracle,
    baseline: Vec<SourceUpdate>,
    baseline_certs: Vec<Certificate>,
    oracle_baseline: World,
    now: u64,
    issuer: Id,
}

const CERT_VALID_MS: u64 = 60_000;

impl Replay {
    /// Prepares a replay against a catalog and a baseline state file (both as text).
    ///
    /// # Errors
    /// The catalog or state does not load.
    pub fn new(catalog_text: &str, catalog_name: &str, state_text: &str) -> Result<Replay, String> {
        let catalog = Catalog::parse(catalog_text, catalog_name).map_err(|e| e.to_string())?;
        let oracle = Oracle::read(catalog_text)?;
        let st =
            parse_state(&catalog, state_text.as_bytes()).map_err(|e| e.message().to_string())?;
        // The oracle reads the same state file itself.
        let raw: Value = serde_json::from_str(state_text).map_err(|e| e.to_string())?;
        let now = raw["now_ms"].as_u64().ok_or("state: no now_ms")?;
        let mut sources = BTreeMap::new();
        for (name, s) in raw["sources"].as_object().into_iter().flatten() {
            sources.insert(
                name.clone(),
                OracleSource {
                    value: s["value"].clone(),
                    epoch: s["epoch"].as_u64().unwrap_or(0),
                    provenance: s["provenance"].as_str().unwrap_or_default().to_string(),
                    generated_ms: s["generated_at_ms"].as_u64().unwrap_or(0),
                },
            );
        }
        Ok(Replay {
            catalog,
            oracle,
            baseline: st.updates,
            baseline_certs: st.certificates,
            oracle_baseline: World {
                now_ms: now,
                sources,
                certificates: BTreeMap::new(),
            },
            now,
            issuer: Id::new("tube-verifier").map_err(|e| e.to_string())?,
        })
    }

    /// Replays every response under every condition and variant.
    pub fn run(&self, cohort: &[Recorded], variants: &[Variant]) -> Panel {
        let conds = conditions();
        let mut rows: Vec<(Variant, Row)> = variants.iter().map(|v| (*v, Row::default())).collect();
        let mut runs = 0;
        for rec in cohort {
            for cond in &conds {
                for (v, row) in &mut rows {
                    row.add(&self.one(rec, cond, *v));
                    runs += 1;
                }
            }
            for (v, row) in &mut rows {
                row.add(&self.modified(rec, *v));
            }
        }
        Panel {
            rows,
            responses: cohort.len(),
            conditions: conds.len(),
            runs,
        }
    }

    /// Route actions with a certificate id: (component id, certificate id).
    fn certified(env: &Value) -> Vec<(String, String)> {
        env["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    c["id"].as_str()?.to_string(),
                    c["certificate"].as_str()?.to_string(),
                ))
            })
            .collect()
    }

    fn gateway(&self, v: Variant, env_text: &str, certs: &[(String, String)]) -> Gateway {
        let mut gw = Gateway::new(
            self.catalog.clone(),
            Config {
                variant: v,
                ..Config::default()
            },
        );
        let t0 = Nanos::from_ms(self.now);
        for u in &self.baseline {
            let _ = gw.handle_source_update(t0, u.clone());
        }
        for c in &self.baseline_certs {
            let _ = gw.handle_certificate(t0, c.clone());
        }
        // The tube verifier certifies each certified action's exact digest, as issued.
        if let Ok(raw) = halo_core::envelope::parse_envelope(env_text.as_bytes())
            && let Ok(val) = halo_core::graph::validate(gw.catalog(), &raw)
        {
            for (cid, cert) in certs {
                let (Ok(cid), Ok(cert)) = (cid.parse::<Id>(), cert.parse::<Id>()) else {
                    continue;
                };
                if let Some(c) = val
                    .graph
                    .index_of(&cid)
                    .and_then(|i| val.graph.component(i))
                {
                    let _ = gw.handle_certificate(
                        t0,
                        Certificate {
                            id: cert,
                            covers: c.digest,
                            valid_until: Nanos::from_ms(self.now + CERT_VALID_MS),
                            issuer: self.issuer.clone(),
                        },
                    );
                }
            }
        }
        gw
    }

    fn drift(&self, gw: &mut Gateway, cond: &Condition, certs: &[(String, String)], at: u64) {
        let t = Nanos::from_ms(at);
        for (src, value, epoch, prov) in &cond.updates {
            let u = halo_core::statefile::ProviderUpdate {
                source: (*src).to_string(),
                value: value.clone(),
                epoch: *epoch,
                provenance: match prov.parse() {
                    Ok(p) => p,
                    Err(_) => continue,
                },
                generated_at_ms: at,
            };
            if let Ok(typed) = u.typed(gw.catalog()) {
                let _ = gw.handle_source_update(t, typed);
            }
        }
        if cond.revoke_certificates {
            for (_, cert) in certs {
                if let Ok(id) = cert.parse::<Id>() {
                    gw.handle_certificate_revoked(t, &id);
                }
            }
        }
    }

    fn world_after(&self, cond: &Condition, certs: &[(String, String)], at: u64) -> World {
        let mut w = self.oracle_baseline.clone();
        w.now_ms = at;
        for (src, value, epoch, prov) in &cond.updates {
            w.sources.insert(
                (*src).to_string(),
                OracleSource {
                    value: value.clone(),
                    epoch: *epoch,
                    provenance: (*prov).to_string(),
                    generated_ms: at,
                },
            );
        }
        if !cond.revoke_certificates {
            for (_, cert) in certs {
                w.certificates
                    .insert(cert.clone(), self.now + CERT_VALID_MS);
            }
        }
        w
    }

    /// Admits, drifts and dispatches one response under one condition and variant; counts
    /// against the oracle.
    fn one(&self, rec: &Recorded, cond: &Condition, v: Variant) -> Row {
        let env_text = rec.envelope.to_string();
        let certs = Self::certified(&rec.envelope);
        let mut gw = self.gateway(v, &env_text, &certs);
        let (t_admit, t_drift, t_effect) = (self.now + 100, self.now + 150, self.now + 200);
        let mut row = Row::default();
        // HALO's variants decide at admission, before the drift; the AgentSpec comparators at
        // the protected operation, after it.
        let post_mutation = !v.gates();
        if post_mutation {
            self.drift(&mut gw, cond, &certs, t_drift);
        }
        let decided_at = if post_mutation { t_drift } else { t_admit };
        let admitted = gw
            .handle_response(Nanos::from_ms(decided_at), env_text.as_bytes())
            .is_ok();
        if rec.malformed() {
            row.malformed = 1;
            row.malformed_rejected = usize::from(!admitted);
            return row;
        }
        if !admitted {
            row.valid_rejected = 1;
            return row;
        }
        if !post_mutation {
            self.drift(&mut gw, cond, &certs, t_drift);
        }
        let t = Nanos::from_ms(t_effect);
        let mut reached: BTreeSet<String> = BTreeSet::new();
        let mut dispatched: BTreeMap<String, usize> = BTreeMap::new();
        let mut ad = RecordingAdapter::new();
        let mut spent: Vec<Vec<u8>> = Vec::new();
        let rid: Id = match rec.envelope["response_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
        {
            Some(r) => r,
            None => return row,
        };
        loop {
            gw.handle_timeout(t);
            let tokens: Vec<DispatchToken> = std::iter::from_fn(|| gw.poll_dispatch()).collect();
            let mut progressed = false;
            for tok in tokens {
                let wire = tok.to_wire();
                let cid = tok.component().clone();
                let before = ad.calls.len();
                let _ = gw.final_gate(t, tok, &mut ad);
                if ad.calls.len() > before {
                    spent.push(wire);
                    *dispatched.entry(cid.to_string()).or_default() += 1;
                    // The vehicle echoes the target: downstream success.
                    let _ = gw.handle_observation(t, &rid, &cid, true);
                    progressed = true;
                }
            }
            while let Some(e) = gw.poll_event() {
                if let Event::Emit { component, .. } = e {
                    reached.insert(component.id().to_string());
                }
            }
            if !progressed {
                break;
            }
        }
        reached.extend(dispatched.keys().cloned());
        // Reused authorization: every spent token presented once more.
        let before = ad.calls.len();
        for w in &spent {
            if let Ok(tok) = DispatchToken::from_wire(w) {
                let _ = gw.final_gate(t, tok, &mut ad);
            }
        }
        row.replay_accepted = ad.calls.len() - before;
        row.replay_opp = spent.len();

        // The oracle's judgement of the world at the effect.
        let w = self.world_after(cond, &certs, t_effect);
        let exp = expected(&self.oracle, &rec.envelope, &w);
        row.supported = exp.supported.len();
        row.kept = exp
            .supported
            .iter()
            .filter(|c| reached.contains(*c))
            .count();
        for (cid, f) in &exp.unsupported_actions {
            let leaked = dispatched.contains_key(cid);
            let (leak, opp) = match f {
                Failure::StaleEpoch => (&mut row.epoch_leak, &mut row.epoch_opp),
                Failure::WrongBounds => (&mut row.bounds_leak, &mut row.bounds_opp),
                Failure::Other => (&mut row.other_leak, &mut row.other_opp),
            };
            *opp += 1;
            *leak += usize::from(leaked);
        }
        let comps: BTreeMap<&str, &Value> = rec.envelope["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c["id"].as_str()?, c)))
            .collect();
        for cid in &exp.orphan_opportunities {
            row.orphan_opp += 1;
            let Some(c) = comps.get(cid.as_str()) else {
                continue;
            };
            // A parent reached its phase when it was emitted or, for an action, dispatched
            // (every dispatched action is observed successful here).
            let parent_missing = prerequisites(c).iter().any(|(p, _)| !reached.contains(p));
            row.orphan_leak += usize::from(reached.contains(cid) && parent_missing);
        }
        row
    }

    /// The modified-instance control: each certified action is changed after its certificate
    /// was issued for the original, under the all-valid condition; it must not be dispatched.
    fn modified(&self, rec: &Recorded, v: Variant) -> Row {
        let mut row = Row::default();
        if rec.malformed() {
            return row;
        }
        let certs = Self::certified(&rec.envelope);
        if certs.is_empty() {
            return row;
        }
        let original = rec.envelope.to_string();
        let mut changed = rec.envelope.clone();
        for c in changed["components"].as_array_mut().into_iter().flatten() {
            if c.get("certificate").is_some()
                && let Some(n) = c["payload"]["north_m"].as_f64()
            {
                c["payload"]["north_m"] = Value::from(n + 1.0);
            }
        }
        // Certificates for the original digests, then the modified response.
        let mut gw = self.gateway(v, &original, &certs);
        let t = Nanos::from_ms(self.now + 100);
        if gw
            .handle_response(t, changed.to_string().as_bytes())
            .is_err()
        {
            return row;
        }
        let mut ad = RecordingAdapter::new();
        for tok in std::iter::from_fn(|| gw.poll_dispatch()).collect::<Vec<_>>() {
            let _ = gw.final_gate(t, tok, &mut ad);
        }
        row.modified_opp = certs.len();
        row.modified_dispatched = ad
            .calls
            .iter()
            .filter(|c| certs.iter().any(|(cid, _)| c.component.as_str() == cid))
            .count();
        row
    }
}

/// What each variant must show on a cohort (the paper's Table 3a reading): Full keeps every
/// supported component and leaks nothing; each reduced variant shows its own failure.
pub fn claims(panel: &Panel) -> Vec<(Variant, bool, &'static str)> {
    panel
        .rows
        .iter()
        .map(|(v, r)| {
            let no_leak = r.epoch_leak + r.bounds_leak + r.other_leak + r.orphan_leak == 0;
            let all_kept = r.kept == r.supported;
            let clean = r.valid_rejected == 0
                && r.malformed_rejected == r.malformed
                && r.modified_dispatched == 0;
            let (ok, what) = match v {
                Variant::Full => (
                    all_kept && no_leak && r.replay_accepted == 0,
                    "keeps every supported component, leaks nothing, refuses every replay",
                ),
                Variant::WholeResponse => (
                    !all_kept && no_leak && r.replay_accepted == 0,
                    "overblocks: supported components lost with their response",
                ),
                Variant::IndependentFilter => (
                    r.orphan_leak > 0 && r.epoch_leak + r.bounds_leak + r.other_leak == 0,
                    "leaks orphans: dependents of blocked actions",
                ),
                Variant::AdmissionOnly => (
                    r.epoch_leak > 0 && r.bounds_leak > 0 && r.orphan_leak == 0,
                    "leaks stale epochs and wrong bounds: no recheck after admission",
                ),
                Variant::AgentSpecGlobal => (
                    !all_kept && no_leak && r.replay_accepted == r.replay_opp && r.replay_opp > 0,
                    "one global decision overblocks; replayed tokens dispatch again",
                ),
                Variant::AgentSpecScoped => (
                    all_kept && no_leak && r.replay_accepted == r.replay_opp && r.replay_opp > 0,
                    "matches Full at its post-mutation decision; replayed tokens dispatch again",
                ),
                Variant::GlobalSnapshot => (
                    !all_kept && no_leak,
                    "overblocks on drift outside a component's footprint",
                ),
                Variant::LocalUnbound => (
                    r.epoch_leak > 0 && r.bounds_leak > 0 && r.other_leak == 0,
                    "leaks stale epochs and wrong bounds: claims not bound",
                ),
            };
            (*v, ok && clean, what)
        })
        .collect()
}

/// Each variant's expectation as text: `VARIANT yes|NO what it must show`, one line each (the
/// replay and transfer panels and `halo-gateway replay` print them alike).
pub fn render_claims(claims: &[(Variant, bool, &str)]) -> String {
    claims
        .iter()
        .map(|(v, ok, what)| {
            format!(
                "  {:<18} {} {what}\n",
                v.name(),
                if *ok { "yes" } else { "NO " }
            )
        })
        .collect()
}

/// The panel as text, one row per variant with its denominators.
pub fn render(panel: &Panel) -> String {
    let mut s = format!(
        "{} responses × {} conditions × {} variants = {} runs\n",
        panel.responses,
        panel.conditions,
        panel.rows.len(),
        panel.runs
    );
    s.push_str(&format!(
        "  {:<18} {:>15} {:>17} {:>18} {:>14} {:>13} {:>15} {:>13} {:>11}\n",
        "variant",
        "supported-kept↑",
        "stale-epoch-leak↓",
        "wrong-bounds-leak↓",
        "other-leak↓",
        "orphan-leak↓",
        "replay-accepted↓",
        "modified↓",
        "malformed"
    ));
    for (v, r) in &panel.rows {
        s.push_str(&format!(
            "  {:<18} {:>15} {:>17} {:>18} {:>14} {:>13} {:>15} {:>13} {:>11}\n",
            v.name(),
            format!("{}/{}", r.kept, r.supported),
            format!("{}/{}", r.epoch_leak, r.epoch_opp),
            format!("{}/{}", r.bounds_leak, r.bounds_opp),
            format!("{}/{}", r.other_leak, r.other_opp),
            format!("{}/{}", r.orphan_leak, r.orphan_opp),
            format!("{}/{}", r.replay_accepted, r.replay_opp),
            format!("{}/{}", r.modified_dispatched, r.modified_opp),
            format!("{}/{} rejected", r.malformed_rejected, r.malformed)
        ));
    }
    s
}
