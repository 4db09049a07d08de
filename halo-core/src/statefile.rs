//! JSON forms of provider updates and of a whole state snapshot (for `halo-gateway check`,
//! conformance data and tests).
//!
//! ```json
//! {"now_ms": 10000,
//!  "sources": {"traffic": {"value": [], "epoch": 41, "provenance": "utm-a", "generated_at_ms": 9800}},
//!  "certificates": [{"id": "cert-9f2c", "covers": "<64 hex>", "valid_until_ms": 30000, "issuer": "geo"}]}
//! ```
//!
//! Times are milliseconds on the gateway's monotonic clock.

use serde::Deserialize;

use super::catalog::Catalog;
use super::ids::Id;
use super::reason::ReasonCode;
use super::state::{Certificate, SourceUpdate, UpdateError};
use super::time::Nanos;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSourceState {
    #[serde(default)]
    value: serde_json::Value,
    epoch: u64,
    provenance: Id,
    generated_at_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCertificate {
    id: Id,
    covers: String,
    valid_until_ms: u64,
    issuer: Id,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStateFile {
    now_ms: u64,
    #[serde(default)]
    sources: std::collections::BTreeMap<String, RawSourceState>,
    #[serde(default)]
    certificates: Vec<RawCertificate>,
}

/// A parsed state snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct StateFile {
    /// The evaluation instant.
    pub now: Nanos,
    /// One update per source.
    pub updates: Vec<SourceUpdate>,
    /// Certificates.
    pub certificates: Vec<Certificate>,
}

/// One source of a state file with its name, `{"source", "value", "epoch", "provenance",
/// "generated_at_ms"}` (monotonic ms), for tests and tools; typed by the one constructor,
/// [`SourceUpdate::from_json`]. A provider's update over HTTP is [`crate::update::UpdateBody`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderUpdate {
    /// Source name.
    pub source: String,
    /// Typed value (shape per the catalog's value kind).
    #[serde(default)]
    pub value: serde_json::Value,
    /// Epoch or version.
    pub epoch: u64,
    /// Provenance id.
    pub provenance: Id,
    /// Generation time, ms on the gateway's monotonic clock.
    pub generated_at_ms: u64,
}

fn to_update(
    cat: &Catalog,
    name: &str,
    value: &serde_json::Value,
    epoch: u64,
    provenance: &Id,
    at_ms: u64,
) -> Result<SourceUpdate, UpdateError> {
    SourceUpdate::from_json(
        cat,
        name,
        value,
        epoch,
        provenance.clone(),
        Nanos::from_ms(at_ms),
    )
}

fn invalid(message: impl Into<String>) -> UpdateError {
    UpdateError::new(ReasonCode::INVALID_UPDATE, message)
}

impl ProviderUpdate {
    /// Parses one update.
    ///
    /// # Errors
    /// `INVALID_UPDATE` with a message for people.
    pub fn parse(bytes: &[u8]) -> Result<ProviderUpdate, UpdateError> {
        serde_json::from_slice(bytes).map_err(|e| invalid(super::strict::explain(bytes, &e)))
    }

    /// Types the update against the catalog.
    ///
    /// # Errors
    /// The [`UpdateError`] naming the source when it is unknown or the value does not fit its
    /// kind.
    pub fn typed(&self, cat: &Catalog) -> Result<SourceUpdate, UpdateError> {
        to_update(
            cat,
            &self.source,
            &self.value,
            self.epoch,
            &self.provenance,
            self.generated_at_ms,
        )
    }
}

/// Parses a state file.
///
/// # Errors
/// An [`UpdateError`] (`INVALID_UPDATE`, or the update's own code) naming the offending source or
/// certificate.
pub fn parse_state(cat: &Catalog, bytes: &[u8]) -> Result<StateFile, UpdateError> {
    super::strict::check_keys(bytes).map_err(|e| invalid(e.message))?;
    let raw: RawStateFile =
        serde_json::from_slice(bytes).map_err(|e| invalid(super::strict::explain(bytes, &e)))?;
    let mut updates = Vec::new();
    for (name, s) in &raw.sources {
        updates.push(to_update(
            cat,
            name,
            &s.value,
            s.epoch,
            &s.provenance,
            s.generated_at_ms,
        )?);
    }
    let mut certificates: Vec<Certificate> = Vec::new();
    for c in raw.certificates {
        if certificates.iter().any(|x| x.id == c.id) {
            return Err(invalid(format!("certificate `{}` appears twice", c.id)));
        }
        certificates.push(Certificate {
            id: c.id,
            covers: crate::update::parse_covers(&c.covers)?,
            valid_until: Nanos::from_ms(c.valid_until_ms),
            issuer: c.issuer,
        });
    }
    Ok(StateFile {
        now: Nanos::from_ms(raw.now_ms),
        updates,
        certificates,
    })
}
