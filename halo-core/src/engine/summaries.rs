//! The receipt policy `decisions`: telemetry that changes no decision is counted and summarized
//! instead of receipted one update at a time.

use super::*;

impl Shared {
    /// A provider refreshed `source`: advance obligations that wait for it.
    pub(super) fn note_refresh(
        &mut self,
        source: SourceIx,
        generated_at: Nanos,
        now: Nanos,
    ) -> bool {
        let bit = 1u64 << source.0;
        let mut progressed = false;
        let obligations = &mut self.obligations;
        self.open_obligations
            .retain(|id| obligations.get(id).is_some_and(|o| o.state.is_live()));
        self.open_pruned_at = self.open_obligations.len();
        for id in &self.open_obligations {
            let Some(o) = self.obligations.get_mut(id) else {
                continue;
            };
            if o.required_mask & bit == 0 || generated_at <= o.created_at {
                continue;
            }
            o.refreshed_mask |= bit;
            let next = if o.refreshed_mask & o.required_mask == o.required_mask {
                ObligationState::ReadyForReadmission
            } else {
                ObligationState::ExternalSupportReceived
            };
            if o.state != next {
                o.state = next;
                progressed = true;
                self.events.push_back(Event::ObligationChanged {
                    id: o.id,
                    state: next,
                });
                self.receipts.push(
                    now,
                    Record::Obligation {
                        id: o.id,
                        response: (o.response).clone(),
                        component: (o.component).clone(),
                        state: next,
                        reason: o.reason,
                    },
                );
            }
        }
        progressed
    }

    pub(super) fn note_unrecorded(&mut self, source: SourceIx, generated_at: Nanos, now: Nanos) {
        let Some(p) = self.unrecorded.get_mut(usize::from(source.0)) else {
            return;
        };
        if p.updates == 0 {
            p.first = generated_at.0;
        }
        p.updates += 1;
        p.last = generated_at.0;
        if let (ReceiptPolicy::Decisions { summary_every }, false) =
            (self.cfg.receipts, self.summary_due)
        {
            self.summary_due = true;
            self.timers.push(Reverse((
                now.saturating_add(summary_every),
                TimerKey::Summary,
            )));
        }
    }

    pub(super) fn flush_summaries(&mut self, now: Nanos) {
        for (i, p) in self.unrecorded.iter_mut().enumerate() {
            if p.updates == 0 {
                continue;
            }
            let ix = SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
            if let (Some(spec), Some(st)) = (self.cat.source(ix), self.snap.source(ix)) {
                self.receipts.push(
                    now,
                    Record::SourceSummary {
                        source: spec.name.clone(),
                        updates: p.updates,
                        first_generated_at_ns: p.first,
                        last_generated_at_ns: p.last,
                        epoch: st.epoch,
                        provenance: st.provenance.clone(),
                    },
                );
            }
            *p = Pending::default();
        }
    }
}
