//! An independent audit of a mission-contract receipt stream.
//!
//! The checker receives only the registered domain (its TOML file), and the receipts; the root
//! contract and the initial state come from the first receipt. It shares no decision,
//! reachability or graph-update code with the gateway's monitor: the domain is re-read from its
//! text, states are name → value maps, traces are effect texts, and every operation's outcome is
//! re-derived here from the registered semantics. It then requires, receipt by receipt:
//!
//! - the hash chain: index, link and SHA-256 over the canonical JSON of each receipt;
//! - the same Allow / not-Allow decision the checker derives (reason codes are not re-derived);
//! - refusals change nothing: versions, state, trace digest and root lifecycle are as before;
//! - an accepted operation produces exactly the versions, modeled state, committed-trace digest,
//!   root lifecycle, edit digest and reservation the checker computes;
//! - every commit spends exactly one earlier reservation for the same effect, trace and versions
//!   (reservation ↔ commit correspondence), and every witness is fresh when it is used;
//! - an idempotent replay repeats its original exactly and changes nothing.
//!
//! Conventions shared with the gateway are the documented wire facts only: the receipt and edit
//! digest encodings, the committed-trace digest, effect texts `name(arg,...)` with arguments in
//! parameter-name order, and the profile limits.
//!
//! [`audit_lines`] reads the log's lines strictly first (each must be the one canonical
//! encoding of its record, re-encoded here from the documented field order) and checks signed
//! checkpoints (`{"kind": "checkpoint", ...}` bodies, docs/run.md) with its own construction of
//! the signed message.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// Why a stream was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditError {
    /// Receipt index (the stream position).
    pub index: usize,
    /// What failed.
    pub what: String,
}

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "receipt {}: {}", self.index, self.what)
    }
}

impl std::error::Error for AuditError {}

/// What an accepted stream contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Receipts replayed.
    pub receipts: usize,
    /// Operations allowed.
    pub allowed: usize,
    /// Goals created.
    pub goals: usize,
    /// Effects committed (each matched to its reservation).
    pub commits: usize,
    /// Exact idempotent replays.
    pub replays: usize,
    /// Whether the root was closed.
    pub closed: bool,
    /// Signed checkpoint receipts (each checked when a key is given).
    pub checkpoints: usize,
    /// Whether a key was given and every receipt is covered by a checkpoint signed with it,
    /// the last being final.
    pub signed: bool,
}

/// A single deliberate defect in the replayed checker, for the bounded explorer
/// (`contract_explorer`): each variant drops exactly one obligation, and the explorer must find
/// a reachable configuration that breaks an invariant. [`audit`] never uses one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Defect {
    /// A join is accepted because each source was valid alone; the composition is not checked.
    LocalOnlyComposition,
    /// Trace inclusion compares effect multisets, not sequences.
    IgnoreOrder,
    /// Trace inclusion ignores repeated effects.
    IgnoreMultiplicity,
    /// Frame predicates are not evaluated.
    NoFrames,
    /// A witness's root and epoch are not compared.
    NoRootIdentity,
    /// A delegation's root is not compared.
    NoDelegationLineage,
    /// Resource attenuation is not checked.
    NoResourceCheck,
    /// Obligation inheritance is not checked.
    NoObligationCheck,
    /// Success refinement (W6) is not checked.
    NoSuccessRefinement,
    /// A witness's policy version is not compared.
    NoPolicyFreshness,
    /// A witness's state version is not compared.
    NoStateFreshness,
    /// A witness's graph and parent revisions are not compared.
    NoGraphFreshness,
    /// A commit needs no matching reservation and skips the gate.
    NoMediation,
}

impl Defect {
    /// Every defect.
    pub const ALL: [Defect; 13] = [
        Defect::LocalOnlyComposition,
        Defect::IgnoreOrder,
        Defect::IgnoreMultiplicity,
        Defect::NoFrames,
        Defect::NoRootIdentity,
        Defect::NoDelegationLineage,
        Defect::NoResourceCheck,
        Defect::NoObligationCheck,
        Defect::NoSuccessRefinement,
        Defect::NoPolicyFreshness,
        Defect::NoStateFreshness,
        Defect::NoGraphFreshness,
        Defect::NoMediation,
    ];
}

/// Profile limits (the published finite profile).
mod limit {
    pub const GOALS: usize = 64;
    pub const CONTINUATIONS: usize = 256;
    pub const EFFECTS: usize = 64;
    pub const ARRAY: usize = 256;
    pub const JOIN_SOURCES: usize = 8;
    pub const PRECEDENCE: usize = 28;
    pub const GUARD: usize = 4096;
    pub const DOMAIN_ITEMS: usize = 256;
    pub const PARAMS: usize = 16;
    pub const COMBINATIONS: usize = 4096;
}

fn sha(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// --- the domain, re-read from its text ------------------------------------------------------

/// `t` has no key outside `allowed` and at least its first `required` keys.
fn exact_keys(t: &toml::Table, at: &str, allowed: &[&str], required: usize) -> Result<(), String> {
    if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("{at}: unknown key `{k}`"));
    }
    match allowed.iter().take(required).find(|k| !t.contains_key(**k)) {
        Some(k) => Err(format!("{at}: `{k}` missing")),
        None => Ok(()),
    }
}

fn sub_table<'a>(t: &'a toml::Table, key: &str) -> Result<&'a toml::Table, String> {
    t.get(key)
        .and_then(toml::Value::as_table)
        .ok_or_else(|| format!("[{key}]: not a table"))
}

fn checked_name(at: &str, name: &str) -> Result<(), String> {
    if id_ok(name) {
        Ok(())
    } else {
        Err(format!("{at}: `{name}` breaks the id rule"))
    }
}

/// 1 to `max` distinct names, each following the id rule.
fn name_values(at: &str, a: &[toml::Value], max: usize) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for x in a {
        let name = x
            .as_str()
            .ok_or_else(|| format!("{at}: a value is not a string"))?;
        checked_name(at, name)?;
        if out.iter().any(|o| o == name) {
            return Err(format!("{at}: `{name}` repeats"));
        }
        out.push(name.to_string());
    }
    if out.is_empty() || out.len() > max {
        return Err(format!("{at}: {} values", out.len()));
    }
    Ok(out)
}

/// An optional list of strings (`pre`, `post`).
fn string_list(e: &toml::Table, at: &str, key: &str) -> Result<Vec<String>, String> {
    let Some(v) = e.get(key) else {
        return Ok(Vec::new());
    };
    let a = v
        .as_array()
        .ok_or_else(|| format!("{at}.{key}: not a list"))?;
    a.iter()
        .map(|x| {
            x.as_str()
                .map(String::from)
                .ok_or_else(|| format!("{at}.{key}: not a string"))
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Ty {
    Bool,
    Names(Vec<String>),
    Range(i64, i64),
}

#[derive(Clone, Debug)]
struct EffectType {
    params: Vec<(String, Vec<String>)>,
    pre: Vec<String>,
    post: Vec<String>,
}

/// A registered domain as the checker understands it.
#[derive(Clone, Debug)]
pub struct AuditDomain {
    id: String,
    vars: BTreeMap<String, Ty>,
    effects: BTreeMap<String, EffectType>,
}

/// A modeled state as the checker holds it: each variable's value as text (`true`, `wp1`, `3`).
pub type World = BTreeMap<String, String>;

impl AuditDomain {
    /// Reads a domain file, strictly: the rules of docs/contracts.md ("The domain"), written here
    /// from the document, not from the monitor's reader. Every table has exactly its keys, every
    /// name follows the id rule, every list is names without repeats, every precondition and
    /// postcondition is checked against the variables and parameters it names, and the limits
    /// (256 variables, effects and enum values; 16 parameters and 4096 argument combinations per
    /// effect) hold.
    ///
    /// # Errors
    /// A message naming the key at fault when the text is not a domain.
    pub fn from_toml(text: &str) -> Result<AuditDomain, String> {
        let top: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        exact_keys(&top, "the file", &["domain", "variables", "effects"], 3)?;
        let head = sub_table(&top, "domain")?;
        exact_keys(head, "domain", &["id", "version"], 2)?;
        let id = head
            .get("id")
            .and_then(toml::Value::as_str)
            .ok_or("domain.id: a name in quotes")?;
        checked_name("domain.id", id)?;
        let version = head
            .get("version")
            .and_then(toml::Value::as_integer)
            .ok_or("domain.version: an integer")?;
        if !(0..=i64::from(u32::MAX)).contains(&version) {
            return Err(format!("domain.version: {version} is not a version number"));
        }
        let var_table = sub_table(&top, "variables")?;
        if var_table.len() > limit::DOMAIN_ITEMS {
            return Err("variables: too many".into());
        }
        let mut vars = BTreeMap::new();
        for (name, t) in var_table {
            checked_name("variables", name)?;
            let ty = match t {
                toml::Value::String(k) if k == "bool" => Ty::Bool,
                toml::Value::Array(a) => Ty::Names(name_values(
                    &format!("variables.{name}"),
                    a,
                    limit::DOMAIN_ITEMS,
                )?),
                toml::Value::Table(tb) => {
                    exact_keys(tb, &format!("variables.{name}"), &["min", "max"], 2)?;
                    let lo = tb.get("min").and_then(toml::Value::as_integer);
                    let hi = tb.get("max").and_then(toml::Value::as_integer);
                    match (lo, hi) {
                        (Some(lo), Some(hi)) if lo <= hi => Ty::Range(lo, hi),
                        _ => return Err(format!("variables.{name}: integers min <= max")),
                    }
                }
                _ => return Err(format!("variables.{name}: not a type")),
            };
            vars.insert(name.clone(), ty);
        }
        let mut d = AuditDomain {
            id: id.to_string(),
            vars,
            effects: BTreeMap::new(),
        };
        let effect_table = sub_table(&top, "effects")?;
        if effect_table.len() > limit::DOMAIN_ITEMS {
            return Err("effects: too many".into());
        }
        for (name, e) in effect_table {
            checked_name("effects", name)?;
            let at = format!("effects.{name}");
            let e = e.as_table().ok_or_else(|| format!("{at}: not a table"))?;
            exact_keys(e, &at, &["params", "pre", "post"], 0)?;
            let mut params = Vec::new();
            if let Some(p) = e.get("params") {
                let p = p
                    .as_table()
                    .ok_or_else(|| format!("{at}.params: not a table"))?;
                if p.len() > limit::PARAMS {
                    return Err(format!("{at}.params: too many"));
                }
                let mut combinations: usize = 1;
                for (pn, pt) in p {
                    checked_name(&format!("{at}.params"), pn)?;
                    let vals = match pt {
                        toml::Value::String(var) => match d.vars.get(var) {
                            Some(Ty::Names(n)) => n.clone(),
                            _ => return Err(format!("{at}.params.{pn}: `{var}` is no enum")),
                        },
                        toml::Value::Array(a) => {
                            name_values(&format!("{at}.params.{pn}"), a, limit::COMBINATIONS)?
                        }
                        _ => return Err(format!("{at}.params.{pn}: not a type")),
                    };
                    combinations = combinations.saturating_mul(vals.len());
                    params.push((pn.clone(), vals));
                }
                if combinations > limit::COMBINATIONS {
                    return Err(format!("{at}: too many argument combinations"));
                }
            }
            let pre = string_list(e, &at, "pre")?;
            let post = string_list(e, &at, "post")?;
            for c in &pre {
                d.checked_cond(c, Some(&params))
                    .map_err(|m| format!("{at}.pre: `{c}`: {m}"))?;
            }
            for a in &post {
                d.checked_assign(a, &params)
                    .map_err(|m| format!("{at}.post: `{a}`: {m}"))?;
            }
            d.effects
                .insert(name.clone(), EffectType { params, pre, post });
        }
        Ok(d)
    }

    /// The right-hand side of a condition or assignment on `var`: `$param` (a name, so only for
    /// an enum variable, and only inside an effect) or a constant of the variable's type.
    fn checked_rhs(
        &self,
        var: &str,
        rhs: &str,
        params: Option<&[(String, Vec<String>)]>,
    ) -> Result<(), String> {
        match rhs.strip_prefix('$') {
            Some(p) => {
                let params = params.ok_or("a parameter outside an effect")?;
                if !params.iter().any(|(n, _)| n == p) {
                    return Err(format!("no parameter `{p}`"));
                }
                match self.vars.get(var) {
                    Some(Ty::Names(_)) => Ok(()),
                    _ => Err(format!("`{var}` holds no names")),
                }
            }
            None => self
                .norm_value(var, rhs)
                .map(drop)
                .ok_or_else(|| format!("`{rhs}` is not a value of `{var}`")),
        }
    }

    /// `VAR OP VALUE`, OP one of `== != < <= > >=`, the order comparisons on integers only.
    fn checked_cond(
        &self,
        text: &str,
        params: Option<&[(String, Vec<String>)]>,
    ) -> Result<(), String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [var, op, rhs] = parts.as_slice() else {
            return Err("three words".into());
        };
        let ty = self.vars.get(*var).ok_or("unknown variable")?;
        let ordered = matches!(*op, "<" | "<=" | ">" | ">=");
        if !(ordered || matches!(*op, "==" | "!=")) {
            return Err("unknown comparison".into());
        }
        if ordered && !matches!(ty, Ty::Range(..)) {
            return Err("an order comparison on a non-integer".into());
        }
        self.checked_rhs(var, rhs, params)
    }

    /// `VAR = VALUE`, `VAR = $param`, or `VAR += N` / `VAR -= N` on an integer (N an integer
    /// whose negation is one too).
    fn checked_assign(&self, text: &str, params: &[(String, Vec<String>)]) -> Result<(), String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [var, op, rhs] = parts.as_slice() else {
            return Err("three words".into());
        };
        let ty = self.vars.get(*var).ok_or("unknown variable")?;
        match *op {
            "=" => self.checked_rhs(var, rhs, Some(params)),
            "+=" | "-=" => {
                if !matches!(ty, Ty::Range(..)) {
                    return Err("arithmetic on a non-integer".into());
                }
                let n: i64 = rhs.parse().map_err(|_| "not an integer step")?;
                if *op == "-=" && n == i64::MIN {
                    return Err("a step too large to subtract".into());
                }
                Ok(())
            }
            _ => Err("unknown assignment".into()),
        }
    }

    /// A conjunction holds in `w` (a malformed one does not).
    pub fn holds(&self, w: &World, conds: &[String]) -> bool {
        self.all(w, conds) == Some(true)
    }

    /// Whether every condition parses against this domain's variables.
    pub fn is_predicate(&self, conds: &[String]) -> bool {
        self.wellformed(conds)
    }

    /// The successor of `w` under canonical effect text `e`.
    pub fn apply_effect(&self, w: &World, e: &str) -> Option<World> {
        self.step(w, e)
    }

    /// The canonical text of an effect (`land` → `land()`, whitespace dropped), or `None` when
    /// the domain has no such effect.
    pub fn canonical_effect(&self, text: &str) -> Option<String> {
        self.canon(text)
    }

    /// A full world from `{variable: value}`: every variable given, each value of its type,
    /// nothing else named.
    pub fn world(&self, values: &serde_json::Map<String, Value>) -> Option<World> {
        if values.keys().any(|k| !self.vars.contains_key(k)) {
            return None;
        }
        self.vars
            .keys()
            .map(|var| {
                let raw = values.get(var)?;
                Some((var.clone(), self.norm_value(var, &Self::value_text(raw))?))
            })
            .collect()
    }

    /// `w` with some variables set (a trusted observation); `None` when one is unknown or
    /// ill-typed.
    pub fn observe(&self, w: &World, values: &serde_json::Map<String, Value>) -> Option<World> {
        let mut out = w.clone();
        for (k, v) in values {
            out.insert(k.clone(), self.norm_value(k, &Self::value_text(v))?);
        }
        Some(out)
    }

    /// Canonical effect text, or `None` when the effect is not registered.
    fn canon(&self, text: &str) -> Option<String> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let (name, args) = match t.split_once('(') {
            Some((n, rest)) => (n.to_string(), rest.strip_suffix(')')?.to_string()),
            None => (t.clone(), String::new()),
        };
        let et = self.effects.get(&name)?;
        let args: Vec<&str> = if args.is_empty() {
            Vec::new()
        } else {
            args.split(',').collect()
        };
        if args.len() != et.params.len() {
            return None;
        }
        for (a, (_, vals)) in args.iter().zip(&et.params) {
            if !vals.iter().any(|v| v == a) {
                return None;
            }
        }
        Some(format!("{name}({})", args.join(",")))
    }

    fn norm_value(&self, var: &str, raw: &str) -> Option<String> {
        match self.vars.get(var)? {
            Ty::Bool => matches!(raw, "true" | "false").then(|| raw.to_string()),
            Ty::Names(n) => n.iter().any(|x| x == raw).then(|| raw.to_string()),
            Ty::Range(lo, hi) => raw
                .parse::<i64>()
                .ok()
                .filter(|x| x >= lo && x <= hi)
                .map(|x| x.to_string()),
        }
    }

    fn value_text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// One condition `VAR OP VALUE` in `w`; `args` binds `$param` names. `None` when malformed.
    fn cond(&self, w: &World, text: &str, args: &BTreeMap<String, String>) -> Option<bool> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [var, op, rhs] = parts.as_slice() else {
            return None;
        };
        let rhs = match rhs.strip_prefix('$') {
            Some(p) => args.get(p)?.clone(),
            None => self.norm_value(var, rhs)?,
        };
        let cur = w.get(*var)?;
        match self.vars.get(*var)? {
            Ty::Range(..) => {
                let (a, b) = (cur.parse::<i64>().ok()?, rhs.parse::<i64>().ok()?);
                Some(match *op {
                    "==" => a == b,
                    "!=" => a != b,
                    "<" => a < b,
                    "<=" => a <= b,
                    ">" => a > b,
                    ">=" => a >= b,
                    _ => return None,
                })
            }
            _ => match *op {
                "==" => Some(*cur == rhs),
                "!=" => Some(*cur != rhs),
                _ => None,
            },
        }
    }

    /// A conjunction; `None` when any condition is malformed.
    fn all(&self, w: &World, conds: &[String]) -> Option<bool> {
        let none = BTreeMap::new();
        let mut ok = true;
        for c in conds {
            ok &= self.cond(w, c, &none)?;
        }
        Some(ok)
    }

    fn wellformed(&self, conds: &[String]) -> bool {
        let probe: World = self
            .vars
            .iter()
            .map(|(k, t)| {
                let v = match t {
                    Ty::Bool => "false".to_string(),
                    Ty::Names(n) => n.first().cloned().unwrap_or_default(),
                    Ty::Range(lo, _) => lo.to_string(),
                };
                (k.clone(), v)
            })
            .collect();
        self.all(&probe, conds).is_some()
    }

    /// The successor of `w` under canonical effect `e`, or `None` when not applicable.
    fn step(&self, w: &World, e: &str) -> Option<World> {
        let (name, rest) = e.split_once('(')?;
        let et = self.effects.get(name)?;
        let argv: Vec<&str> = rest
            .trim_end_matches(')')
            .split(',')
            .filter(|x| !x.is_empty())
            .collect();
        let args: BTreeMap<String, String> = et
            .params
            .iter()
            .map(|(p, _)| p.clone())
            .zip(argv.iter().map(|x| x.to_string()))
            .collect();
        for c in &et.pre {
            if !self.cond(w, c, &args)? {
                return None;
            }
        }
        let mut out = w.clone();
        for a in &et.post {
            let parts: Vec<&str> = a.split_whitespace().collect();
            let [var, op, rhs] = parts.as_slice() else {
                return None;
            };
            match *op {
                "=" => {
                    let v = match rhs.strip_prefix('$') {
                        Some(p) => args.get(p)?.clone(),
                        None => rhs.to_string(),
                    };
                    let v = self.norm_value(var, &v)?;
                    out.insert(var.to_string(), v);
                }
                "+=" | "-=" => {
                    let cur: i64 = out.get(*var)?.parse().ok()?;
                    let d: i64 = rhs.parse().ok()?;
                    let n = if *op == "+=" {
                        cur.checked_add(d)?
                    } else {
                        cur.checked_sub(d)?
                    };
                    let v = self.norm_value(var, &n.to_string())?;
                    out.insert(var.to_string(), v);
                }
                _ => return None,
            }
        }
        Some(out)
    }
}

// --- the replayed configuration --------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Active,
    Closed,
    Cancelled,
    Replaced,
    Joined,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) parent: Option<String>,
    pub(crate) revision: u64,
    pub(crate) status: Status,
    pub(crate) residual: Vec<Vec<String>>,
    pub(crate) closing: Vec<String>,
    pub(crate) resources: BTreeSet<String>,
    pub(crate) obligations: BTreeSet<String>,
    pub(crate) frames: Vec<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Ver {
    pub(crate) epoch: u64,
    pub(crate) policy: u64,
    pub(crate) state: u64,
    pub(crate) graph: u64,
}

impl Ver {
    fn of(v: &Value) -> Option<Ver> {
        Some(Ver {
            epoch: v.get("epoch")?.as_u64()?,
            policy: v.get("policy")?.as_u64()?,
            state: v.get("state")?.as_u64()?,
            graph: v.get("graph")?.as_u64()?,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Hold {
    pub(crate) goal: String,
    pub(crate) effect: String,
    pub(crate) trace: [u8; 32],
    pub(crate) ver: Ver,
    pub(crate) spent: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Rules {
    pub(crate) deny: BTreeSet<String>,
    pub(crate) max_len: Option<usize>,
    pub(crate) forbid: Vec<Vec<String>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Root {
    pub(crate) id: String,
    pub(crate) epoch: u64,
    pub(crate) language: BTreeSet<Vec<String>>,
    pub(crate) forbidden: Vec<Vec<String>>,
    pub(crate) closing: Vec<String>,
    pub(crate) envelope: BTreeSet<String>,
    pub(crate) obligations: BTreeSet<String>,
    pub(crate) discharge: BTreeMap<String, Vec<String>>,
}

#[derive(Clone)]
pub(crate) struct Replay<'d> {
    pub(crate) defect: Option<Defect>,
    /// Invariant evidence: an edit or delegation was accepted on a stale witness.
    pub(crate) stale_accepted: bool,
    /// Invariant evidence: an accepted witness or delegation named another root.
    pub(crate) foreign_accepted: bool,
    /// Invariant evidence: an effect was committed without its reservation.
    pub(crate) unmediated: bool,
    pub(crate) d: &'d AuditDomain,
    pub(crate) root: Option<Root>,
    pub(crate) rules: Rules,
    pub(crate) world: World,
    pub(crate) trace: Vec<String>,
    pub(crate) trace_digest: [u8; 32],
    pub(crate) nodes: BTreeMap<String, Node>,
    pub(crate) created: usize,
    pub(crate) ver: Ver,
    pub(crate) path: Option<(Vec<String>, Ver)>,
    pub(crate) lifecycle: Option<&'static str>,
    pub(crate) holds: BTreeMap<u64, Hold>,
    pub(crate) next_hold: u64,
    pub(crate) keys: BTreeMap<String, (Value, usize, String)>,
    pub(crate) report: AuditReport,
}

/// The result of re-deriving one operation: `Err` carries why it must not be allowed.
type Judged = Result<Effects, String>;

/// What an allowed operation changes, computed before anything is applied.
#[derive(Default)]
struct Effects {
    edit: Option<String>,
    reservation: Option<u64>,
    apply: Vec<Change>,
}

enum Change {
    Register(Root, World, Rules),
    Node(String, Node),
    SetStatus(String, Status),
    BumpRevision(String),
    Resources(String, BTreeSet<String>),
    Graph,
    Path(Vec<String>),
    NoPath,
    Lifecycle(&'static str),
    Hold(u64, Hold),
    Commit(u64, String, World),
    Policy(Rules),
    Observe(World),
    /// A witness was accepted: (fresh, names this root).
    Witnessed(bool, bool),
    /// A commit was accepted without its reservation.
    Unmediated(bool),
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn string_lists(v: &Value) -> Vec<Vec<String>> {
    v.as_array()
        .map(|a| a.iter().map(strings).collect())
        .unwrap_or_default()
}

/// The edit digest of a goal spec, hex (for the explorer's witnesses).
pub(crate) fn edit_hash_of(goal: &Value) -> String {
    edit_hash(goal)
}

/// The digest a delegation's witness binds, hex.
pub(crate) fn delegation_hash_of(goal: &str, resources: &Value, worker: &str) -> String {
    delegation_hash(goal, resources, worker)
}

fn edit_hash(goal: &Value) -> String {
    let bytes = serde_json::to_vec(goal).unwrap_or_default();
    hex(&sha(&[b"halo/component/v1\0", b"contract-edit\0", &bytes]))
}

fn delegation_hash(goal: &str, resources: &Value, worker: &str) -> String {
    let spec = json!({"goal": goal, "resources": resources, "worker": worker});
    hex(&sha(&[
        b"halo/component/v1\0",
        b"contract-delegation\0",
        spec.to_string().as_bytes(),
    ]))
}

/// Every interleaving of one trace per component, each component's order kept, and a component
/// wholly before another where `before` says so. `Err(true)` is a guard, `Err(false)` a cycle.
fn interleavings(
    parts: &[Vec<Vec<String>>],
    before: &[(usize, usize)],
) -> Result<BTreeSet<Vec<String>>, bool> {
    let n = parts.len();
    // Cycle check by repeated removal of sources.
    let mut left: BTreeSet<usize> = (0..n).collect();
    while !left.is_empty() {
        let free: Vec<usize> = left
            .iter()
            .copied()
            .filter(|i| !before.iter().any(|(a, b)| b == i && left.contains(a)))
            .collect();
        if free.is_empty() {
            return Err(false);
        }
        for f in free {
            left.remove(&f);
        }
    }
    // Count linear extensions of the component order (stop above the guard).
    fn count(n: usize, before: &[(usize, usize)], done: &mut Vec<usize>, c: &mut usize) {
        if *c > limit::GUARD {
            return;
        }
        if done.len() == n {
            *c += 1;
            return;
        }
        for i in 0..n {
            if !done.contains(&i) && before.iter().all(|(a, b)| *b != i || done.contains(a)) {
                done.push(i);
                count(n, before, done, c);
                done.pop();
            }
        }
    }
    let mut orders = 0;
    count(n, before, &mut Vec::new(), &mut orders);
    if orders > limit::GUARD {
        return Err(true);
    }
    let product = parts.iter().try_fold(1usize, |acc, p| {
        acc.checked_mul(p.len().max(1))
            .filter(|x| *x <= limit::GUARD)
    });
    if product.is_none() {
        return Err(true);
    }
    let mut out = BTreeSet::new();
    let mut raw = 0usize;
    // Enumerate choices with an explicit index vector.
    let mut pick = vec![0usize; n];
    loop {
        let chosen: Vec<&Vec<String>> = parts
            .iter()
            .zip(&pick)
            .filter_map(|(p, k)| p.get(*k))
            .collect();
        if chosen.len() == n {
            let mut at = vec![0usize; n];
            let mut cur = Vec::new();
            weave(&chosen, before, &mut at, &mut cur, &mut out, &mut raw)?;
        }
        let mut k = 0;
        loop {
            if k == n {
                return if out.len() > limit::CONTINUATIONS {
                    Err(true)
                } else {
                    Ok(out)
                };
            }
            if let Some(x) = pick.get_mut(k) {
                *x += 1;
                if *x < parts.get(k).map_or(0, Vec::len) {
                    break;
                }
                *x = 0;
            }
            k += 1;
        }
    }
}

fn weave(
    chosen: &[&Vec<String>],
    before: &[(usize, usize)],
    at: &mut Vec<usize>,
    cur: &mut Vec<String>,
    out: &mut BTreeSet<Vec<String>>,
    raw: &mut usize,
) -> Result<(), bool> {
    let finished = |i: usize, at: &[usize]| {
        at.get(i).copied().unwrap_or(0) >= chosen.get(i).map_or(0, |t| t.len())
    };
    let mut moved = false;
    for i in 0..chosen.len() {
        if finished(i, at) || before.iter().any(|(a, b)| *b == i && !finished(*a, at)) {
            continue;
        }
        let Some(e) = chosen
            .get(i)
            .and_then(|t| t.get(at.get(i).copied().unwrap_or(0)))
        else {
            continue;
        };
        moved = true;
        cur.push(e.clone());
        if let Some(x) = at.get_mut(i) {
            *x += 1;
        }
        weave(chosen, before, at, cur, out, raw)?;
        if let Some(x) = at.get_mut(i) {
            *x -= 1;
        }
        cur.pop();
    }
    if !moved {
        *raw += 1;
        if *raw > limit::GUARD {
            return Err(true);
        }
        out.insert(cur.clone());
    }
    Ok(())
}

fn prefix_of_some(lang: &[Vec<String>], x: &[String]) -> bool {
    lang.iter().any(|m| m.starts_with(x))
}

impl<'d> Replay<'d> {
    pub(crate) fn new(d: &'d AuditDomain) -> Replay<'d> {
        Replay {
            defect: None,
            stale_accepted: false,
            foreign_accepted: false,
            unmediated: false,
            d,
            root: None,
            rules: Rules::default(),
            world: World::new(),
            trace: Vec::new(),
            trace_digest: [0; 32],
            nodes: BTreeMap::new(),
            created: 0,
            ver: Ver::default(),
            path: None,
            lifecycle: None,
            holds: BTreeMap::new(),
            next_hold: 1,
            keys: BTreeMap::new(),
            report: AuditReport::default(),
        }
    }

    fn canon_all(&self, traces: &[Vec<String>]) -> Result<Vec<Vec<String>>, String> {
        traces
            .iter()
            .map(|t| {
                t.iter()
                    .map(|e| {
                        self.d
                            .canon(e)
                            .ok_or_else(|| format!("`{e}` is not registered"))
                    })
                    .collect()
            })
            .collect()
    }

    fn bad_state(&self, w: &World, frames: &[&Vec<String>]) -> Result<(), String> {
        let root = self.root.as_ref().ok_or("no root")?;
        for f in root.forbidden.iter().chain(&self.rules.forbid) {
            if self.d.all(w, f).ok_or("malformed predicate")? {
                return Err(format!("forbidden state {w:?}"));
            }
        }
        for f in frames {
            if self.defect == Some(Defect::NoFrames) {
                break;
            }
            if !self.d.all(w, f).ok_or("malformed frame")? {
                return Err(format!("frame fails in {w:?}"));
            }
        }
        Ok(())
    }

    /// Every prefix of every trace from `w`: applicable, not forbidden, frames kept, policy kept.
    fn safe(
        &self,
        w: &World,
        traces: &[Vec<String>],
        frames: &[&Vec<String>],
        rules: &Rules,
    ) -> Result<(), String> {
        self.bad_state(w, frames)?;
        for t in traces {
            if let Some(m) = rules.max_len {
                if self.trace.len() + t.len() > m {
                    return Err("policy length".into());
                }
            }
            let mut cur = w.clone();
            for e in t {
                if rules.deny.contains(e) {
                    return Err(format!("policy denies {e}"));
                }
                cur = self
                    .d
                    .step(&cur, e)
                    .ok_or_else(|| format!("{e} not applicable"))?;
                self.bad_state(&cur, frames)?;
            }
        }
        Ok(())
    }

    fn after(&self, w: &World, t: &[String]) -> Option<World> {
        let mut cur = w.clone();
        for e in t {
            cur = self.d.step(&cur, e)?;
        }
        Some(cur)
    }

    fn ancestry(&self, id: &str) -> Vec<String> {
        let mut out = vec![id.to_string()];
        let mut cur = id.to_string();
        while let Some(p) = self.nodes.get(&cur).and_then(|n| n.parent.clone()) {
            if out.contains(&p) || out.len() > limit::GOALS + 1 {
                break;
            }
            out.push(p.clone());
            cur = p;
        }
        out
    }

    fn has_active_below(&self, id: &str) -> bool {
        self.nodes.iter().any(|(k, n)| {
            k != id
                && n.status == Status::Active
                && self.ancestry(k).iter().skip(1).any(|a| a == id)
        })
    }

    fn any_active_goal(&self) -> bool {
        let root = self.root.as_ref().map(|r| r.id.as_str()).unwrap_or("");
        self.nodes
            .iter()
            .any(|(k, n)| k != root && n.status == Status::Active)
    }

    fn can_edit(&self) -> Result<(), String> {
        match self.lifecycle {
            Some("runnable") => Ok(()),
            Some("suspended") if !self.any_active_goal() => Ok(()),
            _ => Err("root not runnable".into()),
        }
    }

    fn fresh_path(&self) -> Result<&Vec<String>, String> {
        if self.lifecycle != Some("runnable") {
            return Err("root not runnable".into());
        }
        match &self.path {
            Some((p, v)) if *v == self.ver => Ok(p),
            _ => Err("no fresh witness".into()),
        }
    }

    /// W1, W2 and W7 for a witness; on success, whether it was fresh and named this root (both
    /// always true unless a defect skipped the comparison).
    fn witness_ok(&self, w: &Value, parent: &str, edit: &str) -> Result<Change, String> {
        let root = self.root.as_ref().ok_or("no root")?;
        let g = |k: &str| {
            w.get(k)
                .and_then(Value::as_u64)
                .ok_or(format!("witness {k}"))
        };
        let p = self.nodes.get(parent).ok_or("witness parent unknown")?;
        let identity = w.get("root").and_then(Value::as_str) == Some(root.id.as_str())
            && g("epoch")? == root.epoch;
        let binding = w.get("edit").and_then(Value::as_str) == Some(edit)
            && w.get("parent").and_then(Value::as_str) == Some(parent)
            && g("new_revision")? == g("base_revision")?.saturating_add(1);
        let graph = g("base_revision")? == self.ver.graph && g("parent_revision")? == p.revision;
        let policy = g("policy_version")? == self.ver.policy;
        let state = g("state_version")? == self.ver.state;
        let skip = |d: Defect| self.defect == Some(d);
        let ok = (identity || skip(Defect::NoRootIdentity))
            && binding
            && (graph || skip(Defect::NoGraphFreshness))
            && (policy || skip(Defect::NoPolicyFreshness))
            && (state || skip(Defect::NoStateFreshness));
        if ok {
            Ok(Change::Witnessed(graph && policy && state, identity))
        } else {
            Err("witness does not bind this root, edit and current versions".into())
        }
    }

    fn same(&self, a: &[String], b: &[String]) -> bool {
        match self.defect {
            Some(Defect::IgnoreOrder) => {
                let (mut x, mut y) = (a.to_vec(), b.to_vec());
                x.sort();
                y.sort();
                x == y
            }
            Some(Defect::IgnoreMultiplicity) => {
                let (mut x, mut y) = (a.to_vec(), b.to_vec());
                x.dedup();
                y.dedup();
                x == y
            }
            _ => a == b,
        }
    }

    /// `x` is a prefix of some trace in `lang` (as the defect, if any, compares traces).
    fn in_prefixes(&self, lang: &[Vec<String>], x: &[String]) -> bool {
        match self.defect {
            Some(Defect::IgnoreOrder) => lang
                .iter()
                .any(|m| m.len() >= x.len() && self.same(m.get(..x.len()).unwrap_or(&[]), x)),
            Some(Defect::IgnoreMultiplicity) => lang.iter().any(|m| {
                let (mut a, mut b) = (m.clone(), x.to_vec());
                a.dedup();
                b.dedup();
                a.starts_with(&b)
            }),
            _ => prefix_of_some(lang, x),
        }
    }

    /// A goal spec's node, unchecked (the local-only composition defect).
    fn unchecked_node(&self, g: &Value, parent: &str) -> Result<Node, String> {
        Ok(Node {
            parent: Some(parent.to_string()),
            revision: 1,
            status: Status::Active,
            residual: self.canon_all(&string_lists(&g["traces"]))?,
            closing: strings(&g["closing"]),
            resources: strings(&g["resources"]).into_iter().collect(),
            obligations: strings(&g["obligations"]).into_iter().collect(),
            frames: string_lists(&g["frames"]),
        })
    }

    fn goal_limits(g: &Value) -> Result<(), String> {
        let arr = |k: &str| g.get(k).and_then(Value::as_array).map_or(0, Vec::len);
        if arr("traces") > limit::CONTINUATIONS || arr("completion") > limit::CONTINUATIONS {
            return Err("profile: continuations".into());
        }
        for t in string_lists(&g["traces"])
            .iter()
            .chain(&string_lists(&g["completion"]))
        {
            if t.len() > limit::EFFECTS {
                return Err("profile: continuation length".into());
            }
        }
        for k in [
            "resources",
            "obligations",
            "frames",
            "closing",
            "discharged",
        ] {
            if arr(k) > limit::ARRAY {
                return Err(format!("profile: {k}"));
            }
        }
        Ok(())
    }

    /// W3–W6 for a goal spec below `parent`; returns the new node.
    fn refine(
        &self,
        g: &Value,
        parent: &str,
        extra_resource_bound: Option<&BTreeSet<String>>,
    ) -> Result<Node, String> {
        let root = self.root.as_ref().ok_or("no root")?;
        let p = self.nodes.get(parent).ok_or("parent unknown")?;
        let own = self.canon_all(&string_lists(&g["traces"]))?;
        let rest = self.canon_all(&string_lists(&g["completion"]))?;
        let closing = strings(&g["closing"]);
        let frames = string_lists(&g["frames"]);
        if !self.d.wellformed(&closing) || !frames.iter().all(|f| self.d.wellformed(f)) {
            return Err("malformed predicate".into());
        }
        let mut composed = Vec::new();
        for u in &own {
            for v in &rest {
                let mut x = u.clone();
                x.extend(v.iter().cloned());
                if x.len() > 2 * limit::EFFECTS {
                    return Err("profile: composed length".into());
                }
                composed.push(x);
            }
        }
        for a in self.ancestry(parent) {
            let res = &self.nodes.get(&a).ok_or("ancestor")?.residual;
            if let Some(x) = composed.iter().find(|x| !self.in_prefixes(res, x)) {
                return Err(format!("{x:?} outside {a}'s residual language"));
            }
        }
        if let Some(x) = composed
            .iter()
            .find(|x| !p.residual.iter().any(|m| self.same(m, x)))
        {
            return Err(format!("{x:?} does not complete {parent}'s work"));
        }
        let mut all_frames: Vec<&Vec<String>> = frames.iter().collect();
        for a in self.ancestry(parent) {
            if let Some(n) = self.nodes.get(&a) {
                all_frames.extend(n.frames.iter());
            }
        }
        self.safe(&self.world, &composed, &all_frames, &self.rules)?;
        let resources: BTreeSet<String> = strings(&g["resources"]).into_iter().collect();
        let check_resources = self.defect != Some(Defect::NoResourceCheck);
        if check_resources
            && resources
                .iter()
                .any(|r| !p.resources.contains(r) || !root.envelope.contains(r))
        {
            return Err("resources exceed the envelope".into());
        }
        if let Some(b) = extra_resource_bound.filter(|_| check_resources) {
            if !resources.is_subset(b) {
                return Err("joined resources exceed the sources'".into());
            }
        }
        let obligations: BTreeSet<String> = strings(&g["obligations"]).into_iter().collect();
        let check_obligations = self.defect != Some(Defect::NoObligationCheck);
        if check_obligations && !obligations.is_subset(&p.obligations) {
            return Err("obligation minted".into());
        }
        let discharged = strings(&g["discharged"]);
        for o in p
            .obligations
            .difference(&obligations)
            .filter(|_| check_obligations)
        {
            let evidence = discharged.contains(o)
                && root
                    .discharge
                    .get(o)
                    .and_then(|pr| self.d.all(&self.world, pr))
                    == Some(true);
            if !evidence {
                return Err(format!("obligation {o} dropped"));
            }
        }
        let check_success = self.defect != Some(Defect::NoSuccessRefinement);
        for u in own.iter().filter(|_| check_success) {
            let end = self.after(&self.world, u).ok_or("not applicable")?;
            if self.d.all(&end, &closing) != Some(true) {
                return Err("own closing predicate fails".into());
            }
        }
        for x in composed.iter().filter(|_| check_success) {
            let end = self.after(&self.world, x).ok_or("not applicable")?;
            if self.d.all(&end, &p.closing) != Some(true) {
                return Err("parent closing predicate fails".into());
            }
            if p.parent.is_none() && self.d.all(&end, &root.closing) != Some(true) {
                return Err("root closing predicate fails".into());
            }
        }
        Ok(Node {
            parent: Some(parent.to_string()),
            revision: 1,
            status: Status::Active,
            residual: own,
            closing,
            resources,
            obligations,
            frames,
        })
    }

    fn gate(&self, leaf: &str, e: &str) -> Result<World, String> {
        let path = self.fresh_path()?;
        if path.first().map(String::as_str) != Some(leaf) {
            return Err("not the leaf of the current path".into());
        }
        for h in path {
            let n = self.nodes.get(h).ok_or("path node")?;
            if !n
                .residual
                .iter()
                .any(|t| t.first().map(String::as_str) == Some(e))
            {
                return Err(format!("{e} not next for {h}"));
            }
        }
        if self.rules.deny.contains(e) {
            return Err("policy denies".into());
        }
        let next = self.d.step(&self.world, e).ok_or("not applicable")?;
        let frames: Vec<&Vec<String>> = path
            .iter()
            .filter_map(|h| self.nodes.get(h))
            .flat_map(|n| n.frames.iter())
            .collect();
        self.bad_state(&next, &frames)?;
        Ok(next)
    }

    fn parse_rules(&self, rules: &Value) -> Result<Rules, String> {
        let mut r = Rules::default();
        for x in rules.as_array().ok_or("policy is a list")? {
            match x.get("rule").and_then(Value::as_str) {
                Some("deny_effect") => {
                    let e = x.get("effect").and_then(Value::as_str).ok_or("effect")?;
                    r.deny.insert(self.d.canon(e).ok_or("unknown effect")?);
                }
                Some("max_trace_len") => {
                    let m = x.get("max").and_then(Value::as_u64).ok_or("max")? as usize;
                    r.max_len = Some(r.max_len.map_or(m, |o| o.min(m)));
                }
                Some("forbid") => {
                    let w = strings(&x["when"]);
                    if !self.d.wellformed(&w) {
                        return Err("malformed".into());
                    }
                    r.forbid.push(w);
                }
                _ => return Err("unknown rule".into()),
            }
        }
        Ok(r)
    }

    fn judge(&self, caller: &str, op: &Value) -> Judged {
        let kind = op.get("op").and_then(Value::as_str).ok_or("no op")?;
        if !names_ok(op) {
            return Err("a name outside the id rule".into());
        }
        let mut fx = Effects::default();
        match kind {
            "register_root" => {
                if caller != "operator" {
                    return Err("role".into());
                }
                if self.root.is_some() {
                    return Err("root exists".into());
                }
                if op
                    .get("approved_by")
                    .and_then(Value::as_str)
                    .is_none_or(|s| s.trim().is_empty())
                {
                    return Err("not approved".into());
                }
                let c = &op["contract"];
                if c.get("domain").and_then(Value::as_str) != Some(self.d.id.as_str()) {
                    return Err("domain".into());
                }
                let traces = string_lists(&c["traces"]);
                if traces.len() > limit::CONTINUATIONS
                    || traces.iter().any(|t| t.len() > limit::EFFECTS)
                {
                    return Err("profile".into());
                }
                for k in ["resources", "obligations", "forbidden", "closing"] {
                    if c.get(k).and_then(Value::as_array).map_or(0, Vec::len) > limit::ARRAY {
                        return Err("profile".into());
                    }
                }
                let language: BTreeSet<Vec<String>> =
                    self.canon_all(&traces)?.into_iter().collect();
                if language.is_empty() {
                    return Err("empty language".into());
                }
                let init = c
                    .get("initial")
                    .and_then(Value::as_object)
                    .ok_or("initial")?;
                let w = self
                    .d
                    .world(init)
                    .ok_or("initial incomplete, ill-typed or naming an unknown variable")?;
                let forbidden = string_lists(&c["forbidden"]);
                let closing = strings(&c["closing"]);
                let mut discharge = BTreeMap::new();
                for (o, p) in c
                    .get("discharge")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    discharge.insert(o.clone(), strings(p));
                }
                if !forbidden
                    .iter()
                    .chain(std::iter::once(&closing))
                    .chain(discharge.values())
                    .all(|p| self.d.wellformed(p))
                {
                    return Err("malformed predicate".into());
                }
                let rules = self.parse_rules(c.get("policy").unwrap_or(&json!([])))?;
                let root = Root {
                    id: c
                        .get("root")
                        .and_then(Value::as_str)
                        .ok_or("root id")?
                        .to_string(),
                    epoch: c.get("epoch").and_then(Value::as_u64).ok_or("epoch")?,
                    language,
                    forbidden,
                    closing,
                    envelope: strings(&c["resources"]).into_iter().collect(),
                    obligations: strings(&c["obligations"]).into_iter().collect(),
                    discharge,
                };
                // The initial contract must be safe in its own terms.
                let mut probe = Replay::new(self.d);
                probe.root = Some(root.clone());
                let lang: Vec<Vec<String>> = root.language.iter().cloned().collect();
                probe.safe(&w, &lang, &[], &rules)?;
                fx.apply.push(Change::Register(root, w, rules));
            }
            "change_version" => {
                let policy = op.get("policy").filter(|p| !p.is_null());
                let observe = op.get("observe").filter(|p| !p.is_null());
                match (policy, observe) {
                    (Some(_), _) if caller != "operator" => return Err("role".into()),
                    (None, Some(_)) if !matches!(caller, "operator" | "provider") => {
                        return Err("role".into());
                    }
                    (None, None) => return Err("empty change".into()),
                    _ => {}
                }
                if self.root.is_none() || self.lifecycle == Some("closed") {
                    return Err("no open root".into());
                }
                if let Some(p) = policy {
                    fx.apply.push(Change::Policy(self.parse_rules(p)?));
                }
                if let Some(o) = observe {
                    let w = self
                        .d
                        .observe(&self.world, o.as_object().ok_or("observe")?)
                        .ok_or("ill-typed observation")?;
                    fx.apply.push(Change::Observe(w));
                }
                fx.apply.push(Change::Lifecycle("suspended"));
                fx.apply.push(Change::NoPath);
            }
            _ => {
                if !matches!(caller, "agent" | "operator") {
                    return Err("role".into());
                }
                if self.root.is_none() {
                    return Err("no root".into());
                }
                if self.lifecycle == Some("closed") {
                    return Err("root closed".into());
                }
                self.judge_agent(kind, op, &mut fx)?;
            }
        }
        Ok(fx)
    }

    fn judge_agent(&self, kind: &str, op: &Value, fx: &mut Effects) -> Result<(), String> {
        let root = self.root.as_ref().ok_or("no root")?;
        let s = |k: &str| op.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match kind {
            "propose_goal" | "replace_goal" => {
                let g = &op["goal"];
                Replay::goal_limits(g)?;
                if self.created >= limit::GOALS {
                    return Err("profile: goals".into());
                }
                let id = g.get("id").and_then(Value::as_str).ok_or("id")?.to_string();
                let parent = g
                    .get("parent")
                    .and_then(Value::as_str)
                    .ok_or("parent")?
                    .to_string();
                if self.nodes.get(&parent).map(|n| n.status) != Some(Status::Active) {
                    return Err("parent not active".into());
                }
                let mut revision = 1;
                if kind == "replace_goal" {
                    let old = s("old");
                    let o = self.nodes.get(&old).ok_or("old unknown")?;
                    if o.parent.as_deref() != Some(parent.as_str())
                        || !matches!(o.status, Status::Active | Status::Cancelled)
                        || self.has_active_below(&old)
                    {
                        return Err("not replaceable".into());
                    }
                    if self.nodes.contains_key(&id) && id != old {
                        return Err("duplicate".into());
                    }
                    revision = o.revision + 1;
                    fx.apply.push(Change::SetStatus(old, Status::Replaced));
                } else if self.nodes.contains_key(&id) {
                    return Err("duplicate".into());
                }
                let edit = edit_hash(g);
                fx.apply
                    .push(self.witness_ok(&op["witness"], &parent, &edit)?);
                self.can_edit()?;
                let mut node = self.refine(g, &parent, None)?;
                node.revision = revision;
                fx.edit = Some(edit);
                self.install(fx, id, parent, node);
            }
            "join_goals" => {
                let g = &op["joined"];
                let sources = strings(&op["sources"]);
                let prec: Vec<(String, String)> = op["precedence"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| {
                                Some((
                                    p.get(0)?.as_str()?.to_string(),
                                    p.get(1)?.as_str()?.to_string(),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if sources.len() > limit::JOIN_SOURCES
                    || op["precedence"].as_array().map_or(0, Vec::len) > limit::PRECEDENCE
                {
                    return Err("profile: join".into());
                }
                Replay::goal_limits(g)?;
                if self.created >= limit::GOALS {
                    return Err("profile: goals".into());
                }
                let id = g.get("id").and_then(Value::as_str).ok_or("id")?.to_string();
                let parent = g
                    .get("parent")
                    .and_then(Value::as_str)
                    .ok_or("parent")?
                    .to_string();
                if !self.nodes.contains_key(&parent) {
                    return Err("parent unknown".into());
                }
                let mut seen = BTreeSet::new();
                for x in &sources {
                    let n = self.nodes.get(x).ok_or("source unknown")?;
                    if n.status != Status::Active
                        || n.parent.as_deref() != Some(parent.as_str())
                        || !seen.insert(x.clone())
                    {
                        return Err("sources are not distinct active siblings".into());
                    }
                }
                if sources.len() < 2 || self.nodes.contains_key(&id) {
                    return Err("join shape".into());
                }
                let edit = edit_hash(g);
                fx.apply
                    .push(self.witness_ok(&op["witness"], &parent, &edit)?);
                self.can_edit()?;
                let mut edges = Vec::new();
                for (a, b) in &prec {
                    let ia = sources
                        .iter()
                        .position(|x| x == a)
                        .ok_or("precedence names a non-source")?;
                    let ib = sources
                        .iter()
                        .position(|x| x == b)
                        .ok_or("precedence names a non-source")?;
                    if ia == ib {
                        return Err("self precedence".into());
                    }
                    edges.push((ia, ib));
                }
                if self.defect == Some(Defect::LocalOnlyComposition) {
                    let node = self.unchecked_node(g, &parent)?;
                    for x in &sources {
                        fx.apply.push(Change::SetStatus(x.clone(), Status::Joined));
                    }
                    fx.edit = Some(edit);
                    self.install(fx, id, parent, node);
                    return Ok(());
                }
                let parts: Vec<Vec<Vec<String>>> = sources
                    .iter()
                    .filter_map(|x| self.nodes.get(x).map(|n| n.residual.clone()))
                    .collect();
                let all = interleavings(&parts, &edges).map_err(|guard| {
                    if guard {
                        "profile: join guard"
                    } else {
                        "precedence cycle"
                    }
                    .to_string()
                })?;
                let supplied: BTreeSet<Vec<String>> = self
                    .canon_all(&string_lists(&g["traces"]))?
                    .into_iter()
                    .collect();
                if supplied != all {
                    return Err("not the complete composition".into());
                }
                let held: BTreeSet<String> = sources
                    .iter()
                    .filter_map(|x| self.nodes.get(x))
                    .flat_map(|n| n.resources.iter().cloned())
                    .collect();
                let node = self.refine(g, &parent, Some(&held))?;
                for x in &sources {
                    fx.apply.push(Change::SetStatus(x.clone(), Status::Joined));
                }
                fx.edit = Some(edit);
                self.install(fx, id, parent, node);
            }
            "delegate_goal" => {
                if op["resources"].as_array().map_or(0, Vec::len) > limit::ARRAY {
                    return Err("profile".into());
                }
                let own_root = s("root") == root.id;
                if !own_root && self.defect != Some(Defect::NoDelegationLineage) {
                    return Err("cross-root".into());
                }
                fx.apply.push(Change::Witnessed(true, own_root));
                let goal = s("goal");
                let n = self.nodes.get(&goal).ok_or("unknown goal")?;
                let parent = n.parent.clone().ok_or("the root goal is not delegable")?;
                if n.status != Status::Active || s("worker").trim().is_empty() {
                    return Err("not delegable".into());
                }
                let edit = delegation_hash(&goal, &op["resources"], &s("worker"));
                fx.apply
                    .push(self.witness_ok(&op["witness"], &parent, &edit)?);
                self.can_edit()?;
                let res: BTreeSet<String> = strings(&op["resources"]).into_iter().collect();
                if !res.is_subset(&n.resources) && self.defect != Some(Defect::NoResourceCheck) {
                    return Err("delegation widens resources".into());
                }
                self.whole_path(&goal)?;
                fx.apply.push(Change::Graph);
                fx.apply.push(Change::Resources(goal.clone(), res));
                fx.apply.push(Change::BumpRevision(goal.clone()));
                fx.apply.push(Change::BumpRevision(parent));
                fx.apply.push(Change::Path(self.ancestry(&goal)));
                fx.apply.push(Change::Lifecycle("runnable"));
            }
            "authorize_effect" => {
                let goal = s("goal");
                if !self.nodes.contains_key(&goal) {
                    return Err("unknown goal".into());
                }
                let e = self.d.canon(&s("effect")).ok_or("unknown effect")?;
                self.gate(&goal, &e)?;
                let id = self.next_hold;
                fx.reservation = Some(id);
                fx.apply.push(Change::Hold(
                    id,
                    Hold {
                        goal,
                        effect: e,
                        trace: self.trace_digest,
                        ver: self.ver,
                        spent: false,
                    },
                ));
            }
            "commit_effect" => {
                let id = op
                    .get("reservation")
                    .and_then(Value::as_u64)
                    .ok_or("reservation")?;
                if self.defect == Some(Defect::NoMediation) {
                    let e = self.d.canon(&s("effect")).ok_or("unknown effect")?;
                    let next = self.d.step(&self.world, &e).ok_or("not applicable")?;
                    let mediated = self.holds.get(&id).is_some_and(|h| {
                        !h.spent
                            && h.effect == e
                            && h.ver == self.ver
                            && h.trace == self.trace_digest
                            && self.gate(&h.goal, &e).is_ok()
                    });
                    fx.reservation = Some(id);
                    fx.apply.push(Change::Commit(id, e, next));
                    fx.apply.push(Change::Unmediated(!mediated));
                    return Ok(());
                }
                let h = self
                    .holds
                    .get(&id)
                    .ok_or("detached commit: no such reservation")?;
                if h.spent {
                    return Err("reservation spent".into());
                }
                let e = self.d.canon(&s("effect")).ok_or("unknown effect")?;
                if e != h.effect || h.ver != self.ver || h.trace != self.trace_digest {
                    return Err("commit does not match its reservation".into());
                }
                let next = self.gate(&h.goal, &e)?;
                fx.reservation = Some(id);
                fx.apply.push(Change::Commit(id, e, next));
            }
            "reauthorize" => {
                let goal = s("goal");
                let n = self.nodes.get(&goal).ok_or("unknown goal")?;
                if n.status != Status::Active {
                    return Err("not active".into());
                }
                if goal == root.id {
                    if self.any_active_goal() {
                        return Err("goals active".into());
                    }
                } else if self.has_active_below(&goal) {
                    return Err("not a leaf".into());
                }
                let path = self.whole_path(&goal)?;
                fx.apply.push(Change::Path(path));
                fx.apply.push(Change::Lifecycle("runnable"));
            }
            "cancel_goal" => {
                let goal = s("goal");
                let n = self.nodes.get(&goal).ok_or("unknown goal")?;
                if n.parent.is_none() || n.status != Status::Active || self.has_active_below(&goal)
                {
                    return Err("not cancellable".into());
                }
                fx.apply.push(Change::SetStatus(goal, Status::Cancelled));
                fx.apply.push(Change::Graph);
                fx.apply.push(Change::NoPath);
            }
            "close_goal" => {
                let goal = s("goal");
                let n = self.nodes.get(&goal).ok_or("unknown goal")?;
                if n.parent.is_none() {
                    return Err("root via closeRoot".into());
                }
                let path = self.fresh_path()?;
                if path.first() != Some(&goal) || self.has_active_below(&goal) {
                    return Err("not the current leaf".into());
                }
                if !n.residual.iter().any(Vec::is_empty)
                    || self.d.all(&self.world, &n.closing) != Some(true)
                {
                    return Err("not complete".into());
                }
                if !self.discharged(root, n) {
                    return Err("obligation open".into());
                }
                fx.apply.push(Change::SetStatus(goal, Status::Closed));
                fx.apply.push(Change::Graph);
                fx.apply.push(Change::NoPath);
            }
            "close_root" => {
                if self.lifecycle != Some("runnable") || self.any_active_goal() {
                    return Err("not closable".into());
                }
                if !root.language.contains(&self.trace) {
                    return Err("trace not permitted".into());
                }
                let g0 = self.nodes.get(&root.id).ok_or("root goal")?;
                if !self.discharged(root, g0) {
                    return Err("obligation open".into());
                }
                if self.d.all(&self.world, &root.closing) != Some(true) {
                    return Err("closing predicate".into());
                }
                fx.apply.push(Change::Lifecycle("closed"));
                fx.apply.push(Change::NoPath);
            }
            other => return Err(format!("unknown operation {other}")),
        }
        Ok(())
    }

    /// Judges one request and applies it when allowed (no receipt, no idempotency replay).
    pub(crate) fn step(&mut self, req: &Value) -> Result<(), String> {
        let fx = self.judge(req["caller"].as_str().unwrap_or(""), &req["op"])?;
        self.apply(fx);
        Ok(())
    }

    /// Every obligation of `n` has its catalog evidence in the current state.
    fn discharged(&self, root: &Root, n: &Node) -> bool {
        n.obligations.iter().all(|o| {
            root.discharge
                .get(o)
                .is_some_and(|p| self.d.all(&self.world, p) == Some(true))
        })
    }

    /// The path from `goal` to the root, when it is a whole witness path now: the goal's
    /// residual work lies in every ancestor's, is safe from the current state, and closes it.
    fn whole_path(&self, goal: &str) -> Result<Vec<String>, String> {
        let n = self.nodes.get(goal).ok_or("unknown goal")?;
        let path = self.ancestry(goal);
        for a in path.iter().skip(1) {
            let res = &self.nodes.get(a).ok_or("ancestor")?.residual;
            if n.residual.iter().any(|x| !prefix_of_some(res, x)) {
                return Err("left an ancestor's language".into());
            }
        }
        let frames: Vec<&Vec<String>> = path
            .iter()
            .filter_map(|h| self.nodes.get(h))
            .flat_map(|x| x.frames.iter())
            .collect();
        self.safe(&self.world, &n.residual, &frames, &self.rules)?;
        for u in &n.residual {
            let end = self.after(&self.world, u).ok_or("not applicable")?;
            if self.d.all(&end, &n.closing) != Some(true) {
                return Err("cannot close".into());
            }
        }
        Ok(path)
    }

    fn install(&self, fx: &mut Effects, id: String, parent: String, node: Node) {
        fx.apply.push(Change::Graph);
        fx.apply.push(Change::Node(id.clone(), node));
        fx.apply.push(Change::BumpRevision(parent.clone()));
        let mut path = vec![id];
        path.extend(self.ancestry(&parent));
        fx.apply.push(Change::Path(path));
        fx.apply.push(Change::Lifecycle("runnable"));
    }

    fn apply(&mut self, fx: Effects) {
        for c in fx.apply {
            match c {
                Change::Register(root, w, rules) => {
                    self.ver = Ver {
                        epoch: root.epoch,
                        policy: 1,
                        state: 1,
                        graph: 1,
                    };
                    self.world = w;
                    self.rules = rules;
                    self.nodes.insert(
                        root.id.clone(),
                        Node {
                            parent: None,
                            revision: 1,
                            status: Status::Active,
                            residual: root.language.iter().cloned().collect(),
                            closing: root.closing.clone(),
                            resources: root.envelope.clone(),
                            obligations: root.obligations.clone(),
                            frames: Vec::new(),
                        },
                    );
                    self.created = 1;
                    self.path = Some((vec![root.id.clone()], self.ver));
                    self.lifecycle = Some("runnable");
                    self.root = Some(root);
                }
                Change::Node(id, n) => {
                    self.nodes.insert(id, n);
                    self.created += 1;
                    self.report.goals += 1;
                }
                Change::SetStatus(id, st) => {
                    if let Some(n) = self.nodes.get_mut(&id) {
                        n.status = st;
                    }
                }
                Change::BumpRevision(id) => {
                    if let Some(n) = self.nodes.get_mut(&id) {
                        n.revision += 1;
                    }
                }
                Change::Resources(id, r) => {
                    if let Some(n) = self.nodes.get_mut(&id) {
                        n.resources = r;
                    }
                }
                Change::Graph => self.ver.graph += 1,
                Change::Path(p) => self.path = Some((p, self.ver)),
                Change::NoPath => self.path = None,
                Change::Lifecycle(l) => self.lifecycle = Some(l),
                Change::Hold(id, h) => {
                    self.holds.insert(id, h);
                    self.next_hold += 1;
                }
                Change::Commit(id, e, next) => {
                    let mut input = self.trace_digest.to_vec();
                    input.extend_from_slice(e.as_bytes());
                    self.trace_digest = sha(&[b"halo/trace/v1\0", &input]);
                    self.trace.push(e.clone());
                    self.world = next;
                    if let Some(h) = self.holds.get_mut(&id) {
                        h.spent = true;
                    }
                    let path = self
                        .path
                        .as_ref()
                        .map(|(p, _)| p.clone())
                        .unwrap_or_default();
                    for g in &path {
                        if let Some(n) = self.nodes.get_mut(g) {
                            n.residual = n
                                .residual
                                .iter()
                                .filter(|t| t.first() == Some(&e))
                                .map(|t| t.iter().skip(1).cloned().collect())
                                .collect();
                        }
                    }
                    self.ver.graph += 1;
                    self.path = Some((path, self.ver));
                    self.report.commits += 1;
                }
                Change::Policy(r) => {
                    self.rules = r;
                    self.ver.policy += 1;
                }
                Change::Observe(w) => {
                    self.world = w;
                    self.ver.state += 1;
                }
                Change::Witnessed(fresh, own_root) => {
                    self.stale_accepted |= !fresh;
                    self.foreign_accepted |= !own_root;
                }
                Change::Unmediated(u) => self.unmediated |= u,
            }
        }
    }

    fn snapshot(&self) -> Value {
        json!({
            "after": {"epoch": self.ver.epoch, "policy": self.ver.policy, "state": self.ver.state, "graph": self.ver.graph},
            "root": self.lifecycle,
            "state": self.world,
            "trace": hex(&self.trace_digest),
        })
    }
}

fn claimed(body: &Value) -> Value {
    json!({
        "after": body["after"],
        "root": body["root"],
        "state": body["state"],
        "trace": body["trace"],
    })
}

/// The id rule, read from docs/envelope.md: 1 to 64 bytes, each an ASCII letter or digit, `.`,
/// `_` or `-`.
fn id_ok(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether every name in an operation follows the id rule (docs/contracts.md): goal ids and
/// parents, the root id, replaced, delegated, joined and precedence goals, the worker, a
/// non-blank approver, and the name part (before `(`) of every effect text, in traces too.
/// Empty names are left to the other checks (both sides refuse them there).
fn names_ok(op: &Value) -> bool {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let mut names: Vec<Option<String>> = Vec::new();
    let mut effects: Vec<Option<String>> = Vec::new();
    let traces = |v: &Value, out: &mut Vec<Option<String>>| {
        for t in v.as_array().into_iter().flatten() {
            for e in t.as_array().into_iter().flatten() {
                out.push(text(e));
            }
        }
    };
    match op["op"].as_str().unwrap_or("") {
        "register_root" => {
            if op["approved_by"]
                .as_str()
                .is_some_and(|a| !a.trim().is_empty())
            {
                names.push(text(&op["approved_by"]));
            }
            let at = |p: &str| op.pointer(p).unwrap_or(&Value::Null);
            names.push(text(at("/contract/root")));
            traces(at("/contract/traces"), &mut effects);
        }
        k @ ("propose_goal" | "replace_goal" | "join_goals") => {
            let g = if k == "join_goals" {
                &op["joined"]
            } else {
                &op["goal"]
            };
            names.push(text(&g["id"]));
            names.push(text(&g["parent"]));
            traces(&g["traces"], &mut effects);
            if k == "replace_goal" {
                names.push(text(&op["old"]));
            }
            if k == "join_goals" {
                for x in op["sources"].as_array().into_iter().flatten() {
                    names.push(text(x));
                }
                for pair in op["precedence"].as_array().into_iter().flatten() {
                    for x in pair.as_array().into_iter().flatten() {
                        names.push(text(x));
                    }
                }
            } else {
                names.push(text(op.pointer("/witness/root").unwrap_or(&Value::Null)));
            }
        }
        "delegate_goal" => {
            for k in ["goal", "root", "worker"] {
                names.push(text(&op[k]).filter(|w| !w.is_empty()));
            }
        }
        "authorize_effect" => {
            names.push(text(&op["goal"]));
            effects.push(text(&op["effect"]));
        }
        "commit_effect" => effects.push(text(&op["effect"])),
        "reauthorize" | "cancel_goal" | "close_goal" => names.push(text(&op["goal"])),
        _ => {}
    }
    for e in effects {
        names.push(e.map(|e| e.split('(').next().unwrap_or("").trim().to_string()));
    }
    // A missing field is the schema's business, not this rule's; a goal of another root is
    // named `ROOT/GOAL`, each part an id.
    names.iter().flatten().all(|n| n.splitn(2, '/').all(id_ok))
}

/// The one encoding of a receipt line: `index`, `prev`, `at_ns`, `body` (keys sorted, no
/// whitespace), `wall_unix_ms` when present, `hash`, in that order. `None` when the record has
/// another field or a field of the wrong type.
fn canonical_line(rec: &Value) -> Option<String> {
    let m = rec.as_object()?;
    let known = ["index", "prev", "at_ns", "body", "wall_unix_ms", "hash"];
    if m.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    let num = |k: &str| m.get(k).and_then(Value::as_u64);
    let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let mut out = format!(
        "{{\"index\":{},\"prev\":{},\"at_ns\":{},\"body\":{}",
        num("index")?,
        serde_json::to_string(&text("prev")?).ok()?,
        num("at_ns")?,
        serde_json::to_string(m.get("body")?).ok()?
    );
    if m.contains_key("wall_unix_ms") {
        out.push_str(&format!(",\"wall_unix_ms\":{}", num("wall_unix_ms")?));
    }
    out.push_str(&format!(
        ",\"hash\":{}}}",
        serde_json::to_string(&text("hash")?).ok()?
    ));
    Some(out)
}

/// Whether `line` is the one canonical encoding of the receipt it parses to.
pub fn is_canonical_line(line: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| canonical_line(&v))
        .is_some_and(|c| c == line)
}

/// Audits a receipt log given as its lines (without newlines): each line must be the canonical
/// encoding of its record (so duplicate keys, unknown fields, whitespace and escapes are
/// refused, and a blank line is an error), then as [`audit_signed`].
///
/// # Errors
/// The first line or receipt that does not verify, and why.
pub fn audit_lines(
    domain: &AuditDomain,
    lines: &[&str],
    key: Option<&[u8; 32]>,
) -> Result<AuditReport, AuditError> {
    let mut values = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let fail = |what: &str| AuditError {
            index: i,
            what: what.to_string(),
        };
        if line.trim().is_empty() {
            return Err(fail("a blank line; the gateway never writes one"));
        }
        let v: Value = serde_json::from_str(line).map_err(|e| AuditError {
            index: i,
            what: format!("not a JSON record: {e}"),
        })?;
        if canonical_line(&v).as_deref() != Some(*line) {
            return Err(fail(
                "not the canonical encoding of a receipt (a duplicate key, an unknown field, \
                 reordered keys, whitespace or escapes): the bytes are not the ones hashed",
            ));
        }
        values.push(v);
    }
    audit_signed(domain, &values, key)
}

/// The signed message of a checkpoint body, built from its documented layout: the tag
/// `halo/checkpoint/v1\0`, then `count`, the 32 bytes of `head`, `at_ns`, `wall_unix_ms` as
/// big-endian u64s, then one byte for `final`.
fn checkpoint_message(body: &Value) -> Option<Vec<u8>> {
    let head = unhex(body["head"].as_str()?)?;
    let mut m = b"halo/checkpoint/v1\0".to_vec();
    m.extend_from_slice(&body["count"].as_u64()?.to_be_bytes());
    m.extend_from_slice(&head);
    m.extend_from_slice(&body["at_ns"].as_u64()?.to_be_bytes());
    m.extend_from_slice(&body["wall_unix_ms"].as_u64()?.to_be_bytes());
    m.push(u8::from(body["final"].as_bool()?));
    Some(m)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Checks one checkpoint body at stream position `i` whose receipt links to `prev`.
fn check_checkpoint(
    body: &Value,
    i: usize,
    prev: &str,
    key: Option<&[u8; 32]>,
) -> Result<(), String> {
    let fields: BTreeSet<&str> = body
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let want: BTreeSet<&str> = [
        "kind",
        "count",
        "head",
        "at_ns",
        "wall_unix_ms",
        "final",
        "key",
        "sig",
    ]
    .into_iter()
    .collect();
    if fields != want {
        return Err("a checkpoint with other fields than a checkpoint's".into());
    }
    if body["count"].as_u64() != Some(i as u64) || body["head"].as_str() != Some(prev) {
        return Err("a checkpoint whose count and head are not the chain's at that point".into());
    }
    let Some(k) = key else { return Ok(()) };
    if body["key"].as_str() != Some(hex(k).as_str()) {
        return Err("a checkpoint signed by another key than the one given".into());
    }
    let msg = checkpoint_message(body).ok_or("a checkpoint with malformed fields")?;
    let sig: [u8; 64] = body["sig"]
        .as_str()
        .and_then(unhex)
        .and_then(|v| v.try_into().ok())
        .ok_or("a checkpoint signature that is not 128 hex digits")?;
    let vk = ed25519_dalek::VerifyingKey::from_bytes(k).map_err(|_| "not an Ed25519 public key")?;
    vk.verify_strict(&msg, &ed25519_dalek::Signature::from_bytes(&sig))
        .map_err(|_| "the checkpoint's signature does not verify under the given key".to_string())
}

/// Audits a receipt stream (each a parsed JSON receipt line) against a domain, without
/// checking signatures.
///
/// # Errors
/// The first receipt that does not verify, and why.
pub fn audit(domain: &AuditDomain, receipts: &[Value]) -> Result<AuditReport, AuditError> {
    audit_signed(domain, receipts, None)
}

/// Audits a receipt stream against a domain. With `key` (an Ed25519 public key), every receipt
/// must be covered by a checkpoint signed with it and the stream must end with a final one.
///
/// # Errors
/// The first receipt that does not verify, and why.
pub fn audit_signed(
    domain: &AuditDomain,
    receipts: &[Value],
    key: Option<&[u8; 32]>,
) -> Result<AuditReport, AuditError> {
    let mut r = Replay::new(domain);
    let mut prev = "0".repeat(64);
    let mut covered = 0usize;
    let mut ends_final = false;
    for (i, rec) in receipts.iter().enumerate() {
        let fail = |what: String| AuditError { index: i, what };
        // The chain.
        let mut input = json!({
            "at_ns": rec["at_ns"],
            "body": rec["body"],
            "index": rec["index"],
            "prev": rec["prev"],
        });
        if let (Some(w), Some(m)) = (rec.get("wall_unix_ms"), input.as_object_mut()) {
            m.insert("wall_unix_ms".into(), w.clone());
        }
        let bytes = serde_json::to_vec(&input).map_err(|e| fail(e.to_string()))?;
        let hash = hex(&sha(&[b"halo/receipt/v1\0", &bytes]));
        if rec["index"].as_u64() != Some(i as u64)
            || rec["prev"].as_str() != Some(prev.as_str())
            || rec["hash"].as_str() != Some(hash.as_str())
        {
            return Err(fail("hash chain broken".into()));
        }
        let body = &rec["body"];
        if body["kind"] == "checkpoint" {
            check_checkpoint(body, i, &prev, key).map_err(fail)?;
            prev = hash;
            r.report.checkpoints += 1;
            covered = i + 1;
            ends_final = body["final"] == true;
            continue;
        }
        ends_final = false;
        if i == 0 && body.get("request").is_none() && body.get("kind").is_some() {
            return Err(fail(
                "this is a gateway receipt log, not a contract log: check it with \
                 `halo-gateway audit verify` (contract decisions inside it are receipts of kind \
                 `external`, what `contract`)"
                    .into(),
            ));
        }
        prev = hash;
        let req = &body["request"];
        let caller = req["caller"].as_str().unwrap_or("");
        let op = &req["op"];
        let verdict = body["verdict"].as_str().unwrap_or("");
        if Ver::of(&body["before"]) != Some(r.ver) {
            return Err(fail("versions before do not continue the stream".into()));
        }
        let before = r.snapshot();
        // Idempotent replays of a commit key.
        if op["op"] == "commit_effect" {
            if let Some(key) = op["key"].as_str() {
                if let Some((orig, idx, v)) = r.keys.get(key).cloned() {
                    let exact = orig == *req;
                    let ok = if exact {
                        verdict == v && body["replay_of"].as_u64() == Some(idx as u64)
                    } else {
                        verdict == "deny" && body["replay_of"].is_null()
                    };
                    if !ok || claimed(body) != before {
                        return Err(fail(
                            "an idempotency-key reuse that is not an exact, inert replay".into(),
                        ));
                    }
                    if exact {
                        r.report.replays += 1;
                    }
                    r.report.receipts += 1;
                    continue;
                }
            }
        }
        if !body["replay_of"].is_null() {
            return Err(fail("a replay with no original".into()));
        }
        match r.judge(caller, op) {
            Ok(fx) => {
                if verdict != "allow" {
                    return Err(fail(format!(
                        "recorded {verdict}; the checker derives allow"
                    )));
                }
                let edit = fx.edit.clone();
                let reservation = fx.reservation;
                r.apply(fx);
                if body["edit"].as_str().map(String::from) != edit {
                    return Err(fail("edit digest differs".into()));
                }
                if body["reservation"].as_u64() != reservation {
                    return Err(fail("reservation differs".into()));
                }
                if claimed(body) != r.snapshot() {
                    return Err(fail(format!(
                        "state after differs: recorded {} derived {}",
                        claimed(body),
                        r.snapshot()
                    )));
                }
                if op["op"] == "commit_effect" {
                    if let Some(k) = op["key"].as_str() {
                        r.keys
                            .insert(k.to_string(), (req.clone(), i, verdict.to_string()));
                    }
                }
                r.report.allowed += 1;
            }
            Err(why) => {
                if verdict == "allow" {
                    return Err(fail(format!(
                        "recorded allow; the checker derives a refusal: {why}"
                    )));
                }
                if claimed(body) != before {
                    return Err(fail("a refusal changed the configuration".into()));
                }
            }
        }
        r.report.receipts += 1;
    }
    if key.is_some() {
        if covered < receipts.len() {
            return Err(AuditError {
                index: covered,
                what: format!(
                    "receipts {covered}..{} are not covered by a signature of the given key (the log was cut or appended to after its last checkpoint)",
                    receipts.len().saturating_sub(1)
                ),
            });
        }
        if !ends_final && !receipts.is_empty() {
            return Err(AuditError {
                index: receipts.len().saturating_sub(1),
                what: "the log does not end with a final checkpoint: receipts after it may have been cut".into(),
            });
        }
        r.report.signed = !receipts.is_empty();
    }
    r.report.closed = r.lifecycle == Some("closed");
    Ok(r.report)
}
