//! The service's one clock: the shared monotonic origin (the bridges count from it too) and
//! the wall time read at that origin, and the one place where a request's arrival is stamped
//! on both.
//!
//! A provider's update and a certificate carry wall-clock instants (Unix ms); the core decides
//! on the monotonic clock. The mapping pairs the two at the request's arrival, not when the
//! service task gets to it: a request that waited in the task's queue must not look younger
//! for it. The monotonic reading is taken before the wall reading, so the pair's wall time is
//! never earlier than the wall time at its monotonic instant, and a mapped instant is never
//! later than the truth: an update looks at least as old as it is and a certificate ends no
//! later than it says — every error is toward refusing, as the vehicle link's `link_stamp`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use halo_core::time::Nanos;

/// The shared monotonic origin and the wall time at it.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    origin_wall_ms: u64,
}

impl Clock {
    /// The clock starting now.
    pub fn start() -> Clock {
        let origin = Instant::now();
        Clock {
            origin,
            origin_wall_ms: wall_now_ms(),
        }
    }

    /// The instant every monotonic reading counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The wall time at the origin, Unix ms.
    pub fn origin_wall_ms(&self) -> u64 {
        self.origin_wall_ms
    }

    /// Now on the monotonic clock.
    pub fn now(&self) -> Nanos {
        Nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Unix ms of an instant on the monotonic clock, for people and wire forms.
    pub fn wall_ms(&self, at: Nanos) -> u64 {
        self.origin_wall_ms.saturating_add(at.as_ms())
    }

    /// A request arriving now: the monotonic clock read first, then the wall clock.
    pub fn arrival(&self) -> Arrival {
        let mono = self.now();
        Arrival {
            mono,
            wall_ms: wall_now_ms(),
        }
    }
}

/// When a request arrived, on both clocks ([`Clock::arrival`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// On the monotonic clock.
    pub mono: Nanos,
    /// Unix ms, read just after `mono`.
    pub wall_ms: u64,
}

impl Arrival {
    /// A remote wall-clock instant (Unix ms) on the monotonic clock: as far before the arrival
    /// as the remote instant is before the arrival's wall time. Instants before the origin map
    /// to 0 (they are stale anyway).
    pub fn map(&self, remote_ms: u64) -> Nanos {
        let delta_ns = (i128::from(remote_ms) - i128::from(self.wall_ms)) * 1_000_000;
        let t = i128::from(self.mono.0) + delta_ns;
        Nanos(u64::try_from(t.clamp(0, i128::from(u64::MAX))).unwrap_or(0))
    }
}

/// The wall clock, Unix ms.
pub fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_wall_times_map_relative_to_the_arrival() {
        let a = Arrival {
            mono: Nanos::from_ms(10_000),
            wall_ms: 1_000_000,
        };
        assert_eq!(a.map(999_800), Nanos::from_ms(9_800));
        assert_eq!(a.map(1_000_030), Nanos::from_ms(10_030));
        assert_eq!(a.map(0), Nanos::ZERO);
    }
}
