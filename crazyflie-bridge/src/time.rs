//! Monotonic time on the companion, as nanoseconds since an origin the shell chooses. The state
//! machine never reads a clock; every entry point takes `now`.

use serde::{Deserialize, Serialize};

/// A point on the companion's monotonic clock, nanoseconds since the shell's origin.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Mono(pub u64);

impl Mono {
    /// The far future: "never".
    pub const NEVER: Mono = Mono(u64::MAX);

    /// From milliseconds.
    pub const fn from_ms(ms: u64) -> Mono {
        Mono(ms.saturating_mul(1_000_000))
    }

    /// From microseconds.
    pub const fn from_us(us: u64) -> Mono {
        Mono(us.saturating_mul(1_000))
    }

    /// `self + ns`, saturating.
    #[must_use]
    pub const fn add_ns(self, ns: u64) -> Mono {
        Mono(self.0.saturating_add(ns))
    }

    /// `self + ms`, saturating.
    #[must_use]
    pub const fn add_ms(self, ms: u64) -> Mono {
        self.add_ns(ms.saturating_mul(1_000_000))
    }

    /// `self - ns`, saturating at the origin.
    #[must_use]
    pub const fn sub_ns(self, ns: u64) -> Mono {
        Mono(self.0.saturating_sub(ns))
    }

    /// Nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn since(self, earlier: Mono) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Whole milliseconds.
    pub const fn as_ms(self) -> u64 {
        self.0 / 1_000_000
    }
}

impl std::fmt::Display for Mono {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{:03}s",
            self.0 / 1_000_000_000,
            (self.0 / 1_000_000) % 1000
        )
    }
}
