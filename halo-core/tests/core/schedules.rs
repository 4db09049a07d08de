//! `schedules`: seeded schedules of valid and fault-injected events, with invariants checked at
//! every step against a shadow model written here, apart from the core's code: the shadow reads
//! the catalog's text itself (footprints, age limits, flag rules), keeps its own copy of every
//! source it published, evaluates its own LocalOK, keeps its own bookkeeping of each component
//! instance (generation, lost, failed, dispatched, emitted, the token polled for it, the witness
//! at binding) and predicts the gate from those alone. The gateway's own phases are used for one
//! thing only: a component the gateway ended for good (FAILED / INVALIDATED) is accepted as ended
//! when the shadow knows a cause (it or an ancestor was lost or failed in this generation);
//! without a cause it is a mismatch, so an over-blocking gateway is caught
//! (`the_shadow_catches_an_overblocking_gateway`). Invariants:
//!
//! - locality: an update of source `s` changes no component outside the footprints that contain
//!   `s` and their dependents; a gate call changes nothing outside the gated component and its
//!   dependents;
//! - local validity: every retained component is locally supported at `now`;
//! - closure: every retained component's parents are retained;
//! - greatest set: the retained set equals the shadow's descending-rejection fixed point;
//! - token non-reuse: no sequence reaches the adapter twice;
//! - no emission with a blocked parent;
//! - the adapter is called if and only if the shadow's four gate conjuncts held at that instant;
//! - rejected inputs (malformed responses, future updates, replayed tokens, out-of-scope or stale
//!   candidates) change nothing.
//!
//! `HALO_SCHEDULES` sets the number of schedules (default 10,000); `scripts/schedules.sh` runs
//! the full set in release mode.
use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use halo_core::statefile::ProviderUpdate;
use halo_core::{
    AdapterError, Config, DispatchToken, Event, GateOutcome, Gateway, Id, Nanos, Phase,
    RecordingAdapter, SourceIx, Variant,
};
use serde_json::{Value, json};

/// SplitMix64: small, seedable, good enough for schedule generation.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

const SOURCES: [&str; 5] = ["a", "b", "c", "d", "f"];
const KINDS: [&str; 6] = ["n_a", "n_bc", "n_free", "act_ab", "act_cdf", "act_d"];

#[derive(Clone, Debug, PartialEq)]
struct CompView {
    phase: Phase,
    retained: bool,
    reason: Option<String>,
    generation: u32,
    binding: Option<String>,
    local: bool,
}

// --- the shadow's own reading of the catalog and of the world -------------------------------

/// A component type as the shadow reads it from `catalogs/schedule.toml`.
#[derive(Clone)]
struct ShadowType {
    action: bool,
    /// Source name and age limit (ms).
    footprint: Vec<(String, u64)>,
    /// Sources whose flag value must be true (`{ kind = "flag", source = .. }` rules).
    flags: Vec<String>,
}

fn shadow_catalog() -> BTreeMap<String, ShadowType> {
    // Read once per process: the model checker makes a Sim for every state it explores.
    static TYPES: std::sync::OnceLock<BTreeMap<String, ShadowType>> = std::sync::OnceLock::new();
    TYPES.get_or_init(read_shadow_catalog).clone()
}

fn read_shadow_catalog() -> BTreeMap<String, ShadowType> {
    let text = std::fs::read_to_string(data_dir().join("catalogs/schedule.toml")).unwrap();
    let t: toml::Table = toml::from_str(&text).unwrap();
    let mut out = BTreeMap::new();
    for (name, ty) in t["types"].as_table().unwrap() {
        let footprint = ty
            .get("footprint")
            .and_then(|f| f.as_table())
            .map(|f| {
                f.iter()
                    .map(|(s, h)| (s.clone(), h.as_integer().unwrap() as u64))
                    .collect()
            })
            .unwrap_or_default();
        let flags = ty
            .get("rules")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
            .map(|r| {
                assert_eq!(
                    r["kind"].as_str(),
                    Some("flag"),
                    "the shadow knows flag rules only"
                );
                r["source"].as_str().unwrap().to_string()
            })
            .collect();
        out.insert(
            name.clone(),
            ShadowType {
                action: ty["class"].as_str() == Some("action"),
                footprint,
                flags,
            },
        );
    }
    out
}

/// A source as the shadow last published it (and the gateway accepted).
#[derive(Clone)]
struct ShadowSource {
    generated_ms: u64,
    epoch: u64,
    provenance: String,
    flag: bool,
}

/// The shadow's bookkeeping of one component instance (one generation).
#[derive(Clone, Default)]
struct ShadowInst {
    generation: u32,
    /// An undispatched action left the retained set, or the gate denied its current token.
    lost: bool,
    /// The adapter refused its enqueue, or its downstream observation failed.
    failed: bool,
    /// An ancestor was lost or failed during this generation (a cause for a terminal cascade).
    ancestor_ended: bool,
    dispatched: bool,
    emitted: bool,
    observed_ok: bool,
    /// The token polled for this generation: (boot, sequence number).
    seq: Option<(u64, u64)>,
    /// (epoch, provenance) of each footprint source when the action was bound.
    witness: Option<Vec<(u64, String)>>,
}

/// The shadow's verdicts for one component.
struct ShadowVerdict {
    member: bool,
    local: bool,
    action: bool,
    /// The gateway ended it for good (FAILED / INVALIDATED).
    terminal: bool,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) steps: u64,
    pub(crate) gate_calls: u64,
    pub(crate) adapter_calls: u64,
    pub(crate) replays: u64,
    pub(crate) rejections: u64,
    pub(crate) candidates_accepted: u64,
    pub(crate) restarts: u64,
    pub(crate) checks: BTreeMap<&'static str, u64>,
}

pub(crate) struct Sim {
    rng: Rng,
    gw: Gateway,
    cfg: Config,
    variant: Variant,
    boot: u64,
    now_ms: u64,
    adapter: RecordingAdapter,
    pool: Vec<DispatchToken>,
    spent: Vec<Vec<u8>>,
    used: BTreeSet<(u64, u64)>,
    /// The shadow: its catalog, sources, instances and armed adapter refusals.
    types: BTreeMap<String, ShadowType>,
    sources: BTreeMap<String, ShadowSource>,
    insts: BTreeMap<(String, String), ShadowInst>,
    refusals_armed: u32,
    /// Each live response's current components (accepted candidates applied).
    responses: BTreeMap<String, Value>,
    next_resp: u32,
    agent_gen: u64,
    epochs: BTreeMap<&'static str, (u64, String)>,
    emitted_this_step: Vec<(String, String)>,
    /// At most this many live responses (`Move::NewResponse`).
    pub(crate) max_responses: usize,
    /// A response has 2 + (a draw below this) components.
    pub(crate) extra_components: u64,
    /// The receipt chain of this start as the checker verifies it.
    chain: ChainCheck,
}

/// The checker's own verification of the receipt chain, receipt by receipt as the gateway
/// seals them: indices from 0, each `prev` the previous hash, each hash SHA-256 (the `sha2`
/// crate, not the core's own block function) over the receipt tag and the hashed fields'
/// canonical text as docs/contracts.md ("Receipts") states it. It also collects the gate records sealed since
/// the last [`ChainCheck::take_gates`].
#[derive(Default)]
pub(crate) struct ChainCheck {
    next: u64,
    prev: String,
    /// The first receipt that did not verify.
    broken: Option<String>,
    /// Gate records sealed: (boot, n, outcome).
    gates: Vec<(u64, u64, String)>,
}

impl ChainCheck {
    pub(crate) fn accept(&mut self, r: &halo_core::receipt::Receipt) {
        use sha2::Digest as _;
        if self.broken.is_some() {
            return;
        }
        let prev = if self.next == 0 {
            "0".repeat(64)
        } else {
            self.prev.clone()
        };
        let mut input = format!(
            "{{\"at_ns\":{},\"body\":{},\"index\":{},\"prev\":\"{prev}\"",
            r.at_ns,
            r.body.as_str(),
            r.index
        );
        if let Some(w) = r.wall_unix_ms {
            input.push_str(&format!(",\"wall_unix_ms\":{w}"));
        }
        input.push('}');
        let mut h = sha2::Sha256::new();
        h.update(b"halo/receipt/v1\0");
        h.update(input.as_bytes());
        let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let fault = if r.index != self.next {
            Some(format!("receipt {} where {} was due", r.index, self.next))
        } else if r.prev.to_hex() != prev {
            Some(format!(
                "receipt {}'s prev is not the previous hash",
                r.index
            ))
        } else if r.hash.to_hex() != want {
            Some(format!("receipt {}'s hash does not recompute", r.index))
        } else {
            None
        };
        if let Some(f) = fault {
            self.broken = Some(f);
            return;
        }
        self.next += 1;
        self.prev = want;
        let body = r.body.value();
        if body["kind"] == "gate" {
            self.gates.push((
                body["seq"]["boot"].as_u64().unwrap_or(u64::MAX),
                body["seq"]["n"].as_u64().unwrap_or(u64::MAX),
                body["outcome"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }

    fn take_gates(&mut self) -> Vec<(u64, u64, String)> {
        std::mem::take(&mut self.gates)
    }
}

fn new_gateway(boot: u64, cfg: &Config) -> Gateway {
    static CATALOG: std::sync::OnceLock<halo_core::Catalog> = std::sync::OnceLock::new();
    Gateway::new(
        CATALOG
            .get_or_init(|| catalog_named("schedule-test"))
            .clone(),
        Config {
            boot_epoch: boot,
            ..cfg.clone()
        },
    )
}

impl Sim {
    pub(crate) fn new(seed: u64, cfg: &Config) -> Sim {
        let mut s = Sim {
            rng: Rng(seed),
            gw: new_gateway(1, cfg),
            cfg: cfg.clone(),
            variant: cfg.variant,
            boot: 1,
            now_ms: 1_000,
            adapter: RecordingAdapter::new(),
            pool: Vec::new(),
            spent: Vec::new(),
            used: BTreeSet::new(),
            types: shadow_catalog(),
            sources: BTreeMap::new(),
            insts: BTreeMap::new(),
            refusals_armed: 0,
            responses: BTreeMap::new(),
            next_resp: 0,
            agent_gen: 1,
            epochs: SOURCES
                .iter()
                .map(|s| (*s, (1u64, "p".to_string())))
                .collect(),
            emitted_this_step: Vec::new(),
            max_responses: 3,
            extra_components: 9,
            chain: ChainCheck::default(),
        };
        for src in SOURCES {
            s.update(src, s.now_ms);
        }
        s
    }

    fn now(&self) -> Nanos {
        Nanos::from_ms(self.now_ms)
    }

    fn update(&mut self, src: &'static str, at_ms: u64) {
        self.update_with(src, at_ms, None);
    }

    /// A provider update of `src` generated at `at_ms`; source `f`'s value is `flag`, or drawn.
    fn update_with(&mut self, src: &'static str, at_ms: u64, flag: Option<bool>) {
        let (epoch, prov) = self.epochs[src].clone();
        let value = if src == "f" {
            json!(flag.unwrap_or_else(|| !self.rng.chance(0.1)))
        } else {
            Value::Null
        };
        let flag = value == json!(true);
        let u = ProviderUpdate {
            source: src.into(),
            value,
            epoch,
            provenance: prov.parse().unwrap(),
            generated_at_ms: at_ms,
        };
        let typed = u.typed(self.gw.catalog()).unwrap();
        self.gw.handle_source_update(self.now(), typed).unwrap();
        self.sources.insert(
            src.to_string(),
            ShadowSource {
                generated_ms: at_ms,
                epoch,
                provenance: prov,
                flag,
            },
        );
    }

    /// Admits a response in the gateway and opens the shadow's first-generation instances.
    fn admit(&mut self, rid: String, resp: Value) -> Result<(), String> {
        self.gw
            .handle_response(self.now(), resp.to_string().as_bytes())
            .map_err(|e| format!("response {rid}: {e}"))?;
        for c in resp["components"].as_array().unwrap() {
            self.insts.insert(
                (rid.clone(), c["id"].as_str().unwrap().to_string()),
                ShadowInst {
                    generation: 1,
                    ..ShadowInst::default()
                },
            );
        }
        self.responses.insert(rid, resp);
        Ok(())
    }

    /// The shadow's LocalOK for one component (point temporal; no certificates in this
    /// catalog): every footprint source present and within its age limit, every claimed epoch
    /// and provenance current, every flag rule's source true.
    fn shadow_local(&self, comp: &Value) -> bool {
        let ty = &self.types[comp["type"].as_str().unwrap()];
        let fresh = ty.footprint.iter().all(|(src, age_ms)| {
            let Some(st) = self.sources.get(src) else {
                return false;
            };
            let claim = &comp["support"][src.as_str()];
            self.now_ms <= st.generated_ms + age_ms
                && claim["epoch"].as_u64().is_none_or(|e| e == st.epoch)
                && claim["provenance"]
                    .as_str()
                    .is_none_or(|p| p == st.provenance)
        });
        fresh
            && ty
                .flags
                .iter()
                .all(|f| self.sources.get(f).is_some_and(|st| st.flag))
    }

    /// (epoch, provenance) of a type's footprint sources, as the shadow holds them now.
    fn shadow_witness(&self, ty: &str) -> Vec<(u64, String)> {
        self.types[ty]
            .footprint
            .iter()
            .map(|(src, _)| {
                let st = &self.sources[src];
                (st.epoch, st.provenance.clone())
            })
            .collect()
    }

    /// A component's declared prerequisites: (parent id, required phase name).
    fn requires(comp: &Value) -> Vec<(String, String)> {
        comp["requires"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_string(),
                    r["phase"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Whether the shadow's bookkeeping says `parent` has reached `phase`.
    fn reached(&self, rid: &str, parent: &str, phase: &str) -> bool {
        let p = &self.insts[&(rid.to_string(), parent.to_string())];
        match phase {
            "emitted" => p.emitted,
            "dispatched" => p.dispatched && !p.failed,
            "observed_success" => p.observed_ok,
            other => panic!("unknown prerequisite phase {other}"),
        }
    }

    /// Marks every transitive dependent of `cid` as having an ended ancestor.
    fn mark_descendants(&mut self, rid: &str, cid: &str) {
        let comps = self.responses[rid]["components"]
            .as_array()
            .unwrap()
            .clone();
        let mut ended = BTreeSet::from([cid.to_string()]);
        loop {
            let before = ended.len();
            for c in &comps {
                if Sim::requires(c).iter().any(|(p, _)| ended.contains(p)) {
                    ended.insert(c["id"].as_str().unwrap().to_string());
                }
            }
            if ended.len() == before {
                break;
            }
        }
        ended.remove(cid);
        for d in ended {
            if let Some(x) = self.insts.get_mut(&(rid.to_string(), d)) {
                x.ancestor_ended = true;
            }
        }
    }

    fn mark_lost(&mut self, rid: &str, cid: &str) {
        self.insts
            .get_mut(&(rid.to_string(), cid.to_string()))
            .unwrap()
            .lost = true;
        self.mark_descendants(rid, cid);
    }

    fn mark_failed(&mut self, rid: &str, cid: &str) {
        self.insts
            .get_mut(&(rid.to_string(), cid.to_string()))
            .unwrap()
            .failed = true;
        self.mark_descendants(rid, cid);
    }

    fn random_response(&mut self) -> (String, Value) {
        self.next_resp += 1;
        self.agent_gen += 1;
        let rid = format!("r{}", self.next_resp);
        let n = 2 + self.rng.below(self.extra_components) as usize;
        let kinds: Vec<&str> = (0..n).map(|_| *self.rng.pick(&KINDS)).collect();
        let cat = self.gw.catalog().clone();
        let mut comps = Vec::new();
        for i in 0..n {
            let ty = cat.type_ix(kinds[i]).unwrap();
            let spec = cat.type_spec(ty).unwrap();
            let mut reqs = Vec::new();
            let k = self.rng.below((i as u64).min(3) + 1);
            let mut chosen = BTreeSet::new();
            for _ in 0..k {
                let p = self.rng.below(i as u64) as usize;
                if !chosen.insert(p) {
                    continue;
                }
                let pty = cat.type_ix(kinds[p]).unwrap();
                let phases: Vec<Phase> =
                    [Phase::Emitted, Phase::Dispatched, Phase::ObservedSuccess]
                        .into_iter()
                        .filter(|q| spec.allows(pty, *q))
                        .collect();
                if phases.is_empty() {
                    continue;
                }
                let q = *self.rng.pick(&phases);
                reqs.push(json!({"id": format!("c{p}"), "phase": q.prerequisite_name()}));
            }
            let mut support = serde_json::Map::new();
            for &(s, _) in &spec.footprint {
                let name = cat.source(s).unwrap().name.to_string();
                if self.rng.chance(0.5) {
                    let cur = self.epochs[SOURCES.iter().find(|x| **x == name).unwrap()].0;
                    let e = if self.rng.chance(0.1) { cur + 1 } else { cur };
                    support.insert(name, json!({"epoch": e}));
                }
            }
            let payload = match kinds[i] {
                "n_a" => json!({"text": format!("n{i}")}),
                "n_bc" => json!({"text": format!("s{i}")}),
                "n_free" => json!({"sensor": "z", "value": i as f64}),
                "act_d" => json!({}),
                _ => json!({"duration_s": 1.0 + i as f64}),
            };
            comps.push(
                json!({"id": format!("c{i}"), "type": kinds[i], "payload": payload,
                              "requires": reqs, "support": support}),
            );
        }
        // Envelope order is not the hidden topological order.
        for i in (1..comps.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            comps.swap(i, j);
        }
        let resp = json!({"response_id": rid, "agent_id": "agent", "generation": self.agent_gen,
                          "catalog": {"id": "schedule-test", "version": 1}, "components": comps});
        (rid, resp)
    }

    fn view(&self) -> BTreeMap<(String, String), CompView> {
        let mut out = BTreeMap::new();
        for rid in self.gw.response_ids() {
            for c in self.gw.response_report(rid).unwrap().components.iter() {
                out.insert(
                    (rid.to_string(), c.id.to_string()),
                    CompView {
                        phase: c.phase,
                        retained: c.retained,
                        reason: c.reason.map(|r| r.name().to_string()),
                        generation: c.generation,
                        binding: c.binding.map(|b| b.to_hex()),
                        local: c.locally_supported,
                    },
                );
            }
        }
        out
    }

    fn whole(&self) -> String {
        let v = self.view();
        let obls: Vec<String> = self
            .gw
            .obligations()
            .map(|o| format!("{}:{}:{}", o.id, o.state.name(), o.attempts))
            .collect();
        format!("{v:?}|{obls:?}|{}", self.gw.ledger().len())
    }

    fn drain(&mut self) {
        while let Some(e) = self.gw.poll_event() {
            if let Event::Emit { component, .. } = e {
                let key = (component.response().to_string(), component.id().to_string());
                if let Some(x) = self.insts.get_mut(&key) {
                    x.emitted = true;
                }
                self.emitted_this_step.push(key);
            }
        }
        while let Some(r) = self.gw.poll_receipt() {
            // Sealed bodies are canonical: the Value route writes the same text.
            assert_eq!(
                serde_json::to_string(&r.body.value()).unwrap(),
                r.body.as_str()
            );
            self.chain.accept(&r);
        }
    }

    /// The shadow model: per live response, its own LocalOK, its own eligibility and the
    /// greatest closed set by descending rejection over the declared prerequisites.
    fn shadow(&self) -> BTreeMap<(String, String), ShadowVerdict> {
        let mut out = BTreeMap::new();
        for rid in self.gw.response_ids() {
            let rid = rid.to_string();
            let report = self.gw.response_report(&rid.parse().unwrap()).unwrap();
            let gw_phase: BTreeMap<String, Phase> = report
                .components
                .iter()
                .map(|c| (c.id.to_string(), c.phase))
                .collect();
            let comps = self.responses[&rid]["components"].as_array().unwrap();
            let mut eligible: BTreeMap<String, bool> = BTreeMap::new();
            let mut verdicts = BTreeMap::new();
            for c in comps {
                let cid = c["id"].as_str().unwrap().to_string();
                let x = &self.insts[&(rid.clone(), cid.clone())];
                let local = self.shadow_local(c);
                let terminal = matches!(gw_phase[&cid], Phase::Failed | Phase::Invalidated);
                let cause = x.lost || x.failed || x.ancestor_ended;
                let ended = x.lost || x.failed || (terminal && cause);
                eligible.insert(cid.clone(), local && !ended);
                verdicts.insert(
                    cid,
                    (
                        local,
                        self.types[c["type"].as_str().unwrap()].action,
                        terminal,
                    ),
                );
            }
            let uses_deps = self.variant.uses_dependencies();
            let mut member = eligible.clone();
            loop {
                let mut changed = false;
                for c in comps {
                    let cid = c["id"].as_str().unwrap();
                    if member[cid]
                        && uses_deps
                        && Sim::requires(c).iter().any(|(p, _)| !member[p.as_str()])
                    {
                        member.insert(cid.to_string(), false);
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            for (cid, (local, action, terminal)) in verdicts {
                out.insert(
                    (rid.clone(), cid.clone()),
                    ShadowVerdict {
                        member: member[&cid],
                        local,
                        action,
                        terminal,
                    },
                );
            }
        }
        out
    }

    /// After a step is checked: an undispatched action outside the shadow's set is lost for
    /// its generation; an action inside it for the first time is bound, with the shadow's
    /// witness.
    fn settle_shadow(&mut self, shadow: &BTreeMap<(String, String), ShadowVerdict>) {
        for ((rid, cid), v) in shadow {
            let x = &self.insts[&(rid.clone(), cid.clone())];
            if !v.action || x.dispatched || x.lost || x.failed {
                continue;
            }
            if !v.member {
                self.mark_lost(rid, cid);
            } else if x.witness.is_none() {
                let comp = self.responses[rid]["components"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["id"] == cid.as_str())
                    .unwrap()
                    .clone();
                let w = self.shadow_witness(comp["type"].as_str().unwrap());
                self.insts
                    .get_mut(&(rid.clone(), cid.clone()))
                    .unwrap()
                    .witness = Some(w);
            }
        }
    }

    pub(crate) fn check_invariants(&mut self, stats: &mut Stats) -> Result<(), String> {
        *stats.checks.entry("receipt-chain").or_default() += 1;
        if let Some(e) = &self.chain.broken {
            return Err(format!("receipt chain: {e}"));
        }
        let shadow = self.shadow();
        let view = self.view();
        for ((rid, cid), v) in &view {
            let sv = &shadow[&(rid.clone(), cid.clone())];
            let x = &self.insts[&(rid.clone(), cid.clone())];
            *stats.checks.entry("generation").or_default() += 1;
            if v.generation != x.generation {
                return Err(format!(
                    "generation: {rid}/{cid} is generation {} in the gateway, {} in the shadow",
                    v.generation, x.generation
                ));
            }
            *stats.checks.entry("greatest-set").or_default() += 1;
            if v.retained != sv.member {
                let what = match (sv.member, sv.action) {
                    (true, true) => "overblocked action",
                    (true, false) => "overblocked non-action",
                    (false, _) => "underblocked",
                };
                return Err(format!(
                    "greatest set ({what}): {rid}/{cid} retained={} shadow={} ({:?})",
                    v.retained, sv.member, v
                ));
            }
            if v.retained {
                *stats.checks.entry("local-validity").or_default() += 1;
                if !sv.local {
                    return Err(format!(
                        "local validity: {rid}/{cid} retained but unsupported at {}",
                        self.now_ms
                    ));
                }
                let g = self.gw.graph(&rid.parse().unwrap()).unwrap();
                let i = g.index_of(&cid.parse().unwrap()).unwrap();
                for &(p, _) in g.parents(i) {
                    *stats.checks.entry("closure").or_default() += 1;
                    let pid = g.component(p).unwrap().id.to_string();
                    if self.variant.uses_dependencies()
                        && !view[&(rid.clone(), pid.clone())].retained
                    {
                        return Err(format!("closure: {rid}/{cid} retained, parent {pid} not"));
                    }
                }
            }
        }
        for (rid, cid) in std::mem::take(&mut self.emitted_this_step) {
            *stats
                .checks
                .entry("no-emission-with-blocked-parent")
                .or_default() += 1;
            let Some(g) = self.gw.graph(&rid.parse().unwrap()) else {
                continue;
            };
            let i = g.index_of(&cid.parse().unwrap()).unwrap();
            for &(p, q) in g.parents(i) {
                let pid = g.component(p).unwrap().id.to_string();
                let ph = view[&(rid.clone(), pid.clone())].phase;
                if self.variant.uses_dependencies() && !ph.at_or_beyond(q) {
                    return Err(format!(
                        "emission: {rid}/{cid} emitted while parent {pid} is {ph}"
                    ));
                }
            }
        }
        self.settle_shadow(&shadow);
        // A component the gateway ended for good needs a cause the shadow knows, including
        // one this very step produced (an action lost now, an ancestor lost now).
        for ((rid, cid), sv) in &shadow {
            let x = &self.insts[&(rid.clone(), cid.clone())];
            *stats.checks.entry("ended-with-cause").or_default() += 1;
            if sv.terminal && !(x.lost || x.failed || x.ancestor_ended) {
                return Err(format!(
                    "overblocked: {rid}/{cid} ended ({}) with no cause the shadow knows",
                    view[&(rid.clone(), cid.clone())].phase
                ));
            }
        }
        Ok(())
    }

    fn affected_by_source(&self, src: &str) -> BTreeSet<(String, String)> {
        let cat = self.gw.catalog();
        let bit = 1u64 << cat.source_ix(src).unwrap().0;
        let mut out = BTreeSet::new();
        for rid in self.gw.response_ids() {
            let g = self.gw.graph(rid).unwrap();
            let mut roots = 0u64;
            for (i, c) in g.components().iter().enumerate() {
                if cat.type_spec(c.ty).unwrap().footprint_mask & bit != 0 {
                    roots |= 1 << i;
                }
            }
            let all = roots | g.descendants(roots);
            for (i, c) in g.components().iter().enumerate() {
                if all & (1 << i) != 0 {
                    out.insert((rid.to_string(), c.id.to_string()));
                }
            }
        }
        out
    }

    fn check_locality(
        before: &BTreeMap<(String, String), CompView>,
        after: &BTreeMap<(String, String), CompView>,
        allowed: &BTreeSet<(String, String)>,
    ) -> Result<(), String> {
        for (k, v) in before {
            if allowed.contains(k) {
                continue;
            }
            if let Some(w) = after.get(k)
                && v != w
            {
                return Err(format!("locality: {}/{} changed {v:?} -> {w:?}", k.0, k.1));
            }
        }
        Ok(())
    }

    /// The shadow's prediction for a presented token at `now`: `(fresh, allowed)`. `fresh` is
    /// the shadow's own token bookkeeping (this boot, never spent, the token it polled for the
    /// instance's current generation, the instance not ended or dispatched); `allowed` adds
    /// membership in the shadow's set, prerequisites reached and the witness unchanged.
    fn shadow_dispatch_ok(&self, tok: &DispatchToken) -> (bool, bool) {
        let rid = tok.response().to_string();
        let cid = tok.component().to_string();
        let seq = (tok.seq().boot, tok.seq().n);
        let key = (rid.clone(), cid.clone());
        let Some(x) = self.insts.get(&key) else {
            return (false, false);
        };
        let shadow = self.shadow();
        let Some(v) = shadow.get(&key) else {
            // The response is gone.
            return (false, false);
        };
        let terminal_with_cause = self
            .gw
            .component_report(tok.response(), tok.component())
            .is_some_and(|r| matches!(r.phase, Phase::Failed | Phase::Invalidated))
            && (x.lost || x.failed || x.ancestor_ended);
        let fresh = seq.0 == self.boot
            && !self.used.contains(&seq)
            && x.seq == Some(seq)
            && tok.generation() == x.generation
            && !x.lost
            && !x.failed
            && !x.dispatched
            && !terminal_with_cause;
        if !fresh {
            return (false, false);
        }
        let comp = self.responses[&rid]["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == cid.as_str())
            .unwrap();
        let deps = !self.variant.uses_dependencies()
            || Sim::requires(comp)
                .iter()
                .all(|(p, q)| self.reached(&rid, p, q));
        let witness =
            x.witness.as_ref() == Some(&self.shadow_witness(comp["type"].as_str().unwrap()));
        (true, v.member && deps && witness)
    }
}

/// One move of the environment, with every choice it makes spelled out (a `None` is drawn from
/// the schedule's generator when the move is made, so the seeded schedules draw exactly as
/// they always did). The seeded schedules pick moves at random; the model checker
/// (`model_check.rs`) enumerates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Move {
    /// A provider update of `SOURCES[src]` at the current time; `flag` is source `f`'s value.
    Update {
        src: u8,
        change: Change,
        flag: Option<bool>,
    },
    /// Time passes (ms).
    Tick { ms: u64 },
    /// The ready actions' tokens are polled.
    Poll,
    /// The final gate on the `k`-th polled token, `late_ms` after the last event.
    Gate { k: u8, late_ms: Option<u64> },
    /// A spent token presented again.
    Replay { k: u8 },
    /// The downstream observation of the first dispatched action.
    Observe { ok: bool },
    /// A fresh candidate for the first live obligation.
    Candidate { kind: CandidateKind },
    /// The adapter refuses its next enqueue.
    ArmRefusal,
    /// The process restarts: a new boot epoch, the sources carried, one new response.
    Restart,
    /// A provider update generated in the future (refused).
    FutureUpdate { src: u8 },
    /// A malformed response (refused whole).
    Malformed,
    /// Another response arrives (at most three live).
    NewResponse,
}

/// What a provider update changes besides its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Change {
    Nothing,
    Epoch,
    Provenance(u8),
}

/// A fresh candidate: valid, naming a component outside the obligation's scope, or carrying
/// an old agent generation (the last two refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CandidateKind {
    Valid,
    OutOfScope,
    OldGeneration,
}

fn run_schedule(seed: u64, cfg: &Config, stats: &mut Stats) -> Result<(), String> {
    let mut s = Sim::new(seed, cfg);
    s.start()?;
    s.check_invariants(stats)?;
    for step in 0..30 {
        stats.steps += 1;
        let roll = s.rng.below(100);
        let Some(mv) = s.random_move(roll) else {
            continue;
        };
        s.step(mv, stats)
            .map_err(|e| format!("step {step} (roll {roll}): {e}"))?;
    }
    Ok(())
}

impl Sim {
    /// The first response, admitted.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        let (rid, resp) = self.random_response();
        self.admit(rid, resp)?;
        self.drain();
        Ok(())
    }

    /// The seeded schedules' move for `roll` (0–99), drawing its choices as they always were;
    /// `None` when it has nothing to act on.
    fn random_move(&mut self, roll: u64) -> Option<Move> {
        let src = |s: &mut Sim| s.rng.below(SOURCES.len() as u64) as u8;
        Some(match roll {
            0..=29 => {
                let src = src(self);
                let change = if self.rng.chance(0.15) {
                    Change::Epoch
                } else if self.rng.chance(0.05) {
                    Change::Provenance(self.rng.below(3) as u8)
                } else {
                    Change::Nothing
                };
                Move::Update {
                    src,
                    change,
                    flag: None,
                }
            }
            30..=49 => Move::Tick {
                ms: 1 + self.rng.below(400),
            },
            50..=61 => Move::Poll,
            62..=76 => {
                if self.pool.is_empty() {
                    return None;
                }
                let k = self.rng.below(self.pool.len() as u64) as u8;
                let late_ms = self.rng.chance(0.3).then(|| 1 + self.rng.below(600));
                Move::Gate { k, late_ms }
            }
            77..=80 => {
                if self.spent.is_empty() {
                    return None;
                }
                Move::Replay {
                    k: self.rng.below(self.spent.len() as u64) as u8,
                }
            }
            81..=83 => {
                self.first_dispatched()?;
                Move::Observe {
                    ok: self.rng.chance(0.7),
                }
            }
            84..=91 => {
                self.first_live_obligation()?;
                Move::Candidate {
                    kind: match self.rng.below(10) {
                        0..=5 => CandidateKind::Valid,
                        6 | 7 => CandidateKind::OutOfScope,
                        _ => CandidateKind::OldGeneration,
                    },
                }
            }
            92 => Move::ArmRefusal,
            93 => Move::Restart,
            94 | 95 => Move::FutureUpdate { src: src(self) },
            96 | 97 => Move::Malformed,
            _ => Move::NewResponse,
        })
    }

    /// The first dispatched action of the live responses.
    fn first_dispatched(&self) -> Option<(Id, Id)> {
        self.gw.response_ids().find_map(|r| {
            self.gw
                .response_report(r)
                .unwrap()
                .components
                .iter()
                .find(|c| c.phase == Phase::Dispatched)
                .map(|c| (r.clone(), c.id.clone()))
        })
    }

    /// The first live obligation: its id, response, component and scope.
    fn first_live_obligation(&self) -> Option<(u64, String, String, Vec<String>)> {
        self.gw.obligations().find(|o| o.state.is_live()).map(|o| {
            (
                o.id.0,
                o.component.response().to_string(),
                o.component.id().to_string(),
                o.scope.iter().map(|x| x.to_string()).collect(),
            )
        })
    }

    /// Makes `mv`, then lets due timers run and checks every invariant. `Ok(false)`: the move
    /// had nothing to act on and changed nothing.
    pub(crate) fn step(&mut self, mv: Move, stats: &mut Stats) -> Result<bool, String> {
        if !self.apply(mv, stats)? {
            return Ok(false);
        }
        self.gw.handle_timeout(self.now());
        self.drain();
        self.check_invariants(stats)?;
        Ok(true)
    }

    /// Makes `mv` with the checks that belong to the move itself (locality, the gate's
    /// conjuncts, token non-reuse, refused inputs changing nothing).
    fn apply(&mut self, mv: Move, stats: &mut Stats) -> Result<bool, String> {
        let s = self;
        let before = s.view();
        let whole_before = s.whole();
        let ctx = |e: String| format!("{mv:?}: {e}");
        match mv {
            // Provider update, sometimes with a new epoch or provenance.
            Move::Update { src, change, flag } => {
                let src = SOURCES[usize::from(src)];
                match change {
                    Change::Epoch => s.epochs.get_mut(src).unwrap().0 += 1,
                    Change::Provenance(p) => s.epochs.get_mut(src).unwrap().1 = format!("p{p}"),
                    Change::Nothing => {}
                }
                s.update_with(src, s.now_ms, flag);
                s.drain();
                let allowed = s.affected_by_source(src);
                Sim::check_locality(&before, &s.view(), &allowed).map_err(ctx)?;
                *stats.checks.entry("locality").or_default() += 1;
            }
            // Time passes.
            Move::Tick { ms } => {
                s.now_ms += ms;
                s.gw.handle_timeout(s.now());
            }
            // Poll ready actions.
            Move::Poll => {
                while let Some(t) = s.gw.poll_dispatch() {
                    // The shadow's token bookkeeping: one token per bound generation.
                    let key = (t.response().to_string(), t.component().to_string());
                    let x = s.insts.get_mut(&key).unwrap();
                    if x.generation != t.generation() || x.seq.is_some() || x.witness.is_none() {
                        return Err(ctx(format!(
                            "token for {}/{} generation {}: the shadow holds generation {}, {} token, {} binding",
                            key.0,
                            key.1,
                            t.generation(),
                            x.generation,
                            if x.seq.is_some() { "a" } else { "no" },
                            if x.witness.is_some() { "a" } else { "no" },
                        )));
                    }
                    x.seq = Some((t.seq().boot, t.seq().n));
                    s.pool.push(t);
                }
            }
            // Final gate, on a random pooled token.
            Move::Gate { k, late_ms } => {
                if usize::from(k) >= s.pool.len() {
                    return Ok(false);
                }
                let tok = s.pool.swap_remove(usize::from(k));
                // Sometimes the gate runs later than the last event the gateway saw: support may
                // have lapsed with timers still due, which the gate must bring up to date (or
                // catch with its own recheck) before it decides.
                let late = late_ms.is_some();
                s.now_ms += late_ms.unwrap_or(0);
                let wire = tok.to_wire();
                let (fresh, predicted) = s.shadow_dispatch_ok(&tok);
                let (rid, cid) = (tok.response().to_string(), tok.component().to_string());
                let attempts_before = s.adapter.attempts;
                let seq = tok.seq();
                s.chain.take_gates();
                let o = s.gw.final_gate(s.now(), tok, &mut s.adapter);
                stats.gate_calls += 1;
                let attempted = s.adapter.attempts > attempts_before;
                *stats.checks.entry("gate-conjuncts").or_default() += 1;
                if attempted != predicted {
                    return Err(ctx(format!(
                        "gate {rid}/{cid}: adapter attempted={attempted}, shadow DispatchOK={predicted}, {o:?}"
                    )));
                }
                if attempted {
                    stats.adapter_calls += 1;
                    *stats.checks.entry("token-non-reuse").or_default() += 1;
                    if !s.used.insert((seq.boot, seq.n)) {
                        return Err(ctx(format!(
                            "token reuse: sequence {seq} reached the adapter twice"
                        )));
                    }
                    if s.refusals_armed > 0 {
                        s.refusals_armed -= 1;
                        s.mark_failed(&rid, &cid);
                    } else {
                        s.insts
                            .get_mut(&(rid.clone(), cid.clone()))
                            .unwrap()
                            .dispatched = true;
                    }
                } else if fresh {
                    // The gate denied the current instance: withheld or invalidated.
                    *stats.checks.entry("gate-denied").or_default() += 1;
                    s.mark_lost(&rid, &cid);
                }
                s.spent.push(wire);
                s.drain();
                // The gate's receipt is in the chain when the gate returns: an adapter call's
                // says dispatched (or enqueue_failed), with its sequence; no other says either.
                *stats.checks.entry("gate-receipt").or_default() += 1;
                let gates = s.chain.take_gates();
                let ours: Vec<&str> = gates
                    .iter()
                    .filter(|(b, n, _)| (*b, *n) == (seq.boot, seq.n))
                    .map(|(_, _, o)| o.as_str())
                    .collect();
                let receipted = ours
                    .iter()
                    .filter(|o| matches!(**o, "dispatched" | "enqueue_failed"))
                    .count();
                if receipted != usize::from(attempted) || gates.len() > 1 {
                    let recorded: Vec<String> = gates
                        .iter()
                        .map(|(b, n, o)| format!("{b}.{n} {o}"))
                        .collect();
                    return Err(ctx(format!(
                        "gate receipt: sequence {seq} {} the adapter, and the chain recorded [{}]",
                        if attempted {
                            "reached"
                        } else {
                            "did not reach"
                        },
                        recorded.join(", ")
                    )));
                }
                let mut allowed = BTreeSet::new();
                if let Some(g) = s.gw.graph(&rid.parse().unwrap()) {
                    let i = g.index_of(&cid.parse().unwrap()).unwrap();
                    let d = g.descendants(1 << i) | (1 << i);
                    for (j, c) in g.components().iter().enumerate() {
                        if d & (1 << j) != 0 {
                            allowed.insert((rid.clone(), c.id.to_string()));
                        }
                    }
                }
                if late {
                    // Time passed too: whatever lapsed may change; the rest is checked below.
                    *stats.checks.entry("late-gate").or_default() += 1;
                } else {
                    Sim::check_locality(&before, &s.view(), &allowed).map_err(ctx)?;
                }
            }
            // Replay of a spent token: always refused, changes nothing.
            Move::Replay { k } => {
                let Some(w) = s.spent.get(usize::from(k)).cloned() else {
                    return Ok(false);
                };
                let tok = DispatchToken::from_wire(&w).unwrap();
                let attempts_before = s.adapter.attempts;
                let o = s.gw.final_gate(s.now(), tok, &mut s.adapter);
                stats.replays += 1;
                *stats.checks.entry("replay-refused").or_default() += 1;
                if !matches!(o, GateOutcome::Refused { .. })
                    || s.adapter.attempts != attempts_before
                {
                    return Err(ctx(format!("replay not refused: {o:?}")));
                }
                s.drain();
                if s.whole() != whole_before {
                    return Err(ctx("a refused replay changed state".into()));
                }
            }
            // Downstream observation of a dispatched action.
            Move::Observe { ok } => {
                let Some((r, c)) = s.first_dispatched() else {
                    return Ok(false);
                };
                {
                    s.gw.handle_observation(s.now(), &r, &c, ok)
                        .map_err(|e| ctx(format!("observe: {e}")))?;
                    let (r, c) = (r.to_string(), c.to_string());
                    if ok {
                        s.insts.get_mut(&(r, c)).unwrap().observed_ok = true;
                    } else {
                        s.mark_failed(&r, &c);
                    }
                    s.drain();
                }
            }
            // Fresh candidates, valid and faulty.
            Move::Candidate { kind } => {
                let Some((oid, rid, cid, scope)) = s.first_live_obligation() else {
                    return Ok(false);
                };
                let resp = s.responses[&rid].clone();
                let orig = resp["components"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["id"] == cid.as_str())
                    .unwrap()
                    .clone();
                let mut fresh = orig.clone();
                if let Some(sup) = fresh.get_mut("support").and_then(Value::as_object_mut) {
                    for (name, claim) in sup.iter_mut() {
                        let cur =
                            s.epochs[SOURCES.iter().find(|x| **x == name.as_str()).unwrap()].0;
                        claim["epoch"] = json!(cur);
                    }
                }
                let (cand_gen, comp_list, fault) = match kind {
                    CandidateKind::Valid => (s.agent_gen + 1, vec![fresh], false),
                    CandidateKind::OutOfScope => {
                        let others: Vec<&Value> = resp["components"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|c| !scope.contains(&c["id"].as_str().unwrap().to_string()))
                            .collect();
                        match others.first() {
                            Some(o) => (s.agent_gen + 1, vec![(*o).clone()], true),
                            None => return Ok(false),
                        }
                    }
                    CandidateKind::OldGeneration => (1, vec![fresh], true),
                };
                let cand = json!({"obligation": oid, "response_id": rid, "agent_id": "agent", "generation": cand_gen,
                                  "catalog": {"id": "schedule-test", "version": 1}, "components": comp_list});
                let r = s.gw.handle_candidate(s.now(), cand.to_string().as_bytes());
                s.drain();
                if fault {
                    *stats.checks.entry("fault-rejected-unchanged").or_default() += 1;
                    if r.is_ok() {
                        return Err(ctx("a faulty candidate was accepted".into()));
                    }
                    if s.whole() != whole_before {
                        return Err(ctx(format!(
                            "a rejected candidate changed state ({:?})",
                            r.err().map(|e| e.code())
                        )));
                    }
                    stats.rejections += 1;
                } else if r.is_ok() {
                    s.agent_gen += 1;
                    stats.candidates_accepted += 1;
                    // The accepted candidate becomes the component's current spec and opens
                    // its next generation in the shadow.
                    let mut resp = resp;
                    for c in resp["components"].as_array_mut().unwrap() {
                        if c["id"] == cid.as_str() {
                            *c = cand["components"][0].clone();
                        }
                    }
                    s.responses.insert(rid.clone(), resp);
                    let x = s.insts.get_mut(&(rid, cid)).unwrap();
                    *x = ShadowInst {
                        generation: x.generation + 1,
                        ..ShadowInst::default()
                    };
                    s.drain();
                }
            }
            // The adapter refuses its next enqueue.
            Move::ArmRefusal => {
                s.adapter.refuse_next(1, AdapterError::LinkDown);
                s.refusals_armed = 1;
            }
            // Restart: a new boot epoch; every earlier token is dead.
            Move::Restart => {
                stats.restarts += 1;
                let mut carried = Vec::new();
                for (i, _) in s.gw.catalog().sources().iter().enumerate() {
                    let ix = SourceIx(i as u8);
                    if let Some(st) = s.gw.snapshot().source(ix) {
                        carried.push(halo_core::SourceUpdate {
                            source: ix,
                            state: st.clone(),
                        });
                    }
                }
                for t in s.pool.drain(..) {
                    s.spent.push(t.to_wire());
                }
                s.boot += 1;
                s.gw = new_gateway(s.boot, &s.cfg);
                // Each start writes a log of its own.
                if let Some(e) = s.chain.broken.take() {
                    return Err(ctx(format!("receipt chain: {e}")));
                }
                s.chain = ChainCheck::default();
                for u in carried {
                    s.gw.handle_source_update(s.now(), u).unwrap();
                }
                let (rid, resp) = s.random_response();
                s.admit(rid, resp).map_err(ctx)?;
                s.drain();
            }
            // Faulty provider update: generated in the future.
            Move::FutureUpdate { src } => {
                let src = SOURCES[usize::from(src)];
                let (epoch, prov) = s.epochs[src].clone();
                let u = ProviderUpdate {
                    source: src.into(),
                    value: if src == "f" { json!(true) } else { Value::Null },
                    epoch: epoch + 5,
                    provenance: prov.parse().unwrap(),
                    generated_at_ms: s.now_ms + 10_000,
                };
                let typed = u.typed(s.gw.catalog()).unwrap();
                *stats.checks.entry("fault-rejected-unchanged").or_default() += 1;
                if s.gw.handle_source_update(s.now(), typed).is_ok() {
                    return Err(ctx("a future update was accepted".into()));
                }
                s.drain();
                if s.whole() != whole_before {
                    return Err(ctx("a refused update changed state".into()));
                }
                stats.rejections += 1;
            }
            // Malformed response: rejected whole, nothing changes.
            Move::Malformed => {
                let (_, mut resp) = s.random_response();
                let comps = resp["components"].as_array_mut().unwrap();
                let k = s.rng.below(comps.len() as u64) as usize;
                match s.rng.below(3) {
                    0 => comps[k]["requires"] = json!([{"id": "nowhere", "phase": "emitted"}]),
                    1 => comps[k]["type"] = json!("unknown"),
                    _ => {
                        let id = comps[0]["id"].clone();
                        comps[k]["id"] = id;
                        if k == 0 {
                            comps.push(comps[0].clone());
                        }
                    }
                }
                *stats.checks.entry("fault-rejected-unchanged").or_default() += 1;
                if s.gw
                    .handle_response(s.now(), resp.to_string().as_bytes())
                    .is_ok()
                {
                    return Err(ctx("a malformed response was admitted".into()));
                }
                s.drain();
                if s.whole() != whole_before {
                    return Err(ctx("a rejected response changed state".into()));
                }
                stats.rejections += 1;
            }
            // Another response arrives.
            Move::NewResponse => {
                if s.gw.response_ids().count() >= s.max_responses {
                    return Ok(false);
                }
                let (rid, resp) = s.random_response();
                s.admit(rid, resp).map_err(ctx)?;
                s.drain();
            }
        }
        Ok(true)
    }
}

/// The schedules CI runs, pinned; `HALO_SCHEDULES` (scripts/schedules.sh) runs another number,
/// and then that number is the one every schedule must match.
const SCHEDULES: u64 = 10_000;

#[test]
fn schedules() {
    let asked: Option<u64> = std::env::var("HALO_SCHEDULES")
        .ok()
        .map(|v| v.parse().expect("HALO_SCHEDULES is a number of schedules"));
    let n = asked.unwrap_or(SCHEDULES);
    assert!(
        n > 0,
        "HALO_SCHEDULES=0 runs no schedule; that is a failure, not 0/0 matched"
    );
    let base: u64 = 0x4841_4C4F; // "HALO"
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    for k in 0..n {
        let seed = base.wrapping_add(k);
        if let Err(e) = run_schedule(seed, &Config::default(), &mut stats) {
            failures.push(format!("seed {seed:#x}: {e}"));
        }
    }
    let matched = n - failures.len() as u64;
    println!(
        "schedules: {matched}/{n} matched{}",
        if asked.is_some() {
            format!(" (HALO_SCHEDULES={n}; CI runs the pinned {SCHEDULES})")
        } else {
            String::new()
        }
    );
    println!(
        "  steps {}  gate calls {}  adapter calls {}  replays {}  rejected faults {}  fresh readmissions {}  restarts {}",
        stats.steps,
        stats.gate_calls,
        stats.adapter_calls,
        stats.replays,
        stats.rejections,
        stats.candidates_accepted,
        stats.restarts
    );
    for (name, count) in &stats.checks {
        println!("  {name:<34} {count:>10} checks");
    }
    for f in failures.iter().take(10) {
        println!("  MISMATCH {f}");
    }
    assert!(
        failures.is_empty(),
        "{} schedules violated an invariant",
        failures.len()
    );
    if asked.is_none() {
        assert_eq!((matched, n), (SCHEDULES, SCHEDULES));
    }
}

/// The shadow catches an over-blocking gateway. The same core configured as `WholeResponse`
/// withholds every component of a response while any one of them is unsupported, so it withholds
/// supported actions; a shadow that took the gateway's WITHHELD as "ended" (as this one did
/// before it kept its own bookkeeping) agrees with it. Run over the first 200 seeds, the count of
/// schedules caught and of those whose first mismatch is a supported action withheld is pinned.
#[test]
fn the_shadow_catches_an_overblocking_gateway() {
    let base: u64 = 0x4841_4C4F;
    let (mut caught, mut on_action) = (0, 0);
    for k in 0..200 {
        let mut stats = Stats::default();
        let cfg = Config {
            variant: Variant::WholeResponse,
            ..Config::default()
        };
        if let Err(e) = run_schedule(base + k, &cfg, &mut stats) {
            caught += 1;
            if e.contains("overblocked action") {
                on_action += 1;
            }
        }
    }
    let matched = usize::from((caught, on_action) == (179, 51));
    println!(
        "schedules-overblocking-mutant: {matched}/1 matched (caught in {caught}/200 schedules, {on_action} first at a supported action withheld)"
    );
    assert_eq!((caught, on_action), (179, 51));
}

/// The checker's chain verification is shown to refuse what it must: a schedule's genuine
/// receipts pass; the same receipts with one body altered (hash left as it was), one `prev`
/// pointing elsewhere, or one receipt left out each break it at that receipt.
#[test]
fn the_chain_check_refuses_altered_receipts() {
    let mut s = Sim::new(0x4841_4C50, &Config::default());
    let (rid, resp) = s.random_response();
    s.gw.handle_response(s.now(), resp.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{rid}: {e}"));
    let genuine: Vec<halo_core::receipt::Receipt> =
        std::iter::from_fn(|| s.gw.poll_receipt()).collect();
    assert!(genuine.len() >= 3, "{} receipts", genuine.len());
    let verdict = |rs: &[halo_core::receipt::Receipt]| {
        let mut c = ChainCheck::default();
        rs.iter().for_each(|r| c.accept(r));
        c.broken
    };
    assert_eq!(verdict(&genuine), None);
    let mut body = genuine.clone();
    body[1].body.edit(|v| v["kind"] = json!("forged"));
    let mut prev = genuine.clone();
    prev[2].prev = genuine[0].hash;
    let mut gap = genuine.clone();
    gap.remove(1);
    let got = [verdict(&body), verdict(&prev), verdict(&gap)];
    println!(
        "chain-check: {}/3 altered chains refused",
        got.iter().flatten().count()
    );
    assert_eq!(
        got,
        [
            Some("receipt 1's hash does not recompute".to_string()),
            Some("receipt 2's prev is not the previous hash".to_string()),
            Some("receipt 2 where 1 was due".to_string()),
        ]
    );
}

/// The seeded defects of the core (`--features __seeded-defects`, `scripts/seeded_defects.sh`):
/// each single-defect core, and one pair, through the same schedules; a schedule that reports an
/// invariant violation kills the defect. Two single defects are expected to survive: the gate's
/// own closure and LocalOK rechecks are defence in depth behind incremental re-evaluation (which
/// withholds the action and revokes its token first) and behind the gate's own timer catch-up;
/// the pair that also removes the catch-up is killed. Counts over the first
/// `HALO_DEFECT_SCHEDULES` seeds (default 1,000) are printed and, at the default, pinned.
#[cfg(feature = "__seeded-defects")]
#[test]
fn seeded_defects_are_caught() {
    use halo_core::defect::Defect as D;
    let n: u64 = std::env::var("HALO_DEFECT_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    assert!(n > 0, "HALO_DEFECT_SCHEDULES=0 runs nothing");
    let base: u64 = 0x4841_4C4F;
    // (defects, expected to be killed)
    let cases: Vec<(Vec<D>, bool)> = vec![
        (vec![D::NoWitnessCheck], true),
        (vec![D::ForgetDependents], true),
        (vec![D::TokenNotSpent], true),
        (vec![D::NoClosureAtGate], false),
        (vec![D::NoLocalRecheckAtGate], false),
        (vec![D::NoTimersAtGate], true),
        (vec![D::NoTimersAtGate, D::NoLocalRecheckAtGate], true),
        (vec![D::NoDispatchReceipt], true),
    ];
    let mut matched = 0;
    let mut counts = Vec::new();
    for (defects, expect_killed) in &cases {
        let name: Vec<&str> = defects.iter().map(|d| d.name()).collect();
        let cfg = Config {
            defects: defects.clone(),
            ..Config::default()
        };
        let mut failing = 0u64;
        let mut first: Option<String> = None;
        for k in 0..n {
            let mut stats = Stats::default();
            if let Err(e) = run_schedule(base + k, &cfg, &mut stats) {
                failing += 1;
                first.get_or_insert(e);
            }
        }
        let killed = failing > 0;
        matched += usize::from(killed == *expect_killed);
        counts.push(failing);
        let first = first.unwrap_or_else(|| "-".into());
        println!(
            "  {:<46} {failing:>5}/{n} schedules fail ({})   first: {}",
            name.join(" + "),
            if killed { "killed" } else { "survives" },
            &first[..first.len().min(110)]
        );
    }
    println!(
        "seeded-defects: {matched}/{} matched (each as expected: killed, or surviving as defence in depth)",
        cases.len()
    );
    assert_eq!(matched, cases.len());
    if n == 1_000 {
        assert_eq!(counts, [88, 275, 218, 0, 0, 1, 99, 449]);
    }
}
