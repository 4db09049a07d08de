//! The trusted domain catalog `K`, loaded from TOML and validated at load.
//!
//! A catalog names the sources providers may update, and for each component type: whether it
//! is an action, its payload kind, its support footprint with per-source age limits, the rules
//! that make up `RuleOK`, which prerequisite types and phases it may declare, its temporal mode,
//! its output path or adapter, and its recovery route. Predicates themselves are the fixed set
//! in [`Rule`]; a catalog only chooses and parameterises them.
//!
//! An invalid catalog is refused with a [`CatalogError`] naming the file, the line and the
//! field. See `docs/catalog.md` for the format.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::ids::Id;
use super::payload::{PayloadKind, RouteTarget};
use super::phase::Phase;
use super::reason::ReasonCode;
use super::time::Nanos;
use super::value::{BoxNed, ValueKind};

/// Most sources in one catalog (footprints are 64-bit masks).
pub const MAX_SOURCES: usize = 64;
/// Most component types in one catalog.
pub const MAX_TYPES: usize = 64;
/// Most sources in one footprint.
pub const MAX_FOOTPRINT: usize = 32;
/// Most rules per type.
pub const MAX_RULES: usize = 32;

/// Index of a source in its catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceIx(pub u8);

/// Index of a component type in its catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeIx(pub u8);

/// A source the state may hold.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSpec {
    /// Name, as providers and support claims spell it.
    pub name: Id,
    /// Kind of value.
    pub value: ValueKind,
    /// True when the source carries geometric bounds: a provenance change is then reported as
    /// `BOUNDS_PROVENANCE_CHANGED`.
    pub bounds: bool,
    /// Who writes it. The core does not look at this; the service refuses a write from any
    /// other party (`SOURCE_NOT_WRITABLE`).
    pub owner: Owner,
}

/// Who writes a source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// The gateway itself, from the vehicle link and its own control state (link, landed
    /// state, battery, home, control): never writable over HTTP.
    Vehicle,
    /// A state provider (the provider credential). The default.
    #[default]
    Provider,
    /// The operator (the operator credential): authority, preflight evidence.
    Operator,
}

impl Owner {
    /// `vehicle`, `provider`, `operator`.
    pub fn name(self) -> &'static str {
        match self {
            Owner::Vehicle => "vehicle",
            Owner::Provider => "provider",
            Owner::Operator => "operator",
        }
    }
}

/// Action or non-action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Requests an external state change; only the final gate may pass it to the adapter.
    Action,
    /// Emitted on its output path once retained and ready.
    NonAction,
}

/// When support must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporal {
    /// Support is checked at one instant: admission, and the first downstream effect.
    Point,
    /// A certificate must cover `[t_first, t_first + duration]` plus the adapter guard:
    /// `t_end + guard < valid_until`, equality failing closed.
    Interval,
    /// Each window of this length needs refreshed support and a new admission.
    Rolling {
        /// Window length.
        window: Nanos,
    },
}

/// Where a retained, ready component goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A non-action's output path (operator channel, agent, log).
    Path(Id),
    /// An action's adapter.
    Adapter(Id),
}

/// Which components a fresh candidate may replace after a recoverable denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only the blocked component.
    SelfOnly,
    /// The blocked component and its transitive dependents.
    SelfAndDependents,
}

/// The recovery route of a component type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Denials that create an obligation; every other denial is terminal.
    pub recoverable: Vec<ReasonCode>,
    /// Replacement scope.
    pub scope: Scope,
    /// Obligation lifetime.
    pub expiry: Nanos,
    /// Fresh candidates an obligation accepts for admission before it fails.
    pub retry_limit: u8,
    /// Who is asked to act (agent, operator, a provider).
    pub assignee: Id,
    /// The catalog-defined route (refresh, replan, approval ...).
    pub route: Id,
    /// Routes for particular reasons (e.g. a fresh airspace authorization for
    /// `AIRSPACE_NOT_AUTHORIZED`); every other recoverable reason takes `route`.
    pub routes: Vec<(ReasonCode, Id)>,
}

impl Recovery {
    /// True when `code` creates an obligation.
    pub fn is_recoverable(&self, code: ReasonCode) -> bool {
        self.recoverable.contains(&code)
    }

    /// The route an obligation created for `code` names.
    pub fn route_for(&self, code: ReasonCode) -> &Id {
        self.routes
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(&self.route, |(_, r)| r)
    }
}

/// A predicate kind and its parameters. Each rule names the reason code it reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// The route target lies inside the box held by `source`.
    WithinBounds {
        /// A bounds source.
        source: SourceIx,
    },
    /// The route target is at most `max_m` above the origin (`-down <= max_m`).
    MaxAltitude {
        /// Metres.
        max_m: f64,
    },
    /// The route target is within `max_m` (horizontal) of the position in `source`.
    MaxDistance {
        /// A position source.
        source: SourceIx,
        /// Metres.
        max_m: f64,
    },
    /// The number in `source` is at least `min`.
    MinNumber {
        /// A number source.
        source: SourceIx,
        /// Lower bound, inclusive.
        min: f64,
    },
    /// The number in `source` is at most `max`.
    MaxNumber {
        /// A number source.
        source: SourceIx,
        /// Upper bound, inclusive.
        max: f64,
    },
    /// The flag in `source` is true.
    Flag {
        /// A flag source.
        source: SourceIx,
    },
    /// Every intruder in `source` is at least `min_m` from the route target.
    Separation {
        /// A traffic source.
        source: SourceIx,
        /// Metres.
        min_m: f64,
    },
    /// The text in `source` is one of `allowed`.
    TextIn {
        /// A text source.
        source: SourceIx,
        /// Accepted values.
        allowed: Vec<Id>,
    },
}

impl Rule {
    /// The source the rule reads, if any.
    pub fn source(&self) -> Option<SourceIx> {
        match self {
            Rule::MaxAltitude { .. } => None,
            Rule::WithinBounds { source }
            | Rule::MaxDistance { source, .. }
            | Rule::MinNumber { source, .. }
            | Rule::MaxNumber { source, .. }
            | Rule::Flag { source }
            | Rule::Separation { source, .. }
            | Rule::TextIn { source, .. } => Some(*source),
        }
    }
}

/// A rule with the reason it reports.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSpec {
    /// The predicate.
    pub rule: Rule,
    /// The reason reported when it does not hold.
    pub code: ReasonCode,
}

/// One allowed prerequisite: a parent type and the phases a dependent may require of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedPrerequisite {
    /// Parent type.
    pub parent: TypeIx,
    /// Phases that may be required.
    pub phases: Vec<Phase>,
}

/// A component type.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeSpec {
    /// Name, as the envelope's `type` field spells it.
    pub name: Id,
    /// Action or not.
    pub class: Class,
    /// Payload kind.
    pub payload: PayloadKind,
    /// Footprint `π_e`: sources with their age limits `H_{e,s}`, in source order.
    pub footprint: Vec<(SourceIx, Nanos)>,
    /// Bit `i` set when source `i` is in the footprint.
    pub footprint_mask: u64,
    /// Bit `i` set when a support claim for source `i` is required.
    pub claims_required: u64,
    /// Whether a certificate bound to the digest is required.
    pub requires_certificate: bool,
    /// `RuleOK`.
    pub rules: Vec<RuleSpec>,
    /// Which prerequisites the type may declare.
    pub prerequisites: Vec<AllowedPrerequisite>,
    /// The same as bit sets, for [`TypeSpec::allows`]: per prerequisite phase (emitted,
    /// dispatched, observed_success), bit `i` set when a parent of type `i` may be required to
    /// reach it (a catalog has at most [`MAX_TYPES`] types).
    allowed: [u64; 3],
    /// Temporal mode.
    pub temporal: Temporal,
    /// Adapter guard `δ_g` for INTERVAL and ROLLING coverage.
    pub guard: Nanos,
    /// Output path or adapter.
    pub output: Output,
    /// Recovery route.
    pub recovery: Recovery,
    /// The mission-contract effect an action of this type normalizes to, if any.
    pub effect: Option<EffectMap>,
    /// The `geo_origin` source a global route target of this type is converted through (in
    /// the footprint). `None`: the type takes local targets only.
    pub origin: Option<SourceIx>,
}

/// How an action names its mission-contract effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectMap {
    /// The contract domain's effect name (`goto`, `land`, `hold`).
    pub name: Id,
    /// Its argument, if it takes one.
    pub arg: EffectArg,
}

/// Where an effect's argument comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EffectArg {
    /// No argument: `land`.
    None,
    /// The catalog zone that contains the route target: `goto(wp1)`.
    Zone,
}

impl TypeSpec {
    /// Whether a dependent of this type may require `parent` to reach `phase`.
    pub fn allows(&self, parent: TypeIx, phase: Phase) -> bool {
        allowed_slot(phase)
            .and_then(|k| self.allowed.get(k))
            .is_some_and(|m| parent.0 < 64 && m & (1u64 << parent.0) != 0)
    }

    /// The age limit for `source`, when it is in the footprint.
    pub fn max_age(&self, source: SourceIx) -> Option<Nanos> {
        self.footprint
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, h)| *h)
    }
}

/// Where a prerequisite phase's bit set sits in [`TypeSpec::allowed`].
fn allowed_slot(phase: Phase) -> Option<usize> {
    match phase {
        Phase::Emitted => Some(0),
        Phase::Dispatched => Some(1),
        Phase::ObservedSuccess => Some(2),
        _ => None,
    }
}

/// [`TypeSpec::allowed`] of a type's allowed prerequisites.
fn allowed_masks(prerequisites: &[AllowedPrerequisite]) -> [u64; 3] {
    let mut masks = [0u64; 3];
    for p in prerequisites {
        for &phase in &p.phases {
            if let Some(m) = allowed_slot(phase).and_then(|k| masks.get_mut(k))
                && p.parent.0 < 64
            {
                *m |= 1u64 << p.parent.0;
            }
        }
    }
    masks
}

/// A validated catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    id: Id,
    version: u32,
    future_tolerance: Nanos,
    response_ttl: Nanos,
    max_certificate: Nanos,
    sources: Vec<SourceSpec>,
    types: Vec<TypeSpec>,
    zones: Vec<(Id, BoxNed)>,
}

/// Why a catalog was refused: file, line, field and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogError {
    file: String,
    line: usize,
    field: String,
    message: String,
}

impl CatalogError {
    /// The file named at load.
    pub fn file(&self) -> &str {
        &self.file
    }
    /// 1-based line.
    pub fn line(&self) -> usize {
        self.line
    }
    /// The dotted field path, e.g. `types.route_action.footprint`.
    pub fn field(&self) -> &str {
        &self.field
    }
    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl CatalogError {
    /// An error for a file that could not be read.
    pub fn io(file: &str, message: &str) -> CatalogError {
        CatalogError {
            file: file.to_string(),
            line: 0,
            field: "file".to_string(),
            message: message.to_string(),
        }
    }
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A file that could not be read has no line or field to point at.
        if self.line == 0 && self.field == "file" {
            return write!(f, "{}: {}", self.file, self.message);
        }
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.field, self.message
        )
    }
}

impl std::error::Error for CatalogError {}

// ---------------------------------------------------------------------------------------------
// Raw TOML shape.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    catalog: Spanned<RawHeader>,
    #[serde(default)]
    sources: BTreeMap<String, Spanned<RawSource>>,
    #[serde(default)]
    types: BTreeMap<String, Spanned<RawType>>,
    #[serde(default)]
    zones: BTreeMap<String, Spanned<BoxNed>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEffect {
    name: String,
    #[serde(default)]
    arg: Option<RawEffectArg>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawEffectArg {
    Zone,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    id: Spanned<String>,
    version: u32,
    #[serde(default = "default_guard_ms")]
    adapter_guard_ms: u64,
    #[serde(default = "default_ttl_ms")]
    response_ttl_ms: u64,
    #[serde(default = "default_tolerance_ms")]
    future_tolerance_ms: u64,
    #[serde(default = "default_max_certificate_ms")]
    max_certificate_ms: u64,
}

const fn default_max_certificate_ms() -> u64 {
    3_600_000
}

const fn default_guard_ms() -> u64 {
    250
}
const fn default_ttl_ms() -> u64 {
    120_000
}
const fn default_tolerance_ms() -> u64 {
    50
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    value: ValueKind,
    #[serde(default)]
    bounds: bool,
    #[serde(default)]
    owner: Owner,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawClass {
    Action,
    NonAction,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawTemporal {
    Point,
    Interval,
    Rolling,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawType {
    class: RawClass,
    payload: PayloadKind,
    #[serde(default)]
    output: Option<Spanned<String>>,
    #[serde(default)]
    adapter: Option<Spanned<String>>,
    #[serde(default)]
    footprint: BTreeMap<String, Spanned<u64>>,
    #[serde(default)]
    claims_required: Vec<Spanned<String>>,
    #[serde(default)]
    requires_certificate: bool,
    temporal: Spanned<RawTemporal>,
    #[serde(default)]
    rolling_window_ms: Option<u64>,
    #[serde(default)]
    adapter_guard_ms: Option<u64>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    prerequisites: Vec<Spanned<RawPrerequisite>>,
    recovery: Option<Spanned<RawRecovery>>,
    #[serde(default)]
    effect: Option<Spanned<RawEffect>>,
    #[serde(default)]
    origin: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum RawRule {
    WithinBounds {
        source: String,
        code: Option<String>,
    },
    MaxAltitude {
        max_m: f64,
        code: Option<String>,
    },
    MaxDistance {
        source: String,
        max_m: f64,
        code: Option<String>,
    },
    MinNumber {
        source: String,
        min: f64,
        code: Option<String>,
    },
    MaxNumber {
        source: String,
        max: f64,
        code: Option<String>,
    },
    Flag {
        source: String,
        code: Option<String>,
    },
    Separation {
        source: String,
        min_m: f64,
        code: Option<String>,
    },
    TextIn {
        source: String,
        allowed: Vec<String>,
        code: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrerequisite {
    #[serde(rename = "type")]
    parent: String,
    phases: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawScope {
    #[serde(rename = "self")]
    SelfOnly,
    SelfAndDependents,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecovery {
    #[serde(default)]
    recoverable: Vec<String>,
    scope: RawScope,
    expiry_ms: u64,
    retry_limit: u8,
    assignee: String,
    route: String,
    #[serde(default)]
    routes: BTreeMap<String, String>,
}

// ---------------------------------------------------------------------------------------------

struct Ctx<'a> {
    file: &'a str,
    src: &'a str,
}

impl Ctx<'_> {
    fn line(&self, offset: usize) -> usize {
        let upto = self.src.get(..offset).unwrap_or(self.src);
        upto.bytes().filter(|&b| b == b'\n').count() + 1
    }

    fn err(
        &self,
        span: std::ops::Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> CatalogError {
        CatalogError {
            file: self.file.to_string(),
            line: self.line(span.start),
            field: field.into(),
            message: message.into(),
        }
    }

    fn id(&self, span: std::ops::Range<usize>, field: &str, s: &str) -> Result<Id, CatalogError> {
        Id::new(s).map_err(|e| self.err(span, field, e.to_string()))
    }
}

/// The dotted path of the key on the line holding `offset`: the nearest `[table]` header above
/// it, plus the line's own key when it has one.
fn field_at(src: &str, offset: usize) -> String {
    let before = src.get(..offset).unwrap_or(src);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = src
        .get(line_start..)
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .trim();
    // On a table header itself (a table defined twice), the header is the path.
    if line.starts_with('[') {
        return line
            .trim_matches(|c| c == '[' || c == ']')
            .trim()
            .to_string();
    }
    let before = src.get(..line_start).unwrap_or(before);
    let table = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().to_string())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    match (table, key) {
        (Some(t), Some(k)) => format!("{t}.{k}"),
        (Some(t), None) => t,
        (None, Some(k)) => k,
        (None, None) => "catalog".to_string(),
    }
}

/// `[catalog]`: the id, the version and the limits a catalog may set.
fn parse_header(
    cx: &Ctx<'_>,
    head: &RawHeader,
    head_span: &std::ops::Range<usize>,
) -> Result<Id, CatalogError> {
    let id = cx.id(head.id.span(), "catalog.id", head.id.get_ref())?;
    if head.version == 0 {
        return Err(cx.err(
            head_span.clone(),
            "catalog.version",
            "version must be at least 1",
        ));
    }
    // Values that cannot be meant: every response would expire at once, or a tolerance or
    // guard longer than any freshness limit a catalog would set.
    if head.response_ttl_ms == 0 {
        return Err(cx.err(
            head_span.clone(),
            "catalog.response_ttl_ms",
            "must be at least 1 ms (0 would end every response at admission)",
        ));
    }
    for (key, v) in [
        ("catalog.adapter_guard_ms", head.adapter_guard_ms),
        ("catalog.future_tolerance_ms", head.future_tolerance_ms),
    ] {
        if v > 3_600_000 {
            return Err(cx.err(
                head_span.clone(),
                key,
                format!("{v} ms is over one hour (3600000)"),
            ));
        }
    }

    if !(1000..=86_400_000).contains(&head.max_certificate_ms) {
        return Err(cx.err(
            head_span.clone(),
            "catalog.max_certificate_ms",
            format!(
                "{} ms is outside 1000..86400000 (one second to one day)",
                head.max_certificate_ms
            ),
        ));
    }
    Ok(id)
}

/// `[sources]`: each source's name, value kind, bounds flag and owner, indexed in name order.
fn parse_sources(
    cx: &Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawSource>>,
    head_span: &std::ops::Range<usize>,
) -> Result<(Vec<SourceSpec>, BTreeMap<String, SourceIx>), CatalogError> {
    if raw.is_empty() {
        return Err(cx.err(
            head_span.clone(),
            "sources",
            "a catalog needs at least one source",
        ));
    }
    if raw.len() > MAX_SOURCES {
        return Err(cx.err(
            head_span.clone(),
            "sources",
            format!("at most {MAX_SOURCES} sources"),
        ));
    }
    let mut sources = Vec::new();
    let mut source_ix = BTreeMap::new();
    for (i, (name, spec)) in raw.iter().enumerate() {
        let field = format!("sources.{name}");
        let sid = cx.id(spec.span(), &field, name)?;
        let s = spec.get_ref();
        if s.bounds && s.value != ValueKind::Bounds {
            return Err(cx.err(
                spec.span(),
                field,
                "`bounds = true` needs `value = \"bounds\"`",
            ));
        }
        let ix = SourceIx(
            u8::try_from(i).map_err(|_| cx.err(spec.span(), "sources", "too many sources"))?,
        );
        source_ix.insert(name.clone(), ix);
        sources.push(SourceSpec {
            name: sid,
            value: s.value,
            bounds: s.bounds,
            owner: s.owner,
        });
    }

    Ok((sources, source_ix))
}

/// `[zones]`: named local-NED boxes that resolve a route target to a contract waypoint; no two
/// overlap.
fn parse_zones(
    cx: &Ctx<'_>,
    raw: &BTreeMap<String, Spanned<BoxNed>>,
) -> Result<Vec<(Id, BoxNed)>, CatalogError> {
    let mut zones: Vec<(Id, BoxNed)> = Vec::new();
    for (name, z) in raw {
        let field = format!("zones.{name}");
        let zid = cx.id(z.span(), &field, name)?;
        let b = *z.get_ref();
        if let Err(e) = b.check() {
            return Err(cx.err(z.span(), field, format!("zone bounds: {e}")));
        }
        let overlaps = |a: &BoxNed, c: &BoxNed| {
            a.north_min < c.north_max
                && c.north_min < a.north_max
                && a.east_min < c.east_max
                && c.east_min < a.east_max
                && a.down_min < c.down_max
                && c.down_min < a.down_max
        };
        if let Some((other, _)) = zones.iter().find(|(_, o)| overlaps(o, &b)) {
            return Err(cx.err(
                z.span(),
                field,
                format!("overlaps zone `{other}`: a target must name one zone"),
            ));
        }
        zones.push((zid, b));
    }

    Ok(zones)
}

/// `[types]`: every component type, each read by [`parse_type`].
fn parse_types(
    cx: &Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawType>>,
    head: &RawHeader,
    head_span: &std::ops::Range<usize>,
    sources: &[SourceSpec],
    source_ix: &BTreeMap<String, SourceIx>,
    zones: &[(Id, BoxNed)],
) -> Result<Vec<TypeSpec>, CatalogError> {
    if raw.is_empty() {
        return Err(cx.err(
            head_span.clone(),
            "types",
            "a catalog needs at least one component type",
        ));
    }
    if raw.len() > MAX_TYPES {
        return Err(cx.err(
            head_span.clone(),
            "types",
            format!("at most {MAX_TYPES} types"),
        ));
    }
    let type_ix: BTreeMap<&str, TypeIx> = raw
        .keys()
        .enumerate()
        .map(|(i, k)| (k.as_str(), TypeIx(u8::try_from(i).unwrap_or(u8::MAX))))
        .collect();
    let classes: BTreeMap<&str, PayloadKind> = raw
        .iter()
        .map(|(k, t)| (k.as_str(), t.get_ref().payload))
        .collect();

    let mut types = Vec::new();
    for (name, spanned) in raw {
        types.push(parse_type(
            cx, name, spanned, head, sources, source_ix, zones, &type_ix, &classes,
        )?);
    }
    Ok(types)
}

/// One component type: its class and output, footprint and claims, temporal mode, rules,
/// allowed prerequisites, recovery route and contract effect.
#[allow(
    clippy::too_many_arguments,
    reason = "the catalog's sections one type reads"
)]
fn parse_type(
    cx: &Ctx<'_>,
    name: &str,
    spanned: &Spanned<RawType>,
    head: &RawHeader,
    sources: &[SourceSpec],
    source_ix: &BTreeMap<String, SourceIx>,
    zones: &[(Id, BoxNed)],
    type_ix: &BTreeMap<&str, TypeIx>,
    classes: &BTreeMap<&str, PayloadKind>,
) -> Result<TypeSpec, CatalogError> {
    let base = format!("types.{name}");
    let span = spanned.span();
    let t = spanned.get_ref();
    let tname = cx.id(span.clone(), &base, name)?;
    let class = match t.class {
        RawClass::Action => Class::Action,
        RawClass::NonAction => Class::NonAction,
    };
    if (class == Class::Action) != t.payload.is_action() {
        return Err(cx.err(
            span,
            format!("{base}.class"),
            format!(
                "payload `{}` is {} but the class says {}",
                t.payload.name(),
                if t.payload.is_action() {
                    "an action"
                } else {
                    "a non-action"
                },
                if class == Class::Action {
                    "action"
                } else {
                    "non_action"
                }
            ),
        ));
    }
    let output = type_output(cx, &base, &span, t, class)?;
    let (footprint, mask, claims_required) = type_footprint(cx, &base, &span, t, source_ix)?;
    let temporal = type_temporal(cx, &base, &span, t, class)?;
    // Rules.
    if t.rules.len() > MAX_RULES {
        return Err(cx.err(
            span,
            format!("{base}.rules"),
            format!("at most {MAX_RULES} rules"),
        ));
    }
    let mut rules = Vec::new();
    for (ri, r) in t.rules.iter().enumerate() {
        let f = format!("{base}.rules[{ri}]");
        rules.push(build_rule(cx, &f, r, source_ix, sources, mask, t.payload)?);
    }

    let prerequisites = type_prerequisites(cx, &base, t, type_ix, classes)?;
    let recovery = type_recovery(cx, &base, &span, t, class)?;
    let effect = type_effect(cx, &base, t, class, zones)?;
    let origin = type_origin(cx, &base, t, sources, source_ix, mask)?;

    Ok(TypeSpec {
        name: tname,
        class,
        payload: t.payload,
        footprint,
        footprint_mask: mask,
        claims_required,
        requires_certificate: t.requires_certificate,
        rules,
        allowed: allowed_masks(&prerequisites),
        prerequisites,
        temporal,
        guard: Nanos::from_ms(t.adapter_guard_ms.unwrap_or(head.adapter_guard_ms)),
        output,
        recovery,
        effect,
        origin,
    })
}

/// The source a type's global route targets are converted through: a `geo_origin` source in
/// its footprint, on a `route_action` type.
fn type_origin(
    cx: &Ctx<'_>,
    base: &str,
    t: &RawType,
    sources: &[SourceSpec],
    source_ix: &BTreeMap<String, SourceIx>,
    mask: u64,
) -> Result<Option<SourceIx>, CatalogError> {
    let Some(o) = &t.origin else {
        return Ok(None);
    };
    let f = format!("{base}.origin");
    let name = o.get_ref();
    if t.payload != PayloadKind::RouteAction {
        return Err(cx.err(
            o.span(),
            f,
            "only a `route_action` type converts global targets",
        ));
    }
    let ix = *source_ix
        .get(name)
        .ok_or_else(|| cx.err(o.span(), &f, format!("unknown source `{name}`")))?;
    if mask & (1u64 << ix.0) == 0 {
        return Err(cx.err(o.span(), f, format!("`{name}` is not in the footprint")));
    }
    let kind = sources.get(usize::from(ix.0)).map(|s| s.value);
    if kind != Some(ValueKind::GeoOrigin) {
        return Err(cx.err(
            o.span(),
            f,
            format!("`{name}` must carry `value = \"geo_origin\"`"),
        ));
    }
    Ok(Some(ix))
}

/// Where a type's instances go: an action's adapter, a non-action's output path.
fn type_output(
    cx: &Ctx<'_>,
    base: &str,
    span: &std::ops::Range<usize>,
    t: &RawType,
    class: Class,
) -> Result<Output, CatalogError> {
    let output = match (class, &t.output, &t.adapter) {
        (Class::Action, None, Some(a)) => {
            Output::Adapter(cx.id(a.span(), &format!("{base}.adapter"), a.get_ref())?)
        }
        (Class::NonAction, Some(o), None) => {
            Output::Path(cx.id(o.span(), &format!("{base}.output"), o.get_ref())?)
        }
        (Class::Action, _, _) => {
            return Err(cx.err(
                span.clone(),
                format!("{base}.adapter"),
                "an action names an `adapter` and no `output`",
            ));
        }
        (Class::NonAction, _, _) => {
            return Err(cx.err(
                span.clone(),
                format!("{base}.output"),
                "a non-action names an `output` path and no `adapter`",
            ));
        }
    };
    Ok(output)
}

/// A type's footprint (source, age limit), the mask of its sources, and the mask of the claims
/// it requires.
type Footprint = (Vec<(SourceIx, Nanos)>, u64, u64);

/// A type's footprint with its age limits (and the mask of its sources), and the claims it
/// requires (each in the footprint).
fn type_footprint(
    cx: &Ctx<'_>,
    base: &str,
    span: &std::ops::Range<usize>,
    t: &RawType,
    source_ix: &BTreeMap<String, SourceIx>,
) -> Result<Footprint, CatalogError> {
    if t.footprint.len() > MAX_FOOTPRINT {
        return Err(cx.err(
            span.clone(),
            format!("{base}.footprint"),
            format!("at most {MAX_FOOTPRINT} sources"),
        ));
    }
    let mut footprint = Vec::new();
    let mut mask = 0u64;
    for (sname, age) in &t.footprint {
        let f = format!("{base}.footprint.{sname}");
        let ix = *source_ix
            .get(sname)
            .ok_or_else(|| cx.err(age.span(), &f, format!("unknown source `{sname}`")))?;
        footprint.push((ix, Nanos::from_ms(*age.get_ref())));
        mask |= 1u64 << ix.0;
    }
    footprint.sort_by_key(|(s, _)| *s);

    let mut claims_required = 0u64;
    for c in &t.claims_required {
        let f = format!("{base}.claims_required");
        let ix = *source_ix
            .get(c.get_ref())
            .ok_or_else(|| cx.err(c.span(), &f, format!("unknown source `{}`", c.get_ref())))?;
        if mask & (1u64 << ix.0) == 0 {
            return Err(cx.err(
                c.span(),
                f,
                format!("`{}` is not in the footprint", c.get_ref()),
            ));
        }
        claims_required |= 1u64 << ix.0;
    }
    Ok((footprint, mask, claims_required))
}

/// A type's temporal mode: point, interval (certified, with a duration) or rolling (an action,
/// with its window).
fn type_temporal(
    cx: &Ctx<'_>,
    base: &str,
    span: &std::ops::Range<usize>,
    t: &RawType,
    class: Class,
) -> Result<Temporal, CatalogError> {
    let temporal = match t.temporal.get_ref() {
        RawTemporal::Point => Temporal::Point,
        RawTemporal::Interval => Temporal::Interval,
        RawTemporal::Rolling => {
            let w = t.rolling_window_ms.ok_or_else(|| {
                cx.err(
                    t.temporal.span(),
                    format!("{base}.rolling_window_ms"),
                    "rolling types need `rolling_window_ms`",
                )
            })?;
            if w == 0 {
                return Err(cx.err(
                    t.temporal.span(),
                    format!("{base}.rolling_window_ms"),
                    "must be positive",
                ));
            }
            Temporal::Rolling {
                window: Nanos::from_ms(w),
            }
        }
    };
    if temporal == Temporal::Interval
        && !matches!(t.payload, PayloadKind::RouteAction | PayloadKind::Hold)
    {
        return Err(cx.err(
            t.temporal.span(),
            format!("{base}.temporal"),
            "interval needs a payload with `duration_s` (route_action or hold)",
        ));
    }
    if temporal == Temporal::Interval && !t.requires_certificate {
        return Err(cx.err(
            t.temporal.span(),
            format!("{base}.requires_certificate"),
            "interval coverage is certified: set `requires_certificate = true`",
        ));
    }
    if !matches!(temporal, Temporal::Rolling { .. }) && t.rolling_window_ms.is_some() {
        return Err(cx.err(
            span.clone(),
            format!("{base}.rolling_window_ms"),
            "only rolling types take a window",
        ));
    }
    if matches!(temporal, Temporal::Rolling { .. }) && class != Class::Action {
        return Err(cx.err(
            t.temporal.span(),
            format!("{base}.temporal"),
            "rolling applies to actions",
        ));
    }
    Ok(temporal)
}

/// The prerequisites a type allows: parent types and the phases required of them (non-actions
/// reach `emitted`, actions `dispatched` and `observed_success`).
fn type_prerequisites(
    cx: &Ctx<'_>,
    base: &str,
    t: &RawType,
    type_ix: &BTreeMap<&str, TypeIx>,
    classes: &BTreeMap<&str, PayloadKind>,
) -> Result<Vec<AllowedPrerequisite>, CatalogError> {
    let mut prerequisites = Vec::new();
    for (pi, p) in t.prerequisites.iter().enumerate() {
        let f = format!("{base}.prerequisites[{pi}]");
        let pr = p.get_ref();
        let parent = *type_ix
            .get(pr.parent.as_str())
            .ok_or_else(|| cx.err(p.span(), &f, format!("unknown type `{}`", pr.parent)))?;
        let parent_is_action = classes
            .get(pr.parent.as_str())
            .is_some_and(|k| k.is_action());
        if pr.phases.is_empty() {
            return Err(cx.err(p.span(), format!("{f}.phases"), "name at least one phase"));
        }
        let mut phases = Vec::new();
        for ph in &pr.phases {
            let phase = Phase::from_prerequisite_name(ph).ok_or_else(|| {
                cx.err(
                    p.span(),
                    format!("{f}.phases"),
                    format!(
                        "`{ph}` is not a prerequisite phase (emitted, dispatched, observed_success)"
                    ),
                )
            })?;
            let fits = match phase {
                Phase::Emitted => !parent_is_action,
                _ => parent_is_action,
            };
            if !fits {
                return Err(cx.err(
                    p.span(),
                    format!("{f}.phases"),
                    format!(
                        "`{ph}` cannot be required of `{}`: non-actions reach `emitted`, actions `dispatched` and `observed_success`",
                        pr.parent
                    ),
                ));
            }
            phases.push(phase);
        }
        prerequisites.push(AllowedPrerequisite { parent, phases });
    }
    Ok(prerequisites)
}

/// A type's recovery route: which denials leave an obligation, its scope, expiry, retries and
/// routes (actions only).
fn type_recovery(
    cx: &Ctx<'_>,
    base: &str,
    span: &std::ops::Range<usize>,
    t: &RawType,
    class: Class,
) -> Result<Recovery, CatalogError> {
    if class == Class::NonAction
        && let Some(r) = &t.recovery
    {
        return Err(cx.err(
            r.span(),
            format!("{base}.recovery"),
            "recovery routes apply to actions; a withheld non-action returns when its support does",
        ));
    }
    let recovery = match &t.recovery {
        None => Recovery {
            recoverable: Vec::new(),
            scope: Scope::SelfOnly,
            expiry: Nanos::ZERO,
            retry_limit: 0,
            assignee: Id::new("agent").map_err(|e| cx.err(span.clone(), base, e.to_string()))?,
            route: Id::new("none").map_err(|e| cx.err(span.clone(), base, e.to_string()))?,
            routes: Vec::new(),
        },
        Some(r) => {
            let f = format!("{base}.recovery");
            let rr = r.get_ref();
            let mut recoverable = Vec::new();
            for name in &rr.recoverable {
                let code = ReasonCode::from_name(name).ok_or_else(|| {
                    cx.err(
                        r.span(),
                        format!("{f}.recoverable"),
                        format!("unknown reason code `{name}`"),
                    )
                })?;
                let n = code.number();
                let denial = (200..300).contains(&n)
                    || matches!(
                        code,
                        ReasonCode::ADAPTER_REJECTED
                            | ReasonCode::PARENT_WITHHELD
                            | ReasonCode::DEPS_NOT_READY
                    );
                if !denial {
                    return Err(cx.err(
                        r.span(),
                        format!("{f}.recoverable"),
                        format!(
                            "`{name}` is not a denial the gate can make (local support, PARENT_WITHHELD, DEPS_NOT_READY, ADAPTER_REJECTED)"
                        ),
                    ));
                }
                recoverable.push(code);
            }
            if rr.expiry_ms == 0 {
                return Err(cx.err(r.span(), format!("{f}.expiry_ms"), "must be positive"));
            }
            let mut routes = Vec::new();
            for (name, route) in &rr.routes {
                let at = format!("{f}.routes.{name}");
                let code = ReasonCode::from_name(name).ok_or_else(|| {
                    cx.err(r.span(), &at, format!("unknown reason code `{name}`"))
                })?;
                if !recoverable.contains(&code) {
                    return Err(cx.err(
                        r.span(),
                        &at,
                        format!(
                            "`{name}` is not in `recoverable`, so no obligation takes this route"
                        ),
                    ));
                }
                routes.push((code, cx.id(r.span(), &at, route)?));
            }
            Recovery {
                recoverable,
                scope: match rr.scope {
                    RawScope::SelfOnly => Scope::SelfOnly,
                    RawScope::SelfAndDependents => Scope::SelfAndDependents,
                },
                expiry: Nanos::from_ms(rr.expiry_ms),
                retry_limit: rr.retry_limit,
                assignee: cx.id(r.span(), &format!("{f}.assignee"), &rr.assignee)?,
                route: cx.id(r.span(), &format!("{f}.route"), &rr.route)?,
                routes,
            }
        }
    };
    Ok(recovery)
}

/// The mission-contract effect a type normalizes to (actions only; a `zone` argument needs a
/// route target and `[zones]`).
fn type_effect(
    cx: &Ctx<'_>,
    base: &str,
    t: &RawType,
    class: Class,
    zones: &[(Id, BoxNed)],
) -> Result<Option<EffectMap>, CatalogError> {
    let effect = match &t.effect {
        None => None,
        Some(e) => {
            let f = format!("{base}.effect");
            if class != Class::Action {
                return Err(cx.err(e.span(), f, "only actions commit contract effects"));
            }
            let re = e.get_ref();
            let arg = match re.arg {
                None => EffectArg::None,
                Some(RawEffectArg::Zone) => {
                    if t.payload != PayloadKind::RouteAction {
                        return Err(cx.err(
                            e.span(),
                            format!("{f}.arg"),
                            "`zone` resolves a route target: only route_action payloads have one",
                        ));
                    }
                    if zones.is_empty() {
                        return Err(cx.err(
                            e.span(),
                            format!("{f}.arg"),
                            "`zone` needs a `[zones]` table",
                        ));
                    }
                    EffectArg::Zone
                }
            };
            Some(EffectMap {
                name: cx.id(e.span(), &format!("{f}.name"), &re.name)?,
                arg,
            })
        }
    };
    Ok(effect)
}

impl Catalog {
    /// Parses and validates a catalog. `file` is only used in error messages.
    ///
    /// # Errors
    /// [`CatalogError`] naming the file, the line and the field of the first problem found.
    pub fn parse(src: &str, file: &str) -> Result<Catalog, CatalogError> {
        let cx = Ctx { file, src };
        let raw: RawCatalog = toml::from_str(src).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let mut msg = e.message().trim().to_string();
            let field = field_at(src, span.start);
            if msg == "duplicate key" {
                msg = "defined twice; a key or table may appear once".into();
            }
            cx.err(span, field, msg)
        })?;
        let head_span = raw.catalog.span();
        let head = raw.catalog.into_inner();
        let id = parse_header(&cx, &head, &head_span)?;
        let (sources, source_ix) = parse_sources(&cx, &raw.sources, &head_span)?;
        let zones = parse_zones(&cx, &raw.zones)?;
        let types = parse_types(
            &cx, &raw.types, &head, &head_span, &sources, &source_ix, &zones,
        )?;
        Ok(Catalog {
            id,
            version: head.version,
            future_tolerance: Nanos::from_ms(head.future_tolerance_ms),
            response_ttl: Nanos::from_ms(head.response_ttl_ms),
            max_certificate: Nanos::from_ms(head.max_certificate_ms),
            sources,
            types,
            zones,
        })
    }

    /// The zones, in name order.
    pub fn zones(&self) -> &[(Id, BoxNed)] {
        &self.zones
    }

    /// The mission-contract effect an action normalizes to: `None` when its type names none,
    /// `ZONE_UNRESOLVED` when its target lies in no zone.
    /// `target` is the action's local point ([`crate::support::route_target`]).
    pub fn effect_of(
        &self,
        spec: &TypeSpec,
        target: Option<&RouteTarget>,
    ) -> Option<Result<String, ReasonCode>> {
        let e = spec.effect.as_ref()?;
        Some(match e.arg {
            EffectArg::None => Ok(e.name.to_string()),
            EffectArg::Zone => {
                let Some(t) = target else {
                    return Some(Err(ReasonCode::ZONE_UNRESOLVED));
                };
                self.zones
                    .iter()
                    .find(|(_, b)| b.contains(t.north_m, t.east_m, t.down_m))
                    .map_or(Err(ReasonCode::ZONE_UNRESOLVED), |(z, _)| {
                        Ok(format!("{}({z})", e.name))
                    })
            }
        })
    }

    /// Catalog id.
    pub fn id(&self) -> &Id {
        &self.id
    }
    /// Catalog version `v_K`.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// How far in the future a provider's generation time may lie.
    pub fn future_tolerance(&self) -> Nanos {
        self.future_tolerance
    }
    /// How long a response may stay live.
    pub fn response_ttl(&self) -> Nanos {
        self.response_ttl
    }

    /// The longest interval a certificate may cover from when it is received.
    pub fn max_certificate(&self) -> Nanos {
        self.max_certificate
    }
    /// All sources, by index.
    pub fn sources(&self) -> &[SourceSpec] {
        &self.sources
    }
    /// All types, by index.
    pub fn types(&self) -> &[TypeSpec] {
        &self.types
    }
    /// A source by index.
    pub fn source(&self, ix: SourceIx) -> Option<&SourceSpec> {
        self.sources.get(usize::from(ix.0))
    }
    /// A type by index.
    pub fn type_spec(&self, ix: TypeIx) -> Option<&TypeSpec> {
        self.types.get(usize::from(ix.0))
    }
    /// A source index by name.
    pub fn source_ix(&self, name: &str) -> Option<SourceIx> {
        self.sources
            .iter()
            .position(|s| s.name.as_str() == name)
            .and_then(|i| u8::try_from(i).ok())
            .map(SourceIx)
    }
    /// A type index by name.
    pub fn type_ix(&self, name: &str) -> Option<TypeIx> {
        self.types
            .iter()
            .position(|t| t.name.as_str() == name)
            .and_then(|i| u8::try_from(i).ok())
            .map(TypeIx)
    }
}

fn build_rule(
    cx: &Ctx<'_>,
    field: &str,
    r: &Spanned<RawRule>,
    source_ix: &BTreeMap<String, SourceIx>,
    sources: &[SourceSpec],
    footprint: u64,
    payload: PayloadKind,
) -> Result<RuleSpec, CatalogError> {
    let span = r.span();
    let rc = RuleCx {
        cx,
        field,
        span: span.clone(),
        source_ix,
        sources,
        footprint,
        payload,
    };
    let spec = match r.get_ref() {
        RawRule::WithinBounds { source, code: c } => {
            rc.needs_target()?;
            RuleSpec {
                rule: Rule::WithinBounds {
                    source: rc.src(source, ValueKind::Bounds)?,
                },
                code: rc.code(c, ReasonCode::OUT_OF_BOUNDS)?,
            }
        }
        RawRule::MaxAltitude { max_m, code: c } => {
            rc.needs_target()?;
            RuleSpec {
                rule: Rule::MaxAltitude {
                    max_m: rc.positive("max_m", *max_m)?,
                },
                code: rc.code(c, ReasonCode::OPERATING_LIMIT)?,
            }
        }
        RawRule::MaxDistance {
            source,
            max_m,
            code: c,
        } => {
            rc.needs_target()?;
            RuleSpec {
                rule: Rule::MaxDistance {
                    source: rc.src(source, ValueKind::Position)?,
                    max_m: rc.positive("max_m", *max_m)?,
                },
                code: rc.code(c, ReasonCode::OPERATING_LIMIT)?,
            }
        }
        RawRule::MinNumber {
            source,
            min,
            code: c,
        } => RuleSpec {
            rule: Rule::MinNumber {
                source: rc.src(source, ValueKind::Number)?,
                min: rc.finite("min", *min)?,
            },
            code: rc.code(c, ReasonCode::RULE_FAILED)?,
        },
        RawRule::MaxNumber {
            source,
            max,
            code: c,
        } => RuleSpec {
            rule: Rule::MaxNumber {
                source: rc.src(source, ValueKind::Number)?,
                max: rc.finite("max", *max)?,
            },
            code: rc.code(c, ReasonCode::RULE_FAILED)?,
        },
        RawRule::Flag { source, code: c } => RuleSpec {
            rule: Rule::Flag {
                source: rc.src(source, ValueKind::Flag)?,
            },
            code: rc.code(c, ReasonCode::RULE_FAILED)?,
        },
        RawRule::Separation {
            source,
            min_m,
            code: c,
        } => {
            rc.needs_target()?;
            RuleSpec {
                rule: Rule::Separation {
                    source: rc.src(source, ValueKind::Traffic)?,
                    min_m: rc.positive("min_m", *min_m)?,
                },
                code: rc.code(c, ReasonCode::SEPARATION_LOST)?,
            }
        }
        RawRule::TextIn {
            source,
            allowed,
            code: c,
        } => {
            let mut ids = Vec::new();
            for a in allowed {
                ids.push(cx.id(span.clone(), &format!("{field}.allowed"), a)?);
            }
            RuleSpec {
                rule: Rule::TextIn {
                    source: rc.src(source, ValueKind::Text)?,
                    allowed: ids,
                },
                code: rc.code(c, ReasonCode::VEHICLE_STATE)?,
            }
        }
    };
    Ok(spec)
}

/// What reading one rule needs: where it is (for errors), the sources and the type's
/// footprint and payload it may refer to.
struct RuleCx<'a> {
    cx: &'a Ctx<'a>,
    field: &'a str,
    span: std::ops::Range<usize>,
    source_ix: &'a BTreeMap<String, SourceIx>,
    sources: &'a [SourceSpec],
    footprint: u64,
    payload: PayloadKind,
}

impl RuleCx<'_> {
    /// The source a rule reads: defined, in the footprint, of the kind the rule needs.
    fn src(&self, name: &str, want: ValueKind) -> Result<SourceIx, CatalogError> {
        let (cx, field) = (self.cx, self.field);
        let ix = *self.source_ix.get(name).ok_or_else(|| {
            cx.err(
                self.span.clone(),
                format!("{field}.source"),
                format!("unknown source `{name}`"),
            )
        })?;
        if self.footprint & (1u64 << ix.0) == 0 {
            // INVARIANT (locality): a rule may only read sources in the type's footprint, or a
            // change outside the footprint could change the component's support.
            return Err(cx.err(
                self.span.clone(),
                format!("{field}.source"),
                format!("`{name}` is not in the footprint"),
            ));
        }
        let have = self.sources.get(usize::from(ix.0)).map(|s| s.value);
        if have != Some(want) {
            return Err(cx.err(
                self.span.clone(),
                format!("{field}.source"),
                format!(
                    "`{name}` carries {} values; this rule needs {}",
                    have.map_or("no", ValueKind::name),
                    want.name()
                ),
            ));
        }
        Ok(ix)
    }

    /// A rule that reads the route target: the payload must have one.
    fn needs_target(&self) -> Result<(), CatalogError> {
        if self.payload != PayloadKind::RouteAction {
            return Err(self.cx.err(
                self.span.clone(),
                format!("{}.kind", self.field),
                "this rule reads a route target; the payload has none",
            ));
        }
        Ok(())
    }

    /// A positive distance, m.
    fn positive(&self, name: &str, x: f64) -> Result<f64, CatalogError> {
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            Err(self.cx.err(
                self.span.clone(),
                format!("{}.{name}", self.field),
                format!("must be a positive number of metres, not {x}"),
            ))
        }
    }

    /// A finite number.
    fn finite(&self, name: &str, x: f64) -> Result<f64, CatalogError> {
        if x.is_finite() {
            Ok(x)
        } else {
            Err(self.cx.err(
                self.span.clone(),
                format!("{}.{name}", self.field),
                "must be a finite number",
            ))
        }
    }

    /// The rule's reason code: the default, or a named rule reason.
    fn code(&self, c: &Option<String>, default: ReasonCode) -> Result<ReasonCode, CatalogError> {
        let Some(name) = c else {
            return Ok(default);
        };
        let code = ReasonCode::from_name(name).ok_or_else(|| {
            self.cx.err(
                self.span.clone(),
                format!("{}.code", self.field),
                format!("unknown reason code `{name}`"),
            )
        })?;
        if !(212..=225).contains(&code.number()) {
            return Err(self.cx.err(
                self.span.clone(),
                format!("{}.code", self.field),
                format!("`{name}` is not a rule reason"),
            ));
        }
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_reads_the_allowed_prerequisites() {
        // Every pair of types and every phase of the shipped catalogs, against the list.
        let mut checked = 0;
        for (name, text) in [
            ("uav-px4.toml", include_str!("../../catalogs/uav-px4.toml")),
            (
                "crazyflie.toml",
                include_str!("../../catalogs/crazyflie.toml"),
            ),
            (
                "repo-merge.toml",
                include_str!("../../catalogs/repo-merge.toml"),
            ),
        ] {
            let cat = Catalog::parse(text, name).unwrap();
            let n = u8::try_from(cat.types().len()).unwrap();
            for child in 0..n {
                let spec = cat.type_spec(TypeIx(child)).unwrap();
                for parent in 0..n {
                    for phase in Phase::ALL {
                        let listed = spec
                            .prerequisites
                            .iter()
                            .any(|p| p.parent == TypeIx(parent) && p.phases.contains(&phase));
                        assert_eq!(spec.allows(TypeIx(parent), phase), listed, "{name}");
                        checked += usize::from(listed);
                    }
                }
            }
        }
        assert!(checked > 20, "{checked} allowed pairs");
    }

    const BASE: &str = r#"
[catalog]
id = "t"
version = 1

[sources]
a = { value = "flag" }
b = { value = "none" }

[types.n]
class = "non_action"
payload = "notice"
output = "log"
footprint = { a = 100 }
temporal = "point"
"#;

    fn err(src: &str) -> CatalogError {
        Catalog::parse(src, "t.toml").unwrap_err()
    }

    #[test]
    fn the_base_catalog_loads() {
        let c = Catalog::parse(BASE, "t.toml").unwrap();
        assert_eq!(c.types().len(), 1);
        assert_eq!(c.sources().len(), 2);
    }

    #[test]
    fn unknown_footprint_source_names_file_line_and_field() {
        let src = BASE.replace("footprint = { a = 100 }", "footprint = { a = 100, zz = 5 }");
        let e = err(&src);
        assert_eq!(e.file(), "t.toml");
        assert_eq!(e.field(), "types.n.footprint.zz");
        assert_eq!(e.line(), 14, "{e}");
        assert!(
            e.to_string()
                .starts_with("t.toml:14: types.n.footprint.zz: unknown source `zz`")
        );
    }

    #[test]
    fn unknown_field_is_refused_with_its_line() {
        let src = BASE.replace(
            "temporal = \"point\"",
            "temporal = \"point\"\ncolour = \"red\"",
        );
        let e = err(&src);
        assert!(e.message().contains("colour"), "{e}");
        assert_eq!(e.line(), 16, "{e}");
        assert_eq!(e.field(), "types.n.colour", "{e}");
    }

    #[test]
    fn semantic_errors_are_refused() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "class = \"non_action\"",
                "class = \"action\"",
                "types.n.class",
            ),
            (
                "temporal = \"point\"",
                "temporal = \"interval\"",
                "types.n.temporal",
            ),
            (
                "temporal = \"point\"",
                "temporal = \"point\"\nrules = [{ kind = \"flag\", source = \"b\" }]",
                "types.n.rules[0].source",
            ),
            (
                "temporal = \"point\"",
                "temporal = \"point\"\nprerequisites = [{ type = \"n\", phases = [\"dispatched\"] }]",
                "types.n.prerequisites[0].phases",
            ),
            (
                "temporal = \"point\"",
                "temporal = \"point\"\nclaims_required = [\"b\"]",
                "types.n.claims_required",
            ),
        ];
        for (from, to, field) in cases {
            let e = err(&BASE.replace(from, to));
            assert_eq!(e.field(), *field, "{e}");
        }
    }

    #[test]
    fn interval_needs_a_certificate_and_a_duration() {
        let src = BASE.to_string()
            + r#"
[types.go]
class = "action"
payload = "route_action"
adapter = "px4"
footprint = { a = 100 }
temporal = "interval"
"#;
        assert_eq!(err(&src).field(), "types.go.requires_certificate");
        let ok = src.replace(
            "temporal = \"interval\"",
            "temporal = \"interval\"\nrequires_certificate = true",
        );
        assert!(Catalog::parse(&ok, "t.toml").is_ok());
    }

    #[test]
    fn routes_name_recoverable_reasons_only() {
        let src = BASE.to_string()
            + r#"
[types.hold]
class = "action"
payload = "hold"
adapter = "px4"
footprint = { a = 100 }
temporal = "point"
rules = [{ kind = "flag", source = "a", code = "LINK_UNHEALTHY" }]

[types.hold.recovery]
recoverable = ["STALE_SOURCE", "LINK_UNHEALTHY"]
scope = "self"
expiry_ms = 1000
retry_limit = 1
assignee = "agent"
route = "replan"
routes = { LINK_UNHEALTHY = "refresh_link" }
"#;
        let c = Catalog::parse(&src, "t.toml").unwrap();
        let r = &c.type_spec(c.type_ix("hold").unwrap()).unwrap().recovery;
        assert_eq!(
            r.route_for(ReasonCode::LINK_UNHEALTHY).as_str(),
            "refresh_link"
        );
        assert_eq!(r.route_for(ReasonCode::STALE_SOURCE).as_str(), "replan");
        let not_recoverable = src.replace(
            "routes = { LINK_UNHEALTHY",
            "routes = { EPOCH_CHANGED = \"x\", LINK_UNHEALTHY",
        );
        let e = err(&not_recoverable);
        assert_eq!(e.field(), "types.hold.recovery.routes.EPOCH_CHANGED", "{e}");
        assert!(e.to_string().contains("not in `recoverable`"), "{e}");
        let unknown = src.replace(
            "routes = { LINK_UNHEALTHY",
            "routes = { NO_SUCH_CODE = \"x\", LINK_UNHEALTHY",
        );
        assert_eq!(
            err(&unknown).field(),
            "types.hold.recovery.routes.NO_SUCH_CODE"
        );
        let bad_id = src.replace("\"refresh_link\"", "\"refresh link\"");
        assert_eq!(
            err(&bad_id).field(),
            "types.hold.recovery.routes.LINK_UNHEALTHY"
        );
    }

    #[test]
    fn the_shipped_uav_catalog_loads() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../catalogs/uav-px4.toml");
        let src = std::fs::read_to_string(path).unwrap();
        let c = Catalog::parse(&src, "uav-px4.toml").unwrap();
        assert_eq!((c.id().as_str(), c.version()), ("uav-px4", 6));
        for t in [
            "notice",
            "report",
            "refresh_request",
            "route_action",
            "hold",
            "land",
            "status",
        ] {
            assert!(c.type_ix(t).is_some(), "missing type {t}");
        }
    }

    /// Values a catalog author cannot have meant are load errors with the key path.
    #[test]
    fn values_that_cannot_be_meant_are_refused() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../catalogs/uav-px4.toml");
        let src = std::fs::read_to_string(path).unwrap();
        for (from, to, want) in [
            (
                "response_ttl_ms = 120000",
                "response_ttl_ms = 0",
                "catalog.response_ttl_ms: must be at least 1 ms",
            ),
            (
                "future_tolerance_ms = 50 ",
                "future_tolerance_ms = 86400000 ",
                "catalog.future_tolerance_ms: 86400000 ms is over one hour",
            ),
            (
                "{ kind = \"max_altitude\", max_m = 120.0 }",
                "{ kind = \"max_altitude\", max_m = -120.0 }",
                "max_m: must be a positive number of metres, not -120",
            ),
            (
                "source = \"home\", max_m = 500.0",
                "source = \"home\", max_m = 0.0",
                "max_m: must be a positive number of metres, not 0",
            ),
            (
                "source = \"traffic\", min_m = 30.0",
                "source = \"traffic\", min_m = -1.0",
                "min_m: must be a positive number of metres, not -1",
            ),
        ] {
            assert!(src.contains(from), "{from}");
            let e = Catalog::parse(&src.replace(from, to), "c.toml").unwrap_err();
            assert!(e.to_string().contains(want), "{to}: {e}");
        }
    }

    #[test]
    fn actions_name_their_contract_effect_through_zones() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../catalogs/uav-px4.toml");
        let src = std::fs::read_to_string(path).unwrap();
        let c = Catalog::parse(&src, "uav-px4.toml").unwrap();
        let route = c.type_spec(c.type_ix("route_action").unwrap()).unwrap();
        let at = |n: f64, e: f64| {
            Some(crate::payload::RouteTarget {
                frame: crate::payload::Frame::LocalNed,
                north_m: n,
                east_m: e,
                down_m: -10.0,
                yaw_deg: 0.0,
                duration_s: 5.0,
            })
        };
        assert_eq!(
            c.effect_of(route, at(12.0, 3.5).as_ref()),
            Some(Ok("goto(wp1)".into()))
        );
        assert_eq!(
            c.effect_of(route, at(30.0, 18.0).as_ref()),
            Some(Ok("goto(wp2)".into()))
        );
        assert_eq!(
            c.effect_of(route, at(-40.0, -40.0).as_ref()),
            Some(Err(ReasonCode::ZONE_UNRESOLVED))
        );
        let land = c.type_spec(c.type_ix("land").unwrap()).unwrap();
        assert_eq!(c.effect_of(land, None), Some(Ok("land".into())));
        let notice = c.type_spec(c.type_ix("notice").unwrap()).unwrap();
        assert_eq!(c.effect_of(notice, at(0.0, 0.0).as_ref()), None);
        // Overlapping zones, or a zone effect on a type without a target, are load errors.
        let overlap = src.replace(
            "wp2   = { north_min = 20.0,  north_max = 40.0,  east_min = 10.0,",
            "wp2   = { north_min = 15.0,  north_max = 40.0,  east_min = 5.0,",
        );
        let e = Catalog::parse(&overlap, "o.toml").unwrap_err();
        assert_eq!(e.field(), "zones.wp2");
        let bad = src.replace(
            "effect = { name = \"land\" }",
            "effect = { name = \"land\", arg = \"zone\" }",
        );
        assert_eq!(
            Catalog::parse(&bad, "b.toml").unwrap_err().field(),
            "types.land.effect.arg"
        );
    }
}
