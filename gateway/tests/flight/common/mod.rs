//! Shared fixtures for the flight binary's integration tests: the core's (included from
//! `halo-core/tests/core/common`), the binary's processes ([`process`], shared with the
//! evaluation crate's tests), and the service's end-to-end fixtures.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures"
)]

pub mod browser;
#[path = "../../../../halo-core/tests/core/common/mod.rs"]
mod core_fixtures;
pub mod process;
pub mod service;
pub mod tls;

#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use core_fixtures::*;
pub use process::{Spawned, exclusive, shared};

/// The flight binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_halo-gateway");

/// Runs the flight binary; returns the exit code and standard output and error.
pub fn halo(args: &[&str]) -> (i32, String) {
    process::run(BIN, args)
}

/// Debian's libfaketime (`faketime`), which scripts/test.sh installs: preloaded, it moves a
/// process's wall clock.
pub fn libfaketime() -> Option<std::path::PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|d| std::path::Path::new(d).join("faketime/libfaketime.so.1"))
    .find(|p| p.exists())
}

/// A scenario's checks, each named: every one is run and printed (a failing check does not hide
/// the rest), then `SUITE: N/M matched`, and the test fails unless all M matched and M is the
/// count the caller pins (a check added or lost moves the pin on purpose, never silently).
pub struct Checks {
    suite: &'static str,
    done: Vec<(String, bool)>,
}

impl Checks {
    /// No checks yet for `suite`.
    pub fn new(suite: &'static str) -> Checks {
        Checks {
            suite,
            done: Vec::new(),
        }
    }

    /// Records one check; returns whether it held.
    pub fn check(&mut self, what: impl Into<String>, ok: bool) -> bool {
        self.done.push((what.into(), ok));
        ok
    }

    /// Whether a check so far failed (to print what it was judged on).
    pub fn done_failed(&self) -> bool {
        self.done.iter().any(|(_, ok)| !ok)
    }

    /// Prints every check and the suite line (with `detail` after it, if any), then holds the
    /// count to `pinned`.
    pub fn finish(self, pinned: usize, detail: &str) {
        for (what, ok) in &self.done {
            println!("  {} {what}", if *ok { "ok  " } else { "FAIL" });
        }
        let matched = self.done.iter().filter(|(_, ok)| *ok).count();
        let total = self.done.len();
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({detail})")
        };
        println!("{}: {matched}/{total} matched{detail}", self.suite);
        assert_eq!(
            (matched, total),
            (pinned, pinned),
            "{}: {matched} of {total} checks held; {pinned} are pinned",
            self.suite
        );
    }
}
