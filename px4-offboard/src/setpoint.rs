//! The exact setpoint the gateway dispatches, and its fingerprint.
//!
//! A setpoint is a local-NED position plus yaw, sent as `SET_POSITION_TARGET_LOCAL_NED` in
//! `MAV_FRAME_LOCAL_NED` with type mask `0x09F8` (use x, y, z and yaw; ignore velocity,
//! acceleration and yaw rate).
//!
//! The fingerprint rounds position to the centimetre and yaw to the tenth of a degree. Both the
//! bridge (when it enqueues) and the vehicle side (when its controller accepts a target) compute
//! it from the values they hold, so a setpoint can be matched across the link without either
//! side carrying the gateway's ids. The rule, written so an independent implementation can
//! reproduce it: `n{round(north*100)}_e{round(east*100)}_d{round(down*100)}_y{round(yaw_deg*10)}`
//! with yaw normalised to (-180, 180].

use serde::{Deserialize, Serialize};

/// `POSITION_TARGET_TYPEMASK` for position + yaw: ignore vx, vy, vz (0x38), ax, ay, az (0x1C0)
/// and yaw rate (0x800).
pub const TYPE_MASK_POSITION_YAW: u16 = 0x09F8;

/// A local-NED position and yaw, metres and degrees.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setpoint {
    /// North, metres.
    pub north_m: f32,
    /// East, metres.
    pub east_m: f32,
    /// Down, metres (negative up).
    pub down_m: f32,
    /// Yaw, degrees clockwise from north.
    pub yaw_deg: f32,
}

impl Setpoint {
    /// True when every field is finite.
    pub fn is_finite(&self) -> bool {
        self.north_m.is_finite()
            && self.east_m.is_finite()
            && self.down_m.is_finite()
            && self.yaw_deg.is_finite()
    }

    /// Yaw in radians in (-π, π], as MAVLink carries it.
    pub fn yaw_rad(&self) -> f32 {
        normalize_deg(self.yaw_deg).to_radians()
    }

    /// The fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.north_m, self.east_m, self.down_m, self.yaw_deg)
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

/// A rounded NED position + yaw, comparable across the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// North, centimetres.
    pub n_cm: i64,
    /// East, centimetres.
    pub e_cm: i64,
    /// Down, centimetres.
    pub d_cm: i64,
    /// Yaw, tenths of a degree in (-1800, 1800].
    pub yaw_ddeg: i64,
}

impl Fingerprint {
    /// The fingerprint of a position (m) and yaw (deg).
    #[allow(
        clippy::cast_possible_truncation,
        reason = "rounded values of bounded coordinates"
    )]
    pub fn of(north_m: f32, east_m: f32, down_m: f32, yaw_deg: f32) -> Fingerprint {
        let r = |x: f64| x.round() as i64;
        let mut yaw = r(f64::from(normalize_deg(yaw_deg)) * 10.0);
        if yaw == -1800 {
            yaw = 1800;
        }
        Fingerprint {
            n_cm: r(f64::from(north_m) * 100.0),
            e_cm: r(f64::from(east_m) * 100.0),
            d_cm: r(f64::from(down_m) * 100.0),
            yaw_ddeg: yaw,
        }
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n{}_e{}_d{}_y{}",
            self.n_cm, self.e_cm, self.d_cm, self.yaw_ddeg
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_rounds_and_normalises() {
        let a = Setpoint {
            north_m: 12.0,
            east_m: 3.5,
            down_m: -10.0,
            yaw_deg: 90.0,
        };
        assert_eq!(a.fingerprint().to_string(), "n1200_e350_d-1000_y900");
        let b = Setpoint {
            north_m: 12.004,
            east_m: 3.4951,
            down_m: -10.0,
            yaw_deg: 450.0,
        };
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = Setpoint {
            yaw_deg: -180.0,
            ..a
        };
        assert_eq!(c.fingerprint().yaw_ddeg, 1800);
        assert_eq!(TYPE_MASK_POSITION_YAW, 2552);
    }
}
