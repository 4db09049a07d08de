//! The registered domain, re-read from its TOML text (its own reader, not the monitor's).

#[allow(
    clippy::wildcard_imports,
    reason = "one module split by part; the parts share its items"
)]
use super::*;

/// `t` has no key outside `allowed` and at least its first `required` keys.
pub(super) fn exact_keys(
    t: &toml::Table,
    at: &str,
    allowed: &[&str],
    required: usize,
) -> Result<(), String> {
    if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("{at}: unknown key `{k}`"));
    }
    match allowed.iter().take(required).find(|k| !t.contains_key(**k)) {
        Some(k) => Err(format!("{at}: `{k}` missing")),
        None => Ok(()),
    }
}

pub(super) fn sub_table<'a>(t: &'a toml::Table, key: &str) -> Result<&'a toml::Table, String> {
    t.get(key)
        .and_then(toml::Value::as_table)
        .ok_or_else(|| format!("[{key}]: not a table"))
}

pub(super) fn checked_name(at: &str, name: &str) -> Result<(), String> {
    if id_ok(name) {
        Ok(())
    } else {
        Err(format!("{at}: `{name}` breaks the id rule"))
    }
}

/// 1 to `max` distinct names, each following the id rule.
pub(super) fn name_values(at: &str, a: &[toml::Value], max: usize) -> Result<Vec<String>, String> {
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
pub(super) fn string_list(e: &toml::Table, at: &str, key: &str) -> Result<Vec<String>, String> {
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
pub(super) enum Ty {
    Bool,
    Names(Vec<String>),
    Range(i64, i64),
}

#[derive(Clone, Debug)]
pub(super) struct EffectType {
    params: Vec<(String, Vec<String>)>,
    pre: Vec<String>,
    post: Vec<String>,
}

/// A registered domain as the checker understands it.
#[derive(Clone, Debug)]
pub struct AuditDomain {
    pub(super) id: String,
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
    pub(super) fn canon(&self, text: &str) -> Option<String> {
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
    pub(super) fn all(&self, w: &World, conds: &[String]) -> Option<bool> {
        let none = BTreeMap::new();
        let mut ok = true;
        for c in conds {
            ok &= self.cond(w, c, &none)?;
        }
        Some(ok)
    }

    pub(super) fn wellformed(&self, conds: &[String]) -> bool {
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
    pub(super) fn step(&self, w: &World, e: &str) -> Option<World> {
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
