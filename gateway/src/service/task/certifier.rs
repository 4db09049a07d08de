//! The reference certifier (`[certifier] enabled = true`): a tube check for route actions that
//! works out of the box, so an agent can fly with nothing else running. A reference, not a
//! safety case: a deployment that needs one brings its own certifier (`POST /v1/digest` gives it
//! the exact digests).
//!
//! For a route action it sweeps the straight segment from the vehicle's current position to the
//! target, flown and held over `duration_s`, and checks it against the type's own rules: the
//! corridor in its bounds source (`within_bounds`; a box is convex, so the segment is inside
//! when both ends are), the altitude limit (`max_altitude`; altitude is linear along the
//! segment), and separation from every intruder in its traffic source (`separation`), each
//! intruder grown by how far it can fly in that time (`intruder_speed_mps` × `duration_s`).
//! A pass issues a certificate bound to the component's exact digest through the ordinary
//! certificate path (a receipt like any other); a failure names the rule's own reason code.
//!
//! Synchronous and pure over the snapshot it is given: the service task calls it in place.

use halo_core::catalog::{Catalog, Rule, TypeSpec};
use halo_core::payload::RouteTarget;
use halo_core::reason::ReasonCode;
use halo_core::state::Snapshot;
use halo_core::value::{BoxNed, Point, Value};

/// `[certifier]`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CertifierConfig {
    /// Whether `POST /v1/certify` (and the MCP tools' automatic certification) runs.
    pub enabled: bool,
    /// How fast an intruder may fly, m/s: its reach over the action's duration is added to the
    /// catalog's separation.
    pub intruder_speed_mps: f64,
    /// How long a certificate stays valid after the action's own duration, ms (capped by the
    /// catalog's `max_certificate_ms`).
    pub slack_ms: u64,
    /// The certificates' `issuer`.
    pub issuer: String,
}

impl Default for CertifierConfig {
    fn default() -> CertifierConfig {
        CertifierConfig {
            enabled: false,
            intruder_speed_mps: 15.0,
            slack_ms: 30_000,
            issuer: "reference-certifier".into(),
        }
    }
}

/// Why the certifier refuses: the rule's reason code and a message for people.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The failing rule's code (`SOURCE_MISSING` when a source it reads was never published).
    pub code: ReasonCode,
    /// What failed, with the numbers.
    pub message: String,
}

fn refuse(code: ReasonCode, message: String) -> Refusal {
    Refusal { code, message }
}

fn p3(p: &Point) -> [f64; 3] {
    [p.north_m, p.east_m, p.down_m]
}

fn inside(b: &BoxNed, p: [f64; 3]) -> bool {
    let [n, e, d] = p;
    (b.north_min..=b.north_max).contains(&n)
        && (b.east_min..=b.east_max).contains(&e)
        && (b.down_min..=b.down_max).contains(&d)
}

/// Distance from `p` to the segment `a`–`b`.
pub fn segment_distance(a: [f64; 3], b: [f64; 3], p: [f64; 3]) -> f64 {
    let ab = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
    let ap = [p[0] - a[0], p[1] - a[1], p[2] - a[2]];
    let len2 = ab[0] * ab[0] + ab[1] * ab[1] + ab[2] * ab[2];
    let t = if len2 > 0.0 {
        ((ap[0] * ab[0] + ap[1] * ab[1] + ap[2] * ab[2]) / len2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let q = [a[0] + t * ab[0], a[1] + t * ab[1], a[2] + t * ab[2]];
    ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt()
}

fn name(cat: &Catalog, s: halo_core::catalog::SourceIx) -> String {
    cat.source(s)
        .map_or_else(|| "?".to_string(), |x| x.name.to_string())
}

/// Checks the route from `from` (the vehicle's local NED position) to `target` against `t`'s
/// geometric rules in `snap`.
///
/// # Errors
/// The first failing rule's [`Refusal`].
pub fn check(
    cfg: &CertifierConfig,
    cat: &Catalog,
    t: &TypeSpec,
    snap: &Snapshot,
    from: [f64; 3],
    target: &RouteTarget,
) -> Result<(), Refusal> {
    let to = [target.north_m, target.east_m, target.down_m];
    for r in &t.rules {
        match &r.rule {
            Rule::WithinBounds { source } => {
                let Some(Value::Bounds(b)) = snap.source(*source).map(|s| &s.value) else {
                    return Err(refuse(
                        ReasonCode::SOURCE_MISSING,
                        format!("no corridor in `{}` yet", name(cat, *source)),
                    ));
                };
                for (what, p) in [("the vehicle's position", from), ("the target", to)] {
                    if !inside(b, p) {
                        return Err(refuse(
                            r.code,
                            format!(
                                "{what} ({:.1}, {:.1}, {:.1}) m is outside the corridor in `{}`, so the straight path leaves it",
                                p[0],
                                p[1],
                                p[2],
                                name(cat, *source)
                            ),
                        ));
                    }
                }
            }
            Rule::MaxAltitude { max_m } => {
                for (what, p) in [("the vehicle", from), ("the target", to)] {
                    if -p[2] > *max_m {
                        return Err(refuse(
                            r.code,
                            format!(
                                "{what} is {:.1} m above the origin; the limit is {max_m} m",
                                -p[2]
                            ),
                        ));
                    }
                }
            }
            Rule::Separation { source, min_m } => {
                let Some(Value::Traffic(intruders)) = snap.source(*source).map(|s| &s.value) else {
                    return Err(refuse(
                        ReasonCode::SOURCE_MISSING,
                        format!("no traffic picture in `{}` yet", name(cat, *source)),
                    ));
                };
                let reach = cfg.intruder_speed_mps * target.duration_s;
                let need = min_m + reach;
                for i in intruders {
                    let d = segment_distance(from, to, p3(i));
                    if d < need {
                        return Err(refuse(
                            r.code,
                            format!(
                                "an intruder at ({:.0}, {:.0}, {:.0}) m comes within {d:.0} m of the path; {min_m} m separation plus its reach in {} s at {} m/s needs {need:.0} m",
                                i.north_m,
                                i.east_m,
                                i.down_m,
                                target.duration_s,
                                cfg.intruder_speed_mps
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// How long the certificate for an action of `duration_s` is valid: the action and the slack,
/// within the catalog's longest certificate.
pub fn valid_for_ms(cfg: &CertifierConfig, cat: &Catalog, duration_s: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a payload's duration is checked finite and within (0, 3600] s"
    )]
    let action_ms = (duration_s * 1000.0).ceil() as u64;
    (action_ms + cfg.slack_ms).min(cat.max_certificate().0 / 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_to_a_segment() {
        let a = [0.0, 0.0, 0.0];
        let b = [10.0, 0.0, 0.0];
        assert!((segment_distance(a, b, [5.0, 3.0, 0.0]) - 3.0).abs() < 1e-9);
        assert!((segment_distance(a, b, [-4.0, 3.0, 0.0]) - 5.0).abs() < 1e-9);
        assert!((segment_distance(a, b, [13.0, 4.0, 0.0]) - 5.0).abs() < 1e-9);
        assert!((segment_distance(a, a, [0.0, 0.0, 2.0]) - 2.0).abs() < 1e-9);
    }
}
