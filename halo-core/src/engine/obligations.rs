//! Obligations: a recoverable denial of an action becomes an obligation the agent answers with
//! a fresh candidate.

use super::*;

impl Shared {
    pub(crate) fn create_obligation(
        &mut self,
        r: &mut Resp,
        i: u16,
        reason: ReasonCode,
        now: Nanos,
    ) {
        let (Some(c), Some(blocked)) = (r.graph.component(i), r.at(i)) else {
            return;
        };
        let Some(spec) = self.cat.type_spec(c.ty) else {
            return;
        };
        let failing = r.inst(i).map_or(0, |x| x.local.failing);
        let required: Vec<Id> = spec
            .footprint
            .iter()
            .filter(|(s, _)| failing & (1u64 << s.0) != 0)
            .filter_map(|(s, _)| self.cat.source(*s).map(|x| x.name.clone()))
            .collect();
        let dependents = if spec.recovery.scope == Scope::SelfAndDependents {
            r.graph.descendants(1u64 << i)
        } else {
            0
        };
        let id = ObligationId(self.next_obligation);
        self.next_obligation += 1;
        let o = Box::new(Obligation {
            id,
            component: blocked.clone(),
            reason,
            required,
            required_mask: failing,
            refreshed_mask: 0,
            scope: crate::names::Scope::new(&r.names, i, dependents),
            assignee: spec.recovery.assignee.clone(),
            route: spec.recovery.route_for(reason).clone(),
            expiry: now.saturating_add(spec.recovery.expiry),
            discharge: Discharge::FreshCandidate { after: now },
            state: ObligationState::Created,
            attempts: 0,
            retry_limit: spec.recovery.retry_limit,
            created_at: now,
        });
        self.timers
            .push(Reverse((o.expiry, TimerKey::Obligation(id))));
        self.receipts.push(
            now,
            Record::Obligation {
                id,
                component: blocked,
                state: o.state,
                reason,
            },
        );
        self.events.push_back(Event::ObligationCreated { id });
        self.obligations.insert(id, o);
        self.note_open(id);
        self.forget_ended();
        if let Some(x) = r.inst_mut(i) {
            x.obligation = Some(id);
        }
    }

    /// Lists `id` as open. Ended ones leave the list when a provider update next visits it; so
    /// that it stays bounded without updates too, it is also pruned whenever it has doubled
    /// since it was last pruned (amortized: each entry is looked at a bounded number of times).
    fn note_open(&mut self, id: ObligationId) {
        self.open_obligations.push(id);
        if self.open_obligations.len() >= 2 * self.open_pruned_at.max(MAX_COMPONENTS) {
            let obligations = &self.obligations;
            self.open_obligations
                .retain(|id| obligations.get(id).is_some_and(|o| o.state.is_live()));
            self.open_pruned_at = self.open_obligations.len();
        }
    }

    /// Drops the oldest ended obligations beyond `ended_obligations_kept`, but none whose
    /// `ObligationCreated` event has not been polled yet (the event names it by id). The open
    /// list holds every open obligation (and some ended ones until it is next pruned), so the
    /// ended ones number at least `len - open`: nothing is counted until that passes the limit.
    fn forget_ended(&mut self) {
        let kept = self.cfg.ended_obligations_kept;
        if self.obligations.len() <= self.open_obligations.len().saturating_add(kept) {
            return;
        }
        let announced = self.announced;
        let ended = self
            .obligations
            .values()
            .filter(|o| !o.state.is_live())
            .count();
        let old: Vec<ObligationId> = self
            .obligations
            .values()
            .filter(|o| !o.state.is_live())
            .take(ended.saturating_sub(kept))
            .map(|o| o.id)
            .filter(|id| id.0 <= announced)
            .collect();
        for id in old {
            self.obligations.remove(&id);
        }
    }
}
