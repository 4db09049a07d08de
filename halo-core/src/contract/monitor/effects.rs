//! Effects: authorization reserves an effect on the current witness path; commit applies it in
//! order; the dispatch gate's call does both.

use super::*;

impl Monitor {
    pub(super) fn current_path(&self) -> Result<&Witness, Failure> {
        if self.root == Some(RootState::Suspended) {
            return Err(Failure {
                verdict: Verdict::Reauthorize,
                reason: ReasonCode::ROOT_SUSPENDED,
                detail: "a version changed; reauthorize".into(),
            });
        }
        let w = self.witness.as_ref().ok_or_else(|| Failure {
            verdict: Verdict::Reauthorize,
            reason: ReasonCode::NO_CURRENT_WITNESS,
            detail: "no current witness; reauthorize a path".into(),
        })?;
        if w.versions != self.versions {
            return Err(reauth("the witness is stale"));
        }
        Ok(w)
    }

    /// The gate-side check of one normalized effect on the current path; returns the successor
    /// state. Read-only.
    pub(super) fn effect_ok(&self, leaf: usize, e: u32) -> Result<State, Failure> {
        let w = self.current_path()?;
        if w.path.first() != Some(&leaf) {
            return Err(deny(
                ReasonCode::NOT_SELECTED_PATH,
                "the goal is not the current path's leaf",
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        for &h in &w.path {
            let g = self
                .goals
                .get(h)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "path"))?;
            if !g.residual.iter().any(|t| t.first() == Some(&e)) {
                return Err(deny(
                    ReasonCode::EFFECT_NOT_ADMITTED,
                    format!(
                        "`{}` is not next in `{}`'s residual language",
                        self.domain.name(e),
                        g.id
                    ),
                ));
            }
        }
        if self.policy.deny.contains(&e) {
            return Err(deny(
                ReasonCode::POLICY_VIOLATION,
                "the policy denies this effect",
            ));
        }
        let next = self
            .domain
            .apply(&self.state, e)
            .ok_or_else(|| deny(ReasonCode::EFFECT_NOT_APPLICABLE, "precondition fails"))?;
        if c.forbidden.iter().any(|p| p.holds(&next))
            || self.policy.forbid.iter().any(|p| p.holds(&next))
        {
            return Err(deny(
                ReasonCode::FORBIDDEN_REACHABLE,
                "the successor state is forbidden",
            ));
        }
        for &h in &w.path {
            if self
                .goals
                .get(h)
                .is_some_and(|g| g.frames.iter().any(|f| !f.holds(&next)))
            {
                return Err(deny(
                    ReasonCode::FRAME_VIOLATION,
                    "a frame fails in the successor state",
                ));
            }
        }
        Ok(next)
    }

    pub(super) fn authorize(&mut self, goal: &str, effect: &str) -> Result<u64, Failure> {
        let leaf = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let e = self
            .domain
            .effect_id(effect)
            .ok_or_else(|| deny(ReasonCode::EFFECT_UNKNOWN, format!("`{effect}`")))?;
        self.effect_ok(leaf, e)?;
        let id = self.next_reservation;
        self.next_reservation += 1;
        self.reservations.insert(
            id,
            Reservation {
                id,
                goal: leaf,
                effect: e,
                trace_digest: self.trace_digest,
                versions: self.versions,
                used: false,
            },
        );
        Ok(id)
    }

    pub(super) fn commit(&mut self, reservation: u64, effect: &str) -> Result<(), Failure> {
        let r = self
            .reservations
            .get(&reservation)
            .cloned()
            .ok_or_else(|| {
                deny(
                    ReasonCode::RESERVATION_UNKNOWN,
                    format!("reservation {reservation}"),
                )
            })?;
        if r.used {
            return Err(deny(ReasonCode::RESERVATION_USED, "single use"));
        }
        let e = self
            .domain
            .effect_id(effect)
            .ok_or_else(|| deny(ReasonCode::EFFECT_UNKNOWN, format!("`{effect}`")))?;
        if e != r.effect {
            return Err(deny(
                ReasonCode::EFFECT_MISMATCH,
                format!(
                    "reserved `{}`, committing `{}`",
                    self.domain.name(r.effect),
                    self.domain.name(e)
                ),
            ));
        }
        if r.versions != self.versions || r.trace_digest != self.trace_digest {
            return Err(reauth(
                "the reservation was made against another version or trace",
            ));
        }
        let next = self.effect_ok(r.goal, e)?;
        // Commit at one linearization point: state, trace, residuals, reservation, revision.
        let name = self.domain.name(e);
        let path = self
            .witness
            .as_ref()
            .map(|w| w.path.clone())
            .unwrap_or_default();
        self.state = next;
        self.trace.push(e);
        self.trace_digest = extend_trace_digest(&self.trace_digest, &name);
        for h in &path {
            if let Some(g) = self.goals.get_mut(*h) {
                g.residual = g
                    .residual
                    .iter()
                    .filter(|t| t.first() == Some(&e))
                    .map(|t| t.get(1..).unwrap_or(&[]).to_vec())
                    .collect();
            }
        }
        if let Some(rr) = self.reservations.get_mut(&reservation) {
            rr.used = true;
        }
        self.versions.graph += 1;
        self.witness = Some(Witness {
            path,
            versions: self.versions,
        });
        Ok(())
    }

    /// The dispatch gate's call, synchronous and allocation-light: authorize `effect` on the
    /// current path's leaf `goal` and commit it under idempotency `key`, leaving two receipts.
    /// Returns the commit's decision, or the authorization's refusal (nothing committed).
    pub fn gate_effect(&mut self, goal: &str, effect: &str, key: &str) -> Decision {
        let a = self.handle(Request {
            caller: Role::Agent,
            op: Op::AuthorizeEffect {
                effect: effect.to_string(),
                goal: goal.to_string(),
            },
        });
        let Some(reservation) = a.reservation.filter(|_| a.allowed()) else {
            return a;
        };
        self.handle(Request {
            caller: Role::Agent,
            op: Op::CommitEffect {
                effect: effect.to_string(),
                key: key.to_string(),
                reservation,
            },
        })
    }
}
