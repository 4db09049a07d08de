//! Mechanism variants for comparison. `Full` is the product; the others remove one mechanism
//! each and exist only to produce evidence (the `mechanisms` suite).

use serde::{Deserialize, Serialize};

/// Which runtime process the gateway runs.
///
/// Every variant is the same core with mechanisms switched off, never a copy of it. The first
/// four are the repository's reduced variants; the last four are the comparators the HALO
/// paper names (Tables 3, 10 and 11). The paper's No-Dependency is [`Variant::IndependentFilter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Partial retention, dependency closure, exact binding, final recheck, scoped recovery.
    #[default]
    Full,
    /// One decision for the whole response: any unsupported component blocks every component.
    WholeResponse,
    /// Each component on its own local support; declared dependencies are ignored (the
    /// paper's No-Dependency).
    IndependentFilter,
    /// Admission-time decision only: no re-evaluation on later events, no final recheck.
    AdmissionOnly,
    /// AgentSpec-Global: one response-level decision at admission from the same predicates,
    /// then nothing — no re-evaluation, no final recheck, tokens never spent, no recovery.
    AgentSpecGlobal,
    /// AgentSpec-Scoped, the matched admission-time control: HALO's component-scoped
    /// predicates, closure and current state at admission, then nothing — no re-evaluation, no
    /// binding or final recheck, tokens never spent, no recovery.
    AgentSpecScoped,
    /// GlobalSnapshot: support is the proposal-wide snapshot. Any source of the catalog that
    /// changes identity (epoch or provenance) after admission withholds every component of the
    /// response that has not proceeded, whether its footprint holds that source or not.
    GlobalSnapshot,
    /// Local-Unbound: component-local freshness and rules, but no digest-bound claims (epochs,
    /// provenance) at admission and no admission witness at the gate.
    LocalUnbound,
}

impl Variant {
    /// All variants, product first.
    pub const ALL: [Variant; 8] = [
        Variant::Full,
        Variant::WholeResponse,
        Variant::IndependentFilter,
        Variant::AdmissionOnly,
        Variant::AgentSpecGlobal,
        Variant::AgentSpecScoped,
        Variant::GlobalSnapshot,
        Variant::LocalUnbound,
    ];

    /// Display name.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Full => "Full",
            Variant::WholeResponse => "WholeResponse",
            Variant::IndependentFilter => "IndependentFilter",
            Variant::AdmissionOnly => "AdmissionOnly",
            Variant::AgentSpecGlobal => "AgentSpecGlobal",
            Variant::AgentSpecScoped => "AgentSpecScoped",
            Variant::GlobalSnapshot => "GlobalSnapshot",
            Variant::LocalUnbound => "LocalUnbound",
        }
    }

    /// Whether declared dependencies constrain retention and readiness.
    pub const fn uses_dependencies(self) -> bool {
        !matches!(self, Variant::IndependentFilter)
    }

    /// Whether state events re-evaluate admitted components.
    pub const fn reevaluates(self) -> bool {
        !matches!(
            self,
            Variant::AdmissionOnly | Variant::AgentSpecGlobal | Variant::AgentSpecScoped
        )
    }

    /// Whether the final gate rechecks support, closure and witness.
    pub const fn rechecks(self) -> bool {
        self.reevaluates()
    }

    /// Whether one decision covers the whole response (any unsupported component blocks all).
    pub const fn whole_response(self) -> bool {
        matches!(self, Variant::WholeResponse | Variant::AgentSpecGlobal)
    }

    /// Whether the agent's claims (epochs, provenance) bind at admission and the admission
    /// witness is checked at the gate.
    pub const fn binds_claims(self) -> bool {
        !matches!(self, Variant::LocalUnbound)
    }

    /// Whether support is the proposal-wide snapshot of every catalog source.
    pub const fn global_snapshot(self) -> bool {
        matches!(self, Variant::GlobalSnapshot)
    }

    /// Whether the gate is a dispatch process at all: it checks the instance's phase and spends
    /// each token once. Without it (the AgentSpec comparators) a replayed token is dispatched
    /// again.
    pub const fn gates(self) -> bool {
        !matches!(self, Variant::AgentSpecGlobal | Variant::AgentSpecScoped)
    }

    /// Whether a recoverable denial creates an obligation (without one, every denial is
    /// terminal).
    pub const fn recovers(self) -> bool {
        self.gates()
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(s) || v.name().to_ascii_lowercase().replace('_', "") == s.to_ascii_lowercase().replace(['_', '-'], ""))
            .or_else(|| {
                // The paper's name for the variant without dependency closure.
                let k = s.to_ascii_lowercase().replace(['_', '-'], "");
                (k == "nodependency").then_some(Variant::IndependentFilter)
            })
            .ok_or_else(|| format!("unknown variant `{s}` (full, whole_response, independent_filter or no_dependency, admission_only, agent_spec_global, agent_spec_scoped, global_snapshot, local_unbound)"))
    }
}
