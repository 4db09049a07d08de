//! Goal operations: propose, delegate and join subgoals; cancel and close them; close the root.

use super::*;

impl Monitor {
    pub(super) fn runnable_or_resumable(&self) -> Result<(), Failure> {
        match self.root {
            Some(RootState::Runnable) => Ok(()),
            Some(RootState::Suspended) => {
                // A suspended root may resume only by an edit when no non-root goal is active.
                if self.any_goal_active() {
                    Err(reauth("the root is suspended; reauthorize the active path"))
                } else {
                    Ok(())
                }
            }
            _ => Err(deny(ReasonCode::ROOT_CLOSED, "the root is closed")),
        }
    }

    pub(super) fn descendants_resolved(&self, i: usize) -> bool {
        !self
            .goals
            .iter()
            .enumerate()
            .any(|(j, g)| j != i && g.state == GoalState::Active && self.path_of(j).contains(&i))
    }

    /// proposeGoal, or replaceGoal when `old` is given.
    pub(super) fn propose(
        &mut self,
        g: &GoalSpec,
        w: &WitnessClaim,
        old: Option<&String>,
    ) -> Result<Digest, Failure> {
        Self::check_goal_limits(g)?;
        if self.goals.len() >= limits::GOALS {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} goals held; the profile allows {}",
                    self.goals.len(),
                    limits::GOALS
                ),
            ));
        }
        // W2: structure and lineage.
        let parent = *self
            .by_id
            .get(&g.parent)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("parent `{}`", g.parent)))?;
        if self.goals.get(parent).map(|p| p.state) != Some(GoalState::Active) {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{}` is not active", g.parent),
            ));
        }
        let old_ix = match old {
            Some(o) => {
                let i = *self
                    .by_id
                    .get(o)
                    .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{o}`")))?;
                let og = self
                    .goals
                    .get(i)
                    .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "old"))?;
                if og.parent != Some(parent) {
                    return Err(deny(
                        ReasonCode::WITNESS_MISMATCH,
                        "a replacement keeps the replaced goal's parent",
                    ));
                }
                if !matches!(og.state, GoalState::Active | GoalState::Cancelled) {
                    return Err(deny(
                        ReasonCode::NOT_REPLACEABLE_GOAL,
                        format!("`{o}` is {}", og.state.name()),
                    ));
                }
                if !self.descendants_resolved(i) {
                    return Err(deny(
                        ReasonCode::DESCENDANTS_UNRESOLVED,
                        format!("`{o}` has active descendants"),
                    ));
                }
                Some(i)
            }
            None => None,
        };
        let same_id_as_old = old.is_some_and(|o| *o == g.id);
        if self.by_id.contains_key(&g.id) && !same_id_as_old {
            return Err(deny(
                ReasonCode::DUPLICATE_GOAL,
                format!("`{}` exists", g.id),
            ));
        }
        let (text, digest) = edit_text_digest(g);
        self.goal_text = Some(text);
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        let edit = self.parse_edit(g)?;
        self.check_edit(parent, &edit)?;
        // Allow: install atomically.
        let revision = match old_ix {
            Some(i) => {
                let r = self.goals.get(i).map_or(1, |o| o.revision + 1);
                if let Some(o) = self.goals.get_mut(i) {
                    o.state = GoalState::Replaced;
                }
                r
            }
            None => 1,
        };
        self.install(&g.id, parent, revision, edit, digest);
        Ok(digest)
    }

    /// Installs an accepted edit as the active goal `id` below `parent`: graph revision and the
    /// parent's revision advance, the goal's path becomes the witness, the root is runnable.
    pub(super) fn install(
        &mut self,
        id: &str,
        parent: usize,
        revision: u64,
        edit: Edit,
        digest: Digest,
    ) {
        self.versions.graph += 1;
        let ix = self.goals.len();
        self.goals.push(Goal {
            id: id.to_string(),
            parent: Some(parent),
            revision,
            state: GoalState::Active,
            residual: edit.residual,
            closing: edit.closing,
            resources: edit.resources,
            obligations: edit.obligations,
            frames: edit.frames,
            executor: None,
            versions: self.versions,
            digest,
        });
        self.by_id.insert(id.to_string(), ix);
        if let Some(p) = self.goals.get_mut(parent) {
            p.revision += 1;
        }
        self.witness = Some(Witness {
            path: self.path_of(ix),
            versions: self.versions,
        });
        self.root = Some(RootState::Runnable);
    }

    pub(super) fn delegate(
        &mut self,
        goal: &str,
        resources: &[String],
        root: &str,
        w: &WitnessClaim,
        worker: &str,
    ) -> Result<(), Failure> {
        if resources.len() > limits::ARRAY {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                "too many resources",
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        if root != c.spec.root {
            return Err(deny(
                ReasonCode::CROSS_ROOT,
                format!("delegation into root `{root}`"),
            ));
        }
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.state != GoalState::Active || g.parent.is_none() {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not an active non-root goal"),
            ));
        }
        if worker.trim().is_empty() {
            return Err(deny(
                ReasonCode::SCHEMA_INVALID,
                "a delegation binds a worker identity",
            ));
        }
        let parent = g.parent.unwrap_or(0);
        let spec = serde_json::json!({"goal": goal, "resources": resources, "worker": worker});
        let digest = Digest::of(
            tag::COMPONENT,
            &[b"contract-delegation\0", spec.to_string().as_bytes()],
        );
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        if let Some(r) = resources.iter().find(|r| !g.resources.contains(*r)) {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` is not the delegated goal's to give"),
            ));
        }
        // The delegation selects the goal's path as the new witness: it must still be one (a
        // sibling may have advanced the parent's work since the goal was authorized).
        self.path_valid(i)?;
        self.versions.graph += 1;
        let v = self.versions;
        if let Some(g) = self.goals.get_mut(i) {
            g.executor = Some(worker.to_string());
            g.resources = resources.iter().cloned().collect();
            g.revision += 1;
            g.versions = v;
        }
        if let Some(p) = self.goals.get_mut(parent) {
            p.revision += 1;
        }
        self.witness = Some(Witness {
            path: self.path_of(i),
            versions: v,
        });
        self.root = Some(RootState::Runnable);
        Ok(())
    }

    pub(super) fn join(
        &mut self,
        joined: &GoalSpec,
        precedence: &[(String, String)],
        sources: &[String],
        w: &WitnessClaim,
    ) -> Result<Digest, Failure> {
        if sources.len() > limits::JOIN_SOURCES {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} join sources; the profile allows {}",
                    sources.len(),
                    limits::JOIN_SOURCES
                ),
            ));
        }
        if precedence.len() > limits::PRECEDENCE {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} precedence entries; the profile allows {}",
                    precedence.len(),
                    limits::PRECEDENCE
                ),
            ));
        }
        Self::check_goal_limits(joined)?;
        if self.goals.len() >= limits::GOALS {
            return Err(indeterminate(ReasonCode::PROFILE_LIMIT, "goal population"));
        }
        let parent = *self.by_id.get(&joined.parent).ok_or_else(|| {
            deny(
                ReasonCode::UNKNOWN_GOAL,
                format!("parent `{}`", joined.parent),
            )
        })?;
        let mut ixs = Vec::new();
        for s in sources {
            let i = *self
                .by_id
                .get(s)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{s}`")))?;
            let g = self
                .goals
                .get(i)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "source"))?;
            if g.state != GoalState::Active || g.parent != Some(parent) || ixs.contains(&i) {
                return Err(deny(
                    ReasonCode::JOIN_NOT_SIBLINGS,
                    format!(
                        "`{s}` is not a distinct active sibling under `{}`",
                        joined.parent
                    ),
                ));
            }
            ixs.push(i);
        }
        if ixs.len() < 2 {
            return Err(deny(
                ReasonCode::JOIN_NOT_SIBLINGS,
                "a join names at least two siblings",
            ));
        }
        if self.by_id.contains_key(&joined.id) {
            return Err(deny(
                ReasonCode::DUPLICATE_GOAL,
                format!("`{}` exists", joined.id),
            ));
        }
        let digest = edit_digest(joined);
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        let mut prec = Vec::new();
        for (a, b) in precedence {
            let ia = sources.iter().position(|s| s == a);
            let ib = sources.iter().position(|s| s == b);
            match (ia, ib) {
                (Some(x), Some(y)) => prec.push((x, y)),
                _ => {
                    return Err(deny(
                        ReasonCode::JOIN_NOT_SIBLINGS,
                        format!("precedence `{a}` before `{b}` names a non-source"),
                    ));
                }
            }
        }
        let components: Vec<Vec<Trace>> = ixs
            .iter()
            .map(|i| {
                self.goals
                    .get(*i)
                    .map(|g| g.residual.clone())
                    .unwrap_or_default()
            })
            .collect();
        let composed = match compose(&components, &prec) {
            Ok(c) => c,
            Err(ComposeError::ProfileLimit(what)) => {
                return Err(indeterminate(
                    ReasonCode::PROFILE_LIMIT,
                    format!("join {what} over the guard"),
                ));
            }
            Err(ComposeError::BadPrecedence) => {
                return Err(deny(
                    ReasonCode::JOIN_NOT_SIBLINGS,
                    "the precedence has a cycle",
                ));
            }
        };
        let edit = self.parse_edit(joined)?;
        if edit.residual != composed {
            return Err(deny(
                ReasonCode::JOIN_COMPOSITION,
                format!(
                    "{} continuations supplied; the complete composition has {}",
                    edit.residual.len(),
                    composed.len()
                ),
            ));
        }
        // Resources of the joined goal cover no more than the sources held together.
        let union: BTreeSet<String> = ixs
            .iter()
            .filter_map(|i| self.goals.get(*i))
            .flat_map(|g| g.resources.iter().cloned())
            .collect();
        if let Some(r) = edit.resources.iter().find(|r| !union.contains(*r)) {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` was held by no source"),
            ));
        }
        self.check_edit(parent, &edit)?;
        for i in &ixs {
            if let Some(g) = self.goals.get_mut(*i) {
                g.state = GoalState::Joined;
            }
        }
        self.install(&joined.id, parent, 1, edit, digest);
        Ok(digest)
    }

    pub(super) fn cancel(&mut self, goal: &str) -> Result<(), Failure> {
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.parent.is_none() || g.state != GoalState::Active {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not an active non-root goal"),
            ));
        }
        if !self.descendants_resolved(i) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                format!("`{goal}` has active descendants"),
            ));
        }
        if let Some(g) = self.goals.get_mut(i) {
            g.state = GoalState::Cancelled;
        }
        self.versions.graph += 1;
        self.witness = None;
        Ok(())
    }

    pub(super) fn close_goal(&mut self, goal: &str) -> Result<(), Failure> {
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        if i == 0 {
            return Err(deny(
                ReasonCode::SCHEMA_INVALID,
                "close the root with closeRoot",
            ));
        }
        let w = self.current_path()?;
        if w.path.first() != Some(&i) {
            return Err(deny(
                ReasonCode::NOT_SELECTED_PATH,
                "close a goal under its current witness",
            ));
        }
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if !self.descendants_resolved(i) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                format!("`{goal}` has active descendants"),
            ));
        }
        if !g.residual.iter().any(Vec::is_empty) {
            return Err(deny(
                ReasonCode::NOT_COMPLETE,
                format!("`{goal}`'s executed suffix is not a closing trace"),
            ));
        }
        if !g.closing.holds(&self.state) {
            return Err(deny(
                ReasonCode::CLOSING_PREDICATE_FALSE,
                format!("`{goal}`'s closing predicate fails"),
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        self.obligations_discharged(c, g)?;
        if let Some(g) = self.goals.get_mut(i) {
            g.state = GoalState::Closed;
        }
        self.versions.graph += 1;
        self.witness = None;
        Ok(())
    }

    /// Whether any goal other than the root goal is active.
    pub(super) fn any_goal_active(&self) -> bool {
        self.goals
            .iter()
            .skip(1)
            .any(|g| g.state == GoalState::Active)
    }

    /// Every obligation of `g` has its trusted discharge evidence in the current state.
    pub(super) fn obligations_discharged(&self, c: &Contract, g: &Goal) -> Result<(), Failure> {
        match g
            .obligations
            .iter()
            .find(|o| !c.discharge.get(*o).is_some_and(|p| p.holds(&self.state)))
        {
            Some(o) => Err(deny(
                ReasonCode::OBLIGATIONS_OPEN,
                format!("`{o}` is not discharged"),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn close_root(&mut self) -> Result<(), Failure> {
        if self.root != Some(RootState::Runnable) {
            return Err(Failure {
                verdict: Verdict::Reauthorize,
                reason: ReasonCode::ROOT_SUSPENDED,
                detail: "close the root from a runnable configuration".into(),
            });
        }
        if self.any_goal_active() {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "a goal is still active",
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        if c.traces.binary_search(&self.trace).is_err() {
            return Err(deny(
                ReasonCode::TRACE_NOT_PERMITTED,
                format!(
                    "`{}` is not a permitted completion",
                    self.show_trace(&self.trace)
                ),
            ));
        }
        let root_goal = self
            .goals
            .first()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "root goal"))?;
        self.obligations_discharged(c, root_goal)?;
        if !c.closing.holds(&self.state) {
            return Err(deny(
                ReasonCode::CLOSING_PREDICATE_FALSE,
                "Q_C does not hold",
            ));
        }
        self.root = Some(RootState::Closed);
        self.witness = None;
        Ok(())
    }
}
