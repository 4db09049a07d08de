//! Registering the root contract and its policy: parsing traces, predicates and goal edits
//! against the domain, and the limits a goal must fit.

use super::*;

impl Monitor {
    pub(super) fn parse_traces(&self, traces: &[Vec<String>]) -> Result<Vec<Trace>, Failure> {
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

    pub(super) fn parse_pred(&self, conds: &[String]) -> Result<Pred, Failure> {
        self.domain
            .pred(conds)
            .map_err(|e| deny(ReasonCode::SCHEMA_INVALID, e.0))
    }

    pub(super) fn check_goal_limits(g: &GoalSpec) -> Result<(), Failure> {
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

    pub(super) fn register_root(
        &mut self,
        c: &ContractSpec,
        approved_by: &str,
    ) -> Result<(), Failure> {
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

    pub(super) fn build_policy(&self, rules: &[PolicyRule]) -> Result<Policy, Failure> {
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

    pub(super) fn parse_edit(&self, g: &GoalSpec) -> Result<Edit, Failure> {
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
}
