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
//!
//! This file holds the state and the entry points; the method's parts live beside it:
//! [`evaluate`] (LocalOK, the retained set, bindings, denials, readiness and phases),
//! [`obligations`], [`summaries`] (the `decisions` receipt policy) and [`report`].

mod evaluate;
mod obligations;
mod record;
mod report;
mod summaries;

pub(crate) use record::Decisions;
pub(crate) use report::{component_report, report};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use serde::Serialize;

use super::binding::{DispatchToken, Ledger, Projections, Seq, Witness, binding};
use super::catalog::{Catalog, Class, Output, Scope, SourceIx, TypeSpec};
use super::digest::Digest;
use super::envelope::{MAX_COMPONENTS, Rejection, parse_envelope_named};
use super::graph::{Graph, ValidatedResponse, validate};
use super::ids::Id;
use super::names::{ComponentRef, Names};
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
    /// Mechanism variant, for the evaluation's comparisons only: the field exists only in a
    /// build with the private `__evaluation` feature (the evaluation crate's); the product
    /// always runs [`Variant::Full`].
    #[cfg(feature = "__evaluation")]
    pub variant: Variant,
    /// Boot epoch, persisted and bumped by the shell at every start.
    pub boot_epoch: u64,
    /// Most responses live at once.
    pub max_live_responses: usize,
    /// How long a finished response is kept for observations and queries.
    pub done_retention: Nanos,
    /// How many ended obligations are kept for queries besides the open ones; the oldest
    /// ended ones go first (their receipts keep them). Bounds what a long flight holds.
    pub ended_obligations_kept: usize,
    /// Which provider updates get a receipt of their own.
    pub receipts: ReceiptPolicy,
    /// Seeded defects (one, or a pair), for showing the suites catch them. Only in a
    /// `__seeded-defects` build.
    #[cfg(feature = "__seeded-defects")]
    pub defects: Vec<super::defect::Defect>,
}

impl Config {
    /// The mechanism variant this configuration runs.
    #[cfg(feature = "__evaluation")]
    #[inline(always)]
    pub(crate) const fn variant(&self) -> Variant {
        self.variant
    }

    /// The mechanism variant: always the product's in a build without `__evaluation`, so every
    /// comparison branch folds away at compile time.
    #[cfg(not(feature = "__evaluation"))]
    #[inline(always)]
    pub(crate) const fn variant(&self) -> Variant {
        Variant::Full
    }

    /// Whether this build runs with seeded defect `d` (always false without the
    /// `__seeded-defects` feature).
    #[cfg(feature = "__seeded-defects")]
    pub(crate) fn seeded(&self, d: super::defect::Defect) -> bool {
        self.defects.contains(&d)
    }

    /// Whether this build runs with seeded defect `d` (always false without the
    /// `__seeded-defects` feature).
    #[cfg(not(feature = "__seeded-defects"))]
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
    /// [`Gateway::flush_summaries`]), so 50 Hz telemetry does not flood the log. Responses
    /// refused only because too many are live (`TOO_MANY_RESPONSES`, which says nothing of
    /// their content) are counted and summarized the same way, so an agent retrying a full
    /// gateway in a tight loop cannot fill the receipt log.
    Decisions {
        /// Summary period.
        summary_every: Nanos,
    },
}

impl Default for Config {
    fn default() -> Config {
        Config {
            #[cfg(feature = "__evaluation")]
            variant: Variant::Full,
            boot_epoch: 1,
            max_live_responses: 64,
            done_retention: Nanos::from_ms(10_000),
            ended_obligations_kept: 256,
            receipts: ReceiptPolicy::All,
            #[cfg(feature = "__seeded-defects")]
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
    /// Per-component decisions, in envelope order (shared with the admission's receipt
    /// record).
    pub components: std::sync::Arc<[ComponentReport]>,
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
        /// The component and its response (`response` and `component` in JSON).
        #[serde(flatten)]
        component: ComponentRef,
        /// New phase.
        phase: Phase,
        /// Why, when it is a denial or a wait.
        reason: Option<ReasonCode>,
    },
    /// A retained, ready non-action: hand it to its output path.
    Emit {
        /// The component and its response (`response` and `component` in JSON).
        #[serde(flatten)]
        component: ComponentRef,
        /// Output path from the catalog.
        path: Id,
        /// The payload.
        payload: std::sync::Arc<Payload>,
    },
    /// A new obligation: send its refresh request to the assignee. The obligation is
    /// [`Gateway::obligation`]`(id)`, kept at least until this event has been polled; polling
    /// the event moves it from CREATED to DISPATCHED (or READY_FOR_READMISSION when it needs
    /// no refresh), since handing it over is what sends the request.
    ObligationCreated {
        /// The obligation's id.
        id: ObligationId,
    },
    /// A dispatched action lost its support while the interval its dispatch certified still
    /// runs: the shell must stop it at once (deny-hold).
    SupportLost {
        /// The component and its response (`response` and `component` in JSON).
        #[serde(flatten)]
        component: ComponentRef,
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

/// Records pushed onto the receipt chain, in the order they are decided; sealed (canonical
/// text, hash, link) later by [`Gateway::poll_receipt`].
///
/// A busy update queues many at once (an epoch change with 64 live responses: one per phase
/// change and obligation, about 1,800), so the common ones are small: a component is named by
/// a [`ComponentRef`], and the records made once per response or update are boxed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Record {
    Rejected {
        response: String,
        code: ReasonCode,
        ids: Vec<String>,
        /// The party the shell says sent it ([`Gateway::with_sender`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        sender: Option<Id>,
    },
    Admitted(Box<Admitted>),
    SourceUpdate(Box<SourceUpdated>),
    /// A dispatched action lost its support while streaming (deny-hold).
    SupportLost {
        #[serde(flatten)]
        component: ComponentRef,
        binding: Digest,
        code: ReasonCode,
    },
    /// Responses refused only because too many were live (`TOO_MANY_RESPONSES`), since the
    /// last summary (receipt policy `decisions`).
    RejectedSummary {
        code: ReasonCode,
        refused: u64,
        first_response: String,
        last_response: String,
        first_at_ns: u64,
        last_at_ns: u64,
    },
    /// Updates of one source that changed no decision, since the last summary.
    SourceSummary(Box<SourceSummary>),
    UpdateRefused {
        source: String,
        code: ReasonCode,
        #[serde(skip_serializing_if = "Option::is_none")]
        sender: Option<Id>,
    },
    Certificate(Box<CertificateRecord>),
    Phase {
        #[serde(flatten)]
        component: ComponentRef,
        phase: Phase,
        reason: Option<ReasonCode>,
        generation: u32,
    },
    Gate {
        #[serde(flatten)]
        component: ComponentRef,
        seq: Seq,
        binding: Digest,
        outcome: &'static str,
        code: Option<ReasonCode>,
        /// The mission-contract effect committed with the dispatch.
        #[serde(skip_serializing_if = "Option::is_none")]
        effect: Option<String>,
    },
    GateRefused(Box<GateRefused>),
    Obligation {
        id: ObligationId,
        #[serde(flatten)]
        component: ComponentRef,
        state: ObligationState,
        reason: ReasonCode,
    },
    Readmitted {
        response: Id,
        obligation: ObligationId,
        components: record::Decisions,
        #[serde(skip_serializing_if = "Option::is_none")]
        sender: Option<Id>,
    },
    CandidateRejected {
        response: String,
        obligation: u64,
        code: ReasonCode,
        ids: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sender: Option<Id>,
    },
    /// Something the shell decided or did on the operator's or vehicle's behalf (a hold, a
    /// vehicle command and its outcome), recorded in the same chain.
    External {
        what: &'static str,
        detail: serde_json::Value,
    },
    /// A signed checkpoint over the chain before it (the shell signs: `halo_gateway::audit`).
    Checkpoint(Box<super::receipt::Checkpoint>),
}

/// A response admitted, with every component's decision (receipt format 3).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Admitted {
    pub(crate) response: Id,
    pub(crate) agent: Id,
    pub(crate) generation: u64,
    pub(crate) catalog: Id,
    pub(crate) catalog_version: u32,
    pub(crate) components: record::Decisions,
    /// The party the shell says sent it ([`Gateway::with_sender`]); written only when known,
    /// so a record without one has the text it always had.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sender: Option<Id>,
}

/// A provider's update recorded on its own.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SourceUpdated {
    pub(crate) source: Id,
    pub(crate) epoch: u64,
    pub(crate) provenance: Id,
    pub(crate) generated_at_ns: u64,
    /// The party the shell says sent it ([`Gateway::with_sender`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sender: Option<Id>,
}

/// Updates of one source that changed no decision, since the last summary.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SourceSummary {
    pub(crate) source: Id,
    pub(crate) updates: u64,
    pub(crate) first_generated_at_ns: u64,
    pub(crate) last_generated_at_ns: u64,
    pub(crate) epoch: u64,
    pub(crate) provenance: Id,
}

/// A certificate installed or revoked.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CertificateRecord {
    pub(crate) id: Id,
    pub(crate) covers: Digest,
    pub(crate) valid_until_ns: u64,
    pub(crate) revoked: bool,
}

/// A token the gate refused before deciding (stale, spent, or its response gone).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GateRefused {
    pub(crate) response: Id,
    pub(crate) component: Id,
    pub(crate) seq: Seq,
    pub(crate) code: ReasonCode,
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
    /// The response's and its components' ids, shared with the events, records and
    /// obligations that name them (readmission keeps every id at its position).
    pub(crate) names: std::sync::Arc<Names>,
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
    /// Per catalog source (by index): the components whose type's footprint holds it, so a
    /// provider update finds what it affects without walking every component. Kept with the
    /// graph (built at admission, rebuilt when a readmission replaces the graph).
    pub(crate) uses: Vec<u64>,
}

impl Resp {
    pub(crate) fn inst(&self, i: u16) -> Option<&Inst> {
        self.inst.get(usize::from(i))
    }
    pub(crate) fn inst_mut(&mut self, i: u16) -> Option<&mut Inst> {
        self.inst.get_mut(usize::from(i))
    }
    /// Per catalog source, the components of `graph` whose type's footprint holds it.
    pub(crate) fn footprints(cat: &Catalog, graph: &Graph) -> Vec<u64> {
        let mut uses = vec![0u64; cat.sources().len()];
        for (i, c) in graph.components().iter().enumerate() {
            let Some(t) = cat.type_spec(c.ty) else {
                continue;
            };
            let mut f = t.footprint_mask;
            while f != 0 {
                let s = f.trailing_zeros() as usize;
                f &= f - 1;
                if let Some(m) = uses.get_mut(s) {
                    *m |= 1u64 << i;
                }
            }
        }
        uses
    }

    /// The components a change of `source` may re-decide.
    fn using(&self, source: SourceIx) -> u64 {
        self.uses.get(usize::from(source.0)).copied().unwrap_or(0)
    }

    /// Of `mask`, the components whose verdict may differ at `now` from the one held: not
    /// supported, or supported only until an instant already reached (a support timer the
    /// shell has not yet delivered).
    fn unsettled(&self, mask: u64, now: Nanos) -> u64 {
        bits(mask)
            .filter(|&i| {
                self.inst(i)
                    .is_some_and(|x| !x.local.ok || x.local.changes_at <= now)
            })
            .fold(0, |m, i| m | (1u64 << i))
    }

    /// Component `i`, named for an event, a record or an obligation.
    pub(crate) fn at(&self, i: u16) -> Option<ComponentRef> {
        ComponentRef::new(&self.names, i)
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
    /// Boxed, so an epoch change that creates hundreds at once moves pointers, not
    /// obligations, through the tree's nodes.
    pub(crate) obligations: BTreeMap<ObligationId, Box<Obligation>>,
    /// The obligations that may still be open, so a provider update visits those and not every
    /// obligation of the flight; ended ones are dropped from it when next visited.
    pub(crate) open_obligations: Vec<ObligationId>,
    /// The open list's length when it was last pruned.
    pub(crate) open_pruned_at: usize,
    pub(crate) next_obligation: u64,
    /// The highest obligation id whose `ObligationCreated` event was polled: obligations above
    /// it are kept whatever their state, so the shell finds the obligation its event names.
    pub(crate) announced: u64,
    pub(crate) timers: BinaryHeap<Reverse<(Nanos, TimerKey)>>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) ready: VecDeque<(Id, u16)>,
    pub(crate) receipts: ReceiptChain<Record>,
    pub(crate) buf: Vec<u8>,
    /// The stable projection the last bound action's witness read, shared with the next of its
    /// type while the state is unchanged.
    pub(crate) projections: Projections,
    /// True while one admission (or readmission) runs: its phase changes are recorded once, in
    /// the summary receipt and report, not one event per transition.
    pub(crate) summarizing: bool,
    /// Per source: updates waiting for their summary receipt (policy `Decisions`).
    pub(crate) unrecorded: Vec<Pending>,
    /// Whether a summary timer is scheduled.
    pub(crate) summary_due: bool,
    /// Responses refused as too many, waiting for their summary receipt (policy `Decisions`).
    pub(crate) busy: Busy,
    /// Who sends the input being handled, as the shell names it ([`Gateway::with_sender`]).
    pub(crate) sender: Option<Id>,
}

impl Shared {
    /// Makes room in the event and receipt queues for what one input can cause when
    /// `live_components` components are live: a phase change and an obligation each (an epoch
    /// change can withhold them all at once). The queues are drained after every input and
    /// keep their room, so they grow here, as responses become live, one admission at a time,
    /// rather than inside the update that fills them (where growing them copied every entry
    /// queued so far, at the worst moment). A hint, not a limit: a queue grows past it if it
    /// must.
    fn reserve_outputs(&mut self, live_components: usize) {
        let room = live_components.saturating_mul(2).saturating_add(1);
        self.events.reserve(room.saturating_sub(self.events.len()));
        self.receipts.reserve(room);
    }
}

/// Responses refused with `TOO_MANY_RESPONSES` since the last summary.
#[derive(Debug, Default)]
pub(crate) struct Busy {
    pub(crate) refused: u64,
    pub(crate) first_response: String,
    pub(crate) last_response: String,
    pub(crate) first_at: Nanos,
    pub(crate) last_at: Nanos,
}

/// The sans-IO HALO gateway. See the module documentation for the call order.
#[derive(Debug)]
pub struct Gateway {
    pub(crate) sh: Shared,
    pub(crate) responses: BTreeMap<Id, Resp>,
    /// Components of the live responses, for sizing the output queues.
    live_components: usize,
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
                open_obligations: Vec::new(),
                open_pruned_at: 0,
                next_obligation: 1,
                announced: 0,
                timers: BinaryHeap::new(),
                events: VecDeque::new(),
                ready: VecDeque::new(),
                receipts: ReceiptChain::new(),
                buf: Vec::with_capacity(512),
                projections: Projections::default(),
                summarizing: false,
                unrecorded: vec![Pending::default(); catalog_sources],
                summary_due: false,
                busy: Busy::default(),
                sender: None,
            },
            responses: BTreeMap::new(),
            live_components: 0,
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
        // The rejection's receipt names the response when the reader had its id: the parse's
        // own result carries it, also for a refusal at the component limit or of the format
        // (an envelope that does not parse has none).
        let checked = match parse_envelope_named(bytes) {
            Ok(raw) => validate(&self.sh.cat, &raw).map_err(|rej| (rej, raw.response_id)),
            Err(named) => Err(named),
        };
        match checked {
            Ok(v) => self.handle_validated(now, v),
            Err((rej, rid)) => {
                self.sh.receipts.push(
                    now,
                    Record::Rejected {
                        response: rid,
                        code: rej.code(),
                        ids: rej.ids().to_vec(),
                        sender: self.sh.sender.clone(),
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
                    sender: self.sh.sender.clone(),
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
            match self.sh.cfg.receipts {
                ReceiptPolicy::All => self.sh.receipts.push(
                    now,
                    Record::Rejected {
                        response: v.response_id.as_str().to_string(),
                        code: rej.code(),
                        ids: rej.ids().to_vec(),
                        sender: self.sh.sender.clone(),
                    },
                ),
                ReceiptPolicy::Decisions { .. } => self.sh.note_busy(&v.response_id, now),
            }
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
        let uses = Resp::footprints(&self.sh.cat, &v.graph);
        let names = Names::new(&v.response_id, v.graph.components().iter().map(|c| &c.id));
        let mut r = Resp {
            id: v.response_id.clone(),
            names,
            agent: v.agent_id,
            expires_at,
            done_at: None,
            deadline: Nanos::MAX,
            graph: v.graph,
            inst,
            snapshot: self.sh.global_snapshot(),
            uses,
        };
        // Room for what the live responses, this one with them, can queue in one input (before
        // this admission queues its own emissions, so the queues grow at most once here).
        self.live_components += r.inst.len();
        self.sh.reserve_outputs(self.live_components);
        let all = r.all_mask();
        self.sh.summarizing = true;
        self.sh.evaluate(&mut r, all, now);
        self.sh.recompute(&mut r, all, now);
        self.sh.summarizing = false;

        let report = report(&self.sh.cat, &r);
        self.sh.receipts.push(
            now,
            Record::Admitted(Box::new(Admitted {
                response: (r.id).clone(),
                agent: (r.agent).clone(),
                generation: v.generation,
                catalog: self.sh.cat.id().clone(),
                catalog_version: self.sh.cat.version(),
                components: record::Decisions(std::sync::Arc::clone(&report.components)),
                sender: self.sh.sender.clone(),
            })),
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
                        sender: self.sh.sender.clone(),
                    },
                );
                return Err(e);
            }
        };
        // The update's own receipt goes before the decisions it causes; whether it is written
        // depends on what those decisions are, so its place is marked now.
        let mark = self.sh.receipts.mark();
        let mut changed_any = self.sh.note_refresh(source, generated_at, now);
        if self.sh.cfg.variant().reevaluates() {
            // An update that brings only a later time (value, epoch and provenance as held)
            // cannot take support away: a component supported until after `now` stays
            // supported, and only the instant it may lose support by age moves later. Those
            // components are left as they are; their support timer, due at the earlier
            // instant, re-evaluates them then (a check early, never late). The others (not
            // supported, or past their instant with the timer not yet delivered) are
            // evaluated now, as for any update.
            let only_fresher =
                prev.as_ref()
                    .zip(self.sh.snap.source(source))
                    .is_some_and(|(p, st)| {
                        p.epoch == st.epoch && p.provenance == st.provenance && p.value == st.value
                    });
            // GlobalSnapshot (a comparison variant) judges every component on every source.
            let global = self.sh.cfg.variant().global_snapshot();
            for r in self.responses.values_mut() {
                let mut affected = if global {
                    r.all_mask()
                } else {
                    r.using(source)
                };
                if only_fresher {
                    affected = r.unsettled(affected, now);
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
                    Record::SourceUpdate(Box::new(SourceUpdated {
                        source: n,
                        epoch: st.epoch,
                        provenance: st.provenance.clone(),
                        generated_at_ns: st.generated_at.0,
                        sender: self.sh.sender.clone(),
                    })),
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
        let max = self.sh.cat.max_certificate();
        if cert.valid_until.saturating_sub(now) > max {
            return Err(UpdateError::new(
                ReasonCode::CERTIFICATE_TOO_LONG,
                format!(
                    "certificate `{}` covers {} ms from now; the catalog allows at most {} ms (catalog.max_certificate_ms)",
                    cert.id,
                    cert.valid_until.saturating_sub(now).as_ms(),
                    max.as_ms()
                ),
            ));
        }
        let id = cert.id.clone();
        self.sh.receipts.push(
            now,
            Record::Certificate(Box::new(CertificateRecord {
                id: (cert.id).clone(),
                covers: (cert.covers),
                valid_until_ns: cert.valid_until.0,
                revoked: false,
            })),
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
                Record::Certificate(Box::new(CertificateRecord {
                    id: id.clone(),
                    covers: (Digest::default()),
                    valid_until_ns: 0,
                    revoked: true,
                })),
            );
            self.reevaluate_certificate(now, id);
        }
    }

    fn reevaluate_certificate(&mut self, now: Nanos, id: &Id) {
        if !self.sh.cfg.variant().reevaluates() {
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
                    if self.sh.cfg.variant().reevaluates() {
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
                    if gone && let Some(r) = self.responses.remove(&rid) {
                        self.live_components = self.live_components.saturating_sub(r.inst.len());
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
        let (blocked_at, reason) = (o.component.clone(), o.reason);
        self.sh
            .events
            .push_back(Event::ObligationChanged { id: oid, state });
        self.sh.receipts.push(
            now,
            Record::Obligation {
                id: oid,
                component: blocked_at.clone(),
                state,
                reason,
            },
        );
        if let Some(r) = self.responses.get_mut(blocked_at.response()) {
            let i = blocked_at.index();
            // The obligation names its instance: a later response under a reused id is not it.
            let blocked = r
                .inst(i)
                .is_some_and(|x| x.obligation == Some(oid) && x.phase == Phase::Withheld);
            if blocked {
                self.sh.invalidate(r, i, code, now);
            }
            self.sh.check_done(r, now);
        }
    }

    /// The next output event.
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.sh.events.pop_front()?;
        if let Event::ObligationCreated { id } = &ev {
            // Every obligation up to this one has been announced (they are created, and their
            // events queued, in id order), so they may be forgotten once ended.
            self.sh.announced = self.sh.announced.max(id.0);
            // Handing the event to the shell is what sends the refresh request.
            if let Some(o) = self.sh.obligations.get_mut(id)
                && o.state == ObligationState::Created
            {
                o.state = if o.required_mask == 0 {
                    ObligationState::ReadyForReadmission
                } else {
                    ObligationState::Dispatched
                };
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

    /// Receipts recorded and not yet sealed.
    pub fn pending_receipts(&self) -> usize {
        self.sh.receipts.pending()
    }

    /// The next sealed receipt.
    pub fn poll_receipt(&mut self) -> Option<Receipt> {
        self.sh.receipts.seal()
    }

    /// Runs `f` with `sender` named as the sender of what it hands the gateway: the receipts
    /// of the responses, candidates and provider updates `f` submits (admitted, readmitted,
    /// rejected, updated, refused) carry `"sender"`. The shell names its authenticated
    /// principal here; the core takes the name as given and decides nothing by it. Afterwards
    /// the sender before is named again.
    pub fn with_sender<R>(&mut self, sender: Option<Id>, f: impl FnOnce(&mut Gateway) -> R) -> R {
        let before = std::mem::replace(&mut self.sh.sender, sender);
        let out = f(self);
        self.sh.sender = before;
        out
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
            .push(now, Record::Checkpoint(Box::new(sign(&head, count))));
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
        self.sh.obligations.get(&id).map(|o| &**o)
    }

    /// All obligations, live or not.
    pub fn obligations(&self) -> impl Iterator<Item = &Obligation> {
        self.sh.obligations.values().map(|o| &**o)
    }

    /// The validated graph of a response (for queries and independent checks).
    pub fn graph(&self, response: &Id) -> Option<&Graph> {
        self.responses.get(response).map(|r| &r.graph)
    }
}

/// The indices of the set bits of a component mask.
fn bits(mask: u64) -> impl Iterator<Item = u16> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        // At most 63: `m` is not zero.
        let i = m.trailing_zeros() as u16;
        m &= m - 1;
        Some(i)
    })
}
