//! Monotonic time as plain numbers. The core never reads a clock: every entry point takes
//! `now` as an argument, so a run is a pure function of its inputs.

use serde::{Deserialize, Serialize};

/// A point on the gateway's monotonic clock, in nanoseconds since an arbitrary origin.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The origin.
    pub const ZERO: Nanos = Nanos(0);
    /// The far future; used as "no deadline".
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// From milliseconds.
    pub const fn from_ms(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// From seconds given as a float (clamped to the representable range).
    pub fn from_secs_f64(s: f64) -> Nanos {
        if s.is_nan() || s <= 0.0 {
            Nanos(0)
        } else {
            let ns = s * 1e9;
            if ns >= u64::MAX as f64 {
                Nanos::MAX
            } else {
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "range checked above"
                )]
                Nanos(ns as u64)
            }
        }
    }

    /// Whole milliseconds, rounded down.
    pub const fn as_ms(self) -> u64 {
        self.0 / 1_000_000
    }

    /// `self + d`, saturating at [`Nanos::MAX`].
    #[must_use]
    pub const fn saturating_add(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(d.0))
    }

    /// `self - d`, saturating at zero.
    #[must_use]
    pub const fn saturating_sub(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(d.0))
    }

    /// The far future, "never" (the bridges' name for [`Nanos::MAX`]).
    pub const NEVER: Nanos = Nanos::MAX;

    /// From microseconds.
    pub const fn from_us(us: u64) -> Nanos {
        Nanos(us.saturating_mul(1_000))
    }

    /// `self + ns`, saturating.
    #[must_use]
    pub const fn add_ns(self, ns: u64) -> Nanos {
        Nanos(self.0.saturating_add(ns))
    }

    /// `self + ms`, saturating.
    #[must_use]
    pub const fn add_ms(self, ms: u64) -> Nanos {
        self.add_ns(ms.saturating_mul(1_000_000))
    }

    /// `self - ns`, saturating at the origin.
    #[must_use]
    pub const fn sub_ns(self, ns: u64) -> Nanos {
        Nanos(self.0.saturating_sub(ns))
    }

    /// Nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn since(self, earlier: Nanos) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::fmt::Display for Nanos {
    /// Milliseconds for people, exact: `9993 ms`, `12.5 ms`, `0.000001 ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ms, ns) = (self.0 / 1_000_000, self.0 % 1_000_000);
        if ns == 0 {
            return write!(f, "{ms} ms");
        }
        let frac = format!("{ns:06}");
        write!(f, "{ms}.{} ms", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod display_tests {
    use super::Nanos;

    #[test]
    fn durations_read_as_milliseconds() {
        assert_eq!(Nanos::from_ms(9993).to_string(), "9993 ms");
        assert_eq!(Nanos(12_500_000).to_string(), "12.5 ms");
        assert_eq!(Nanos(1).to_string(), "0.000001 ms");
    }
}
