//! Provider updates and certificates as they arrive, and the one typed constructor of a source
//! update.
//!
//! Every source update the core takes is built by [`SourceUpdate::from_json`] (a provider's JSON
//! value) or [`SourceUpdate::typed`] (a value the gateway typed itself, from the vehicle): both
//! check the source against the catalog and the value against the source's kind, and refuse
//! with a reason code ([`UpdateError`], the state's own refusal type). The wire forms (docs/envelope.md):
//!
//! ```json
//! {"value": [...], "epoch": 41, "provenance": "utm-feed-a", "generated_at_unix_ms": 1733100000000}
//! {"id": "cert-9f2c", "covers": "<64 hex>", "valid_for_ms": 30000, "issuer": "tube-verifier"}
//! ```
//!
//! A state file (`halo-gateway check`) names its sources in one object with monotonic times
//! ([`crate::statefile`]); it goes through the same constructor.

use serde::Deserialize;

use crate::catalog::Catalog;
use crate::digest::Digest;
use crate::ids::Id;
use crate::reason::ReasonCode;
use crate::state::{SourceState, SourceUpdate, UpdateError, Value};
use crate::strict;
use crate::time::Nanos;

/// A provider's update of one source, as `POST /v1/state/{source}` takes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateBody {
    /// Typed value, per the catalog's kind for the source (`null` for epoch-only sources).
    #[serde(default)]
    pub value: serde_json::Value,
    /// Epoch or version.
    pub epoch: u64,
    /// Who produced it.
    pub provenance: Id,
    /// When the data was generated, Unix ms on the provider's clock.
    pub generated_at_unix_ms: u64,
}

/// Text that is not JSON, or JSON with a key twice, refused as such (`what` names it).
fn strict_json(bytes: &[u8], what: &str) -> Result<(), UpdateError> {
    strict::check_keys(bytes).map_err(|e| {
        UpdateError::new(
            if e.duplicate {
                ReasonCode::DUPLICATE_KEY
            } else {
                ReasonCode::INVALID_UPDATE
            },
            format!("{what}: {}", e.message),
        )
    })
}

impl UpdateBody {
    /// Reads an update of `source` strictly: a key repeated anywhere is `DUPLICATE_KEY`, text
    /// that is not JSON or not the update's shape `INVALID_UPDATE`.
    ///
    /// # Errors
    /// [`UpdateError`].
    pub fn parse(source: &str, bytes: &[u8]) -> Result<UpdateBody, UpdateError> {
        let what = format!("source `{source}`");
        strict_json(bytes, &what)?;
        serde_json::from_slice(bytes).map_err(|err| {
            let e = strict::explain(bytes, &err);
            UpdateError::new(ReasonCode::INVALID_UPDATE, format!("{what}: {e}"))
        })
    }
}

impl SourceUpdate {
    /// The catalog's source `name` at `epoch` from `provenance`, generated at `generated_at`,
    /// with a provider's JSON value typed against the source's kind.
    ///
    /// # Errors
    /// `UNKNOWN_SOURCE`, `VALUE_KIND_MISMATCH`.
    pub fn from_json(
        cat: &Catalog,
        name: &str,
        value: &serde_json::Value,
        epoch: u64,
        provenance: Id,
        generated_at: Nanos,
    ) -> Result<SourceUpdate, UpdateError> {
        let (source, kind) = source_of(cat, name)?;
        let value = Value::parse(kind, value).map_err(|e| {
            UpdateError::new(
                ReasonCode::VALUE_KIND_MISMATCH,
                format!("source `{name}`: {e}"),
            )
        })?;
        Ok(SourceUpdate {
            source,
            state: SourceState {
                generated_at,
                epoch,
                provenance,
                value,
            },
        })
    }

    /// As [`SourceUpdate::from_json`], with a value the gateway typed itself (the vehicle's).
    ///
    /// # Errors
    /// `UNKNOWN_SOURCE`, `VALUE_KIND_MISMATCH`.
    pub fn typed(
        cat: &Catalog,
        name: &str,
        value: Value,
        epoch: u64,
        provenance: Id,
        generated_at: Nanos,
    ) -> Result<SourceUpdate, UpdateError> {
        let (source, kind) = source_of(cat, name)?;
        if value.kind() != kind {
            return Err(UpdateError::new(
                ReasonCode::VALUE_KIND_MISMATCH,
                format!("source `{name}` takes another kind of value"),
            ));
        }
        Ok(SourceUpdate {
            source,
            state: SourceState {
                generated_at,
                epoch,
                provenance,
                value,
            },
        })
    }
}

fn source_of(
    cat: &Catalog,
    name: &str,
) -> Result<(crate::catalog::SourceIx, crate::state::ValueKind), UpdateError> {
    let unknown = || {
        UpdateError::new(
            ReasonCode::UNKNOWN_SOURCE,
            format!("the catalog defines no source `{name}`"),
        )
    };
    let ix = cat.source_ix(name).ok_or_else(unknown)?;
    let kind = cat.source(ix).map(|s| s.value).ok_or_else(unknown)?;
    Ok((ix, kind))
}

/// A certificate as `POST /v1/certificates` takes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateBody {
    /// Certificate id, as components reference it.
    pub id: Id,
    /// The exact component digest it covers (64 hex digits; `halo-gateway digest` prints it).
    pub covers: String,
    /// End of the certified interval, Unix ms.
    #[serde(default)]
    pub valid_until_unix_ms: Option<u64>,
    /// Or: length of the certified interval from now, ms.
    #[serde(default)]
    pub valid_for_ms: Option<u64>,
    /// Who issued it.
    pub issuer: Id,
}

impl CertificateBody {
    /// Reads a certificate strictly.
    ///
    /// # Errors
    /// `DUPLICATE_KEY`; `INVALID_UPDATE` (not JSON, not the certificate's shape).
    pub fn parse(bytes: &[u8]) -> Result<CertificateBody, UpdateError> {
        strict_json(bytes, "certificate")?;
        serde_json::from_slice(bytes).map_err(|err| {
            let e = strict::explain(bytes, &err);
            UpdateError::new(ReasonCode::INVALID_UPDATE, format!("certificate: {e}"))
        })
    }

    /// The digest it covers.
    ///
    /// # Errors
    /// `INVALID_UPDATE`: `covers` is not 64 hex digits.
    pub fn covers(&self) -> Result<Digest, UpdateError> {
        parse_covers(&self.covers)
    }
}

/// A certificate's `covers`: the digest it certifies.
///
/// # Errors
/// `INVALID_UPDATE` naming what is wrong.
pub fn parse_covers(hex: &str) -> Result<Digest, UpdateError> {
    Digest::from_hex(hex).map_err(|e| {
        UpdateError::new(
            ReasonCode::INVALID_UPDATE,
            format!("certificate `covers`: {e}"),
        )
    })
}
