//! The optional real-time setting: the gateway's threads under `SCHED_FIFO`.
//!
//! Under Linux's default scheduler a thread that wakes (a bundle arrived, a setpoint is due)
//! waits for a CPU-bound neighbour's time slice to end: up to one scheduler tick, 4 ms on a
//! kernel built with `HZ=250`. Under `SCHED_FIFO` it preempts every ordinary thread at once.
//! The setting is applied to the thread that starts the service, before the runtime exists:
//! every thread started afterwards (the runtime's workers and blocking threads, the vehicle
//! bridge's thread, the receipt writer) inherits it, which is what a gateway wants — each of
//! them is on the path from a bundle to its setpoint.
//!
//! It needs the right to raise a priority: `CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` at least the
//! priority asked (`LimitRTPRIO=` in the systemd unit, `ulimit -r` in a shell). Without it the
//! setting is refused and the gateway runs under the default scheduler, saying so; nothing
//! else changes. The kernel's real-time throttling (95 % of each second by default) still
//! keeps a runaway thread from freezing the companion.

use serde::Deserialize;
use thread_priority::{
    RealtimeThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
};

/// `SCHED_FIFO`'s priorities on Linux.
pub const PRIORITIES: std::ops::RangeInclusive<u8> = 1..=99;

/// `[realtime]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RealtimeConfig {
    /// Run the gateway's threads under `SCHED_FIFO` at this priority (1..99). None (the
    /// default): the default scheduler.
    pub priority: Option<u8>,
}

/// Why the real-time setting was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    priority: u8,
    errno: Option<i32>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.priority;
        let errno = self.errno.map(std::io::Error::from_raw_os_error);
        match errno {
            Some(e) if e.kind() == std::io::ErrorKind::PermissionDenied => write!(
                f,
                "real-time scheduling refused: SCHED_FIFO at priority {p} needs CAP_SYS_NICE or a real-time priority limit of at least {p} (systemd: LimitRTPRIO={p}; a shell: ulimit -r {p}); running under the default scheduler"
            ),
            Some(e) => write!(
                f,
                "real-time scheduling refused: the kernel did not set SCHED_FIFO at priority {p} ({e}); running under the default scheduler"
            ),
            None => write!(
                f,
                "real-time scheduling refused: priority {p} is outside 1..99; running under the default scheduler"
            ),
        }
    }
}

impl std::error::Error for Refused {}

/// Applies `cfg` to the calling thread (threads it starts afterwards inherit it). Returns the
/// priority applied, None when the setting is off.
///
/// # Errors
/// [`Refused`] when the process may not raise its priority (or the priority is out of range);
/// the thread's scheduling is then as it was.
pub fn apply(cfg: &RealtimeConfig) -> Result<Option<u8>, Refused> {
    let Some(priority) = cfg.priority else {
        return Ok(None);
    };
    let refused = |errno| Refused { priority, errno };
    if !PRIORITIES.contains(&priority) {
        return Err(refused(None));
    }
    let value = ThreadPriorityValue::try_from(priority).map_err(|_| refused(None))?;
    thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Crossplatform(value),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    )
    .map_err(|e| match e {
        thread_priority::Error::OS(errno) => refused(Some(errno)),
        _ => refused(None),
    })?;
    Ok(Some(priority))
}

/// The calling thread's scheduling policy and priority in words (`SCHED_FIFO priority 50`,
/// `the default scheduler`), for logs and `run --check`.
pub fn current() -> String {
    match thread_priority::thread_schedule_policy_param(thread_priority::thread_native_id()) {
        Ok((ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo), p)) => {
            format!("SCHED_FIFO priority {}", p.sched_priority)
        }
        Ok((ThreadSchedulePolicy::Realtime(_), p)) => {
            format!("a real-time policy at priority {}", p.sched_priority)
        }
        Ok(_) => "the default scheduler".to_string(),
        Err(_) => "unknown (the kernel did not say)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own, so that a priority it sets leaves the test harness's
    /// threads as they were.
    fn on_own_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn off_by_default_and_changes_nothing() {
        let (applied, before, after) = on_own_thread(|| {
            let before = current();
            (apply(&RealtimeConfig::default()), before, current())
        });
        assert_eq!(applied, Ok(None));
        assert_eq!(before, after);
    }

    #[test]
    fn out_of_range_priorities_are_refused_with_their_range() {
        for p in [0u8, 100, 255] {
            let e = apply(&RealtimeConfig { priority: Some(p) }).unwrap_err();
            assert!(e.to_string().contains("outside 1..99"), "{e}");
        }
    }

    /// The refusal as a process without the right meets it: this test binary run again under
    /// `setpriv` with `CAP_SYS_NICE` dropped (and `RLIMIT_RTPRIO` 0, as `prlimit` sets it), the
    /// probe below asserting the refusal's words and an unchanged thread; then again with
    /// `RLIMIT_RTPRIO` 10 and no capability, what the systemd unit's `LimitRTPRIO=` grants,
    /// the probe asserting SCHED_FIFO (where the limit can be raised: a container without
    /// `CAP_SYS_RESOURCE` cannot, and the test says so). Needs root to drop a capability it
    /// has; says so and checks nothing more where it is not root.
    #[test]
    fn without_the_capability_refused_and_with_an_rtprio_limit_applied() {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false);
        if !root {
            eprintln!("realtime: not root, the capability cannot be dropped here: not checked");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        // Raising the limit needs CAP_SYS_RESOURCE, which some containers withhold.
        let can_raise = std::process::Command::new("prlimit")
            .args(["--rtprio=10", "--", "true"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !can_raise {
            eprintln!(
                "realtime: RLIMIT_RTPRIO cannot be raised here (no CAP_SYS_RESOURCE): only the refusal is checked"
            );
        }
        let legs: &[(&str, &str)] = if can_raise {
            &[("0", "refused"), ("10", "applied")]
        } else {
            &[("0", "refused")]
        };
        for &(limit, expect) in legs {
            let out = std::process::Command::new("prlimit")
                .args([&format!("--rtprio={limit}"), "--"])
                .args([
                    "setpriv",
                    "--inh-caps=-sys_nice",
                    "--bounding-set=-sys_nice",
                    "--",
                ])
                .arg(&exe)
                .args([
                    "--exact",
                    "service::infra::realtime::tests::probe",
                    "--ignored",
                    "--nocapture",
                ])
                .env("HALO_REALTIME_PROBE", expect)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "rtprio {limit}: {text}");
            assert!(text.contains("1 passed"), "rtprio {limit}: {text}");
        }
    }

    /// Run by the test above in a process without `CAP_SYS_NICE`.
    #[test]
    #[ignore = "run by without_the_capability_refused_and_with_an_rtprio_limit_applied"]
    fn probe() {
        let Ok(expect) = std::env::var("HALO_REALTIME_PROBE") else {
            eprintln!("realtime probe: run only by the test that names it");
            return;
        };
        let before = current();
        let applied = apply(&RealtimeConfig { priority: Some(10) });
        match expect.as_str() {
            "refused" => {
                let e = applied.unwrap_err().to_string();
                assert!(
                    e.contains("needs CAP_SYS_NICE") && e.contains("LimitRTPRIO=10"),
                    "{e}"
                );
                assert_eq!(current(), before);
            }
            _ => {
                assert_eq!(applied, Ok(Some(10)));
                assert_eq!(current(), "SCHED_FIFO priority 10");
            }
        }
    }

    /// Where the process may raise its priority (root, CAP_SYS_NICE, RLIMIT_RTPRIO) the
    /// thread runs SCHED_FIFO afterwards and a thread it starts inherits it; where it may not,
    /// the refusal says what to grant and the thread is as it was. Either way the answer
    /// matches what the kernel reports afterwards.
    #[test]
    fn applied_and_inherited_or_refused_with_what_to_grant() {
        let (applied, before, after, child) = on_own_thread(|| {
            let before = current();
            let applied = apply(&RealtimeConfig { priority: Some(10) });
            let after = current();
            let child = std::thread::spawn(current).join().unwrap();
            (applied, before, after, child)
        });
        match applied {
            Ok(p) => {
                assert_eq!(p, Some(10));
                assert_eq!(after, "SCHED_FIFO priority 10");
                assert_eq!(child, after, "a thread started afterwards inherits it");
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("LimitRTPRIO=10"), "{text}");
                assert_eq!(after, before, "a refusal leaves the thread as it was");
            }
        }
    }
}
