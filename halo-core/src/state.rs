//! The runtime support state `C_t`: named sources, each with the generation time of its newest
//! update `u_s(t)`, an epoch, a provenance id and a typed value; plus the certificates providers
//! have issued. Age of information is `AoI_s(t) = t - u_s(t)`.
//!
//! The state only changes through [`Snapshot::apply`], which validates an update against the
//! catalog first and changes nothing when it refuses one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::catalog::{Catalog, SourceIx};
use super::digest::Digest;
use super::ids::Id;
use super::reason::ReasonCode;
use super::time::Nanos;

pub use super::value::{BoxNed, MAX_TRAFFIC, Point, Value, ValueKind};

/// Most certificates held at once.
pub const MAX_CERTIFICATES: usize = 1024;

/// The newest update of one source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceState {
    /// Generation time `u_s` on the gateway's monotonic clock.
    pub generated_at: Nanos,
    /// Epoch or version.
    pub epoch: u64,
    /// Who produced it.
    pub provenance: Id,
    /// The value.
    pub value: Value,
}

/// A provider's update for one source.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceUpdate {
    /// Which source.
    pub source: SourceIx,
    /// The new state.
    pub state: SourceState,
}

/// A certificate issued by a trusted checker (a geometric verifier, a UTM service) for one exact
/// component digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// Certificate id, as components reference it.
    pub id: Id,
    /// The component digest it covers.
    pub covers: Digest,
    /// The end of the interval it certifies.
    pub valid_until: Nanos,
    /// Who issued it.
    pub issuer: Id,
}

/// Why the state refused an update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateError {
    code: ReasonCode,
    message: String,
}

impl UpdateError {
    pub(crate) fn new(code: ReasonCode, message: impl Into<String>) -> UpdateError {
        UpdateError {
            code,
            message: message.into(),
        }
    }
    /// The stable code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }
    /// A message for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for UpdateError {}

/// The support state `C_t`. Two snapshots are equal when they hold the same states and
/// certificates, however many updates each took to get there.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    sources: Vec<Option<SourceState>>,
    certificates: BTreeMap<Id, Certificate>,
    /// Counts the updates applied: what is derived from the sources alone (a type's stable
    /// projection) stays right while it is unchanged.
    stamp: u64,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Snapshot) -> bool {
        // The stamp counts updates; it is not part of the state.
        self.sources == other.sources && self.certificates == other.certificates
    }
}

impl Snapshot {
    /// An empty state for `catalog`: no source has been updated yet.
    pub fn new(catalog: &Catalog) -> Snapshot {
        Snapshot {
            sources: vec![None; catalog.sources().len()],
            certificates: BTreeMap::new(),
            stamp: 0,
        }
    }

    /// A number that changes whenever a source's state does (certificates aside): two reads of
    /// the sources with the same stamp read the same states.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// The newest state of `source`, if any update arrived.
    pub fn source(&self, source: SourceIx) -> Option<&SourceState> {
        self.sources
            .get(usize::from(source.0))
            .and_then(Option::as_ref)
    }

    /// Certificates held.
    pub fn certificate_count(&self) -> usize {
        self.certificates.len()
    }

    /// A certificate by id.
    pub fn certificate(&self, id: &Id) -> Option<&Certificate> {
        self.certificates.get(id)
    }

    /// Age of information of `source` at `now`, or `None` when it was never updated.
    pub fn age(&self, source: SourceIx, now: Nanos) -> Option<Nanos> {
        self.source(source)
            .map(|s| now.saturating_sub(s.generated_at))
    }

    /// Checks an update against the catalog and the current state without applying it.
    ///
    /// # Errors
    /// [`UpdateError`] with `UNKNOWN_SOURCE`, `VALUE_KIND_MISMATCH`, `FUTURE_TIMESTAMP` or
    /// `OUT_OF_ORDER_UPDATE`.
    pub fn check(
        &self,
        catalog: &Catalog,
        now: Nanos,
        u: &SourceUpdate,
    ) -> Result<(), UpdateError> {
        let spec = catalog.source(u.source).ok_or_else(|| {
            UpdateError::new(
                ReasonCode::UNKNOWN_SOURCE,
                format!("no source #{}", u.source.0),
            )
        })?;
        if u.state.value.kind() != spec.value {
            return Err(UpdateError::new(
                ReasonCode::VALUE_KIND_MISMATCH,
                format!(
                    "source `{}` carries {} values",
                    spec.name,
                    spec.value.name()
                ),
            ));
        }
        if u.state.generated_at > now.saturating_add(catalog.future_tolerance()) {
            return Err(UpdateError::new(
                ReasonCode::FUTURE_TIMESTAMP,
                format!(
                    "update of `{}` generated {} in the future",
                    spec.name,
                    u.state.generated_at.saturating_sub(now)
                ),
            ));
        }
        if let Some(cur) = self.source(u.source)
            && u.state.generated_at < cur.generated_at
        {
            return Err(UpdateError::new(
                ReasonCode::OUT_OF_ORDER_UPDATE,
                format!("update of `{}` is older than the one held", spec.name),
            ));
        }
        Ok(())
    }

    /// Applies an update after [`Snapshot::check`]. Returns the previous state of the source.
    ///
    /// # Errors
    /// As [`Snapshot::check`]; the state is unchanged on error.
    pub fn apply(
        &mut self,
        catalog: &Catalog,
        now: Nanos,
        u: SourceUpdate,
    ) -> Result<Option<SourceState>, UpdateError> {
        self.check(catalog, now, &u)?;
        let slot = self
            .sources
            .get_mut(usize::from(u.source.0))
            .ok_or_else(|| {
                UpdateError::new(ReasonCode::UNKNOWN_SOURCE, "source index out of range")
            })?;
        self.stamp = self.stamp.wrapping_add(1);
        Ok(slot.replace(u.state))
    }

    /// Installs or replaces a certificate.
    ///
    /// # Errors
    /// `INVALID_UPDATE` when the certificate table is full.
    pub fn put_certificate(&mut self, cert: Certificate) -> Result<(), UpdateError> {
        if self.certificates.len() >= MAX_CERTIFICATES && !self.certificates.contains_key(&cert.id)
        {
            return Err(UpdateError::new(
                ReasonCode::INVALID_UPDATE,
                "certificate table is full",
            ));
        }
        self.certificates.insert(cert.id.clone(), cert);
        Ok(())
    }

    /// Drops every certificate whose interval ended at or before `now`; it can support nothing
    /// any more. Returns how many went.
    pub fn prune_certificates(&mut self, now: Nanos) -> usize {
        let before = self.certificates.len();
        self.certificates.retain(|_, c| c.valid_until > now);
        before - self.certificates.len()
    }

    /// Removes a certificate (revocation). Returns whether one was held.
    pub fn revoke_certificate(&mut self, id: &Id) -> bool {
        self.certificates.remove(id).is_some()
    }
}
