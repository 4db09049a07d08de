//! Typed payloads. The catalog names the payload kind of each component type; the envelope's
//! raw payload is parsed into exactly that kind (unknown fields and duplicate keys rejected) and
//! checked for range before anything else happens to it.

use serde::{Deserialize, Serialize};

use super::digest::{put_str, put_varint};
use super::ids::Id;

/// Largest accepted coordinate magnitude in a local frame, in metres.
pub const MAX_LOCAL_COORD_M: f64 = 100_000.0;
/// Longest accepted action duration, in seconds.
pub const MAX_DURATION_S: f64 = 3_600.0;

/// The text of `{"text":"…"}` written without whitespace, escapes or control characters: the
/// same text serde_json reads from it.
fn plain_text(raw: &str) -> Option<&str> {
    let text = raw.strip_prefix("{\"text\":\"")?.strip_suffix("\"}")?;
    let plain = !text.bytes().any(|b| matches!(b, b'"' | b'\\' | 0..=0x1f));
    plain.then_some(text)
}

/// One value of a plain payload object ([`plain_members`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plain<'a> {
    /// A string without escapes or control characters: its text.
    Str(&'a str),
    /// A number serde_json reads to exactly this value.
    Num(f64),
}

/// Powers of ten up to the 15th, each exact in an `f64`.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// The members of `raw` when it is a compact object (`{"k":v,…}`, no whitespace) of at most 8
/// members whose keys and values are plain ([`Plain`]); `None` for anything else, which
/// serde_json then reads (and refuses with its own message where it must).
///
/// A number is plain when it is an integer or decimal of at most 15 digits without an exponent.
/// Its significand is then below 2^53 and its power of ten at most 15, both exact, so the one
/// division serde_json does (its `f64_from_parts`, without the `float_roundtrip` feature) is
/// correctly rounded, and this computes the same division: the same `f64`, bit for bit.
fn plain_members(raw: &str) -> Option<heapless::Vec<(&str, Plain<'_>), 8>> {
    let b = raw.as_bytes();
    let mut i = 0;
    let mut out = heapless::Vec::new();
    if b.first() != Some(&b'{') {
        return None;
    }
    i += 1;
    if b.get(i) == Some(&b'}') {
        return (i + 1 == b.len()).then_some(out);
    }
    loop {
        let key = plain_str(raw, &mut i)?;
        if b.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        let value = match b.get(i)? {
            b'"' => Plain::Str(plain_str(raw, &mut i)?),
            _ => Plain::Num(plain_number(b, &mut i)?),
        };
        out.push((key, value)).ok()?;
        match b.get(i)? {
            b',' => i += 1,
            b'}' => return (i + 1 == b.len()).then_some(out),
            _ => return None,
        }
    }
}

/// The text of the string that starts at `*i`, when it has no escape or control character;
/// `*i` moves past its closing quote.
fn plain_str<'a>(raw: &'a str, i: &mut usize) -> Option<&'a str> {
    let b = raw.as_bytes();
    if b.get(*i) != Some(&b'"') {
        return None;
    }
    let start = *i + 1;
    let len = b.get(start..)?.iter().position(|&c| c == b'"')?;
    let text = raw.get(start..start + len)?;
    if text.bytes().any(|c| c == b'\\' || c < 0x20) {
        return None;
    }
    *i = start + len + 1;
    Some(text)
}

/// The plain number ([`plain_members`]) that starts at `*i`; `*i` moves past it.
fn plain_number(b: &[u8], i: &mut usize) -> Option<f64> {
    let negative = b.get(*i) == Some(&b'-');
    let mut j = *i + usize::from(negative);
    let mut significand = 0u64;
    let mut digits = 0usize;
    let mut fraction = 0usize;
    // JSON: one leading zero at most, then an optional fraction of at least one digit.
    let lead_zero = b.get(j) == Some(&b'0');
    while let Some(d @ b'0'..=b'9') = b.get(j).copied() {
        significand = significand * 10 + u64::from(d - b'0');
        digits += 1;
        j += 1;
        if digits > 15 || (lead_zero && digits > 1) {
            return None;
        }
    }
    if digits == 0 {
        return None;
    }
    if b.get(j) == Some(&b'.') {
        j += 1;
        while let Some(d @ b'0'..=b'9') = b.get(j).copied() {
            significand = significand * 10 + u64::from(d - b'0');
            digits += 1;
            fraction += 1;
            j += 1;
            if digits > 15 {
                return None;
            }
        }
        if fraction == 0 {
            return None;
        }
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        return None;
    }
    // Exact: significand < 10^15 < 2^53; the power of ten is exact (at most 10^15).
    #[allow(clippy::cast_precision_loss, reason = "below 2^53, exact")]
    let mut f = significand as f64;
    if fraction > 0 {
        f /= POW10.get(fraction).copied()?;
    }
    *i = j;
    Some(if negative { -f } else { f })
}

/// A local route target written plainly (every field once, in any order), as serde_json reads
/// it; `None` for any other shape.
fn plain_route(raw: &str) -> Option<RouteTarget> {
    let members = plain_members(raw)?;
    let mut t = [None::<f64>; 5];
    let mut frame = false;
    for (k, v) in &members {
        let slot = match *k {
            "frame" => {
                if frame || *v != Plain::Str("local_ned") {
                    return None;
                }
                frame = true;
                continue;
            }
            "north_m" => 0,
            "east_m" => 1,
            "down_m" => 2,
            "yaw_deg" => 3,
            "duration_s" => 4,
            _ => return None,
        };
        let (Plain::Num(n), Some(s @ None)) = (v, t.get_mut(slot)) else {
            return None;
        };
        *s = Some(*n);
    }
    let [
        Some(north_m),
        Some(east_m),
        Some(down_m),
        Some(yaw_deg),
        Some(duration_s),
    ] = t
    else {
        return None;
    };
    frame.then_some(RouteTarget {
        frame: Frame::LocalNed,
        north_m,
        east_m,
        down_m,
        yaw_deg,
        duration_s,
    })
}

/// A hold written plainly, as serde_json reads it.
fn plain_hold(raw: &str) -> Option<HoldPayload> {
    match plain_members(raw)?.as_slice() {
        [("duration_s", Plain::Num(d))] => Some(HoldPayload { duration_s: *d }),
        _ => None,
    }
}

/// A report written plainly (`unit` optional, every field once, in any order), as serde_json
/// reads it.
fn plain_report(raw: &str) -> Option<ReportPayload> {
    let (mut sensor, mut value, mut unit) = (None, None, None);
    for (k, v) in &plain_members(raw)? {
        match (*k, *v) {
            ("sensor", Plain::Str(s)) if sensor.is_none() => sensor = Some(Id::new(s).ok()?),
            ("value", Plain::Num(n)) if value.is_none() => value = Some(n),
            ("unit", Plain::Str(u)) if unit.is_none() => unit = Some(Id::new(u).ok()?),
            _ => return None,
        }
    }
    Some(ReportPayload {
        sensor: sensor?,
        value: value?,
        unit,
    })
}

/// The payload kinds the core knows. A catalog maps each component type to one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadKind {
    /// Operator notice (non-action).
    Notice,
    /// Sensor report (non-action).
    Report,
    /// Request to providers or the agent to refresh named sources (non-action).
    RefreshRequest,
    /// Position target with frame, yaw and duration (action).
    RouteAction,
    /// Hold at the current position for a duration (action).
    Hold,
    /// Land at the current position (action).
    Land,
    /// Status message (non-action).
    Status,
    /// Merge one branch into another (action; the repository-merge domain).
    Merge,
}

impl PayloadKind {
    /// True for kinds that request an external state change and so go through the gate.
    pub const fn is_action(self) -> bool {
        matches!(
            self,
            PayloadKind::RouteAction | PayloadKind::Hold | PayloadKind::Land | PayloadKind::Merge
        )
    }

    /// The snake-case name used in catalogs.
    pub const fn name(self) -> &'static str {
        match self {
            PayloadKind::Notice => "notice",
            PayloadKind::Report => "report",
            PayloadKind::RefreshRequest => "refresh_request",
            PayloadKind::RouteAction => "route_action",
            PayloadKind::Hold => "hold",
            PayloadKind::Land => "land",
            PayloadKind::Status => "status",
            PayloadKind::Merge => "merge",
        }
    }
}

/// Coordinate frame of a position target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Frame {
    /// PX4's local NED frame (MAV_FRAME_LOCAL_NED): origin at the EKF origin, z down.
    LocalNed,
}

/// An exact position target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteTarget {
    /// Frame of the coordinates.
    pub frame: Frame,
    /// North, metres.
    pub north_m: f64,
    /// East, metres.
    pub east_m: f64,
    /// Down, metres (negative is up).
    pub down_m: f64,
    /// Heading, degrees clockwise from north.
    pub yaw_deg: f64,
    /// How long the target is to be flown, seconds (the INTERVAL the dispatch certifies).
    pub duration_s: f64,
}

/// The global frames a route target may be given in (MAVLink's names for them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GlobalFrame {
    /// Latitude, longitude and altitude above mean sea level (MAV_FRAME_GLOBAL).
    Global,
    /// Latitude, longitude and altitude above home (MAV_FRAME_GLOBAL_RELATIVE_ALT).
    GlobalRelativeAlt,
}

/// A position target on the globe. The gateway converts it to the local frame through the
/// `origin` source of the action's type ([`crate::geo::to_local`]); the digest covers it as the
/// agent wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobalTarget {
    /// Frame of the coordinates.
    pub frame: GlobalFrame,
    /// Latitude, degrees (WGS 84).
    pub lat_deg: f64,
    /// Longitude, degrees.
    pub lon_deg: f64,
    /// Altitude, metres: above mean sea level (`global`) or above home (`global_relative_alt`).
    pub alt_m: f64,
    /// Heading, degrees clockwise from north.
    pub yaw_deg: f64,
    /// How long the target is to be flown, seconds.
    pub duration_s: f64,
}

/// Text of a notice or status; bounded by the payload byte limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextPayload {
    /// The message.
    pub text: String,
}

/// A sensor report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportPayload {
    /// Which sensor, e.g. `z_range`.
    pub sensor: Id,
    /// The reported value.
    pub value: f64,
    /// Optional unit, e.g. `m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Id>,
}

/// A request that named sources be refreshed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshPayload {
    /// Source names to refresh.
    pub sources: Vec<Id>,
    /// Optional note for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Hold position.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldPayload {
    /// How long to hold, seconds.
    pub duration_s: f64,
}

/// Merge branch `source` into branch `target` (the repository-merge domain; which commits are
/// meant is pinned by the component's claims on the target head and the patch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergePayload {
    /// The branch whose change is merged.
    pub source: Id,
    /// The branch it is merged into.
    pub target: Id,
}

/// Land where the vehicle is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LandPayload {}

/// A validated, typed payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Payload {
    /// See [`PayloadKind::Notice`].
    Notice(TextPayload),
    /// See [`PayloadKind::Report`]. Boxed, as is [`Payload::Merge`]: their inline ids make
    /// them 144–160 bytes, against at most 48 for every other payload. Each admitted component
    /// holds its payload in an allocation of its own (the `Arc` it shares with its events);
    /// with a 56-byte `Payload` that allocation is 72 bytes, a size glibc serves from its
    /// small-size caches.
    Report(Box<ReportPayload>),
    /// See [`PayloadKind::RefreshRequest`].
    RefreshRequest(RefreshPayload),
    /// See [`PayloadKind::RouteAction`].
    RouteAction(RouteTarget),
    /// See [`PayloadKind::Hold`].
    Hold(HoldPayload),
    /// See [`PayloadKind::Land`].
    Land(LandPayload),
    /// See [`PayloadKind::Status`].
    Status(TextPayload),
    /// See [`PayloadKind::Merge`] (boxed: see [`Payload::Report`]).
    Merge(Box<MergePayload>),
    /// A [`PayloadKind::RouteAction`] whose target is on the globe. (Last, so that every
    /// other payload keeps its canonical bytes and digest.)
    GlobalRoute(GlobalTarget),
}

// Kept small on purpose (see `Payload::Report`); a payload struct grown past 48 bytes belongs
// behind a `Box` too.
const _: () = assert!(std::mem::size_of::<Payload>() <= 56);

/// The exact command an action hands to the adapter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ActionCommand {
    /// Fly to and hold this target for its duration.
    Route(RouteTarget),
    /// Hold position for a duration.
    Hold {
        /// Seconds.
        duration_s: f64,
    },
    /// Land.
    Land,
    /// Merge `source` into `target`.
    Merge {
        /// Source branch.
        source: Id,
        /// Target branch.
        target: Id,
    },
}

/// Why a payload was refused: what the envelope's `PAYLOAD_INVALID` message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// The JSON does not have the kind's shape (serde_json's words for what is wrong).
    Schema(String),
    /// A field's value breaks its rule; `rule` completes "`field` must …".
    Field {
        /// The payload field, as the agent writes it.
        field: &'static str,
        /// The rule in words, e.g. "be in (0, 600] s".
        rule: String,
    },
    /// A route target's `frame` names none of the frames the gateway reads.
    UnknownFrame,
    /// A merge whose source and target are the same branch.
    SameBranch,
}

impl PayloadError {
    /// The stable code an envelope's rejection carries for it: a repeated or unknown field has
    /// its own, everything else is `INVALID_PAYLOAD`.
    pub fn code(&self) -> crate::reason::ReasonCode {
        use crate::reason::ReasonCode;
        match self {
            // serde_json names both in its message, and only there.
            PayloadError::Schema(m) if m.contains("duplicate field") => ReasonCode::DUPLICATE_KEY,
            PayloadError::Schema(m) if m.contains("unknown field") => ReasonCode::UNKNOWN_FIELD,
            _ => ReasonCode::INVALID_PAYLOAD,
        }
    }

    fn field(field: &'static str, rule: impl Into<String>) -> PayloadError {
        PayloadError::Field {
            field,
            rule: rule.into(),
        }
    }
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::Schema(m) => f.write_str(m),
            PayloadError::Field { field, rule } => write!(f, "`{field}` must {rule}"),
            PayloadError::UnknownFrame => f.write_str(
                "`frame` must be `local_ned` (north_m, east_m, down_m), \
                 `global` or `global_relative_alt` (lat_deg, lon_deg, alt_m)",
            ),
            PayloadError::SameBranch => {
                f.write_str("`source` and `target` must be different branches")
            }
        }
    }
}

impl std::error::Error for PayloadError {}

fn check_coord(name: &'static str, v: f64) -> Result<(), PayloadError> {
    if !v.is_finite() || v.abs() > MAX_LOCAL_COORD_M {
        return Err(PayloadError::field(
            name,
            format!("be finite and within ±{MAX_LOCAL_COORD_M} m"),
        ));
    }
    Ok(())
}

fn check_yaw(v: f64) -> Result<(), PayloadError> {
    if !v.is_finite() || v.abs() > 360.0 {
        return Err(PayloadError::field("yaw_deg", "be within ±360"));
    }
    Ok(())
}

/// A route action's target: local NED (read first, the usual case; plainly written, directly)
/// or global.
fn parse_route(raw: &str, direct: bool) -> Result<Payload, PayloadError> {
    let local = match direct.then(|| plain_route(raw)).flatten() {
        Some(t) => Ok(t),
        None => serde_json::from_str::<RouteTarget>(raw),
    };
    let t = match local {
        Ok(t) => t,
        Err(local_err) => {
            // Not a local target: a global one, when it says so; otherwise the local reading's
            // error (the frame the payload names decides which message is the useful one).
            let global = serde_json::from_str::<GlobalTarget>(raw);
            return match global {
                Ok(g) => {
                    if !g.lat_deg.is_finite() || g.lat_deg.abs() >= 90.0 {
                        return Err(PayloadError::field("lat_deg", "be within (-90, 90)"));
                    }
                    if !g.lon_deg.is_finite() || g.lon_deg.abs() > 180.0 {
                        return Err(PayloadError::field("lon_deg", "be within ±180"));
                    }
                    check_coord("alt_m", g.alt_m)?;
                    check_yaw(g.yaw_deg)?;
                    check_duration(g.duration_s)?;
                    Ok(Payload::GlobalRoute(g))
                }
                Err(global_err) => {
                    // The frame the payload names decides which reading's message helps.
                    #[derive(Deserialize)]
                    struct FrameOnly {
                        frame: Option<String>,
                    }
                    let frame = serde_json::from_str::<FrameOnly>(raw)
                        .ok()
                        .and_then(|f| f.frame);
                    Err(match frame.as_deref() {
                        Some("local_ned") | None => PayloadError::Schema(local_err.to_string()),
                        Some("global" | "global_relative_alt") => {
                            PayloadError::Schema(global_err.to_string())
                        }
                        Some(_) => PayloadError::UnknownFrame,
                    })
                }
            };
        }
    };
    check_coord("north_m", t.north_m)?;
    check_coord("east_m", t.east_m)?;
    check_coord("down_m", t.down_m)?;
    check_yaw(t.yaw_deg)?;
    check_duration(t.duration_s)?;
    Ok(Payload::RouteAction(t))
}

fn check_duration(v: f64) -> Result<(), PayloadError> {
    if !v.is_finite() || v <= 0.0 || v > MAX_DURATION_S {
        return Err(PayloadError::field(
            "duration_s",
            format!("be in (0, {MAX_DURATION_S}] s"),
        ));
    }
    Ok(())
}

impl Payload {
    /// Parses `raw` JSON as a payload of `kind`. (A notice's or status's `{"text":"…"}`, and a
    /// local route target, a hold or a report, written without whitespace, escapes or
    /// exponents, as nearly every one is, is read directly, to the same value serde_json reads;
    /// everything else by serde_json.)
    ///
    /// # Errors
    /// [`PayloadError`] when the JSON does not match the kind's schema or a value is out of
    /// range.
    pub fn parse(kind: PayloadKind, raw: &str) -> Result<Payload, PayloadError> {
        Payload::read(kind, raw, true)
    }

    /// [`Payload::parse`] with every payload read by serde_json: what the direct readers are held
    /// to (the same payload, or the same refusal, for every input), by the unit tests and the
    /// `envelope` fuzz target.
    ///
    /// # Errors
    /// As [`Payload::parse`].
    pub fn parse_by_serde_json(kind: PayloadKind, raw: &str) -> Result<Payload, PayloadError> {
        Payload::read(kind, raw, false)
    }

    fn read(kind: PayloadKind, raw: &str, direct: bool) -> Result<Payload, PayloadError> {
        fn de<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, PayloadError> {
            serde_json::from_str(raw).map_err(|e| PayloadError::Schema(e.to_string()))
        }
        // The direct reading of a plainly written payload, or serde_json's.
        fn either<'a, T: Deserialize<'a>>(
            direct: bool,
            plain: impl FnOnce(&'a str) -> Option<T>,
            raw: &'a str,
        ) -> Result<T, PayloadError> {
            match direct.then(|| plain(raw)).flatten() {
                Some(t) => Ok(t),
                None => de(raw),
            }
        }
        let text = if direct { plain_text(raw) } else { None };
        if let (PayloadKind::Notice | PayloadKind::Status, Some(text)) = (kind, text) {
            let t = TextPayload {
                text: text.to_owned(),
            };
            return Ok(match kind {
                PayloadKind::Notice => Payload::Notice(t),
                _ => Payload::Status(t),
            });
        }
        let p = match kind {
            PayloadKind::Notice => Payload::Notice(de(raw)?),
            PayloadKind::Report => {
                let r: ReportPayload = either(direct, plain_report, raw)?;
                if !r.value.is_finite() {
                    return Err(PayloadError::field("value", "be finite"));
                }
                Payload::Report(Box::new(r))
            }
            PayloadKind::RefreshRequest => {
                let r: RefreshPayload = de(raw)?;
                if r.sources.is_empty() || r.sources.len() > 64 {
                    return Err(PayloadError::field("sources", "name 1 to 64 sources"));
                }
                Payload::RefreshRequest(r)
            }
            PayloadKind::RouteAction => parse_route(raw, direct)?,
            PayloadKind::Hold => {
                let h: HoldPayload = either(direct, plain_hold, raw)?;
                check_duration(h.duration_s)?;
                Payload::Hold(h)
            }
            PayloadKind::Land => Payload::Land(de(raw)?),
            PayloadKind::Status => Payload::Status(de(raw)?),
            PayloadKind::Merge => {
                let m: MergePayload = de(raw)?;
                if m.source == m.target {
                    return Err(PayloadError::SameBranch);
                }
                Payload::Merge(Box::new(m))
            }
        };
        Ok(p)
    }

    /// The kind of this payload.
    pub const fn kind(&self) -> PayloadKind {
        match self {
            Payload::Notice(_) => PayloadKind::Notice,
            Payload::Report(_) => PayloadKind::Report,
            Payload::RefreshRequest(_) => PayloadKind::RefreshRequest,
            Payload::RouteAction(_) | Payload::GlobalRoute(_) => PayloadKind::RouteAction,
            Payload::Hold(_) => PayloadKind::Hold,
            Payload::Land(_) => PayloadKind::Land,
            Payload::Status(_) => PayloadKind::Status,
            Payload::Merge(_) => PayloadKind::Merge,
        }
    }

    /// The adapter command for an action payload, `None` for non-actions. A global target's
    /// command is its local target under the origin in force (`local`, from
    /// [`crate::support::route_target`]); without one there is no command.
    pub fn command(&self, local: Option<&RouteTarget>) -> Option<ActionCommand> {
        match self {
            Payload::RouteAction(t) => Some(ActionCommand::Route(*t)),
            Payload::GlobalRoute(_) => local.map(|t| ActionCommand::Route(*t)),
            Payload::Hold(h) => Some(ActionCommand::Hold {
                duration_s: h.duration_s,
            }),
            Payload::Land(_) => Some(ActionCommand::Land),
            Payload::Merge(m) => Some(ActionCommand::Merge {
                source: m.source.clone(),
                target: m.target.clone(),
            }),
            _ => None,
        }
    }

    /// The declared duration of an action's interval, if it has one.
    pub fn duration_s(&self) -> Option<f64> {
        match self {
            Payload::RouteAction(t) => Some(t.duration_s),
            Payload::GlobalRoute(g) => Some(g.duration_s),
            Payload::Hold(h) => Some(h.duration_s),
            _ => None,
        }
    }

    /// The local position target as the agent wrote it. A global target has none here: its
    /// local point depends on the origin in force ([`crate::support::route_target`]).
    pub const fn target(&self) -> Option<&RouteTarget> {
        match self {
            Payload::RouteAction(t) => Some(t),
            _ => None,
        }
    }

    /// Appends the payload's postcard encoding, the part of a component's canonical bytes its
    /// digest covers, written directly (the test below holds it to postcard's, variant by
    /// variant): the variant's index as a varint, then the fields in order; a float as its
    /// eight little-endian bytes; a string as its length and bytes; an optional field that
    /// serde skips when empty as nothing, or a 1 and the value.
    pub(crate) fn put_postcard(&self, buf: &mut Vec<u8>) {
        fn floats(buf: &mut Vec<u8>, xs: [f64; 5]) {
            let mut b = [0u8; 40];
            for (dst, x) in b.chunks_exact_mut(8).zip(xs) {
                dst.copy_from_slice(&x.to_le_bytes());
            }
            buf.extend_from_slice(&b);
        }
        fn skipped_if_none(buf: &mut Vec<u8>, s: Option<&str>) {
            if let Some(s) = s {
                buf.push(1);
                put_str(buf, s);
            }
        }
        // The variant indices, in declaration order (serde numbers them so). Every struct is
        // taken apart whole, so a field added to one stops the build here until it is written
        // (a digest must cover every field).
        match self {
            Payload::Notice(TextPayload { text }) => {
                buf.push(0);
                put_str(buf, text);
            }
            Payload::Report(r) => {
                let ReportPayload {
                    sensor,
                    value,
                    unit,
                } = &**r;
                buf.push(1);
                put_str(buf, sensor.as_str());
                buf.extend_from_slice(&value.to_le_bytes());
                skipped_if_none(buf, unit.as_ref().map(Id::as_str));
            }
            Payload::RefreshRequest(RefreshPayload { sources, note }) => {
                buf.push(2);
                put_varint(buf, sources.len() as u64);
                for s in sources {
                    put_str(buf, s.as_str());
                }
                skipped_if_none(buf, note.as_deref());
            }
            Payload::RouteAction(RouteTarget {
                frame: Frame::LocalNed,
                north_m,
                east_m,
                down_m,
                yaw_deg,
                duration_s,
            }) => {
                // The frame is a one-variant enum: index 0.
                buf.extend_from_slice(&[3, 0]);
                floats(buf, [*north_m, *east_m, *down_m, *yaw_deg, *duration_s]);
            }
            Payload::Hold(HoldPayload { duration_s }) => {
                buf.push(4);
                buf.extend_from_slice(&duration_s.to_le_bytes());
            }
            Payload::Land(LandPayload {}) => buf.push(5),
            Payload::Status(TextPayload { text }) => {
                buf.push(6);
                put_str(buf, text);
            }
            Payload::Merge(m) => {
                let MergePayload { source, target } = &**m;
                buf.push(7);
                put_str(buf, source.as_str());
                put_str(buf, target.as_str());
            }
            Payload::GlobalRoute(GlobalTarget {
                frame,
                lat_deg,
                lon_deg,
                alt_m,
                yaw_deg,
                duration_s,
            }) => {
                let frame = match frame {
                    GlobalFrame::Global => 0,
                    GlobalFrame::GlobalRelativeAlt => 1,
                };
                buf.extend_from_slice(&[8, frame]);
                floats(buf, [*lat_deg, *lon_deg, *alt_m, *yaw_deg, *duration_s]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_postcard_is_postcards() {
        let id = |s: &str| s.parse::<Id>().unwrap();
        let long = "ü".repeat(100); // 200 bytes: a two-byte length
        let target = RouteTarget {
            frame: Frame::LocalNed,
            north_m: 12.0,
            east_m: -3.5,
            down_m: -10.0,
            yaw_deg: f64::MIN_POSITIVE,
            duration_s: 6.25,
        };
        let payloads = [
            Payload::Notice(TextPayload { text: long.clone() }),
            Payload::Notice(TextPayload {
                text: String::new(),
            }),
            Payload::Report(Box::new(ReportPayload {
                sensor: id("z_range"),
                value: -1.0e-300,
                unit: None,
            })),
            Payload::Report(Box::new(ReportPayload {
                sensor: id("z_range"),
                value: 1.42,
                unit: Some(id("m")),
            })),
            Payload::RefreshRequest(RefreshPayload {
                sources: vec![id("map"), id("traffic")],
                note: None,
            }),
            Payload::RefreshRequest(RefreshPayload {
                sources: (0..130).map(|i| id(&format!("s{i}"))).collect(),
                note: Some(long.clone()),
            }),
            Payload::RouteAction(target),
            Payload::Hold(HoldPayload { duration_s: 4.0 }),
            Payload::Land(LandPayload {}),
            Payload::Status(TextPayload {
                text: "En route".into(),
            }),
            Payload::Merge(Box::new(MergePayload {
                source: id("feature"),
                target: id("main"),
            })),
            Payload::GlobalRoute(GlobalTarget {
                frame: GlobalFrame::Global,
                lat_deg: 47.397742,
                lon_deg: 8.545594,
                alt_m: 488.0,
                yaw_deg: 0.0,
                duration_s: 5.0,
            }),
            Payload::GlobalRoute(GlobalTarget {
                frame: GlobalFrame::GlobalRelativeAlt,
                lat_deg: -33.9,
                lon_deg: 151.2,
                alt_m: 10.0,
                yaw_deg: -90.0,
                duration_s: 1.0,
            }),
        ];
        for p in &payloads {
            let mut buf = vec![0xaa]; // appended to what is there
            p.put_postcard(&mut buf);
            let mut want = vec![0xaa];
            want.extend(postcard::to_allocvec(p).unwrap());
            assert_eq!(buf, want, "{p:?}");
        }
    }

    #[test]
    fn a_plain_text_reads_as_serde_json_reads_it() {
        let texts = [
            r#"{"text":"Survey leg 1 starts"}"#,
            r#"{"text":""}"#,
            r#"{"text":"ünïcode ✈ 高度"}"#,
            r#"{"text":"}"}"#,
            // Read by serde_json: escapes, whitespace, other fields, other shapes.
            r#"{"text":"a \"quoted\" word"}"#,
            r#"{"text":"tab\tline\n"}"#,
            r#"{"text":"\u00e9"}"#,
            r#"{ "text":"x"}"#,
            r#"{"text":"x" }"#,
            r#"{"text":"x","text":"y"}"#,
            r#"{"text":"x","note":"y"}"#,
            r#"{"text":"x"}"}"#,
            r#"{"text":"a"b"}"#,
            "{\"text\":\"bell\u{7}\"}",
            r#"{"text":5}"#,
            r#"{}"#,
        ];
        for raw in texts {
            let serde = serde_json::from_str::<TextPayload>(raw)
                .map_err(|e| PayloadError::Schema(e.to_string()));
            for kind in [PayloadKind::Notice, PayloadKind::Status] {
                let got = Payload::parse(kind, raw).map(|p| match p {
                    Payload::Notice(t) if kind == PayloadKind::Notice => t,
                    Payload::Status(t) if kind == PayloadKind::Status => t,
                    other => panic!("{raw} as {kind:?} gave {other:?}"),
                });
                assert_eq!(got, serde, "{raw}");
            }
        }
        assert_eq!(plain_text(r#"{"text":"x"}"#), Some("x"));
        assert_eq!(plain_text(r#"{"text":"a\"b"}"#), None);
        // Other kinds never take the text path.
        assert!(Payload::parse(PayloadKind::Hold, r#"{"text":"x"}"#).is_err());
    }

    /// Numbers spelled many ways: digit counts either side of the 15 the plain reader takes,
    /// signs, zeros, leading zeros, fractions, exponents and malformed forms.
    fn numbers(seed: u64) -> Vec<String> {
        let mut out: Vec<String> = [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "1",
            "-1",
            "10",
            "12.5",
            "0.1",
            "0.3",
            "3.0000000000001",
            "123456789012345",
            "1234567890123456",
            "0.00000000000001",
            "99999999999999.9",
            "-9007199254740993",
            "1e3",
            "1E3",
            "1.5e-3",
            "01",
            "00.5",
            "1.",
            ".5",
            "-",
            "+1",
            "1.25.3",
            "0x10",
            "1_0",
            "--1",
            "-.5",
            "2.2250738585072014",
            "179769313486231570",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut rng = crate::testing::Rng(seed);
        for _ in 0..400 {
            let x = rng.next();
            let digits = 1 + (x % 18) as usize;
            let point = (x >> 8) as usize % (digits + 1);
            let mut d: String = (0..digits)
                .map(|k| char::from(b'0' + ((x >> (k * 3 % 60)) % 10) as u8))
                .collect();
            if point > 0 && point < digits {
                d.insert(point, '.');
            }
            if (x >> 40).is_multiple_of(3) {
                d.insert(0, '-');
            }
            out.push(d);
        }
        out
    }

    /// The bits of every number in a reading, so that `-0.0` and `0.0` differ.
    fn route_bits(t: &RouteTarget) -> [u64; 5] {
        [t.north_m, t.east_m, t.down_m, t.yaw_deg, t.duration_s].map(f64::to_bits)
    }

    #[test]
    fn plain_payloads_read_as_serde_json_reads_them() {
        let mut plain = 0;
        for (k, n) in numbers(0x2545_f491_4f6c_dd1d).iter().enumerate() {
            // Each number in each field of a route target, the fields in two orders.
            let fields = [
                format!(r#""north_m":{n}"#),
                r#""east_m":3.5"#.to_string(),
                format!(r#""down_m":-{n}"#),
                r#""yaw_deg":90"#.to_string(),
                format!(r#""duration_s":{n}"#),
                r#""frame":"local_ned""#.to_string(),
            ];
            let mut order = fields.clone();
            order.rotate_left(k % 6);
            for raw in [
                format!("{{{}}}", fields.join(",")),
                format!("{{{}}}", order.join(",")),
            ] {
                let serde = serde_json::from_str::<RouteTarget>(&raw).ok();
                if let Some(fast) = plain_route(&raw) {
                    plain += 1;
                    let serde = serde.unwrap_or_else(|| panic!("{raw}: serde_json refuses it"));
                    assert_eq!(route_bits(&fast), route_bits(&serde), "{raw}");
                }
            }
            let raw = format!(r#"{{"duration_s":{n}}}"#);
            if let Some(fast) = plain_hold(&raw) {
                plain += 1;
                let serde: HoldPayload = serde_json::from_str(&raw).unwrap();
                assert_eq!(
                    fast.duration_s.to_bits(),
                    serde.duration_s.to_bits(),
                    "{raw}"
                );
            }
            for raw in [
                format!(r#"{{"sensor":"z_range","value":{n},"unit":"m"}}"#),
                format!(r#"{{"value":{n},"sensor":"z_range"}}"#),
            ] {
                if let Some(fast) = plain_report(&raw) {
                    plain += 1;
                    let serde: ReportPayload = serde_json::from_str(&raw).unwrap();
                    assert_eq!(fast.value.to_bits(), serde.value.to_bits(), "{raw}");
                    assert_eq!((&fast.sensor, &fast.unit), (&serde.sensor, &serde.unit));
                }
            }
        }
        // Shapes the plain reader leaves to serde_json (which may accept or refuse them).
        let route = r#"{"frame":"local_ned","north_m":1,"east_m":2,"down_m":-3,"yaw_deg":0,"duration_s":4}"#;
        assert!(plain_route(route).is_some());
        for other in [
            route.replace(":1,", ": 1,"),
            route.replace("{", "{ "),
            route.replace("local_ned", "global"),
            route.replace(r#""north_m":1,"#, r#""north_m":1,"north_m":1,"#),
            route.replace(r#""north_m":1,"#, ""),
            route.replace(r#""north_m":1,"#, r#""north_m":1,"x":1,"#),
            route.replace(r#""north_m":1"#, r#""north_m":"1""#),
            route.replace("local_ned", r"local\u005fned"),
            route.replace('}', "}x"),
            route.replace(
                r#""frame":"local_ned","#,
                r#""frame":"local_ned","frame":"local_ned","#,
            ),
        ] {
            assert!(plain_route(&other).is_none(), "{other}");
        }
        for other in [
            r#"{"sensor":"z range","value":1}"#,
            r#"{"sensor":"z_range","value":1,"unit":null}"#,
            r#"{"sensor":"z_range"}"#,
            r#"{"sensor":"z_range","value":1,"value":2}"#,
        ] {
            assert!(plain_report(other).is_none(), "{other}");
        }
        assert!(plain_hold(r#"{"duration_s":1,"x":2}"#).is_none());
        // The plain reader took most of the corpus (it is not vacuous).
        assert!(plain > 600, "only {plain} plain readings");
    }

    /// The whole reading, range checks and messages included, is serde_json's for every kind.
    #[test]
    fn parse_is_the_serde_json_reading() {
        let kinds = [
            PayloadKind::RouteAction,
            PayloadKind::Hold,
            PayloadKind::Report,
            PayloadKind::Notice,
        ];
        for n in numbers(7) {
            for raw in [
                format!(
                    r#"{{"frame":"local_ned","north_m":{n},"east_m":{n},"down_m":-10,"yaw_deg":{n},"duration_s":{n}}}"#
                ),
                format!(r#"{{"duration_s":{n}}}"#),
                format!(r#"{{"sensor":"z_range","value":{n}}}"#),
                format!(r#"{{"text":"{n}"}}"#),
            ] {
                for kind in kinds {
                    let bytes = |p: Result<Payload, PayloadError>| {
                        p.map(|p| postcard::to_allocvec(&p).unwrap())
                    };
                    assert_eq!(
                        bytes(Payload::parse(kind, &raw)),
                        bytes(Payload::parse_by_serde_json(kind, &raw)),
                        "{raw} as {kind:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn route_action_parses_and_checks_ranges() {
        let ok = r#"{"frame":"local_ned","north_m":12.0,"east_m":3.5,"down_m":-10.0,"yaw_deg":90.0,"duration_s":8.0}"#;
        assert!(matches!(
            Payload::parse(PayloadKind::RouteAction, ok),
            Ok(Payload::RouteAction(_))
        ));
        let far = ok.replace("12.0", "1e9");
        assert!(Payload::parse(PayloadKind::RouteAction, &far).is_err());
        let zero = ok.replace("8.0", "0.0");
        assert!(Payload::parse(PayloadKind::RouteAction, &zero).is_err());
        let frame = ok.replace("local_ned", "global");
        assert!(Payload::parse(PayloadKind::RouteAction, &frame).is_err());
    }

    #[test]
    fn merge_names_two_different_branches() {
        let m = Payload::parse(
            PayloadKind::Merge,
            r#"{"source":"feature","target":"main"}"#,
        )
        .unwrap();
        assert_eq!(
            m.command(None),
            Some(ActionCommand::Merge {
                source: "feature".parse().unwrap(),
                target: "main".parse().unwrap()
            })
        );
        assert!(PayloadKind::Merge.is_action());
        for bad in [
            r#"{"source":"main","target":"main"}"#,
            r#"{"source":"feature"}"#,
            r#"{"source":"feature","target":"main","force":true}"#,
            r#"{"source":"fea ture","target":"main"}"#,
        ] {
            assert!(Payload::parse(PayloadKind::Merge, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_and_duplicate_fields_are_rejected() {
        assert!(Payload::parse(PayloadKind::Notice, r#"{"text":"a","extra":1}"#).is_err());
        assert!(Payload::parse(PayloadKind::Notice, r#"{"text":"a","text":"b"}"#).is_err());
        assert!(Payload::parse(PayloadKind::Land, r#"{"x":1}"#).is_err());
    }
}
