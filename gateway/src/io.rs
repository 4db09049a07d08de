//! Shell-side helpers that touch files: every file the binary reads goes through a size cap
//! before it is parsed, and line-oriented logs are read record by record with a per-record cap,
//! so a wrong path (`/dev/zero`, a disk image) is a clear error, never unbounded memory.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use halo_core::catalog::{Catalog, CatalogError};
use halo_core::contract::{Domain, DomainError};

use crate::error::{Error, ErrorKind};

/// The largest catalog, contract domain or state file read, bytes.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// The largest contract workflow file read, bytes.
pub const MAX_WORKFLOW_BYTES: u64 = 8 * 1024 * 1024;
/// The largest single record (line) of a receipt log, bytes.
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// Why a file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadErrorKind {
    /// There is no such file.
    Missing,
    /// It could not be opened (permissions, a directory): the system's words.
    Open(String),
    /// Reading it failed: the system's words.
    Read(String),
    /// It is larger than the cap, bytes; nothing was read past it.
    TooLarge(u64),
    /// It is not UTF-8.
    NotUtf8(String),
}

/// A file that could not be read: which, as what, and why. Its message names the file first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    file: String,
    what: String,
    kind: ReadErrorKind,
}

impl ReadError {
    fn new(file: &str, what: &str, kind: ReadErrorKind) -> ReadError {
        ReadError {
            file: file.to_string(),
            what: what.to_string(),
            kind,
        }
    }

    /// The file, as people name it (`standard input` for `-`).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Why.
    pub fn kind(&self) -> &ReadErrorKind {
        &self.kind
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (file, what) = (&self.file, &self.what);
        match &self.kind {
            ReadErrorKind::Missing => write!(f, "{file}: no such file"),
            ReadErrorKind::Open(e) => write!(f, "{file}: cannot open: {e}"),
            ReadErrorKind::Read(e) => write!(f, "{file}: cannot read: {e}"),
            ReadErrorKind::TooLarge(cap) => write!(
                f,
                "{file}: the {what} is larger than the {cap}-byte limit; nothing was read past it"
            ),
            ReadErrorKind::NotUtf8(e) => write!(f, "{file}: the {what} is not UTF-8: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<ReadError> for Error {
    fn from(e: ReadError) -> Error {
        let kind = match e.kind {
            ReadErrorKind::TooLarge(_) | ReadErrorKind::NotUtf8(_) => ErrorKind::Record,
            _ => ErrorKind::File,
        };
        Error::new(kind, e.to_string())
    }
}

/// Reads a whole file, refusing it past `cap` bytes without reading further; `what` names the
/// kind of file in the message (`state file`, `response`, ...). `-` reads standard input. The
/// one way the binaries read a file whole.
///
/// # Errors
/// [`ReadError`]: no such file, cannot open or read it, or it exceeds the cap.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, ReadError> {
    let stdin = path == Path::new("-");
    let name = if stdin {
        "standard input".to_string()
    } else {
        path.display().to_string()
    };
    let mut buf = Vec::new();
    let read = if stdin {
        std::io::stdin().take(cap + 1).read_to_end(&mut buf)
    } else {
        let f = std::fs::File::open(path).map_err(|e| {
            let kind = match e.kind() {
                std::io::ErrorKind::NotFound => ReadErrorKind::Missing,
                _ => ReadErrorKind::Open(e.to_string()),
            };
            ReadError::new(&name, what, kind)
        })?;
        f.take(cap + 1).read_to_end(&mut buf)
    };
    read.map_err(|e| ReadError::new(&name, what, ReadErrorKind::Read(e.to_string())))?;
    if buf.len() as u64 > cap {
        return Err(ReadError::new(&name, what, ReadErrorKind::TooLarge(cap)));
    }
    Ok(buf)
}

/// As [`read_capped`], as UTF-8 text.
///
/// # Errors
/// As [`read_capped`], or the file is not UTF-8.
pub fn read_text_capped(path: &Path, cap: u64, what: &str) -> Result<String, ReadError> {
    let b = read_capped(path, cap, what)?;
    String::from_utf8(b).map_err(|e| {
        ReadError::new(
            &path.display().to_string(),
            what,
            ReadErrorKind::NotUtf8(e.to_string()),
        )
    })
}

/// One line of a line-oriented log, as [`for_each_line`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct LogLine<'a> {
    /// 1-based line number.
    pub no: usize,
    /// Byte offset of the line's first byte in the file.
    pub offset: u64,
    /// The line without its newline.
    pub bytes: &'a [u8],
    /// Whether a newline ended it (false only for the last line of a file that a writer was
    /// cut off in).
    pub terminated: bool,
}

impl LogLine<'_> {
    /// The line as UTF-8.
    ///
    /// # Errors
    /// An [`ErrorKind::Record`](crate::error::ErrorKind::Record) error naming the line when it
    /// is not UTF-8.
    pub fn text(&self, name: &str) -> Result<&str, Error> {
        std::str::from_utf8(self.bytes)
            .map_err(|e| Error::record(format!("{name}:{}: the record is not UTF-8: {e}", self.no)))
    }
}

/// Reads a line-oriented log line by line, each at most `cap` bytes, calling `each` with the
/// line, its number, offset and whether a newline ended it. Blank lines are passed too.
///
/// # Errors
/// An [`Error`] naming the file and line (cannot open or read: `File`; a line over the cap:
/// `Record`), or the first error `each` returns.
pub fn for_each_line<E: From<Error>>(
    path: &Path,
    cap: u64,
    mut each: impl FnMut(LogLine<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| {
        Error::file(match e.kind() {
            std::io::ErrorKind::NotFound => format!("{name}: no such file"),
            _ => format!("{name}: cannot open: {e}"),
        })
    })?;
    let mut r = std::io::BufReader::new(f);
    let mut line = Vec::new();
    let mut n = 0usize;
    let mut offset = 0u64;
    loop {
        line.clear();
        let got = (&mut r)
            .take(cap + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::file(format!("{name}: cannot read: {e}")))?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        let terminated = line.last() == Some(&b'\n');
        if terminated {
            line.pop();
        } else if line.len() as u64 > cap {
            return Err(Error::record(format!(
                "{name}:{n}: a record is longer than the {cap}-byte limit; nothing was read past it"
            ))
            .into());
        }
        each(LogLine {
            no: n,
            offset,
            bytes: &line,
            terminated,
        })?;
        offset += got as u64;
    }
}

/// Reads a line-oriented log record by record, each at most `cap` bytes, calling `each` with
/// the 1-based line number and the line (without its newline). Blank lines are passed too.
///
/// # Errors
/// As [`for_each_line`], and a `Record` error for a line that is not UTF-8.
pub fn for_each_record<E: From<Error>>(
    path: &Path,
    cap: u64,
    mut each: impl FnMut(usize, &str) -> Result<(), E>,
) -> Result<(), E> {
    let name = path.display().to_string();
    for_each_line(path, cap, |l| each(l.no, l.text(&name)?))
}

/// The catalog compiled into the binary (`catalogs/uav-px4.toml`).
pub const EMBEDDED_CATALOG: &str = include_str!("../../catalogs/uav-px4.toml");
/// The Crazyflie catalog compiled into the binary (`vehicle.kind = "crazyflie"`).
pub const EMBEDDED_CRAZYFLIE_CATALOG: &str = include_str!("../../catalogs/crazyflie.toml");
/// The mission-contract domain compiled into the binary (`catalogs/contract-uav.toml`).
pub const EMBEDDED_CONTRACT_DOMAIN: &str = include_str!("../../catalogs/contract-uav.toml");

/// Which compiled-in catalog stands in when no file is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddedCatalog {
    /// `uav-px4`.
    UavPx4,
    /// `crazyflie`.
    Crazyflie,
}

/// The one catalog loader: the file at `path` (at most [`MAX_CONFIG_BYTES`], validated), or the
/// compiled-in catalog `embedded` when none is named.
///
/// # Errors
/// [`CatalogError`] when the file cannot be read, is too large or is invalid; the message names
/// the file, the line and the field.
pub fn load_catalog(
    path: Option<&Path>,
    embedded: EmbeddedCatalog,
) -> Result<Catalog, CatalogError> {
    let Some(path) = path else {
        return match embedded {
            EmbeddedCatalog::UavPx4 => Catalog::parse(EMBEDDED_CATALOG, "embedded uav-px4.toml"),
            EmbeddedCatalog::Crazyflie => {
                Catalog::parse(EMBEDDED_CRAZYFLIE_CATALOG, "embedded crazyflie.toml")
            }
        };
    };
    let name = path.display().to_string();
    match read_text_capped(path, MAX_CONFIG_BYTES, "catalog") {
        Ok(src) => Catalog::parse(&src, &name),
        Err(e) => Err(CatalogError::io(
            &name,
            e.to_string().trim_start_matches(&format!("{name}: ")),
        )),
    }
}

/// A contract domain's text and a name for it: the file at `path`, or the compiled-in one.
///
/// # Errors
/// [`ReadError`].
pub fn domain_text(path: Option<&Path>) -> Result<(String, String), ReadError> {
    match path {
        Some(p) => read_text_capped(p, MAX_CONFIG_BYTES, "contract domain")
            .map(|t| (t, p.display().to_string())),
        None => Ok((
            EMBEDDED_CONTRACT_DOMAIN.to_string(),
            "embedded contract-uav.toml".to_string(),
        )),
    }
}

/// The one contract-domain loader: the file at `path` or the compiled-in domain, validated.
///
/// # Errors
/// [`DomainError`] naming the file (one that cannot be read too).
pub fn load_domain(path: Option<&Path>) -> Result<Domain, DomainError> {
    let (text, name) = domain_text(path).map_err(|e| DomainError(e.to_string()))?;
    Domain::parse(&text, &name)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync the directory.
/// On Unix the file is created with `mode`.
///
/// # Errors
/// The I/O error.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// Refuses a secret file (a credential, a key) that group or others can read or write, and one
/// in a directory others can write to (they could replace it), with the `chmod` that fixes it.
///
/// # Errors
/// An [`ErrorKind::Permissions`](crate::error::ErrorKind::Permissions) error naming the file
/// and the command that fixes it (or a `File` error when its metadata cannot be read).
pub fn check_private(path: &Path, what: &str) -> Result<(), Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let name = path.display();
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::file(format!("{name}: {e}"))),
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::new(
                ErrorKind::Permissions,
                format!(
                    "{name}: the {what} is readable or writable by others (mode {mode:o}); run `chmod 600 {name}`"
                ),
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && let Ok(m) = std::fs::metadata(dir)
        {
            let dmode = m.permissions().mode() & 0o777;
            let sticky = m.permissions().mode() & 0o1000 != 0;
            if dmode & 0o002 != 0 && !sticky {
                return Err(Error::new(
                    ErrorKind::Permissions,
                    format!(
                        "{name}: the {what} is in {}, which anyone can write to (mode {dmode:o}), so it could be replaced; run `chmod o-w {}`",
                        dir.display(),
                        dir.display()
                    ),
                ));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (path, what);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), 4096, "state file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("4096-byte limit"),
            "{e}"
        );
        let e: String = for_each_record(Path::new("/dev/zero"), 4096, |_, _| Ok(())).unwrap_err();
        assert!(
            e.contains("/dev/zero:1") && e.contains("4096-byte limit"),
            "{e}"
        );
    }

    #[test]
    fn records_come_one_by_one_with_their_line_numbers() {
        let dir = std::env::temp_dir().join(format!("halo-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("log.jsonl");
        std::fs::write(&p, "a\n\nccc\nlast-without-newline").unwrap();
        let mut got = Vec::new();
        for_each_record(&p, 64, |n, l| {
            got.push((n, l.to_string()));
            Ok::<(), Error>(())
        })
        .unwrap();
        assert_eq!(
            got,
            [
                (1, "a".into()),
                (2, String::new()),
                (3, "ccc".into()),
                (4, "last-without-newline".into())
            ]
        );
        std::fs::write(&p, "short\nthis line is too long\n").unwrap();
        let e: String = for_each_record(&p, 8, |_, _| Ok(())).unwrap_err();
        assert!(e.contains(":2:"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
