//! `LocalOK_K(e, π_e(C_t)) = FreshOK ∧ RuleOK`, evaluated over the component's footprint only,
//! plus support claims, certificate binding and the temporal mode.
//!
//! - FreshOK: `AoI_s(t) = t - u_s(t) <= H_{e,s}` for every footprint source; equality is fresh.
//! - INTERVAL: `t_end + δ_g < valid_until(e)`, where `t_end = t_first + duration` and
//!   `valid_until(e)` is the end of the temporal certificate bound to the component's digest
//!   (the catalog requires one for every INTERVAL type); equality fails closed. Source freshness
//!   is checked at the instant, as for POINT.
//! - ROLLING: each window is short and lives on raw support: `t_first + window + δ_g` must lie
//!   before the earliest lapse of any footprint source (`u_s + H`) and of the certificate, if
//!   any; on renewal every footprint source must have been refreshed since the previous
//!   admission.
//!
//! INVARIANT (locality): nothing here reads a source outside `spec.footprint`; the catalog
//! refuses rules that would.

use super::catalog::{Catalog, Rule, SourceIx, Temporal, TypeSpec};
use super::graph::Component;
use super::payload::{Payload, RouteTarget};
use super::reason::ReasonCode;
use super::state::{Snapshot, Value};
use super::time::Nanos;

/// The local-NED target of a route action: the agent's own for a local target; for a global
/// one, its conversion through the type's `origin` source as the state holds it now (`None`
/// without an origin value, or when the point lies beyond the local frame). The agent's epoch
/// claim on the origin pins which origin that is: a changed origin is `EPOCH_CHANGED`.
pub fn route_target(spec: &TypeSpec, payload: &Payload, snap: &Snapshot) -> Option<RouteTarget> {
    match payload {
        Payload::RouteAction(t) => Some(*t),
        Payload::GlobalRoute(g) => match snap.source(spec.origin?).map(|x| &x.value) {
            Some(Value::Geo(o)) => super::geo::to_local(o, g),
            _ => None,
        },
        _ => None,
    }
}

/// The result of one local evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `L_{C_t}(e)`.
    pub ok: bool,
    /// The first failing check, when not ok.
    pub code: Option<ReasonCode>,
    /// Footprint sources implicated in a failure (bit per source index).
    pub failing: u64,
    /// The first instant at which the passage of time alone turns an ok verdict into a failing
    /// one ([`Nanos::MAX`] when never, or when already failing).
    pub changes_at: Nanos,
}

impl Verdict {
    const fn pass() -> Verdict {
        Verdict {
            ok: true,
            code: None,
            failing: 0,
            changes_at: Nanos::MAX,
        }
    }

    pub(crate) fn fail(&mut self, code: ReasonCode, source: Option<SourceIx>) {
        if self.ok {
            self.ok = false;
            self.code = Some(code);
        }
        if let Some(s) = source {
            self.failing |= 1u64 << s.0;
        }
    }

    fn lapse_at(&mut self, t: Nanos) {
        if t < self.changes_at {
            self.changes_at = t;
        }
    }
}

/// How the temporal mode applies to this evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Before the first downstream effect: the temporal mode applies with `t_first = now`.
    BeforeEffect,
    /// The component has proceeded; it only has to remain supported at this instant (a parent
    /// stays a support prerequisite until its dependents proceed).
    Proceeded,
    /// A rolling renewal: as `BeforeEffect`, and every source must be newer than `since`.
    RollingRenewal {
        /// The previous admission instant.
        since: Nanos,
    },
}

/// Whether the agent's claimed epochs and provenance bind (`Bound`, the product) or are
/// ignored (`Unbound`, the Local-Unbound comparison variant only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claims {
    /// A claimed epoch or provenance must match the current source.
    Bound,
    /// Claimed epochs and provenance are not compared.
    Unbound,
    /// Seeded defect `origin-not-claimed`: as `Bound`, but a global target need not claim the
    /// origin's epoch.
    #[cfg(feature = "__seeded-defects")]
    BoundWithoutOrigin,
}

impl Claims {
    /// Whether a global target must claim the epoch of the origin it is converted through.
    const fn pin_origin(self) -> bool {
        match self {
            Claims::Bound | Claims::Unbound => true,
            #[cfg(feature = "__seeded-defects")]
            Claims::BoundWithoutOrigin => false,
        }
    }
}

/// Evaluates `LocalOK` for component `c` of type `spec` at `now`.
pub fn local_ok(
    cat: &Catalog,
    spec: &TypeSpec,
    c: &Component,
    snap: &Snapshot,
    now: Nanos,
    timing: Timing,
) -> Verdict {
    local_ok_with(cat, spec, c, snap, now, timing, Claims::Bound)
}

/// [`local_ok`] with the claims check chosen by the variant.
pub fn local_ok_with(
    cat: &Catalog,
    spec: &TypeSpec,
    c: &Component,
    snap: &Snapshot,
    now: Nanos,
    timing: Timing,
    claims: Claims,
) -> Verdict {
    let mut v = Verdict::pass();
    let global = matches!(*c.payload, Payload::GlobalRoute(_));
    // The earliest instant raw support lapses (ROLLING coverage) and the certificate's end
    // (INTERVAL coverage).
    let mut fresh_end = Nanos::MAX;
    let mut cert_end = Nanos::MAX;

    for &(s, h) in &spec.footprint {
        let Some(st) = snap.source(s) else {
            v.fail(ReasonCode::SOURCE_MISSING, Some(s));
            continue;
        };
        let last_fresh = st.generated_at.saturating_add(h);
        if now > last_fresh {
            v.fail(ReasonCode::STALE_SOURCE, Some(s));
            continue;
        }
        fresh_end = fresh_end.min(last_fresh);
        v.lapse_at(last_fresh.saturating_add(Nanos(1)));
        // A global target is planned against one origin: its claim must name that epoch.
        let origin_claim = global && spec.origin == Some(s) && claims.pin_origin();
        match c.claim(s) {
            Some(cl) if origin_claim && cl.epoch.is_none() => {
                v.fail(ReasonCode::CLAIM_MISSING, Some(s));
            }
            Some(_) if claims == Claims::Unbound => {}
            Some(cl) => {
                if cl.epoch.is_some_and(|e| e != st.epoch) {
                    v.fail(ReasonCode::EPOCH_CHANGED, Some(s));
                }
                if cl.provenance.as_ref().is_some_and(|p| *p != st.provenance) {
                    let bounds = cat.source(s).is_some_and(|x| x.bounds);
                    v.fail(
                        if bounds {
                            ReasonCode::BOUNDS_PROVENANCE_CHANGED
                        } else {
                            ReasonCode::PROVENANCE_CHANGED
                        },
                        Some(s),
                    );
                }
            }
            None => {
                if origin_claim || spec.claims_required & (1u64 << s.0) != 0 {
                    v.fail(ReasonCode::CLAIM_MISSING, Some(s));
                }
            }
        }
        if let Timing::RollingRenewal { since } = timing
            && st.generated_at <= since
        {
            v.fail(ReasonCode::ROLLING_NOT_REFRESHED, Some(s));
        }
    }

    match &c.certificate {
        Some(id) => match snap.certificate(id) {
            None => v.fail(ReasonCode::CERTIFICATE_UNKNOWN, None),
            Some(cert) if cert.covers != c.digest => {
                v.fail(ReasonCode::CERTIFICATE_NOT_BOUND, None)
            }
            Some(cert) => {
                if now >= cert.valid_until {
                    v.fail(ReasonCode::CERTIFICATE_EXPIRED, None);
                } else {
                    v.lapse_at(cert.valid_until);
                    cert_end = cert.valid_until;
                }
            }
        },
        None => {
            if spec.requires_certificate {
                v.fail(ReasonCode::CERTIFICATE_MISSING, None);
            }
        }
    }

    if timing != Timing::Proceeded {
        let cover = match spec.temporal {
            Temporal::Point => None,
            Temporal::Interval => Some((
                Nanos::from_secs_f64(c.payload.duration_s().unwrap_or(0.0)),
                cert_end,
            )),
            Temporal::Rolling { window } => Some((window, fresh_end.min(cert_end))),
        };
        if let Some((span, valid_until)) = cover {
            // t_end + δ_g < valid_until, equality failing closed.
            let needed = span.saturating_add(spec.guard);
            if v.ok {
                if now.saturating_add(needed) >= valid_until {
                    v.fail(ReasonCode::INTERVAL_NOT_COVERED, None);
                } else if valid_until != Nanos::MAX {
                    v.lapse_at(valid_until.saturating_sub(needed));
                }
            }
        }
    }

    // Every rule sees the local point; a global target without one (no origin value, or a
    // point beyond the local frame) is out of bounds of the frame it would be flown in.
    let target = route_target(spec, &c.payload, snap);
    if global && target.is_none() {
        v.fail(ReasonCode::OUT_OF_BOUNDS, spec.origin);
    }
    for r in &spec.rules {
        if !rule_holds(&r.rule, target.as_ref(), snap) {
            v.fail(r.code, r.rule.source());
        }
    }

    if !v.ok {
        v.changes_at = Nanos::MAX;
    }
    v
}

fn rule_holds(rule: &Rule, target: Option<&RouteTarget>, snap: &Snapshot) -> bool {
    let value = |s: SourceIx| snap.source(s).map(|x| &x.value);
    match rule {
        Rule::WithinBounds { source } => match (target, value(*source)) {
            (Some(t), Some(Value::Bounds(b))) => b.contains(t.north_m, t.east_m, t.down_m),
            _ => false,
        },
        Rule::MaxAltitude { max_m } => target.is_some_and(|t| -t.down_m <= *max_m),
        Rule::MaxDistance { source, max_m } => match (target, value(*source)) {
            (Some(t), Some(Value::Position(p))) => {
                (t.north_m - p.north_m).hypot(t.east_m - p.east_m) <= *max_m
            }
            _ => false,
        },
        Rule::MinNumber { source, min } => {
            matches!(value(*source), Some(Value::Number(x)) if *x >= *min)
        }
        Rule::MaxNumber { source, max } => {
            matches!(value(*source), Some(Value::Number(x)) if *x <= *max)
        }
        Rule::Flag { source } => matches!(value(*source), Some(Value::Flag(true))),
        Rule::Separation { source, min_m } => match (target, value(*source)) {
            (Some(t), Some(Value::Traffic(v))) => v.iter().all(|p| {
                let dn = t.north_m - p.north_m;
                let de = t.east_m - p.east_m;
                let dd = t.down_m - p.down_m;
                (dn * dn + de * de + dd * dd).sqrt() >= *min_m
            }),
            _ => false,
        },
        Rule::TextIn { source, allowed } => match value(*source) {
            Some(Value::Text(x)) => allowed.contains(x),
            _ => false,
        },
    }
}
