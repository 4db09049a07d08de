//! Global route targets in the local frame.
//!
//! PX4 flies offboard position setpoints in its local NED frame, whose origin is the EKF's
//! global origin (`GPS_GLOBAL_ORIGIN`). A target given as latitude and longitude is placed in
//! that frame the way PX4 places its own global positions: an azimuthal equidistant projection
//! about the origin on a sphere of PX4's Earth radius, so that the point the gateway checks and
//! sends is the point PX4 would compute from the same latitude and longitude. Altitudes become
//! `down_m` by subtraction: above mean sea level from the origin's altitude, relative to home
//! from home's.
//!
//! Pure functions; nothing here reads a clock or a source. Which origin applies is the
//! caller's (the `origin` source of the action's type, pinned by the agent's epoch claim).

use super::payload::{GlobalFrame, GlobalTarget, MAX_LOCAL_COORD_M, RouteTarget};
use super::value::GeoOrigin;

/// PX4's Earth radius (`CONSTANTS_RADIUS_OF_EARTH`), metres.
pub const EARTH_RADIUS_M: f64 = 6_371_000.0;

/// North and east of `(lat_deg, lon_deg)` from the origin, metres: the azimuthal equidistant
/// projection (the great-circle distance from the origin, along the initial bearing).
pub fn project(origin: &GeoOrigin, lat_deg: f64, lon_deg: f64) -> (f64, f64) {
    let (lat0, lon0) = (origin.lat_deg.to_radians(), origin.lon_deg.to_radians());
    let (lat, lon) = (lat_deg.to_radians(), lon_deg.to_radians());
    let (sin0, cos0) = lat0.sin_cos();
    let (sin1, cos1) = lat.sin_cos();
    let dlon = lon - lon0;
    let cos_dlon = dlon.cos();
    // The cosine of the central angle; rounding can take it a hair past ±1.
    let cos_c = (sin0 * sin1 + cos0 * cos1 * cos_dlon).clamp(-1.0, 1.0);
    let c = cos_c.acos();
    // Scale from the orthographic components to arc length: c / sin c, 1 at the origin.
    let k = if c > 0.0 { c / c.sin() } else { 1.0 };
    let north = k * (cos0 * sin1 - sin0 * cos1 * cos_dlon) * EARTH_RADIUS_M;
    let east = k * cos1 * dlon.sin() * EARTH_RADIUS_M;
    (north, east)
}

/// The local-NED target a global one names under `origin`, or `None` when the result is not a
/// usable local point (beyond the local frame's ±100 km, or not finite).
pub fn to_local(origin: &GeoOrigin, g: &GlobalTarget) -> Option<RouteTarget> {
    let (north_m, east_m) = project(origin, g.lat_deg, g.lon_deg);
    let up_from_origin = match g.frame {
        GlobalFrame::Global => g.alt_m - origin.alt_m,
        GlobalFrame::GlobalRelativeAlt => origin.home_alt_m + g.alt_m - origin.alt_m,
    };
    let down_m = -up_from_origin;
    let usable = |x: f64| x.is_finite() && x.abs() <= MAX_LOCAL_COORD_M;
    (usable(north_m) && usable(east_m) && usable(down_m)).then_some(RouteTarget {
        frame: super::payload::Frame::LocalNed,
        north_m,
        east_m,
        down_m,
        yaw_deg: g.yaw_deg,
        duration_s: g.duration_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZURICH: GeoOrigin = GeoOrigin {
        lat_deg: 47.397_742,
        lon_deg: 8.545_594,
        alt_m: 488.0,
        home_alt_m: 490.0,
    };

    fn target(frame: GlobalFrame, lat_deg: f64, lon_deg: f64, alt_m: f64) -> GlobalTarget {
        GlobalTarget {
            frame,
            lat_deg,
            lon_deg,
            alt_m,
            yaw_deg: 0.0,
            duration_s: 5.0,
        }
    }

    /// The haversine distance and initial bearing, computed independently of the projection:
    /// the projection must put the point at that distance along that bearing.
    fn distance_bearing(o: &GeoOrigin, lat: f64, lon: f64) -> (f64, f64) {
        let (p1, p2) = (o.lat_deg.to_radians(), lat.to_radians());
        let dp = p2 - p1;
        let dl = (lon - o.lon_deg).to_radians();
        let a = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
        let d = 2.0 * EARTH_RADIUS_M * a.sqrt().asin();
        let y = dl.sin() * p2.cos();
        let x = p1.cos() * p2.sin() - p1.sin() * p2.cos() * dl.cos();
        (d, y.atan2(x))
    }

    #[test]
    fn the_origin_projects_to_zero() {
        assert_eq!(project(&ZURICH, ZURICH.lat_deg, ZURICH.lon_deg), (0.0, 0.0));
    }

    #[test]
    fn a_point_lands_at_its_great_circle_distance_and_bearing() {
        for (dlat, dlon) in [
            (0.001, 0.0),
            (0.0, 0.001),
            (-0.0004, 0.0007),
            (0.02, -0.03),
            (-0.3, 0.4),
        ] {
            let (lat, lon) = (ZURICH.lat_deg + dlat, ZURICH.lon_deg + dlon);
            let (n, e) = project(&ZURICH, lat, lon);
            let (d, bearing) = distance_bearing(&ZURICH, lat, lon);
            assert!((n.hypot(e) - d).abs() < 1e-6 * d.max(1.0), "{dlat},{dlon}");
            assert!((e.atan2(n) - bearing).abs() < 1e-9, "{dlat},{dlon}");
        }
        // One thousandth of a degree of latitude is R·π/180/1000 north, nothing east.
        let (n, e) = project(&ZURICH, ZURICH.lat_deg + 0.001, ZURICH.lon_deg);
        assert!((n - EARTH_RADIUS_M * std::f64::consts::PI / 180_000.0).abs() < 1e-6);
        assert!(e.abs() < 1e-9);
    }

    #[test]
    fn altitudes_count_from_the_origin_or_from_home() {
        let amsl = to_local(&ZURICH, &target(GlobalFrame::Global, 47.4, 8.55, 508.0)).unwrap();
        assert!((amsl.down_m - -20.0).abs() < 1e-9);
        let rel = to_local(
            &ZURICH,
            &target(GlobalFrame::GlobalRelativeAlt, 47.4, 8.55, 20.0),
        )
        .unwrap();
        // Home is 2 m above the origin: 20 m above home is 22 m above the origin.
        assert!((rel.down_m - -22.0).abs() < 1e-9);
        assert_eq!((rel.north_m, rel.east_m), (amsl.north_m, amsl.east_m));
        assert_eq!((rel.yaw_deg, rel.duration_s), (0.0, 5.0));
    }

    #[test]
    fn a_point_beyond_the_local_frame_has_no_local_target() {
        assert!(to_local(&ZURICH, &target(GlobalFrame::Global, 48.5, 8.55, 500.0)).is_none());
        assert!(to_local(&ZURICH, &target(GlobalFrame::Global, 47.4, 8.55, 1e6)).is_none());
        assert!(
            to_local(
                &ZURICH,
                &target(GlobalFrame::Global, 47.4, 8.55, f64::INFINITY)
            )
            .is_none()
        );
    }
}
