//! The replayed configuration (goals, versions, the modeled state, the committed trace,
//! reservations) and the judgement of every operation from the registered semantics.

#[allow(
    clippy::wildcard_imports,
    reason = "one module split by part; the parts share its items"
)]
use super::*;

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
    pub(super) fn of(v: &Value) -> Option<Ver> {
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
pub(super) type Judged = Result<Effects, String>;

/// What an allowed operation changes, computed before anything is applied.
#[derive(Default)]
pub(super) struct Effects {
    pub(super) edit: Option<String>,
    pub(super) reservation: Option<u64>,
    pub(super) apply: Vec<Change>,
}

pub(super) enum Change {
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

pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn string_lists(v: &Value) -> Vec<Vec<String>> {
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

pub(super) fn edit_hash(goal: &Value) -> String {
    let bytes = serde_json::to_vec(goal).unwrap_or_default();
    hex(&sha(&[b"halo/component/v1\0", b"contract-edit\0", &bytes]))
}

pub(super) fn delegation_hash(goal: &str, resources: &Value, worker: &str) -> String {
    let spec = json!({"goal": goal, "resources": resources, "worker": worker});
    hex(&sha(&[
        b"halo/component/v1\0",
        b"contract-delegation\0",
        spec.to_string().as_bytes(),
    ]))
}

/// Every interleaving of one trace per component, each component's order kept, and a component
/// wholly before another where `before` says so. `Err(true)` is a guard, `Err(false)` a cycle.
pub(super) fn interleavings(
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
    pub(super) fn count(n: usize, before: &[(usize, usize)], done: &mut Vec<usize>, c: &mut usize) {
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

pub(super) fn weave(
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

pub(super) fn prefix_of_some(lang: &[Vec<String>], x: &[String]) -> bool {
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

    pub(super) fn canon_all(&self, traces: &[Vec<String>]) -> Result<Vec<Vec<String>>, String> {
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

    pub(super) fn bad_state(&self, w: &World, frames: &[&Vec<String>]) -> Result<(), String> {
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
    pub(super) fn safe(
        &self,
        w: &World,
        traces: &[Vec<String>],
        frames: &[&Vec<String>],
        rules: &Rules,
    ) -> Result<(), String> {
        self.bad_state(w, frames)?;
        for t in traces {
            if let Some(m) = rules.max_len
                && self.trace.len() + t.len() > m
            {
                return Err("policy length".into());
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

    pub(super) fn after(&self, w: &World, t: &[String]) -> Option<World> {
        let mut cur = w.clone();
        for e in t {
            cur = self.d.step(&cur, e)?;
        }
        Some(cur)
    }

    pub(super) fn ancestry(&self, id: &str) -> Vec<String> {
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

    pub(super) fn has_active_below(&self, id: &str) -> bool {
        self.nodes.iter().any(|(k, n)| {
            k != id
                && n.status == Status::Active
                && self.ancestry(k).iter().skip(1).any(|a| a == id)
        })
    }

    pub(super) fn any_active_goal(&self) -> bool {
        let root = self.root.as_ref().map(|r| r.id.as_str()).unwrap_or("");
        self.nodes
            .iter()
            .any(|(k, n)| k != root && n.status == Status::Active)
    }

    pub(super) fn can_edit(&self) -> Result<(), String> {
        match self.lifecycle {
            Some("runnable") => Ok(()),
            Some("suspended") if !self.any_active_goal() => Ok(()),
            _ => Err("root not runnable".into()),
        }
    }

    pub(super) fn fresh_path(&self) -> Result<&Vec<String>, String> {
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
    pub(super) fn witness_ok(&self, w: &Value, parent: &str, edit: &str) -> Result<Change, String> {
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

    pub(super) fn same(&self, a: &[String], b: &[String]) -> bool {
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
    pub(super) fn in_prefixes(&self, lang: &[Vec<String>], x: &[String]) -> bool {
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
    pub(super) fn unchecked_node(&self, g: &Value, parent: &str) -> Result<Node, String> {
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

    pub(super) fn goal_limits(g: &Value) -> Result<(), String> {
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
    pub(super) fn refine(
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
        if let Some(b) = extra_resource_bound.filter(|_| check_resources)
            && !resources.is_subset(b)
        {
            return Err("joined resources exceed the sources'".into());
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

    pub(super) fn gate(&self, leaf: &str, e: &str) -> Result<World, String> {
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

    pub(super) fn parse_rules(&self, rules: &Value) -> Result<Rules, String> {
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

    /// Judges one request and applies it when allowed (no receipt, no idempotency replay).
    pub(crate) fn step(&mut self, req: &Value) -> Result<(), String> {
        let fx = self.judge(req["caller"].as_str().unwrap_or(""), &req["op"])?;
        self.apply(fx);
        Ok(())
    }

    /// Every obligation of `n` has its catalog evidence in the current state.
    pub(super) fn discharged(&self, root: &Root, n: &Node) -> bool {
        n.obligations.iter().all(|o| {
            root.discharge
                .get(o)
                .is_some_and(|p| self.d.all(&self.world, p) == Some(true))
        })
    }

    /// The path from `goal` to the root, when it is a whole witness path now: the goal's
    /// residual work lies in every ancestor's, is safe from the current state, and closes it.
    pub(super) fn whole_path(&self, goal: &str) -> Result<Vec<String>, String> {
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

    pub(super) fn install(&self, fx: &mut Effects, id: String, parent: String, node: Node) {
        fx.apply.push(Change::Graph);
        fx.apply.push(Change::Node(id.clone(), node));
        fx.apply.push(Change::BumpRevision(parent.clone()));
        let mut path = vec![id];
        path.extend(self.ancestry(&parent));
        fx.apply.push(Change::Path(path));
        fx.apply.push(Change::Lifecycle("runnable"));
    }

    pub(super) fn apply(&mut self, fx: Effects) {
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

    pub(super) fn snapshot(&self) -> Value {
        json!({
            "after": {"epoch": self.ver.epoch, "policy": self.ver.policy, "state": self.ver.state, "graph": self.ver.graph},
            "root": self.lifecycle,
            "state": self.world,
            "trace": hex(&self.trace_digest),
        })
    }
}
