//! TIMESYNC: estimating the autopilot's clock offset *and rate* so telemetry carries its
//! generation time on the companion's clock.
//!
//! The companion sends `TIMESYNC{tc1: 0, ts1: t_send}` (its own clock, ns). The autopilot
//! answers `TIMESYNC{tc1: t_remote, ts1: t_send}`. On receipt at `t_recv`, with round trip
//! `rtt = t_recv - t_send`, one sample of the offset is `t_remote - (t_send + t_recv) / 2`: the
//! remote clock read half-way through the round trip, uncertain by up to `rtt / 2`. Samples with
//! a round trip above the limit are discarded.
//!
//! The autopilot's clock need not run at the companion's rate (PX4 SITL under load ran about 1 %
//! slow). So the estimator keeps a window of recent samples and fits the offset as a straight
//! line of companion time, least squares: `offset(t) = c + d·(t − t₀)`, `d` the skew. A remote
//! timestamp `r` maps to the companion time `t` with `r − offset(t) = t`. Its uncertainty is the
//! largest residual of the fit plus half the shortest round trip in the window. A sample far
//! from the fit's prediction (the autopilot rebooted) resets the window.
//!
//! Until a sample is accepted the caller falls back to arrival time and says so; while fewer
//! than [`SETTLED_SAMPLES`] samples agree within [`SETTLED_NS`], [`TimeSync::settled`] is false
//! and the caller keeps syncing at its fast rate.

use std::collections::VecDeque;

use crate::time::Mono;

/// Round trips longer than this are discarded, nanoseconds.
pub const MAX_RTT_NS: u64 = 50_000_000;
/// A sample further than this from the fit's prediction resets the window (the autopilot
/// rebooted), nanoseconds.
pub const RESET_JUMP_NS: i64 = 100_000_000;
/// Samples kept for the fit.
pub const WINDOW: usize = 16;
/// Samples needed, and the uncertainty they must be within, before the mapping is settled.
pub const SETTLED_SAMPLES: usize = 5;
/// See [`SETTLED_SAMPLES`], nanoseconds.
pub const SETTLED_NS: u64 = 5_000_000;
/// A skew beyond this (5 %) is not a clock; the fit falls back to a constant offset.
const MAX_SKEW: f64 = 0.05;

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Companion time of the round trip's midpoint, ns.
    local: f64,
    /// Offset sample (remote minus local), ns.
    offset: f64,
    rtt: u64,
}

/// The estimator.
#[derive(Clone, Debug, Default)]
pub struct TimeSync {
    window: VecDeque<Sample>,
    /// The fit: offset at `t0`, skew, and `t0` (companion ns).
    fit: Option<(f64, f64, f64)>,
    uncertainty_ns: u64,
    last_rtt_ns: Option<u64>,
    rejected: u32,
    resets: u32,
}

impl TimeSync {
    /// A fresh estimator.
    pub fn new() -> TimeSync {
        TimeSync::default()
    }

    /// Feeds one reply. Returns whether the sample was used.
    #[allow(
        clippy::cast_precision_loss,
        reason = "nanosecond clocks well inside f64's exact range for this use"
    )]
    pub fn handle_reply(&mut self, now: Mono, tc1_ns: i64, ts1_ns: i64) -> bool {
        let Ok(sent) = u64::try_from(ts1_ns) else {
            self.rejected += 1;
            return false;
        };
        if sent > now.0 || tc1_ns <= 0 {
            self.rejected += 1;
            return false;
        }
        let rtt = now.0 - sent;
        if rtt > MAX_RTT_NS {
            self.rejected += 1;
            return false;
        }
        let local = (sent as f64 + now.0 as f64) / 2.0;
        let sample = Sample {
            local,
            offset: tc1_ns as f64 - local,
            rtt,
        };
        if let Some(pred) = self.offset_at(local)
            && (sample.offset - pred).abs() >= RESET_JUMP_NS as f64
        {
            self.window.clear();
            self.resets += 1;
        }
        self.last_rtt_ns = Some(rtt);
        if self.window.len() == WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(sample);
        self.refit();
        true
    }

    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "window sizes and rounded non-negative nanoseconds"
    )]
    fn refit(&mut self) {
        let n = self.window.len();
        if n == 0 {
            self.fit = None;
            return;
        }
        let t0 = self.window.back().map_or(0.0, |s| s.local);
        let mean_t = self.window.iter().map(|s| s.local - t0).sum::<f64>() / n as f64;
        let mean_o = self.window.iter().map(|s| s.offset).sum::<f64>() / n as f64;
        let sxx: f64 = self
            .window
            .iter()
            .map(|s| (s.local - t0 - mean_t).powi(2))
            .sum();
        let sxy: f64 = self
            .window
            .iter()
            .map(|s| (s.local - t0 - mean_t) * (s.offset - mean_o))
            .sum();
        // A rate needs samples spread over time: at least a second between the first and last.
        let skew = if n >= 3 && sxx > 0.0 && {
            let span = self.window.back().map_or(0.0, |s| s.local)
                - self.window.front().map_or(0.0, |s| s.local);
            span >= 1e9
        } {
            let d = sxy / sxx;
            if d.abs() <= MAX_SKEW { d } else { 0.0 }
        } else {
            0.0
        };
        let c = mean_o - skew * mean_t;
        self.fit = Some((c, skew, t0));
        let worst = self
            .window
            .iter()
            .map(|s| (s.offset - (c + skew * (s.local - t0))).abs())
            .fold(0.0, f64::max);
        let best_rtt = self.window.iter().map(|s| s.rtt).min().unwrap_or(0);
        self.uncertainty_ns = worst.ceil() as u64 + best_rtt / 2;
    }

    fn offset_at(&self, local: f64) -> Option<f64> {
        self.fit.map(|(c, d, t0)| c + d * (local - t0))
    }

    /// True once at least one reply was accepted.
    pub fn is_synced(&self) -> bool {
        self.fit.is_some()
    }

    /// True once the window holds enough samples that agree: sync at the slow rate.
    pub fn settled(&self) -> bool {
        self.window.len() >= SETTLED_SAMPLES && self.uncertainty_ns <= SETTLED_NS
    }

    /// The current offset estimate (remote minus local) at the newest sample, nanoseconds.
    #[allow(clippy::cast_possible_truncation, reason = "rounded nanoseconds")]
    pub fn offset_ns(&self) -> Option<i64> {
        self.fit.map(|(c, _, _)| c.round() as i64)
    }

    /// The fitted skew: how much faster the autopilot's clock runs, parts per million
    /// (negative: slower).
    pub fn skew_ppm(&self) -> Option<f64> {
        self.fit.map(|(_, d, _)| d * 1e6)
    }

    /// How far a mapped time may be off, nanoseconds: the fit's largest residual plus half the
    /// shortest round trip in the window.
    pub fn uncertainty_ns(&self) -> u64 {
        self.uncertainty_ns
    }

    /// The last accepted round trip.
    pub fn last_rtt_ns(&self) -> Option<u64> {
        self.last_rtt_ns
    }

    /// Replies discarded so far.
    pub fn rejected(&self) -> u32 {
        self.rejected
    }

    /// Times the window was reset by a jump (an autopilot reboot).
    pub fn resets(&self) -> u32 {
        self.resets
    }

    /// Maps a remote timestamp (nanoseconds on the autopilot clock) to the companion clock.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "nanosecond clocks, rounded and checked non-negative"
    )]
    pub fn to_local(&self, remote_ns: i64) -> Option<Mono> {
        let (c, d, t0) = self.fit?;
        // r − (c + d·(t − t0)) = t  ⇒  t = (r − c + d·t0) / (1 + d)
        let t = (remote_ns as f64 - c + d * t0) / (1.0 + d);
        (t.is_finite() && t >= 0.0).then(|| Mono(t.round() as u64))
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    reason = "test arithmetic on nanosecond clocks"
)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_delay_recovers_the_offset_exactly() {
        let mut ts = TimeSync::new();
        // Remote clock = local + 5 s; one-way delay 3 ms each way.
        let off: i64 = 5_000_000_000;
        for k in 0..20u64 {
            let sent = 1_000_000_000 + k * 100_000_000;
            let remote_at_reply = i64::try_from(sent + 3_000_000).unwrap() + off;
            assert!(ts.handle_reply(
                Mono(sent + 6_000_000),
                remote_at_reply,
                i64::try_from(sent).unwrap()
            ));
        }
        assert_eq!(ts.offset_ns(), Some(off));
        assert_eq!(ts.to_local(off + 2_000_000_000), Some(Mono(2_000_000_000)));
        assert!(ts.skew_ppm().unwrap().abs() < 1e-3);
        assert_eq!(ts.uncertainty_ns(), 3_000_000, "half the round trip");
        assert!(ts.settled());
    }

    /// The autopilot's clock runs 1 % slow (as PX4 SITL did under load), with an offset and
    /// jittered, asymmetric delays; a re-sync every 5 s. The fitted mapping stays within the
    /// uncertainty it reports (a few ms), where a constant offset from the last sample drifts
    /// by the skew times the time since that sample (up to 50 ms here).
    #[test]
    fn a_drifting_clock_is_mapped_by_its_rate() {
        let skew = -0.01;
        let off = 3_000_000_000.0;
        let remote_at = |t: f64| off + t * (1.0 + skew);
        let mut ts = TimeSync::new();
        let mut rng = 7u64;
        let mut jitter = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (rng >> 33) % 2_000_000
        };
        let mut worst_fit = 0.0f64;
        let mut worst_const = 0.0f64;
        for k in 0..24u64 {
            let sent = 10_000_000_000 + k * 5_000_000_000;
            let up = 500_000 + jitter();
            let down = 500_000 + jitter();
            let remote = remote_at((sent + up) as f64) as i64;
            assert!(ts.handle_reply(Mono(sent + up + down), remote, i64::try_from(sent).unwrap()));
            let last_offset = ts.offset_ns().unwrap();
            if k < 4 {
                continue;
            }
            // Telemetry generated between this sync and the next.
            for ms in (0..5_000u64).step_by(250) {
                let t_true = sent + up + down + ms * 1_000_000;
                let r = remote_at(t_true as f64) as i64;
                let fit_err = (ts.to_local(r).unwrap().0 as f64 - t_true as f64).abs();
                let const_err = ((r - last_offset) as f64 - t_true as f64).abs();
                worst_fit = worst_fit.max(fit_err);
                worst_const = worst_const.max(const_err);
            }
        }
        let unc = ts.uncertainty_ns() as f64;
        assert!(
            (ts.skew_ppm().unwrap() - skew * 1e6).abs() < 200.0,
            "{:?}",
            ts.skew_ppm()
        );
        assert!(
            worst_fit <= unc + 1.0,
            "fit error {worst_fit} ns over its uncertainty {unc}"
        );
        assert!(worst_fit < 3_000_000.0, "fit error {worst_fit} ns");
        assert!(
            worst_const > 40_000_000.0,
            "a constant offset errs by {worst_const} ns"
        );
        assert!(ts.settled());
    }

    #[test]
    fn a_reboot_resets_the_window() {
        let mut ts = TimeSync::new();
        for k in 0..6u64 {
            let sent = 1_000_000_000 + k * 1_000_000_000;
            assert!(ts.handle_reply(
                Mono(sent + 2_000_000),
                i64::try_from(sent).unwrap() + 9_000_000_000,
                i64::try_from(sent).unwrap()
            ));
        }
        assert!(ts.settled());
        // The autopilot rebooted: its clock starts again near zero.
        assert!(ts.handle_reply(Mono(8_002_000_000), 1_000_000, 8_000_000_000));
        assert_eq!(ts.resets(), 1);
        assert!(!ts.settled());
        assert_eq!(ts.to_local(1_000_000), Some(Mono(8_001_000_000)));
    }

    #[test]
    fn long_round_trips_and_future_stamps_are_discarded() {
        let mut ts = TimeSync::new();
        assert!(!ts.handle_reply(
            Mono(1_000_000_000),
            5,
            900_000_000 - i64::try_from(MAX_RTT_NS).unwrap()
        ));
        assert!(!ts.handle_reply(Mono(1_000), 5, 2_000));
        assert!(!ts.is_synced());
        assert_eq!(ts.rejected(), 2);
    }
}
