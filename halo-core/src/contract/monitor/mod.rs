//! The reference monitor: the execution configuration `X = (C, s, t, G, ν, W, q)` and the twelve
//! operations. Every operation returns Allow, Deny, Indeterminate or Reauthorize with a reason;
//! only Allow changes state; every operation, accepted or not, leaves a hash-linked receipt.
//!
//! Checking is exact in the finite profile: effects are interned ids, states are small integer
//! vectors, each goal keeps its residual maximal continuations, and the checks enumerate every
//! continuation and every prefix state (W1–W7).
//!
//! One file per part of the method: this one holds the configuration, the accessors and the
//! single entry point ([`Monitor::handle`], which dispatches and records); [`register`] the root
//! contract and policy, [`witness`] the W1–W7 checks, [`goals`] the subgoal operations,
//! [`effects`] effect authorization and commit, [`versions`] version changes and
//! reauthorization.

mod effects;
mod goals;
mod record;
mod register;
mod versions;
mod witness;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::compose::{ComposeError, compose};
use super::domain::{Domain, Pred, State};
use super::spec::{ContractSpec, GoalSpec, Op, PolicyRule, Request, Role, WitnessClaim};
use super::{Trace, limits};
use crate::digest::{Digest, tag};
use crate::reason::ReasonCode;
use crate::receipt::{Receipt, ReceiptChain};

pub use record::{ContractRecord, StateView};

/// The four possible answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The operation took effect.
    Allow,
    /// A concrete counterexample or structural mismatch.
    Deny,
    /// The check could not be completed (profile limit, missing observation). Blocks.
    Indeterminate,
    /// A version changed; reauthorize against current versions. Blocks.
    Reauthorize,
}

/// The monitor's answer to one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Verdict.
    pub verdict: Verdict,
    /// Why (none for Allow).
    pub reason: Option<ReasonCode>,
    /// A message for people.
    pub detail: String,
    /// A reservation created by `authorizeEffect`.
    pub reservation: Option<u64>,
    /// Index of the receipt that records this decision.
    pub receipt: u64,
    /// True when an exact idempotent retry returned the retained decision.
    pub replayed: bool,
}

impl Decision {
    /// True for Allow.
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// The version vector `ν = (η, ν_P, ν_S, κ)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// Contract epoch.
    pub epoch: u64,
    /// Policy version.
    pub policy: u64,
    /// Relevant-state version.
    pub state: u64,
    /// Graph revision.
    pub graph: u64,
}

/// Goal lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalState {
    /// Authorized and live.
    Active,
    /// Completed under a current witness.
    Closed,
    /// Removed; a tombstone, not completion evidence.
    Cancelled,
    /// Superseded by a new revision.
    Replaced,
    /// Composed into a joined goal.
    Joined,
}

impl GoalState {
    /// The state's name on the wire and for people (`closed`).
    pub fn name(self) -> &'static str {
        match self {
            GoalState::Active => "active",
            GoalState::Closed => "closed",
            GoalState::Cancelled => "cancelled",
            GoalState::Replaced => "replaced",
            GoalState::Joined => "joined",
        }
    }
}

/// Root lifecycle `q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootState {
    /// Effects may commit under a current witness.
    Runnable,
    /// A version changed; reauthorize.
    Suspended,
    /// Terminal.
    Closed,
}

/// A goal node `g = (i, ρ, p, k, Q, K, D, R, O, F, ζ)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Goal {
    /// Id.
    pub id: String,
    /// Parent index (none for the root goal).
    pub parent: Option<usize>,
    /// Node revision.
    pub revision: u64,
    /// Lifecycle.
    pub state: GoalState,
    /// Residual maximal continuations, after the committed prefix along this goal's paths.
    #[serde(skip)]
    pub residual: Vec<Trace>,
    /// `Q_g`.
    pub closing: Pred,
    /// `R_g`.
    pub resources: BTreeSet<String>,
    /// `O_g`.
    pub obligations: BTreeSet<String>,
    /// `F_g`.
    pub frames: Vec<Pred>,
    /// Executing worker, after delegation.
    pub executor: Option<String>,
    /// `ζ_g`: versions at authorization.
    pub versions: Versions,
    /// Digest of the accepted edit.
    pub digest: Digest,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct Witness {
    path: Vec<usize>,
    versions: Versions,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct Reservation {
    id: u64,
    goal: usize,
    effect: u32,
    trace_digest: Digest,
    versions: Versions,
    used: bool,
}

struct Failure {
    verdict: Verdict,
    reason: ReasonCode,
    detail: String,
}

fn deny(reason: ReasonCode, detail: impl Into<String>) -> Failure {
    Failure {
        verdict: Verdict::Deny,
        reason,
        detail: detail.into(),
    }
}

/// Goal ids, the root id, worker and approver names, and effect names (the text before `(`)
/// follow the envelope's id rule: 1 to 64 bytes of `[A-Za-z0-9._-]`. A look-alike letter from
/// another script, a space or a control character is `INVALID_ID`, before anything is decided.
/// A blank approver is left to the approval check (`NOT_APPROVED`).
fn check_ids(op: &Op) -> Result<(), Failure> {
    // Checked in place, in a fixed order (ids in the order below, then effect names), so the
    // first offence is the one reported.
    fn id(what: &str, text: &str) -> Result<(), Failure> {
        // A reference to another root's goal is `ROOT/GOAL` (refused later as cross-root);
        // each part follows the rule.
        for part in text.splitn(2, '/') {
            if let Err(e) = crate::ids::Id::check(part) {
                return Err(deny(ReasonCode::INVALID_ID, format!("{what}: {e}")));
            }
        }
        Ok(())
    }
    fn effects(traces: &[Vec<String>]) -> Result<(), Failure> {
        traces.iter().flatten().try_for_each(|e| effect(e))
    }
    fn effect(e: &str) -> Result<(), Failure> {
        id(
            "effect name",
            e.split_once('(').map_or(e, |(n, _)| n).trim(),
        )
    }
    match op {
        Op::RegisterRoot {
            approved_by,
            contract,
        } => {
            if !approved_by.trim().is_empty() {
                id("approver", approved_by)?;
            }
            id("root goal id", &contract.root)?;
            effects(&contract.traces)
        }
        Op::ProposeGoal { goal, witness } | Op::ReplaceGoal { goal, witness, .. } => {
            id("goal id", &goal.id)?;
            id("parent", &goal.parent)?;
            if let Op::ReplaceGoal { old, .. } = op {
                id("replaced goal", old)?;
            }
            id("witness root", &witness.root)?;
            effects(&goal.traces)
        }
        Op::DelegateGoal {
            goal, root, worker, ..
        } => {
            id("goal", goal)?;
            id("root", root)?;
            if worker.is_empty() {
                // A missing worker is the schema check's (SCHEMA_INVALID).
                Ok(())
            } else {
                id("worker", worker)
            }
        }
        Op::JoinGoals {
            joined,
            precedence,
            sources,
            ..
        } => {
            id("goal id", &joined.id)?;
            id("parent", &joined.parent)?;
            sources.iter().try_for_each(|s| id("joined goal", s))?;
            precedence.iter().try_for_each(|(a, b)| {
                id("precedence", a)?;
                id("precedence", b)
            })?;
            effects(&joined.traces)
        }
        Op::AuthorizeEffect { effect: e, goal } => {
            id("goal", goal)?;
            effect(e)
        }
        Op::CommitEffect { effect: e, .. } => effect(e),
        Op::Reauthorize { goal } | Op::CancelGoal { goal } | Op::CloseGoal { goal } => {
            id("goal", goal)
        }
        Op::ChangeVersion { .. } | Op::CloseRoot {} => Ok(()),
    }
}

fn indeterminate(reason: ReasonCode, detail: impl Into<String>) -> Failure {
    Failure {
        verdict: Verdict::Indeterminate,
        reason,
        detail: detail.into(),
    }
}

fn reauth(detail: impl Into<String>) -> Failure {
    Failure {
        verdict: Verdict::Reauthorize,
        reason: ReasonCode::STALE_VERSION,
        detail: detail.into(),
    }
}

/// `H(t·e) = SHA-256(tag || H(t) || e)`: the committed-trace digest, one step at a time.
pub fn extend_trace_digest(d: &Digest, effect: &str) -> Digest {
    Digest::of(b"halo/trace/v1\0", &[&d.0, effect.as_bytes()])
}

/// The digest of an edit: SHA-256 over the canonical JSON of the goal spec (keys sorted).
pub fn edit_digest(goal: &GoalSpec) -> Digest {
    edit_text_digest(goal).1
}

/// The goal spec's canonical JSON and the edit digest over it. `serde_json` writes the
/// struct's fields in declaration order, which is alphabetical, and it holds no maps: the text
/// is canonical (a test holds it to the canonical writer's).
fn edit_text_digest(goal: &GoalSpec) -> (Vec<u8>, Digest) {
    let mut buf = Vec::with_capacity(1024);
    // Serializing these plain structs cannot fail; an error would only shorten the input.
    let _ = serde_json::to_writer(&mut buf, goal);
    let digest = Digest::of(tag::COMPONENT, &[b"contract-edit\0", &buf]);
    (buf, digest)
}

/// A parsed, checked edit.
struct Edit {
    residual: Vec<Trace>,
    completion: Vec<Trace>,
    closing: Pred,
    frames: Vec<Pred>,
    resources: BTreeSet<String>,
    obligations: BTreeSet<String>,
    discharged: Vec<String>,
}

#[derive(Clone)]
struct Contract {
    spec: ContractSpec,
    traces: Vec<Trace>,
    forbidden: Vec<Pred>,
    closing: Pred,
    resources: BTreeSet<String>,
    discharge: BTreeMap<String, Pred>,
}

#[derive(Clone)]
struct Policy {
    deny: BTreeSet<u32>,
    max_len: Option<usize>,
    forbid: Vec<Pred>,
}

/// What makes two commits under one key the same request (the key itself aside).
type CommitBody = (Role, String, u64);

/// The monitor. Cloning it forks the whole configuration (used by explorers and tests).
#[derive(Clone)]
pub struct Monitor {
    domain: Arc<Domain>,
    contract: Option<Contract>,
    policy: Policy,
    state: State,
    trace: Vec<u32>,
    trace_digest: Digest,
    goals: Vec<Goal>,
    by_id: BTreeMap<String, usize>,
    versions: Versions,
    witness: Option<Witness>,
    root: Option<RootState>,
    reservations: BTreeMap<u64, Reservation>,
    next_reservation: u64,
    /// Commit key → the committed request's body (caller, effect, reservation) and decision.
    idempotency: BTreeMap<String, (CommitBody, Decision)>,
    receipts: ReceiptChain<ContractRecord>,
    receipt_count: u64,
    /// The view receipts record of the current state (its text written once per state).
    state_view: StateView,
    /// The canonical text of the goal spec the current request proposes, written by `propose`
    /// for the edit digest and taken by the receipt record.
    goal_text: Option<Vec<u8>>,
}

fn sorted(mut v: Vec<Trace>) -> Vec<Trace> {
    v.sort_unstable();
    v.dedup();
    v
}

/// `x ∈ Pref(M)` for a sorted `M`.
fn in_prefix_closure(sorted_m: &[Trace], x: &[u32]) -> bool {
    let i = sorted_m.partition_point(|m| m.as_slice() < x);
    sorted_m.get(i).is_some_and(|m| m.starts_with(x))
}

impl Monitor {
    /// A monitor over a registered domain, before any root is registered.
    pub fn new(domain: Domain) -> Monitor {
        let domain = Arc::new(domain);
        Monitor {
            domain: Arc::clone(&domain),
            contract: None,
            policy: Policy {
                deny: BTreeSet::new(),
                max_len: None,
                forbid: Vec::new(),
            },
            state: Vec::new(),
            trace: Vec::new(),
            trace_digest: Digest::default(),
            goals: Vec::new(),
            by_id: BTreeMap::new(),
            versions: Versions::default(),
            witness: None,
            root: None,
            reservations: BTreeMap::new(),
            next_reservation: 1,
            idempotency: BTreeMap::new(),
            receipts: ReceiptChain::new(),
            receipt_count: 0,
            state_view: StateView::new(Arc::clone(&domain), Vec::new()),
            goal_text: None,
        }
    }

    /// The domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Current versions.
    pub fn versions(&self) -> Versions {
        self.versions
    }

    /// The root's lifecycle, once registered.
    pub fn root_state(&self) -> Option<RootState> {
        self.root
    }

    /// The modeled state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The committed trace, as effect texts.
    pub fn trace(&self) -> Vec<String> {
        self.trace.iter().map(|e| self.domain.name(*e)).collect()
    }

    /// The committed-trace digest.
    pub fn trace_digest(&self) -> Digest {
        self.trace_digest
    }

    /// A goal by id.
    pub fn goal(&self, id: &str) -> Option<&Goal> {
        self.by_id.get(id).and_then(|i| self.goals.get(*i))
    }

    /// A goal's parent id.
    pub fn parent_of(&self, id: &str) -> Option<String> {
        self.goal(id)
            .and_then(|g| g.parent)
            .and_then(|p| self.goals.get(p))
            .map(|p| p.id.clone())
    }

    /// Every goal's current revision, by id.
    pub fn goal_revisions(&self) -> BTreeMap<String, u64> {
        self.goals
            .iter()
            .map(|g| (g.id.clone(), g.revision))
            .collect()
    }

    /// Number of goals held (all lifecycles).
    pub fn goal_count(&self) -> usize {
        self.goals.len()
    }

    /// The current witness path, leaf first, as ids.
    pub fn witness_path(&self) -> Option<Vec<String>> {
        self.witness.as_ref().map(|w| {
            w.path
                .iter()
                .filter_map(|i| self.goals.get(*i).map(|g| g.id.clone()))
                .collect()
        })
    }

    /// Whether the current state is forbidden by the contract.
    pub fn in_forbidden_state(&self) -> bool {
        self.contract
            .as_ref()
            .is_some_and(|c| c.forbidden.iter().any(|p| p.holds(&self.state)))
    }

    /// Seals and returns the next receipt.
    pub fn poll_receipt(&mut self) -> Option<Receipt> {
        self.receipts.seal()
    }

    /// The retained authorization state as canonical JSON: the contract, every goal with its
    /// residual continuations (interned effect ids), predicates, resources and obligations, the
    /// reservations, the committed trace and the versions. The scale study reports its size.
    pub fn retained_state_json(&self) -> String {
        let goals: Vec<serde_json::Value> = self
            .goals
            .iter()
            .map(|g| {
                serde_json::json!({
                    "goal": g,
                    "residual": g.residual,
                })
            })
            .collect();
        serde_json::json!({
            "contract": self.contract.as_ref().map(|c| &c.spec),
            "goals": goals,
            "reservations": self.reservations.values().collect::<Vec<_>>(),
            "root": self.root,
            "state": self.domain.show(&self.state),
            "trace": self.trace(),
            "versions": self.versions,
            "witness": self.witness,
        })
        .to_string()
    }

    /// Handles one request.
    pub fn handle(&mut self, req: Request) -> Decision {
        let before = self.versions;
        self.goal_text = None;
        // An exact retry of a commit returns the retained receipt; a different body under the
        // same key is denied. Nothing else changes either way.
        let commit = match &req.op {
            Op::CommitEffect {
                effect,
                key,
                reservation,
            } => Some((key.clone(), (req.caller, effect.clone(), *reservation))),
            _ => None,
        };
        if let Some((key, body)) = &commit
            && let Some((b, d)) = self.idempotency.get(key).cloned()
        {
            let (verdict, reason, replay_of) = if b == *body {
                (d.verdict, d.reason, Some(d.receipt))
            } else {
                (Verdict::Deny, Some(ReasonCode::IDEMPOTENCY_CONFLICT), None)
            };
            let receipt = self.record(req, before, verdict, reason, None, d.reservation, replay_of);
            return Decision {
                verdict,
                reason,
                detail: if replay_of.is_some() {
                    "exact retry: the retained decision".into()
                } else {
                    "the key was used with a different request".into()
                },
                reservation: d.reservation,
                receipt,
                replayed: replay_of.is_some(),
            };
        }
        let result = self.dispatch(&req);
        let (verdict, reason, detail, edit, reservation) = match result {
            Ok((edit, reservation)) => (Verdict::Allow, None, String::new(), edit, reservation),
            Err(f) => (f.verdict, Some(f.reason), f.detail, None, None),
        };
        let reservation = reservation.or(match &req.op {
            Op::CommitEffect { reservation, .. } => Some(*reservation),
            _ => None,
        });
        let receipt = self.record(req, before, verdict, reason, edit, reservation, None);
        let d = Decision {
            verdict,
            reason,
            detail,
            reservation,
            receipt,
            replayed: false,
        };
        if let (Some((k, body)), Verdict::Allow) = (commit, verdict) {
            self.idempotency.insert(k, (body, d.clone()));
        }
        d
    }

    /// The view of the current state, shared with the last record while the state is the same.
    fn state_view(&mut self) -> StateView {
        if !self.state_view.shows(&self.domain, &self.state) {
            self.state_view = StateView::new(Arc::clone(&self.domain), self.state.clone());
        }
        self.state_view.clone()
    }

    #[allow(clippy::too_many_arguments, reason = "one receipt field each")]
    fn record(
        &mut self,
        request: Request,
        before: Versions,
        verdict: Verdict,
        reason: Option<ReasonCode>,
        edit: Option<Digest>,
        reservation: Option<u64>,
        replay_of: Option<u64>,
    ) -> u64 {
        // The goal text `propose` wrote while deciding this request (taken either way, so it
        // never outlives the request).
        let goal_text = self
            .goal_text
            .take()
            .filter(|_| matches!(request.op, Op::ProposeGoal { .. } | Op::ReplaceGoal { .. }));
        let rec = ContractRecord {
            request,
            before,
            after: self.versions,
            verdict,
            reason,
            edit,
            reservation,
            trace: self.trace_digest,
            state: self.state_view(),
            root: self.root,
            replay_of,
            goal_text,
        };
        self.receipts
            .push(crate::time::Nanos(self.receipt_count), rec);
        self.receipt_count += 1;
        self.receipt_count - 1
    }

    fn dispatch(&mut self, req: &Request) -> Result<(Option<Digest>, Option<u64>), Failure> {
        let role = req.caller;
        let need = |ok: bool, what: &str| -> Result<(), Failure> {
            if ok {
                Ok(())
            } else {
                Err(deny(
                    ReasonCode::WRONG_ROLE,
                    format!("{what} is not allowed for this caller"),
                ))
            }
        };
        match &req.op {
            Op::RegisterRoot {
                contract,
                approved_by,
            } => {
                need(role == Role::Operator, "registerRoot")?;
                check_ids(&req.op)?;
                self.register_root(contract, approved_by)
                    .map(|()| (None, None))
            }
            Op::ChangeVersion { policy, observe } => {
                match (policy, observe) {
                    (Some(_), _) => need(role == Role::Operator, "a policy change")?,
                    (None, Some(_)) => need(
                        matches!(role, Role::Operator | Role::Provider),
                        "a state observation",
                    )?,
                    (None, None) => {
                        return Err(deny(
                            ReasonCode::SCHEMA_INVALID,
                            "a version change names a policy or an observation",
                        ));
                    }
                }
                self.change_version(policy.as_deref(), observe.as_ref())
                    .map(|()| (None, None))
            }
            op => {
                need(role == Role::Agent || role == Role::Operator, op.name())?;
                check_ids(op)?;
                if self.contract.is_none() {
                    return Err(deny(ReasonCode::NO_ROOT, "register a root contract first"));
                }
                if self.root == Some(RootState::Closed) {
                    return Err(deny(ReasonCode::ROOT_CLOSED, "the root is closed"));
                }
                match op {
                    Op::ProposeGoal { goal, witness } => {
                        self.propose(goal, witness, None).map(|d| (Some(d), None))
                    }
                    Op::ReplaceGoal { goal, old, witness } => self
                        .propose(goal, witness, Some(old))
                        .map(|d| (Some(d), None)),
                    Op::DelegateGoal {
                        goal,
                        resources,
                        root,
                        witness,
                        worker,
                    } => self
                        .delegate(goal, resources, root, witness, worker)
                        .map(|()| (None, None)),
                    Op::JoinGoals {
                        joined,
                        precedence,
                        sources,
                        witness,
                    } => self
                        .join(joined, precedence, sources, witness)
                        .map(|d| (Some(d), None)),
                    Op::AuthorizeEffect { effect, goal } => {
                        self.authorize(goal, effect).map(|r| (None, Some(r)))
                    }
                    Op::CommitEffect {
                        effect,
                        reservation,
                        ..
                    } => self.commit(*reservation, effect).map(|()| (None, None)),
                    Op::Reauthorize { goal } => self.reauthorize(goal).map(|()| (None, None)),
                    Op::CancelGoal { goal } => self.cancel(goal).map(|()| (None, None)),
                    Op::CloseGoal { goal } => self.close_goal(goal).map(|()| (None, None)),
                    Op::CloseRoot {} => self.close_root().map(|()| (None, None)),
                    Op::RegisterRoot { .. } | Op::ChangeVersion { .. } => {
                        Err(deny(ReasonCode::SCHEMA_INVALID, "unreachable"))
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------
}

/// The digest a delegation's witness binds.
pub fn delegation_digest(goal: &str, resources: &[String], worker: &str) -> Digest {
    let spec = serde_json::json!({"goal": goal, "resources": resources, "worker": worker});
    Digest::of(
        tag::COMPONENT,
        &[b"contract-delegation\0", spec.to_string().as_bytes()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uav() -> Monitor {
        let d = Domain::parse(
            include_str!("../../../../catalogs/contract-uav.toml"),
            "contract-uav.toml",
        )
        .unwrap();
        let c: ContractSpec = serde_json::from_value(serde_json::json!({
            "closing": ["airborne == false", "zone == home", "photos >= 1"],
            "domain": "uav-survey",
            "epoch": 1,
            "initial": {"airborne": false, "battery": "high", "photos": 0, "review": false, "zone": "home"},
            "root": "r",
            "traces": [["takeoff", "goto(wp1)", "photograph(wp1)", "return", "land"]],
        }))
        .unwrap();
        let mut m = Monitor::new(d);
        let reg = m.handle(Request {
            caller: Role::Operator,
            op: Op::RegisterRoot {
                approved_by: "ops".into(),
                contract: c,
            },
        });
        assert!(reg.allowed());
        m
    }

    #[test]
    fn gate_effect_commits_in_order_and_refuses_out_of_order() {
        let mut m = uav();
        assert!(m.gate_effect("r", "takeoff", "k1").allowed());
        let before = m.retained_state_json();
        let out_of_order = m.gate_effect("r", "land", "k2");
        assert_eq!(out_of_order.reason, Some(ReasonCode::EFFECT_NOT_ADMITTED));
        assert_eq!(
            m.retained_state_json(),
            before,
            "a refused gate call changes nothing"
        );
        assert!(m.gate_effect("r", "goto(wp1)", "k3").allowed());
        assert_eq!(m.trace(), vec!["takeoff()".to_string(), "goto(wp1)".into()]);
        // Two receipts per allowed call, one for the refused authorization, plus registration.
        let mut n = 0;
        while m.poll_receipt().is_some() {
            n += 1;
        }
        assert_eq!(n, 1 + 2 + 1 + 2);
    }

    /// Every record writes itself (the goal and the state from their kept texts) byte for byte
    /// as the generic canonical writer writes its `Serialize`: proposals allowed and refused,
    /// a replacement, a goal whose free text needs escapes, effects that change the state and
    /// operations that keep it.
    #[test]
    fn records_write_what_the_generic_writer_writes() {
        use crate::canonical;
        use crate::receipt::CanonicalRecord;

        // The records of the last call: each writes what the generic writer writes, and the
        // last shows the state the monitor is in.
        fn check(m: &mut Monitor) -> usize {
            let mut n = 0;
            let last = m
                .receipts
                .pending_records()
                .last()
                .map(|r| r.state.state().clone());
            assert_eq!(last.as_ref(), Some(&m.state));
            for r in m.receipts.pending_records() {
                let mut own = Vec::new();
                r.write_canonical(&mut own).unwrap();
                let generic = canonical::to_vec(r).unwrap();
                assert_eq!(
                    String::from_utf8(own).unwrap(),
                    String::from_utf8(generic).unwrap()
                );
                n += 1;
            }
            while m.poll_receipt().is_some() {}
            n
        }
        let goal = |id: &str, text: Option<&str>| GoalSpec {
            closing: vec!["airborne == false".into(), "zone == home".into()],
            completion: vec![Vec::new()],
            discharged: Vec::new(),
            frames: Vec::new(),
            id: id.into(),
            obligations: Vec::new(),
            parent: "r".into(),
            resources: Vec::new(),
            text: text.map(Into::into),
            traces: vec![
                ["takeoff", "goto(wp1)", "photograph(wp1)", "return", "land"]
                    .map(String::from)
                    .to_vec(),
            ],
        };
        let mut m = uav();
        let mut n = check(&mut m);
        let agent = |op: Op| Request {
            caller: Role::Agent,
            op,
        };

        // A witness for another edit: refused after the goal's text was written.
        let g = goal("g1", None);
        let stale = m.witness_for("r", &edit_digest(&goal("g0", None)));
        let d = m.handle(agent(Op::ProposeGoal {
            goal: g.clone(),
            witness: stale,
        }));
        assert!(!d.allowed());
        n += check(&mut m);

        let g = goal("g1", Some("say \"hi\"\n\u{e9}\u{1} \\ done"));
        let w = m.witness_for("r", &edit_digest(&g));
        assert!(
            m.handle(agent(Op::ProposeGoal {
                goal: g,
                witness: w
            }))
            .allowed()
        );
        n += check(&mut m);

        let g = goal("g1", Some("revised"));
        let w = m.witness_for("r", &edit_digest(&g));
        let d = m.handle(agent(Op::ReplaceGoal {
            goal: g,
            old: "g1".into(),
            witness: w,
        }));
        assert!(d.allowed(), "{}", d.detail);
        n += check(&mut m);

        // Effects: each commit changes the state, each authorization keeps it.
        for (i, e) in ["takeoff", "goto(wp1)", "photograph(wp1)"]
            .iter()
            .enumerate()
        {
            let before = m.state.clone();
            assert!(m.gate_effect("g1", e, &format!("k{i}")).allowed());
            let authorized = m.receipts.pending_records().next().map(|r| r.state.state());
            assert_eq!(authorized, Some(&before));
            assert_ne!(m.state, before, "`{e}` changes the state");
            n += check(&mut m);
        }
        assert_eq!(n, 1 + 1 + 1 + 1 + 3 * 2);
    }
}
