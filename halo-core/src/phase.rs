//! Processing phases `σ_t(e)` and the "at or beyond" order `⪰` used by phase-labelled
//! prerequisites.
//!
//! The progress chain is PROPOSED < RETAINED < PENDING < EMITTED < DISPATCHED <
//! OBSERVED_SUCCESS. WITHHELD, FAILED and INVALIDATED are off the chain: they are at or beyond
//! no prerequisite phase, so a dependent never becomes ready on a parent in one of them.

use serde::{Deserialize, Serialize};

/// The processing phase of one component instance. On the wire (responses, events, receipts)
/// in snake case (`observed_success`); the paper's upper-case spelling (`OBSERVED_SUCCESS`,
/// [`Phase::name`], used in logs and the conformance corpora) is read too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Validated, not yet admitted.
    #[serde(alias = "PROPOSED")]
    Proposed,
    /// In the retained set `A*_t`; an action waits for the final gate.
    #[serde(alias = "RETAINED")]
    Retained,
    /// In `A*_t` but a prerequisite has not reached its required phase.
    #[serde(alias = "PENDING")]
    Pending,
    /// A non-action was handed to its output path.
    #[serde(alias = "EMITTED")]
    Emitted,
    /// An action passed the final gate and was enqueued on its adapter.
    #[serde(alias = "DISPATCHED")]
    Dispatched,
    /// The vehicle echoed the dispatched target (downstream observation).
    #[serde(alias = "OBSERVED_SUCCESS")]
    ObservedSuccess,
    /// Prevented from reaching its output or adapter under the current state.
    #[serde(alias = "WITHHELD")]
    Withheld,
    /// Passed the gate but failed to reach a required downstream milestone (a failed enqueue,
    /// a failed observation).
    #[serde(alias = "FAILED")]
    Failed,
    /// An undispatched instance that cannot proceed under its current binding.
    #[serde(alias = "INVALIDATED")]
    Invalidated,
}

impl Phase {
    /// Every phase, in declaration order.
    pub const ALL: [Phase; 9] = [
        Phase::Proposed,
        Phase::Retained,
        Phase::Pending,
        Phase::Emitted,
        Phase::Dispatched,
        Phase::ObservedSuccess,
        Phase::Withheld,
        Phase::Failed,
        Phase::Invalidated,
    ];

    /// Rank on the progress chain, `None` off the chain.
    pub const fn rank(self) -> Option<u8> {
        match self {
            Phase::Proposed => Some(0),
            Phase::Retained => Some(1),
            Phase::Pending => Some(2),
            Phase::Emitted => Some(3),
            Phase::Dispatched => Some(4),
            Phase::ObservedSuccess => Some(5),
            Phase::Withheld | Phase::Failed | Phase::Invalidated => None,
        }
    }

    /// `self ⪰ q`: at or beyond `q` on the progress chain.
    pub const fn at_or_beyond(self, q: Phase) -> bool {
        match (self.rank(), q.rank()) {
            (Some(a), Some(b)) => a >= b,
            _ => false,
        }
    }

    /// True once a component has proceeded past the point where later support changes could
    /// withhold it: emitted, dispatched or observed. Terminal parent failures leave these alone.
    pub const fn has_proceeded(self) -> bool {
        matches!(
            self,
            Phase::Emitted | Phase::Dispatched | Phase::ObservedSuccess
        )
    }

    /// True for phases an instance never leaves by ordinary events.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Phase::Emitted | Phase::ObservedSuccess | Phase::Failed | Phase::Invalidated
        )
    }

    /// The phases a prerequisite may name, by their envelope spelling.
    pub fn from_prerequisite_name(s: &str) -> Option<Phase> {
        match s {
            "emitted" => Some(Phase::Emitted),
            "dispatched" => Some(Phase::Dispatched),
            "observed_success" => Some(Phase::ObservedSuccess),
            _ => None,
        }
    }

    /// The envelope spelling of a prerequisite phase.
    pub const fn prerequisite_name(self) -> &'static str {
        match self {
            Phase::Emitted => "emitted",
            Phase::Dispatched => "dispatched",
            Phase::ObservedSuccess => "observed_success",
            _ => "not_a_prerequisite_phase",
        }
    }

    /// [`Phase::prerequisite_name`] as postcard writes a string: its length (one varint byte,
    /// each name being shorter than 128 bytes), then its bytes.
    pub const fn prerequisite_postcard(self) -> &'static [u8] {
        match self {
            Phase::Emitted => b"\x07emitted",
            Phase::Dispatched => b"\x0adispatched",
            Phase::ObservedSuccess => b"\x10observed_success",
            _ => b"\x18not_a_prerequisite_phase",
        }
    }

    /// The wire name: snake case, as serde writes it.
    pub const fn wire_name(self) -> &'static str {
        match self {
            Phase::Proposed => "proposed",
            Phase::Retained => "retained",
            Phase::Pending => "pending",
            Phase::Emitted => "emitted",
            Phase::Dispatched => "dispatched",
            Phase::ObservedSuccess => "observed_success",
            Phase::Withheld => "withheld",
            Phase::Failed => "failed",
            Phase::Invalidated => "invalidated",
        }
    }

    /// Upper-case name, the paper's spelling (logs, the conformance corpora).
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Proposed => "PROPOSED",
            Phase::Retained => "RETAINED",
            Phase::Pending => "PENDING",
            Phase::Emitted => "EMITTED",
            Phase::Dispatched => "DISPATCHED",
            Phase::ObservedSuccess => "OBSERVED_SUCCESS",
            Phase::Withheld => "WITHHELD",
            Phase::Failed => "FAILED",
            Phase::Invalidated => "INVALIDATED",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_or_beyond_follows_the_chain() {
        assert!(Phase::Dispatched.at_or_beyond(Phase::Emitted));
        assert!(Phase::ObservedSuccess.at_or_beyond(Phase::Dispatched));
        assert!(!Phase::Emitted.at_or_beyond(Phase::Dispatched));
        assert!(!Phase::Pending.at_or_beyond(Phase::Emitted));
        for off in [Phase::Withheld, Phase::Failed, Phase::Invalidated] {
            for q in [Phase::Emitted, Phase::Dispatched, Phase::ObservedSuccess] {
                assert!(!off.at_or_beyond(q));
            }
        }
    }

    #[test]
    fn the_wire_name_is_serdes_and_the_paper_spelling_reads_too() {
        for p in Phase::ALL {
            assert_eq!(
                serde_json::to_string(&p).unwrap(),
                format!("\"{}\"", p.wire_name())
            );
            assert_eq!(p.wire_name().to_ascii_uppercase(), p.name());
            let upper: Phase = serde_json::from_str(&format!("\"{}\"", p.name())).unwrap();
            assert_eq!(upper, p);
        }
    }

    #[test]
    fn the_prerequisite_postcard_is_postcards_string() {
        for p in Phase::ALL {
            let want = postcard::to_allocvec(p.prerequisite_name()).unwrap();
            assert_eq!(p.prerequisite_postcard(), want, "{p:?}");
        }
    }
}
