//! Evaluation only (the private `__evaluation` feature, which the evaluation crate enables; the
//! flight binary never has this file): the final gate run a fixed delay after an action's
//! token is polled, so a harness can change the world between admission and the gate (the
//! HALO paper's late-drift order: admission, mutation, final gate). Everything counts on the
//! task's one clock.

use std::collections::VecDeque;
use std::time::Duration;

use halo_core::{DispatchToken, Nanos};

/// Tokens waiting for their gate, in polling order (bounded by the core's live tokens).
#[derive(Default)]
pub(super) struct LateGate {
    delay: Option<Duration>,
    deferred: VecDeque<(Nanos, DispatchToken)>,
}

impl LateGate {
    pub(super) fn new(delay: Option<Duration>) -> LateGate {
        LateGate {
            delay,
            deferred: VecDeque::new(),
        }
    }

    /// Keeps `tok` for later when a delay is set; gives it back to be gated now otherwise.
    pub(super) fn defer(&mut self, now: Nanos, tok: DispatchToken) -> Option<DispatchToken> {
        let Some(d) = self.delay else {
            return Some(tok);
        };
        let at = now.add_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.deferred.push_back((at, tok));
        None
    }

    /// The oldest token whose delay has passed at `now`.
    pub(super) fn due(&mut self, now: Nanos) -> Option<DispatchToken> {
        if self.deferred.front().is_some_and(|(at, _)| *at <= now) {
            self.deferred.pop_front().map(|(_, tok)| tok)
        } else {
            None
        }
    }

    /// How long from `now` until the next deferred gate (`Duration::MAX` when none waits).
    pub(super) fn wait(&self, now: Nanos) -> Duration {
        self.deferred
            .front()
            .map_or(Duration::MAX, |(at, _)| Duration::from_nanos(at.since(now)))
    }
}
