//! The receipt log on disk: JSON lines, one hash chain per start, rotated by size, failing
//! closed.
//!
//! The first file of a start is `STATE/receipts/boot-<epoch>.jsonl`; when it passes
//! `max_bytes` the chain continues in `boot-<epoch>.1.jsonl`, `.2`, … — the first record of each
//! file links (by `prev`) to the last record of the one before, so `halo-gateway audit verify`
//! over the files in order checks the whole chain.
//!
//! # Safety behaviour
//!
//! - **Whole records or nothing.** A batch of records is written straight to the file (no
//!   user-space buffer); the log knows how many bytes are committed. When a write fails (a full
//!   disk, an I/O error) the file is cut back to the last whole record, so what is on disk is
//!   always a prefix of the chain that verifies.
//! - **A reserve for the end.** At open the log writes a small ballast file
//!   ([`RESERVE_BYTES`], `.reserve` beside the log). On the first failure it deletes it and
//!   writes the failed records again into the space that frees: the hold, the alarm, the
//!   shutdown record and the last checkpoint still fit on a disk that filled up.
//! - **Health.** After any failure the log is [`Health::Refusing`]: the service stops
//!   dispatching and holds the vehicle. A record that cannot be written even from the reserve is
//!   *lost*: from then on nothing more is written (a later record would link to one that is not
//!   on disk), [`ReceiptLog::lost`] counts them, and no checkpoint is signed again.
//! - **Rotation never evicts the flight.** At most `max_files` receipt files are kept, but a file
//!   is deleted only when it belongs to an earlier start and every receipt in it is covered by a
//!   signed checkpoint the operator confirmed as kept off the machine ([`Exported`]). When the
//!   cap would need more than that, the log does not rotate and refuses ([`Why::CapReached`]),
//!   failing closed like a full disk; it goes on writing the records that stop the flight into
//!   the current file.
//! - Nothing is deleted at open: a start that fails, or one that writes no receipt, never evicts
//!   a log that has them.
//!
//! A record is *appended* once `write(2)` took all of its bytes: it survives a crash of the
//! process. The file is fsynced at every signed checkpoint, at rotation and at shutdown, so a
//! power loss can cost at most the records after the last checkpoint. A checkpoint's fsync
//! runs on the [`SyncWorker`]'s thread, off the service task (an SD card's fsync takes tens of
//! milliseconds): the service task appends, hands the worker a sync of the same file, and offers
//! the signed head to anyone only once the worker reports it durable; a failed sync fails the
//! log closed as a failed write does.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The ballast written beside the log at open and freed when the disk fills, bytes.
pub const RESERVE_BYTES: u64 = 256 * 1024;

/// The name of the ballast file in the receipts directory.
pub const RESERVE_NAME: &str = ".reserve";

/// The name of the record of exported signed heads in the receipts directory.
pub const EXPORTED_NAME: &str = "exported.json";

/// What the log writes through: a file, or in tests one that fails on cue.
pub trait LogFile: Send {
    /// Writes some of `buf`, as [`Write::write`].
    ///
    /// # Errors
    /// The I/O error.
    fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize>;
    /// Cuts the file to `len` bytes and positions the next write there.
    ///
    /// # Errors
    /// The I/O error.
    fn truncate_to(&mut self, len: u64) -> std::io::Result<()>;
    /// Makes what was written durable.
    ///
    /// # Errors
    /// The I/O error.
    fn sync(&mut self) -> std::io::Result<()>;
    /// A sync of this file that another thread can run (the same file, another handle), or
    /// `None` when only this handle can sync it (then the log syncs in place).
    fn detached_sync(&self) -> Option<DetachedSync> {
        None
    }
}

/// A sync of the log's file to run on another thread.
pub type DetachedSync = Box<dyn FnOnce() -> std::io::Result<()> + Send>;

impl LogFile for std::fs::File {
    fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Write::write(self, buf)
    }
    fn truncate_to(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)?;
        self.seek(SeekFrom::Start(len)).map(|_| ())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    fn detached_sync(&self) -> Option<DetachedSync> {
        let f = self.try_clone().ok()?;
        Some(Box::new(move || f.sync_data()))
    }
}

/// Runs the receipt log's syncs on a thread of its own, in order, so the service task never waits
/// for the disk. Bounded: at most [`SyncWorker::QUEUE`] syncs wait; the results come back, in
/// order, on the channel [`SyncWorker::start`] returns.
#[derive(Debug)]
pub struct SyncWorker {
    jobs: std::sync::mpsc::SyncSender<(u64, DetachedSync)>,
}

/// A finished sync: its id and how it went.
pub type Synced = (u64, std::io::Result<()>);

impl SyncWorker {
    /// Syncs that may wait.
    pub const QUEUE: usize = 4;

    /// Starts the thread; it ends when the worker is dropped.
    ///
    /// # Errors
    /// The thread cannot start.
    pub fn start() -> std::io::Result<(SyncWorker, tokio::sync::mpsc::Receiver<Synced>)> {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<(u64, DetachedSync)>(Self::QUEUE);
        let (done, results) = tokio::sync::mpsc::channel(Self::QUEUE + 1);
        std::thread::Builder::new()
            .name("receipt-sync".into())
            .spawn(move || {
                while let Ok((id, sync)) = rx.recv() {
                    if done.blocking_send((id, sync())).is_err() {
                        break;
                    }
                }
            })?;
        Ok((SyncWorker { jobs }, results))
    }

    /// Hands a sync to the thread, at once; gives it back when the queue is full.
    ///
    /// # Errors
    /// The sync, when it could not be queued (run it in place).
    pub fn submit(&self, id: u64, sync: DetachedSync) -> Result<(), DetachedSync> {
        self.jobs.try_send((id, sync)).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full((_, s))
            | std::sync::mpsc::TrySendError::Disconnected((_, s)) => s,
        })
    }
}

/// Creates a new, empty log file at a path.
pub type Create = Box<dyn Fn(&Path) -> std::io::Result<Box<dyn LogFile>> + Send>;

/// Creates a real file, refusing one that exists (a receipt file is never overwritten).
fn create_file(path: &Path) -> std::io::Result<Box<dyn LogFile>> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    Ok(Box::new(f))
}

/// Why the log refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// A write, a truncation or a sync failed.
    WriteFailed {
        /// What the operating system said.
        error: String,
    },
    /// `max_files` files are kept and none of them may be deleted.
    CapReached {
        /// The cap.
        max_files: usize,
    },
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::WriteFailed { error } => write!(f, "a receipt write failed: {error}"),
            Why::CapReached { max_files } => write!(
                f,
                "receipts.max_files ({max_files}) files are kept and none may be deleted (each \
                 belongs to this start or is not covered by an exported signed head)"
            ),
        }
    }
}

/// Whether the log takes records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every record so far is on disk.
    Ok,
    /// A failure or the cap: the service must not dispatch. Records are still written while
    /// they fit ([`ReceiptLog::lost`] says whether any did not).
    Refusing(Why),
}

/// How one append went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Records written whole.
    pub written: u64,
    /// Records that could not be written (lost).
    pub lost: u64,
    /// The log was healthy before this batch and is not now: the batch met the failure.
    pub failed_now: bool,
}

/// Signed heads the operator confirmed as kept off the machine, per log (`boot-3`): the number
/// of receipts the newest such head covers. Kept in `exported.json` in the receipts directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exported(BTreeMap<String, u64>);

impl Exported {
    /// Reads `exported.json` in `dir` (empty when absent).
    ///
    /// # Errors
    /// The file exists and cannot be read or parsed.
    pub fn load(dir: &Path) -> Result<Exported, crate::error::Error> {
        let p = dir.join(EXPORTED_NAME);
        match crate::io::read_capped(&p, 1024 * 1024, "exported heads record") {
            Ok(b) => serde_json::from_slice::<BTreeMap<String, u64>>(&b)
                .map(Exported)
                .map_err(|e| crate::error::Error::record(format!("{}: {e}", p.display()))),
            Err(_) if !p.exists() => Ok(Exported::default()),
            Err(e) => Err(e.into()),
        }
    }

    /// Receipts of `log` covered by an exported head.
    pub fn covered(&self, log: &str) -> u64 {
        self.0.get(log).copied().unwrap_or(0)
    }

    /// Records that a head covering `count` receipts of `log` is kept off the machine; returns
    /// whether that moved the mark.
    pub fn mark(&mut self, log: &str, count: u64) -> bool {
        let e = self.0.entry(log.to_string()).or_insert(0);
        if count > *e {
            *e = count;
            true
        } else {
            false
        }
    }

    /// Writes `exported.json` in `dir` atomically.
    ///
    /// # Errors
    /// The I/O error.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string(&self.0).map_err(std::io::Error::other)?;
        crate::io::write_atomic(&dir.join(EXPORTED_NAME), text.as_bytes(), 0o644)
    }
}

/// The log's settings.
pub struct Options {
    /// Rotate once the current file passes this many bytes.
    pub max_bytes: u64,
    /// Receipt files kept in the directory, all starts.
    pub max_files: usize,
    /// The ballast to keep, bytes (0: none).
    pub reserve_bytes: u64,
}

/// An open, rotating receipt log.
pub struct ReceiptLog {
    dir: PathBuf,
    stem: String,
    part: u32,
    file: Box<dyn LogFile>,
    /// Bytes of whole records in the current file.
    len: u64,
    opts: Options,
    current: PathBuf,
    reserve: Option<PathBuf>,
    health: Health,
    /// Nothing more is written: a record was lost.
    sealed_off: bool,
    written: u64,
    lost: u64,
    write_errors: u64,
    /// The index the next record written has (for rotation decisions and the heads record).
    next_index: u64,
    exported: Exported,
    create: Create,
    buf: Vec<u8>,
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

/// The stem (`boot-3`) of a receipt file.
pub fn stem_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().to_string();
    parse_name(&name).map(|(s, _)| s)
}

/// The last line of a file (without its newline), read from the end: at most
/// [`crate::io::MAX_RECORD_BYTES`].
///
/// # Errors
/// The I/O error; `Ok(None)` for an empty file or a last line over the cap.
pub fn last_line(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    if size == 0 {
        return Ok(None);
    }
    let want = size.min(crate::io::MAX_RECORD_BYTES + 1);
    f.seek(SeekFrom::Start(size - want))?;
    let mut buf = Vec::new();
    f.take(want).read_to_end(&mut buf)?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    match buf.iter().rposition(|b| *b == b'\n') {
        Some(i) => Ok(buf.get(i + 1..).map(<[u8]>::to_vec)),
        None if want == size => Ok(Some(buf)),
        None => Ok(None),
    }
}

/// The index of the last record in a receipt file, read from its last line's fixed start
/// (`{"index":N,`).
pub fn last_index(path: &Path) -> Option<u64> {
    let line = last_line(path).ok()??;
    let rest = line.strip_prefix(b"{\"index\":")?;
    let digits: Vec<u8> = rest
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

fn write_reserve(path: &Path, bytes: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let chunk = vec![0u8; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        f.write_all(chunk.get(..n).unwrap_or(&chunk))?;
        left -= n as u64;
    }
    f.sync_all()
}

impl ReceiptLog {
    /// Creates the first file at `path` (which must not exist) and the reserve beside it.
    ///
    /// # Errors
    /// The I/O error: the directory or the file cannot be created, the file already exists, or
    /// the reserve does not fit (a disk that is full at start: nothing is dispatched without
    /// room for the records that stop a flight).
    pub fn open(path: &Path, opts: Options, exported: Exported) -> std::io::Result<ReceiptLog> {
        ReceiptLog::open_with(path, opts, exported, Box::new(create_file))
    }

    /// As [`ReceiptLog::open`], creating files through `create`.
    ///
    /// # Errors
    /// As [`ReceiptLog::open`].
    pub fn open_with(
        path: &Path,
        opts: Options,
        exported: Exported,
        create: Create,
    ) -> std::io::Result<ReceiptLog> {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let stem = stem_of(path).unwrap_or_else(|| "receipts".into());
        let reserve = if opts.reserve_bytes > 0 {
            let r = dir.join(RESERVE_NAME);
            if let Err(e) = write_reserve(&r, opts.reserve_bytes) {
                let _ = std::fs::remove_file(&r);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot write the {}-byte receipt reserve {}: {e}",
                        opts.reserve_bytes,
                        r.display()
                    ),
                ));
            }
            Some(r)
        } else {
            None
        };
        let file = create(path)?;
        Ok(ReceiptLog {
            dir,
            stem,
            part: 0,
            file,
            len: 0,
            opts: Options {
                max_bytes: opts.max_bytes.max(1),
                max_files: opts.max_files.max(1),
                reserve_bytes: opts.reserve_bytes,
            },
            current: path.to_path_buf(),
            reserve,
            health: Health::Ok,
            sealed_off: false,
            written: 0,
            lost: 0,
            write_errors: 0,
            next_index: 0,
            exported,
            create,
            buf: Vec::new(),
        })
    }

    /// The file written now.
    pub fn current(&self) -> &Path {
        &self.current
    }

    /// This start's log name (`boot-3`).
    pub fn stem(&self) -> &str {
        &self.stem
    }

    /// The receipts directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the log takes records.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Records on disk.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Records that could not be written.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Writes, truncations and syncs that failed.
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// Whether a checkpoint may be signed now: every record so far is on disk.
    pub fn may_sign(&self) -> bool {
        self.lost == 0 && !self.sealed_off
    }

    /// The exported-heads record.
    pub fn exported(&self) -> &Exported {
        &self.exported
    }

    /// Records that a signed head covering `count` receipts of `log` is kept off the machine,
    /// and persists the record.
    ///
    /// # Errors
    /// The I/O error; the mark is kept in memory either way.
    pub fn mark_exported(&mut self, log: &str, count: u64) -> std::io::Result<bool> {
        if self.exported.mark(log, count) {
            self.exported.save(&self.dir)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn fail(&mut self, error: &std::io::Error) {
        self.write_errors += 1;
        if self.health == Health::Ok {
            self.health = Health::Refusing(Why::WriteFailed {
                error: error.to_string(),
            });
        }
    }

    /// Writes `bytes` whole at the end, or cuts the file back and returns the error.
    fn write_whole(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut off = 0usize;
        while off < bytes.len() {
            match self.file.write_some(bytes.get(off..).unwrap_or_default()) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "the receipt file took no bytes",
                    ));
                }
                Ok(n) => off += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if off > 0 {
                        // Whatever part of the batch reached the file goes: the log stays a
                        // prefix of whole records.
                        let _ = self.file.truncate_to(self.len);
                    }
                    return Err(e);
                }
            }
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Appends records (each one JSON line, without its newline), in order.
    ///
    /// On a failure the reserve is freed and the records are written again one by one; what
    /// still does not fit is lost and the log writes nothing more (see the module docs).
    pub fn append<S: AsRef<str>>(&mut self, lines: &[S]) -> Appended {
        let was_ok = self.health == Health::Ok;
        let n = lines.len() as u64;
        if n == 0 {
            return Appended {
                written: 0,
                lost: 0,
                failed_now: false,
            };
        }
        if self.sealed_off {
            self.lost += n;
            return Appended {
                written: 0,
                lost: n,
                failed_now: false,
            };
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        for l in lines {
            buf.extend_from_slice(l.as_ref().as_bytes());
            buf.push(b'\n');
        }
        let first = self.write_whole(&buf);
        self.buf = buf;
        if first.is_ok() {
            self.written += n;
            self.next_index += n;
            self.after_write();
            return Appended {
                written: n,
                lost: 0,
                failed_now: was_ok && self.health != Health::Ok,
            };
        }
        if let Err(e) = &first {
            self.fail(e);
            tracing::error!(file = %self.current.display(), error = %e, "cannot write the receipt log: failing closed");
        }
        self.free_reserve();
        let mut written = 0u64;
        for l in lines {
            let mut one = Vec::with_capacity(l.as_ref().len() + 1);
            one.extend_from_slice(l.as_ref().as_bytes());
            one.push(b'\n');
            if let Err(e) = self.write_whole(&one) {
                self.fail(&e);
                self.sealed_off = true;
                break;
            }
            written += 1;
        }
        let lost = n - written;
        self.written += written;
        self.next_index += written;
        self.lost += lost;
        if lost > 0 {
            tracing::error!(
                lost,
                total_lost = self.lost,
                "receipts lost: the log ends at its last whole record and takes no more"
            );
        }
        Appended {
            written,
            lost,
            failed_now: was_ok,
        }
    }

    fn free_reserve(&mut self) {
        if let Some(r) = self.reserve.take() {
            match std::fs::remove_file(&r) {
                Ok(()) => {
                    tracing::warn!(reserve = %r.display(), "freed the receipt reserve for the records that stop the flight");
                }
                Err(e) => {
                    tracing::error!(reserve = %r.display(), error = %e, "cannot free the receipt reserve")
                }
            }
        }
    }

    /// A sync of every record written so far, to run on the [`SyncWorker`]: `None` when the
    /// log writes nothing more, or its file cannot be synced from another thread (then call
    /// [`ReceiptLog::sync`]).
    pub fn detached_sync(&self) -> Option<DetachedSync> {
        if self.sealed_off {
            return None;
        }
        self.file.detached_sync()
    }

    /// A detached sync failed: the log refuses from now on, as after a failed write.
    pub fn sync_failed(&mut self, error: &std::io::Error) {
        self.fail(error);
        tracing::error!(error = %error, "cannot sync the receipt log: failing closed");
    }

    /// Makes every record written so far durable (an fsync).
    ///
    /// # Errors
    /// The I/O error; the log refuses from then on.
    pub fn sync(&mut self) -> std::io::Result<()> {
        if self.sealed_off {
            return Ok(());
        }
        if let Err(e) = self.file.sync() {
            self.fail(&e);
            tracing::error!(error = %e, "cannot sync the receipt log: failing closed");
            return Err(e);
        }
        Ok(())
    }

    /// Rotation, once the current file is full.
    fn after_write(&mut self) {
        if self.len < self.opts.max_bytes || self.health != Health::Ok {
            return;
        }
        if self.sync().is_err() {
            return;
        }
        if !self.make_room() {
            tracing::error!(
                max_files = self.opts.max_files,
                "the receipt files reached receipts.max_files and none may be deleted: failing closed"
            );
            self.health = Health::Refusing(Why::CapReached {
                max_files: self.opts.max_files,
            });
            return;
        }
        let next = self
            .dir
            .join(format!("{}.{}.jsonl", self.stem, self.part + 1));
        match (self.create)(&next) {
            Ok(f) => {
                self.part += 1;
                self.file = f;
                self.current = next;
                self.len = 0;
            }
            Err(e) => {
                self.fail(&e);
                tracing::error!(file = %next.display(), error = %e, "cannot start the next receipt file: failing closed");
            }
        }
    }

    /// Deletes the oldest deletable files until one more fits under `max_files`; false when
    /// that is not possible.
    fn make_room(&mut self) -> bool {
        let files = files_in(&self.dir, "");
        let mut count = files.len();
        for p in &files {
            if count < self.opts.max_files {
                break;
            }
            if !self.deletable(p) {
                continue;
            }
            match std::fs::remove_file(p) {
                Ok(()) => {
                    count -= 1;
                    tracing::info!(file = %p.display(), "removed an old receipt file (receipts.max_files; covered by an exported signed head)");
                }
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e, "cannot remove an old receipt file");
                }
            }
        }
        count < self.opts.max_files
    }

    /// A file may go when it belongs to another log than this start's and an exported signed
    /// head of its log covers its last receipt.
    fn deletable(&self, p: &Path) -> bool {
        let Some(stem) = stem_of(p) else {
            return false;
        };
        if stem == self.stem || *p == self.current {
            return false;
        }
        match last_index(p) {
            Some(i) => self.exported.covered(&stem) > i,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("halo-rot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn opts(max_bytes: u64, max_files: usize) -> Options {
        Options {
            max_bytes,
            max_files,
            reserve_bytes: 4096,
        }
    }

    /// A file on a disk with `budget` bytes free: it takes that many bytes in all, then fails
    /// as a full disk does (ENOSPC). Deleting the reserve frees its bytes, as on a real file
    /// system.
    struct Budgeted {
        f: std::fs::File,
        budget: Arc<Mutex<u64>>,
        reserve: PathBuf,
        reserve_bytes: u64,
        credited: bool,
        size: u64,
    }

    impl LogFile for Budgeted {
        fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut b = self.budget.lock().unwrap();
            if !self.credited && !self.reserve.exists() {
                self.credited = true;
                *b += self.reserve_bytes;
            }
            if *b == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let n = buf.len().min(usize::try_from(*b).unwrap());
            let n = self.f.write(&buf[..n])?;
            *b -= n as u64;
            self.size += n as u64;
            Ok(n)
        }
        fn truncate_to(&mut self, len: u64) -> std::io::Result<()> {
            // Cutting the file frees what it held past `len`.
            *self.budget.lock().unwrap() += self.size.saturating_sub(len);
            self.size = len;
            LogFile::truncate_to(&mut self.f, len)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            self.f.sync_data()
        }
    }

    fn budgeted(budget: &Arc<Mutex<u64>>, reserve_bytes: u64) -> Create {
        let b = Arc::clone(budget);
        Box::new(move |p: &Path| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)?;
            Ok(Box::new(Budgeted {
                f,
                budget: Arc::clone(&b),
                reserve: p.parent().unwrap().join(RESERVE_NAME),
                reserve_bytes,
                credited: false,
                size: 0,
            }) as Box<dyn LogFile>)
        })
    }

    fn line(i: u64) -> String {
        format!("{{\"index\":{i},\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}")
    }

    #[test]
    fn names_order_by_epoch_then_part() {
        assert_eq!(parse_name("boot-3.jsonl"), Some(("boot-3".into(), 0)));
        assert_eq!(parse_name("boot-3.12.jsonl"), Some(("boot-3".into(), 12)));
        assert_eq!(parse_name("x.txt"), None);
        let d = tmp("names");
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
    fn a_failed_write_leaves_whole_records_and_the_reserve_holds_the_end() {
        let d = tmp("full");
        let l0 = line(0).len() as u64 + 1;
        // Four records fit; then the disk is full. The reserve holds exactly one record.
        let budget = Arc::new(Mutex::new(4 * l0));
        let mut log = ReceiptLog::open_with(
            &d.join("boot-1.jsonl"),
            Options {
                max_bytes: 1 << 20,
                max_files: 4,
                reserve_bytes: l0,
            },
            Exported::default(),
            budgeted(&budget, l0),
        )
        .unwrap();
        assert!(d.join(RESERVE_NAME).exists());
        let a = log.append(&[line(0), line(1), line(2), line(3)]);
        assert_eq!((a.written, a.lost, a.failed_now), (4, 0, false));
        assert!(log.may_sign());
        // The batch of two fails whole; the reserve is freed; one record fits from it, the
        // other is lost.
        let a = log.append(&[line(4), line(5)]);
        assert_eq!((a.written, a.lost, a.failed_now), (1, 1, true));
        assert!(!d.join(RESERVE_NAME).exists(), "the reserve was freed");
        assert!(matches!(
            log.health(),
            Health::Refusing(Why::WriteFailed { .. })
        ));
        assert_eq!((log.written(), log.lost()), (5, 1));
        let text = std::fs::read_to_string(d.join("boot-1.jsonl")).unwrap();
        let want: String = (0..5).map(|i| line(i) + "\n").collect();
        assert_eq!(text, want, "whole records only, in order");
        // Nothing is written after a lost record, and no checkpoint may be signed.
        assert!(!log.may_sign());
        *budget.lock().unwrap() = 1 << 20;
        let a = log.append(&[line(6)]);
        assert_eq!((a.written, a.lost, a.failed_now), (0, 1, false));
        assert_eq!(
            std::fs::read_to_string(d.join("boot-1.jsonl")).unwrap(),
            want
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failure_the_reserve_absorbs_loses_nothing() {
        let d = tmp("absorb");
        let l0 = line(0).len() as u64 + 1;
        let budget = Arc::new(Mutex::new(l0));
        let mut log = ReceiptLog::open_with(
            &d.join("boot-1.jsonl"),
            Options {
                max_bytes: 1 << 20,
                max_files: 4,
                reserve_bytes: 3 * l0,
            },
            Exported::default(),
            budgeted(&budget, 3 * l0),
        )
        .unwrap();
        let a = log.append(&[line(0), line(1)]);
        assert_eq!((a.written, a.lost, a.failed_now), (2, 0, true));
        // Refusing, but every record is on disk: a checkpoint may still be signed over them.
        assert!(log.may_sign());
        assert!(matches!(log.health(), Health::Refusing(_)));
        let a = log.append(&[line(2), line(3)]);
        assert_eq!((a.written, a.lost), (2, 0));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_full_batch_is_cut_back_to_the_last_whole_record() {
        let d = tmp("cut");
        // 150 bytes: the first two records fit; a batch of three stops inside the third.
        let budget = Arc::new(Mutex::new(150u64));
        let mut log = ReceiptLog::open_with(
            &d.join("boot-1.jsonl"),
            Options {
                max_bytes: 1 << 20,
                max_files: 4,
                reserve_bytes: 0,
            },
            Exported::default(),
            budgeted(&budget, 0),
        )
        .unwrap();
        let a = log.append(&[line(0), line(1), line(2)]);
        assert!(a.failed_now);
        assert_eq!((a.written, a.lost), (2, 1));
        let text = std::fs::read_to_string(d.join("boot-1.jsonl")).unwrap();
        assert_eq!(text, format!("{}\n{}\n", line(0), line(1)));
        assert!(!log.may_sign());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rotation_never_deletes_this_start_and_fails_closed_at_the_cap() {
        let d = tmp("cap");
        let mut log =
            ReceiptLog::open(&d.join("boot-1.jsonl"), opts(100, 3), Exported::default()).unwrap();
        let mut i = 0;
        while log.health() == &Health::Ok && i < 100 {
            log.append(&[line(i)]);
            i += 1;
        }
        assert_eq!(
            log.health(),
            &Health::Refusing(Why::CapReached { max_files: 3 })
        );
        let files = files_in(&d, "boot-");
        assert_eq!(files.len(), 3, "{files:?}");
        // Every record of this start is still on disk, and the log still takes the records
        // that stop the flight.
        let a = log.append(&[line(i)]);
        assert_eq!(a.written, 1);
        let total: usize = files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
            .sum();
        assert_eq!(total as u64, log.written());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_earlier_start_is_deleted_only_once_an_exported_head_covers_it() {
        let d = tmp("evict");
        std::fs::write(
            d.join("boot-1.jsonl"),
            format!("{}\n{}\n", line(0), line(1)),
        )
        .unwrap();
        assert_eq!(last_index(&d.join("boot-1.jsonl")), Some(1));
        let mut exported = Exported::default();
        // A head covering one receipt of boot-1 does not cover its last (index 1).
        exported.mark("boot-1", 1);
        let mut log = ReceiptLog::open(&d.join("boot-2.jsonl"), opts(100, 2), exported).unwrap();
        log.append(&[line(0), line(1)]);
        assert!(
            matches!(log.health(), Health::Refusing(Why::CapReached { .. })),
            "{:?}",
            log.health()
        );
        assert!(d.join("boot-1.jsonl").exists());

        // Covered: it goes, and the log rotates.
        let d2 = tmp("evict2");
        std::fs::write(
            d2.join("boot-1.jsonl"),
            format!("{}\n{}\n", line(0), line(1)),
        )
        .unwrap();
        let mut exported = Exported::default();
        exported.mark("boot-1", 2);
        let mut log = ReceiptLog::open(&d2.join("boot-2.jsonl"), opts(100, 2), exported).unwrap();
        log.append(&[line(0), line(1)]);
        assert_eq!(log.health(), &Health::Ok);
        assert!(!d2.join("boot-1.jsonl").exists());
        assert!(d2.join("boot-2.1.jsonl").exists());
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&d2);
    }

    #[test]
    fn open_refuses_an_existing_file_and_a_reserve_that_does_not_fit() {
        let d = tmp("exists");
        std::fs::write(d.join("boot-1.jsonl"), "x\n").unwrap();
        let e = ReceiptLog::open(&d.join("boot-1.jsonl"), opts(100, 3), Exported::default())
            .err()
            .unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read_to_string(d.join("boot-1.jsonl")).unwrap(),
            "x\n"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_exported_record_round_trips_and_only_moves_forward() {
        let d = tmp("exp");
        let mut e = Exported::load(&d).unwrap();
        assert!(e.mark("boot-3", 10));
        assert!(!e.mark("boot-3", 9));
        e.save(&d).unwrap();
        assert_eq!(Exported::load(&d).unwrap().covered("boot-3"), 10);
        std::fs::write(d.join(EXPORTED_NAME), "{").unwrap();
        assert!(Exported::load(&d).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_sync_worker_runs_syncs_in_order_off_the_caller_and_reports_each() {
        let (w, mut results) = SyncWorker::start().unwrap();
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        // The first sync blocks until the test lets it go: the caller is not held up.
        let g = Arc::clone(&gate);
        assert!(
            w.submit(
                1,
                Box::new(move || {
                    let _open = g.lock();
                    Ok(())
                })
            )
            .is_ok()
        );
        assert!(
            w.submit(2, Box::new(|| Err(std::io::Error::other("disk gone"))))
                .is_ok()
        );
        // The queue is bounded: beyond it a sync is handed back to run in place.
        let mut refused = 0;
        for id in 3..(3 + SyncWorker::QUEUE as u64 + 2) {
            refused += usize::from(w.submit(id, Box::new(|| Ok(()))).is_err());
        }
        assert!(refused >= 1, "the queue took every sync");
        drop(held);
        let (id, r) = results.blocking_recv().unwrap();
        assert_eq!(id, 1);
        assert!(r.is_ok());
        let (id, r) = results.blocking_recv().unwrap();
        assert_eq!(id, 2);
        assert_eq!(r.unwrap_err().to_string(), "disk gone");
    }

    #[test]
    fn a_real_file_syncs_from_another_thread() {
        let dir = tmp("detached");
        let log = ReceiptLog::open(
            &dir.join("boot-1.jsonl"),
            opts(1 << 20, 4),
            Exported::default(),
        )
        .unwrap();
        let mut log = log;
        assert_eq!(log.append(&["{\"index\":0}"]).written, 1);
        let job = log
            .detached_sync()
            .expect("a file syncs from another thread");
        let r = std::thread::spawn(job).join().unwrap();
        assert!(r.is_ok());
        log.sync_failed(&std::io::Error::other("an I/O error"));
        assert_ne!(log.health(), &Health::Ok);
    }
}
