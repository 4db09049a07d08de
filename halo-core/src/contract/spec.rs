//! The typed requests of the mission-contract protocol, as JSON.
//!
//! Field order in every struct is alphabetical so that serde's output is canonical JSON (keys
//! sorted, no whitespace): an edit's digest is SHA-256 over that text behind a domain tag, and an
//! independent checker can recompute it from the receipt alone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One current-policy predicate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicyRule {
    /// No future trace may contain this effect.
    DenyEffect {
        /// Effect text, e.g. `photograph(t3)`.
        effect: String,
    },
    /// Committed plus future trace length at most `max`.
    MaxTraceLen {
        /// Effects.
        max: usize,
    },
    /// No reachable prefix state may satisfy this conjunction.
    Forbid {
        /// Conditions.
        when: Vec<String>,
    },
}

/// A root task contract `C = (ρ, η, s0, L_C, B_C, Q_C, R_C, O_C)`, supplied by the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractSpec {
    /// `Q_C`: the required root-closing predicate (a conjunction).
    pub closing: Vec<String>,
    /// Trusted discharge evidence: obligation → a predicate that must hold in the state.
    #[serde(default)]
    pub discharge: BTreeMap<String, Vec<String>>,
    /// The registered domain's id.
    pub domain: String,
    /// `η`: the immutable contract epoch.
    pub epoch: u64,
    /// `B_C`: forbidden states, a union of conjunctions.
    #[serde(default)]
    pub forbidden: Vec<Vec<String>>,
    /// `s0`: every variable's initial value.
    pub initial: BTreeMap<String, serde_json::Value>,
    /// `O_C`: unresolved obligations.
    #[serde(default)]
    pub obligations: Vec<String>,
    /// The initial policy (version 1).
    #[serde(default)]
    pub policy: Vec<PolicyRule>,
    /// `R_C`: the resource envelope.
    #[serde(default)]
    pub resources: Vec<String>,
    /// `ρ`: the authorization-root id.
    pub root: String,
    /// `L_C`: the permitted trace language as its maximal traces (prefix closure implicit).
    pub traces: Vec<Vec<String>>,
}

/// A proposed goal node: its closing predicate, maximal continuations, resources, obligations,
/// frames; plus the parent's residual work after it (the completion component).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalSpec {
    /// `Q_g`.
    #[serde(default)]
    pub closing: Vec<String>,
    /// The parent's residual work after this goal closes, as maximal traces (`[[]]` when none).
    #[serde(default = "empty_completion")]
    pub completion: Vec<Vec<String>>,
    /// Parent obligations this edit claims are discharged; each needs trusted evidence.
    #[serde(default)]
    pub discharged: Vec<String>,
    /// `F_g`: frame predicates that must hold on every reachable prefix state.
    #[serde(default)]
    pub frames: Vec<Vec<String>>,
    /// Goal id.
    pub id: String,
    /// `O_g`: unresolved obligations.
    #[serde(default)]
    pub obligations: Vec<String>,
    /// Containment parent.
    pub parent: String,
    /// `R_g`.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Free text: audit metadata only, never an authorization fact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `M_g`: maximal continuations (`K_g` is their prefix closure; `D_g` the traces themselves).
    pub traces: Vec<Vec<String>>,
}

fn empty_completion() -> Vec<Vec<String>> {
    vec![Vec::new()]
}

/// A transition witness `w = ⟨ρ, η, κ_base, κ_new, ν_P, ν_S, i_p, k_p, h(Δ), Π⟩`; the proof
/// evidence `Π` is the edit itself, which the checker recomputes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessClaim {
    /// `κ_base`: the graph revision the edit was planned on.
    pub base_revision: u64,
    /// `h(Δ)`: hex SHA-256 of the canonical edit.
    pub edit: String,
    /// `η`.
    pub epoch: u64,
    /// `κ_new`: must be `κ_base + 1`.
    pub new_revision: u64,
    /// `i_p`: the parent (for a join: the common parent).
    pub parent: String,
    /// `k_p`: the parent's revision.
    pub parent_revision: u64,
    /// `ν_P`.
    pub policy_version: u64,
    /// `ρ`.
    pub root: String,
    /// `ν_S`.
    pub state_version: u64,
}

/// Who is calling. Only the operator approves contracts and changes policy; only the operator
/// or a trusted provider reports state; the agent does everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The principal.
    Operator,
    /// A trusted state provider.
    Provider,
    /// The untrusted planner.
    Agent,
}

/// The twelve operations (Table 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Create the root and its initial goal.
    RegisterRoot {
        /// The principal who approved the contract.
        approved_by: String,
        /// The contract.
        contract: ContractSpec,
    },
    /// A proposed child becomes active.
    ProposeGoal {
        /// The child.
        goal: GoalSpec,
        /// Its witness.
        witness: WitnessClaim,
    },
    /// Replace an active or cancelled goal with a new revision.
    ReplaceGoal {
        /// The replacement.
        goal: GoalSpec,
        /// The goal replaced.
        old: String,
        /// Its witness.
        witness: WitnessClaim,
    },
    /// Assign an active goal to a worker with attenuated resources.
    DelegateGoal {
        /// The goal.
        goal: String,
        /// Resources the worker gets (a subset of the goal's).
        resources: Vec<String>,
        /// The root the delegation claims (must be this root).
        root: String,
        /// Its witness.
        witness: WitnessClaim,
        /// The worker.
        worker: String,
    },
    /// Compose same-root siblings into one joined goal.
    JoinGoals {
        /// The joined goal; its `traces` must be the complete composition.
        joined: GoalSpec,
        /// Precedence pairs among the sources, by goal id.
        precedence: Vec<(String, String)>,
        /// The sibling goals joined.
        sources: Vec<String>,
        /// Its witness.
        witness: WitnessClaim,
    },
    /// Reserve the next normalized effect on the current path.
    AuthorizeEffect {
        /// The effect, e.g. `goto(wp1)`.
        effect: String,
        /// The leaf goal of the current witness path.
        goal: String,
    },
    /// Commit a reserved effect.
    CommitEffect {
        /// The effect as executed (must equal the reserved one, byte for byte once normalized).
        effect: String,
        /// Idempotency key: an exact retry returns the retained receipt.
        key: String,
        /// The reservation.
        reservation: u64,
    },
    /// Advance the policy or state version and suspend the root.
    ChangeVersion {
        /// A new policy (policy change), or none.
        #[serde(default)]
        policy: Option<Vec<PolicyRule>>,
        /// Observed variable values (state change), or none.
        #[serde(default)]
        observe: Option<BTreeMap<String, serde_json::Value>>,
    },
    /// Recheck a complete path at current versions and resume.
    Reauthorize {
        /// The path's leaf goal.
        goal: String,
    },
    /// Cancel a non-root goal.
    CancelGoal {
        /// The goal.
        goal: String,
    },
    /// Close a goal whose continuation completed.
    CloseGoal {
        /// The goal.
        goal: String,
    },
    /// Close the root.
    CloseRoot {},
}

impl Op {
    /// The operation's name as Table 2 spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::RegisterRoot { .. } => "registerRoot",
            Op::ProposeGoal { .. } => "proposeGoal",
            Op::ReplaceGoal { .. } => "replaceGoal",
            Op::DelegateGoal { .. } => "delegateGoal",
            Op::JoinGoals { .. } => "joinGoals",
            Op::AuthorizeEffect { .. } => "authorizeEffect",
            Op::CommitEffect { .. } => "commitEffect",
            Op::ChangeVersion { .. } => "changeVersion",
            Op::Reauthorize { .. } => "reauthorize",
            Op::CancelGoal { .. } => "cancelGoal",
            Op::CloseGoal { .. } => "closeGoal",
            Op::CloseRoot {} => "closeRoot",
        }
    }
}

/// An operation with its caller, as the monitor receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Who calls.
    pub caller: Role,
    /// What.
    pub op: Op,
}
