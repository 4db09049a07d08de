//! The runtime shell: the sans-IO core driven by a clock, with the PX4 bridge as its adapter,
//! PX4 telemetry as provider updates and a JSON-lines receipt log.
//!
//! The shell follows the core's call order after every input: drain events, pass every ready
//! token to the final gate (whose adapter call is the bridge's non-blocking enqueue), append
//! every receipt.

pub mod demo;
pub mod px4;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use crate::core::engine::{Event, Gateway};
use crate::core::gate::GateOutcome;
use crate::core::ids::Id;
use crate::core::time::Nanos;

/// Something the runtime did, for the operator's console.
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// A core event.
    Core(Event),
    /// A gate decision.
    Gate(GateOutcome),
}

/// The core, its adapter and its receipt log, on one clock.
pub struct Runtime {
    /// The protocol core.
    pub gw: Gateway,
    /// The PX4 adapter.
    pub adapter: px4::Px4Adapter,
    origin: Instant,
    receipts: Option<std::io::BufWriter<std::fs::File>>,
    /// Receipts written.
    pub receipts_written: u64,
}

impl Runtime {
    /// A runtime over `gw` and `adapter`, measuring time from `origin` (shared with the bridge),
    /// writing receipts to `receipts` when given.
    ///
    /// # Errors
    /// The I/O error when the receipt log cannot be created.
    pub fn new(
        gw: Gateway,
        adapter: px4::Px4Adapter,
        origin: Instant,
        receipts: Option<&Path>,
    ) -> std::io::Result<Runtime> {
        let receipts = match receipts {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
            None => None,
        };
        Ok(Runtime {
            gw,
            adapter,
            origin,
            receipts,
            receipts_written: 0,
        })
    }

    /// Now on the shared monotonic clock.
    pub fn now(&self) -> Nanos {
        Nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Runs the core's output side: events, ready actions through the final gate, receipts.
    /// Returns what happened, in order.
    ///
    /// # Errors
    /// The I/O error when a receipt cannot be written.
    pub fn pump(&mut self) -> std::io::Result<Vec<Note>> {
        let mut notes = Vec::new();
        let now = self.now();
        self.gw.handle_timeout(now);
        loop {
            let mut progressed = false;
            while let Some(e) = self.gw.poll_event() {
                notes.push(Note::Core(e));
                progressed = true;
            }
            while let Some(tok) = self.gw.poll_dispatch() {
                let out = self.gw.final_gate(self.now(), tok, &mut self.adapter);
                notes.push(Note::Gate(out));
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        while let Some(r) = self.gw.poll_receipt() {
            if let Some(w) = self.receipts.as_mut() {
                writeln!(w, "{}", r.to_json_line())?;
            }
            self.receipts_written += 1;
        }
        if let Some(w) = self.receipts.as_mut() {
            w.flush()?;
        }
        Ok(notes)
    }

    /// Feeds one bridge event: telemetry becomes provider updates; a target echo becomes the
    /// observation of the component whose binding it carries.
    pub fn on_bridge_event(&mut self, ev: &px4_bridge::Event) {
        let now = self.now();
        for u in px4::telemetry_updates(self.gw.catalog(), ev, now) {
            // Refusals (e.g. an out-of-order sample) are receipted by the core and dropped.
            let _ = self.gw.handle_source_update(now, u);
        }
        if let Some(b) = px4::observed_binding(ev) {
            if let Some((r, c)) = self.adapter.dispatched.get(&b.0).cloned() {
                let _ = self.gw.handle_observation(now, &r, &c, true);
            }
        }
    }

    /// The component a binding was dispatched for.
    pub fn dispatched_for(&self, binding: &[u8; 32]) -> Option<&(Id, Id)> {
        self.adapter.dispatched.get(binding)
    }
}
