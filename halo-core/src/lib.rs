//! halo-core: the sans-IO protocol core of halo-gateway — HALO (component admission, the
//! final dispatch gate, scoped recovery) and the mission contract — with no sockets, no files,
//! no clock reads and no async. This crate's dependencies hold no I/O runtime, so the compiler
//! keeps it pure: time comes in as an argument, inputs are values, outputs are polled.
//!
//! # Call order
//!
//! ```text
//! handle_response / handle_candidate / handle_source_update / handle_certificate(now, ..)
//!     └─▶ then drain, in this order: poll_event() → poll_dispatch() → final_gate(token)
//!         → poll_receipt(); sleep until poll_timeout() and call handle_timeout(now)
//! ```
//!
//! [`engine::Gateway`] documents each step; the service (`halo-gateway run`) is one loop that
//! does exactly this.
//!
//! - [`envelope`], [`graph`]: parse and validate a response into a typed, acyclic,
//!   phase-labelled graph.
//! - [`catalog`]: the trusted domain catalog.
//! - [`state`]: the support state `C_t`.
//! - [`support`]: `LocalOK` over a footprint.
//! - [`binding`]: witnesses, bindings, tokens and the ledger.
//! - [`engine`]: admission, incremental re-evaluation, phases, obligations.
//! - [`names`]: a live response's component names, shared by the events, receipt records and
//!   obligations that name its components.
//! - [`gate`]: the final dispatch gate and the adapter trait.
//! - [`recovery`]: fresh readmission and rolling renewal.
//! - [`receipt`]: hash-linked receipts.
//! - [`contract`]: mission contracts: the root task contract, the goal graph, W1–W7, effects.
//!
//! # Features
//!
//! - `__seeded-defects` (private, for the conformance harness only: `scripts/seeded_defects.sh`):
//!   compiles in single defects of the core (`defect`) so the suites can be shown to catch
//!   them. Never enabled in a product build; without it no configuration can select a defect.

#![warn(missing_docs, unreachable_pub)]

pub mod binding;
pub mod canonical;
pub mod catalog;
pub mod contract;
// Public only to the conformance harness's build; the product's checks of it are constant.
#[cfg(feature = "__seeded-defects")]
pub mod defect;
#[cfg(not(feature = "__seeded-defects"))]
#[allow(
    unreachable_pub,
    dead_code,
    reason = "only the seeded-defects build selects one"
)]
pub(crate) mod defect;
pub mod digest;
pub mod engine;
pub mod envelope;
pub mod gate;
pub mod geo;
pub mod graph;
pub mod ids;
pub mod names;
pub mod obligation;
pub mod payload;
pub mod phase;
pub mod reason;
pub mod receipt;
#[cfg(feature = "__evaluation")]
pub mod recording;
pub mod recovery;
pub mod state;
pub mod statefile;
pub mod strict;
pub mod support;
#[cfg(test)]
mod testing;
pub mod time;
pub mod update;
pub mod value;
/// The mechanism variants the evaluation compares (public only with the private `__evaluation`
/// feature; the product's core runs `Full` and nothing else).
#[cfg(feature = "__evaluation")]
pub mod variant;
#[cfg(not(feature = "__evaluation"))]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "without `__evaluation` only `Full` is ever built and nothing outside sees the type"
)]
pub(crate) mod variant;

pub use binding::{DispatchToken, Ledger, Seq, TokenState, Witness};
pub use catalog::{Catalog, CatalogError, Class, SourceIx, TypeIx};
pub use digest::Digest;
pub use engine::{AdmissionReport, ComponentReport, Config, Event, Gateway};
pub use envelope::Rejection;
pub use gate::{Adapter, AdapterError, EnqueueRequest, GateOutcome};
pub use ids::Id;
pub use names::{ComponentRef, Names, Scope};
pub use obligation::{Obligation, ObligationId, ObligationState};
pub use payload::{ActionCommand, Payload, RouteTarget};
pub use phase::Phase;
pub use reason::ReasonCode;
pub use receipt::Receipt;
#[cfg(feature = "__evaluation")]
pub use recording::{EnqueueRecord, RecordingAdapter};
pub use recovery::ReadmissionReport;
pub use state::{Certificate, Snapshot, SourceState, SourceUpdate, Value, ValueKind};
pub use time::Nanos;
#[cfg(feature = "__evaluation")]
pub use variant::Variant;
