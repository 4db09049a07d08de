//! Localized obligations `o_e = (e, r, S, Q, a, ρ, τ, d)`.
//!
//! An obligation records why an action was withheld, which support must be refreshed, which
//! components a fresh candidate may replace, who is asked, by which route, until when, and what
//! discharges it. Its states are CREATED → DISPATCHED → EXTERNAL_SUPPORT_RECEIVED →
//! READY_FOR_READMISSION → DISCHARGED, with FAILED and EXPIRED exits.
//!
//! INVARIANT (no authority): nothing in this module mints a token, a binding or a generation.
//! Readiness means the routed support arrived; only fresh admission of a candidate inside the
//! scope, followed by the final gate, can lead to a dispatch.

use serde::Serialize;

use super::ids::Id;
use super::names::{ComponentRef, Scope};
use super::reason::ReasonCode;
use super::time::Nanos;

/// Obligation id, unique within a gateway run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObligationId(pub u64);

impl std::fmt::Display for ObligationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "obl-{}", self.0)
    }
}

/// Recovery state `ω_t(o_e)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObligationState {
    /// Recorded.
    Created,
    /// The refresh request went to the assignee.
    Dispatched,
    /// At least one required source was refreshed.
    ExternalSupportReceived,
    /// Every required source was refreshed. Not dispatch authority.
    ReadyForReadmission,
    /// A fresh candidate inside the scope passed admission.
    Discharged,
    /// The retry limit was used up, or the instance ended otherwise.
    Failed,
    /// The expiry passed.
    Expired,
}

impl ObligationState {
    /// True while a candidate may still be submitted.
    pub const fn is_live(self) -> bool {
        matches!(
            self,
            ObligationState::Created
                | ObligationState::Dispatched
                | ObligationState::ExternalSupportReceived
                | ObligationState::ReadyForReadmission
        )
    }

    /// Snake-case name, as events, views and receipts spell it.
    pub const fn wire_name(self) -> &'static str {
        match self {
            ObligationState::Created => "created",
            ObligationState::Dispatched => "dispatched",
            ObligationState::ExternalSupportReceived => "external_support_received",
            ObligationState::ReadyForReadmission => "ready_for_readmission",
            ObligationState::Discharged => "discharged",
            ObligationState::Failed => "failed",
            ObligationState::Expired => "expired",
        }
    }

    /// Upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            ObligationState::Created => "CREATED",
            ObligationState::Dispatched => "DISPATCHED",
            ObligationState::ExternalSupportReceived => "EXTERNAL_SUPPORT_RECEIVED",
            ObligationState::ReadyForReadmission => "READY_FOR_READMISSION",
            ObligationState::Discharged => "DISCHARGED",
            ObligationState::Failed => "FAILED",
            ObligationState::Expired => "EXPIRED",
        }
    }
}

/// What discharges an obligation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Discharge {
    /// A candidate inside the scope, with a later agent generation, passes full admission
    /// against support generated after `after`.
    FreshCandidate {
        /// The obligation's creation instant (monotonic nanoseconds, `after_ns` when serialized).
        #[serde(rename = "after_ns")]
        after: Nanos,
    },
}

/// A localized obligation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Obligation {
    /// Id.
    pub id: ObligationId,
    /// The blocked component `e`, with its response (serialized as `response` and
    /// `component`).
    #[serde(flatten)]
    pub component: ComponentRef,
    /// Reason `r`.
    pub reason: ReasonCode,
    /// Required support `S`: source names to refresh (empty when the fix is a revised action).
    pub required: Vec<Id>,
    /// Bit mask of the same sources, for matching updates.
    #[serde(skip)]
    pub required_mask: u64,
    /// Bit mask of required sources refreshed so far.
    #[serde(skip)]
    pub refreshed_mask: u64,
    /// Replacement scope `Q = S(o_e)`: the blocked component first, then the dependents it
    /// may bring with it, in envelope order.
    pub scope: Scope,
    /// Assignee `a`.
    pub assignee: Id,
    /// Route `ρ`.
    pub route: Id,
    /// Expiry `τ` (monotonic nanoseconds, `expiry_ns` when serialized).
    #[serde(rename = "expiry_ns")]
    pub expiry: Nanos,
    /// Discharge condition `d`.
    pub discharge: Discharge,
    /// Current state.
    pub state: ObligationState,
    /// Candidates admitted for checking so far.
    pub attempts: u8,
    /// Most candidates it accepts for checking.
    pub retry_limit: u8,
    /// Creation instant (monotonic nanoseconds, `created_at_ns` when serialized).
    #[serde(rename = "created_at_ns")]
    pub created_at: Nanos,
}

impl Obligation {
    /// True when `id` may receive a fresh instance under this obligation.
    pub fn in_scope(&self, id: &Id) -> bool {
        self.scope.contains(id)
    }
}
