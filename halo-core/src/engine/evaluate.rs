//! Re-evaluation, the part of the method every event goes through: LocalOK over the
//! footprints an event touched, the greatest dependency-closed retained set, bindings and
//! tokens for retained actions, denials and invalidations with their cascade, readiness and
//! phases.

use super::*;

impl Shared {
    pub(super) fn spec(&self, r: &Resp, i: u16) -> Option<&TypeSpec> {
        r.graph.component(i).and_then(|c| self.cat.type_spec(c.ty))
    }

    /// Whether claims bind in `LocalOK` (all variants but Local-Unbound).
    pub(crate) fn claims(&self) -> Claims {
        #[cfg(feature = "__seeded-defects")]
        if self.cfg.seeded(crate::defect::Defect::OriginNotClaimed) {
            return Claims::BoundWithoutOrigin;
        }
        if self.cfg.variant().binds_claims() {
            Claims::Bound
        } else {
            Claims::Unbound
        }
    }

    /// The GlobalSnapshot variant's proposal-wide snapshot of every catalog source; empty for
    /// every other variant.
    pub(crate) fn global_snapshot(&self) -> Vec<Option<(u64, Id)>> {
        if !self.cfg.variant().global_snapshot() {
            return Vec::new();
        }
        (0..self.cat.sources().len())
            .map(|i| {
                let s = SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
                self.snap
                    .source(s)
                    .map(|st| (st.epoch, st.provenance.clone()))
            })
            .collect()
    }

    /// GlobalSnapshot only: the first catalog source whose identity changed since `r`'s
    /// snapshot, with the reason.
    pub(crate) fn snapshot_changed(&self, r: &Resp) -> Option<(ReasonCode, SourceIx)> {
        r.snapshot.iter().enumerate().find_map(|(i, then)| {
            let s = SourceIx(u8::try_from(i).ok()?);
            let now = self.snap.source(s).map(|st| (st.epoch, &st.provenance));
            match (then, now) {
                (Some((e, _)), Some((e2, _))) if *e != e2 => Some((ReasonCode::EPOCH_CHANGED, s)),
                (Some((_, p)), Some((_, p2))) if p != p2 => {
                    Some((ReasonCode::PROVENANCE_CHANGED, s))
                }
                (Some(_), None) => Some((ReasonCode::SOURCE_MISSING, s)),
                _ => None,
            }
        })
    }

    /// Re-evaluates `LocalOK` for the components in `mask` that are not settled. Returns the
    /// components whose verdict changed (all of `mask` on first admission).
    pub(crate) fn evaluate(&mut self, r: &mut Resp, mask: u64, now: Nanos) -> u64 {
        let mut changed = 0u64;
        // GlobalSnapshot only (empty snapshot otherwise): one answer for the whole response.
        let snapshot = self.snapshot_changed(r);
        for i in bits(mask) {
            let (Some(c), Some(x)) = (r.graph.component(i), r.inst(i)) else {
                continue;
            };
            if matches!(x.phase, Phase::Failed | Phase::Invalidated) {
                continue;
            }
            let Some(spec) = self.cat.type_spec(c.ty) else {
                continue;
            };
            let timing = if x.phase.has_proceeded() {
                Timing::Proceeded
            } else {
                Timing::BeforeEffect
            };
            let mut v = local_ok_with(&self.cat, spec, c, &self.snap, now, timing, self.claims());
            if timing != Timing::Proceeded
                && let Some((code, s)) = snapshot
            {
                v.fail(code, Some(s));
                v.changes_at = Nanos::MAX;
            }
            let first = x.phase == Phase::Proposed;
            // INVARIANT (deny-hold): an action still streaming under its certified interval
            // that loses support is reported at the instant of the loss.
            let lost = x.local.ok
                && !v.ok
                && x.class == Class::Action
                && matches!(x.phase, Phase::Dispatched | Phase::ObservedSuccess)
                && x.streaming_until.is_some_and(|u| now < u);
            let binding = x.binding;
            if let Some(x) = r.inst_mut(i) {
                if first || v.ok != x.local.ok || v.code != x.local.code {
                    changed |= 1u64 << i;
                }
                x.local = v;
                if lost {
                    x.streaming_until = None;
                }
            }
            if let (true, Some(b), Some(at)) = (lost, binding, r.at(i)) {
                let code = v.code.unwrap_or(ReasonCode::RULE_FAILED);
                self.events.push_back(Event::SupportLost {
                    component: at.clone(),
                    binding: b,
                    code,
                });
                self.receipts.push(
                    now,
                    Record::SupportLost {
                        component: at,
                        binding: b,
                        code,
                    },
                );
            }
        }
        self.schedule_support_of(r, mask);
        changed
    }

    /// Keeps one timer per response at the earliest instant any of its components may lose
    /// support by time alone.
    pub(crate) fn schedule_support(&mut self, r: &mut Resp) {
        self.schedule_support_of(r, r.all_mask());
    }

    /// [`Shared::schedule_support`] looking only at the components in `mask`, the ones whose
    /// verdict was just re-evaluated.
    ///
    /// INVARIANT (support timer): every supported, not-ended component's `changes_at` is at or
    /// after `r.deadline`, and a support timer is queued at `r.deadline`. Only `evaluate`
    /// (and a rolling renewal, which schedules over all) changes a verdict, so components
    /// outside `mask` keep theirs and stay covered; the timer's own handler clears the deadline
    /// and schedules over every component again.
    pub(crate) fn schedule_support_of(&mut self, r: &mut Resp, mask: u64) {
        if !self.cfg.variant().reevaluates() {
            // Admission-time decisions only: time never re-decides anything.
            return;
        }
        let next = bits(mask)
            .filter_map(|i| r.inst(i))
            .filter(|x| x.local.ok && !matches!(x.phase, Phase::Failed | Phase::Invalidated))
            .map(|x| x.local.changes_at)
            .min()
            .unwrap_or(Nanos::MAX);
        if next != Nanos::MAX && next < r.deadline {
            r.deadline = next;
            self.timers
                .push(Reverse((next, TimerKey::Support(r.id.clone()))));
        }
    }

    /// Recomputes membership in `A*_t` for `changed` and every dependent, in topological
    /// order, applies the resulting phase transitions, then processes readiness.
    ///
    /// Components outside `changed` and its dependents are not touched.
    pub(crate) fn recompute(&mut self, r: &mut Resp, changed: u64, now: Nanos) {
        if changed == 0 {
            return;
        }
        let variant = self.cfg.variant();
        let whole = variant.whole_response();
        let deps = variant.uses_dependencies();
        let forget = self.cfg.seeded(crate::defect::Defect::ForgetDependents);
        let affected = if whole {
            r.all_mask()
        } else if !deps || forget || changed == r.all_mask() {
            changed
        } else {
            changed | r.graph.descendants(changed)
        };
        let whole_ok = whole && r.inst.iter().all(|x| x.settled() || x.eligible());
        let mut flipped = 0u64;
        let topo: Vec<u16> = r.graph.topo().to_vec();
        for &i in &topo {
            if affected & (1u64 << i) == 0 {
                continue;
            }
            let Some(x) = r.inst(i) else { continue };
            let member = if whole {
                whole_ok && x.eligible()
            } else if !deps {
                x.eligible()
            } else {
                // INVARIANT (closure): a member's parents are all members.
                x.eligible()
                    && r.graph
                        .parents(i)
                        .iter()
                        .all(|&(p, _)| r.inst(p).is_some_and(|y| y.member))
            };
            let was = x.member;
            let first = x.phase == Phase::Proposed;
            if let Some(x) = r.inst_mut(i) {
                x.member = member;
            }
            if member != was || first {
                flipped |= 1u64 << i;
                self.settle(r, i, member, now);
            }
        }
        let _ = flipped;
        let kids = if affected == r.all_mask() {
            0
        } else {
            r.graph.descendants(affected)
        };
        self.readiness(r, affected | kids, now);
    }

    /// Applies the phase consequence of a membership decision.
    pub(super) fn settle(&mut self, r: &mut Resp, i: u16, member: bool, now: Nanos) {
        let Some(x) = r.inst(i) else { return };
        if x.settled() || x.ended_action() {
            return;
        }
        if member {
            if matches!(x.phase, Phase::Proposed | Phase::Withheld) {
                let need_binding = x.class == Class::Action && x.seq.is_none();
                self.set_phase(r, i, Phase::Retained, None, now);
                if need_binding {
                    self.bind(r, i, now);
                }
            }
            return;
        }
        let reason = if !x.local.ok {
            x.local.code.unwrap_or(ReasonCode::RULE_FAILED)
        } else if self.cfg.variant().whole_response() {
            ReasonCode::NOT_RETAINED
        } else {
            ReasonCode::PARENT_WITHHELD
        };
        if x.class == Class::NonAction {
            self.set_phase(r, i, Phase::Withheld, Some(reason), now);
        } else {
            self.deny(r, i, reason, now);
        }
    }

    /// Creates the witness, sequence, binding and token of a retained action.
    pub(crate) fn bind(&mut self, r: &mut Resp, i: u16, now: Nanos) {
        let Some(c) = r.graph.component(i) else {
            return;
        };
        let Some(spec) = self.cat.type_spec(c.ty) else {
            return;
        };
        let w = Witness::capture_sharing(&self.cat, spec, c, &self.snap, &mut self.projections);
        let wh = w.hash(&mut self.buf);
        let seq = self.ledger.next_seq();
        let b = binding(&wh, seq);
        let generation = r.inst(i).map_or(1, |x| x.generation);
        let tok = self.ledger.mint(&r.id, &c.id, c.digest, generation, seq, b);
        if let Some(x) = r.inst_mut(i) {
            x.witness = Some(w);
            x.seq = Some(seq);
            x.binding = Some(b);
            x.token = Some(tok);
            x.queued = false;
            x.admitted_at = now;
        }
    }

    /// Withholds an action instance: its token is revoked; a recoverable reason creates an
    /// obligation and leaves it WITHHELD, a terminal one INVALIDATES it and its unemitted or
    /// undispatched descendants.
    pub(crate) fn deny(&mut self, r: &mut Resp, i: u16, reason: ReasonCode, now: Nanos) {
        if let Some(x) = r.inst_mut(i) {
            if let Some(seq) = x.seq {
                self.ledger.revoke(seq);
            }
            x.token = None;
            x.member = false;
        }
        // Without a recovery process (the AgentSpec comparators) every denial is terminal.
        let recoverable = self.cfg.variant().recovers()
            && self
                .spec(r, i)
                .is_some_and(|s| s.recovery.is_recoverable(reason));
        if recoverable {
            self.set_phase(r, i, Phase::Withheld, Some(reason), now);
            self.create_obligation(r, i, reason, now);
        } else {
            self.set_phase(r, i, Phase::Invalidated, Some(reason), now);
            self.cascade_terminal(r, i, now);
        }
    }

    /// INVALIDATES one instance (terminal) and cascades.
    pub(crate) fn invalidate(&mut self, r: &mut Resp, i: u16, reason: ReasonCode, now: Nanos) {
        let Some(x) = r.inst_mut(i) else { return };
        if x.phase.has_proceeded() || x.phase.is_final() {
            return;
        }
        if let Some(seq) = x.seq {
            self.ledger.revoke(seq);
        }
        x.token = None;
        x.member = false;
        let obl = x.obligation;
        self.set_phase(r, i, Phase::Invalidated, Some(reason), now);
        if let Some(oid) = obl
            && let Some(o) = self.obligations.get_mut(&oid)
            && o.state.is_live()
        {
            o.state = ObligationState::Failed;
            self.events.push_back(Event::ObligationChanged {
                id: oid,
                state: ObligationState::Failed,
            });
        }
        self.cascade_terminal(r, i, now);
    }

    /// A terminal failure of `i` invalidates its unemitted or undispatched descendants and
    /// leaves everything else alone.
    pub(crate) fn cascade_terminal(&mut self, r: &mut Resp, i: u16, now: Nanos) {
        let desc = r.graph.descendants(1u64 << i);
        let topo: Vec<u16> = r.graph.topo().to_vec();
        for &d in &topo {
            if desc & (1u64 << d) == 0 {
                continue;
            }
            let open = r
                .inst(d)
                .is_some_and(|x| !x.phase.has_proceeded() && !x.phase.is_final());
            if open {
                if let Some(x) = r.inst_mut(d) {
                    if let Some(seq) = x.seq {
                        self.ledger.revoke(seq);
                    }
                    x.token = None;
                    x.member = false;
                }
                let obl = r.inst(d).and_then(|x| x.obligation);
                self.set_phase(
                    r,
                    d,
                    Phase::Invalidated,
                    Some(ReasonCode::PARENT_FAILED),
                    now,
                );
                if let Some(oid) = obl
                    && let Some(o) = self.obligations.get_mut(&oid)
                    && o.state.is_live()
                {
                    o.state = ObligationState::Failed;
                    self.events.push_back(Event::ObligationChanged {
                        id: oid,
                        state: ObligationState::Failed,
                    });
                }
            }
        }
    }

    /// DepsReady: every declared parent is at or beyond its required phase.
    pub(crate) fn deps_ready(&self, r: &Resp, i: u16) -> bool {
        if !self.cfg.variant().uses_dependencies() {
            return true;
        }
        r.graph
            .parents(i)
            .iter()
            .all(|&(p, q)| r.inst(p).is_some_and(|y| y.phase.at_or_beyond(q)))
    }

    /// Emits ready non-actions and queues ready actions for the gate, in topological order,
    /// following emissions to their dependents.
    pub(crate) fn readiness(&mut self, r: &mut Resp, mask: u64, now: Nanos) {
        let mut todo = mask;
        let topo: Vec<u16> = r.graph.topo().to_vec();
        for &i in &topo {
            if todo & (1u64 << i) == 0 {
                continue;
            }
            let Some(x) = r.inst(i) else { continue };
            if !x.member || !matches!(x.phase, Phase::Retained | Phase::Pending) {
                continue;
            }
            if !self.deps_ready(r, i) {
                if x.phase != Phase::Pending {
                    self.set_phase(r, i, Phase::Pending, Some(ReasonCode::DEPS_NOT_READY), now);
                }
                continue;
            }
            match x.class {
                Class::NonAction => {
                    let (Some(c), Some(spec), Some(at)) =
                        (r.graph.component(i), self.spec(r, i), r.at(i))
                    else {
                        continue;
                    };
                    let path = match &spec.output {
                        Output::Path(p) | Output::Adapter(p) => p.clone(),
                    };
                    self.events.push_back(Event::Emit {
                        component: at,
                        path,
                        payload: c.payload.clone(),
                    });
                    self.set_phase(r, i, Phase::Emitted, None, now);
                    for &ch in r.graph.children(i) {
                        todo |= 1u64 << ch;
                    }
                }
                Class::Action => {
                    if x.phase == Phase::Pending {
                        self.set_phase(r, i, Phase::Retained, None, now);
                    }
                    let queue = r.inst(i).is_some_and(|x| !x.queued && x.token.is_some());
                    if queue {
                        if let Some(x) = r.inst_mut(i) {
                            x.queued = true;
                        }
                        self.ready.push_back((r.id.clone(), i));
                    }
                }
            }
        }
    }

    /// Sets a phase, emitting an event and a receipt when it changes.
    pub(crate) fn set_phase(
        &mut self,
        r: &mut Resp,
        i: u16,
        phase: Phase,
        reason: Option<ReasonCode>,
        now: Nanos,
    ) {
        let Some(x) = r.inst_mut(i) else { return };
        if x.phase == phase && x.reason == reason {
            return;
        }
        x.phase = phase;
        x.reason = reason;
        let generation = x.generation;
        if self.summarizing {
            // Inside one admission the summary receipt lists every resulting phase.
            return;
        }
        let Some(at) = r.at(i) else {
            return;
        };
        self.events.push_back(Event::Phase {
            component: at.clone(),
            phase,
            reason,
        });
        self.receipts.push(
            now,
            Record::Phase {
                component: at,
                phase,
                reason,
                generation,
            },
        );
    }

    /// Marks a response done when every instance is settled and no obligation of it is live,
    /// and schedules its retirement.
    pub(crate) fn check_done(&mut self, r: &mut Resp, now: Nanos) {
        if r.done_at.is_some() {
            return;
        }
        let open = r.inst.iter().any(|x| {
            !(x.phase.has_proceeded() || x.phase.is_final())
                || x.obligation
                    .is_some_and(|o| self.obligations.get(&o).is_some_and(|o| o.state.is_live()))
        });
        if !open {
            r.done_at = Some(now);
            self.timers.push(Reverse((
                now.saturating_add(self.cfg.done_retention),
                TimerKey::Retire(r.id.clone()),
            )));
        }
    }
}
