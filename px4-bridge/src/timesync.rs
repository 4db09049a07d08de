//! TIMESYNC: estimating the autopilot's clock offset so telemetry carries its *generation*
//! time on the companion's clock.
//!
//! The companion sends `TIMESYNC{tc1: 0, ts1: t_send}` (its own clock, ns). The autopilot
//! answers `TIMESYNC{tc1: t_remote, ts1: t_send}`. On receipt at `t_recv`, with round trip
//! `rtt = t_recv - t_send`, the offset estimate is `t_remote - (t_send + t_recv) / 2`: the remote
//! clock read half-way through the round trip. Samples with a round trip above the limit are
//! discarded; the offset is smoothed and jumps (a reboot) reset it.
//!
//! A remote timestamp `t_r` (its `time_boot_ms` or `time_usec`) maps to the companion clock as
//! `t_r - offset`. Until a sample is accepted, the caller falls back to arrival time and says so.

use crate::time::Mono;

/// Round trips longer than this are discarded, nanoseconds.
pub const MAX_RTT_NS: u64 = 50_000_000;
/// An offset change larger than this resets the filter (the autopilot rebooted), nanoseconds.
pub const RESET_JUMP_NS: i64 = 100_000_000;

/// The offset estimator.
#[derive(Clone, Debug, Default)]
pub struct TimeSync {
    offset_ns: Option<f64>,
    samples: u32,
    last_rtt_ns: Option<u64>,
    rejected: u32,
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
        let mid = (sent as f64 + now.0 as f64) / 2.0;
        let sample = tc1_ns as f64 - mid;
        self.last_rtt_ns = Some(rtt);
        self.offset_ns = Some(match self.offset_ns {
            Some(prev) if (sample - prev).abs() < RESET_JUMP_NS as f64 => {
                // Quick convergence at first, then a slow filter.
                let alpha = if self.samples < 8 { 0.5 } else { 0.1 };
                prev + alpha * (sample - prev)
            }
            _ => {
                self.samples = 0;
                sample
            }
        });
        self.samples = self.samples.saturating_add(1);
        true
    }

    /// True once at least one reply was accepted.
    pub fn is_synced(&self) -> bool {
        self.offset_ns.is_some()
    }

    /// The current offset estimate (remote minus local), nanoseconds.
    #[allow(clippy::cast_possible_truncation, reason = "rounded nanoseconds")]
    pub fn offset_ns(&self) -> Option<i64> {
        self.offset_ns.map(|o| o.round() as i64)
    }

    /// The last accepted round trip.
    pub fn last_rtt_ns(&self) -> Option<u64> {
        self.last_rtt_ns
    }

    /// Replies discarded so far.
    pub fn rejected(&self) -> u32 {
        self.rejected
    }

    /// Maps a remote timestamp (nanoseconds on the autopilot clock) to the companion clock.
    pub fn to_local(&self, remote_ns: i64) -> Option<Mono> {
        let off = self.offset_ns()?;
        let local = remote_ns.checked_sub(off)?;
        u64::try_from(local).ok().map(Mono)
    }
}

#[cfg(test)]
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
