//! The final dispatch gate.
//!
//! One synchronous critical section, the sole entry to the adapter:
//!
//! ```text
//! DispatchOK_t(e) = e ∈ A*_t ∧ DepsReady_t(e) ∧ WitnessOK_t(W_e) ∧ FreshAuth_t(e, b_e)
//! ```
//!
//! evaluated at the decision instant `now`. If it holds, the token is consumed and the adapter's
//! non-blocking enqueue is called exactly once; a failed enqueue still consumes the token. If
//! it does not hold, the instance is withheld with an obligation when the denial is recoverable,
//! or invalidated when it is terminal. A token that is itself stale (used, revoked, unknown,
//! minted before a restart, for an older generation) is refused without touching any instance.
//!
//! There is no `.await` and no blocking call in here: the adapter contract is `try_enqueue`.

use serde::Serialize;

use super::binding::{DispatchToken, Seq};
use super::catalog::Temporal;
use super::defect::Defect;
use super::digest::Digest;
use super::engine::{GateRefused, Gateway, Record, Resp, Shared};
use super::ids::Id;
use super::names::ComponentRef;
use super::obligation::ObligationId;
use super::payload::ActionCommand;
use super::phase::Phase;
use super::reason::ReasonCode;
use super::support::{Timing, local_ok_with};
use super::time::Nanos;

/// What the gate hands to the adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct EnqueueRequest<'a> {
    /// The decision instant.
    pub now: Nanos,
    /// Response id.
    pub response: &'a Id,
    /// Component id.
    pub component: &'a Id,
    /// The exact command that was admitted.
    pub command: ActionCommand,
    /// `b_e`, to log beside the setpoint.
    pub binding: &'a Digest,
    /// Sequence identity.
    pub seq: Seq,
    /// The end of the interval this dispatch certifies; the adapter must not act on the
    /// command past it.
    pub valid_until: Nanos,
}

/// Why an adapter refused an enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterError {
    /// The link to the vehicle is down.
    LinkDown,
    /// The bounded queue is full.
    QueueFull,
    /// The vehicle is not in a state that can take the command (not armed, not in offboard).
    NotReady,
    /// The adapter does not handle this command.
    Unsupported,
    /// The external system refused the command as given (a merge that conflicts).
    Refused,
}

impl std::fmt::Display for AdapterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AdapterError::LinkDown => "link down",
            AdapterError::QueueFull => "queue full",
            AdapterError::NotReady => "vehicle not ready",
            AdapterError::Unsupported => "unsupported command",
            AdapterError::Refused => "refused by the external system",
        })
    }
}

impl std::error::Error for AdapterError {}

/// The governed adapter `G`. Implementations must return at once: a bounded channel's
/// `try_send`, never a blocking write or an `.await`.
pub trait Adapter {
    /// Enqueues one exact command.
    ///
    /// # Errors
    /// [`AdapterError`] when the command cannot be taken now.
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError>;
}

/// The mission contract's conjunct at the gate: the exact action's normalized effect must be
/// authorized (reserved) on the contract's current path before the token is spent, and is
/// committed right after the adapter took the command, in the same synchronous call.
/// Implementations must not block.
pub trait EffectGate {
    /// True when a contract is registered; without one the conjunct holds vacuously.
    fn active(&self) -> bool;
    /// Reserves `effect`; the refusal's reason code otherwise.
    ///
    /// # Errors
    /// The contract's reason (`EFFECT_NOT_ADMITTED`, `ROOT_SUSPENDED`, ...).
    fn authorize(&mut self, effect: &str) -> Result<u64, ReasonCode>;
    /// Commits a reservation under an idempotency key.
    ///
    /// # Errors
    /// The contract's reason; the command already went to the adapter.
    fn commit(&mut self, reservation: u64, effect: &str, key: &str) -> Result<(), ReasonCode>;
    /// An effect outside the gate (the operator's takeoff through the gateway): authorized and
    /// committed at once under `key`. Holds vacuously without a contract.
    ///
    /// # Errors
    /// The contract's reason and its message for people; nothing is committed.
    fn commit_once(&mut self, effect: &str, key: &str) -> Result<(), (ReasonCode, String)>;
}

/// No mission contract: the conjunct holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoContract;

impl EffectGate for NoContract {
    fn active(&self) -> bool {
        false
    }
    fn authorize(&mut self, _effect: &str) -> Result<u64, ReasonCode> {
        Ok(0)
    }
    fn commit(&mut self, _reservation: u64, _effect: &str, _key: &str) -> Result<(), ReasonCode> {
        Ok(())
    }
    fn commit_once(&mut self, _effect: &str, _key: &str) -> Result<(), (ReasonCode, String)> {
        Ok(())
    }
}

/// The result of one gate call.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum GateOutcome {
    /// All four conjuncts held; the token was consumed and the adapter took the command.
    Dispatched {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// Sequence.
        seq: Seq,
        /// `b_e`.
        binding: Digest,
        /// End of the certified interval.
        valid_until: Nanos,
    },
    /// A conjunct failed for the instance; it was withheld or invalidated.
    Denied {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// Why.
        code: ReasonCode,
        /// Obligation created when the denial is recoverable.
        obligation: Option<ObligationId>,
    },
    /// The presented token is not fresh; no instance changed.
    Refused {
        /// Why.
        code: ReasonCode,
    },
    /// The gate passed and consumed the token, but the adapter refused the enqueue; the
    /// instance FAILED and needs fresh admission.
    EnqueueFailed {
        /// Response.
        response: Id,
        /// Component.
        component: Id,
        /// The adapter's reason.
        error: AdapterError,
        /// Obligation created when `ADAPTER_REJECTED` is recoverable.
        obligation: Option<ObligationId>,
    },
}

impl GateOutcome {
    /// True when the adapter took the command.
    pub fn is_dispatched(&self) -> bool {
        matches!(self, GateOutcome::Dispatched { .. })
    }

    /// The denial or refusal code, if any.
    pub fn code(&self) -> Option<ReasonCode> {
        match self {
            GateOutcome::Dispatched { .. } => None,
            GateOutcome::Denied { code, .. } | GateOutcome::Refused { code } => Some(*code),
            GateOutcome::EnqueueFailed { .. } => Some(ReasonCode::ADAPTER_REJECTED),
        }
    }
}

/// What the gate decides before acting.
enum Decision {
    /// The token is not fresh: refuse it, change nothing.
    Refuse(ReasonCode),
    /// A conjunct failed for the instance, with the footprint sources to refresh.
    Deny(ReasonCode, u64),
    /// Every conjunct holds.
    Allow,
}

impl Gateway {
    /// Evaluates `DispatchOK_t(e)` for a presented token at `now`, read-only: nothing is
    /// consumed, withheld or recorded. [`Gateway::final_gate`] runs exactly this decision after
    /// bringing timers up to `now`; call [`Gateway::handle_timeout`] first for the same answer.
    ///
    /// # Errors
    /// The refusal or denial code the gate would give.
    pub fn dispatch_ok(&self, now: Nanos, token: &DispatchToken) -> Result<(), ReasonCode> {
        match self.decide(now, token) {
            Decision::Allow => Ok(()),
            Decision::Refuse(code) | Decision::Deny(code, _) => Err(code),
        }
    }

    fn decide(&self, now: Nanos, token: &DispatchToken) -> Decision {
        // FreshAuth, ledger half.
        if let Err(code) = self.sh.ledger.check(token) {
            return Decision::Refuse(code);
        }
        let Some(r) = self.responses.get(token.response()) else {
            return Decision::Refuse(ReasonCode::SEQUENCE_REUSED);
        };
        let Some(i) = r.graph.index_of(token.component()) else {
            return Decision::Refuse(ReasonCode::TOKEN_MISMATCH);
        };
        let (Some(c), Some(x)) = (r.graph.component(i), r.inst(i)) else {
            return Decision::Refuse(ReasonCode::TOKEN_MISMATCH);
        };
        // FreshAuth, instance half: the current instance, its generation and binding.
        if x.generation != token.generation() || x.seq != Some(token.seq()) {
            return Decision::Refuse(ReasonCode::GENERATION_STALE);
        }
        if x.binding.as_ref() != Some(token.binding()) || c.digest != *token.digest() {
            return Decision::Refuse(ReasonCode::TOKEN_MISMATCH);
        }
        let Some(spec) = self.sh.cat.type_spec(c.ty) else {
            return Decision::Refuse(ReasonCode::TOKEN_MISMATCH);
        };
        let variant = self.sh.cfg.variant();
        if !variant.gates() {
            // The AgentSpec comparators have no dispatch process: a known token of the current
            // instance goes to the adapter, however often it is presented.
            return Decision::Allow;
        }
        if x.phase != Phase::Retained {
            return Decision::Deny(ReasonCode::INSTANCE_ENDED, 0);
        }

        // e ∈ A*_t: local support at the decision instant, and the closure condition.
        if variant.rechecks() {
            let v = local_ok_with(
                &self.sh.cat,
                spec,
                c,
                &self.sh.snap,
                now,
                Timing::BeforeEffect,
                self.sh.claims(),
            );
            if !v.ok && !self.sh.cfg.seeded(Defect::NoLocalRecheckAtGate) {
                return Decision::Deny(v.code.unwrap_or(ReasonCode::RULE_FAILED), v.failing);
            }
            if let Some((code, s)) = self.sh.snapshot_changed(r) {
                return Decision::Deny(code, 1u64 << s.0);
            }
            if variant.whole_response() {
                let whole = r
                    .inst
                    .iter()
                    .enumerate()
                    .all(|(j, y)| j == usize::from(i) || y.phase.has_proceeded() || y.member);
                if !whole {
                    return Decision::Deny(ReasonCode::NOT_RETAINED, 0);
                }
            } else if variant.uses_dependencies() && !self.sh.cfg.seeded(Defect::NoClosureAtGate) {
                let parents_in = r
                    .graph
                    .parents(i)
                    .iter()
                    .all(|&(p, _)| r.inst(p).is_some_and(|y| y.member));
                if !parents_in {
                    return Decision::Deny(ReasonCode::PARENT_WITHHELD, 0);
                }
            }
        }
        // DepsReady_t(e).
        if !self.sh.deps_ready(r, i) {
            return Decision::Deny(ReasonCode::DEPS_NOT_READY, 0);
        }
        // WitnessOK_t(W_e); Local-Unbound (a comparison variant) has no admission binding.
        if variant.rechecks()
            && variant.binds_claims()
            && !self.sh.cfg.seeded(Defect::NoWitnessCheck)
        {
            let Some(w) = x.witness.as_ref() else {
                return Decision::Deny(ReasonCode::TOKEN_MISMATCH, 0);
            };
            if let Err((code, s)) = w.check(&self.sh.cat, spec, c, &self.sh.snap) {
                return Decision::Deny(code, s.map_or(0, |s| 1u64 << s.0));
            }
        }
        Decision::Allow
    }

    /// The final dispatch gate without a mission contract. See the module documentation.
    pub fn final_gate(
        &mut self,
        now: Nanos,
        token: DispatchToken,
        adapter: &mut dyn Adapter,
    ) -> GateOutcome {
        self.final_gate_with(now, token, adapter, &mut NoContract)
    }

    /// The contract conjunct for an allowed token: the normalized effect, reserved.
    fn contract_conjunct(
        &self,
        token: &DispatchToken,
        contract: &mut dyn EffectGate,
    ) -> Result<Option<(u64, String)>, ReasonCode> {
        if !contract.active() {
            return Ok(None);
        }
        let Some(c) = self.responses.get(token.response()).and_then(|r| {
            r.graph
                .index_of(token.component())
                .and_then(|i| r.graph.component(i))
        }) else {
            return Ok(None);
        };
        let Some(spec) = self.sh.cat.type_spec(c.ty) else {
            return Ok(None);
        };
        let target = super::support::route_target(spec, &c.payload, &self.sh.snap);
        match self.sh.cat.effect_of(spec, target.as_ref()) {
            None => Ok(None),
            Some(Err(code)) => Err(code),
            Some(Ok(effect)) => contract.authorize(&effect).map(|r| Some((r, effect))),
        }
    }

    /// The final dispatch gate with the mission contract's conjunct: `DispatchOK_t(e)` and the
    /// contract's authorization of the action's normalized effect, then token, adapter and the
    /// contract commit, in one synchronous call. A contract refusal is a terminal denial of the
    /// instance (a goal mutation and a new response are the way back).
    pub fn final_gate_with(
        &mut self,
        now: Nanos,
        token: DispatchToken,
        adapter: &mut dyn Adapter,
        contract: &mut dyn EffectGate,
    ) -> GateOutcome {
        // A stale token is refused before anything else runs.
        if let Err(code) = self.sh.ledger.check(&token) {
            return self.refuse(now, &token, code);
        }
        // Bring time-driven support changes up to `now` through the ordinary incremental path,
        // so retention flags and phases are exact at the decision instant.
        if !self.sh.cfg.seeded(Defect::NoTimersAtGate) {
            self.handle_timeout(now);
        }
        let decision = self.decide(now, &token);
        if let Decision::Refuse(code) = decision {
            return self.refuse(now, &token, code);
        }
        // The mission contract's conjunct, only once every HALO conjunct holds.
        let (decision, reserved) = match decision {
            Decision::Allow => match self.contract_conjunct(&token, contract) {
                Ok(r) => (Decision::Allow, r),
                Err(code) => (Decision::Deny(code, 0), None),
            },
            d => (d, None),
        };
        let Some(r) = self.responses.get_mut(token.response()) else {
            return self.refuse(now, &token, ReasonCode::SEQUENCE_REUSED);
        };
        let Some((i, named)) = r
            .graph
            .index_of(token.component())
            .and_then(|i| Some((i, r.at(i)?)))
        else {
            return self.refuse(now, &token, ReasonCode::TOKEN_MISMATCH);
        };
        let at = GateAt {
            i,
            named,
            seq: token.seq(),
            binding: *token.binding(),
            now,
        };
        // The token is spent by this call whatever happens next.
        drop(token);
        match decision {
            Decision::Refuse(_) => GateOutcome::Refused {
                code: ReasonCode::TOKEN_MISMATCH,
            },
            Decision::Deny(code, failing) => self.sh.gate_denied(r, at, code, failing),
            Decision::Allow => self.sh.gate_dispatch(r, at, adapter, contract, reserved),
        }
    }

    fn refuse(&mut self, now: Nanos, token: &DispatchToken, code: ReasonCode) -> GateOutcome {
        self.sh.receipts.push(
            now,
            Record::GateRefused(Box::new(GateRefused {
                response: token.response().clone(),
                component: token.component().clone(),
                seq: token.seq(),
                code,
            })),
        );
        GateOutcome::Refused { code }
    }
}

/// Where a gate call acts: the instance and its names, its token's sequence and binding, the
/// decision instant.
struct GateAt {
    i: u16,
    named: ComponentRef,
    seq: Seq,
    binding: Digest,
    now: Nanos,
}

impl Shared {
    /// A denied instance: withheld with an obligation (recoverable) or invalidated, its
    /// dependents recomputed, the denial receipted.
    fn gate_denied(
        &mut self,
        r: &mut Resp,
        at: GateAt,
        code: ReasonCode,
        failing: u64,
    ) -> GateOutcome {
        let GateAt {
            i,
            named,
            seq,
            binding,
            now,
        } = at;
        if let Some(x) = r.inst_mut(i) {
            x.local.failing = failing;
        }
        self.deny(r, i, code, now);
        self.recompute(r, 1u64 << i, now);
        self.check_done(r, now);
        let obligation = r.inst(i).and_then(|x| x.obligation);
        self.receipts.push(
            now,
            Record::Gate {
                component: named.clone(),
                seq,
                binding,
                outcome: "denied",
                code: Some(code),
                effect: None,
            },
        );
        GateOutcome::Denied {
            response: named.response().clone(),
            component: named.id().clone(),
            code,
            obligation,
        }
    }

    /// An allowed instance: the token is consumed, then the adapter's one enqueue, then the
    /// contract's commit of the reserved effect (all in this call).
    fn gate_dispatch(
        &mut self,
        r: &mut Resp,
        at: GateAt,
        adapter: &mut dyn Adapter,
        contract: &mut dyn EffectGate,
        reserved: Option<(u64, String)>,
    ) -> GateOutcome {
        let (Some(c), Some(spec)) = (
            r.graph.component(at.i),
            r.graph
                .component(at.i)
                .and_then(|c| self.cat.type_spec(c.ty)),
        ) else {
            return GateOutcome::Refused {
                code: ReasonCode::TOKEN_MISMATCH,
            };
        };
        let target = super::support::route_target(spec, &c.payload, &self.snap);
        let Some(command) = c.payload.command(target.as_ref()) else {
            return GateOutcome::Refused {
                code: ReasonCode::NOT_AN_ACTION,
            };
        };
        let span = match spec.temporal {
            Temporal::Rolling { window } => window,
            Temporal::Point | Temporal::Interval => {
                Nanos::from_secs_f64(c.payload.duration_s().unwrap_or(0.0))
            }
        };
        let valid_until = at.now.saturating_add(span);
        let recoverable = spec.recovery.is_recoverable(ReasonCode::ADAPTER_REJECTED);
        // INVARIANT (one dispatch): the token is consumed before the adapter is called, so a
        // failed or repeated call can never reuse it. (The AgentSpec comparison variants have
        // no dispatch process and never spend one.)
        if self.cfg.variant().gates() && !self.cfg.seeded(Defect::TokenNotSpent) {
            self.ledger.consume(at.seq);
        }
        let req = EnqueueRequest {
            now: at.now,
            response: at.named.response(),
            component: at.named.id(),
            command,
            binding: &at.binding,
            seq: at.seq,
            valid_until,
        };
        match adapter.try_enqueue(&req) {
            Ok(()) => self.gate_dispatched(r, at, contract, reserved, valid_until),
            Err(error) => self.gate_enqueue_failed(r, at, error, recoverable),
        }
    }

    /// The adapter took the command: the reserved effect committed, the instance dispatched,
    /// its dependents' readiness recomputed, the dispatch receipted.
    fn gate_dispatched(
        &mut self,
        r: &mut Resp,
        at: GateAt,
        contract: &mut dyn EffectGate,
        reserved: Option<(u64, String)>,
        valid_until: Nanos,
    ) -> GateOutcome {
        let GateAt {
            i,
            named,
            seq,
            binding,
            now,
        } = at;
        // INVARIANT (contract commit): the effect the contract reserved is committed in the
        // same call that handed the command to the adapter.
        let effect = reserved.map(|(res, effect)| {
            let key = format!("halo-{}-{}", self.ledger.boot(), seq.n);
            if let Err(code) = contract.commit(res, &effect, &key) {
                self.receipts.push(
                    now,
                    Record::External {
                        what: "contract_commit_failed",
                        detail: serde_json::json!({"effect": effect, "code": code}),
                    },
                );
            }
            effect
        });
        if let Some(x) = r.inst_mut(i) {
            x.streaming_until = Some(valid_until);
        }
        self.set_phase(r, i, Phase::Dispatched, None, now);
        let kids = r.graph.descendants(1u64 << i);
        self.readiness(r, kids, now);
        self.check_done(r, now);
        if !self.cfg.seeded(Defect::NoDispatchReceipt) {
            self.receipts.push(
                now,
                Record::Gate {
                    component: named.clone(),
                    seq,
                    binding,
                    outcome: "dispatched",
                    code: None,
                    effect,
                },
            );
        }
        GateOutcome::Dispatched {
            response: named.response().clone(),
            component: named.id().clone(),
            seq,
            binding,
            valid_until,
        }
    }

    /// The adapter refused (the token is spent): the instance failed, with an obligation when
    /// its recovery route allows one, else its dependents end too.
    fn gate_enqueue_failed(
        &mut self,
        r: &mut Resp,
        at: GateAt,
        error: AdapterError,
        recoverable: bool,
    ) -> GateOutcome {
        let GateAt {
            i,
            named,
            seq,
            binding,
            now,
        } = at;
        let code = ReasonCode::ADAPTER_REJECTED;
        if let Some(x) = r.inst_mut(i) {
            x.member = false;
            x.token = None;
        }
        self.set_phase(r, i, Phase::Failed, Some(code), now);
        if recoverable {
            self.create_obligation(r, i, code, now);
            self.recompute(r, 1u64 << i, now);
        } else {
            self.cascade_terminal(r, i, now);
        }
        self.check_done(r, now);
        let obligation = r.inst(i).and_then(|x| x.obligation);
        self.receipts.push(
            now,
            Record::Gate {
                component: named.clone(),
                seq,
                binding,
                outcome: "enqueue_failed",
                code: Some(code),
                effect: None,
            },
        );
        GateOutcome::EnqueueFailed {
            response: named.response().clone(),
            component: named.id().clone(),
            error,
            obligation,
        }
    }
}
