//! Independent peers written in Python (pymavlink ground stations and autopilot stand-ins) as
//! the tests run them: start the script, wait for the `READY` line it prints once pymavlink is
//! imported and its socket bound, and collect its standard output.
//!
//! Importing pymavlink can take seconds on a loaded machine, so the start waits for the word
//! rather than a fixed time; a peer that never gets there is an error after a minute.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running Python peer.
pub struct PythonPeer {
    child: Child,
    lines: JoinHandle<Vec<String>>,
    stderr: JoinHandle<String>,
}

/// What a finished peer left.
pub struct PeerOutput {
    /// Its exit status.
    pub status: ExitStatus,
    /// Every line it printed.
    pub lines: Vec<String>,
    /// What it wrote to standard error.
    pub stderr: String,
}

impl PeerOutput {
    /// Its last line as JSON (the peers end with one JSON report).
    ///
    /// # Errors
    /// When there is no last line or it is not JSON.
    pub fn report(&self) -> Result<serde_json::Value, String> {
        let last = self.lines.last().ok_or("the peer printed nothing")?;
        serde_json::from_str(last).map_err(|e| format!("the peer's last line is not JSON: {e}"))
    }
}

impl PythonPeer {
    /// Runs `python3 script args…` (with its standard input piped when `stdin`) and waits, up to
    /// a minute, for its `READY` line. Blocking: from async code, call it in `spawn_blocking`.
    ///
    /// # Errors
    /// A message naming the likely cause when python3 cannot start or the peer never gets ready.
    pub fn start(script: &Path, args: &[&str], stdin: bool) -> Result<PythonPeer, String> {
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("python3 is needed for the pymavlink peer tests: {e}"))?;
        let stdout = child.stdout.take().ok_or("no standard output")?;
        let mut err = child.stderr.take().ok_or("no standard error")?;
        // Read concurrently, so a chatty peer never blocks on a full pipe.
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
            text
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let lines = std::thread::spawn(move || {
            let mut out = Vec::new();
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if l.trim() == "READY" {
                    let _ = ready_tx.send(());
                }
                out.push(l);
            }
            out
        });
        let peer = PythonPeer {
            child,
            lines,
            stderr,
        };
        if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let mut peer = peer;
            let _ = peer.child.kill();
            let stderr = peer.finish().map(|o| o.stderr).unwrap_or_default();
            return Err(format!(
                "the pymavlink peer did not start within 60 s (is pymavlink installed? run ./scripts/test.sh): {stderr}"
            ));
        }
        Ok(peer)
    }

    /// Its standard input, when started with one (closing it tells some peers to stop).
    pub fn stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// Whether it has exited yet.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Closes its input, waits for it to end and returns what it printed. Blocking.
    ///
    /// # Errors
    /// When waiting for the process fails.
    pub fn finish(mut self) -> Result<PeerOutput, String> {
        drop(self.child.stdin.take());
        let status = self
            .child
            .wait()
            .map_err(|e| format!("waiting for the peer: {e}"))?;
        Ok(PeerOutput {
            status,
            lines: self.lines.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
        })
    }
}
