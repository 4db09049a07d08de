//! The gateway's decisions as short lines on the pilot's ground station.
//!
//! A withheld action, a deny-hold, a hold at the end of a certified interval, a pilot override,
//! an operator hold or release, a refresh request and a receipt log that stopped taking records
//! each become one MAVLink `STATUSTEXT` of at most 50 bytes (MAVLink's `char[50]`), sent on the
//! vehicle link from the gateway's own component. PX4 forwards it to the ground station
//! (`MAV_x_FORWARD` on the companion's and the ground station's instances), so QGroundControl
//! shows "HALO: e5 withheld: epoch changed" beside PX4's own messages.
//!
//! Lines are composed to fit, never cut mid-word by the link: a long component id is shortened
//! with a `~` and a long source list ends in `+N`. [`PilotTexts`] rate-limits what goes out (one
//! line per [`INTERVAL`]), keeps at most [`QUEUE`] lines waiting, drops a repeat of a line that
//! is already waiting, and when it had to drop lines says how many in one line of its own. The
//! receipts and the event stream keep every decision; these lines are for a glance.

use std::collections::VecDeque;

use halo_core::{Nanos, ReasonCode};

/// The longest line, bytes.
pub const MAX_LEN: usize = 50;

/// Lines waiting at most.
pub const QUEUE: usize = 12;

/// At most one line per this long.
pub const INTERVAL: Nanos = Nanos(250_000_000);

const PREFIX: &str = "HALO: ";

/// MAVLink `MAV_SEVERITY` values the lines use.
pub mod severity {
    /// A fault that stops the gateway's work.
    pub const CRITICAL: u8 = 2;
    /// The vehicle stopped an action it was flying.
    pub const ERROR: u8 = 3;
    /// An action did not fly, or a target ran out.
    pub const WARNING: u8 = 4;
    /// Who flies changed.
    pub const NOTICE: u8 = 5;
    /// Work for the agent or a provider.
    pub const INFO: u8 = 6;
}

/// What is told.
#[derive(Clone, Copy, Debug)]
pub enum Told<'a> {
    /// An action did not reach the vehicle (admission or the final gate).
    Withheld {
        /// Its component id.
        component: &'a str,
        /// Why.
        reason: Option<ReasonCode>,
    },
    /// A refresh was requested before the action may come back.
    Refresh {
        /// Its component id.
        component: &'a str,
        /// The sources to refresh.
        sources: &'a [halo_core::Id],
    },
    /// The action being flown lost its support: the vehicle holds.
    DenyHold {
        /// Its component id.
        component: &'a str,
        /// Why.
        reason: Option<ReasonCode>,
    },
    /// The target's certified interval ended: the vehicle holds.
    ExpiryHold,
    /// A mode change the gateway did not command: the pilot has the vehicle.
    Override {
        /// PX4's mode name now.
        to: &'a str,
    },
    /// The operator held (true) or released (false).
    OperatorHold(bool),
    /// An action passed the final gate (kept among the last decisions, not sent to the
    /// ground station: the vehicle's own telemetry shows it flying).
    Dispatched {
        /// Its component id.
        component: &'a str,
    },
    /// The receipt log failed: nothing dispatches.
    ReceiptsFailed {
        /// Whether the vehicle lands (`full_action = "land"`) rather than holds.
        landing: bool,
    },
}

impl Told<'_> {
    /// Whether the line goes to the ground station (every line is kept among the last
    /// decisions `GET /v1/status` shows).
    pub fn for_pilot(&self) -> bool {
        !matches!(self, Told::Dispatched { .. })
    }
}

/// One line for the ground station.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PilotLine {
    /// `MAV_SEVERITY`.
    pub severity: u8,
    /// At most [`MAX_LEN`] bytes, ASCII.
    pub text: String,
}

/// A reason in a few words.
pub fn reason_words(code: ReasonCode) -> String {
    let fixed = match code {
        ReasonCode::SOURCE_MISSING => "no data yet",
        ReasonCode::STALE_SOURCE => "data stale",
        ReasonCode::BOUNDS_PROVENANCE_CHANGED => "bounds re-issued",
        ReasonCode::PROVENANCE_CHANGED => "source changed",
        ReasonCode::CLAIM_MISSING => "no support claim",
        ReasonCode::CERTIFICATE_MISSING
        | ReasonCode::CERTIFICATE_UNKNOWN
        | ReasonCode::CERTIFICATE_NOT_BOUND => "no valid certificate",
        ReasonCode::INTERVAL_NOT_COVERED => "outside its certificate",
        ReasonCode::OPERATING_LIMIT => "over a limit",
        ReasonCode::ENERGY_LOW => "battery low",
        ReasonCode::LINK_UNHEALTHY => "link unhealthy",
        ReasonCode::AUTHORITY_NOT_CURRENT => "authority lapsed",
        ReasonCode::AIRSPACE_NOT_AUTHORIZED => "airspace not authorized",
        ReasonCode::PREFLIGHT_MISSING => "no preflight check",
        ReasonCode::CONTROL_NOT_GRANTED => "gateway not in control",
        ReasonCode::APPROVAL_MISSING => "needs approval",
        ReasonCode::PROTECTION_DENIES => "contract denies",
        ReasonCode::DEPS_NOT_READY => "waiting on another step",
        ReasonCode::RESPONSE_EXPIRED => "response expired",
        ReasonCode::ADAPTER_REJECTED => "vehicle refused it",
        _ => "",
    };
    if fixed.is_empty() {
        code.name().to_ascii_lowercase().replace('_', " ")
    } else {
        fixed.to_string()
    }
}

/// `HALO: ` + `id` + `rest`, with `id` shortened (ending in `~`) when the whole would not fit.
fn with_id(id: &str, rest: &str) -> String {
    let room = MAX_LEN.saturating_sub(PREFIX.len() + rest.len());
    let id: String = id.chars().filter(char::is_ascii).collect();
    let id = if id.len() <= room {
        id
    } else {
        let keep = room.saturating_sub(1).min(id.len());
        format!("{}~", id.get(..keep).unwrap_or(""))
    };
    let mut line = format!("{PREFIX}{id}{rest}");
    // A reason longer than the room left is the only way past the limit: cut at a word.
    while line.len() > MAX_LEN {
        match line.rfind(' ') {
            Some(i) if i > PREFIX.len() => line.truncate(i),
            _ => line.truncate(MAX_LEN),
        }
    }
    line
}

/// The line for `t`.
pub fn line(t: &Told<'_>) -> PilotLine {
    let why = |r: &Option<ReasonCode>| r.map(|c| format!(": {}", reason_words(c)));
    let (severity, text) = match t {
        Told::Withheld { component, reason } => (
            severity::WARNING,
            with_id(
                component,
                &format!(" withheld{}", why(reason).unwrap_or_default()),
            ),
        ),
        Told::DenyHold { component, reason } => (
            severity::ERROR,
            with_id(
                component,
                &format!(" lost support, hold{}", why(reason).unwrap_or_default()),
            ),
        ),
        Told::Refresh { component, sources } => {
            // As many source names as fit, then how many more.
            let mut names = String::new();
            let lead = " needs fresh ";
            let short_id = component.len().min(12);
            let room = MAX_LEN.saturating_sub(PREFIX.len() + short_id + lead.len());
            let mut shown = 0;
            for (i, s) in sources.iter().enumerate() {
                let more = sources.len() - i - 1;
                let sep = if names.is_empty() { "" } else { "," };
                let tail = if more > 0 {
                    format!(" +{more}")
                } else {
                    String::new()
                };
                if names.len() + sep.len() + s.as_str().len() + tail.len() > room {
                    break;
                }
                names.push_str(sep);
                names.push_str(s.as_str());
                shown += 1;
            }
            if shown < sources.len() {
                names.push_str(&format!(" +{}", sources.len() - shown));
            }
            // Nothing to refresh (a certificate, a corrected scope): the agent replans.
            let said = if sources.is_empty() {
                " needs a fresh candidate".to_string()
            } else {
                format!("{lead}{}", names.trim_start())
            };
            (severity::INFO, with_id(component, &said))
        }
        Told::Dispatched { component } => (
            severity::INFO,
            with_id(component, " dispatched to the vehicle"),
        ),
        Told::ExpiryHold => (
            severity::WARNING,
            format!("{PREFIX}target time ended, holding"),
        ),
        Told::Override { to } => {
            let to: String = to.chars().filter(char::is_ascii).take(20).collect();
            (
                severity::NOTICE,
                format!("{PREFIX}pilot took over ({to}), gateway off"),
            )
        }
        Told::OperatorHold(true) => (
            severity::NOTICE,
            format!("{PREFIX}operator hold, no agent actions"),
        ),
        Told::OperatorHold(false) => (
            severity::NOTICE,
            format!("{PREFIX}operator released the hold"),
        ),
        Told::ReceiptsFailed { landing } => (
            severity::CRITICAL,
            format!(
                "{PREFIX}receipts failed, {}",
                if *landing {
                    "landing"
                } else {
                    "holding, no actions"
                }
            ),
        ),
    };
    PilotLine { severity, text }
}

/// The lines waiting for the ground station, rate-limited.
#[derive(Debug, Default)]
pub struct PilotTexts {
    queue: VecDeque<PilotLine>,
    next_at: Nanos,
    /// Lines dropped since the last one that said so.
    dropped: u32,
    /// Lines dropped in all.
    dropped_total: u64,
    /// Lines handed to the link in all.
    sent_total: u64,
}

impl PilotTexts {
    /// An empty queue.
    pub fn new() -> PilotTexts {
        PilotTexts::default()
    }

    /// Queues `l` unless the same line already waits. A full queue drops its newest line of
    /// the lowest importance, or `l` itself when nothing waiting is less important.
    pub fn push(&mut self, l: PilotLine) {
        if self.queue.iter().any(|q| q == &l) {
            return;
        }
        if self.queue.len() >= QUEUE {
            // The least important waiting line (the highest severity number), newest first.
            let victim = self
                .queue
                .iter()
                .enumerate()
                .rev()
                .max_by_key(|(_, q)| q.severity)
                .map(|(i, q)| (i, q.severity));
            match victim {
                Some((i, s)) if s > l.severity => {
                    self.queue.remove(i);
                }
                _ => {
                    self.drop_one();
                    return;
                }
            }
            self.drop_one();
        }
        self.queue.push_back(l);
    }

    fn drop_one(&mut self) {
        self.dropped = self.dropped.saturating_add(1);
        self.dropped_total = self.dropped_total.saturating_add(1);
    }

    /// The next line to send at `now`, if one is due; a line saying how many were dropped
    /// once the queue has drained.
    pub fn poll(&mut self, now: Nanos) -> Option<PilotLine> {
        if now < self.next_at {
            return None;
        }
        let l = match self.queue.pop_front() {
            Some(l) => l,
            None if self.dropped > 0 => {
                let n = std::mem::take(&mut self.dropped);
                PilotLine {
                    severity: severity::NOTICE,
                    text: format!(
                        "{PREFIX}{n} more line{} not shown, see console",
                        if n == 1 { "" } else { "s" }
                    ),
                }
            }
            None => return None,
        };
        self.next_at = Nanos(now.0.saturating_add(INTERVAL.0));
        self.sent_total = self.sent_total.saturating_add(1);
        Some(l)
    }

    /// Lines dropped in all (a full queue).
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }

    /// Lines handed out in all.
    pub fn sent_total(&self) -> u64 {
        self.sent_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> halo_core::Id {
        halo_core::Id::new(s).unwrap_or_else(|_| unreachable!("a valid id"))
    }

    #[test]
    fn lines_read_as_words_and_fit() {
        let l = line(&Told::Withheld {
            component: "e5",
            reason: Some(ReasonCode::EPOCH_CHANGED),
        });
        assert_eq!(l.text, "HALO: e5 withheld: epoch changed");
        assert_eq!(l.severity, severity::WARNING);
        let l = line(&Told::DenyHold {
            component: "e5",
            reason: Some(ReasonCode::STALE_SOURCE),
        });
        assert_eq!(l.text, "HALO: e5 lost support, hold: data stale");
        let l = line(&Told::Override { to: "AUTO.LOITER" });
        assert_eq!(l.text, "HALO: pilot took over (AUTO.LOITER), gateway off");
        assert!(l.text.len() <= MAX_LEN);
        let srcs = [id("map"), id("traffic")];
        let l = line(&Told::Refresh {
            component: "e5",
            sources: &srcs,
        });
        assert_eq!(l.text, "HALO: e5 needs fresh map,traffic");
    }

    #[test]
    fn a_refresh_with_no_source_asks_for_a_fresh_candidate() {
        let l = line(&Told::Refresh {
            component: "e3",
            sources: &[],
        });
        assert_eq!(l.text, "HALO: e3 needs a fresh candidate");
    }

    #[test]
    fn long_ids_and_source_lists_are_shortened_visibly() {
        let long = "route-to-the-north-east-corner-of-the-survey-area-7";
        let l = line(&Told::Withheld {
            component: long,
            reason: Some(ReasonCode::AIRSPACE_NOT_AUTHORIZED),
        });
        assert!(l.text.len() <= MAX_LEN, "{} bytes", l.text.len());
        assert!(l.text.starts_with("HALO: route-to"), "{}", l.text);
        assert!(
            l.text.contains("~ withheld: airspace not authorized"),
            "{}",
            l.text
        );
        let srcs: Vec<_> = (0..9).map(|i| id(&format!("source-{i}"))).collect();
        let l = line(&Told::Refresh {
            component: "e5",
            sources: &srcs,
        });
        assert_eq!(l.text, "HALO: e5 needs fresh source-0,source-1,source-2 +6");
        assert_eq!(l.text.len(), MAX_LEN);
        // Every code's words fit after the shortest id.
        for c in ReasonCode::ALL {
            let l = line(&Told::DenyHold {
                component: "e",
                reason: Some(*c),
            });
            assert!(l.text.len() <= MAX_LEN, "{}: {}", c.name(), l.text);
            assert!(l.text.is_ascii());
        }
    }

    #[test]
    fn the_queue_is_rate_limited_deduplicated_and_bounded() {
        let mut q = PilotTexts::new();
        let w = |c: &str| {
            line(&Told::Withheld {
                component: c,
                reason: Some(ReasonCode::STALE_SOURCE),
            })
        };
        q.push(w("a"));
        q.push(w("a"));
        q.push(w("b"));
        assert_eq!(q.poll(Nanos(0)).map(|l| l.text), Some(w("a").text));
        // Not due again before the interval.
        assert_eq!(q.poll(Nanos(INTERVAL.0 - 1)), None);
        assert_eq!(q.poll(INTERVAL).map(|l| l.text), Some(w("b").text));
        assert_eq!(q.poll(Nanos(10 * INTERVAL.0)), None);
        // Overfill with warnings, then one critical line: it displaces the newest warning.
        for i in 0..QUEUE + 3 {
            q.push(w(&format!("c{i}")));
        }
        q.push(line(&Told::ReceiptsFailed { landing: false }));
        assert_eq!(q.dropped_total(), 4);
        let mut t = 100 * INTERVAL.0;
        let mut out = Vec::new();
        while let Some(l) = q.poll(Nanos(t)) {
            out.push(l);
            t += INTERVAL.0;
        }
        assert_eq!(out.len(), QUEUE + 1, "{out:?}");
        assert!(out.iter().any(|l| l.severity == severity::CRITICAL));
        assert_eq!(
            out.last().map(|l| l.text.as_str()),
            Some("HALO: 4 more lines not shown, see console")
        );
    }
}
