//! The HALO state machine: admission, incremental re-evaluation, processing phases and
//! obligations. The final gate lives in [`super::gate`] and fresh readmission in
//! [`super::recovery`], as further `impl` blocks of [`Gateway`].
//!
//! # Call order
//!
//! The shell feeds inputs and drains outputs, in this order, after every input:
//!
//! 1. one `handle_*` call (a response, a provider update, a certificate, an observation, a
//!    candidate, or `handle_timeout` when `poll_timeout` has passed);
//! 2. `poll_event` until `None` (phase changes, emitted non-actions, obligations);
//! 3. `poll_dispatch` until `None`, passing each token straight to
//!    [`Gateway::final_gate`] with the adapter;
//! 4. `poll_receipt` until `None`, appending each receipt to the audit log;
//! 5. sleep until `poll_timeout`.
//!
//! Every entry point takes `now`; nothing here reads a clock or does I/O.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use serde::Serialize;

use super::binding::{DispatchToken, Ledger, Seq, Witness, binding};
use super::catalog::{Catalog, Class, Output, Scope, SourceIx, TypeSpec};
use super::digest::Digest;
use super::envelope::{Rejection, parse_envelope};
use super::graph::{Graph, ValidatedResponse, validate};
use super::ids::Id;
use super::obligation::{Discharge, Obligation, ObligationId, ObligationState};
use super::payload::Payload;
use super::phase::Phase;
use super::reason::ReasonCode;
use super::receipt::{Receipt, ReceiptChain};
use super::state::{Certificate, Snapshot, SourceUpdate, UpdateError};
use super::support::{Claims, Timing, Verdict, local_ok_with};
use super::time::Nanos;
use super::variant::Variant;

/// Gateway configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Mechanism variant; `Full` in the product.
    pub variant: Variant,
    /// Boot epoch, persisted and bumped by the shell at every start.
    pub boot_epoch: u64,
    /// Most responses live at once.
    pub max_live_responses: usize,
    /// How long a finished response is kept for observations and queries.
    pub done_retention: Nanos,
    /// Which provider updates get a receipt of their own.
    pub receipts: ReceiptPolicy,
    /// Seeded defects (one, or a pair), for showing the suites catch them. Only in a
    /// `seeded-defects` build.
    #[cfg(feature = "seeded-defects")]
    pub defects: Vec<super::defect::Defect>,
}

impl Config {
    /// Whether this build runs with seeded defect `d` (always false without the
    /// `seeded-defects` feature).
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn seeded(&self, d: super::defect::Defect) -> bool {
        self.defects.contains(&d)
    }

    /// Whether this build runs with seeded defect `d` (always false without the
    /// `seeded-defects` feature).
    #[cfg(not(feature = "seeded-defects"))]
    #[inline(always)]
    pub(crate) const fn seeded(&self, _d: super::defect::Defect) -> bool {
        false
    }
}

/// Which provider updates get a receipt of their own. Refusals, decisions, phases, gate
/// outcomes and obligations are always recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptPolicy {
    /// Every accepted update.
    All,
    /// An update is recorded when it changes a decision (a component's local verdict, an
    /// obligation's progress), or is the source's first, or changes its epoch or provenance.
    /// The others are counted and summarized per source every `summary_every` (and at
    /// [`Gateway::flush_summaries`]), so 50 Hz telemetry does not flood the log.
    Decisions {
        /// Summary period.
        summary_every: Nanos,
    },
}

impl Default for Config {
    fn default() -> Config {
        Config {
            variant: Variant::Full,
            boot_epoch: 1,
            max_live_responses: 64,
            done_retention: Nanos::from_ms(10_000),
            receipts: ReceiptPolicy::All,
            #[cfg(feature = "seeded-defects")]
            defects: Vec::new(),
        }
    }
}

/// What the gateway decided for one component.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentReport {
    /// Component id.
    pub id: Id,
    /// Catalog type name.
    #[serde(rename = "type")]
    pub ty: Id,
    /// True for actions.
    pub action: bool,
    /// Current phase.
    pub phase: Phase,
    /// In the retained set `A*_t`.
    pub retained: bool,
    /// `L_{C_t}(e)`.
    pub locally_supported: bool,
    /// The reason for the current phase, when it is a denial or a wait.
    pub reason: Option<ReasonCode>,
    /// `d_e`.
    pub digest: Digest,
    /// Admission generation of this instance.
    pub generation: u32,
    /// `b_e`, for bound actions.
    pub binding: Option<Digest>,
    /// Sequence identity, for bound actions.
    pub seq: Option<Seq>,
    /// Obligation created for this instance, if any.
    pub obligation: Option<ObligationId>,
}

/// The decisions for one response.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdmissionReport {
    /// Response id.
    pub response: Id,
    /// Per-component decisions, in envelope order.
    pub components: Vec<ComponentReport>,
}

impl AdmissionReport {
    /// The report of one component.
    pub fn component(&self, id: &str) -> Option<&ComponentReport> {
        self.components.iter().find(|c| c.id.as_str() == id)
    }
}

/// Something the shell must act on or may publish.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A component changed phase.
    Phase {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// New phase.
        phase: Phase,
        /// Why, when it is a denial or a wait.
        reason: Option<ReasonCode>,
    },
    /// A retained, ready non-action: hand it to its output path.
    Emit {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// Output path from the catalog.
        path: Id,
        /// The payload.
        payload: std::sync::Arc<Payload>,
    },
    /// A new obligation: send its refresh request to the assignee.
    ObligationCreated {
        /// The obligation.
        obligation: Obligation,
    },
    /// A dispatched action lost its support while the interval its dispatch certified still
    /// runs: the shell must stop it at once (deny-hold).
    SupportLost {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// The binding the adapter streams.
        binding: Digest,
        /// What failed.
        code: ReasonCode,
    },
    /// An obligation changed state.
    ObligationChanged {
        /// Id.
        id: ObligationId,
        /// New state.
        state: ObligationState,
    },
}

/// Records pushed onto the receipt chain.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Record {
    Rejected {
        response: String,
        code: ReasonCode,
        ids: Vec<String>,
    },
    Admitted {
        response: Id,
        agent: Id,
        generation: u64,
        catalog: Id,
        catalog_version: u32,
        components: Vec<ComponentReport>,
    },
    SourceUpdate {
        source: Id,
        epoch: u64,
        provenance: Id,
        generated_at_ns: u64,
    },
    /// A dispatched action lost its support while streaming (deny-hold).
    SupportLost {
        response: Id,
        component: Id,
        binding: Digest,
        code: ReasonCode,
    },
    /// Updates of one source that changed no decision, since the last summary.
    SourceSummary {
        source: Id,
        updates: u64,
        first_generated_at_ns: u64,
        last_generated_at_ns: u64,
        epoch: u64,
        provenance: Id,
    },
    UpdateRefused {
        source: String,
        code: ReasonCode,
    },
    Certificate {
        id: Id,
        covers: Digest,
        valid_until_ns: u64,
        revoked: bool,
    },
    Phase {
        response: Id,
        component: Id,
        phase: Phase,
        reason: Option<ReasonCode>,
        generation: u32,
    },
    Gate {
        response: Id,
        component: Id,
        seq: Seq,
        binding: Digest,
        outcome: &'static str,
        code: Option<ReasonCode>,
        /// The mission-contract effect committed with the dispatch.
        #[serde(skip_serializing_if = "Option::is_none")]
        effect: Option<String>,
    },
    GateRefused {
        response: Id,
        component: Id,
        seq: Seq,
        code: ReasonCode,
    },
    Obligation {
        id: ObligationId,
        response: Id,
        component: Id,
        state: ObligationState,
        reason: ReasonCode,
    },
    Readmitted {
        response: Id,
        obligation: ObligationId,
        components: Vec<ComponentReport>,
    },
    CandidateRejected {
        response: String,
        obligation: u64,
        code: ReasonCode,
        ids: Vec<String>,
    },
    /// Something the shell decided or did on the operator's or vehicle's behalf (a hold, a
    /// vehicle command and its outcome), recorded in the same chain.
    External {
        what: &'static str,
        detail: serde_json::Value,
    },
    /// A signed checkpoint over the chain before it (the shell signs; see `crate::audit`).
    Checkpoint(super::receipt::Checkpoint),
}

/// One component instance's processing state.
#[derive(Debug)]
pub(crate) struct Inst {
    pub(crate) class: Class,
    pub(crate) local: Verdict,
    pub(crate) member: bool,
    pub(crate) phase: Phase,
    pub(crate) reason: Option<ReasonCode>,
    pub(crate) generation: u32,
    pub(crate) agent_generation: u64,
    pub(crate) witness: Option<Witness>,
    pub(crate) seq: Option<Seq>,
    pub(crate) binding: Option<Digest>,
    pub(crate) token: Option<DispatchToken>,
    pub(crate) queued: bool,
    pub(crate) obligation: Option<ObligationId>,
    pub(crate) admitted_at: Nanos,
    /// For a dispatched action: the end of the interval its dispatch certified. While it lasts
    /// the action streams, and a loss of support is reported (`SupportLost`).
    pub(crate) streaming_until: Option<Nanos>,
}

impl Inst {
    pub(crate) fn new(class: Class, agent_generation: u64, now: Nanos) -> Inst {
        Inst {
            class,
            local: Verdict {
                ok: false,
                code: None,
                failing: 0,
                changes_at: Nanos::MAX,
            },
            member: false,
            phase: Phase::Proposed,
            reason: None,
            generation: 1,
            agent_generation,
            witness: None,
            seq: None,
            binding: None,
            token: None,
            queued: false,
            obligation: None,
            admitted_at: now,
            streaming_until: None,
        }
    }

    /// Untouchable by ordinary support events: proceeded or ended for good.
    fn settled(&self) -> bool {
        self.phase.has_proceeded() || matches!(self.phase, Phase::Failed | Phase::Invalidated)
    }

    /// An action instance that was withheld lost its binding; only a fresh candidate returns it.
    fn ended_action(&self) -> bool {
        self.class == Class::Action && self.phase == Phase::Withheld
    }

    /// `L` as closure sees it: ended instances are never eligible.
    fn eligible(&self) -> bool {
        !matches!(self.phase, Phase::Failed | Phase::Invalidated)
            && !self.ended_action()
            && self.local.ok
    }
}

/// One live response.
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) id: Id,
    pub(crate) agent: Id,
    pub(crate) expires_at: Nanos,
    pub(crate) done_at: Option<Nanos>,
    /// The support deadline currently scheduled for this response ([`Nanos::MAX`] when none).
    pub(crate) deadline: Nanos,
    pub(crate) graph: Graph,
    pub(crate) inst: Vec<Inst>,
    /// The GlobalSnapshot comparison variant only: every catalog source's (epoch, provenance)
    /// when the response was admitted (or last readmitted). Empty otherwise.
    pub(crate) snapshot: Vec<Option<(u64, Id)>>,
}

impl Resp {
    pub(crate) fn inst(&self, i: u16) -> Option<&Inst> {
        self.inst.get(usize::from(i))
    }
    pub(crate) fn inst_mut(&mut self, i: u16) -> Option<&mut Inst> {
        self.inst.get_mut(usize::from(i))
    }
    fn all_mask(&self) -> u64 {
        if self.inst.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.inst.len()) - 1
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// The earliest instant a component of this response may lose support by time alone.
    Support(Id),
    Obligation(ObligationId),
    ResponseTtl(Id),
    Retire(Id),
    /// Summaries of unrecorded provider updates are due.
    Summary,
}

/// Provider updates of one source not recorded one by one since the last summary.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pending {
    pub(crate) updates: u64,
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// Everything but the responses, so that response state and the rest can be borrowed apart.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cat: Catalog,
    pub(crate) cfg: Config,
    pub(crate) snap: Snapshot,
    pub(crate) ledger: Ledger,
    pub(crate) obligations: BTreeMap<ObligationId, Obligation>,
    pub(crate) next_obligation: u64,
    pub(crate) timers: BinaryHeap<Reverse<(Nanos, TimerKey)>>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) ready: VecDeque<(Id, u16)>,
    pub(crate) receipts: ReceiptChain<Record>,
    pub(crate) buf: Vec<u8>,
    /// True while one admission (or readmission) runs: its phase changes are recorded once, in
    /// the summary receipt and report, not one event per transition.
    pub(crate) summarizing: bool,
    /// Per source: updates waiting for their summary receipt (policy `Decisions`).
    pub(crate) unrecorded: Vec<Pending>,
    /// Whether a summary timer is scheduled.
    pub(crate) summary_due: bool,
}

/// The sans-IO HALO gateway. See the module documentation for the call order.
#[derive(Debug)]
pub struct Gateway {
    pub(crate) sh: Shared,
    pub(crate) responses: BTreeMap<Id, Resp>,
}

impl Gateway {
    /// A gateway over `catalog` with an empty state.
    pub fn new(catalog: Catalog, cfg: Config) -> Gateway {
        let snap = Snapshot::new(&catalog);
        let catalog_sources = catalog.sources().len();
        let ledger = Ledger::new(cfg.boot_epoch);
        Gateway {
            sh: Shared {
                cat: catalog,
                cfg,
                snap,
                ledger,
                obligations: BTreeMap::new(),
                next_obligation: 1,
                timers: BinaryHeap::new(),
                events: VecDeque::new(),
                ready: VecDeque::new(),
                receipts: ReceiptChain::new(),
                buf: Vec::with_capacity(512),
                summarizing: false,
                unrecorded: vec![Pending::default(); catalog_sources],
                summary_due: false,
            },
            responses: BTreeMap::new(),
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.sh.cat
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.sh.cfg
    }

    /// The current support state `C_t`.
    pub fn snapshot(&self) -> &Snapshot {
        &self.sh.snap
    }

    /// The token ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.sh.ledger
    }

    /// Parses, validates and admits a response.
    ///
    /// # Errors
    /// A [`Rejection`] when the envelope or graph is invalid, or the response cannot be taken
    /// (duplicate id, too many live responses). A rejected response changes nothing but the
    /// receipt log.
    pub fn handle_response(
        &mut self,
        now: Nanos,
        bytes: &[u8],
    ) -> Result<AdmissionReport, Rejection> {
        let checked = parse_envelope(bytes).and_then(|raw| validate(&self.sh.cat, &raw));
        match checked {
            Ok(v) => self.handle_validated(now, v),
            Err(rej) => {
                let rid = parse_envelope(bytes)
                    .map(|r| r.response_id)
                    .unwrap_or_default();
                self.sh.receipts.push(
                    now,
                    Record::Rejected {
                        response: (rid).clone(),
                        code: rej.code(),
                        ids: rej.ids().to_vec(),
                    },
                );
                Err(rej)
            }
        }
    }

    /// Admits an already validated response: LocalOK for every component, the greatest
    /// dependency-closed retained set `A*_t`, bindings and tokens for retained actions, then
    /// emission of ready non-actions and queueing of ready actions for the gate.
    ///
    /// # Errors
    /// `DUPLICATE_RESPONSE` or `TOO_MANY_RESPONSES`; nothing changes.
    pub fn handle_validated(
        &mut self,
        now: Nanos,
        v: ValidatedResponse,
    ) -> Result<AdmissionReport, Rejection> {
        if self.responses.contains_key(&v.response_id) {
            let rej = Rejection::new(
                ReasonCode::DUPLICATE_RESPONSE,
                vec![v.response_id.to_string()],
                "a response with this id is live",
            );
            self.sh.receipts.push(
                now,
                Record::Rejected {
                    response: v.response_id.as_str().to_string(),
                    code: rej.code(),
                    ids: rej.ids().to_vec(),
                },
            );
            return Err(rej);
        }
        if self.responses.len() >= self.sh.cfg.max_live_responses {
            let rej = Rejection::new(
                ReasonCode::TOO_MANY_RESPONSES,
                Vec::new(),
                format!(
                    "{} responses are live; the limit is {}",
                    self.responses.len(),
                    self.sh.cfg.max_live_responses
                ),
            );
            self.sh.receipts.push(
                now,
                Record::Rejected {
                    response: v.response_id.as_str().to_string(),
                    code: rej.code(),
                    ids: rej.ids().to_vec(),
                },
            );
            return Err(rej);
        }

        let expires_at = now.saturating_add(self.sh.cat.response_ttl());
        let inst = v
            .graph
            .components()
            .iter()
            .map(|c| {
                let class = self
                    .sh
                    .cat
                    .type_spec(c.ty)
                    .map_or(Class::NonAction, |t| t.class);
                Inst::new(class, v.generation, now)
            })
            .collect();
        let mut r = Resp {
            id: v.response_id.clone(),
            agent: v.agent_id,
            expires_at,
            done_at: None,
            deadline: Nanos::MAX,
            graph: v.graph,
            inst,
            snapshot: self.sh.global_snapshot(),
        };
        let all = r.all_mask();
        self.sh.summarizing = true;
        self.sh.evaluate(&mut r, all, now);
        self.sh.recompute(&mut r, all, now);
        self.sh.summarizing = false;

        let report = report(&self.sh.cat, &r);
        self.sh.receipts.push(
            now,
            Record::Admitted {
                response: (r.id).clone(),
                agent: (r.agent).clone(),
                generation: v.generation,
                catalog: self.sh.cat.id().clone(),
                catalog_version: self.sh.cat.version(),
                components: (report.components).clone(),
            },
        );
        self.sh
            .timers
            .push(Reverse((expires_at, TimerKey::ResponseTtl(r.id.clone()))));
        self.sh.check_done(&mut r, now);
        self.responses.insert(r.id.clone(), r);
        Ok(report)
    }

    /// Applies a provider's update and re-evaluates only the components whose footprint
    /// contains the source, and their dependents.
    ///
    /// # Errors
    /// [`UpdateError`] when the update is refused; the state is unchanged.
    pub fn handle_source_update(&mut self, now: Nanos, u: SourceUpdate) -> Result<(), UpdateError> {
        let source = u.source;
        let name = self.sh.cat.source(source).map(|s| s.name.clone());
        let generated_at = u.state.generated_at;
        let prev = match self.sh.snap.apply(&self.sh.cat, now, u) {
            Ok(p) => p,
            Err(e) => {
                let n = name.as_ref().map_or("?", Id::as_str);
                self.sh.receipts.push(
                    now,
                    Record::UpdateRefused {
                        source: n.to_string(),
                        code: e.code(),
                    },
                );
                return Err(e);
            }
        };
        // The update's own receipt goes before the decisions it causes; whether it is written
        // depends on what those decisions are, so its place is marked now.
        let mark = self.sh.receipts.mark();
        let mut changed_any = self.sh.note_refresh(source, generated_at, now);
        if self.sh.cfg.variant.reevaluates() {
            let bit = 1u64 << source.0;
            // GlobalSnapshot (a comparison variant) judges every component on every source.
            let global = self.sh.cfg.variant.global_snapshot();
            for r in self.responses.values_mut() {
                let mut affected = 0u64;
                for (i, c) in r.graph.components().iter().enumerate() {
                    let uses = global
                        || self
                            .sh
                            .cat
                            .type_spec(c.ty)
                            .is_some_and(|t| t.footprint_mask & bit != 0);
                    if uses {
                        affected |= 1u64 << i;
                    }
                }
                if affected != 0 {
                    let changed = self.sh.evaluate(r, affected, now);
                    changed_any |= changed != 0;
                    self.sh.recompute(r, changed, now);
                    self.sh.check_done(r, now);
                }
            }
        }
        if let (Some(n), Some(st)) = (name, self.sh.snap.source(source)) {
            let identity_changed = prev
                .as_ref()
                .is_none_or(|p| p.epoch != st.epoch || p.provenance != st.provenance);
            let record = match self.sh.cfg.receipts {
                ReceiptPolicy::All => true,
                ReceiptPolicy::Decisions { .. } => changed_any || identity_changed,
            };
            if record {
                self.sh.receipts.insert_at(
                    mark,
                    now,
                    Record::SourceUpdate {
                        source: n,
                        epoch: st.epoch,
                        provenance: st.provenance.clone(),
                        generated_at_ns: st.generated_at.0,
                    },
                );
            } else {
                self.sh.note_unrecorded(source, generated_at, now);
            }
        }
        Ok(())
    }

    /// Writes the summary receipts of provider updates not recorded one by one (policy
    /// `Decisions`), e.g. before a shutdown.
    pub fn flush_summaries(&mut self, now: Nanos) {
        self.sh.flush_summaries(now);
    }

    /// Installs a certificate and re-evaluates the components that reference it.
    ///
    /// # Errors
    /// [`UpdateError`] when the certificate table is full.
    pub fn handle_certificate(&mut self, now: Nanos, cert: Certificate) -> Result<(), UpdateError> {
        let id = cert.id.clone();
        self.sh.receipts.push(
            now,
            Record::Certificate {
                id: (cert.id).clone(),
                covers: (cert.covers),
                valid_until_ns: cert.valid_until.0,
                revoked: false,
            },
        );
        // A full table first sheds certificates whose interval has ended (they can support
        // nothing); only a table full of live certificates refuses a new one.
        if self.sh.snap.certificate_count() >= super::state::MAX_CERTIFICATES {
            self.sh.snap.prune_certificates(now);
        }
        self.sh.snap.put_certificate(cert)?;
        self.reevaluate_certificate(now, &id);
        Ok(())
    }

    /// Revokes a certificate and re-evaluates the components that reference it.
    pub fn handle_certificate_revoked(&mut self, now: Nanos, id: &Id) {
        if self.sh.snap.revoke_certificate(id) {
            self.sh.receipts.push(
                now,
                Record::Certificate {
                    id: id.clone(),
                    covers: (Digest::default()),
                    valid_until_ns: 0,
                    revoked: true,
                },
            );
            self.reevaluate_certificate(now, id);
        }
    }

    fn reevaluate_certificate(&mut self, now: Nanos, id: &Id) {
        if !self.sh.cfg.variant.reevaluates() {
            return;
        }
        for r in self.responses.values_mut() {
            let mut affected = 0u64;
            for (i, c) in r.graph.components().iter().enumerate() {
                if c.certificate.as_ref() == Some(id) {
                    affected |= 1u64 << i;
                }
            }
            if affected != 0 {
                let changed = self.sh.evaluate(r, affected, now);
                self.sh.recompute(r, changed, now);
                self.sh.check_done(r, now);
            }
        }
    }

    /// The vehicle no longer streams this dispatched action's target: a later target, a hold
    /// or a land replaced it. From now a loss of its support is no longer a deny-hold, and a
    /// done response that streams nothing else stops watching its sources and retires on time.
    /// Unknown ids are ignored (the response may have retired already).
    pub fn stream_ended(&mut self, response: &Id, component: &Id) {
        let Some(r) = self.responses.get_mut(response) else {
            return;
        };
        let Some(i) = r.graph.index_of(component) else {
            return;
        };
        if let Some(x) = r.inst_mut(i) {
            x.streaming_until = None;
        }
    }

    /// Records the downstream observation of a dispatched action: success advances it to
    /// OBSERVED_SUCCESS; failure marks it FAILED and invalidates its unemitted or undispatched
    /// descendants.
    ///
    /// # Errors
    /// `RESPONSE_UNKNOWN`, or `INSTANCE_ENDED` when the component is not dispatched.
    pub fn handle_observation(
        &mut self,
        now: Nanos,
        response: &Id,
        component: &Id,
        success: bool,
    ) -> Result<(), ReasonCode> {
        let r = self
            .responses
            .get_mut(response)
            .ok_or(ReasonCode::RESPONSE_UNKNOWN)?;
        let i = r
            .graph
            .index_of(component)
            .ok_or(ReasonCode::RESPONSE_UNKNOWN)?;
        if r.inst(i).map(|x| x.phase) != Some(Phase::Dispatched) {
            return Err(ReasonCode::INSTANCE_ENDED);
        }
        if success {
            self.sh.set_phase(r, i, Phase::ObservedSuccess, None, now);
            self.sh
                .readiness(r, r.graph.descendants(1u64 << i) | (1u64 << i), now);
        } else {
            if let Some(x) = r.inst_mut(i) {
                x.member = false;
            }
            self.sh.set_phase(
                r,
                i,
                Phase::Failed,
                Some(ReasonCode::OBSERVATION_FAILED),
                now,
            );
            self.sh.cascade_terminal(r, i, now);
            // Dependents that already proceeded keep their phase but leave A*_t with it.
            self.sh.recompute(r, 1u64 << i, now);
        }
        self.sh.check_done(r, now);
        Ok(())
    }

    /// Processes every timer due at `now`: freshness lapses, interval coverage ends,
    /// obligation expiries, response lifetimes.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(Reverse((at, _))) = self.sh.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, key))) = self.sh.timers.pop() else {
                break;
            };
            match key {
                TimerKey::Support(rid) => {
                    let Some(r) = self.responses.get_mut(&rid) else {
                        continue;
                    };
                    if r.deadline != at {
                        continue;
                    }
                    r.deadline = Nanos::MAX;
                    let mut due = 0u64;
                    for (i, x) in r.inst.iter().enumerate() {
                        if x.local.changes_at <= now
                            && !matches!(x.phase, Phase::Failed | Phase::Invalidated)
                        {
                            due |= 1u64 << i;
                        }
                    }
                    if self.sh.cfg.variant.reevaluates() {
                        let changed = self.sh.evaluate(r, due, now);
                        self.sh.recompute(r, changed, now);
                        self.sh.check_done(r, now);
                    }
                    self.sh.schedule_support(r);
                }
                TimerKey::Obligation(oid) => {
                    let due = self
                        .sh
                        .obligations
                        .get(&oid)
                        .is_some_and(|o| o.expiry == at && o.state.is_live());
                    if due {
                        self.end_obligation(
                            oid,
                            ObligationState::Expired,
                            ReasonCode::OBLIGATION_EXPIRED,
                            now,
                        );
                    }
                }
                TimerKey::ResponseTtl(rid) => {
                    let Some(r) = self.responses.get_mut(&rid) else {
                        continue;
                    };
                    if r.expires_at != at {
                        continue;
                    }
                    for i in 0..r.graph.len() {
                        let i = u16::try_from(i).unwrap_or(u16::MAX);
                        let open = r
                            .inst(i)
                            .is_some_and(|x| !x.phase.has_proceeded() && !x.phase.is_final());
                        if open {
                            self.sh.invalidate(r, i, ReasonCode::RESPONSE_EXPIRED, now);
                        }
                    }
                    self.sh.check_done(r, now);
                }
                TimerKey::Summary => {
                    self.sh.summary_due = false;
                    self.sh.flush_summaries(now);
                }
                TimerKey::Retire(rid) => {
                    // A response whose action still streams stays, so its support is watched.
                    let streaming = self.responses.get(&rid).and_then(|r| {
                        r.inst
                            .iter()
                            .filter_map(|x| x.streaming_until)
                            .filter(|u| *u > now)
                            .max()
                    });
                    if let Some(u) = streaming {
                        self.sh.timers.push(Reverse((u, TimerKey::Retire(rid))));
                        continue;
                    }
                    let gone = self.responses.get(&rid).is_some_and(|r| {
                        r.done_at
                            .is_some_and(|d| d.saturating_add(self.sh.cfg.done_retention) <= now)
                    });
                    if gone {
                        if let Some(r) = self.responses.remove(&rid) {
                            for x in &r.inst {
                                if let Some(seq) = x.seq {
                                    self.sh.ledger.retire(seq);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Ends an obligation (expiry, retry limit). Its blocked instance becomes INVALIDATED and
    /// the instance's unemitted or undispatched descendants with it.
    pub(crate) fn end_obligation(
        &mut self,
        oid: ObligationId,
        state: ObligationState,
        code: ReasonCode,
        now: Nanos,
    ) {
        let Some(o) = self.sh.obligations.get_mut(&oid) else {
            return;
        };
        if !o.state.is_live() {
            return;
        }
        o.state = state;
        let (rid, cid, reason) = (o.response.clone(), o.component.clone(), o.reason);
        self.sh
            .events
            .push_back(Event::ObligationChanged { id: oid, state });
        self.sh.receipts.push(
            now,
            Record::Obligation {
                id: oid,
                response: (rid).clone(),
                component: (cid).clone(),
                state,
                reason,
            },
        );
        if let Some(r) = self.responses.get_mut(&rid) {
            if let Some(i) = r.graph.index_of(&cid) {
                let blocked = r
                    .inst(i)
                    .is_some_and(|x| x.obligation == Some(oid) && x.phase == Phase::Withheld);
                if blocked {
                    self.sh.invalidate(r, i, code, now);
                }
            }
            self.sh.check_done(r, now);
        }
    }

    /// The next output event.
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.sh.events.pop_front()?;
        if let Event::ObligationCreated { obligation } = &ev {
            // Handing the event to the shell is what sends the refresh request.
            if let Some(o) = self.sh.obligations.get_mut(&obligation.id) {
                if o.state == ObligationState::Created {
                    o.state = if o.required_mask == 0 {
                        ObligationState::ReadyForReadmission
                    } else {
                        ObligationState::Dispatched
                    };
                }
            }
        }
        Some(ev)
    }

    /// The token of the next action that is retained with its prerequisites ready. Pass it
    /// straight to [`Gateway::final_gate`].
    pub fn poll_dispatch(&mut self) -> Option<DispatchToken> {
        while let Some((rid, i)) = self.sh.ready.pop_front() {
            if let Some(tok) = self
                .responses
                .get_mut(&rid)
                .and_then(|r| r.inst_mut(i))
                .and_then(|x| x.token.take())
            {
                return Some(tok);
            }
        }
        None
    }

    /// The next sealed receipt.
    pub fn poll_receipt(&mut self) -> Option<Receipt> {
        self.sh.receipts.seal()
    }

    /// Records something the shell decided or did (an operator hold, a vehicle command and its
    /// outcome) in the same hash-linked chain as the core's own decisions. Changes nothing else.
    pub fn record_external(&mut self, now: Nanos, what: &'static str, detail: serde_json::Value) {
        self.sh
            .receipts
            .push(now, Record::External { what, detail });
    }

    /// Seals every pending receipt and then a signed checkpoint over them, returning them in
    /// order (the checkpoint last). `sign(head, count)` is given the hash of the last receipt
    /// before the checkpoint and the number of receipts before it (its index), from the chain
    /// itself, so the signed head is the chain's by construction.
    pub fn seal_with_checkpoint(
        &mut self,
        now: Nanos,
        wall: impl Fn(Nanos) -> Option<u64>,
        sign: impl FnOnce(&super::Digest, u64) -> super::receipt::Checkpoint,
    ) -> Vec<Receipt> {
        let mut out: Vec<Receipt> =
            std::iter::from_fn(|| self.sh.receipts.seal_with_wall(&wall)).collect();
        let (head, count) = self.sh.receipts.head();
        self.sh
            .receipts
            .push(now, Record::Checkpoint(sign(&head, count)));
        out.extend(self.sh.receipts.seal_with_wall(&wall));
        out
    }

    /// The next sealed receipt, stamped with the wall-clock time the shell maps its decision
    /// instant to.
    pub fn poll_receipt_with_wall(
        &mut self,
        wall: impl Fn(Nanos) -> Option<u64>,
    ) -> Option<Receipt> {
        self.sh.receipts.seal_with_wall(wall)
    }

    /// When [`Gateway::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.sh.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// The current decisions for a response.
    pub fn response_report(&self, response: &Id) -> Option<AdmissionReport> {
        self.responses
            .get(response)
            .map(|r| report(&self.sh.cat, r))
    }

    /// The current decision for one component.
    pub fn component_report(&self, response: &Id, component: &Id) -> Option<ComponentReport> {
        let r = self.responses.get(response)?;
        let i = r.graph.index_of(component)?;
        component_report(&self.sh.cat, r, i)
    }

    /// Ids of the live responses.
    pub fn response_ids(&self) -> impl Iterator<Item = &Id> {
        self.responses.keys()
    }

    /// An obligation by id.
    pub fn obligation(&self, id: ObligationId) -> Option<&Obligation> {
        self.sh.obligations.get(&id)
    }

    /// All obligations, live or not.
    pub fn obligations(&self) -> impl Iterator<Item = &Obligation> {
        self.sh.obligations.values()
    }

    /// The validated graph of a response (for queries and independent checks).
    pub fn graph(&self, response: &Id) -> Option<&Graph> {
        self.responses.get(response).map(|r| &r.graph)
    }
}

pub(crate) fn component_report(cat: &Catalog, r: &Resp, i: u16) -> Option<ComponentReport> {
    let c = r.graph.component(i)?;
    let x = r.inst(i)?;
    Some(ComponentReport {
        id: c.id.clone(),
        ty: cat
            .type_spec(c.ty)
            .map(|t| t.name.clone())
            .unwrap_or_else(|| c.id.clone()),
        action: x.class == Class::Action,
        phase: x.phase,
        retained: x.member,
        locally_supported: x.local.ok,
        reason: x.reason,
        digest: c.digest,
        generation: x.generation,
        binding: x.binding,
        seq: x.seq,
        obligation: x.obligation,
    })
}

pub(crate) fn report(cat: &Catalog, r: &Resp) -> AdmissionReport {
    AdmissionReport {
        response: r.id.clone(),
        components: (0..r.graph.len())
            .filter_map(|i| component_report(cat, r, u16::try_from(i).ok()?))
            .collect(),
    }
}

fn bits(mask: u64) -> impl Iterator<Item = u16> {
    (0..64u16).filter(move |i| mask & (1u64 << i) != 0)
}

impl Shared {
    fn spec(&self, r: &Resp, i: u16) -> Option<&TypeSpec> {
        r.graph.component(i).and_then(|c| self.cat.type_spec(c.ty))
    }

    /// Whether claims bind in `LocalOK` (all variants but Local-Unbound).
    pub(crate) fn claims(&self) -> Claims {
        if self.cfg.variant.binds_claims() {
            Claims::Bound
        } else {
            Claims::Unbound
        }
    }

    /// The GlobalSnapshot variant's proposal-wide snapshot of every catalog source; empty for
    /// every other variant.
    pub(crate) fn global_snapshot(&self) -> Vec<Option<(u64, Id)>> {
        if !self.cfg.variant.global_snapshot() {
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
            if timing != Timing::Proceeded {
                if let Some((code, s)) = snapshot {
                    v.fail(code, Some(s));
                    v.changes_at = Nanos::MAX;
                }
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
            if let (true, Some(b), Some(c)) = (lost, binding, r.graph.component(i)) {
                let cid = c.id.clone();
                let code = v.code.unwrap_or(ReasonCode::RULE_FAILED);
                self.events.push_back(Event::SupportLost {
                    response: r.id.clone(),
                    component: cid.clone(),
                    binding: b,
                    code,
                });
                self.receipts.push(
                    now,
                    Record::SupportLost {
                        response: r.id.clone(),
                        component: cid,
                        binding: b,
                        code,
                    },
                );
            }
        }
        self.schedule_support(r);
        changed
    }

    /// Keeps one timer per response at the earliest instant any of its components may lose
    /// support by time alone.
    pub(crate) fn schedule_support(&mut self, r: &mut Resp) {
        if !self.cfg.variant.reevaluates() {
            // Admission-time decisions only: time never re-decides anything.
            return;
        }
        let next = r
            .inst
            .iter()
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
        let variant = self.cfg.variant;
        let whole = variant.whole_response();
        let deps = variant.uses_dependencies();
        let forget = self.cfg.seeded(super::defect::Defect::ForgetDependents);
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
    fn settle(&mut self, r: &mut Resp, i: u16, member: bool, now: Nanos) {
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
        } else if self.cfg.variant.whole_response() {
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
        let w = Witness::capture(&self.cat, spec, c, &self.snap);
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
        let recoverable = self.cfg.variant.recovers()
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
        if let Some(oid) = obl {
            if let Some(o) = self.obligations.get_mut(&oid) {
                if o.state.is_live() {
                    o.state = ObligationState::Failed;
                    self.events.push_back(Event::ObligationChanged {
                        id: oid,
                        state: ObligationState::Failed,
                    });
                }
            }
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
                if let Some(oid) = obl {
                    if let Some(o) = self.obligations.get_mut(&oid) {
                        if o.state.is_live() {
                            o.state = ObligationState::Failed;
                            self.events.push_back(Event::ObligationChanged {
                                id: oid,
                                state: ObligationState::Failed,
                            });
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn create_obligation(
        &mut self,
        r: &mut Resp,
        i: u16,
        reason: ReasonCode,
        now: Nanos,
    ) {
        let Some(c) = r.graph.component(i) else {
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
        let mut scope = vec![c.id.clone()];
        if spec.recovery.scope == Scope::SelfAndDependents {
            let d = r.graph.descendants(1u64 << i);
            for j in bits(d) {
                if let Some(dc) = r.graph.component(j) {
                    scope.push(dc.id.clone());
                }
            }
        }
        let id = ObligationId(self.next_obligation);
        self.next_obligation += 1;
        let o = Obligation {
            id,
            response: r.id.clone(),
            component: c.id.clone(),
            reason,
            required,
            required_mask: failing,
            refreshed_mask: 0,
            scope,
            assignee: spec.recovery.assignee.clone(),
            route: spec.recovery.route_for(reason).clone(),
            expiry: now.saturating_add(spec.recovery.expiry),
            discharge: Discharge::FreshCandidate { after: now },
            state: ObligationState::Created,
            attempts: 0,
            retry_limit: spec.recovery.retry_limit,
            created_at: now,
        };
        self.timers
            .push(Reverse((o.expiry, TimerKey::Obligation(id))));
        self.receipts.push(
            now,
            Record::Obligation {
                id,
                response: (o.response).clone(),
                component: (o.component).clone(),
                state: o.state,
                reason,
            },
        );
        self.events.push_back(Event::ObligationCreated {
            obligation: o.clone(),
        });
        self.obligations.insert(id, o);
        if let Some(x) = r.inst_mut(i) {
            x.obligation = Some(id);
        }
    }

    /// A provider refreshed `source`: advance obligations that wait for it.
    fn note_refresh(&mut self, source: SourceIx, generated_at: Nanos, now: Nanos) -> bool {
        let bit = 1u64 << source.0;
        let mut progressed = false;
        for o in self.obligations.values_mut() {
            if !o.state.is_live() || o.required_mask & bit == 0 || generated_at <= o.created_at {
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

    fn note_unrecorded(&mut self, source: SourceIx, generated_at: Nanos, now: Nanos) {
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

    fn flush_summaries(&mut self, now: Nanos) {
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

    /// DepsReady: every declared parent is at or beyond its required phase.
    pub(crate) fn deps_ready(&self, r: &Resp, i: u16) -> bool {
        if !self.cfg.variant.uses_dependencies() {
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
                    let (Some(c), Some(spec)) = (r.graph.component(i), self.spec(r, i)) else {
                        continue;
                    };
                    let path = match &spec.output {
                        Output::Path(p) | Output::Adapter(p) => p.clone(),
                    };
                    self.events.push_back(Event::Emit {
                        response: r.id.clone(),
                        component: c.id.clone(),
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
        let Some(c) = r.graph.component(i) else {
            return;
        };
        self.events.push_back(Event::Phase {
            response: r.id.clone(),
            component: c.id.clone(),
            phase,
            reason,
        });
        self.receipts.push(
            now,
            Record::Phase {
                response: (r.id).clone(),
                component: (c.id).clone(),
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
