//! The operator at the console in a real browser: Debian's headless Chromium driven over
//! WebDriver by `tests/py/console.py` (selenium), one command per line.
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The operator at the console: one browser for the whole test, one command per line.
pub struct Operator {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: BufReader<std::process::ChildStdout>,
}

impl Operator {
    pub fn start() -> Operator {
        Operator::start_with_home(None)
    }

    /// A browser whose home is `home`: Chromium on Linux trusts the certificates of the NSS
    /// database in `home/.pki/nssdb` ([`nss_trusting`]) besides its own root store.
    pub fn start_with_home(home: Option<&Path>) -> Operator {
        for exe in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            assert!(
                Path::new(exe).exists(),
                "{exe} is missing: Debian's chromium and chromium-driver (scripts/test.sh installs them)"
            );
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/console.py");
        let mut cmd = Command::new("python3");
        if let Some(home) = home {
            cmd.env("HOME", home);
        }
        let mut child = cmd
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with selenium is needed (scripts/test.sh installs it)");
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Operator { child, stdin, out }
    }

    /// One command; its answer (`ok` false when the page did not do it).
    pub fn ask(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.out.read_line(&mut answer).unwrap();
        serde_json::from_str(answer.trim())
            .unwrap_or_else(|e| panic!("console.py answered `{answer}`: {e}"))
    }

    /// A command that must succeed.
    pub fn must(&mut self, line: &str) -> Value {
        let v = self.ask(line);
        assert_eq!(v["ok"], true, "`{line}`: {v}");
        v
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// An NSS database in `home/.pki/nssdb` that trusts `ca` (a PEM file) to name servers, made
/// with Debian's `certutil` (libnss3-tools) as a person gives their browser a private CA.
pub fn nss_trusting(home: &Path, ca: &Path) {
    let db = home.join(".pki/nssdb");
    std::fs::create_dir_all(&db).unwrap();
    let dbarg = format!("sql:{}", db.display());
    let certutil = |args: &[&str]| {
        let out = Command::new("certutil")
            .args(args)
            .output()
            .expect("certutil is needed: Debian's libnss3-tools (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "certutil {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    certutil(&["-N", "-d", &dbarg, "--empty-password"]);
    let ca = ca.display().to_string();
    certutil(&[
        "-A",
        "-d",
        &dbarg,
        "-n",
        "halo test CA",
        "-t",
        "C,,",
        "-i",
        &ca,
    ]);
}
