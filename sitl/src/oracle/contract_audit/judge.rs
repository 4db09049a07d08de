//! The judgement of every operation from the registered semantics: who may make it, and what
//! the checker derives it must do (W1–W7 for an edit, the gate for an effect, versions for a
//! change, the lifecycle for a reauthorization).

#[allow(
    clippy::wildcard_imports,
    reason = "one module split by part; the parts share its items"
)]
use super::*;

impl Replay<'_> {
    pub(super) fn judge(&self, caller: &str, op: &Value) -> Judged {
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

    pub(super) fn judge_agent(
        &self,
        kind: &str,
        op: &Value,
        fx: &mut Effects,
    ) -> Result<(), String> {
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
}
