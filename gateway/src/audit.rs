//! The audit trail's authorship: the gateway's Ed25519 audit key, the signed checkpoints it puts
//! into the receipt chain, and the verifier behind `halo-gateway audit verify`.
//!
//! A hash chain shows that a log is internally consistent, not who wrote it: anyone with write
//! access can rewrite a record and recompute every later hash. A checkpoint receipt carries the
//! chain head before it, the number of receipts before it and an Ed25519 signature over both (see
//! [`Checkpoint::message`]); with the public key kept off the vehicle, a rewrite, a deleted
//! record or a cut log no longer verifies.
//!
//! Reading is strict, one canonical encoding per record: each line must be exactly the bytes
//! the gateway writes for the record it parses to (so a duplicate key, an unknown field, a
//! reordered key, whitespace or an escaped character is refused), a blank line is an error, and
//! an unterminated last line that does not parse is reported as a torn tail at its byte offset.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use halo_core::Digest;
use halo_core::receipt::{Checkpoint, Receipt};

use crate::error::{Error, ErrorKind};

/// Hex digits of an Ed25519 key (seed or public key).
const KEY_HEX: usize = 64;
/// The largest key file read, bytes.
const MAX_KEY_FILE: u64 = 4096;

/// The gateway's audit key.
pub struct Signer {
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", self.public_hex())
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (slot, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let v = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        *slot = v(*pair.first()?)? << 4 | v(*pair.get(1)?)?;
    }
    Some(out)
}

impl Signer {
    /// A signer over a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Signer {
        Signer {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// A fresh key from the operating system's random source.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn generate() -> Result<Signer, Error> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| {
            Error::new(
                ErrorKind::System,
                format!("no random source for the audit key: {e}"),
            )
        })?;
        Ok(Signer::from_seed(seed))
    }

    /// Reads a secret key file: one line of 64 lower-case hex digits (the Ed25519 seed). On
    /// Unix the file must not be readable by group or others.
    ///
    /// # Errors
    /// A message naming the file: missing, unreadable, too open, or not a key.
    pub fn load(path: &Path) -> Result<Signer, Error> {
        let name = path.display();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let meta = std::fs::metadata(path).map_err(|e| {
                Error::file(match e.kind() {
                    std::io::ErrorKind::NotFound => format!("{name}: no such file"),
                    _ => format!("{name}: {e}"),
                })
            })?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(Error::new(
                    ErrorKind::Permissions,
                    format!(
                        "{name}: the audit key is readable by others (mode {:o}); run `chmod 600 {name}`",
                        meta.permissions().mode() & 0o777
                    ),
                ));
            }
        }
        crate::io::check_private(path, "audit key")?;
        let text = crate::io::read_text_capped(path, MAX_KEY_FILE, "audit key")?;
        let seed = unhex::<32>(text.trim()).ok_or_else(|| {
            Error::key(format!(
                "{name}: not an audit key (one line of {KEY_HEX} lower-case hex digits)"
            ))
        })?;
        Ok(Signer::from_seed(seed))
    }

    /// Loads the key at `path`, or creates it (mode 0600) with its public key beside it
    /// (`path.pub`) when it does not exist. Returns whether it was created.
    ///
    /// # Errors
    /// As [`Signer::load`], or the key cannot be written.
    pub fn load_or_create(path: &Path) -> Result<(Signer, bool), Error> {
        if path.exists() {
            let s = Signer::load(path)?;
            // Keep the public half beside it, for the operator to copy off the vehicle.
            let pubp = public_path(path);
            if !pubp.exists() {
                s.write_public(&pubp)?;
            }
            return Ok((s, false));
        }
        let s = Signer::generate()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::file(format!("{}: cannot create: {e}", dir.display())))?;
        }
        crate::io::write_atomic(
            path,
            format!("{}\n", hex(s.key.as_bytes())).as_bytes(),
            0o600,
        )
        .map_err(|e| {
            Error::file(format!(
                "{}: cannot write the audit key: {e}",
                path.display()
            ))
        })?;
        s.write_public(&public_path(path))?;
        Ok((s, true))
    }

    /// Writes the public key (64 hex digits and a newline) to `path`.
    ///
    /// # Errors
    /// The I/O error, with the path.
    pub fn write_public(&self, path: &Path) -> Result<(), Error> {
        crate::io::write_atomic(path, format!("{}\n", self.public_hex()).as_bytes(), 0o644).map_err(
            |e| {
                Error::file(format!(
                    "{}: cannot write the public key: {e}",
                    path.display()
                ))
            },
        )
    }

    /// The public key, 64 hex digits.
    pub fn public_hex(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }

    /// A checkpoint over `count` receipts ending in `head`, signed.
    pub fn checkpoint(
        &self,
        head: &Digest,
        count: u64,
        at_ns: u64,
        wall_unix_ms: u64,
        last: bool,
    ) -> Checkpoint {
        let mut cp = Checkpoint {
            count,
            head: *head,
            at_ns,
            wall_unix_ms,
            last,
            key: self.public_hex(),
            sig: String::new(),
        };
        cp.sig = hex(&self.key.sign(&cp.message()).to_bytes());
        cp
    }

    /// The checkpoint receipt that follows `prev` (the last receipt of a finished log).
    pub fn seal_after(&self, prev: Option<&Receipt>, at_ns: u64, wall_unix_ms: u64) -> Receipt {
        let (head, count) = prev.map_or((Digest::default(), 0), |p| (p.hash, p.index + 1));
        let cp = self.checkpoint(&head, count, at_ns, wall_unix_ms, true);
        Receipt::next(prev, at_ns, Some(wall_unix_ms), cp.to_body())
    }
}

/// `KEY.pub` beside `KEY`.
pub fn public_path(secret: &Path) -> PathBuf {
    let mut s = secret.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// A public key given on the command line: 64 hex digits, or a file holding them.
///
/// # Errors
/// A message when it is neither.
pub fn public_key(arg: &str) -> Result<VerifyingKey, Error> {
    let text = if unhex::<32>(arg.trim()).is_some() {
        arg.to_string()
    } else {
        crate::io::read_text_capped(Path::new(arg), MAX_KEY_FILE, "public key")?
    };
    let bytes = unhex::<32>(text.trim()).ok_or_else(|| {
        Error::key(format!(
            "{arg}: not a public key (one line of {KEY_HEX} lower-case hex digits)"
        ))
    })?;
    VerifyingKey::from_bytes(&bytes)
        .map_err(|_| Error::key(format!("{arg}: not a valid Ed25519 public key")))
}

/// Checks a checkpoint's signature under `key`.
///
/// # Errors
/// Why it does not verify.
pub fn verify_checkpoint(cp: &Checkpoint, key: &VerifyingKey) -> Result<(), Error> {
    if cp.key != hex(key.as_bytes()) {
        return Err(Error::key(format!(
            "signed by another key ({}…), not the one given",
            cp.key.get(..8).unwrap_or(&cp.key)
        )));
    }
    let sig =
        unhex::<64>(&cp.sig).ok_or_else(|| Error::key("the signature is not 128 hex digits"))?;
    key.verify_strict(&cp.message(), &Signature::from_bytes(&sig))
        .map_err(|_| Error::key("the signature does not verify"))
}

/// Where a log was cut off mid-record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torn {
    /// The file.
    pub file: PathBuf,
    /// Its line number.
    pub line: usize,
    /// Byte offset of the torn record.
    pub offset: u64,
    /// Bytes of it present.
    pub bytes: usize,
}

/// A log as read: its receipts in order and, when the last file ends mid-record, where.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// The receipts.
    pub receipts: Vec<Receipt>,
    /// The torn tail.
    pub torn: Option<Torn>,
}

/// Why a log could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The file could not be opened or read, or a record is over the size cap: nothing about
    /// the log's content was decided.
    Io(String),
    /// A record is not a canonical receipt: the log does not verify.
    Record(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(m) | ReadError::Record(m) => f.write_str(m),
        }
    }
}

/// Reads receipt files strictly (see the module docs), record by record, each at most
/// [`crate::io::MAX_RECORD_BYTES`].
///
/// # Errors
/// `FILE:LINE: why` for the first line that is not a canonical receipt (a torn last line is
/// not an error here; it is returned in [`Log::torn`]), or the I/O error.
pub fn read_log(paths: &[PathBuf]) -> Result<Log, ReadError> {
    let mut log = Log::default();
    for (k, p) in paths.iter().enumerate() {
        let name = p.display().to_string();
        if let Some(t) = &log.torn {
            return Err(ReadError::Record(format!(
                "{}:{}: a torn record at byte {}, and more files follow it: the files are out of order or one was cut",
                t.file.display(),
                t.line,
                t.offset
            )));
        }
        let last_file = k + 1 == paths.len();
        let mut bad = None;
        let read = crate::io::for_each_line(p, crate::io::MAX_RECORD_BYTES, |l| {
            if log.torn.is_some() {
                // Nothing can follow an unterminated line.
                bad = Some(format!(
                    "{name}:{}: unexpected data after a torn record",
                    l.no
                ));
                return Err(String::new());
            }
            match parse_line(l.bytes) {
                Ok(r) => {
                    log.receipts.push(r);
                    Ok(())
                }
                Err(why) if !l.terminated && last_file && is_torn_record(l.bytes) => {
                    tracing::debug!(%why, "torn tail");
                    log.torn = Some(Torn {
                        file: p.clone(),
                        line: l.no,
                        offset: l.offset,
                        bytes: l.bytes.len(),
                    });
                    Ok(())
                }
                Err(why) => {
                    bad = Some(format!("{name}:{}: {why}", l.no));
                    Err(String::new())
                }
            }
        });
        if let Some(b) = bad {
            return Err(ReadError::Record(b));
        }
        read.map_err(ReadError::Io)?;
    }
    Ok(log)
}

/// Whether an unterminated last line is a record the writer was cut off in: a non-empty
/// beginning of what the gateway writes (every record starts `{"index":`), not other bytes.
pub fn is_torn_record(bytes: &[u8]) -> bool {
    const START: &[u8] = b"{\"index\":";
    !bytes.is_empty() && (bytes.starts_with(START) || START.starts_with(bytes))
}

/// One line, strictly: a receipt whose canonical encoding is exactly these bytes.
///
/// # Errors
/// What is wrong with the line, for people.
pub fn parse_line(bytes: &[u8]) -> Result<Receipt, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::record("a blank line; the gateway never writes one"));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| Error::record(format!("not UTF-8: {e}")))?;
    halo_core::strict::no_duplicate_keys(bytes)
        .map_err(|e| Error::record(format!("not a receipt: {e}")))?;
    let r: Receipt =
        serde_json::from_str(text).map_err(|e| Error::record(format!("not a receipt: {e}")))?;
    if r.to_json_line() != text {
        return Err(Error::record(
            "not in canonical form (key order, whitespace, number or string escapes differ from \
             what the gateway writes), so the bytes are not the ones the hash covers",
        ));
    }
    Ok(r)
}

/// What a verified log contains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Index of the first receipt (non-zero when older files were rotated away).
    pub first: u64,
    /// Receipts.
    pub count: u64,
    /// Checkpoint receipts found.
    pub checkpoints: u64,
    /// With a key: receipts `first..covered` are covered by a valid signature.
    pub covered: Option<u64>,
    /// Whether the last receipt is a final (shutdown) checkpoint.
    pub ends_final: bool,
    /// The keys checkpoints name (hex), in order of first appearance.
    pub keys: Vec<String>,
}

/// Why a log does not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The receipt index.
    pub index: u64,
    /// Why.
    pub why: String,
}

/// Verifies the chain (indices, links, hashes) and every checkpoint's structure (its count and
/// head are the chain's own); with `key`, every checkpoint's signature too, and which receipts
/// a valid signature covers.
///
/// # Errors
/// The first receipt that does not verify.
pub fn verify(receipts: &[Receipt], key: Option<&VerifyingKey>) -> Result<Verified, Failure> {
    let (first, count) =
        halo_core::receipt::verify_chain_from(receipts).map_err(|(i, w)| Failure {
            index: i,
            why: w.to_string(),
        })?;
    let mut v = Verified {
        first,
        count,
        covered: key.map(|_| first),
        ..Verified::default()
    };
    for r in receipts {
        let fail = |why: String| Failure {
            index: r.index,
            why,
        };
        let Some(cp) = Checkpoint::from_body(&r.body).map_err(|e| fail(e.to_string()))? else {
            continue;
        };
        let uncovered = |why: &str| match v.covered {
            Some(c) => format!(
                "{why}; no valid signature covers the receipts from {c} on (the log was rewritten after it was signed)"
            ),
            None => why.to_string(),
        };
        if cp.count != r.index || cp.head != r.prev {
            return Err(fail(uncovered(
                "a checkpoint whose count and head are not the chain's at that point",
            )));
        }
        if !v.keys.contains(&cp.key) {
            v.keys.push(cp.key.clone());
        }
        if let Some(k) = key {
            verify_checkpoint(&cp, k).map_err(|w| fail(uncovered(&format!("checkpoint: {w}"))))?;
            v.covered = Some(r.index + 1);
        }
        v.checkpoints += 1;
    }
    v.ends_final = receipts.last().is_some_and(|r| {
        Checkpoint::from_body(&r.body)
            .ok()
            .flatten()
            .is_some_and(|c| c.last)
    });
    Ok(v)
}

/// A signed head kept off the vehicle (`GET /v1/audit/head`), checked against a log: it must
/// verify under `key` and the log must hold exactly that checkpoint at its index.
///
/// # Errors
/// Why the log does not reach or does not hold it.
pub fn check_head(
    receipts: &[Receipt],
    head: &Checkpoint,
    key: &VerifyingKey,
) -> Result<(), Error> {
    verify_checkpoint(head, key).map_err(|w| Error::key(format!("the kept head: {w}")))?;
    let Some(r) = receipts.iter().find(|r| r.index == head.count) else {
        let last = receipts.last().map_or(0, |r| r.index);
        return Err(Error::record(format!(
            "the log ends at receipt {last}, before the signed head you kept (receipt {}): receipts were cut",
            head.count
        )));
    };
    match Checkpoint::from_body(&r.body) {
        Ok(Some(c)) if c == *head => Ok(()),
        _ => Err(Error::record(format!(
            "receipt {} is not the checkpoint you kept: the log was rewritten",
            head.count
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halo_core::receipt::ReceiptChain;
    use halo_core::time::Nanos;

    fn log(n: u64, signer: &Signer) -> Vec<Receipt> {
        let mut c = ReceiptChain::new();
        for i in 0..n {
            c.push(Nanos(i), serde_json::json!({"kind": "x", "i": i}));
        }
        let rs: Vec<Receipt> = std::iter::from_fn(|| c.seal()).collect();
        let mut rs = rs;
        let last = signer.seal_after(rs.last(), n, 1_700_000_000_000);
        rs.push(last);
        rs
    }

    fn relink(rs: &mut [Receipt]) {
        let mut prev: Option<Receipt> = None;
        for r in rs.iter_mut() {
            let body = r.body.value();
            *r = Receipt::next(prev.as_ref(), r.at_ns, r.wall_unix_ms, body);
            prev = Some(r.clone());
        }
    }

    #[test]
    fn a_signed_log_verifies_and_a_consistent_rewrite_does_not() {
        let s = Signer::from_seed([7; 32]);
        let key = public_key(&s.public_hex()).unwrap();
        let rs = log(5, &s);
        let v = verify(&rs, Some(&key)).unwrap();
        assert_eq!(
            (v.count, v.checkpoints, v.covered, v.ends_final),
            (6, 1, Some(6), true)
        );

        // A body changed and every later hash recomputed: the chain holds, the signature not.
        let mut forged = rs.clone();
        forged[2].body =
            halo_core::receipt::Body::from_value(&serde_json::json!({"kind": "x", "i": 99}));
        relink(&mut forged);
        assert!(halo_core::receipt::verify_chain(&forged).is_ok());
        let e = verify(&forged, Some(&key)).unwrap_err();
        assert_eq!(e.index, 5, "{e:?}");
        // The checkpoint re-signed by another key is named as such.
        let other = Signer::from_seed([9; 32]);
        forged.pop();
        let resigned = other.seal_after(forged.last(), 9, 1);
        forged.push(resigned);
        let e = verify(&forged, Some(&key)).unwrap_err();
        assert!(e.why.contains("another key"), "{e:?}");
        // Without a key the forgery passes: integrity only.
        assert!(verify(&forged, None).is_ok());
    }

    #[test]
    fn a_cut_log_is_not_covered_and_a_kept_head_catches_a_cut_at_a_checkpoint() {
        let s = Signer::from_seed([1; 32]);
        let key = public_key(&s.public_hex()).unwrap();
        let rs = log(4, &s);
        let v = verify(&rs[..3], Some(&key)).unwrap();
        assert_eq!((v.covered, v.ends_final), (Some(0), false));
        let head = Checkpoint::from_body(&rs[4].body).unwrap().unwrap();
        assert!(check_head(&rs, &head, &key).is_ok());
        assert!(
            check_head(&rs[..4], &head, &key)
                .unwrap_err()
                .message()
                .contains("cut")
        );
    }

    #[test]
    fn lines_are_read_strictly() {
        let s = Signer::from_seed([2; 32]);
        let rs = log(1, &s);
        let line = rs[0].to_json_line();
        assert!(parse_line(line.as_bytes()).is_ok());
        for bad in [
            line.replacen("{\"index\"", "{\"index\":0,\"index\"", 1),
            line.replacen('}', ",\"extra\":1}", 1),
            line.replacen(':', ": ", 1),
            line.replacen("\"kind\"", "\"\\u006bind\"", 1),
            String::new(),
            "  ".into(),
        ] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_torn_tail_is_reported_with_its_offset() {
        let s = Signer::from_seed([3; 32]);
        let rs = log(3, &s);
        let d = std::env::temp_dir().join(format!("halo-torn-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.jsonl");
        let mut text: String = rs[..3].iter().map(|r| r.to_json_line() + "\n").collect();
        let offset = text.len() as u64;
        let l3 = rs[3].to_json_line();
        text.push_str(&l3[..l3.len() / 2]);
        std::fs::write(&p, &text).unwrap();
        let log = read_log(std::slice::from_ref(&p)).unwrap();
        assert_eq!(log.receipts.len(), 3);
        let t = log.torn.unwrap();
        assert_eq!((t.line, t.offset, t.bytes), (4, offset, l3.len() / 2));
        // A bad line in the middle is an error, not a torn tail.
        let mid = format!("{}\n{}\n", &l3[..10], rs[0].to_json_line());
        std::fs::write(&p, mid).unwrap();
        assert!(
            read_log(std::slice::from_ref(&p))
                .unwrap_err()
                .to_string()
                .contains(":1:")
        );
        // An unterminated last line that is not the start of a receipt is not a torn record.
        std::fs::write(&p, format!("{}\n\u{fffd}garbage", rs[0].to_json_line())).unwrap();
        assert!(read_log(std::slice::from_ref(&p)).is_err());
        assert!(is_torn_record(b"{\"ind") && !is_torn_record(b"\xff\xfe"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
