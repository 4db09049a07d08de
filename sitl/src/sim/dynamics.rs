//! Point-mass multicopter dynamics with velocity and acceleration limits.
//!
//! A position error becomes a desired velocity (proportional, capped by the speed limit and by
//! what can still be braked), the velocity error a desired acceleration (capped), and the
//! acceleration follows with a short lag (attitude and motor response). Tuned so that a climb
//! from the ground to 5 m takes about 7 s (with a 1 s spool-up) and a 5 m horizontal move about
//! 3 s with a small overshoot, as measured on PX4 v1.16 SIH.

/// Limits and gains.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Horizontal position gain, 1/s.
    pub k_xy: f64,
    /// Vertical position gain, 1/s.
    pub k_z: f64,
    /// Horizontal speed limit, m/s.
    pub v_xy: f64,
    /// Climb speed limit, m/s.
    pub v_up: f64,
    /// Descent speed limit, m/s.
    pub v_down: f64,
    /// Horizontal acceleration limit, m/s².
    pub a_xy: f64,
    /// Vertical acceleration limit, m/s².
    pub a_z: f64,
    /// Velocity-loop time constant, s.
    pub tau: f64,
    /// Acceleration lag, s.
    pub lag: f64,
    /// Yaw rate limit, deg/s.
    pub yaw_rate: f64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            k_xy: 1.0,
            k_z: 1.1,
            v_xy: 4.0,
            v_up: 1.2,
            v_down: 1.0,
            a_xy: 1.4,
            a_z: 1.0,
            tau: 0.3,
            lag: 0.1,
            yaw_rate: 60.0,
        }
    }
}

/// The vehicle's kinematic state, local NED, metres and seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Body {
    /// Position.
    pub pos: [f64; 3],
    /// Velocity.
    pub vel: [f64; 3],
    /// Acceleration.
    pub acc: [f64; 3],
    /// Yaw, degrees.
    pub yaw_deg: f64,
    /// The last desired velocity (for the target echo).
    pub vel_cmd: [f64; 3],
}

fn clamp(x: f64, lo: f64, hi: f64) -> f64 {
    x.max(lo).min(hi)
}

fn wrap180(d: f64) -> f64 {
    let mut x = d % 360.0;
    if x <= -180.0 {
        x += 360.0;
    } else if x > 180.0 {
        x -= 360.0;
    }
    x
}

/// What the controller is asked to do this step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Demand {
    /// Track a position and yaw.
    Position {
        /// Target, NED.
        target: [f64; 3],
        /// Target yaw, degrees.
        yaw_deg: f64,
    },
    /// Descend at the given speed, holding horizontal position.
    Descend {
        /// m/s.
        speed: f64,
        /// Horizontal position to hold.
        hold_ne: [f64; 2],
    },
    /// Motors off: on the ground nothing moves.
    Idle,
}

impl Body {
    /// Advances by `dt` seconds under `demand`. The ground is `down = 0`.
    pub fn step(&mut self, dt: f64, demand: Demand, lim: &Limits) {
        let (vd, yaw_t) = match demand {
            Demand::Idle => {
                if self.pos[2] >= 0.0 {
                    self.vel = [0.0; 3];
                    self.acc = [0.0; 3];
                    self.vel_cmd = [0.0; 3];
                    return;
                }
                // Unpowered in the air: fall (only reachable through a forced disarm).
                ([self.vel[0], self.vel[1], lim.v_down * 5.0], self.yaw_deg)
            }
            Demand::Descend { speed, hold_ne } => {
                let ex = hold_ne[0] - self.pos[0];
                let ey = hold_ne[1] - self.pos[1];
                (
                    [
                        clamp(lim.k_xy * ex, -lim.v_xy, lim.v_xy),
                        clamp(lim.k_xy * ey, -lim.v_xy, lim.v_xy),
                        speed,
                    ],
                    self.yaw_deg,
                )
            }
            Demand::Position { target, yaw_deg } => {
                let mut v = [0.0; 3];
                let e = [
                    target[0] - self.pos[0],
                    target[1] - self.pos[1],
                    target[2] - self.pos[2],
                ];
                let exy = e[0].hypot(e[1]);
                if exy > 1e-9 {
                    let speed = (lim.k_xy * exy)
                        .min(lim.v_xy)
                        .min((2.0 * 0.7 * lim.a_xy * exy).sqrt());
                    v[0] = speed * e[0] / exy;
                    v[1] = speed * e[1] / exy;
                }
                let ez = e[2];
                let vz = (lim.k_z * ez.abs()).min((2.0 * 0.7 * lim.a_z * ez.abs()).sqrt());
                v[2] = if ez < 0.0 {
                    -vz.min(lim.v_up)
                } else {
                    vz.min(lim.v_down)
                };
                (v, yaw_deg)
            }
        };
        self.vel_cmd = vd;
        let amax = [lim.a_xy, lim.a_xy, lim.a_z];
        let axes = self
            .acc
            .iter_mut()
            .zip(self.vel.iter_mut())
            .zip(self.pos.iter_mut())
            .zip(vd)
            .zip(amax);
        for ((((acc, vel), pos), v_d), a_max) in axes {
            let ad = clamp((v_d - *vel) / lim.tau, -a_max, a_max);
            *acc += (ad - *acc) * (dt / lim.lag).min(1.0);
            *vel += *acc * dt;
            *pos += *vel * dt;
        }
        if self.pos[2] > 0.0 {
            // Touching the ground stops vertical motion.
            self.pos[2] = 0.0;
            self.vel[2] = self.vel[2].min(0.0);
            self.acc[2] = self.acc[2].min(0.0);
        }
        let dyaw = wrap180(yaw_t - self.yaw_deg);
        let step = lim.yaw_rate * dt;
        self.yaw_deg = wrap180(self.yaw_deg + clamp(dyaw, -step, step));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time_to(body: &mut Body, target: [f64; 3], spool: f64) -> (f64, f64) {
        let lim = Limits::default();
        let dt = 0.005;
        let mut t = 0.0;
        let mut reached = None;
        let mut overshoot = 0.0_f64;
        let start = body.pos;
        let dir: Vec<f64> = (0..3).map(|i| target[i] - start[i]).collect();
        let len = dir.iter().map(|d| d * d).sum::<f64>().sqrt();
        while t < 20.0 {
            let demand = if t < spool {
                Demand::Idle
            } else {
                Demand::Position {
                    target,
                    yaw_deg: 0.0,
                }
            };
            body.step(dt, demand, &lim);
            t += dt;
            let along: f64 = (0..3)
                .map(|i| (body.pos[i] - start[i]) * dir[i] / len)
                .sum();
            overshoot = overshoot.max(along - len);
            let err: f64 = (0..3)
                .map(|i| (target[i] - body.pos[i]).powi(2))
                .sum::<f64>()
                .sqrt();
            if reached.is_none() && err < 0.2 {
                reached = Some(t);
            }
        }
        (reached.unwrap_or(f64::INFINITY), overshoot)
    }

    // The expected times are PX4 v1.16.0's, measured (sitl/data/px4-v1.16-measured.json:
    // `climb_5m_s` 5.1 s from the ARM ACK, `move_5m_s` 3.4 s), with their tolerances.
    #[test]
    fn climb_to_five_metres_matches_measured_px4() {
        let mut b = Body::default();
        let (t, _) = time_to(&mut b, [0.0, 0.0, -5.0], 0.05);
        assert!((4.6..5.6).contains(&t), "{t}");
    }

    #[test]
    fn five_metre_move_matches_measured_px4_with_a_small_overshoot() {
        let mut b = Body {
            pos: [0.0, 0.0, -5.0],
            ..Body::default()
        };
        let (t, over) = time_to(&mut b, [5.0, 0.0, -5.0], 0.0);
        assert!((3.0..3.8).contains(&t), "{t}");
        assert!(over > 0.01 && over < 0.5, "{over}");
    }
}
