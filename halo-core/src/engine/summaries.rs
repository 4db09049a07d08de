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
                        component: o.component.clone(),
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
        self.schedule_summary(now);
    }

    /// Schedules the summary timer unless one is due (policy `Decisions`).
    fn schedule_summary(&mut self, now: Nanos) {
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

    /// A response refused because too many are live: counted for the next summary.
    pub(super) fn note_busy(&mut self, response: &Id, now: Nanos) {
        let b = &mut self.busy;
        if b.refused == 0 {
            b.first_response = response.as_str().to_owned();
            b.first_at = now;
        }
        b.refused += 1;
        response.as_str().clone_into(&mut b.last_response);
        b.last_at = now;
        self.schedule_summary(now);
    }

    pub(super) fn flush_summaries(&mut self, now: Nanos) {
        if self.busy.refused > 0 {
            let b = std::mem::take(&mut self.busy);
            self.receipts.push(
                now,
                Record::RejectedSummary {
                    code: ReasonCode::TOO_MANY_RESPONSES,
                    refused: b.refused,
                    first_response: b.first_response,
                    last_response: b.last_response,
                    first_at_ns: b.first_at.0,
                    last_at_ns: b.last_at.0,
                },
            );
        }
        for (i, p) in self.unrecorded.iter_mut().enumerate() {
            if p.updates == 0 {
                continue;
            }
            let ix = SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
            if let (Some(spec), Some(st)) = (self.cat.source(ix), self.snap.source(ix)) {
                self.receipts.push(
                    now,
                    Record::SourceSummary(Box::new(super::SourceSummary {
                        source: spec.name.clone(),
                        updates: p.updates,
                        first_generated_at_ns: p.first,
                        last_generated_at_ns: p.last,
                        epoch: st.epoch,
                        provenance: st.provenance.clone(),
                    })),
                );
            }
            *p = Pending::default();
        }
    }
}
