//! The receipt log on disk: JSON lines, one hash chain per start, rotated by size.
//!
//! The first file of a start is `STATE/receipts/boot-<epoch>.jsonl`; when it passes
//! `max_bytes` the chain continues in `boot-<epoch>.1.jsonl`, `.2`, … — the first record of each
//! file links (by `prev`) to the last record of the one before, so `halo-gateway audit verify`
//! over the files in order checks the whole chain. At most `max_files` receipt files are kept;
//! the oldest go first, so disk use stays bounded. A file is fsynced before the next is opened.

use std::io::Write;
use std::path::{Path, PathBuf};

/// An open, rotating receipt log.
pub struct ReceiptLog {
    dir: PathBuf,
    stem: String,
    part: u32,
    file: std::io::BufWriter<std::fs::File>,
    bytes: u64,
    max_bytes: u64,
    max_files: usize,
    current: PathBuf,
}

/// `(stem, part)` of a receipt file name: `boot-3.jsonl` → (`boot-3`, 0), `boot-3.2.jsonl` → (`boot-3`, 2).
fn parse_name(name: &str) -> Option<(String, u32)> {
    let base = name.strip_suffix(".jsonl")?;
    match base.rsplit_once('.') {
        Some((stem, n)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
            Some((stem.to_string(), n.parse().ok()?))
        }
        _ => Some((base.to_string(), 0)),
    }
}

/// The ordering key of a receipt file: the start's epoch (from `boot-<epoch>`) and the part.
fn order_key(stem: &str, part: u32) -> (u64, String, u32) {
    let epoch = stem
        .strip_prefix("boot-")
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    (epoch, stem.to_string(), part)
}

/// The receipt files in `dir` whose stem starts with `prefix`, oldest first.
pub fn files_in(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<((u64, String, u32), PathBuf)> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let (stem, part) = parse_name(&name)?;
            stem.starts_with(prefix)
                .then(|| (order_key(&stem, part), e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

impl ReceiptLog {
    /// Creates the first file at `path`.
    ///
    /// # Errors
    /// The I/O error.
    pub fn open(path: &Path, max_bytes: u64, max_files: usize) -> std::io::Result<ReceiptLog> {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "receipts.jsonl".into());
        let stem = parse_name(&name).map_or(name.clone(), |(s, _)| s);
        let file = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut log = ReceiptLog {
            dir,
            stem,
            part: 0,
            file,
            bytes: 0,
            max_bytes: max_bytes.max(1),
            max_files: max_files.max(1),
            current: path.to_path_buf(),
        };
        log.prune();
        Ok(log)
    }

    /// The file written now.
    pub fn current(&self) -> &Path {
        &self.current
    }

    /// Appends one line.
    ///
    /// # Errors
    /// The I/O error.
    pub fn append(&mut self, line: &str) -> std::io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.bytes += line.len() as u64 + 1;
        Ok(())
    }

    /// Flushes, and moves to the next file when this one is full.
    ///
    /// # Errors
    /// The I/O error.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        if self.bytes >= self.max_bytes {
            self.rotate()?;
        }
        Ok(())
    }

    /// Flushes and fsyncs the current file.
    ///
    /// # Errors
    /// The I/O error.
    pub fn sync(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_all()
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.sync()?;
        self.part += 1;
        let next = self.dir.join(format!("{}.{}.jsonl", self.stem, self.part));
        self.file = std::io::BufWriter::new(std::fs::File::create(&next)?);
        self.current = next;
        self.bytes = 0;
        self.prune();
        Ok(())
    }

    /// Deletes the oldest receipt files beyond `max_files` (never the current one).
    fn prune(&mut self) {
        let prefix = if self.stem.starts_with("boot-") {
            "boot-".to_string()
        } else {
            self.stem.clone()
        };
        let files = files_in(&self.dir, &prefix);
        let excess = files.len().saturating_sub(self.max_files);
        for p in files.iter().take(excess) {
            if *p != self.current {
                if let Err(e) = std::fs::remove_file(p) {
                    tracing::warn!(file = %p.display(), error = %e, "cannot remove an old receipt file");
                } else {
                    tracing::info!(file = %p.display(), "removed the oldest receipt file (receipts.max_files)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_order_by_epoch_then_part() {
        assert_eq!(parse_name("boot-3.jsonl"), Some(("boot-3".into(), 0)));
        assert_eq!(parse_name("boot-3.12.jsonl"), Some(("boot-3".into(), 12)));
        assert_eq!(parse_name("x.txt"), None);
        let d = std::env::temp_dir().join(format!("halo-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for n in [
            "boot-10.jsonl",
            "boot-2.jsonl",
            "boot-2.1.jsonl",
            "boot-10.2.jsonl",
        ] {
            std::fs::write(d.join(n), "").unwrap();
        }
        let names: Vec<String> = files_in(&d, "boot-")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "boot-2.jsonl",
                "boot-2.1.jsonl",
                "boot-10.jsonl",
                "boot-10.2.jsonl"
            ]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rotates_by_size_and_keeps_at_most_max_files() {
        let d = std::env::temp_dir().join(format!("halo-rot2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let mut log = ReceiptLog::open(&d.join("boot-1.jsonl"), 100, 3).unwrap();
        for i in 0..40 {
            log.append(&format!(
                "{{\"line\":{i:04},\"pad\":\"xxxxxxxxxxxxxxxxxxxx\"}}"
            ))
            .unwrap();
            log.flush().unwrap();
        }
        log.sync().unwrap();
        let files = files_in(&d, "boot-");
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(files.last().unwrap(), log.current());
        let total: usize = files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
            .sum();
        assert!(total < 40, "old files were removed");
        let _ = std::fs::remove_dir_all(&d);
    }
}
