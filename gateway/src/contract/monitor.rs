//! The reference monitor: the execution configuration `X = (C, s, t, G, ν, W, q)` and the twelve
//! operations. Every operation returns Allow, Deny, Indeterminate or Reauthorize with a reason;
//! only Allow changes state; every operation, accepted or not, leaves a hash-linked receipt.
//!
//! Checking is exact in the finite profile: effects are interned ids, states are small integer
//! vectors, each goal keeps its residual maximal continuations, and the checks enumerate every
//! continuation and every prefix state (W1–W7).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::compose::{ComposeError, compose};
use super::domain::{Domain, Pred, State};
use super::spec::{ContractSpec, GoalSpec, Op, PolicyRule, Request, Role, WitnessClaim};
use super::{Trace, limits};
use crate::core::digest::{Digest, tag};
use crate::core::reason::ReasonCode;
use crate::core::receipt::{Receipt, ReceiptChain};

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

/// A modeled state with its domain, serialized as `{var: value}` text. Rendering happens when
/// the receipt is sealed, off the decision path.
#[derive(Clone, Debug)]
pub struct StateView {
    domain: Arc<Domain>,
    /// The state.
    pub state: State,
}

impl Serialize for StateView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.domain.serialize_state(&self.state, s)
    }
}

/// What a receipt records.
#[derive(Clone, Debug, Serialize)]
pub struct ContractRecord {
    /// The operation and its typed inputs.
    pub request: Request,
    /// Versions before.
    pub before: Versions,
    /// Versions after.
    pub after: Versions,
    /// Verdict.
    pub verdict: Verdict,
    /// Reason.
    pub reason: Option<ReasonCode>,
    /// Digest of an accepted edit.
    pub edit: Option<Digest>,
    /// Reservation created or consumed.
    pub reservation: Option<u64>,
    /// Committed trace digest after the operation.
    pub trace: Digest,
    /// Modeled state after the operation, serialized as `{var: value}` text.
    pub state: StateView,
    /// Root lifecycle after.
    pub root: Option<RootState>,
    /// For an exact idempotent retry: the index of the original receipt.
    pub replay_of: Option<u64>,
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
    fn goal_spec<'a>(g: &'a GoalSpec, ids: &mut Vec<(&'static str, &'a str)>) {
        ids.push(("goal id", g.id.as_str()));
        ids.push(("parent", g.parent.as_str()));
    }
    fn traces_of(t: &[Vec<String>]) -> impl Iterator<Item = &str> {
        t.iter().flatten().map(String::as_str)
    }
    let mut ids: Vec<(&'static str, &str)> = Vec::new();
    let mut effects: Vec<&str> = Vec::new();
    match op {
        Op::RegisterRoot {
            approved_by,
            contract,
        } => {
            if !approved_by.trim().is_empty() {
                ids.push(("approver", approved_by.as_str()));
            }
            ids.push(("root goal id", contract.root.as_str()));
            effects.extend(traces_of(&contract.traces));
        }
        Op::ProposeGoal { goal, witness } | Op::ReplaceGoal { goal, witness, .. } => {
            goal_spec(goal, &mut ids);
            if let Op::ReplaceGoal { old, .. } = op {
                ids.push(("replaced goal", old.as_str()));
            }
            ids.push(("witness root", witness.root.as_str()));
            effects.extend(traces_of(&goal.traces));
        }
        Op::DelegateGoal {
            goal, root, worker, ..
        } => {
            ids.push(("goal", goal.as_str()));
            ids.push(("root", root.as_str()));
            if !worker.is_empty() {
                // A missing worker is the schema check's (SCHEMA_INVALID).
                ids.push(("worker", worker.as_str()));
            }
        }
        Op::JoinGoals {
            joined,
            precedence,
            sources,
            ..
        } => {
            goal_spec(joined, &mut ids);
            ids.extend(sources.iter().map(|s| ("joined goal", s.as_str())));
            ids.extend(
                precedence
                    .iter()
                    .flat_map(|(a, b)| [("precedence", a.as_str()), ("precedence", b.as_str())]),
            );
            effects.extend(traces_of(&joined.traces));
        }
        Op::AuthorizeEffect { effect, goal } => {
            ids.push(("goal", goal.as_str()));
            effects.push(effect.as_str());
        }
        Op::CommitEffect { effect, .. } => effects.push(effect.as_str()),
        Op::Reauthorize { goal } | Op::CancelGoal { goal } | Op::CloseGoal { goal } => {
            ids.push(("goal", goal.as_str()));
        }
        Op::ChangeVersion { .. } | Op::CloseRoot {} => {}
    }
    for e in effects {
        let name = e.split_once('(').map_or(e, |(n, _)| n).trim();
        ids.push(("effect name", name));
    }
    for (what, text) in ids {
        // A reference to another root's goal is `ROOT/GOAL` (refused later as cross-root);
        // each part follows the rule.
        for part in text.splitn(2, '/') {
            if let Err(e) = crate::core::ids::Id::new(part) {
                return Err(deny(ReasonCode::INVALID_ID, format!("{what}: {e}")));
            }
        }
    }
    Ok(())
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
    let mut buf = Vec::with_capacity(1024);
    // Serializing these plain structs cannot fail; an error would only shorten the input.
    let _ = serde_json::to_writer(&mut buf, goal);
    Digest::of(tag::COMPONENT, &[b"contract-edit\0", &buf])
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
        Monitor {
            domain: Arc::new(domain),
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

    fn parse_traces(&self, traces: &[Vec<String>]) -> Result<Vec<Trace>, Failure> {
        let mut out = Vec::with_capacity(traces.len());
        for t in traces {
            let mut tr = Vec::with_capacity(t.len());
            for e in t {
                tr.push(self.domain.effect_id(e).ok_or_else(|| {
                    deny(
                        ReasonCode::EFFECT_UNKNOWN,
                        format!("`{e}` is not a registered effect"),
                    )
                })?);
            }
            out.push(tr);
        }
        Ok(out)
    }

    fn parse_pred(&self, conds: &[String]) -> Result<Pred, Failure> {
        self.domain
            .pred(conds)
            .map_err(|e| deny(ReasonCode::SCHEMA_INVALID, e.0))
    }

    fn check_goal_limits(g: &GoalSpec) -> Result<(), Failure> {
        let lim = |what: &str, n: usize, max: usize| -> Result<(), Failure> {
            if n > max {
                return Err(indeterminate(
                    ReasonCode::PROFILE_LIMIT,
                    format!("{n} {what}; the profile allows {max}"),
                ));
            }
            Ok(())
        };
        lim("continuations", g.traces.len(), limits::CONTINUATIONS)?;
        lim(
            "completion continuations",
            g.completion.len(),
            limits::CONTINUATIONS,
        )?;
        for t in g.traces.iter().chain(&g.completion) {
            lim("effects in a continuation", t.len(), limits::EFFECTS)?;
        }
        lim("resources", g.resources.len(), limits::ARRAY)?;
        lim("obligations", g.obligations.len(), limits::ARRAY)?;
        lim("frame predicates", g.frames.len(), limits::ARRAY)?;
        lim("closing conditions", g.closing.len(), limits::ARRAY)?;
        lim("discharged obligations", g.discharged.len(), limits::ARRAY)?;
        Ok(())
    }

    /// Handles one request.
    pub fn handle(&mut self, req: Request) -> Decision {
        let before = self.versions;
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
        if let Some((key, body)) = &commit {
            if let Some((b, d)) = self.idempotency.get(key).cloned() {
                let (verdict, reason, replay_of) = if b == *body {
                    (d.verdict, d.reason, Some(d.receipt))
                } else {
                    (Verdict::Deny, Some(ReasonCode::IDEMPOTENCY_CONFLICT), None)
                };
                let receipt =
                    self.record(req, before, verdict, reason, None, d.reservation, replay_of);
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
        let rec = ContractRecord {
            request,
            before,
            after: self.versions,
            verdict,
            reason,
            edit,
            reservation,
            trace: self.trace_digest,
            state: StateView {
                domain: Arc::clone(&self.domain),
                state: self.state.clone(),
            },
            root: self.root,
            replay_of,
        };
        self.receipts
            .push(crate::core::time::Nanos(self.receipt_count), rec);
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

    fn register_root(&mut self, c: &ContractSpec, approved_by: &str) -> Result<(), Failure> {
        if self.contract.is_some() {
            return Err(deny(ReasonCode::ROOT_EXISTS, "one root per execution"));
        }
        if approved_by.trim().is_empty() {
            return Err(deny(
                ReasonCode::NOT_APPROVED,
                "the contract names no approving principal",
            ));
        }
        if c.domain != self.domain.id {
            return Err(deny(
                ReasonCode::SCHEMA_INVALID,
                format!("the contract is for domain `{}`", c.domain),
            ));
        }
        if c.traces.len() > limits::CONTINUATIONS {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                "too many permitted traces",
            ));
        }
        for t in &c.traces {
            if t.len() > limits::EFFECTS {
                return Err(indeterminate(
                    ReasonCode::PROFILE_LIMIT,
                    "a permitted trace is too long",
                ));
            }
        }
        for (n, what) in [
            (c.resources.len(), "resources"),
            (c.obligations.len(), "obligations"),
            (c.forbidden.len(), "forbidden predicates"),
            (c.closing.len(), "closing conditions"),
        ] {
            if n > limits::ARRAY {
                return Err(indeterminate(
                    ReasonCode::PROFILE_LIMIT,
                    format!("too many {what}"),
                ));
            }
        }
        let traces = sorted(self.parse_traces(&c.traces)?);
        if traces.is_empty() {
            return Err(deny(
                ReasonCode::EMPTY_LANGUAGE,
                "L_C must contain at least one trace",
            ));
        }
        let s0 = self
            .domain
            .state(&c.initial)
            .map_err(|e| deny(ReasonCode::SCHEMA_INVALID, e.0))?;
        let forbidden = c
            .forbidden
            .iter()
            .map(|p| self.parse_pred(p))
            .collect::<Result<Vec<_>, _>>()?;
        let closing = self.parse_pred(&c.closing)?;
        let mut discharge = BTreeMap::new();
        for (o, p) in &c.discharge {
            discharge.insert(o.clone(), self.parse_pred(p)?);
        }
        let policy = self.build_policy(&c.policy)?;
        // A7: SafeFuture_C(s0, ε, K_g0), the root goal equal to the contract.
        let contract = Contract {
            spec: c.clone(),
            traces: traces.clone(),
            forbidden,
            closing: closing.clone(),
            resources: c.resources.iter().cloned().collect(),
            discharge,
        };
        self.contract = Some(contract);
        self.state = s0;
        self.policy = policy;
        if let Err(f) = self.safe_future(&self.state.clone(), &traces, &[]) {
            self.contract = None;
            self.state = Vec::new();
            return Err(Failure {
                verdict: f.verdict,
                reason: if f.verdict == Verdict::Deny {
                    ReasonCode::INITIAL_UNSAFE
                } else {
                    f.reason
                },
                detail: f.detail,
            });
        }
        self.versions = Versions {
            epoch: c.epoch,
            policy: 1,
            state: 1,
            graph: 1,
        };
        let g0 = Goal {
            id: c.root.clone(),
            parent: None,
            revision: 1,
            state: GoalState::Active,
            residual: traces,
            closing,
            resources: c.resources.iter().cloned().collect(),
            obligations: c.obligations.iter().cloned().collect(),
            frames: Vec::new(),
            executor: None,
            versions: self.versions,
            digest: Digest::of(
                tag::COMPONENT,
                &[b"contract\0", &serde_json::to_vec(c).unwrap_or_default()],
            ),
        };
        self.by_id.insert(g0.id.clone(), 0);
        self.goals.push(g0);
        self.root = Some(RootState::Runnable);
        self.witness = Some(Witness {
            path: vec![0],
            versions: self.versions,
        });
        Ok(())
    }

    fn build_policy(&self, rules: &[PolicyRule]) -> Result<Policy, Failure> {
        let mut p = Policy {
            deny: BTreeSet::new(),
            max_len: None,
            forbid: Vec::new(),
        };
        for r in rules {
            match r {
                PolicyRule::DenyEffect { effect } => {
                    let id = self.domain.effect_id(effect).ok_or_else(|| {
                        deny(
                            ReasonCode::EFFECT_UNKNOWN,
                            format!("policy names unknown effect `{effect}`"),
                        )
                    })?;
                    p.deny.insert(id);
                }
                PolicyRule::MaxTraceLen { max } => {
                    p.max_len = Some(p.max_len.map_or(*max, |m: usize| m.min(*max)))
                }
                PolicyRule::Forbid { when } => p.forbid.push(self.parse_pred(when)?),
            }
        }
        Ok(p)
    }

    /// W4 and the policy over a set of maximal traces from `s`: every prefix applicable, no
    /// prefix state forbidden (contract or policy), every frame true on every prefix state.
    fn safe_future(&self, s: &State, traces: &[Trace], frames: &[&Pred]) -> Result<(), Failure> {
        self.safe_future_ends(s, traces, frames).map(|_| ())
    }

    /// [`Monitor::safe_future`], returning the end state of each trace (in input order).
    fn safe_future_ends(
        &self,
        s: &State,
        traces: &[Trace],
        frames: &[&Pred],
    ) -> Result<Vec<State>, Failure> {
        let Some(c) = self.contract.as_ref() else {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        };
        let bad = |st: &State| -> Option<Failure> {
            if c.forbidden.iter().any(|p| p.holds(st)) {
                return Some(deny(
                    ReasonCode::FORBIDDEN_REACHABLE,
                    format!("forbidden state {:?}", self.domain.show(st)),
                ));
            }
            if self.policy.forbid.iter().any(|p| p.holds(st)) {
                return Some(deny(
                    ReasonCode::POLICY_VIOLATION,
                    format!("policy forbids state {:?}", self.domain.show(st)),
                ));
            }
            if frames.iter().any(|f| !f.holds(st)) {
                return Some(deny(
                    ReasonCode::FRAME_VIOLATION,
                    format!("a frame fails in {:?}", self.domain.show(st)),
                ));
            }
            None
        };
        if let Some(f) = bad(s) {
            return Err(f);
        }
        // Walk the traces in sorted order, reusing the states of the common prefix: `bufs[d]` is
        // the state after `d + 1` effects of the current trace, its allocation kept for the next.
        let mut order: Vec<(usize, &Trace)> = traces.iter().enumerate().collect();
        order.sort_unstable_by(|a, b| a.1.cmp(b.1));
        let mut ends: Vec<State> = vec![Vec::new(); traces.len()];
        let mut bufs: Vec<State> = Vec::new();
        let mut depth = 0usize;
        let mut prev: &[u32] = &[];
        for (ix, t) in order {
            if let Some(max) = self.policy.max_len {
                if self.trace.len() + t.len() > max {
                    return Err(deny(
                        ReasonCode::POLICY_VIOLATION,
                        format!("the policy allows {max} effects in all"),
                    ));
                }
            }
            depth = prev
                .iter()
                .zip(t.iter())
                .take_while(|(a, b)| a == b)
                .count()
                .min(depth);
            for &e in t.get(depth..).unwrap_or(&[]) {
                if self.policy.deny.contains(&e) {
                    return Err(deny(
                        ReasonCode::POLICY_VIOLATION,
                        format!("the policy denies `{}`", self.domain.name(e)),
                    ));
                }
                if bufs.len() <= depth {
                    bufs.push(Vec::with_capacity(s.len()));
                }
                let (done, rest) = bufs.split_at_mut(depth);
                let from: &[i64] = done.last().map_or(s.as_slice(), Vec::as_slice);
                let Some(next) = rest.first_mut() else {
                    return Err(indeterminate(ReasonCode::PROFILE_LIMIT, "state buffer"));
                };
                if !self.domain.apply_into(from, e, next) {
                    return Err(deny(
                        ReasonCode::EFFECT_NOT_APPLICABLE,
                        format!(
                            "`{}` is not applicable in {:?}",
                            self.domain.name(e),
                            self.domain.show(from)
                        ),
                    ));
                }
                if let Some(f) = bad(next) {
                    return Err(f);
                }
                depth += 1;
            }
            if let Some(slot) = ends.get_mut(ix) {
                *slot = match depth.checked_sub(1).and_then(|d| bufs.get(d)) {
                    Some(st) => st.clone(),
                    None => s.clone(),
                };
            }
            prev = t;
        }
        Ok(ends)
    }

    fn state_after(&self, s: &State, t: &[u32]) -> Option<State> {
        let mut cur = s.clone();
        for &e in t {
            cur = self.domain.apply(&cur, e)?;
        }
        Some(cur)
    }

    fn path_of(&self, leaf: usize) -> Vec<usize> {
        let mut p = vec![leaf];
        let mut cur = leaf;
        while let Some(parent) = self.goals.get(cur).and_then(|g| g.parent) {
            p.push(parent);
            cur = parent;
            if p.len() > limits::GOALS + 1 {
                break;
            }
        }
        p
    }

    fn check_witness(&self, w: &WitnessClaim, parent: usize, edit: &Digest) -> Result<(), Failure> {
        let Some(c) = self.contract.as_ref() else {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        };
        // W1 bindings that can never become true: another root, another edit, a bad revision step.
        if w.root != c.spec.root || w.epoch != c.spec.epoch {
            return Err(deny(
                ReasonCode::CROSS_ROOT,
                format!("the witness names root `{}` epoch {}", w.root, w.epoch),
            ));
        }
        if Digest::from_hex(&w.edit).ok() != Some(*edit) {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                "the witness does not bind this canonical edit",
            ));
        }
        if w.new_revision != w.base_revision.saturating_add(1) {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                "the new revision must follow the base revision",
            ));
        }
        let pid = self.goals.get(parent).map(|g| g.id.as_str()).unwrap_or("");
        if w.parent != pid {
            return Err(deny(
                ReasonCode::WITNESS_MISMATCH,
                format!("the witness names parent `{}`", w.parent),
            ));
        }
        // W7: versions current.
        let prev = self.goals.get(parent).map_or(0, |g| g.revision);
        if w.base_revision != self.versions.graph
            || w.policy_version != self.versions.policy
            || w.state_version != self.versions.state
            || w.parent_revision != prev
        {
            return Err(reauth(format!(
                "witness planned at graph {} policy {} state {} parent revision {}; current {} {} {} {}",
                w.base_revision,
                w.policy_version,
                w.state_version,
                w.parent_revision,
                self.versions.graph,
                self.versions.policy,
                self.versions.state,
                prev
            )));
        }
        Ok(())
    }

    /// W3–W6 for an edit below `parent`, with `frames_extra` the edit's own frames.
    fn check_edit(&self, parent: usize, e: &Edit) -> Result<(), Failure> {
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        let p = self
            .goals
            .get(parent)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "parent"))?;
        // K_Δ = child · completion: every composed maximal trace (the child's own traces when
        // the completion is empty, the common case, without copying them).
        let only_empty = e.completion.len() == 1 && e.completion.first().is_some_and(Vec::is_empty);
        let built: Vec<Trace>;
        let composed: &[Trace] = if only_empty {
            &e.residual
        } else {
            let mut v = Vec::with_capacity(e.residual.len() * e.completion.len());
            for u in &e.residual {
                for c in &e.completion {
                    let mut x = u.clone();
                    x.extend_from_slice(c);
                    if x.len() > limits::EFFECTS * 2 {
                        return Err(indeterminate(
                            ReasonCode::PROFILE_LIMIT,
                            "composed continuation too long",
                        ));
                    }
                    v.push(x);
                }
            }
            built = v;
            &built
        };
        // W3: K_Δ ⊆ K_h (residual) for every ancestor on the path (the root goal's residual is
        // t⁻¹L_C), and the completion binds to the parent's residual: D_Δ ⊆ D_p.
        let path = self.path_of(parent);
        for &h in &path {
            let g = self
                .goals
                .get(h)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "ancestor"))?;
            let m = &g.residual;
            for x in composed {
                if !in_prefix_closure(m, x) {
                    return Err(deny(
                        ReasonCode::TRACE_EXPANSION,
                        format!(
                            "`{}` is not in the residual language of `{}`",
                            self.show_trace(x),
                            g.id
                        ),
                    ));
                }
            }
        }
        let pm = &p.residual;
        for x in composed {
            if pm.binary_search(x).is_err() {
                return Err(deny(
                    ReasonCode::TRACE_EXPANSION,
                    format!(
                        "`{}` does not complete the parent `{}`'s residual work",
                        self.show_trace(x),
                        p.id
                    ),
                ));
            }
        }
        // W4: forbidden states, frames on the path and the edit's own, policy.
        let mut frames: Vec<&Pred> = e.frames.iter().collect();
        for &h in &path {
            if let Some(g) = self.goals.get(h) {
                frames.extend(g.frames.iter());
            }
        }
        let ends = self.safe_future_ends(&self.state, composed, &frames)?;
        // W5: resources and obligations.
        if let Some(r) = e
            .resources
            .iter()
            .find(|r| !p.resources.contains(*r) || !c.resources.contains(*r))
        {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` is outside the parent's or the root's envelope"),
            ));
        }
        if let Some(o) = e.obligations.iter().find(|o| !p.obligations.contains(*o)) {
            return Err(deny(
                ReasonCode::OBLIGATION_MINTED,
                format!("`{o}` is not an obligation of the parent"),
            ));
        }
        for o in &p.obligations {
            if e.obligations.contains(o) {
                continue;
            }
            let evidenced = e.discharged.contains(o)
                && c.discharge
                    .get(o)
                    .is_some_and(|pred| pred.holds(&self.state));
            if !evidenced {
                return Err(deny(
                    ReasonCode::OBLIGATION_DROPPED,
                    format!("`{o}` dropped without trusted discharge evidence"),
                ));
            }
        }
        // W6: success refinement in the common closing state. Composed trace `i * |completion|`
        // starts with child trace `i`; with an empty completion it is that trace.
        for (i, u) in e.residual.iter().enumerate() {
            let s_child = match ends.get(i).filter(|_| only_empty) {
                Some(st) => st.clone(),
                None => self
                    .state_after(&self.state, u)
                    .ok_or_else(|| deny(ReasonCode::EFFECT_NOT_APPLICABLE, "child trace"))?,
            };
            if !e.closing.holds(&s_child) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!(
                        "the goal's own closing predicate fails after `{}`",
                        self.show_trace(u)
                    ),
                ));
            }
        }
        for (x, s_end) in composed.iter().zip(&ends) {
            if !p.closing.holds(s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!(
                        "`{}` closes without the parent `{}`'s closing predicate",
                        self.show_trace(x),
                        p.id
                    ),
                ));
            }
            if p.parent.is_none() && !c.closing.holds(s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    "the root's closing predicate fails",
                ));
            }
        }
        Ok(())
    }

    fn show_trace(&self, t: &[u32]) -> String {
        t.iter()
            .map(|e| self.domain.name(*e))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn parse_edit(&self, g: &GoalSpec) -> Result<Edit, Failure> {
        Ok(Edit {
            residual: sorted(self.parse_traces(&g.traces)?),
            completion: self.parse_traces(&g.completion)?,
            closing: self.parse_pred(&g.closing)?,
            frames: g
                .frames
                .iter()
                .map(|f| self.parse_pred(f))
                .collect::<Result<Vec<_>, _>>()?,
            resources: g.resources.iter().cloned().collect(),
            obligations: g.obligations.iter().cloned().collect(),
            discharged: g.discharged.clone(),
        })
    }

    fn runnable_or_resumable(&self) -> Result<(), Failure> {
        match self.root {
            Some(RootState::Runnable) => Ok(()),
            Some(RootState::Suspended) => {
                // A suspended root may resume only by an edit when no non-root goal is active.
                if self.any_goal_active() {
                    Err(reauth("the root is suspended; reauthorize the active path"))
                } else {
                    Ok(())
                }
            }
            _ => Err(deny(ReasonCode::ROOT_CLOSED, "the root is closed")),
        }
    }

    fn descendants_resolved(&self, i: usize) -> bool {
        !self
            .goals
            .iter()
            .enumerate()
            .any(|(j, g)| j != i && g.state == GoalState::Active && self.path_of(j).contains(&i))
    }

    /// proposeGoal, or replaceGoal when `old` is given.
    fn propose(
        &mut self,
        g: &GoalSpec,
        w: &WitnessClaim,
        old: Option<&String>,
    ) -> Result<Digest, Failure> {
        Self::check_goal_limits(g)?;
        if self.goals.len() >= limits::GOALS {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} goals held; the profile allows {}",
                    self.goals.len(),
                    limits::GOALS
                ),
            ));
        }
        // W2: structure and lineage.
        let parent = *self
            .by_id
            .get(&g.parent)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("parent `{}`", g.parent)))?;
        if self.goals.get(parent).map(|p| p.state) != Some(GoalState::Active) {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{}` is not active", g.parent),
            ));
        }
        let old_ix = match old {
            Some(o) => {
                let i = *self
                    .by_id
                    .get(o)
                    .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{o}`")))?;
                let og = self
                    .goals
                    .get(i)
                    .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "old"))?;
                if og.parent != Some(parent) {
                    return Err(deny(
                        ReasonCode::WITNESS_MISMATCH,
                        "a replacement keeps the replaced goal's parent",
                    ));
                }
                if !matches!(og.state, GoalState::Active | GoalState::Cancelled) {
                    return Err(deny(
                        ReasonCode::NOT_REPLACEABLE_GOAL,
                        format!("`{o}` is {:?}", og.state),
                    ));
                }
                if !self.descendants_resolved(i) {
                    return Err(deny(
                        ReasonCode::DESCENDANTS_UNRESOLVED,
                        format!("`{o}` has active descendants"),
                    ));
                }
                Some(i)
            }
            None => None,
        };
        let same_id_as_old = old.is_some_and(|o| *o == g.id);
        if self.by_id.contains_key(&g.id) && !same_id_as_old {
            return Err(deny(
                ReasonCode::DUPLICATE_GOAL,
                format!("`{}` exists", g.id),
            ));
        }
        let digest = edit_digest(g);
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        let edit = self.parse_edit(g)?;
        self.check_edit(parent, &edit)?;
        // Allow: install atomically.
        let revision = match old_ix {
            Some(i) => {
                let r = self.goals.get(i).map_or(1, |o| o.revision + 1);
                if let Some(o) = self.goals.get_mut(i) {
                    o.state = GoalState::Replaced;
                }
                r
            }
            None => 1,
        };
        self.install(&g.id, parent, revision, edit, digest);
        Ok(digest)
    }

    /// Installs an accepted edit as the active goal `id` below `parent`: graph revision and the
    /// parent's revision advance, the goal's path becomes the witness, the root is runnable.
    fn install(&mut self, id: &str, parent: usize, revision: u64, edit: Edit, digest: Digest) {
        self.versions.graph += 1;
        let ix = self.goals.len();
        self.goals.push(Goal {
            id: id.to_string(),
            parent: Some(parent),
            revision,
            state: GoalState::Active,
            residual: edit.residual,
            closing: edit.closing,
            resources: edit.resources,
            obligations: edit.obligations,
            frames: edit.frames,
            executor: None,
            versions: self.versions,
            digest,
        });
        self.by_id.insert(id.to_string(), ix);
        if let Some(p) = self.goals.get_mut(parent) {
            p.revision += 1;
        }
        self.witness = Some(Witness {
            path: self.path_of(ix),
            versions: self.versions,
        });
        self.root = Some(RootState::Runnable);
    }

    fn delegate(
        &mut self,
        goal: &str,
        resources: &[String],
        root: &str,
        w: &WitnessClaim,
        worker: &str,
    ) -> Result<(), Failure> {
        if resources.len() > limits::ARRAY {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                "too many resources",
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        if root != c.spec.root {
            return Err(deny(
                ReasonCode::CROSS_ROOT,
                format!("delegation into root `{root}`"),
            ));
        }
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.state != GoalState::Active || g.parent.is_none() {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not an active non-root goal"),
            ));
        }
        if worker.trim().is_empty() {
            return Err(deny(
                ReasonCode::SCHEMA_INVALID,
                "a delegation binds a worker identity",
            ));
        }
        let parent = g.parent.unwrap_or(0);
        let spec = serde_json::json!({"goal": goal, "resources": resources, "worker": worker});
        let digest = Digest::of(
            tag::COMPONENT,
            &[b"contract-delegation\0", spec.to_string().as_bytes()],
        );
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        if let Some(r) = resources.iter().find(|r| !g.resources.contains(*r)) {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` is not the delegated goal's to give"),
            ));
        }
        // The delegation selects the goal's path as the new witness: it must still be one (a
        // sibling may have advanced the parent's work since the goal was authorized).
        self.path_valid(i)?;
        self.versions.graph += 1;
        let v = self.versions;
        if let Some(g) = self.goals.get_mut(i) {
            g.executor = Some(worker.to_string());
            g.resources = resources.iter().cloned().collect();
            g.revision += 1;
            g.versions = v;
        }
        if let Some(p) = self.goals.get_mut(parent) {
            p.revision += 1;
        }
        self.witness = Some(Witness {
            path: self.path_of(i),
            versions: v,
        });
        self.root = Some(RootState::Runnable);
        Ok(())
    }

    fn join(
        &mut self,
        joined: &GoalSpec,
        precedence: &[(String, String)],
        sources: &[String],
        w: &WitnessClaim,
    ) -> Result<Digest, Failure> {
        if sources.len() > limits::JOIN_SOURCES {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} join sources; the profile allows {}",
                    sources.len(),
                    limits::JOIN_SOURCES
                ),
            ));
        }
        if precedence.len() > limits::PRECEDENCE {
            return Err(indeterminate(
                ReasonCode::PROFILE_LIMIT,
                format!(
                    "{} precedence entries; the profile allows {}",
                    precedence.len(),
                    limits::PRECEDENCE
                ),
            ));
        }
        Self::check_goal_limits(joined)?;
        if self.goals.len() >= limits::GOALS {
            return Err(indeterminate(ReasonCode::PROFILE_LIMIT, "goal population"));
        }
        let parent = *self.by_id.get(&joined.parent).ok_or_else(|| {
            deny(
                ReasonCode::UNKNOWN_GOAL,
                format!("parent `{}`", joined.parent),
            )
        })?;
        let mut ixs = Vec::new();
        for s in sources {
            let i = *self
                .by_id
                .get(s)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{s}`")))?;
            let g = self
                .goals
                .get(i)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "source"))?;
            if g.state != GoalState::Active || g.parent != Some(parent) || ixs.contains(&i) {
                return Err(deny(
                    ReasonCode::JOIN_NOT_SIBLINGS,
                    format!(
                        "`{s}` is not a distinct active sibling under `{}`",
                        joined.parent
                    ),
                ));
            }
            ixs.push(i);
        }
        if ixs.len() < 2 {
            return Err(deny(
                ReasonCode::JOIN_NOT_SIBLINGS,
                "a join names at least two siblings",
            ));
        }
        if self.by_id.contains_key(&joined.id) {
            return Err(deny(
                ReasonCode::DUPLICATE_GOAL,
                format!("`{}` exists", joined.id),
            ));
        }
        let digest = edit_digest(joined);
        self.check_witness(w, parent, &digest)?;
        self.runnable_or_resumable()?;
        let mut prec = Vec::new();
        for (a, b) in precedence {
            let ia = sources.iter().position(|s| s == a);
            let ib = sources.iter().position(|s| s == b);
            match (ia, ib) {
                (Some(x), Some(y)) => prec.push((x, y)),
                _ => {
                    return Err(deny(
                        ReasonCode::JOIN_NOT_SIBLINGS,
                        format!("precedence `{a}` before `{b}` names a non-source"),
                    ));
                }
            }
        }
        let components: Vec<Vec<Trace>> = ixs
            .iter()
            .map(|i| {
                self.goals
                    .get(*i)
                    .map(|g| g.residual.clone())
                    .unwrap_or_default()
            })
            .collect();
        let composed = match compose(&components, &prec) {
            Ok(c) => c,
            Err(ComposeError::ProfileLimit(what)) => {
                return Err(indeterminate(
                    ReasonCode::PROFILE_LIMIT,
                    format!("join {what} over the guard"),
                ));
            }
            Err(ComposeError::BadPrecedence) => {
                return Err(deny(
                    ReasonCode::JOIN_NOT_SIBLINGS,
                    "the precedence has a cycle",
                ));
            }
        };
        let edit = self.parse_edit(joined)?;
        if edit.residual != composed {
            return Err(deny(
                ReasonCode::JOIN_COMPOSITION,
                format!(
                    "{} continuations supplied; the complete composition has {}",
                    edit.residual.len(),
                    composed.len()
                ),
            ));
        }
        // Resources of the joined goal cover no more than the sources held together.
        let union: BTreeSet<String> = ixs
            .iter()
            .filter_map(|i| self.goals.get(*i))
            .flat_map(|g| g.resources.iter().cloned())
            .collect();
        if let Some(r) = edit.resources.iter().find(|r| !union.contains(*r)) {
            return Err(deny(
                ReasonCode::RESOURCE_EXPANSION,
                format!("`{r}` was held by no source"),
            ));
        }
        self.check_edit(parent, &edit)?;
        for i in &ixs {
            if let Some(g) = self.goals.get_mut(*i) {
                g.state = GoalState::Joined;
            }
        }
        self.install(&joined.id, parent, 1, edit, digest);
        Ok(digest)
    }

    fn current_path(&self) -> Result<&Witness, Failure> {
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
    fn effect_ok(&self, leaf: usize, e: u32) -> Result<State, Failure> {
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

    fn authorize(&mut self, goal: &str, effect: &str) -> Result<u64, Failure> {
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

    fn commit(&mut self, reservation: u64, effect: &str) -> Result<(), Failure> {
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

    fn change_version(
        &mut self,
        policy: Option<&[PolicyRule]>,
        observe: Option<&BTreeMap<String, serde_json::Value>>,
    ) -> Result<(), Failure> {
        if self.contract.is_none() {
            return Err(deny(ReasonCode::NO_ROOT, "no contract"));
        }
        if self.root == Some(RootState::Closed) {
            return Err(deny(ReasonCode::ROOT_CLOSED, "the root is closed"));
        }
        // Validate everything first: a refused change leaves nothing changed.
        let new_policy = match policy {
            Some(p) => Some(self.build_policy(p)?),
            None => None,
        };
        let new_state = match observe {
            Some(o) => Some(
                self.domain
                    .observe(&self.state, o)
                    .map_err(|e| deny(ReasonCode::SCHEMA_INVALID, e.0))?,
            ),
            None => None,
        };
        if let Some(p) = new_policy {
            self.policy = p;
            self.versions.policy += 1;
            if let (Some(c), Some(p)) = (self.contract.as_mut(), policy) {
                c.spec.policy = p.to_vec();
            }
        }
        if let Some(s) = new_state {
            self.state = s;
            self.versions.state += 1;
        }
        self.root = Some(RootState::Suspended);
        self.witness = None;
        Ok(())
    }

    fn reauthorize(&mut self, goal: &str) -> Result<(), Failure> {
        let leaf = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(leaf)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.state != GoalState::Active {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not active"),
            ));
        }
        if leaf == 0 && self.any_goal_active() {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "the root path is only selectable when no non-root goal is active",
            ));
        }
        if leaf != 0 && !self.descendants_resolved(leaf) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "reauthorize a leaf",
            ));
        }
        let path = self.path_valid(leaf)?;
        self.witness = Some(Witness {
            path,
            versions: self.versions,
        });
        self.root = Some(RootState::Runnable);
        Ok(())
    }

    /// Rechecks the complete path from `leaf` at current versions: the leaf's residual
    /// continuations are included in every ancestor's, safe from the current state under the
    /// current policy and the path's frames, and close the leaf. Returns the path.
    fn path_valid(&self, leaf: usize) -> Result<Vec<usize>, Failure> {
        let g = self
            .goals
            .get(leaf)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        let path = self.path_of(leaf);
        let mut frames: Vec<&Pred> = Vec::new();
        for &h in &path {
            if let Some(x) = self.goals.get(h) {
                frames.extend(x.frames.iter());
            }
        }
        for &h in path.iter().skip(1) {
            let a = self
                .goals
                .get(h)
                .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "ancestor"))?;
            let m = &a.residual;
            for x in &g.residual {
                if !in_prefix_closure(m, x) {
                    return Err(deny(
                        ReasonCode::TRACE_EXPANSION,
                        format!(
                            "`{}` left `{}`'s residual language",
                            self.show_trace(x),
                            a.id
                        ),
                    ));
                }
            }
        }
        self.safe_future(&self.state, &g.residual, &frames)?;
        for u in &g.residual {
            let s_end = self
                .state_after(&self.state, u)
                .ok_or_else(|| deny(ReasonCode::EFFECT_NOT_APPLICABLE, "residual"))?;
            if !g.closing.holds(&s_end) {
                return Err(deny(
                    ReasonCode::SUCCESS_NOT_REFINED,
                    format!("`{}` cannot close after `{}`", g.id, self.show_trace(u)),
                ));
            }
        }
        Ok(path)
    }

    fn cancel(&mut self, goal: &str) -> Result<(), Failure> {
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if g.parent.is_none() || g.state != GoalState::Active {
            return Err(deny(
                ReasonCode::PARENT_NOT_ACTIVE,
                format!("`{goal}` is not an active non-root goal"),
            ));
        }
        if !self.descendants_resolved(i) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                format!("`{goal}` has active descendants"),
            ));
        }
        if let Some(g) = self.goals.get_mut(i) {
            g.state = GoalState::Cancelled;
        }
        self.versions.graph += 1;
        self.witness = None;
        Ok(())
    }

    fn close_goal(&mut self, goal: &str) -> Result<(), Failure> {
        let i = *self
            .by_id
            .get(goal)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, format!("`{goal}`")))?;
        if i == 0 {
            return Err(deny(
                ReasonCode::SCHEMA_INVALID,
                "close the root with closeRoot",
            ));
        }
        let w = self.current_path()?;
        if w.path.first() != Some(&i) {
            return Err(deny(
                ReasonCode::NOT_SELECTED_PATH,
                "close a goal under its current witness",
            ));
        }
        let g = self
            .goals
            .get(i)
            .ok_or_else(|| deny(ReasonCode::UNKNOWN_GOAL, "goal"))?;
        if !self.descendants_resolved(i) {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                format!("`{goal}` has active descendants"),
            ));
        }
        if !g.residual.iter().any(Vec::is_empty) {
            return Err(deny(
                ReasonCode::NOT_COMPLETE,
                format!("`{goal}`'s executed suffix is not a closing trace"),
            ));
        }
        if !g.closing.holds(&self.state) {
            return Err(deny(
                ReasonCode::CLOSING_PREDICATE_FALSE,
                format!("`{goal}`'s closing predicate fails"),
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        self.obligations_discharged(c, g)?;
        if let Some(g) = self.goals.get_mut(i) {
            g.state = GoalState::Closed;
        }
        self.versions.graph += 1;
        self.witness = None;
        Ok(())
    }

    /// Whether any goal other than the root goal is active.
    fn any_goal_active(&self) -> bool {
        self.goals
            .iter()
            .skip(1)
            .any(|g| g.state == GoalState::Active)
    }

    /// Every obligation of `g` has its trusted discharge evidence in the current state.
    fn obligations_discharged(&self, c: &Contract, g: &Goal) -> Result<(), Failure> {
        match g
            .obligations
            .iter()
            .find(|o| !c.discharge.get(*o).is_some_and(|p| p.holds(&self.state)))
        {
            Some(o) => Err(deny(
                ReasonCode::OBLIGATIONS_OPEN,
                format!("`{o}` is not discharged"),
            )),
            None => Ok(()),
        }
    }

    fn close_root(&mut self) -> Result<(), Failure> {
        if self.root != Some(RootState::Runnable) {
            return Err(Failure {
                verdict: Verdict::Reauthorize,
                reason: ReasonCode::ROOT_SUSPENDED,
                detail: "close the root from a runnable configuration".into(),
            });
        }
        if self.any_goal_active() {
            return Err(deny(
                ReasonCode::DESCENDANTS_UNRESOLVED,
                "a goal is still active",
            ));
        }
        let c = self
            .contract
            .as_ref()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "no contract"))?;
        if c.traces.binary_search(&self.trace).is_err() {
            return Err(deny(
                ReasonCode::TRACE_NOT_PERMITTED,
                format!(
                    "`{}` is not a permitted completion",
                    self.show_trace(&self.trace)
                ),
            ));
        }
        let root_goal = self
            .goals
            .first()
            .ok_or_else(|| deny(ReasonCode::NO_ROOT, "root goal"))?;
        self.obligations_discharged(c, root_goal)?;
        if !c.closing.holds(&self.state) {
            return Err(deny(
                ReasonCode::CLOSING_PREDICATE_FALSE,
                "Q_C does not hold",
            ));
        }
        self.root = Some(RootState::Closed);
        self.witness = None;
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

    /// A witness claim for an edit of `goal` below `parent`, at current versions (a helper for
    /// planners and tests: the checker still verifies every field).
    pub fn witness_for(&self, parent: &str, edit: &Digest) -> WitnessClaim {
        let (root, epoch) = self
            .contract
            .as_ref()
            .map_or((String::new(), 0), |c| (c.spec.root.clone(), c.spec.epoch));
        WitnessClaim {
            base_revision: self.versions.graph,
            edit: edit.to_hex(),
            epoch,
            new_revision: self.versions.graph + 1,
            parent: parent.to_string(),
            parent_revision: self.goal(parent).map_or(0, |g| g.revision),
            policy_version: self.versions.policy,
            root,
            state_version: self.versions.state,
        }
    }
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
            include_str!("../../../catalogs/contract-uav.toml"),
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
}
