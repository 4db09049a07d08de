//! Workflows: an agent-side script of contract steps, with the witnesses filled in.
//!
//! A workflow is what a planner would send over a flight: edits, effects, observations, policy
//! changes and closures, in order. The [`Runner`] turns each [`Step`] into one or two monitor
//! [`Request`]s, computing witnesses at current versions unless a step names an earlier `plan`
//! snapshot (which is how a stale witness is expressed). It is used by the CLI
//! (`halo-gateway contract run`) and by the evidence suites; it holds no authority of its own —
//! every decision is the monitor's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Versions;
use super::monitor::{Decision, Monitor, Verdict, delegation_digest, edit_digest};
use super::spec::{ContractSpec, GoalSpec, Op, PolicyRule, Request, Role, WitnessClaim};
use crate::digest::Digest;
use crate::reason::ReasonCode;

/// One workflow step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Propose a child goal.
    Propose {
        /// The goal.
        goal: GoalSpec,
        /// A `plan` label whose versions the witness uses (default: current).
        #[serde(default)]
        witness: Option<String>,
        /// Marks a step that realizes a drift (evidence labelling only).
        #[serde(default)]
        drift: bool,
    },
    /// Replace a goal.
    Replace {
        /// The goal replaced.
        old: String,
        /// The replacement.
        goal: GoalSpec,
        /// As for `propose`.
        #[serde(default)]
        witness: Option<String>,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Delegate a goal to a worker.
    Delegate {
        /// The goal.
        goal: String,
        /// The worker's resources.
        resources: Vec<String>,
        /// The root the delegation claims.
        root: String,
        /// The worker.
        worker: String,
        /// As for `propose`.
        #[serde(default)]
        witness: Option<String>,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Join siblings.
    Join {
        /// The joined goal.
        joined: GoalSpec,
        /// Precedence pairs.
        precedence: Vec<(String, String)>,
        /// Sources.
        sources: Vec<String>,
        /// As for `propose`.
        #[serde(default)]
        witness: Option<String>,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Authorize and commit one effect.
    Effect {
        /// The leaf goal.
        goal: String,
        /// The effect.
        effect: String,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// A trusted provider reports state.
    Observe {
        /// Variable values.
        values: BTreeMap<String, serde_json::Value>,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// The operator changes the policy.
    Policy {
        /// The new rules.
        rules: Vec<PolicyRule>,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Recheck a path.
    Reauthorize {
        /// The leaf.
        goal: String,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Cancel a goal.
    Cancel {
        /// The goal.
        goal: String,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Close a goal.
    Close {
        /// The goal.
        goal: String,
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Close the root.
    CloseRoot {
        /// As for `propose`.
        #[serde(default)]
        drift: bool,
    },
    /// Remember the current versions under a label (the agent starts planning here).
    Plan {
        /// The label.
        label: String,
    },
}

impl Step {
    /// Whether the step is labelled as realizing a drift.
    pub fn is_drift(&self) -> bool {
        match self {
            Step::Propose { drift, .. }
            | Step::Replace { drift, .. }
            | Step::Delegate { drift, .. }
            | Step::Join { drift, .. }
            | Step::Effect { drift, .. }
            | Step::Observe { drift, .. }
            | Step::Policy { drift, .. }
            | Step::Reauthorize { drift, .. }
            | Step::Cancel { drift, .. }
            | Step::Close { drift, .. }
            | Step::CloseRoot { drift } => *drift,
            Step::Plan { .. } => false,
        }
    }
}

/// The outcome of one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepOutcome {
    /// The deciding verdict (for an effect: the commit's, or the authorization's if it failed).
    pub verdict: Verdict,
    /// Its reason.
    pub reason: Option<ReasonCode>,
    /// Its message.
    pub detail: String,
}

impl StepOutcome {
    /// True when the step took effect.
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }

    fn of(d: &Decision) -> StepOutcome {
        StepOutcome {
            verdict: d.verdict,
            reason: d.reason,
            detail: d.detail.clone(),
        }
    }
}

#[derive(Clone, Debug)]
struct Snapshot {
    versions: Versions,
    revisions: BTreeMap<String, u64>,
}

/// A contract workflow file: `{"approved_by", "contract", "steps"}` (docs/contracts.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowFile {
    /// The approving principal.
    pub approved_by: String,
    /// The root contract.
    pub contract: ContractSpec,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// Drives a monitor through a workflow on behalf of an agent, an operator and a provider.
pub struct Runner {
    monitor: Monitor,
    plans: BTreeMap<String, Snapshot>,
    key_prefix: String,
    steps: u64,
}

impl Runner {
    /// A runner over `monitor`; idempotency keys are `{key_prefix}/{step}`.
    pub fn new(monitor: Monitor, key_prefix: &str) -> Runner {
        Runner {
            monitor,
            plans: BTreeMap::new(),
            key_prefix: key_prefix.to_string(),
            steps: 0,
        }
    }

    /// The monitor.
    pub fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// The monitor, mutably (to drain receipts).
    pub fn monitor_mut(&mut self) -> &mut Monitor {
        &mut self.monitor
    }

    /// Registers the root contract as the operator.
    pub fn register(&mut self, contract: &ContractSpec, approved_by: &str) -> StepOutcome {
        let d = self.monitor.handle(Request {
            caller: Role::Operator,
            op: Op::RegisterRoot {
                approved_by: approved_by.to_string(),
                contract: contract.clone(),
            },
        });
        StepOutcome::of(&d)
    }

    fn witness(
        &self,
        label: Option<&String>,
        parent: &str,
        edit: &Digest,
    ) -> Result<WitnessClaim, StepOutcome> {
        let mut w = self.monitor.witness_for(parent, edit);
        if let Some(l) = label {
            let snap = self.plans.get(l).ok_or_else(|| StepOutcome {
                verdict: Verdict::Deny,
                reason: Some(ReasonCode::SCHEMA_INVALID),
                detail: format!("no plan labelled `{l}`"),
            })?;
            w.base_revision = snap.versions.graph;
            w.new_revision = snap.versions.graph + 1;
            w.policy_version = snap.versions.policy;
            w.state_version = snap.versions.state;
            w.parent_revision = snap.revisions.get(parent).copied().unwrap_or(0);
        }
        Ok(w)
    }

    fn agent(&mut self, op: Op) -> StepOutcome {
        StepOutcome::of(&self.monitor.handle(Request {
            caller: Role::Agent,
            op,
        }))
    }

    /// Runs one step.
    pub fn step(&mut self, step: &Step) -> StepOutcome {
        self.steps += 1;
        match self.step_inner(step) {
            Ok(o) | Err(o) => o,
        }
    }

    fn step_inner(&mut self, step: &Step) -> Result<StepOutcome, StepOutcome> {
        Ok(match step {
            Step::Propose { goal, witness, .. } => {
                let w = self.witness(witness.as_ref(), &goal.parent, &edit_digest(goal))?;
                self.agent(Op::ProposeGoal {
                    goal: goal.clone(),
                    witness: w,
                })
            }
            Step::Replace {
                old, goal, witness, ..
            } => {
                let w = self.witness(witness.as_ref(), &goal.parent, &edit_digest(goal))?;
                self.agent(Op::ReplaceGoal {
                    goal: goal.clone(),
                    old: old.clone(),
                    witness: w,
                })
            }
            Step::Delegate {
                goal,
                resources,
                root,
                worker,
                witness,
                ..
            } => {
                let parent = self.monitor.parent_of(goal).unwrap_or_default();
                let w = self.witness(
                    witness.as_ref(),
                    &parent,
                    &delegation_digest(goal, resources, worker),
                )?;
                self.agent(Op::DelegateGoal {
                    goal: goal.clone(),
                    resources: resources.clone(),
                    root: root.clone(),
                    witness: w,
                    worker: worker.clone(),
                })
            }
            Step::Join {
                joined,
                precedence,
                sources,
                witness,
                ..
            } => {
                let w = self.witness(witness.as_ref(), &joined.parent, &edit_digest(joined))?;
                self.agent(Op::JoinGoals {
                    joined: joined.clone(),
                    precedence: precedence.clone(),
                    sources: sources.clone(),
                    witness: w,
                })
            }
            Step::Effect { goal, effect, .. } => {
                let a = self.monitor.handle(Request {
                    caller: Role::Agent,
                    op: Op::AuthorizeEffect {
                        effect: effect.clone(),
                        goal: goal.clone(),
                    },
                });
                let Some(r) = a.reservation.filter(|_| a.allowed()) else {
                    return Err(StepOutcome::of(&a));
                };
                self.agent(Op::CommitEffect {
                    effect: effect.clone(),
                    key: format!("{}/{}", self.key_prefix, self.steps),
                    reservation: r,
                })
            }
            Step::Observe { values, .. } => StepOutcome::of(&self.monitor.handle(Request {
                caller: Role::Provider,
                op: Op::ChangeVersion {
                    policy: None,
                    observe: Some(values.clone()),
                },
            })),
            Step::Policy { rules, .. } => StepOutcome::of(&self.monitor.handle(Request {
                caller: Role::Operator,
                op: Op::ChangeVersion {
                    policy: Some(rules.clone()),
                    observe: None,
                },
            })),
            Step::Reauthorize { goal, .. } => self.agent(Op::Reauthorize { goal: goal.clone() }),
            Step::Cancel { goal, .. } => self.agent(Op::CancelGoal { goal: goal.clone() }),
            Step::Close { goal, .. } => self.agent(Op::CloseGoal { goal: goal.clone() }),
            Step::CloseRoot { .. } => self.agent(Op::CloseRoot {}),
            Step::Plan { label } => {
                let snap = Snapshot {
                    versions: self.monitor.versions(),
                    revisions: self.monitor.goal_revisions(),
                };
                self.plans.insert(label.clone(), snap);
                StepOutcome {
                    verdict: Verdict::Allow,
                    reason: None,
                    detail: String::new(),
                }
            }
        })
    }
}
