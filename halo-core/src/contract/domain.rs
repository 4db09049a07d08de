//! A registered finite domain: typed state variables, normalized effects with closed typed
//! arguments, one deterministic state transformer per effect, and typed predicates.
//!
//! Domains are data (TOML under `catalogs/`); see `docs/contracts.md`. Conditions and
//! assignments are short strings: `airborne == true`, `photos >= 1`, `zone = $wp`, `photos += 1`.
//! An effect is written `name(arg, ...)`, e.g. `goto(wp1)`; its normalized form is an index into
//! the domain's effect table.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde::Deserialize;

/// Most variables, effects and enum values in one domain.
pub const MAX_DOMAIN_ITEMS: usize = 256;

/// Most parameters one effect type takes.
pub const MAX_EFFECT_PARAMS: usize = 16;

/// Most normalized effects (argument combinations) one effect type has.
pub const MAX_EFFECT_COMBINATIONS: usize = 4096;

/// A variable's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// `true` / `false`.
    Bool,
    /// One of a closed list of names.
    Enum(Vec<String>),
    /// A bounded integer.
    Int {
        /// Lowest value.
        min: i64,
        /// Highest value.
        max: i64,
    },
}

/// A state variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Var {
    /// Name.
    pub name: String,
    /// Type.
    pub kind: VarKind,
}

/// A modeled state: one value per variable (booleans as 0/1, enums as indices).
pub type State = Vec<i64>;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    fn holds(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// The right-hand side of a condition or assignment inside an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Rhs {
    /// A constant.
    Const(i64),
    /// The effect's argument number `n` (an index into the variable's enum).
    Param(u8),
}

/// One atom: `var op rhs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Cond {
    /// Variable index.
    pub var: u16,
    /// Comparison.
    pub op: CmpOp,
    /// Right-hand side.
    pub rhs: Rhs,
}

/// A typed predicate: a conjunction of atoms with constant right-hand sides.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pred(pub Vec<Cond>);

impl Pred {
    /// Evaluates the predicate in `s`.
    pub fn holds(&self, s: &[i64]) -> bool {
        self.0.iter().all(|c| {
            let v = s.get(usize::from(c.var)).copied().unwrap_or(i64::MIN);
            match c.rhs {
                Rhs::Const(k) => c.op.holds(v, k),
                Rhs::Param(_) => false,
            }
        })
    }
}

/// An assignment in an effect's postcondition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assign {
    /// `var = rhs`.
    Set(u16, Rhs),
    /// `var += k` (or `-=`), clamped failures make the effect inapplicable.
    Add(u16, i64),
}

/// An effect type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectSpec {
    /// Name.
    pub name: String,
    /// Parameters: each takes a value of the named enum variable's type.
    pub params: Vec<(String, Vec<String>)>,
    /// Preconditions (may use parameters).
    pub pre: Vec<Cond>,
    /// Postconditions.
    pub post: Vec<Assign>,
}

/// A normalized effect: effect index and argument indices, interned as one `u32` id by
/// [`Domain::intern`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Effect {
    /// Effect type.
    pub spec: u16,
    /// Arguments (indices into the parameter value lists).
    pub args: Vec<u16>,
}

/// A validated domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Domain id.
    pub id: String,
    /// Domain version.
    pub version: u32,
    /// Variables.
    pub vars: Vec<Var>,
    /// Effect types.
    pub effects: Vec<EffectSpec>,
    /// Every normalized effect, by interned id.
    pub table: Vec<Effect>,
    names: HashMap<String, u32, BuildHasherDefault<Fnv>>,
    /// Indices into `vars`, ordered by variable name (the order a state is written in).
    by_name: Vec<usize>,
}

/// FNV-1a, for the effect-name table: every effect an edit names is looked up in it (a
/// transition's most frequent lookup), and its keys are the domain's own, fixed when the domain
/// loads, so the default hasher's resistance to chosen collisions buys nothing here; an agent's
/// text is only ever looked up, never inserted.
#[derive(Clone, Copy, Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(crate::ids::FNV_OFFSET)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = crate::ids::fnv1a(self.0, bytes);
    }
}

/// Why a domain, predicate or effect did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainError(pub String);

impl std::fmt::Display for DomainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DomainError {}

/// `x` in decimal, written into `buf` (20 bytes hold every `i64`), as `to_string` spells it.
fn decimal(x: i64, buf: &mut [u8; 20]) -> &str {
    let mut v = x.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if x < 0 {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'-';
        }
    }
    std::str::from_utf8(buf.get(at..).unwrap_or_default()).unwrap_or_default()
}

fn derr<T>(m: impl Into<String>) -> Result<T, DomainError> {
    Err(DomainError(m.into()))
}

/// Domain ids, variable, effect and parameter names, enum values and argument values follow the
/// envelope's id rule (1 to 64 bytes of `[A-Za-z0-9._-]`): they are spelled inside effect texts
/// like `goto(wp1)` and predicates like `zone == wp1`, which a space, comma or parenthesis would
/// make ambiguous.
fn named(file: &str, at: &str, text: &str) -> Result<(), DomainError> {
    crate::ids::Id::new(text)
        .map(drop)
        .map_err(|e| DomainError(format!("{file}: {at}: {e}")))
}

/// A list of names: every element a string following the id rule, none twice, 1 to `max` of
/// them.
fn name_list(
    file: &str,
    at: &str,
    a: &[toml::Value],
    max: usize,
) -> Result<Vec<String>, DomainError> {
    let mut vals: Vec<String> = Vec::with_capacity(a.len());
    for x in a {
        let Some(v) = x.as_str() else {
            return derr(format!("{file}: {at}: every value is a name in quotes"));
        };
        named(file, at, v)?;
        if vals.iter().any(|w| w == v) {
            return derr(format!("{file}: {at}: `{v}` is listed twice"));
        }
        vals.push(v.to_string());
    }
    if vals.is_empty() || vals.len() > max {
        return derr(format!("{file}: {at}: 1 to {max} names"));
    }
    Ok(vals)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDomain {
    domain: RawHead,
    variables: BTreeMap<String, toml::Value>,
    effects: BTreeMap<String, RawEffect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHead {
    id: String,
    version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEffect {
    #[serde(default)]
    params: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pre: Vec<String>,
    #[serde(default)]
    post: Vec<String>,
}

impl Domain {
    /// Parses a domain from TOML.
    ///
    /// # Errors
    /// [`DomainError`] naming the variable, effect or condition at fault.
    pub fn parse(src: &str, file: &str) -> Result<Domain, DomainError> {
        let raw: RawDomain =
            toml::from_str(src).map_err(|e| DomainError(format!("{file}: {}", e.message())))?;
        named(file, "domain.id", &raw.domain.id)?;
        let mut vars = Vec::new();
        for (name, v) in &raw.variables {
            named(file, "variables", name)?;
            let kind = match v {
                toml::Value::String(s) if s == "bool" => VarKind::Bool,
                toml::Value::Array(a) => VarKind::Enum(name_list(
                    file,
                    &format!("variables.{name}"),
                    a,
                    MAX_DOMAIN_ITEMS,
                )?),
                toml::Value::Table(t) => {
                    let min = t.get("min").and_then(toml::Value::as_integer);
                    let max = t.get("max").and_then(toml::Value::as_integer);
                    match (min, max) {
                        (Some(min), Some(max)) if min <= max && t.len() == 2 => {
                            VarKind::Int { min, max }
                        }
                        _ => {
                            return derr(format!(
                                "{file}: variables.{name}: an integer is {{ min = .., max = .. }}"
                            ));
                        }
                    }
                }
                _ => {
                    return derr(format!(
                        "{file}: variables.{name}: \"bool\", an enum list, or {{ min, max }}"
                    ));
                }
            };
            vars.push(Var {
                name: name.clone(),
                kind,
            });
        }
        if vars.len() > MAX_DOMAIN_ITEMS {
            return derr(format!("{file}: at most {MAX_DOMAIN_ITEMS} variables"));
        }
        let mut by_name: Vec<usize> = (0..vars.len()).collect();
        by_name.sort_by(|&a, &b| {
            let name = |i: usize| vars.get(i).map_or("", |v| v.name.as_str());
            name(a).cmp(name(b))
        });
        let mut d = Domain {
            id: raw.domain.id,
            version: raw.domain.version,
            vars,
            effects: Vec::new(),
            table: Vec::new(),
            names: HashMap::default(),
            by_name,
        };
        for (name, e) in &raw.effects {
            named(file, "effects", name)?;
            if e.params.len() > MAX_EFFECT_PARAMS {
                return derr(format!(
                    "{file}: effects.{name}.params: at most {MAX_EFFECT_PARAMS} parameters"
                ));
            }
            let mut params = Vec::new();
            for (p, ty) in &e.params {
                named(file, &format!("effects.{name}.params"), p)?;
                let values = match ty {
                    toml::Value::String(var) => match d.var(var).map(|(_, v)| &v.kind) {
                        Some(VarKind::Enum(vals)) => vals.clone(),
                        _ => {
                            return derr(format!(
                                "{file}: effects.{name}.params.{p}: `{var}` is not an enum variable"
                            ));
                        }
                    },
                    toml::Value::Array(a) => name_list(
                        file,
                        &format!("effects.{name}.params.{p}"),
                        a,
                        MAX_EFFECT_COMBINATIONS,
                    )?,
                    _ => {
                        return derr(format!(
                            "{file}: effects.{name}.params.{p}: an enum variable name or a list of names"
                        ));
                    }
                };
                params.push((p.clone(), values));
            }
            let mut spec = EffectSpec {
                name: name.clone(),
                params,
                pre: Vec::new(),
                post: Vec::new(),
            };
            for c in &e.pre {
                let cond = d
                    .parse_cond(c, Some(&spec))
                    .map_err(|m| DomainError(format!("{file}: effects.{name}.pre: {m}")))?;
                spec.pre.push(cond);
            }
            for a in &e.post {
                let asg = d
                    .parse_assign(a, &spec)
                    .map_err(|m| DomainError(format!("{file}: effects.{name}.post: {m}")))?;
                spec.post.push(asg);
            }
            d.effects.push(spec);
        }
        if d.effects.len() > MAX_DOMAIN_ITEMS {
            return derr(format!("{file}: at most {MAX_DOMAIN_ITEMS} effects"));
        }
        // Intern every normalized effect (the closed argument domains make the set finite).
        for (i, spec) in d.effects.iter().enumerate() {
            let mut combos: Vec<Vec<u16>> = vec![Vec::new()];
            for (_, vals) in &spec.params {
                let mut next = Vec::new();
                for c in &combos {
                    for k in 0..vals.len() {
                        let mut c2 = c.clone();
                        c2.push(u16::try_from(k).unwrap_or(u16::MAX));
                        next.push(c2);
                    }
                }
                combos = next;
                if combos.len() > MAX_EFFECT_COMBINATIONS {
                    return derr(format!(
                        "{file}: effects.{}: too many argument combinations",
                        spec.name
                    ));
                }
            }
            for args in combos {
                let e = Effect {
                    spec: u16::try_from(i).unwrap_or(u16::MAX),
                    args,
                };
                let id = u32::try_from(d.table.len()).unwrap_or(u32::MAX);
                d.names.insert(d.render(&e), id);
                d.table.push(e);
            }
        }
        Ok(d)
    }

    /// A variable by name.
    pub fn var(&self, name: &str) -> Option<(u16, &Var)> {
        self.vars
            .iter()
            .enumerate()
            .find(|(_, v)| v.name == name)
            .and_then(|(i, v)| u16::try_from(i).ok().map(|i| (i, v)))
    }

    fn value_of(&self, var: u16, text: &str) -> Result<i64, String> {
        let v = self.vars.get(usize::from(var)).ok_or("unknown variable")?;
        match &v.kind {
            VarKind::Bool => match text {
                "true" => Ok(1),
                "false" => Ok(0),
                _ => Err(format!("`{}` is a bool; `{text}` is not", v.name)),
            },
            VarKind::Enum(vals) => vals
                .iter()
                .position(|x| x == text)
                .and_then(|i| i64::try_from(i).ok())
                .ok_or_else(|| format!("`{text}` is not a value of `{}`", v.name)),
            VarKind::Int { min, max } => {
                let n: i64 = text
                    .parse()
                    .map_err(|_| format!("`{}` is an integer; `{text}` is not", v.name))?;
                if n < *min || n > *max {
                    return Err(format!(
                        "{n} is outside `{}`'s range [{min}, {max}]",
                        v.name
                    ));
                }
                Ok(n)
            }
        }
    }

    fn parse_cond(&self, text: &str, effect: Option<&EffectSpec>) -> Result<Cond, String> {
        let mut toks = text.split_whitespace();
        let (Some(var), Some(op), Some(rhs), None) =
            (toks.next(), toks.next(), toks.next(), toks.next())
        else {
            return Err(format!("`{text}`: a condition is `VAR OP VALUE`"));
        };
        let (vi, v) = self
            .var(var)
            .ok_or_else(|| format!("`{text}`: unknown variable `{var}`"))?;
        let op = match op {
            "==" => CmpOp::Eq,
            "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            o => return Err(format!("`{text}`: unknown comparison `{o}`")),
        };
        if !matches!(v.kind, VarKind::Int { .. }) && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            return Err(format!("`{text}`: `{var}` only takes == and !="));
        }
        let rhs = self.parse_rhs(text, vi, rhs, effect)?;
        Ok(Cond { var: vi, op, rhs })
    }

    /// A right-hand side: `$param` (inside an effect) or a constant of variable `vi`'s type.
    fn parse_rhs(
        &self,
        text: &str,
        vi: u16,
        rhs: &str,
        effect: Option<&EffectSpec>,
    ) -> Result<Rhs, String> {
        if let Some(p) = rhs.strip_prefix('$') {
            let e = effect.ok_or_else(|| format!("`{text}`: parameters only appear in effects"))?;
            let is_enum = self
                .vars
                .get(usize::from(vi))
                .is_some_and(|v| matches!(v.kind, VarKind::Enum(_)));
            if !is_enum {
                // An argument is a name; only an enum variable holds names.
                return Err(format!(
                    "`{text}`: a parameter's value is a name, so it only meets an enum variable"
                ));
            }
            let k = e
                .params
                .iter()
                .position(|(n, _)| n == p)
                .ok_or_else(|| format!("`{text}`: unknown parameter `{p}`"))?;
            Ok(Rhs::Param(
                u8::try_from(k).map_err(|_| "too many parameters")?,
            ))
        } else {
            Ok(Rhs::Const(
                self.value_of(vi, rhs)
                    .map_err(|m| format!("`{text}`: {m}"))?,
            ))
        }
    }

    fn parse_assign(&self, text: &str, effect: &EffectSpec) -> Result<Assign, String> {
        let toks: Vec<&str> = text.split_whitespace().collect();
        let [var, op, rhs] = toks.as_slice() else {
            return Err(format!(
                "`{text}`: an assignment is `VAR = VALUE` or `VAR += N`"
            ));
        };
        let (vi, v) = self
            .var(var)
            .ok_or_else(|| format!("`{text}`: unknown variable `{var}`"))?;
        match *op {
            "=" => Ok(Assign::Set(
                vi,
                self.parse_rhs(text, vi, rhs, Some(effect))?,
            )),
            "+=" | "-=" => {
                if !matches!(v.kind, VarKind::Int { .. }) {
                    return Err(format!("`{text}`: `{var}` is not an integer"));
                }
                let n: i64 = rhs
                    .parse()
                    .map_err(|_| format!("`{text}`: `{rhs}` is not an integer"))?;
                let step = if *op == "+=" {
                    Some(n)
                } else {
                    n.checked_neg()
                };
                let step = step.ok_or_else(|| format!("`{text}`: `{rhs}` cannot be subtracted"))?;
                Ok(Assign::Add(vi, step))
            }
            o => Err(format!("`{text}`: unknown assignment `{o}`")),
        }
    }

    /// Parses a predicate from condition strings (a conjunction).
    ///
    /// # Errors
    /// The first condition that does not parse.
    pub fn pred(&self, conds: &[String]) -> Result<Pred, DomainError> {
        conds
            .iter()
            .map(|c| self.parse_cond(c, None).map_err(DomainError))
            .collect::<Result<Vec<_>, _>>()
            .map(Pred)
    }

    /// Parses a full state `{var: value}`; every variable must be given.
    ///
    /// # Errors
    /// A missing, unknown or ill-typed variable.
    pub fn state(&self, vals: &BTreeMap<String, serde_json::Value>) -> Result<State, DomainError> {
        let mut s = vec![0i64; self.vars.len()];
        for (i, v) in self.vars.iter().enumerate() {
            let raw = vals
                .get(&v.name)
                .ok_or_else(|| DomainError(format!("the state does not give `{}`", v.name)))?;
            let text = match raw {
                serde_json::Value::String(x) => x.clone(),
                other => other.to_string(),
            };
            let vi = u16::try_from(i).unwrap_or(u16::MAX);
            if let Some(slot) = s.get_mut(i) {
                *slot = self.value_of(vi, &text).map_err(DomainError)?;
            }
        }
        for k in vals.keys() {
            if self.var(k).is_none() {
                return derr(format!("the state names unknown variable `{k}`"));
            }
        }
        Ok(s)
    }

    /// Sets some variables of a state (an out-of-band observation).
    ///
    /// # Errors
    /// An unknown or ill-typed variable; `s` is unchanged on error.
    pub fn observe(
        &self,
        s: &State,
        vals: &BTreeMap<String, serde_json::Value>,
    ) -> Result<State, DomainError> {
        let mut out = s.clone();
        for (k, raw) in vals {
            let (vi, _) = self
                .var(k)
                .ok_or_else(|| DomainError(format!("unknown variable `{k}`")))?;
            let text = match raw {
                serde_json::Value::String(x) => x.clone(),
                other => other.to_string(),
            };
            if let Some(slot) = out.get_mut(usize::from(vi)) {
                *slot = self.value_of(vi, &text).map_err(DomainError)?;
            }
        }
        Ok(out)
    }

    /// Looks up a normalized effect by its text, e.g. `goto(wp1)` (whitespace ignored).
    pub fn effect_id(&self, text: &str) -> Option<u32> {
        if text.contains('(') && !text.contains(char::is_whitespace) {
            return self.names.get(text).copied();
        }
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let key = if compact.contains('(') {
            compact
        } else {
            format!("{compact}()")
        };
        self.names.get(&key).copied()
    }

    /// The canonical text of an effect.
    pub fn render(&self, e: &Effect) -> String {
        let Some(spec) = self.effects.get(usize::from(e.spec)) else {
            return "?".into();
        };
        let args: Vec<&str> = e
            .args
            .iter()
            .zip(&spec.params)
            .map(|(a, (_, vals))| vals.get(usize::from(*a)).map_or("?", String::as_str))
            .collect();
        format!("{}({})", spec.name, args.join(","))
    }

    /// The canonical text of an interned effect.
    pub fn name(&self, id: u32) -> String {
        self.table
            .get(id as usize)
            .map_or_else(|| "?".into(), |e| self.render(e))
    }

    /// `Post(s, e)`: the successor state, or `None` when the effect is not applicable in `s`
    /// (a precondition fails or an integer leaves its range). Deterministic.
    pub fn apply(&self, s: &[i64], id: u32) -> Option<State> {
        let mut out = Vec::new();
        self.apply_into(s, id, &mut out).then_some(out)
    }

    /// As [`Domain::apply`], writing the successor into `out` and reusing its allocation.
    /// Returns false when the effect is not applicable; `out` is then unspecified.
    pub fn apply_into(&self, s: &[i64], id: u32, out: &mut State) -> bool {
        self.apply_inner(s, id, out).is_some()
    }

    fn apply_inner(&self, s: &[i64], id: u32, out: &mut State) -> Option<()> {
        let e = self.table.get(id as usize)?;
        let spec = self.effects.get(usize::from(e.spec))?;
        let arg = |p: u8, var: u16| -> Option<i64> {
            let a = *e.args.get(usize::from(p))?;
            // A parameter's value is a name; map it into the variable's enum.
            let (_, vals) = spec.params.get(usize::from(p))?;
            let name = vals.get(usize::from(a))?;
            match &self.vars.get(usize::from(var))?.kind {
                VarKind::Enum(vs) => vs
                    .iter()
                    .position(|x| x == name)
                    .and_then(|i| i64::try_from(i).ok()),
                _ => None,
            }
        };
        for c in &spec.pre {
            let v = *s.get(usize::from(c.var))?;
            let rhs = match c.rhs {
                Rhs::Const(k) => k,
                Rhs::Param(p) => arg(p, c.var)?,
            };
            if !c.op.holds(v, rhs) {
                return None;
            }
        }
        out.clear();
        out.extend_from_slice(s);
        for a in &spec.post {
            match *a {
                Assign::Set(var, Rhs::Const(k)) => *out.get_mut(usize::from(var))? = k,
                Assign::Set(var, Rhs::Param(p)) => {
                    let v = arg(p, var)?;
                    *out.get_mut(usize::from(var))? = v;
                }
                Assign::Add(var, k) => {
                    let slot = out.get_mut(usize::from(var))?;
                    let n = slot.checked_add(k)?;
                    if let VarKind::Int { min, max } = self.vars.get(usize::from(var))?.kind
                        && (n < min || n > max)
                    {
                        return None;
                    }
                    *slot = n;
                }
            }
        }
        Some(())
    }

    /// Writes a state as [`Domain::show`] renders it (`{var: value}`, names in order), without
    /// building the map: receipts carry one per contract transition.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize_state<S: serde::Serializer>(
        &self,
        st: &[i64],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.by_name.len().min(st.len())))?;
        for &i in &self.by_name {
            let (Some(v), Some(x)) = (self.vars.get(i), st.get(i)) else {
                continue;
            };
            let name = v.name.as_str();
            match &v.kind {
                VarKind::Bool => m.serialize_entry(name, if *x != 0 { "true" } else { "false" })?,
                VarKind::Enum(vals) => m.serialize_entry(
                    name,
                    usize::try_from(*x)
                        .ok()
                        .and_then(|k| vals.get(k))
                        .map_or("", String::as_str),
                )?,
                VarKind::Int { .. } => m.serialize_entry(name, decimal(*x, &mut [0; 20]))?,
            }
        }
        m.end()
    }

    /// Renders a state as `{var: value}` text.
    pub fn show(&self, s: &[i64]) -> BTreeMap<String, String> {
        self.vars
            .iter()
            .zip(s)
            .map(|(v, x)| {
                let t = match &v.kind {
                    VarKind::Bool => (*x != 0).to_string(),
                    VarKind::Enum(vals) => usize::try_from(*x)
                        .ok()
                        .and_then(|i| vals.get(i))
                        .cloned()
                        .unwrap_or_default(),
                    VarKind::Int { .. } => x.to_string(),
                };
                (v.name.clone(), t)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimal_spells_integers_as_to_string_does() {
        for x in [
            0,
            1,
            -1,
            9,
            10,
            -10,
            99,
            100,
            12_345,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            assert_eq!(decimal(x, &mut [0; 20]), x.to_string());
        }
    }
}
