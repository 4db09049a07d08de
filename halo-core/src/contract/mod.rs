//! Mission contracts: runtime authorization of agent-proposed subgoals.
//!
//! HALO decides which components of one response may go out now; the mission contract decides
//! what the agent may ever make the aircraft do over a whole flight, however it replans. The
//! operator approves a root task contract (permitted traces, forbidden states, a closing
//! predicate, resources, obligations). The agent then edits a versioned goal graph: each edit
//! carries a witness that binds the root, the edit's digest and the versions it was planned on,
//! and the monitor re-derives the proof obligations W1–W7 exactly before the edit takes effect.
//! Effects are reserved against the current witness path and committed once.
//!
//! ```text
//! operator ─ registerRoot ─▶ root goal g0 (= the contract)
//! agent ─ propose / replace / delegate / join (+ witness) ─▶ W1..W7 ─▶ Allow: graph revision + 1
//! agent ─ authorizeEffect(goal, e) ─▶ reservation r ─ commitEffect(r, e, key) ─▶ state, trace
//! provider/operator ─ changeVersion ─▶ root suspended ─ reauthorize(leaf) ─▶ runnable
//! every request ─▶ hash-linked receipt (accepted and rejected alike)
//! ```
//!
//! Everything here is sans-IO and deterministic. Checking is exact inside the finite profile
//! ([`limits`]); over a limit the answer is Indeterminate with `PROFILE_LIMIT` and nothing changes.
//! See `docs/contracts.md` for the domain format, the operations and the reason codes.

pub mod compose;
pub mod domain;
pub mod gate;
pub mod monitor;
pub mod spec;
pub mod workflow;

pub use domain::{Domain, DomainError};
pub use monitor::{Decision, GoalState, Monitor, RootState, Verdict, Versions};
pub use spec::{ContractSpec, GoalSpec, Op, PolicyRule, Request, Role, WitnessClaim};

/// A trace of interned effect ids.
pub type Trace = Vec<u32>;

/// The finite profile. Inputs over any of these are Indeterminate (`PROFILE_LIMIT`), never cut.
pub mod limits {
    /// Goals held in one execution (all lifecycles).
    pub const GOALS: usize = 64;
    /// Maximal continuations per goal.
    pub const CONTINUATIONS: usize = 256;
    /// Effects per continuation.
    pub const EFFECTS: usize = 64;
    /// Entries per constraint array (resources, obligations, frames, closing conditions).
    pub const ARRAY: usize = 256;
    /// Sources in one join.
    pub const JOIN_SOURCES: usize = 8;
    /// Precedence-edge entries in one join.
    pub const PRECEDENCE: usize = 28;
    /// Internal guard: topological orders, trace-choice products, raw compositions.
    pub const GUARD: usize = super::compose::GUARD;
}
