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

/// Most intruders one traffic value may list.
pub const MAX_TRAFFIC: usize = 64;
/// Most certificates held at once.
pub const MAX_CERTIFICATES: usize = 1024;

/// The kind of value a source carries, as declared in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    /// Only epoch and provenance matter (a map version, say).
    None,
    /// A boolean condition (link healthy, authority current).
    Flag,
    /// A number (battery percent, wind speed).
    Number,
    /// A short identifier (vehicle state name).
    Text,
    /// A local-NED box (the current corridor).
    Bounds,
    /// A list of intruder positions (local NED).
    Traffic,
    /// One local-NED position.
    Position,
}

impl ValueKind {
    /// The kind's name in a catalog (`value = "traffic"`).
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::None => "none",
            ValueKind::Flag => "flag",
            ValueKind::Number => "number",
            ValueKind::Text => "text",
            ValueKind::Bounds => "bounds",
            ValueKind::Traffic => "traffic",
            ValueKind::Position => "position",
        }
    }
}

/// A point in the local NED frame, metres.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// North.
    pub north_m: f64,
    /// East.
    pub east_m: f64,
    /// Down.
    pub down_m: f64,
}

/// An axis-aligned local-NED box, metres; bounds are inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxNed {
    /// Southern edge.
    pub north_min: f64,
    /// Northern edge.
    pub north_max: f64,
    /// Western edge.
    pub east_min: f64,
    /// Eastern edge.
    pub east_max: f64,
    /// Highest allowed point (most negative down).
    pub down_min: f64,
    /// Lowest allowed point.
    pub down_max: f64,
}

impl BoxNed {
    /// Checks the box is usable: every bound finite and `min <= max` on every axis.
    ///
    /// # Errors
    /// A message for people.
    pub fn check(&self) -> Result<(), String> {
        let all = [
            self.north_min,
            self.north_max,
            self.east_min,
            self.east_max,
            self.down_min,
            self.down_max,
        ];
        if !all.iter().all(|x| x.is_finite()) {
            return Err("numbers must be finite".into());
        }
        if self.north_min > self.north_max
            || self.east_min > self.east_max
            || self.down_min > self.down_max
        {
            return Err("bounds must have min <= max on every axis".into());
        }
        Ok(())
    }

    /// True when `(n, e, d)` lies inside, edges included.
    pub fn contains(&self, n: f64, e: f64, d: f64) -> bool {
        (self.north_min..=self.north_max).contains(&n)
            && (self.east_min..=self.east_max).contains(&e)
            && (self.down_min..=self.down_max).contains(&d)
    }
}

/// A typed source value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// See [`ValueKind::None`].
    None,
    /// See [`ValueKind::Flag`].
    Flag(bool),
    /// See [`ValueKind::Number`].
    Number(f64),
    /// See [`ValueKind::Text`].
    Text(Id),
    /// See [`ValueKind::Bounds`].
    Bounds(BoxNed),
    /// See [`ValueKind::Traffic`].
    Traffic(Vec<Point>),
    /// See [`ValueKind::Position`].
    Position(Point),
}

impl Value {
    /// The kind of this value.
    pub const fn kind(&self) -> ValueKind {
        match self {
            Value::None => ValueKind::None,
            Value::Flag(_) => ValueKind::Flag,
            Value::Number(_) => ValueKind::Number,
            Value::Text(_) => ValueKind::Text,
            Value::Bounds(_) => ValueKind::Bounds,
            Value::Traffic(_) => ValueKind::Traffic,
            Value::Position(_) => ValueKind::Position,
        }
    }

    /// Parses a JSON value of `kind`. `null` or an absent value is only valid for
    /// [`ValueKind::None`].
    ///
    /// # Errors
    /// A message for people when the JSON does not fit the kind.
    pub fn parse(kind: ValueKind, raw: &serde_json::Value) -> Result<Value, String> {
        fn de<T: for<'a> Deserialize<'a>>(raw: &serde_json::Value) -> Result<T, String> {
            T::deserialize(raw).map_err(|e| e.to_string())
        }
        let finite = |x: f64| {
            if x.is_finite() {
                Ok(x)
            } else {
                Err("numbers must be finite".to_string())
            }
        };
        Ok(match kind {
            ValueKind::None => {
                if !raw.is_null() {
                    return Err("this source carries no value; send `null`".into());
                }
                Value::None
            }
            ValueKind::Flag => Value::Flag(de(raw)?),
            ValueKind::Number => Value::Number(finite(de(raw)?)?),
            ValueKind::Text => Value::Text(de(raw)?),
            ValueKind::Bounds => {
                let b: BoxNed = de(raw)?;
                b.check()?;
                Value::Bounds(b)
            }
            ValueKind::Traffic => {
                let v: Vec<Point> = de(raw)?;
                if v.len() > MAX_TRAFFIC {
                    return Err(format!(
                        "at most {MAX_TRAFFIC} intruders per traffic update"
                    ));
                }
                for p in &v {
                    finite(p.north_m)?;
                    finite(p.east_m)?;
                    finite(p.down_m)?;
                }
                Value::Traffic(v)
            }
            ValueKind::Position => {
                let p: Point = de(raw)?;
                finite(p.north_m)?;
                finite(p.east_m)?;
                finite(p.down_m)?;
                Value::Position(p)
            }
        })
    }
}

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

/// The support state `C_t`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    sources: Vec<Option<SourceState>>,
    certificates: BTreeMap<Id, Certificate>,
}

impl Snapshot {
    /// An empty state for `catalog`: no source has been updated yet.
    pub fn new(catalog: &Catalog) -> Snapshot {
        Snapshot {
            sources: vec![None; catalog.sources().len()],
            certificates: BTreeMap::new(),
        }
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
        if let Some(cur) = self.source(u.source) {
            if u.state.generated_at < cur.generated_at {
                return Err(UpdateError::new(
                    ReasonCode::OUT_OF_ORDER_UPDATE,
                    format!("update of `{}` is older than the one held", spec.name),
                ));
            }
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
