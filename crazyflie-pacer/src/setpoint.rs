//! The exact position setpoint the bridge streams, and its fingerprint.

use serde::{Deserialize, Serialize};

/// Largest coordinate the bridge accepts, m (the Crazyflie flies indoors; the catalog's flight
/// volume is the real limit, this only refuses nonsense).
pub const MAX_COORD_M: f32 = 100.0;

/// A position setpoint in the Crazyflie's world frame (x forward, y left, z up), metres, and
/// yaw in degrees counter-clockwise — the generic commander's position type as the firmware
/// takes it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setpoint {
    /// x, m.
    pub x_m: f32,
    /// y, m.
    pub y_m: f32,
    /// z (height), m.
    pub z_m: f32,
    /// Yaw, degrees.
    pub yaw_deg: f32,
}

impl Setpoint {
    /// From the gateway's local NED (north, east, down, yaw clockwise from north): x = north,
    /// y = −east, z = −down, yaw = −yaw.
    pub fn from_ned(north_m: f32, east_m: f32, down_m: f32, yaw_deg: f32) -> Setpoint {
        Setpoint {
            x_m: north_m,
            y_m: -east_m,
            z_m: -down_m,
            yaw_deg: normalize_deg(-yaw_deg),
        }
    }

    /// Finite, within ±[`MAX_COORD_M`], not below the floor.
    pub fn is_valid(&self) -> bool {
        [self.x_m, self.y_m, self.z_m, self.yaw_deg]
            .iter()
            .all(|v| v.is_finite())
            && self.x_m.abs() <= MAX_COORD_M
            && self.y_m.abs() <= MAX_COORD_M
            && (0.0..=MAX_COORD_M).contains(&self.z_m)
    }

    /// Its fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.x_m, self.y_m, self.z_m, self.yaw_deg)
    }
}

/// Normalises degrees to (-180, 180].
pub fn normalize_deg(d: f32) -> f32 {
    let mut x = d % 360.0;
    if x <= -180.0 {
        x += 360.0;
    } else if x > 180.0 {
        x -= 360.0;
    }
    x
}

/// A setpoint rounded to centimetres and tenths of a degree (yaw in (-180, 180]), to match what
/// the vehicle took against what was dispatched. Printed `x{cm}_y{cm}_z{cm}_w{deci-degrees}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// x, cm.
    pub x_cm: i64,
    /// y, cm.
    pub y_cm: i64,
    /// z, cm.
    pub z_cm: i64,
    /// Yaw, tenths of a degree.
    pub yaw_ddeg: i64,
}

impl Fingerprint {
    /// The fingerprint of a position (m) and yaw (deg).
    #[allow(
        clippy::cast_possible_truncation,
        reason = "rounded values of bounded coordinates"
    )]
    pub fn of(x_m: f32, y_m: f32, z_m: f32, yaw_deg: f32) -> Fingerprint {
        let r = |x: f64| x.round() as i64;
        let mut yaw = r(f64::from(normalize_deg(yaw_deg)) * 10.0);
        if yaw == -1800 {
            yaw = 1800;
        }
        Fingerprint {
            x_cm: r(f64::from(x_m) * 100.0),
            y_cm: r(f64::from(y_m) * 100.0),
            z_cm: r(f64::from(z_m) * 100.0),
            yaw_ddeg: yaw,
        }
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "x{}_y{}_z{}_w{}",
            self.x_cm, self.y_cm, self.z_cm, self.yaw_ddeg
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ned_maps_to_the_crazyflie_frame() {
        let s = Setpoint::from_ned(1.0, 2.0, -0.5, 90.0);
        assert_eq!((s.x_m, s.y_m, s.z_m, s.yaw_deg), (1.0, -2.0, 0.5, -90.0));
        assert_eq!(s.fingerprint().to_string(), "x100_y-200_z50_w-900");
        assert!(s.is_valid());
        assert!(
            !Setpoint::from_ned(0.0, 0.0, 0.5, 0.0).is_valid(),
            "below the floor"
        );
        assert!(!Setpoint::from_ned(f32::NAN, 0.0, -1.0, 0.0).is_valid());
    }
}
