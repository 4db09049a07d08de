//! An independent audit of a mission-contract receipt stream.
//!
//! The checker receives only the registered domain (its TOML file), and the receipts; the root
//! contract and the initial state come from the first receipt. It shares no decision,
//! reachability or graph-update code with the gateway's monitor: the domain is re-read from its
//! text, states are name → value maps, traces are effect texts, and every operation's outcome is
//! re-derived here from the registered semantics. It then requires, receipt by receipt:
//!
//! - the hash chain: index, link and SHA-256 over the canonical JSON of each receipt;
//! - the same Allow / not-Allow decision the checker derives (reason codes are not re-derived);
//! - refusals change nothing: versions, state, trace digest and root lifecycle are as before;
//! - an accepted operation produces exactly the versions, modeled state, committed-trace digest,
//!   root lifecycle, edit digest and reservation the checker computes;
//! - every commit spends exactly one earlier reservation for the same effect, trace and versions
//!   (reservation ↔ commit correspondence), and every witness is fresh when it is used;
//! - an idempotent replay repeats its original exactly and changes nothing.
//!
//! Conventions shared with the gateway are the documented wire facts only: the receipt and edit
//! digest encodings, the committed-trace digest, effect texts `name(arg,...)` with arguments in
//! parameter-name order, and the profile limits.
//!
//! [`audit_lines`] reads the log's lines strictly first (each must be the one canonical
//! encoding of its record, re-encoded here from the documented field order) and checks signed
//! checkpoints (`{"kind": "checkpoint", ...}` bodies, docs/run.md) with its own construction of
//! the signed message.

use std::collections::{BTreeMap, BTreeSet};

mod configuration;
mod domain;
mod judge;
mod lines;
mod names;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// Why a stream was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditError {
    /// Receipt index (the stream position).
    pub index: usize,
    /// What failed.
    pub what: String,
}

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "receipt {}: {}", self.index, self.what)
    }
}

impl std::error::Error for AuditError {}

/// What an accepted stream contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Receipts replayed.
    pub receipts: usize,
    /// Operations allowed.
    pub allowed: usize,
    /// Goals created.
    pub goals: usize,
    /// Effects committed (each matched to its reservation).
    pub commits: usize,
    /// Exact idempotent replays.
    pub replays: usize,
    /// Whether the root was closed.
    pub closed: bool,
    /// Signed checkpoint receipts (each checked when a key is given).
    pub checkpoints: usize,
    /// Whether a key was given and every receipt is covered by a checkpoint signed with it,
    /// the last being final.
    pub signed: bool,
}

/// A single deliberate defect in the replayed checker, for the bounded explorer
/// (`contract_explorer`): each variant drops exactly one obligation, and the explorer must find
/// a reachable configuration that breaks an invariant. [`audit`] never uses one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Defect {
    /// A join is accepted because each source was valid alone; the composition is not checked.
    LocalOnlyComposition,
    /// Trace inclusion compares effect multisets, not sequences.
    IgnoreOrder,
    /// Trace inclusion ignores repeated effects.
    IgnoreMultiplicity,
    /// Frame predicates are not evaluated.
    NoFrames,
    /// A witness's root and epoch are not compared.
    NoRootIdentity,
    /// A delegation's root is not compared.
    NoDelegationLineage,
    /// Resource attenuation is not checked.
    NoResourceCheck,
    /// Obligation inheritance is not checked.
    NoObligationCheck,
    /// Success refinement (W6) is not checked.
    NoSuccessRefinement,
    /// A witness's policy version is not compared.
    NoPolicyFreshness,
    /// A witness's state version is not compared.
    NoStateFreshness,
    /// A witness's graph and parent revisions are not compared.
    NoGraphFreshness,
    /// A commit needs no matching reservation and skips the gate.
    NoMediation,
}

impl Defect {
    /// Every defect.
    pub const ALL: [Defect; 13] = [
        Defect::LocalOnlyComposition,
        Defect::IgnoreOrder,
        Defect::IgnoreMultiplicity,
        Defect::NoFrames,
        Defect::NoRootIdentity,
        Defect::NoDelegationLineage,
        Defect::NoResourceCheck,
        Defect::NoObligationCheck,
        Defect::NoSuccessRefinement,
        Defect::NoPolicyFreshness,
        Defect::NoStateFreshness,
        Defect::NoGraphFreshness,
        Defect::NoMediation,
    ];
}

/// Profile limits (the published finite profile).
mod limit {
    pub(super) const GOALS: usize = 64;
    pub(super) const CONTINUATIONS: usize = 256;
    pub(super) const EFFECTS: usize = 64;
    pub(super) const ARRAY: usize = 256;
    pub(super) const JOIN_SOURCES: usize = 8;
    pub(super) const PRECEDENCE: usize = 28;
    pub(super) const GUARD: usize = 4096;
    pub(super) const DOMAIN_ITEMS: usize = 256;
    pub(super) const PARAMS: usize = 16;
    pub(super) const COMBINATIONS: usize = 4096;
}

fn sha(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) use configuration::*;
pub use domain::{AuditDomain, World};
pub use lines::{audit, audit_lines, audit_signed, is_canonical_line};
use names::*;
