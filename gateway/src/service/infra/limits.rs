//! Limits per principal and per peer: a request rate per principal, and a backoff for a peer
//! that keeps sending credentials that are not valid.
//!
//! - **Rate.** Each principal has a bucket of `listen.burst_per_principal` requests that
//!   refills at `listen.requests_per_second_per_principal` (GCRA, the `governor` crate, keyed
//!   by principal name, so the number of buckets is the number of principals). A request past
//!   it is `429 RATE_LIMITED` with `Retry-After`. The operator's commands (`POST
//!   /v1/operator/{action}`: hold, release, land, …) are never rate limited: a hold always goes
//!   through. Requests without a credential (an open status read) are not counted here; the
//!   listener's connection caps bound them.
//! - **Authentication backoff.** After `listen.auth_failures_before_backoff` failed
//!   authentications in a row from one address (no credential, a wrong one, a revoked one),
//!   that address is refused `429 AUTH_BACKOFF` for 1 s, then 2 s, 4 s, … up to
//!   `listen.auth_backoff_max_ms`, before its credential is even looked at, so a guesser gets
//!   a handful of tries a minute. A success from the address clears it. Each listener keeps
//!   its own table (a guesser on the main listener does not slow the operator's), of at most
//!   [`MAX_PEERS`] addresses: when it is full the address whose last failure is oldest is
//!   forgotten.
//!
//! Both take the time they judge at as an argument, so the tests drive them without sleeping.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

/// Addresses one listener's backoff table remembers at most.
pub const MAX_PEERS: usize = 4096;

/// A failure older than this is forgotten: the count starts again.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The first backoff; each further failure doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The settings (`[listen]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitSettings {
    /// Requests per second per principal, sustained.
    pub per_second: NonZeroU32,
    /// Requests one principal may send at once before the rate applies.
    pub burst: NonZeroU32,
    /// Failed authentications in a row from one address before it is backed off.
    pub failures_before_backoff: u32,
    /// The longest backoff.
    pub max_backoff: Duration,
}

/// A wait as `Retry-After` gives it: whole seconds, rounded up, at least one.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// One address's failures.
#[derive(Clone, Copy, Debug)]
struct Failures {
    in_a_row: u32,
    last: Instant,
    until: Option<Instant>,
}

/// The principals' buckets.
type Buckets<C> =
    RateLimiter<Arc<str>, HashMapStateStore<Arc<str>>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One listener's limits: the principals' buckets (shared by both listeners) and its own
/// backoff table.
pub struct Limits<C: Clock + Clone = MonotonicClock> {
    settings: LimitSettings,
    rate: Arc<Buckets<C>>,
    clock: C,
    peers: Mutex<HashMap<IpAddr, Failures>>,
}

impl Limits<MonotonicClock> {
    /// Limits on the process's monotonic clock.
    pub fn new(settings: LimitSettings) -> Limits {
        Limits::with_clock(settings, MonotonicClock)
    }
}

impl<C: Clock + Clone> Limits<C> {
    /// Limits on `clock` (a test's fake clock).
    pub fn with_clock(settings: LimitSettings, clock: C) -> Limits<C> {
        let quota = Quota::per_second(settings.per_second).allow_burst(settings.burst);
        Limits {
            settings,
            rate: Arc::new(RateLimiter::hashmap_with_clock(quota, clock.clone())),
            clock,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The same principals' buckets with a backoff table of its own (the operator's
    /// listener).
    pub fn sharing_rates(&self) -> Limits<C> {
        Limits {
            settings: self.settings,
            rate: Arc::clone(&self.rate),
            clock: self.clock.clone(),
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> LimitSettings {
        self.settings
    }

    /// One request of `principal`: taken, or past its rate (`Err`: how long until one more
    /// is taken).
    pub fn request(&self, principal: &str) -> Result<(), Duration> {
        let key: Arc<str> = Arc::from(principal);
        self.rate
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Whether `peer` may authenticate at `now` (`Err`: how long its backoff still runs).
    pub fn may_try(&self, peer: IpAddr, now: Instant) -> Result<(), Duration> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        match peers.get(&peer).and_then(|f| f.until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// `peer` failed to authenticate at `now`; the backoff that starts, if one does.
    pub fn failed(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if !peers.contains_key(&peer) && peers.len() >= MAX_PEERS {
            peers.retain(|_, f| now.saturating_duration_since(f.last) < FORGET_AFTER);
            if peers.len() >= MAX_PEERS
                && let Some(oldest) = peers.iter().min_by_key(|(_, f)| f.last).map(|(a, _)| *a)
            {
                peers.remove(&oldest);
            }
        }
        let f = peers.entry(peer).or_insert(Failures {
            in_a_row: 0,
            last: now,
            until: None,
        });
        if now.saturating_duration_since(f.last) >= FORGET_AFTER {
            f.in_a_row = 0;
        }
        f.in_a_row = f.in_a_row.saturating_add(1);
        f.last = now;
        let past = f
            .in_a_row
            .checked_sub(self.settings.failures_before_backoff)?;
        let backoff = FIRST_BACKOFF
            .saturating_mul(1u32 << past.min(20))
            .min(self.settings.max_backoff);
        f.until = Some(now + backoff);
        Some(backoff)
    }

    /// `peer` authenticated: its failures are forgotten.
    pub fn succeeded(&self, peer: IpAddr) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.remove(&peer);
    }

    /// Addresses in the backoff table.
    pub fn peers_tracked(&self) -> usize {
        self.peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn settings() -> LimitSettings {
        LimitSettings {
            per_second: NonZeroU32::new(10).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
            failures_before_backoff: 2,
            max_backoff: Duration::from_secs(8),
        }
    }

    #[test]
    fn a_principal_past_its_burst_waits_for_the_rate_and_others_are_not_touched() {
        let clock = FakeRelativeClock::default();
        let l = Limits::with_clock(settings(), clock.clone());
        for _ in 0..3 {
            assert_eq!(l.request("agent-a"), Ok(()));
        }
        assert_eq!(
            l.request("agent-a"),
            Err(Duration::from_millis(100)),
            "the fourth at once is past a burst of 3; at 10/s one more comes every 100 ms"
        );
        assert_eq!(retry_after_secs(Duration::from_millis(100)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(l.request("agent-b"), Ok(()), "agent B has its own bucket");
        clock.advance(Duration::from_millis(100));
        assert_eq!(l.request("agent-a"), Ok(()));
        assert!(l.request("agent-a").is_err());
        // The operator's listener shares the buckets.
        assert!(l.sharing_rates().request("agent-a").is_err());
    }

    #[test]
    fn failures_in_a_row_back_an_address_off_doubling_to_the_cap_and_a_success_clears_it() {
        let l = Limits::with_clock(settings(), FakeRelativeClock::default());
        let peer: IpAddr = [10, 0, 0, 7].into();
        let other: IpAddr = [10, 0, 0, 8].into();
        let t0 = Instant::now();
        assert_eq!(l.failed(peer, t0), None);
        assert_eq!(l.may_try(peer, t0), Ok(()));
        assert_eq!(l.failed(peer, t0), Some(Duration::from_secs(1)));
        assert_eq!(
            l.may_try(peer, t0 + Duration::from_millis(400)),
            Err(Duration::from_millis(600))
        );
        assert_eq!(
            l.may_try(other, t0),
            Ok(()),
            "another address is not touched"
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(l.may_try(peer, t1), Ok(()));
        let backoffs: Vec<u64> = (0..5)
            .filter_map(|_| l.failed(peer, t1))
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(
            backoffs,
            [2, 4, 8, 8, 8],
            "doubling, to listen.auth_backoff_max_ms"
        );
        l.succeeded(peer);
        assert_eq!(l.may_try(peer, t1), Ok(()));
        assert_eq!(l.failed(peer, t1), None, "the count starts again");
        // A failure long after the last one starts the count again.
        let later = t1 + FORGET_AFTER;
        assert_eq!(l.failed(peer, later), None);
    }

    #[test]
    fn the_backoff_table_is_bounded() {
        let l = Limits::with_clock(settings(), FakeRelativeClock::default());
        let t = Instant::now();
        for i in 0..(MAX_PEERS as u32 + 100) {
            l.failed(
                IpAddr::from(i.to_be_bytes()),
                t + Duration::from_millis(u64::from(i)),
            );
        }
        assert_eq!(l.peers_tracked(), MAX_PEERS);
        // The newest addresses are the ones kept.
        let newest = IpAddr::from((MAX_PEERS as u32 + 99).to_be_bytes());
        assert_eq!(
            l.failed(newest, t + Duration::from_secs(60)),
            Some(FIRST_BACKOFF)
        );
    }
}
