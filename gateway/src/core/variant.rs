//! Mechanism variants for comparison. `Full` is the product; the others remove one mechanism
//! each and exist only to produce evidence (the `mechanisms` suite).

use serde::{Deserialize, Serialize};

/// Which runtime process the gateway runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Partial retention, dependency closure, exact binding, final recheck, scoped recovery.
    #[default]
    Full,
    /// One decision for the whole response: any unsupported component blocks every component.
    WholeResponse,
    /// Each component on its own local support; declared dependencies are ignored.
    IndependentFilter,
    /// Admission-time decision only: no re-evaluation on later events, no final recheck.
    AdmissionOnly,
}

impl Variant {
    /// All variants, product first.
    pub const ALL: [Variant; 4] = [
        Variant::Full,
        Variant::WholeResponse,
        Variant::IndependentFilter,
        Variant::AdmissionOnly,
    ];

    /// Display name.
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Full => "Full",
            Variant::WholeResponse => "WholeResponse",
            Variant::IndependentFilter => "IndependentFilter",
            Variant::AdmissionOnly => "AdmissionOnly",
        }
    }

    /// Whether declared dependencies constrain retention and readiness.
    pub const fn uses_dependencies(self) -> bool {
        !matches!(self, Variant::IndependentFilter)
    }

    /// Whether state events re-evaluate admitted components.
    pub const fn reevaluates(self) -> bool {
        !matches!(self, Variant::AdmissionOnly)
    }

    /// Whether the final gate rechecks support, closure and witness.
    pub const fn rechecks(self) -> bool {
        !matches!(self, Variant::AdmissionOnly)
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(s) || v.name().to_ascii_lowercase().replace('_', "") == s.to_ascii_lowercase().replace(['_', '-'], ""))
            .ok_or_else(|| format!("unknown variant `{s}` (full, whole_response, independent_filter, admission_only)"))
    }
}
