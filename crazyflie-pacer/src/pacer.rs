//! The setpoint pacer: pure, with time passed in and outputs polled.
//!
//! # Call order
//!
//! Feed telemetry to [`Pacer::on_telemetry`] and link changes to [`Pacer::link_opened`] /
//! [`Pacer::link_closed`], call [`Pacer::handle_timeout`] when [`Pacer::poll_timeout`] passes,
//! and after each call drain [`Pacer::poll_transmit`] (commands for the Crazyflie, in order) and
//! [`Pacer::poll_event`]. [`Pacer::try_enqueue`], [`Pacer::hold`], [`Pacer::land`],
//! [`Pacer::takeoff`] and [`Pacer::arm`] are inputs too.
//!
//! # Safety behaviour
//!
//! - One slot: a new setpoint replaces the old one; the slot is streamed at `stream_hz`, one
//!   packet per period, and a late tick never sends a burst. Nothing old drains late.
//! - A setpoint is streamed only until `hold_margin_ms` before the `valid_until` its dispatch
//!   certified; at that instant (a timer, not the next tick) the pacer stops streaming and holds.
//! - Stopping follows the firmware's order, all in one step: the stream ends,
//!   notify-setpoint-stop hands priority back (the firmware blocks the high-level planner while
//!   setpoints stream), then a high-level go_to the current position (a hold) or land. The
//!   commander watchdog (levelled after 500 ms without setpoints, motors cut and Locked after
//!   2 s) never sees a gap.
//! - The supervisor's emergency-stop watchdog, once the vehicle has been armed, is refreshed
//!   every `watchdog_refresh_ms` (the firmware cuts the motors after 1 s without one), so if
//!   this process dies the vehicle stops.
//! - The link is down after `link_timeout_ms` without telemetry; the slot is dropped and never
//!   resumes when the link returns.
//! - A Locked or disarmed vehicle takes no setpoint ([`EnqueueError::Locked`],
//!   [`EnqueueError::NotArmed`]).

use std::collections::VecDeque;

use serde::Serialize;

use crate::setpoint::{Fingerprint, Setpoint};
use crate::telemetry::{Telemetry, sup};
use crate::time::Mono;

/// Pacing and safety parameters.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Setpoint stream rate, Hz (the firmware needs one at least every 500 ms).
    pub stream_hz: f64,
    /// Stop streaming this long before a target's `valid_until`, ms.
    pub hold_margin_ms: u64,
    /// The link is down after this long without telemetry, ms.
    pub link_timeout_ms: u64,
    /// Refresh the supervisor's emergency-stop watchdog this often while armed, ms (< 1000).
    pub watchdog_refresh_ms: u64,
    /// How long the last streamed setpoint stays valid after notify-setpoint-stop, ms.
    pub notify_stop_valid_ms: u32,
    /// Duration of the high-level go_to that holds position, s.
    pub hold_duration_s: f32,
    /// Descent speed for a high-level land (its duration is height / this, at least 1 s), m/s.
    pub land_speed_mps: f32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            stream_hz: 20.0,
            hold_margin_ms: 100,
            link_timeout_ms: 500,
            watchdog_refresh_ms: 250,
            notify_stop_valid_ms: 100,
            hold_duration_s: 1.0,
            land_speed_mps: 0.4,
        }
    }
}

/// A pacer configuration the firmware's timings cannot work with; the message names the key,
/// its allowed range and the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig(pub String);

impl std::fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidConfig {}

impl Config {
    /// Checks the values against the firmware's timings.
    ///
    /// # Errors
    /// [`InvalidConfig`], naming the offending key.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if !(self.stream_hz.is_finite() && (4.0..=100.0).contains(&self.stream_hz)) {
            return Err(InvalidConfig(format!(
                "stream_hz must be 4–100 Hz (the firmware levels the vehicle after 500 ms without a setpoint); got {}",
                self.stream_hz
            )));
        }
        if self.watchdog_refresh_ms == 0 || self.watchdog_refresh_ms >= 1000 {
            return Err(InvalidConfig(format!(
                "watchdog_refresh_ms must be 1–999 ms (the emergency-stop watchdog fires after 1000 ms); got {}",
                self.watchdog_refresh_ms
            )));
        }
        if !(100..=5000).contains(&self.link_timeout_ms) {
            return Err(InvalidConfig(format!(
                "link_timeout_ms must be 100–5000 ms; got {}",
                self.link_timeout_ms
            )));
        }
        let positive = |v: f32| v.is_finite() && v > 0.0;
        if !positive(self.hold_duration_s) || !positive(self.land_speed_mps) {
            return Err(InvalidConfig(
                "hold_duration_s and land_speed_mps must be positive".into(),
            ));
        }
        Ok(())
    }

    fn period_ns(&self) -> u64 {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a validated rate of 4–100 Hz"
        )]
        let p = (1e9 / self.stream_hz) as u64;
        p.max(1)
    }
}

/// A command for the Crazyflie, in the order the firmware must see them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Out {
    /// Generic commander position setpoint (port 7, type 7).
    Position(Setpoint),
    /// Notify-setpoint-stop (port 7, channel 1): the stream ends; the last setpoint stays valid
    /// this long, then the high-level planner may act.
    NotifyStop {
        /// ms.
        remain_valid_ms: u32,
    },
    /// High-level go_to, absolute.
    GoTo {
        /// Target, m.
        x_m: f32,
        /// Target, m.
        y_m: f32,
        /// Target, m.
        z_m: f32,
        /// Yaw, radians (the high-level commander's unit).
        yaw_rad: f32,
        /// s.
        duration_s: f32,
    },
    /// High-level land to `height_m`.
    Land {
        /// m.
        height_m: f32,
        /// s.
        duration_s: f32,
    },
    /// High-level takeoff to `height_m`.
    Takeoff {
        /// m.
        height_m: f32,
        /// s.
        duration_s: f32,
    },
    /// Supervisor arm (true) or disarm.
    Arm {
        /// Arm.
        arm: bool,
    },
    /// Refresh the supervisor's emergency-stop watchdog.
    EstopWatchdog,
}

/// Why the pacer stopped streaming and held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// The target's certified interval is about to end.
    TargetExpired,
    /// The gateway asked (deny-hold, an operator hold, a hold action).
    Requested,
}

impl std::fmt::Display for HoldReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HoldReason::TargetExpired => "the target's interval ended",
            HoldReason::Requested => "requested",
        })
    }
}

/// Why a setpoint or command was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnqueueError {
    /// No telemetry within the link timeout.
    LinkDown,
    /// The supervisor does not report the vehicle armed.
    NotArmed,
    /// The supervisor latched Locked (a watchdog cut the motors); reboot the Crazyflie.
    Locked,
    /// The interval ends before the stream could usefully start.
    Expired,
    /// Not finite, or outside ±100 m, or below the floor.
    InvalidSetpoint,
    /// The shell's command queue is full.
    QueueFull,
    /// A takeoff while a setpoint streams.
    Busy,
}

impl std::fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EnqueueError::LinkDown => "the radio link is down",
            EnqueueError::NotArmed => "the Crazyflie is not armed",
            EnqueueError::Locked => {
                "the Crazyflie is locked (a watchdog cut the motors); power-cycle it"
            }
            EnqueueError::Expired => "the setpoint's interval has ended",
            EnqueueError::InvalidSetpoint => "the setpoint is out of range",
            EnqueueError::QueueFull => "the bridge's queue is full",
            EnqueueError::Busy => "a setpoint is streaming",
        })
    }
}

impl std::error::Error for EnqueueError {}

/// What the pacer tells the gateway.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A target is streaming.
    TargetStarted {
        /// Opaque binding.
        binding: [u8; 32],
        /// Its fingerprint.
        fingerprint: Fingerprint,
        /// End of its certified interval.
        valid_until: Mono,
    },
    /// A target's interval ended; it is never sent again.
    TargetExpired {
        /// Binding.
        binding: [u8; 32],
        /// Fingerprint.
        fingerprint: Fingerprint,
    },
    /// A target was dropped without a hold (the link went down, the vehicle locked).
    TargetDropped {
        /// Binding.
        binding: [u8; 32],
        /// Why.
        reason: EnqueueError,
    },
    /// The stream stopped and a high-level go_to holds the vehicle where it was.
    Holding {
        /// Why.
        reason: HoldReason,
        /// The held position, m (`None` when the position was unknown and the vehicle lands).
        at_m: Option<[f32; 3]>,
    },
    /// The stream stopped and a high-level land was sent.
    Landing,
    /// The link came up or went down.
    Link {
        /// Up.
        up: bool,
        /// Time since the last telemetry, ms.
        silent_ms: u64,
    },
    /// The supervisor's armed flag changed.
    Armed {
        /// Armed.
        armed: bool,
    },
    /// The supervisor's flying flag changed.
    Flying {
        /// Flying.
        flying: bool,
    },
    /// The supervisor latched Locked.
    Locked,
}

#[derive(Clone, Copy, Debug)]
struct Target {
    sp: Setpoint,
    binding: [u8; 32],
    valid_until: Mono,
    stop_at: Mono,
    next_send: Mono,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Position setpoints emitted.
    pub setpoints_sent: u64,
    /// Holds.
    pub holds: u64,
    /// Lands.
    pub lands: u64,
    /// Emergency-stop watchdog refreshes.
    pub watchdog_refreshes: u64,
}

/// The pacer.
#[derive(Debug)]
pub struct Pacer {
    cfg: Config,
    link_up: bool,
    last_heard: Option<Mono>,
    target: Option<Target>,
    /// Setpoints were streamed since the last notify-setpoint-stop (the planner is blocked).
    streamed: bool,
    position: Option<[f32; 3]>,
    yaw_deg: f32,
    sup_bits: Option<u16>,
    next_watchdog: Option<Mono>,
    out: VecDeque<Out>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Pacer {
    /// A pacer with the link down and nothing known of the vehicle.
    pub fn new(cfg: Config) -> Pacer {
        Pacer {
            cfg,
            link_up: false,
            last_heard: None,
            target: None,
            streamed: false,
            position: None,
            yaw_deg: 0.0,
            sup_bits: None,
            next_watchdog: None,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The link is up (telemetry within the timeout).
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// The supervisor reports the vehicle armed.
    pub fn armed(&self) -> bool {
        self.sup_bits.is_some_and(|b| b & sup::IS_ARMED != 0)
    }

    /// The supervisor reports the vehicle locked.
    pub fn locked(&self) -> bool {
        self.sup_bits.is_some_and(|b| b & sup::IS_LOCKED != 0)
    }

    /// The supervisor reports the vehicle flying.
    pub fn flying(&self) -> bool {
        self.sup_bits.is_some_and(|b| b & sup::IS_FLYING != 0)
    }

    /// The estimator's newest position, m.
    pub fn position(&self) -> Option<[f32; 3]> {
        self.position
    }

    /// The binding streaming now.
    pub fn streaming(&self) -> Option<[u8; 32]> {
        self.target.map(|t| t.binding)
    }

    /// The next command to send.
    pub fn poll_transmit(&mut self) -> Option<Out> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A (re)connected Crazyflie. Nothing streams until a new setpoint arrives.
    pub fn link_opened(&mut self, now: Mono) {
        // A new connection never resumes a setpoint from before it.
        self.drop_target(EnqueueError::LinkDown);
        self.out.clear();
        self.last_heard = Some(now);
        self.sup_bits = None;
        self.position = None;
        self.next_watchdog = None;
        self.streamed = false;
        if !self.link_up {
            self.link_up = true;
            self.events.push_back(Event::Link {
                up: true,
                silent_ms: 0,
            });
        }
    }

    /// The library closed the link (a radio loss, a timeout).
    pub fn link_closed(&mut self, now: Mono) {
        self.go_down(now);
    }

    fn go_down(&mut self, now: Mono) {
        self.drop_target(EnqueueError::LinkDown);
        self.out.clear();
        if self.link_up {
            self.link_up = false;
            let silent_ms = self.last_heard.map_or(0, |t| now.since(t) / 1_000_000);
            self.events.push_back(Event::Link {
                up: false,
                silent_ms,
            });
        }
    }

    fn drop_target(&mut self, reason: EnqueueError) {
        if let Some(t) = self.target.take() {
            self.events.push_back(Event::TargetDropped {
                binding: t.binding,
                reason,
            });
        }
    }

    /// One telemetry sample arrived (any sample shows the link alive).
    pub fn on_telemetry(&mut self, now: Mono, t: &Telemetry) {
        self.last_heard = Some(now);
        if !self.link_up {
            self.link_up = true;
            self.events.push_back(Event::Link {
                up: true,
                silent_ms: 0,
            });
        }
        match t {
            Telemetry::State { position_m, .. } => self.position = Some(*position_m),
            Telemetry::Yaw { yaw_deg } => self.yaw_deg = *yaw_deg,
            Telemetry::Supervisor { bits } => self.on_supervisor(now, *bits),
            _ => {}
        }
    }

    fn on_supervisor(&mut self, now: Mono, bits: u16) {
        let old = self.sup_bits;
        self.sup_bits = Some(bits);
        let changed = |mask: u16| old.is_none_or(|o| (o ^ bits) & mask != 0);
        if changed(sup::IS_ARMED) {
            let armed = bits & sup::IS_ARMED != 0;
            self.events.push_back(Event::Armed { armed });
            if !armed {
                self.drop_target(EnqueueError::NotArmed);
            }
        }
        if changed(sup::IS_FLYING) {
            self.events.push_back(Event::Flying {
                flying: bits & sup::IS_FLYING != 0,
            });
        }
        if bits & sup::IS_LOCKED != 0 && old.is_none_or(|o| o & sup::IS_LOCKED == 0) {
            self.drop_target(EnqueueError::Locked);
            self.events.push_back(Event::Locked);
        }
        // The emergency-stop watchdog starts with the first armed report and keeps running.
        if bits & sup::IS_ARMED != 0 && self.next_watchdog.is_none() {
            self.next_watchdog = Some(now);
        }
    }

    fn linked_unlocked(&self) -> Result<(), EnqueueError> {
        if !self.link_up {
            return Err(EnqueueError::LinkDown);
        }
        if self.locked() {
            return Err(EnqueueError::Locked);
        }
        Ok(())
    }

    fn ready(&self) -> Result<(), EnqueueError> {
        self.linked_unlocked()?;
        if !self.armed() {
            return Err(EnqueueError::NotArmed);
        }
        Ok(())
    }

    /// Puts `sp` in the slot (replacing any), streamed until `hold_margin_ms` before
    /// `valid_until`; the first packet goes out now.
    ///
    /// # Errors
    /// [`EnqueueError`]; nothing changed.
    pub fn try_enqueue(
        &mut self,
        now: Mono,
        sp: Setpoint,
        binding: [u8; 32],
        valid_until: Mono,
    ) -> Result<(), EnqueueError> {
        self.ready()?;
        if !sp.is_valid() {
            return Err(EnqueueError::InvalidSetpoint);
        }
        let stop_at = valid_until.sub_ns(self.cfg.hold_margin_ms.saturating_mul(1_000_000));
        if stop_at <= now {
            return Err(EnqueueError::Expired);
        }
        self.target = Some(Target {
            sp,
            binding,
            valid_until,
            stop_at,
            next_send: now.add_ns(self.cfg.period_ns()),
        });
        self.send_position(sp);
        self.events.push_back(Event::TargetStarted {
            binding,
            fingerprint: sp.fingerprint(),
            valid_until,
        });
        Ok(())
    }

    fn send_position(&mut self, sp: Setpoint) {
        self.out.push_back(Out::Position(sp));
        self.streamed = true;
        self.stats.setpoints_sent += 1;
    }

    /// Ends the stream the way the firmware expects: the slot is emptied and, if setpoints were
    /// streamed, notify-setpoint-stop hands priority back to the high-level planner.
    fn end_stream(&mut self) {
        self.target = None;
        if self.streamed {
            self.streamed = false;
            self.out.push_back(Out::NotifyStop {
                remain_valid_ms: self.cfg.notify_stop_valid_ms,
            });
        }
    }

    /// Deny-hold: stop streaming and hold where the vehicle is (a high-level go_to its current
    /// position; a land when the position is unknown).
    ///
    /// # Errors
    /// [`EnqueueError::LinkDown`] or [`EnqueueError::Locked`]; nothing changed.
    pub fn hold(&mut self, now: Mono, reason: HoldReason) -> Result<(), EnqueueError> {
        let _ = now;
        self.linked_unlocked()?;
        self.end_stream();
        self.stats.holds += 1;
        match self.position {
            Some(p) => {
                self.out.push_back(Out::GoTo {
                    x_m: p[0],
                    y_m: p[1],
                    z_m: p[2],
                    yaw_rad: self.yaw_deg.to_radians(),
                    duration_s: self.cfg.hold_duration_s,
                });
                self.events.push_back(Event::Holding {
                    reason,
                    at_m: Some(p),
                });
            }
            None => {
                self.push_land();
                self.events.push_back(Event::Holding { reason, at_m: None });
            }
        }
        Ok(())
    }

    fn push_land(&mut self) {
        let z = self.position.map_or(1.0, |p| p[2].max(0.0));
        self.out.push_back(Out::Land {
            height_m: 0.0,
            duration_s: (z / self.cfg.land_speed_mps).max(1.0),
        });
        self.stats.lands += 1;
    }

    /// Stop streaming and land where the vehicle is.
    ///
    /// # Errors
    /// [`EnqueueError::LinkDown`] or [`EnqueueError::Locked`]; nothing changed.
    pub fn land(&mut self, now: Mono) -> Result<(), EnqueueError> {
        let _ = now;
        self.linked_unlocked()?;
        self.end_stream();
        self.push_land();
        self.events.push_back(Event::Landing);
        Ok(())
    }

    /// A high-level takeoff to `height_m` at about 0.5 m/s.
    ///
    /// # Errors
    /// Not ready ([`EnqueueError`]), [`EnqueueError::Busy`] while a setpoint streams,
    /// [`EnqueueError::InvalidSetpoint`] for a height outside (0, 3] m.
    pub fn takeoff(&mut self, now: Mono, height_m: f32) -> Result<(), EnqueueError> {
        let _ = now;
        self.ready()?;
        if self.target.is_some() {
            return Err(EnqueueError::Busy);
        }
        if !(height_m.is_finite() && height_m > 0.0 && height_m <= 3.0) {
            return Err(EnqueueError::InvalidSetpoint);
        }
        self.end_stream();
        self.out.push_back(Out::Takeoff {
            height_m,
            duration_s: (height_m / 0.5).max(1.0),
        });
        Ok(())
    }

    /// Arm or disarm through the supervisor.
    ///
    /// # Errors
    /// [`EnqueueError::LinkDown`], [`EnqueueError::Locked`] (arming).
    pub fn arm(&mut self, now: Mono, arm: bool) -> Result<(), EnqueueError> {
        let _ = now;
        if !self.link_up {
            return Err(EnqueueError::LinkDown);
        }
        if arm && self.locked() {
            return Err(EnqueueError::Locked);
        }
        if !arm {
            self.end_stream();
        }
        self.out.push_back(Out::Arm { arm });
        Ok(())
    }

    /// When [`Pacer::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Mono {
        let mut t = Mono::NEVER;
        if let Some(tg) = &self.target {
            t = t.min(tg.next_send).min(tg.stop_at);
        }
        if self.link_up {
            if let Some(h) = self.last_heard {
                t = t.min(h.add_ms(self.cfg.link_timeout_ms).add_ns(1));
            }
            if let Some(w) = self.next_watchdog {
                t = t.min(w);
            }
        }
        t
    }

    /// Time passed: the link timeout, the target's end, the next stream packet, the watchdog.
    pub fn handle_timeout(&mut self, now: Mono) {
        if self.link_up
            && self
                .last_heard
                .is_some_and(|h| now.since(h) > self.cfg.link_timeout_ms.saturating_mul(1_000_000))
        {
            self.go_down(now);
            return;
        }
        if let Some(t) = self.target {
            if now >= t.stop_at {
                self.events.push_back(Event::TargetExpired {
                    binding: t.binding,
                    fingerprint: t.sp.fingerprint(),
                });
                let _ = self.hold(now, HoldReason::TargetExpired);
            } else if now >= t.next_send {
                self.send_position(t.sp);
                let period = self.cfg.period_ns();
                let mut next = t.next_send.add_ns(period);
                if next <= now {
                    // Late: the next packet one period from now, never a burst.
                    next = now.add_ns(period);
                }
                if let Some(tg) = self.target.as_mut() {
                    tg.next_send = next;
                }
            }
        }
        if self.link_up
            && let Some(w) = self.next_watchdog
            && now >= w
        {
            self.out.push_back(Out::EstopWatchdog);
            self.stats.watchdog_refreshes += 1;
            self.next_watchdog = Some(now.add_ms(self.cfg.watchdog_refresh_ms));
        }
    }

    /// The end of the current target's certified interval.
    pub fn valid_until(&self) -> Option<Mono> {
        self.target.map(|t| t.valid_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: [u8; 32] = [7; 32];

    fn ready_pacer() -> Pacer {
        let mut p = Pacer::new(Config::default());
        p.link_opened(Mono(0));
        p.on_telemetry(
            Mono(0),
            &Telemetry::Supervisor {
                bits: sup::IS_ARMED | sup::IS_FLYING | sup::CAN_FLY,
            },
        );
        p.on_telemetry(
            Mono(0),
            &Telemetry::State {
                position_m: [0.5, 0.0, 1.0],
                velocity_mps: [0.0; 3],
            },
        );
        while p.poll_event().is_some() {}
        while p.poll_transmit().is_some() {}
        p
    }

    fn sp() -> Setpoint {
        Setpoint {
            x_m: 1.0,
            y_m: 0.0,
            z_m: 1.0,
            yaw_deg: 0.0,
        }
    }

    /// Runs the pacer's timers to `until`, feeding telemetry every 20 ms, and returns the
    /// commands with their times.
    fn run(p: &mut Pacer, from: u64, until: u64) -> Vec<(u64, Out)> {
        let mut out = Vec::new();
        let mut t = from;
        while t <= until {
            if t.is_multiple_of(20_000_000) {
                p.on_telemetry(Mono(t), &Telemetry::Ping { latency_ms: 2.0 });
            }
            if p.poll_timeout() <= Mono(t) {
                p.handle_timeout(Mono(t));
            }
            while let Some(o) = p.poll_transmit() {
                out.push((t, o));
            }
            t += 1_000_000;
        }
        out
    }

    #[test]
    fn streams_one_slot_at_the_rate_and_holds_before_the_interval_ends() {
        let mut p = ready_pacer();
        p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(1000))
            .unwrap();
        let mut outs: Vec<(u64, Out)> = Vec::new();
        while let Some(o) = p.poll_transmit() {
            outs.push((0, o));
        }
        outs.extend(run(&mut p, 1_000_000, 1_200_000_000));
        let positions: Vec<u64> = outs
            .iter()
            .filter(|(_, o)| matches!(o, Out::Position(_)))
            .map(|(t, _)| *t / 1_000_000)
            .collect();
        // 20 Hz from 0 until 900 ms (valid_until 1000 − margin 100): 0, 50, ..., 850.
        assert_eq!(positions, (0..18).map(|i| i * 50).collect::<Vec<_>>());
        // At 900 ms exactly: notify-stop, then go_to the current position, in that order.
        let after: Vec<&(u64, Out)> = outs
            .iter()
            .filter(|(t, o)| !matches!(o, Out::Position(_) | Out::EstopWatchdog) && *t > 0)
            .collect();
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(after[0].0, 900_000_000);
        assert!(matches!(after[0].1, Out::NotifyStop { .. }));
        assert_eq!(after[1].0, 900_000_000);
        assert!(matches!(after[1].1, Out::GoTo { x_m, z_m, .. } if x_m == 0.5 && z_m == 1.0));
        let evs: Vec<Event> = std::iter::from_fn(|| p.poll_event()).collect();
        assert!(evs.iter().any(|e| matches!(e, Event::TargetExpired { .. })));
        assert!(evs.iter().any(|e| matches!(
            e,
            Event::Holding {
                reason: HoldReason::TargetExpired,
                ..
            }
        )));
    }

    #[test]
    fn a_late_tick_sends_one_packet_not_a_burst() {
        let mut p = ready_pacer();
        p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(5000))
            .unwrap();
        while p.poll_transmit().is_some() {}
        p.on_telemetry(Mono::from_ms(300), &Telemetry::Ping { latency_ms: 1.0 });
        p.handle_timeout(Mono::from_ms(300));
        let n = std::iter::from_fn(|| p.poll_transmit())
            .filter(|o| matches!(o, Out::Position(_)))
            .count();
        assert_eq!(n, 1);
        // The next packet is one period later, not at once.
        p.handle_timeout(Mono::from_ms(301));
        assert!(!std::iter::from_fn(|| p.poll_transmit()).any(|o| matches!(o, Out::Position(_))));
        p.handle_timeout(Mono::from_ms(350));
        assert!(std::iter::from_fn(|| p.poll_transmit()).any(|o| matches!(o, Out::Position(_))));
    }

    #[test]
    fn the_link_timeout_drops_the_slot_for_good() {
        let mut p = ready_pacer();
        p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(5000))
            .unwrap();
        p.handle_timeout(Mono::from_ms(501));
        assert!(!p.link_up());
        assert_eq!(p.streaming(), None);
        let evs: Vec<Event> = std::iter::from_fn(|| p.poll_event()).collect();
        assert!(evs.iter().any(|e| matches!(
            e,
            Event::TargetDropped {
                reason: EnqueueError::LinkDown,
                ..
            }
        )));
        // Telemetry returns: nothing streams until a new setpoint.
        p.on_telemetry(Mono::from_ms(600), &Telemetry::Ping { latency_ms: 1.0 });
        while p.poll_transmit().is_some() {}
        p.handle_timeout(Mono::from_ms(650));
        assert!(!std::iter::from_fn(|| p.poll_transmit()).any(|o| matches!(o, Out::Position(_))));
        assert_eq!(
            p.try_enqueue(Mono::from_ms(650), sp(), B, Mono::from_ms(700)),
            Err(EnqueueError::Expired)
        );
    }

    #[test]
    fn refuses_when_not_armed_or_locked_and_changes_nothing() {
        let mut p = Pacer::new(Config::default());
        assert_eq!(
            p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(1000)),
            Err(EnqueueError::LinkDown)
        );
        p.link_opened(Mono(0));
        assert_eq!(
            p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(1000)),
            Err(EnqueueError::NotArmed)
        );
        p.on_telemetry(
            Mono(0),
            &Telemetry::Supervisor {
                bits: sup::IS_LOCKED,
            },
        );
        assert_eq!(
            p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(1000)),
            Err(EnqueueError::Locked)
        );
        assert_eq!(p.poll_transmit(), None);
        let mut bad = sp();
        bad.z_m = -1.0;
        let mut p = ready_pacer();
        assert_eq!(
            p.try_enqueue(Mono(0), bad, B, Mono::from_ms(1000)),
            Err(EnqueueError::InvalidSetpoint)
        );
        assert_eq!(p.poll_transmit(), None);
    }

    #[test]
    fn the_estop_watchdog_is_refreshed_well_inside_a_second() {
        let mut p = ready_pacer();
        let outs = run(&mut p, 0, 3_000_000_000);
        let times: Vec<u64> = outs
            .iter()
            .filter(|(_, o)| matches!(o, Out::EstopWatchdog))
            .map(|(t, _)| *t / 1_000_000)
            .collect();
        assert!(times.len() >= 12, "{times:?}");
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 260), "{times:?}");
    }

    #[test]
    fn land_ends_the_stream_first() {
        let mut p = ready_pacer();
        p.try_enqueue(Mono(0), sp(), B, Mono::from_ms(5000))
            .unwrap();
        while p.poll_transmit().is_some() {}
        p.land(Mono::from_ms(10)).unwrap();
        let outs: Vec<Out> = std::iter::from_fn(|| p.poll_transmit()).collect();
        assert!(matches!(
            outs.as_slice(),
            [Out::NotifyStop { .. }, Out::Land { .. }]
        ));
        assert_eq!(p.streaming(), None);
    }
}
