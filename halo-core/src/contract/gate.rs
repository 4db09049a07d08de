//! The mission contract at the final dispatch gate: the monitor as the gate's
//! [`EffectGate`](crate::gate::EffectGate), and the policy of which goal an effect is authorized
//! against.
//!
//! An effect is authorized on the leaf of the current witness path (the path runs leaf first,
//! up to the root): the goal the agent is working on now. Without a current path (a suspended
//! root, a contract just registered) the root goal is named, so the monitor answers why
//! (`ROOT_SUSPENDED`, ...) instead of an unknown goal.
//!
//! Every effect goes through here: the gate's (an exact action's normalized effect, reserved
//! before the token is spent and committed right after the adapter took the command) and the
//! operator's own through the gateway ([`EffectGate::commit_once`]: the takeoff).

use super::monitor::Monitor;
use super::spec::{Op, Request, Role};
use crate::gate::EffectGate;
use crate::reason::ReasonCode;

impl Monitor {
    /// The goal an effect is authorized against now: the current witness path's leaf, or the
    /// root goal when there is no current path (see the module docs); empty without a contract.
    pub fn effect_goal(&self) -> String {
        self.witness_path()
            .and_then(|p| p.first().cloned())
            .or_else(|| {
                self.goal_revisions()
                    .into_keys()
                    .find(|g| self.parent_of(g).is_none())
            })
            .unwrap_or_default()
    }
}

impl EffectGate for Monitor {
    fn active(&self) -> bool {
        self.root_state().is_some()
    }

    fn authorize(&mut self, effect: &str) -> Result<u64, ReasonCode> {
        let goal = self.effect_goal();
        let d = self.handle(Request {
            caller: Role::Agent,
            op: Op::AuthorizeEffect {
                effect: effect.to_string(),
                goal,
            },
        });
        match (d.allowed(), d.reservation) {
            (true, Some(r)) => Ok(r),
            _ => Err(d.reason.unwrap_or(ReasonCode::EFFECT_NOT_ADMITTED)),
        }
    }

    fn commit(&mut self, reservation: u64, effect: &str, key: &str) -> Result<(), ReasonCode> {
        let d = self.handle(Request {
            caller: Role::Agent,
            op: Op::CommitEffect {
                effect: effect.to_string(),
                key: key.to_string(),
                reservation,
            },
        });
        if d.allowed() {
            Ok(())
        } else {
            Err(d.reason.unwrap_or(ReasonCode::EFFECT_MISMATCH))
        }
    }

    fn commit_once(&mut self, effect: &str, key: &str) -> Result<(), (ReasonCode, String)> {
        if !self.active() {
            return Ok(());
        }
        let goal = self.effect_goal();
        let d = self.gate_effect(&goal, effect, key);
        if d.allowed() {
            Ok(())
        } else {
            Err((
                d.reason.unwrap_or(ReasonCode::EFFECT_NOT_ADMITTED),
                d.detail,
            ))
        }
    }
}
