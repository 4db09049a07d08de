//! Processes of the binaries under test: one command's exit code and output, and a `run`
//! process with its URLs and credentials. Shared by the flight binary's tests and the
//! evaluation crate's (`halo-eval/tests/eval/common.rs` includes this file).
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures"
)]

/// Runs `bin`; returns the exit code and standard output and error.
pub fn run(bin: &str, args: &[&str]) -> (i32, String) {
    let o = std::process::Command::new(bin).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// A `run` process (the flight binary's, or `halo-eval run`) started by a test: its URL and the three role credentials
/// (agent, provider, operator). Killed when dropped, so a failing test leaves nothing behind.
pub struct Spawned {
    pub child: Option<std::process::Child>,
    pub url: String,
    /// The operator's own listener.
    pub operator_url: String,
    pub creds: [String; 3],
}

impl Spawned {
    /// Writes `config` (TOML) to `dir/gateway.toml`, starts `BIN run --config` in
    /// `dir`, waits for the banner's URL and reads the credentials from `state`.
    pub fn start(
        bin: &str,
        dir: &std::path::Path,
        config: &str,
        state: &std::path::Path,
    ) -> Spawned {
        Spawned::start_env(bin, dir, config, state, &[])
    }

    /// As [`Spawned::start`], with extra environment variables.
    pub fn start_env(
        bin: &str,
        dir: &std::path::Path,
        config: &str,
        state: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Spawned {
        Spawned::start_args(bin, dir, config, state, env, &[])
    }

    /// As [`Spawned::start_env`], with `args` after `run --config FILE`.
    pub fn start_args(
        bin: &str,
        dir: &std::path::Path,
        config: &str,
        state: &std::path::Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Spawned {
        let cfg = dir.join("gateway.toml");
        std::fs::write(&cfg, config).unwrap();
        Spawned::start_file(bin, dir, &cfg, state, env, args)
    }

    /// As [`Spawned::start_args`], with a configuration file that is already there.
    pub fn start_file(
        bin: &str,
        dir: &std::path::Path,
        cfg: &std::path::Path,
        state: &std::path::Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Spawned {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin)
            .args(["run", "--config"])
            .arg(cfg)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.split("listening on ").nth(1).map(|u| u.trim().to_owned()))
            .expect("the gateway printed its URL");
        let operator_url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                l.trim()
                    .strip_prefix("operator:")
                    .and_then(|r| r.split_whitespace().next().map(str::to_owned))
            })
            .expect("the gateway printed its operator listener");
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let read = |r: &str| {
            std::fs::read_to_string(state.join("credentials").join(format!("{r}.token")))
                .unwrap()
                .trim()
                .to_owned()
        };
        Spawned {
            child: Some(child),
            url,
            operator_url,
            creds: [read("agent"), read("provider"), read("operator")],
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// SIGTERM, then the exit status (at most 20 s).
    pub fn stop(mut self) -> i32 {
        let mut child = self.child.take().unwrap();
        let pid = child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the gateway did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGKILL: a crash, no clean shutdown.
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One lock per test binary: suites that measure timing at the vehicle hold it alone
/// ([`exclusive`]), every other test shares it ([`shared`]), so a grouped binary runs its
/// timing suites with nothing beside them, as separate binaries did.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Nothing else in this test binary runs while the guard lives (a failed test's poisoning is
/// ignored: the lock only orders the tests).
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    TIMING
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs beside other shared tests, never beside an [`exclusive`] one.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
