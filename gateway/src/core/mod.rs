//! The sans-IO protocol core: no sockets, no files, no clock reads, no async.
//!
//! - [`envelope`], [`graph`]: parse and validate a response into a typed, acyclic,
//!   phase-labelled graph.
//! - [`catalog`]: the trusted domain catalog.
//! - [`state`]: the support state `C_t`.
//! - [`support`]: `LocalOK` over a footprint.
//! - [`binding`]: witnesses, bindings, tokens and the ledger.
//! - [`engine`]: admission, incremental re-evaluation, phases, obligations.
//! - [`gate`]: the final dispatch gate and the adapter trait.
//! - [`recovery`]: fresh readmission and rolling renewal.
//! - [`receipt`]: hash-linked receipts.

pub mod binding;
pub mod canonical;
pub mod catalog;
pub mod defect;
pub mod digest;
pub mod engine;
pub mod envelope;
pub mod gate;
pub mod graph;
pub mod ids;
pub mod obligation;
pub mod payload;
pub mod phase;
pub mod reason;
pub mod receipt;
pub mod recovery;
pub mod state;
pub mod statefile;
pub mod strict;
pub mod support;
pub mod time;
pub mod variant;

pub use binding::{DispatchToken, Ledger, Seq, TokenState, Witness};
pub use catalog::{Catalog, CatalogError, Class, SourceIx, TypeIx};
pub use digest::Digest;
pub use engine::{AdmissionReport, ComponentReport, Config, Event, Gateway};
pub use envelope::Rejection;
pub use gate::{Adapter, AdapterError, EnqueueRequest, GateOutcome, RecordingAdapter};
pub use ids::Id;
pub use obligation::{Obligation, ObligationId, ObligationState};
pub use payload::{ActionCommand, Payload, RouteTarget};
pub use phase::Phase;
pub use reason::ReasonCode;
pub use receipt::Receipt;
pub use recovery::ReadmissionReport;
pub use state::{Certificate, Snapshot, SourceState, SourceUpdate, Value, ValueKind};
pub use time::Nanos;
pub use variant::Variant;
