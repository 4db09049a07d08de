//! The values sources carry: their kinds (as a catalog declares them), local-NED points and
//! boxes, and the typed value itself. Below both the catalog (which names a source's kind) and
//! the state (which holds its value), so neither needs the other for them.

use serde::{Deserialize, Serialize};

use super::ids::Id;

/// Most intruders one traffic value may list.
pub const MAX_TRAFFIC: usize = 64;
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
    /// Where the local frame sits on the globe: the EKF origin and the home altitude (the
    /// frame global route targets are converted through).
    GeoOrigin,
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
            ValueKind::GeoOrigin => "geo_origin",
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

/// Where the local NED frame sits on the globe: the autopilot's EKF origin (PX4's
/// `GPS_GLOBAL_ORIGIN`) and the home altitude (`HOME_POSITION`), both above mean sea level.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoOrigin {
    /// Latitude of the local origin, degrees (WGS 84).
    pub lat_deg: f64,
    /// Longitude of the local origin, degrees.
    pub lon_deg: f64,
    /// Altitude of the local origin above mean sea level, metres (`down_m = 0` there).
    pub alt_m: f64,
    /// Altitude of home above mean sea level, metres (what `global_relative_alt` counts from).
    pub home_alt_m: f64,
}

/// Why a source value was refused: what an update's `VALUE_INVALID` message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// The JSON does not have the kind's shape (serde_json's words for what is wrong).
    Schema(String),
    /// A number that is NaN or infinite.
    NotFinite,
    /// A value for a source that carries none.
    NotNull,
    /// A bounds box with a minimum above its maximum.
    InvertedBounds,
    /// An origin off the projection's domain.
    OffTheGlobe,
    /// More intruders than a traffic update may carry.
    TooManyIntruders,
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueError::Schema(m) => f.write_str(m),
            ValueError::NotFinite => f.write_str("numbers must be finite"),
            ValueError::NotNull => f.write_str("this source carries no value; send `null`"),
            ValueError::InvertedBounds => f.write_str("bounds must have min <= max on every axis"),
            ValueError::OffTheGlobe => {
                f.write_str("`lat_deg` must be within (-90, 90) and `lon_deg` within ±180")
            }
            ValueError::TooManyIntruders => {
                write!(f, "at most {MAX_TRAFFIC} intruders per traffic update")
            }
        }
    }
}

impl std::error::Error for ValueError {}

impl GeoOrigin {
    /// Checks the origin is usable: finite, latitude within ±90° (the poles excluded, where
    /// the projection degenerates), longitude within ±180°.
    ///
    /// # Errors
    /// [`ValueError::NotFinite`] or [`ValueError::OffTheGlobe`].
    pub fn check(&self) -> Result<(), ValueError> {
        let all = [self.lat_deg, self.lon_deg, self.alt_m, self.home_alt_m];
        if !all.iter().all(|x| x.is_finite()) {
            return Err(ValueError::NotFinite);
        }
        if self.lat_deg.abs() >= 90.0 || self.lon_deg.abs() > 180.0 {
            return Err(ValueError::OffTheGlobe);
        }
        Ok(())
    }
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
    /// [`ValueError::NotFinite`] or [`ValueError::InvertedBounds`].
    pub fn check(&self) -> Result<(), ValueError> {
        let all = [
            self.north_min,
            self.north_max,
            self.east_min,
            self.east_max,
            self.down_min,
            self.down_max,
        ];
        if !all.iter().all(|x| x.is_finite()) {
            return Err(ValueError::NotFinite);
        }
        if self.north_min > self.north_max
            || self.east_min > self.east_max
            || self.down_min > self.down_max
        {
            return Err(ValueError::InvertedBounds);
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
    /// See [`ValueKind::GeoOrigin`].
    Geo(GeoOrigin),
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
            Value::Geo(_) => ValueKind::GeoOrigin,
        }
    }

    /// Parses a JSON value of `kind`. `null` or an absent value is only valid for
    /// [`ValueKind::None`].
    ///
    /// # Errors
    /// [`ValueError`] when the JSON does not fit the kind.
    pub fn parse(kind: ValueKind, raw: &serde_json::Value) -> Result<Value, ValueError> {
        fn de<T: for<'a> Deserialize<'a>>(raw: &serde_json::Value) -> Result<T, ValueError> {
            T::deserialize(raw).map_err(|e| ValueError::Schema(e.to_string()))
        }
        let finite = |x: f64| {
            if x.is_finite() {
                Ok(x)
            } else {
                Err(ValueError::NotFinite)
            }
        };
        Ok(match kind {
            ValueKind::None => {
                if !raw.is_null() {
                    return Err(ValueError::NotNull);
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
                    return Err(ValueError::TooManyIntruders);
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
            ValueKind::GeoOrigin => {
                let g: GeoOrigin = de(raw)?;
                g.check()?;
                Value::Geo(g)
            }
        })
    }
}
