//! What the HALO replay panel should find (the paper's Table 3a), from this oracle's own reading
//! of the specification: its own reading of the catalog's text (footprints, age limits, rules,
//! certificate and interval requirements), its own LocalOK over a world (the baseline state and
//! a drift), and its own greatest closed set over the declared prerequisites. It shares no code
//! with the core. It classifies each unsupported action's failure as a stale epoch (a claimed
//! epoch moved), wrong bounds (a claimed corridor provenance moved, or the target left it) or
//! other, and names the orphan opportunities (locally supported components with a prerequisite
//! outside the set).
//!
//! The evaluation crate's replay runner (`halo-eval replay`) feeds it the recorded envelopes
//! and compares every variant's outcome with [`expected`].

#![allow(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: reading `v[\"key\"]` yields Null for a \
              missing key or a non-object and never panics"
)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

#[derive(Clone, Debug)]
enum Rule {
    Flag(String),
    MinNumber(String, f64),
    MaxNumber(String, f64),
    WithinBounds(String),
    MaxAltitude(f64),
    MaxDistance(String, f64),
    Separation(String, f64),
    TextIn(String, Vec<String>),
}

#[derive(Clone, Debug)]
struct OracleType {
    action: bool,
    footprint: Vec<(String, u64)>,
    requires_certificate: bool,
    interval: bool,
    guard_ms: u64,
    rules: Vec<Rule>,
}

/// Why the oracle finds a component unsupported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// A claimed epoch is no longer current.
    StaleEpoch,
    /// The claimed corridor provenance moved, or the target is outside the corridor.
    WrongBounds,
    /// Anything else (a rule, a lost certificate, a stale source).
    Other,
}

/// The oracle: its own reading of a catalog.
pub struct Oracle {
    bounds_sources: BTreeSet<String>,
    types: BTreeMap<String, OracleType>,
}

fn f64_of(v: &toml::Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

impl Oracle {
    /// Reads a catalog's text (TOML) its own way.
    ///
    /// # Errors
    /// What it cannot read, for people.
    pub fn read(catalog_text: &str) -> Result<Oracle, String> {
        let t: toml::Table = toml::from_str(catalog_text).map_err(|e| e.to_string())?;
        let guard = t
            .get("catalog")
            .and_then(|c| c.get("adapter_guard_ms"))
            .and_then(toml::Value::as_integer)
            .unwrap_or(0);
        let bounds_sources = t
            .get("sources")
            .and_then(toml::Value::as_table)
            .map(|s| {
                s.iter()
                    .filter(|(_, v)| v.get("bounds").and_then(toml::Value::as_bool) == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut types = BTreeMap::new();
        for (name, ty) in t
            .get("types")
            .and_then(toml::Value::as_table)
            .ok_or("no [types]")?
        {
            let s = |k: &str| ty.get(k).and_then(toml::Value::as_str);
            let footprint = ty
                .get("footprint")
                .and_then(toml::Value::as_table)
                .map(|f| {
                    f.iter()
                        .map(|(k, v)| (k.clone(), v.as_integer().unwrap_or(0).max(0) as u64))
                        .collect()
                })
                .unwrap_or_default();
            let mut rules = Vec::new();
            for r in ty
                .get("rules")
                .and_then(toml::Value::as_array)
                .into_iter()
                .flatten()
            {
                let src = || {
                    r.get("source")
                        .and_then(toml::Value::as_str)
                        .map(String::from)
                };
                let num = |k: &str| r.get(k).and_then(f64_of);
                let rule = match r.get("kind").and_then(toml::Value::as_str) {
                    Some("flag") => src().map(Rule::Flag),
                    Some("min_number") => src().zip(num("min")).map(|(s, m)| Rule::MinNumber(s, m)),
                    Some("max_number") => src().zip(num("max")).map(|(s, m)| Rule::MaxNumber(s, m)),
                    Some("within_bounds") => src().map(Rule::WithinBounds),
                    Some("max_altitude") => num("max_m").map(Rule::MaxAltitude),
                    Some("max_distance") => src()
                        .zip(num("max_m"))
                        .map(|(s, m)| Rule::MaxDistance(s, m)),
                    Some("separation") => {
                        src().zip(num("min_m")).map(|(s, m)| Rule::Separation(s, m))
                    }
                    Some("text_in") => src().map(|s| {
                        let allowed = r
                            .get("allowed")
                            .and_then(toml::Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| x.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        Rule::TextIn(s, allowed)
                    }),
                    other => {
                        return Err(format!(
                            "types.{name}: rule kind {other:?} unknown to the oracle"
                        ));
                    }
                };
                rules.push(
                    rule.ok_or_else(|| format!("types.{name}: a rule the oracle cannot read"))?,
                );
            }
            types.insert(
                name.clone(),
                OracleType {
                    action: s("class") == Some("action"),
                    footprint,
                    requires_certificate: ty
                        .get("requires_certificate")
                        .and_then(toml::Value::as_bool)
                        == Some(true),
                    interval: s("temporal") == Some("interval"),
                    guard_ms: ty
                        .get("adapter_guard_ms")
                        .and_then(toml::Value::as_integer)
                        .unwrap_or(guard)
                        .max(0) as u64,
                    rules,
                },
            );
        }
        Ok(Oracle {
            bounds_sources,
            types,
        })
    }

    /// The oracle's LocalOK for one component: `None` when supported, else the failure class
    /// (a stale epoch outranks wrong bounds, which outranks anything else).
    /// LocalOK of one component (the envelope's JSON) in world `w`: `None` when supported.
    pub fn local(&self, c: &Value, w: &World) -> Option<Failure> {
        let ty = self.types.get(c["type"].as_str()?)?;
        let mut fails = BTreeSet::new();
        for (src, age) in &ty.footprint {
            let Some(st) = w.sources.get(src) else {
                fails.insert(Failure::Other);
                continue;
            };
            if w.now_ms.saturating_sub(st.generated_ms) > *age {
                fails.insert(Failure::Other);
            }
            let claim = &c["support"][src.as_str()];
            if claim["epoch"].as_u64().is_some_and(|e| e != st.epoch) {
                fails.insert(Failure::StaleEpoch);
            }
            if claim["provenance"]
                .as_str()
                .is_some_and(|p| p != st.provenance)
            {
                fails.insert(if self.bounds_sources.contains(src) {
                    Failure::WrongBounds
                } else {
                    Failure::Other
                });
            }
        }
        if ty.requires_certificate {
            let until = c["certificate"]
                .as_str()
                .and_then(|id| w.certificates.get(id).copied());
            match until {
                None => {
                    fails.insert(Failure::Other);
                }
                Some(until) if ty.interval => {
                    let span = c["payload"]["duration_s"].as_f64().unwrap_or(0.0) * 1000.0;
                    if w.now_ms as f64 + span + ty.guard_ms as f64 >= until as f64 {
                        fails.insert(Failure::Other);
                    }
                }
                Some(_) => {}
            }
        }
        let p = &c["payload"];
        let target = p["north_m"]
            .as_f64()
            .zip(p["east_m"].as_f64())
            .zip(p["down_m"].as_f64());
        for r in &ty.rules {
            let val = |s: &str| w.sources.get(s).map(|x| &x.value);
            let ok = match r {
                Rule::Flag(s) => val(s).and_then(Value::as_bool) == Some(true),
                Rule::MinNumber(s, m) => val(s).and_then(Value::as_f64).is_some_and(|x| x >= *m),
                Rule::MaxNumber(s, m) => val(s).and_then(Value::as_f64).is_some_and(|x| x <= *m),
                Rule::TextIn(s, allowed) => val(s)
                    .and_then(Value::as_str)
                    .is_some_and(|x| allowed.iter().any(|a| a == x)),
                Rule::WithinBounds(s) => {
                    let inside = match (target, val(s)) {
                        (Some(((n, e), d)), Some(b)) => {
                            let g = |k: &str| b[k].as_f64().unwrap_or(f64::NAN);
                            n >= g("north_min")
                                && n <= g("north_max")
                                && e >= g("east_min")
                                && e <= g("east_max")
                                && d >= g("down_min")
                                && d <= g("down_max")
                        }
                        _ => false,
                    };
                    if !inside {
                        fails.insert(Failure::WrongBounds);
                    }
                    true
                }
                Rule::MaxAltitude(m) => target.is_some_and(|((_, _), d)| -d <= *m),
                Rule::MaxDistance(s, m) => match (target, val(s)) {
                    (Some(((n, e), _)), Some(h)) => {
                        let (hn, he) = (
                            h["north_m"].as_f64().unwrap_or(f64::NAN),
                            h["east_m"].as_f64().unwrap_or(f64::NAN),
                        );
                        ((n - hn).powi(2) + (e - he).powi(2)).sqrt() <= *m
                    }
                    _ => false,
                },
                Rule::Separation(s, m) => match (target, val(s).and_then(Value::as_array)) {
                    (Some(((n, e), d)), Some(list)) => list.iter().all(|x| {
                        let g = |k: &str| x[k].as_f64().unwrap_or(f64::NAN);
                        ((n - g("north_m")).powi(2)
                            + (e - g("east_m")).powi(2)
                            + (d - g("down_m")).powi(2))
                        .sqrt()
                            >= *m
                    }),
                    _ => false,
                },
            };
            if !ok {
                fails.insert(Failure::Other);
            }
        }
        fails.into_iter().next()
    }
}

/// One source as the oracle sees it.
#[derive(Clone, Debug)]
pub struct OracleSource {
    /// Its value (JSON, as providers send it).
    pub value: Value,
    /// Its epoch.
    pub epoch: u64,
    /// Who produced it.
    pub provenance: String,
    /// When it was generated, ms.
    pub generated_ms: u64,
}

/// The world as the oracle sees it at the effect: baseline plus the condition's drift.
#[derive(Clone, Debug)]
pub struct World {
    /// The effect's instant, ms.
    pub now_ms: u64,
    /// The sources, by name.
    pub sources: BTreeMap<String, OracleSource>,
    /// Known, unrevoked certificates: id → valid until (ms).
    pub certificates: BTreeMap<String, u64>,
}

/// What the oracle expects for one response under one condition.
pub struct Expected {
    /// Components in the oracle's greatest closed set.
    pub supported: BTreeSet<String>,
    /// Unsupported actions, by failure class.
    pub unsupported_actions: BTreeMap<String, Failure>,
    /// Locally supported components with a prerequisite outside the set.
    pub orphan_opportunities: BTreeSet<String>,
}

/// A component's declared prerequisites (id, phase), as the envelope's JSON states them.
pub fn prerequisites(c: &Value) -> Vec<(String, String)> {
    c["requires"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["id"].as_str()?.to_string(),
                r["phase"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// What should happen to the envelope `env` in world `w`: the greatest closed set of locally
/// supported components, the unsupported actions by failure class, the orphan opportunities.
pub fn expected(oracle: &Oracle, env: &Value, w: &World) -> Expected {
    let comps: Vec<&Value> = env["components"].as_array().into_iter().flatten().collect();
    let mut local: BTreeMap<String, Option<Failure>> = BTreeMap::new();
    for c in &comps {
        let id = c["id"].as_str().unwrap_or_default().to_string();
        local.insert(id, oracle.local(c, w));
    }
    let mut member: BTreeMap<String, bool> = local
        .iter()
        .map(|(k, f)| (k.clone(), f.is_none()))
        .collect();
    loop {
        let mut changed = false;
        for c in &comps {
            let id = c["id"].as_str().unwrap_or_default();
            if member.get(id) == Some(&true)
                && prerequisites(c)
                    .iter()
                    .any(|(p, _)| member.get(p) != Some(&true))
            {
                member.insert(id.to_string(), false);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut e = Expected {
        supported: member
            .iter()
            .filter(|(_, m)| **m)
            .map(|(k, _)| k.clone())
            .collect(),
        unsupported_actions: BTreeMap::new(),
        orphan_opportunities: BTreeSet::new(),
    };
    for c in &comps {
        let id = c["id"].as_str().unwrap_or_default().to_string();
        let action = c["type"]
            .as_str()
            .and_then(|t| oracle.types.get(t))
            .is_some_and(|t| t.action);
        match local.get(&id).copied().flatten() {
            Some(f) if action => {
                e.unsupported_actions.insert(id, f);
            }
            Some(_) => {}
            None => {
                if member.get(&id) != Some(&true) {
                    e.orphan_opportunities.insert(id);
                }
            }
        }
    }
    e
}
