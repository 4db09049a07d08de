//! A bridge's setpoint log, written off its streaming task: the task hands each line to a
//! writer thread over a bounded channel and never waits on the disk. A line that finds the
//! channel full is counted and dropped (the log is for people; the vehicle's own log and the
//! receipts are the evidence), and said once.

#![warn(missing_docs, unreachable_pub)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

/// Lines the writer may be behind by.
const QUEUE: usize = 1024;

/// The sending end: cheap to call from the streaming task.
#[derive(Debug)]
pub struct LineLog {
    tx: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

impl LineLog {
    /// Opens (appending) `path` and starts its writer thread.
    ///
    /// # Errors
    /// The file cannot be opened, or the thread cannot start.
    pub fn open(path: &Path) -> std::io::Result<LineLog> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (tx, rx) = sync_channel::<String>(QUEUE);
        let name = path.display().to_string();
        std::thread::Builder::new()
            .name("setpoint-log".into())
            .spawn(move || {
                let mut w = std::io::BufWriter::new(f);
                let mut warned = false;
                // Ends when the sending end is dropped (the bridge stopped).
                while let Ok(line) = rx.recv() {
                    // A burst is written in one go, then flushed.
                    let mut ok = writeln!(w, "{line}").is_ok();
                    while let Ok(more) = rx.try_recv() {
                        ok &= writeln!(w, "{more}").is_ok();
                    }
                    ok &= w.flush().is_ok();
                    if !ok && !warned {
                        warned = true;
                        tracing::warn!(log = %name, "could not write the bridge's setpoint log");
                    }
                }
                let _ = w.flush();
            })?;
        Ok(LineLog {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Hands one line to the writer, at once; a full queue drops it (counted).
    pub fn write(&self, line: String) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        "the setpoint log's writer is {QUEUE} lines behind: lines are dropped (counted) rather than waited for"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn every_line_reaches_the_file_in_order() {
        let dir = std::env::temp_dir().join(format!("halo-linelog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log.jsonl");
        let _ = std::fs::remove_file(&path);
        {
            let log = LineLog::open(&path).unwrap();
            for i in 0..100 {
                log.write(format!("{{\"i\":{i}}}"));
            }
            assert_eq!(log.dropped(), 0);
        }
        // The writer ends once the sender is gone; wait for it to have flushed.
        let mut text = String::new();
        for _ in 0..100 {
            text = std::fs::read_to_string(&path).unwrap();
            if text.lines().count() == 100 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100);
        assert_eq!(lines.first(), Some(&"{\"i\":0}"));
        assert_eq!(lines.last(), Some(&"{\"i\":99}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
