//! Two endpoints joined by a simulated datagram link on virtual time.
//!
//! [`Pair::step`] advances time to the next thing that happens (a timer of either endpoint or
//! a delivery), so minutes of flight run in milliseconds and a run is a pure function of its
//! inputs and seed. The link can be taken down, delayed and made lossy in each direction.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One side of the link.
pub trait Endpoint {
    /// A datagram arrived at `now_ns`.
    fn handle_datagram(&mut self, now_ns: u64, bytes: &[u8]);
    /// Timers due at `now_ns`.
    fn handle_timeout(&mut self, now_ns: u64);
    /// The next datagram to send.
    fn poll_datagram(&mut self) -> Option<Vec<u8>>;
    /// When `handle_timeout` must next run.
    fn poll_timeout(&self) -> u64;
}

/// Faults on one direction of the link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFaults {
    /// Everything is lost.
    pub down: bool,
    /// One-way delay, ns.
    pub delay_ns: u64,
    /// Probability that a datagram is lost.
    pub drop: f64,
}

/// Which way a datagram travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Dir {
    AToB,
    BToA,
}

/// A datagram in flight: delivery time, serial (for a stable order), direction, bytes.
type InFlight = (u64, u64, Dir, Vec<u8>);

/// Two endpoints and the link between them.
pub struct Pair<A: Endpoint, B: Endpoint> {
    /// First endpoint.
    pub a: A,
    /// Second endpoint.
    pub b: B,
    /// Virtual time, ns.
    pub now: u64,
    /// Faults from `a` to `b`.
    pub a_to_b: LinkFaults,
    /// Faults from `b` to `a`.
    pub b_to_a: LinkFaults,
    queue: BinaryHeap<Reverse<InFlight>>,
    serial: u64,
    rng: u64,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Datagrams lost to faults.
    pub dropped: u64,
}

impl<A: Endpoint, B: Endpoint> Pair<A, B> {
    /// Joins `a` and `b` at time `now`; `seed` drives packet loss.
    pub fn new(a: A, b: B, now: u64, seed: u64) -> Pair<A, B> {
        Pair {
            a,
            b,
            now,
            a_to_b: LinkFaults::default(),
            b_to_a: LinkFaults::default(),
            queue: BinaryHeap::new(),
            serial: 0,
            rng: seed,
            delivered: 0,
            dropped: 0,
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        #[allow(clippy::cast_precision_loss, reason = "a uniform draw")]
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        u < p
    }

    fn collect(&mut self) {
        while let Some(d) = self.a.poll_datagram() {
            let f = self.a_to_b;
            if f.down || self.chance(f.drop) {
                self.dropped += 1;
                continue;
            }
            self.serial += 1;
            self.queue
                .push(Reverse((self.now + f.delay_ns, self.serial, Dir::AToB, d)));
        }
        while let Some(d) = self.b.poll_datagram() {
            let f = self.b_to_a;
            if f.down || self.chance(f.drop) {
                self.dropped += 1;
                continue;
            }
            self.serial += 1;
            self.queue
                .push(Reverse((self.now + f.delay_ns, self.serial, Dir::BToA, d)));
        }
    }

    /// Advances to the next event and handles it. Never goes past `limit`.
    pub fn step_until(&mut self, limit: u64) {
        self.collect();
        let next_delivery = self.queue.peek().map_or(u64::MAX, |Reverse((t, ..))| *t);
        let next = self
            .a
            .poll_timeout()
            .min(self.b.poll_timeout())
            .min(next_delivery)
            .max(self.now);
        if next > limit {
            self.now = limit;
            return;
        }
        self.now = next;
        while let Some(Reverse((t, ..))) = self.queue.peek() {
            if *t > self.now {
                break;
            }
            if let Some(Reverse((_, _, dir, bytes))) = self.queue.pop() {
                self.delivered += 1;
                match dir {
                    Dir::AToB => self.b.handle_datagram(self.now, &bytes),
                    Dir::BToA => self.a.handle_datagram(self.now, &bytes),
                }
            }
        }
        if self.a.poll_timeout() <= self.now {
            self.a.handle_timeout(self.now);
        }
        if self.b.poll_timeout() <= self.now {
            self.b.handle_timeout(self.now);
        }
        self.collect();
    }

    /// Runs until virtual time `t`.
    pub fn run_until(&mut self, t: u64) {
        while self.now < t {
            self.step_until(t);
        }
    }

    /// Runs for `ns` more nanoseconds.
    pub fn run_for(&mut self, ns: u64) {
        let t = self.now.saturating_add(ns);
        self.run_until(t);
    }

    /// Runs until `done` holds or `ns` pass; returns whether it held.
    pub fn run_until_cond(&mut self, ns: u64, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let limit = self.now.saturating_add(ns);
        while self.now < limit {
            if done(self) {
                return true;
            }
            self.step_until(limit);
        }
        done(self)
    }
}
