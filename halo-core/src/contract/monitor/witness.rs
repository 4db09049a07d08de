//! The witness checks (W1–W7): a proposed edit's safe future, its claimed witness path and the
//! edit's own obligations, checked against the parent's retained state.

use super::*;

impl Monitor {
    /// W4 and the policy over a set of maximal traces from `s`: every prefix applicable, no
    /// prefix state forbidden (contract or policy), every frame true on every prefix state.
    pub(super) fn safe_future(
        &self,
        s: &State,
        traces: &[Trace],
        frames: &[&Pred],
    ) -> Result<(), Failure> {
        self.safe_future_ends(s, traces, frames).map(|_| ())
    }

    /// [`Monitor::safe_future`], returning the end state of each trace (in input order).
    pub(super) fn safe_future_ends(
        &self,
        s: &State,
        traces: &[Trace],
        frames: &[&Pred],
    ) -> Result<Vec<State>, Failure> {
        let Some(c) = self.contract.as_ref() else {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        };
        let bad = |st: &State| -> Option<Failure> {
            if c.forbidden.iter().any(|p| p.holds(st)) {
                return Some(deny(
                    ReasonCode::FORBIDDEN_REACHABLE,
                    format!("forbidden state {}", show_state(&self.domain.show(st))),
                ));
            }
            if self.policy.forbid.iter().any(|p| p.holds(st)) {
                return Some(deny(
                    ReasonCode::POLICY_VIOLATION,
                    format!("policy forbids state {}", show_state(&self.domain.show(st))),
                ));
            }
            if frames.iter().any(|f| !f.holds(st)) {
                return Some(deny(
                    ReasonCode::FRAME_VIOLATION,
                    format!("a frame fails in {}", show_state(&self.domain.show(st))),
                ));
            }
            None
        };
        if let Some(f) = bad(s) {
            return Err(f);
        }
        // Walk the traces in sorted order, reusing the states of the common prefix: `bufs[d]` is
        // the state after `d + 1` effects of the current trace, its allocation kept for the next.
        let mut order: Vec<(usize, &Trace)> = traces.iter().enumerate().collect();
        order.sort_unstable_by(|a, b| a.1.cmp(b.1));
        let mut ends: Vec<State> = vec![Vec::new(); traces.len()];
        let mut bufs: Vec<State> = Vec::new();
        let mut depth = 0usize;
        let mut prev: &[u32] = &[];
        for (ix, t) in order {
            if let Some(max) = self.policy.max_len
                && self.trace.len() + t.len() > max
            {
                return Err(deny(
                    ReasonCode::POLICY_VIOLATION,
                    format!("the policy allows {max} effects in all"),
                ));
            }
            depth = prev
                .iter()
                .zip(t.iter())
                .take_while(|(a, b)| a == b)
                .count()
                .min(depth);
            for &e in t.get(depth..).unwrap_or(&[]) {
                if self.policy.deny.contains(&e) {
                    return Err(deny(
                        ReasonCode::POLICY_VIOLATION,
                        format!("the policy denies `{}`", self.domain.name(e)),
                    ));
                }
                if bufs.len() <= depth {
                    bufs.push(Vec::with_capacity(s.len()));
                }
                let (done, rest) = bufs.split_at_mut(depth);
                let from: &[i64] = done.last().map_or(s.as_slice(), Vec::as_slice);
                let Some(next) = rest.first_mut() else {
                    return Err(indeterminate(ReasonCode::PROFILE_LIMIT, "state buffer"));
                };
                if !self.domain.apply_into(from, e, next) {
                    return Err(deny(
                        ReasonCode::EFFECT_NOT_APPLICABLE,
                        format!(
                            "`{}` is not applicable in {:?}",
                            self.domain.name(e),
                            self.domain.show(from)
                        ),
                    ));
                }
                if let Some(f) = bad(next) {
                    return Err(f);
                }
                depth += 1;
            }
            if let Some(slot) = ends.get_mut(ix) {
                *slot = match depth.checked_sub(1).and_then(|d| bufs.get(d)) {
                    Some(st) => st.clone(),
                    None => s.clone(),
                };
            }
            prev = t;
        }
        Ok(ends)
    }

    pub(super) fn state_after(&self, s: &State, t: &[u32]) -> Option<State> {
        let mut cur = s.clone();
        for &e in t {
            cur = self.domain.apply(&cur, e)?;
        }
        Some(cur)
    }

    pub(super) fn path_of(&self, leaf: usize) -> Vec<usize> {
        let mut p = vec![leaf];
        let mut cur = leaf;
        while let Some(parent) = self.goals.get(cur).and_then(|g| g.parent) {
            p.push(parent);
            cur = parent;
            if p.len() > limits::GOALS + 1 {
                break;
            }
        }
        p
    }

    pub(super) fn check_witness(
        &self,
        w: &WitnessClaim,
        parent: usize,
        edit: &Digest,
    ) -> Result<(), Failure> {
        let Some(c) = self.contract.as_ref() else {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        };
        // W1 bindings that can never become true: another root, another edit, a bad revision step.
        if w.root != c.spec.root || w.epoch != c.spec.epoch {
            return Err(deny(
                ReasonCode::CROSS_ROOT,
                format!("the witness names root `{}` epoch {}", w.root, w.epoch),
            ));
        }
        if Digest::from_hex(&w.edit).ok() != Some(*edit) {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                "the witness does not bind this canonical edit",
            ));
        }
        if w.new_revision != w.base_revision.saturating_add(1) {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                "the new revision must follow the base revision",
            ));
        }
        let pid = self.goals.get(parent).map(|g| g.id.as_str()).unwrap_or("");
        if w.parent != pid {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                format!("the witness names parent `{}`", w.parent),
            ));
        }
        // W7: versions current.
        let prev = self.goals.get(parent).map_or(0, |g| g.revision);
        if w.base_revision != self.versions.graph
            || w.policy_version != self.versions.policy
            || w.state_version != self.versions.state
            || w.parent_revision != prev
        {
            return Err(reauth(format!(
                "witness planned at graph {} policy {} state {} parent revision {}; current {} {} {} {}",
                w.base_revision,
                w.policy_version,
                w.state_version,
                w.parent_revision,
                self.versions.graph,
                self.versions.policy,
                self.versions.state,
                prev
            )));
        }
        Ok(())
    }

    /// W3–W6 for an edit below `parent`, with `frames_extra` the edit's own frames.
    pub(super) fn check_edit(&self, parent: usize, e: &Edit) -> Result<(), Failure> {
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        let p = self
            .goals
            .get(parent)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "parent"))?;
        // K_Δ = child · completion: every composed maximal trace (the child's own traces when
        // the completion is empty, the common case, without copying them).
        let only_empty = e.completion.len() == 1 && e.completion.first().is_some_and(Vec::is_empty);
        let built: Vec<Trace>;
        let composed: &[Trace] = if only_empty {
            &e.residual
        } else {
            let mut v = Vec::with_capacity(e.residual.len() * e.completion.len());
            for u in &e.residual {
                for c in &e.completion {
                    let mut x = u.clone();
                    x.extend_from_slice(c);
                    if x.len() > limits::EFFECTS * 2 {
                        return Err(indeterminate(
                            ReasonCode::PROFILE_LIMIT,
                            "composed continuation too long",
                        ));
                    }
                    v.push(x);
                }
            }
            built = v;
            &built
        };
        // W3: K_Δ ⊆ K_h (residual) for every ancestor on the path (the root goal's residual is
        // t⁻¹L_C), and the completion binds to the parent's residual: D_Δ ⊆ D_p.
        let path = self.path_of(parent);
        for &h in &path {
            let g = self
                .goals
                .get(h)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "ancestor"))?;
            let m = &g.residual;
            for x in composed {
                if !in_prefix_closure(m, x) {
                    return Err(deny(
                        ReasonCode::TRACE_EXPANSION,
                        format!(
                            "`{}` is not in the residual language of `{}`",
                            self.show_trace(x),
                            g.id
                        ),
                    ));
                }
            }
        }
        let pm = &p.residual;
        for x in composed {
            if pm.binary_search(x).is_err() {
                return Err(deny(
                    ReasonCode::TRACE_EXPANSION,
                    format!(
                        "`{}` does not complete the parent `{}`'s residual work",
                        self.show_trace(x),
                        p.id
                    ),
                ));
            }
        }
        // W4: forbidden states, frames on the path and the edit's own, policy.
        let mut frames: Vec<&Pred> = e.frames.iter().collect();
        for &h in &path {
            if let Some(g) = self.goals.get(h) {
                frames.extend(g.frames.iter());
            }
        }
        let ends = self.safe_future_ends(&self.state, composed, &frames)?;
        // W5: resources and obligations.
        if let Some(r) = e
            .resources
            .iter()
            .find(|r| !p.resources.contains(*r) || !c.resources.contains(*r))
        {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` is outside the parent's or the root's envelope"),
            ));
        }
        if let Some(o) = e.obligations.iter().find(|o| !p.obligations.contains(*o)) {
            return Err(deny(
                ReasonCode::OBLIGATION_MINTED,
                format!("`{o}` is not an obligation of the parent"),
            ));
        }
        for o in &p.obligations {
            if e.obligations.contains(o) {
                continue;
            }
            let evidenced = e.discharged.contains(o)
                && c.discharge
                    .get(o)
                    .is_some_and(|pred| pred.holds(&self.state));
            if !evidenced {
                return Err(deny(
                    ReasonCode::OBLIGATION_DROPPED,
                    format!("`{o}` dropped without trusted discharge evidence"),
                ));
            }
        }
        // W6: success refinement in the common closing state. Composed trace `i * |completion|`
        // starts with child trace `i`; with an empty completion it is that trace.
        for (i, u) in e.residual.iter().enumerate() {
            let s_child = match ends.get(i).filter(|_| only_empty) {
                Some(st) => st.clone(),
                None => self
                    .state_after(&self.state, u)
                    .ok_or_else(|| deny(ReasonCode::EFFECT_NOT_APPLICABLE, "child trace"))?,
            };
            if !e.closing.holds(&s_child) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!(
                        "the goal's own closing predicate fails after `{}`",
                        self.show_trace(u)
                    ),
                ));
            }
        }
        for (x, s_end) in composed.iter().zip(&ends) {
            if !p.closing.holds(s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!(
                        "`{}` closes without the parent `{}`'s closing predicate",
                        self.show_trace(x),
                        p.id
                    ),
                ));
            }
            if p.parent.is_none() && !c.closing.holds(s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    "the root's closing predicate fails",
                ));
            }
        }
        Ok(())
    }

    pub(super) fn show_trace(&self, t: &[u32]) -> String {
        t.iter()
            .map(|e| self.domain.name(*e))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A witness claim for an edit of `goal` below `parent`, at current versions (a helper for
    /// planners and tests: the checker still verifies every field).
    pub fn witness_for(&self, parent: &str, edit: &Digest) -> WitnessClaim {
        let (root, epoch) = self
            .contract
            .as_ref()
            .map_or((String::new(), 0), |c| (c.spec.root.clone(), c.spec.epoch));
        WitnessClaim {
            base_revision: self.versions.graph,
            edit: edit.to_hex(),
            epoch,
            new_revision: self.versions.graph + 1,
            parent: parent.to_string(),
            parent_revision: self.goal(parent).map_or(0, |g| g.revision),
            policy_version: self.versions.policy,
            root,
            state_version: self.versions.state,
        }
    }
}

/// A modeled state for people: `battery = ok, zone = wp2`.
fn show_state(vars: &std::collections::BTreeMap<String, String>) -> String {
    vars.iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
