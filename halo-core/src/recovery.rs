//! Fresh readmission and rolling renewal.
//!
//! A blocked action returns only as a fresh candidate. A candidate is taken only when it
//! answers a live obligation of the same response and agent, every component it carries lies in
//! that obligation's replacement scope and replaces a withheld, invalidated or failed instance,
//! and its agent generation is later than theirs. It then goes through full admission again:
//! validation of the merged graph, LocalOK, closure, a new binding over an unused sequence and a
//! new token, with the admission generation incremented. Prior tokens stay revoked or used, so
//! every prior sequence is rejected at the gate. Components outside the scope are untouched.

use serde::Serialize;

use super::catalog::Temporal;
use super::engine::{ComponentReport, Gateway, Inst, Record, Resp, Shared, component_report};
use super::envelope::{RawCandidate, Rejection, parse_candidate};
use super::graph::{Component, Graph, build_component, check_catalog_ref};
use super::ids::Id;
use super::names::Names;
use super::obligation::{Obligation, ObligationId, ObligationState};
use super::phase::Phase;
use super::reason::ReasonCode;
use super::support::{Timing, local_ok_with};
use super::time::Nanos;
use super::variant::Variant;

/// The decisions for an accepted candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReadmissionReport {
    /// Response.
    pub response: Id,
    /// The discharged obligation.
    pub obligation: ObligationId,
    /// The fresh instances (shared with the readmission's receipt record).
    pub components: std::sync::Arc<[ComponentReport]>,
}

impl Gateway {
    /// Parses and readmits a fresh candidate.
    ///
    /// # Errors
    /// A [`Rejection`]; see the module documentation. A rejected candidate changes nothing,
    /// except that a candidate that was well formed and in scope but failed admission uses up
    /// one retry of its obligation.
    pub fn handle_candidate(
        &mut self,
        now: Nanos,
        bytes: &[u8],
    ) -> Result<ReadmissionReport, Rejection> {
        // The rejection's receipt names the response and obligation when the candidate parsed:
        // the parse's own result carries them.
        let result = match parse_candidate(bytes) {
            Ok(raw) => self
                .readmit(now, &raw)
                .map_err(|rej| (rej, (raw.response_id, raw.obligation))),
            Err(rej) => Err((rej, Default::default())),
        };
        match result {
            Ok(report) => Ok(report),
            Err((rej, (rid, obl))) => {
                self.sh.receipts.push(
                    now,
                    Record::CandidateRejected {
                        response: rid,
                        obligation: obl,
                        code: rej.code(),
                        ids: rej.ids().to_vec(),
                        sender: self.sh.sender.clone(),
                    },
                );
                Err(rej)
            }
        }
    }

    /// Readmission, by phase: the request's preconditions, the fresh components, the merged
    /// graph, a trial admission over the current state, then the commit. Nothing changes before
    /// the commit but a failed trial's retry count.
    fn readmit(
        &mut self,
        now: Nanos,
        raw: &RawCandidate<'_>,
    ) -> Result<ReadmissionReport, Rejection> {
        // Expiries due by now are applied first, so a late candidate meets an expired obligation.
        self.handle_timeout(now);
        let (rid, oid) = self.check_candidate(now, raw)?;
        let (Some(r), Some(o)) = (self.responses.get(&rid), self.sh.obligations.get(&oid)) else {
            return Err(Rejection::new(
                ReasonCode::RESPONSE_UNKNOWN,
                Vec::new(),
                "response vanished",
            ));
        };
        let fresh = fresh_components(&self.sh.cat, r, o, oid, raw)?;
        // The merged graph must validate whole: references, phases, cycles.
        let mut merged: Vec<_> = r.graph.components().to_vec();
        for (i, c) in &fresh {
            if let Some(slot) = merged.get_mut(usize::from(*i)) {
                *slot = c.clone();
            }
        }
        let graph = Graph::build(&self.sh.cat, merged)?;
        let fresh_mask = fresh.iter().fold(0u64, |m, (i, _)| m | (1u64 << i));
        let failures = self.sh.trial_admission(r, &graph, fresh_mask, now);
        if !failures.is_empty() {
            return Err(self.refuse_trial(oid, &fresh, &failures, now));
        }
        self.commit_readmission(rid, oid, graph, &fresh, raw.generation, now)
    }

    /// The candidate's request: its catalog, a live response of the same agent, a live
    /// obligation of that response, and a size its scope can hold.
    fn check_candidate(
        &self,
        now: Nanos,
        raw: &RawCandidate<'_>,
    ) -> Result<(Id, ObligationId), Rejection> {
        check_catalog_ref(&self.sh.cat, &raw.catalog)?;
        let rid = Id::new(&raw.response_id).map_err(|e| {
            Rejection::new(
                ReasonCode::INVALID_ID,
                vec![raw.response_id.clone()],
                e.to_string(),
            )
        })?;
        let oid = ObligationId(raw.obligation);
        let r = self.responses.get(&rid).ok_or_else(|| {
            Rejection::new(
                ReasonCode::RESPONSE_UNKNOWN,
                vec![raw.response_id.clone()],
                "no live response has this id",
            )
        })?;
        if r.agent.as_str() != raw.agent_id {
            return Err(Rejection::new(
                ReasonCode::AGENT_MISMATCH,
                vec![raw.agent_id.clone()],
                format!("the response belongs to agent `{}`", r.agent),
            ));
        }
        let o = self
            .sh
            .obligations
            .get(&oid)
            .filter(|o| *o.component.response() == rid)
            .ok_or_else(|| {
                Rejection::new(
                    ReasonCode::NO_OBLIGATION,
                    vec![oid.to_string()],
                    "no such obligation for this response",
                )
            })?;
        if !o.state.is_live() || now > o.expiry {
            let code = if o.state == ObligationState::Expired || now > o.expiry {
                ReasonCode::OBLIGATION_EXPIRED
            } else {
                ReasonCode::OBLIGATION_NOT_LIVE
            };
            return Err(Rejection::new(
                code,
                vec![oid.to_string()],
                format!("the obligation is {}", o.state.name()),
            ));
        }
        if raw.components.is_empty() {
            return Err(Rejection::new(
                ReasonCode::EMPTY_RESPONSE,
                Vec::new(),
                "a candidate carries at least one component",
            ));
        }
        if raw.components.len() > o.scope.len() {
            return Err(Rejection::new(
                ReasonCode::OUT_OF_SCOPE,
                Vec::new(),
                "more components than the scope holds",
            ));
        }
        Ok((rid, oid))
    }

    /// A trial admission that failed: one retry of the obligation used up (the obligation fails
    /// at its limit), and the rejection naming what was not supported.
    fn refuse_trial(
        &mut self,
        oid: ObligationId,
        fresh: &[(u16, Component)],
        failures: &[String],
        now: Nanos,
    ) -> Rejection {
        let (attempts, limit) = match self.sh.obligations.get_mut(&oid) {
            Some(o) => {
                o.attempts = o.attempts.saturating_add(1);
                (o.attempts, o.retry_limit)
            }
            None => (0, 0),
        };
        if attempts >= limit {
            self.end_obligation(oid, ObligationState::Failed, ReasonCode::RETRY_LIMIT, now);
        }
        Rejection::new(
            ReasonCode::CANDIDATE_NOT_SUPPORTED,
            fresh.iter().map(|(_, c)| c.id.to_string()).collect(),
            format!(
                "fresh admission failed ({}); attempt {attempts} of {limit}",
                failures.join(", ")
            ),
        )
    }

    /// The commit: the merged graph in place, new instances at later generations, the old
    /// authority revoked, the obligation (and any the fresh instances superseded) discharged,
    /// then the ordinary evaluation of the fresh instances and their dependents.
    fn commit_readmission(
        &mut self,
        rid: Id,
        oid: ObligationId,
        graph: Graph,
        fresh: &[(u16, Component)],
        generation: u64,
        now: Nanos,
    ) -> Result<ReadmissionReport, Rejection> {
        let fresh_mask = fresh.iter().fold(0u64, |m, (i, _)| m | (1u64 << i));
        let Some(r) = self.responses.get_mut(&rid) else {
            return Err(Rejection::new(
                ReasonCode::RESPONSE_UNKNOWN,
                Vec::new(),
                "response vanished",
            ));
        };
        r.uses = Resp::footprints(&self.sh.cat, &graph);
        // A candidate replaces components by id, so every id keeps its position and the
        // names events and obligations share stay right; checked, not assumed.
        if !r.names.are(&r.id, graph.components().iter().map(|c| &c.id)) {
            r.names = Names::new(&r.id, graph.components().iter().map(|c| &c.id));
        }
        r.graph = graph;
        r.done_at = None;
        // GlobalSnapshot (a comparison variant): the candidate is a new proposal, taken
        // against the current snapshot.
        r.snapshot = self.sh.global_snapshot();
        let mut superseded = Vec::new();
        for (i, _) in fresh {
            let Some(old) = r.inst_mut(*i) else { continue };
            if let Some(seq) = old.seq {
                self.sh.ledger.revoke(seq);
            }
            if let Some(o) = old.obligation
                && o != oid
            {
                superseded.push(o);
            }
            let mut x = Inst::new(old.class, generation, now);
            x.generation = old.generation.saturating_add(1);
            *old = x;
        }
        for o in superseded {
            if let Some(ob) = self.sh.obligations.get_mut(&o)
                && ob.state.is_live()
            {
                ob.state = ObligationState::Discharged;
                self.sh
                    .events
                    .push_back(super::engine::Event::ObligationChanged {
                        id: o,
                        state: ObligationState::Discharged,
                    });
            }
        }
        if let Some(o) = self.sh.obligations.get_mut(&oid) {
            o.attempts = o.attempts.saturating_add(1);
            o.state = ObligationState::Discharged;
        }
        self.sh
            .events
            .push_back(super::engine::Event::ObligationChanged {
                id: oid,
                state: ObligationState::Discharged,
            });
        if let Some(o) = self.sh.obligations.get(&oid) {
            self.sh.receipts.push(
                now,
                Record::Obligation {
                    id: oid,
                    component: o.component.clone(),
                    state: ObligationState::Discharged,
                    reason: o.reason,
                },
            );
        }
        let changed = self.sh.evaluate(r, fresh_mask, now);
        self.sh.recompute(r, changed | fresh_mask, now);
        self.sh.check_done(r, now);

        let components: std::sync::Arc<[ComponentReport]> = fresh
            .iter()
            .filter_map(|(i, _)| component_report(&self.sh.cat, r, *i))
            .collect();
        self.sh.receipts.push(
            now,
            Record::Readmitted {
                response: (rid).clone(),
                obligation: oid,
                components: crate::engine::Decisions(std::sync::Arc::clone(&components)),
                sender: self.sh.sender.clone(),
            },
        );
        Ok(ReadmissionReport {
            response: rid,
            obligation: oid,
            components,
        })
    }

    /// Renews a dispatched ROLLING action for its next window: every footprint source must have
    /// been refreshed since the previous admission, and the instance goes through admission
    /// again (LocalOK, closure, a new binding, sequence and token, a later generation).
    ///
    /// # Errors
    /// A [`Rejection`] naming the failing check; nothing changes.
    pub fn renew_rolling(
        &mut self,
        now: Nanos,
        response: &Id,
        component: &Id,
    ) -> Result<ComponentReport, Rejection> {
        self.handle_timeout(now);
        let bad =
            |code: ReasonCode, msg: &str| Rejection::new(code, vec![component.to_string()], msg);
        let r = self
            .responses
            .get_mut(response)
            .ok_or_else(|| bad(ReasonCode::RESPONSE_UNKNOWN, "no live response has this id"))?;
        let i = r.graph.index_of(component).ok_or_else(|| {
            bad(
                ReasonCode::MISSING_REFERENCE,
                "not a component of this response",
            )
        })?;
        let (Some(c), Some(x)) = (r.graph.component(i), r.inst(i)) else {
            return Err(bad(ReasonCode::MISSING_REFERENCE, "index out of range"));
        };
        let spec = self
            .sh
            .cat
            .type_spec(c.ty)
            .ok_or_else(|| bad(ReasonCode::UNKNOWN_TYPE, "type index out of range"))?;
        if !matches!(spec.temporal, Temporal::Rolling { .. }) {
            return Err(bad(
                ReasonCode::NOT_REPLACEABLE,
                "only rolling actions are renewed",
            ));
        }
        if !matches!(x.phase, Phase::Dispatched | Phase::ObservedSuccess) {
            return Err(bad(
                ReasonCode::INSTANCE_ENDED,
                "a rolling action is renewed after its window was dispatched",
            ));
        }
        let v = local_ok_with(
            &self.sh.cat,
            spec,
            c,
            &self.sh.snap,
            now,
            Timing::RollingRenewal {
                since: x.admitted_at,
            },
            self.sh.claims(),
        );
        if !v.ok {
            let code = v.code.unwrap_or(ReasonCode::ROLLING_NOT_REFRESHED);
            return Err(bad(code, "the next window is not supported"));
        }
        let parents_in = self.sh.cfg.variant() != Variant::Full
            || r.graph
                .parents(i)
                .iter()
                .all(|&(p, _)| r.inst(p).is_some_and(|y| y.member));
        if !parents_in {
            return Err(bad(
                ReasonCode::PARENT_WITHHELD,
                "a prerequisite is not retained",
            ));
        }
        if let Some(x) = r.inst_mut(i) {
            x.generation = x.generation.saturating_add(1);
            x.local = v;
            x.member = true;
        }
        self.sh.schedule_support(r);
        self.sh.set_phase(r, i, Phase::Retained, None, now);
        self.sh.bind(r, i, now);
        self.sh.readiness(r, 1u64 << i, now);
        component_report(&self.sh.cat, r, i)
            .ok_or_else(|| bad(ReasonCode::MISSING_REFERENCE, "index out of range"))
    }
}

/// The candidate's components, built against the response and checked one by one: in the
/// obligation's scope, not repeated, replacing a withheld, invalidated or failed instance, at a
/// later agent generation.
fn fresh_components(
    cat: &crate::catalog::Catalog,
    r: &Resp,
    o: &Obligation,
    oid: ObligationId,
    raw: &RawCandidate<'_>,
) -> Result<Vec<(u16, Component)>, Rejection> {
    let mut buf = Vec::with_capacity(256);
    let mut fresh: Vec<(u16, Component)> = Vec::with_capacity(raw.components.len());
    for rc in &raw.components {
        let c = build_component(cat, rc, &r.graph, &mut buf)?;
        if !o.in_scope(&c.id) {
            return Err(Rejection::new(
                ReasonCode::OUT_OF_SCOPE,
                vec![c.id.to_string()],
                format!(
                    "{oid} may only replace {:?}",
                    o.scope.iter().map(Id::as_str).collect::<Vec<_>>()
                ),
            ));
        }
        if fresh.iter().any(|(_, f)| f.id == c.id) {
            return Err(Rejection::new(
                ReasonCode::DUPLICATE_ID,
                vec![c.id.to_string()],
                "the candidate repeats an id",
            ));
        }
        let i = r.graph.index_of(&c.id).ok_or_else(|| {
            Rejection::new(
                ReasonCode::OUT_OF_SCOPE,
                vec![c.id.to_string()],
                "not a component of this response",
            )
        })?;
        let old = r.inst(i).ok_or_else(|| {
            Rejection::new(
                ReasonCode::OUT_OF_SCOPE,
                vec![c.id.to_string()],
                "index out of range",
            )
        })?;
        if !matches!(
            old.phase,
            Phase::Withheld | Phase::Invalidated | Phase::Failed
        ) {
            return Err(Rejection::new(
                ReasonCode::NOT_REPLACEABLE,
                vec![c.id.to_string()],
                format!(
                    "`{}` is {}; only withheld, invalidated or failed instances are replaced",
                    c.id, old.phase
                ),
            ));
        }
        if raw.generation <= old.agent_generation {
            return Err(Rejection::new(
                ReasonCode::GENERATION_STALE,
                vec![c.id.to_string()],
                format!(
                    "generation {} is not later than {}",
                    raw.generation, old.agent_generation
                ),
            ));
        }
        fresh.push((i, c));
    }
    Ok(fresh)
}

impl Shared {
    /// A trial admission of the fresh instances (`fresh_mask`) of the merged `graph` over the
    /// current state, in topological order: LocalOK and, where the variant uses dependencies,
    /// every parent in. Nothing changes; the failures come back, one text each.
    fn trial_admission(&self, r: &Resp, graph: &Graph, fresh_mask: u64, now: Nanos) -> Vec<String> {
        let mut trial: Vec<bool> = r.inst.iter().map(|x| x.member).collect();
        let mut failures = Vec::new();
        for &i in graph.topo() {
            if fresh_mask & (1u64 << i) == 0 {
                continue;
            }
            let Some(c) = graph.component(i) else {
                continue;
            };
            let Some(spec) = self.cat.type_spec(c.ty) else {
                continue;
            };
            let v = local_ok_with(
                &self.cat,
                spec,
                c,
                &self.snap,
                now,
                Timing::BeforeEffect,
                self.claims(),
            );
            let parents_in = !self.cfg.variant().uses_dependencies()
                || graph
                    .parents(i)
                    .iter()
                    .all(|&(p, _)| trial.get(usize::from(p)).copied().unwrap_or(false));
            let ok = v.ok && parents_in;
            if let Some(t) = trial.get_mut(usize::from(i)) {
                *t = ok;
            }
            if !ok {
                let code = if v.ok {
                    ReasonCode::PARENT_WITHHELD
                } else {
                    v.code.unwrap_or(ReasonCode::RULE_FAILED)
                };
                failures.push(format!("{}: {}", c.id, code));
            }
        }
        failures
    }
}
