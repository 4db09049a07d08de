//! Seeded single defects of the core, so the conformance suites can be shown to catch them
//! (`scripts/seeded_defects.sh`, docs/conformance.md). They exist only in a build with the
//! `__seeded-defects` feature: without it `Config` has no field to select one and every check of
//! [`Defect`] below is the constant `false`, so the product cannot be configured into a defect.

/// One defect, each removing a single check the protocol needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Defect {
    /// The final gate does not check the admission witness (WitnessOK).
    NoWitnessCheck,
    /// Re-evaluation forgets dependents: only the components whose own support changed are
    /// re-decided, so a dependent can stay retained under a withheld parent.
    ForgetDependents,
    /// The final gate does not spend the token, so a replay dispatches again.
    TokenNotSpent,
    /// The final gate does not check that the action's parents are retained.
    NoClosureAtGate,
    /// The final gate does not re-evaluate LocalOK at the decision instant.
    NoLocalRecheckAtGate,
    /// The final gate does not bring time-driven support changes up to its instant first.
    NoTimersAtGate,
    /// The final gate records no receipt of a dispatch: the action leaves with nothing in the
    /// chain to say so.
    NoDispatchReceipt,
    /// A global route target need not claim the origin's epoch: it is converted through
    /// whatever origin is current, planned against it or not.
    OriginNotClaimed,
}

impl Defect {
    /// Every defect.
    pub const ALL: [Defect; 8] = [
        Defect::NoWitnessCheck,
        Defect::ForgetDependents,
        Defect::TokenNotSpent,
        Defect::NoClosureAtGate,
        Defect::NoLocalRecheckAtGate,
        Defect::NoTimersAtGate,
        Defect::NoDispatchReceipt,
        Defect::OriginNotClaimed,
    ];

    /// Display name.
    pub const fn name(self) -> &'static str {
        match self {
            Defect::NoWitnessCheck => "no-witness-check",
            Defect::ForgetDependents => "forget-dependents",
            Defect::TokenNotSpent => "token-not-spent",
            Defect::NoClosureAtGate => "no-closure-at-gate",
            Defect::NoLocalRecheckAtGate => "no-local-recheck-at-gate",
            Defect::NoTimersAtGate => "no-timers-at-gate",
            Defect::NoDispatchReceipt => "no-dispatch-receipt",
            Defect::OriginNotClaimed => "origin-not-claimed",
        }
    }
}
