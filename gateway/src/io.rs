//! Shell-side helpers that touch files: every file the binary reads goes through a size cap
//! before it is parsed, and line-oriented logs are read record by record with a per-record cap,
//! so a wrong path (`/dev/zero`, a disk image) is a clear error, never unbounded memory.

use std::io::{BufRead, Read};
use std::path::Path;

use crate::core::catalog::{Catalog, CatalogError};

/// The largest catalog, contract domain or state file read, bytes.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// The largest contract workflow file read, bytes.
pub const MAX_WORKFLOW_BYTES: u64 = 8 * 1024 * 1024;
/// The largest single record (line) of a receipt log, bytes.
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// Reads a whole file, refusing it past `cap` bytes without reading further; `what` names the
/// kind of file in the message (`state file`, `response`, ...). `-` reads standard input.
///
/// # Errors
/// A one-line message naming the file: cannot open or read it, or it exceeds the cap.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, String> {
    let name = if path == Path::new("-") {
        "standard input".to_string()
    } else {
        path.display().to_string()
    };
    let mut buf = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().take(cap + 1).read_to_end(&mut buf)
    } else {
        let f = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{name}: no such file"),
            _ => format!("{name}: cannot open: {e}"),
        })?;
        f.take(cap + 1).read_to_end(&mut buf)
    };
    read.map_err(|e| format!("{name}: cannot read: {e}"))?;
    if buf.len() as u64 > cap {
        return Err(format!(
            "{name}: the {what} is larger than the {cap}-byte limit; nothing was read past it"
        ));
    }
    Ok(buf)
}

/// As [`read_capped`], as UTF-8 text.
///
/// # Errors
/// As [`read_capped`], or the file is not UTF-8.
pub fn read_text_capped(path: &Path, cap: u64, what: &str) -> Result<String, String> {
    let b = read_capped(path, cap, what)?;
    String::from_utf8(b).map_err(|e| format!("{}: the {what} is not UTF-8: {e}", path.display()))
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
    /// A message naming the line when it is not UTF-8.
    pub fn text(&self, name: &str) -> Result<&str, String> {
        std::str::from_utf8(self.bytes)
            .map_err(|e| format!("{name}:{}: the record is not UTF-8: {e}", self.no))
    }
}

/// Reads a line-oriented log line by line, each at most `cap` bytes, calling `each` with the
/// line, its number, offset and whether a newline ended it. Blank lines are passed too.
///
/// # Errors
/// A one-line message naming the file and line: cannot open or read, a line over the cap, or
/// the first error `each` returns.
pub fn for_each_line(
    path: &Path,
    cap: u64,
    mut each: impl FnMut(LogLine<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{name}: no such file"),
        _ => format!("{name}: cannot open: {e}"),
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
            .map_err(|e| format!("{name}: cannot read: {e}"))?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        let terminated = line.last() == Some(&b'\n');
        if terminated {
            line.pop();
        } else if line.len() as u64 > cap {
            return Err(format!(
                "{name}:{n}: a record is longer than the {cap}-byte limit; nothing was read past it"
            ));
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
/// A one-line message naming the file and line: cannot read, a record over the cap, not UTF-8,
/// or the first error `each` returns.
pub fn for_each_record(
    path: &Path,
    cap: u64,
    mut each: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<(), String> {
    let name = path.display().to_string();
    for_each_line(path, cap, |l| each(l.no, l.text(&name)?))
}

/// Reads and validates a catalog file (at most [`MAX_CONFIG_BYTES`]).
///
/// # Errors
/// [`CatalogError`] when the file cannot be read, is too large or is invalid; the message names
/// the file, the line and the field.
pub fn load_catalog(path: &Path) -> Result<Catalog, CatalogError> {
    let name = path.display().to_string();
    match read_capped(path, MAX_CONFIG_BYTES, "catalog") {
        Ok(b) => match String::from_utf8(b) {
            Ok(src) => Catalog::parse(&src, &name),
            Err(e) => Err(CatalogError::io(&name, &format!("not UTF-8: {e}"))),
        },
        Err(e) => Err(CatalogError::io(
            &name,
            e.trim_start_matches(&format!("{name}: ")),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_cap() {
        let e = read_capped(Path::new("/dev/zero"), 4096, "state file").unwrap_err();
        assert!(
            e.contains("/dev/zero") && e.contains("4096-byte limit"),
            "{e}"
        );
        let e = for_each_record(Path::new("/dev/zero"), 4096, |_, _| Ok(())).unwrap_err();
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
            Ok(())
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
        let e = for_each_record(&p, 8, |_, _| Ok(())).unwrap_err();
        assert!(e.contains(":2:"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
