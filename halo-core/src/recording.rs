//! A recording adapter for tests and the evaluation (the private `__evaluation` feature): it
//! stands at the adapter boundary where a real bridge sits, records every call and can be told
//! to refuse. The flight binary links the bridges' adapters and never this one.

use serde::Serialize;

use super::binding::Seq;
use super::digest::Digest;
use super::gate::{Adapter, AdapterError, EnqueueRequest};
use super::ids::Id;
use super::payload::ActionCommand;
use super::time::Nanos;

/// One call the [`RecordingAdapter`] saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnqueueRecord {
    /// Decision instant.
    pub at: Nanos,
    /// Response.
    pub response: Id,
    /// Component.
    pub component: Id,
    /// Command.
    pub command: ActionCommand,
    /// `b_e`.
    pub binding: Digest,
    /// Sequence.
    pub seq: Seq,
    /// End of the certified interval.
    pub valid_until: Nanos,
}

/// An adapter that records every call and can be told to refuse. Used by tests and the
/// evidence suites at the adapter boundary, where the real bridge would sit.
#[derive(Clone, Debug, Default)]
pub struct RecordingAdapter {
    /// Every accepted call, in order.
    pub calls: Vec<EnqueueRecord>,
    /// Every call, accepted or not.
    pub attempts: usize,
    refuse_next: usize,
    refuse_with: Option<AdapterError>,
}

impl RecordingAdapter {
    /// A recorder that accepts everything.
    pub fn new() -> RecordingAdapter {
        RecordingAdapter::default()
    }

    /// Makes the next `n` calls fail with `error`.
    pub fn refuse_next(&mut self, n: usize, error: AdapterError) {
        self.refuse_next = n;
        self.refuse_with = Some(error);
    }
}

impl Adapter for RecordingAdapter {
    fn try_enqueue(&mut self, req: &EnqueueRequest<'_>) -> Result<(), AdapterError> {
        self.attempts += 1;
        if self.refuse_next > 0 {
            self.refuse_next -= 1;
            return Err(self.refuse_with.unwrap_or(AdapterError::QueueFull));
        }
        self.calls.push(EnqueueRecord {
            at: req.now,
            response: req.response.clone(),
            component: req.component.clone(),
            command: req.command.clone(),
            binding: *req.binding,
            seq: req.seq,
            valid_until: req.valid_until,
        });
        Ok(())
    }
}
