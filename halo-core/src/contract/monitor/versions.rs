//! Version changes (contract, policy, domain) and reauthorization: which goals stay valid.

use super::*;

impl Monitor {
    pub(super) fn change_version(
        &mut self,
        policy: Option<&[PolicyRule]>,
        observe: Option<&BTreeMap<String, serde_json::Value>>,
    ) -> Result<(), Failure> {
        if self.contract.is_none() {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        }
        if self.root == Some(RootState::Closed) {
            return Err(deny(ReasonCode::ROOT_CLOSED, "the root is closed"));
        }
        // Validate everything first: a refused change leaves nothing changed.
        let new_policy = match policy {
            Some(p) => Some(self.build_policy(p)?),
            None => None,
        };
        let new_state = match observe {
            Some(o) => Some(
                self.domain
                    .observe(&self.state, o)
                    .map_err(|e| deny(ReasonCode::SCHEMA_INVALID, e.0))?,
            ),
            None => None,
        };
        if let Some(p) = new_policy {
            self.policy = p;
            self.versions.policy += 1;
            if let (Some(c), Some(p)) = (self.contract.as_mut(), policy) {
                c.spec.policy = p.to_vec();
            }
        }
        if let Some(s) = new_state {
            self.state = s;
            self.versions.state += 1;
        }
        self.root = Some(RootState::Suspended);
        self.witness = None;
        Ok(())
    }

    pub(super) fn reauthorize(&mut self, goal: &str) -> Result<(), Failure> {
        let leaf = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(leaf)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.state != GoalState::Active {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not active"),
            ));
        }
        if leaf == 0 && self.any_goal_active() {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "the root path is only selectable when no non-root goal is active",
            ));
        }
        if leaf != 0 && !self.descendants_resolved(leaf) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "reauthorize a leaf",
            ));
        }
        let path = self.path_valid(leaf)?;
        self.witness = Some(Witness {
            path,
            versions: self.versions,
        });
        self.root = Some(RootState::Runnable);
        Ok(())
    }

    /// Rechecks the complete path from `leaf` at current versions: the leaf's residual
    /// continuations are included in every ancestor's, safe from the current state under the
    /// current policy and the path's frames, and close the leaf. Returns the path.
    pub(super) fn path_valid(&self, leaf: usize) -> Result<Vec<usize>, Failure> {
        let g = self
            .goals
            .get(leaf)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        let path = self.path_of(leaf);
        let mut frames: Vec<&Pred> = Vec::new();
        for &h in &path {
            if let Some(x) = self.goals.get(h) {
                frames.extend(x.frames.iter());
            }
        }
        for &h in path.iter().skip(1) {
            let a = self
                .goals
                .get(h)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "ancestor"))?;
            let m = &a.residual;
            for x in &g.residual {
                if !in_prefix_closure(m, x) {
                    return Err(deny(
                        ReasonCode::TRACE_EXPANSION,
                        format!(
                            "`{}` left `{}`'s residual language",
                            self.show_trace(x),
                            a.id
                        ),
                    ));
                }
            }
        }
        self.safe_future(&self.state, &g.residual, &frames)?;
        for u in &g.residual {
            let s_end = self
                .state_after(&self.state, u)
                .ok_or_else(|| deny(ReasonCode::EFFECT_NOT_APPLICABLE, "residual"))?;
            if !g.closing.holds(&s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!("`{}` cannot close after `{}`", g.id, self.show_trace(u)),
                ));
            }
        }
        Ok(path)
    }
}
