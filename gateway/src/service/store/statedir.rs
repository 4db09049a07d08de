//! The state directory: the boot epoch and the role credentials.
//!
//! The boot epoch is bumped and persisted once per start (write to a temporary file, fsync,
//! rename, fsync the directory), never on the dispatch path. Every token the core mints carries
//! it, so no token minted before a restart is valid after it.

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};
use crate::io::{check_private, write_atomic};

/// A secret (a bearer credential): never printed by `Debug` or `Display`, read only through
/// [`Secret::expose`] where it is compared or sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: String) -> Secret {
        Secret(s)
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

/// The three roles and their bearer credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The agent's credential: responses, candidates, reads of its own results.
    pub agent: Secret,
    /// The providers' credential: source updates and certificates.
    pub provider: Secret,
    /// The operator's credential: certificates, holds, vehicle commands.
    pub operator: Secret,
}

/// Where each credential came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialFiles {
    /// Agent credential file.
    pub agent: PathBuf,
    /// Provider credential file.
    pub provider: PathBuf,
    /// Operator credential file.
    pub operator: PathBuf,
    /// True for each file that was created at this start (agent, provider, operator).
    pub created: [bool; 3],
}

/// Reads the previous boot epoch (0 when none), writes the next one durably and returns it.
///
/// # Errors
/// A message naming the file when it cannot be read, parsed or written.
pub fn bump_boot_epoch(dir: &Path) -> Result<u64, Error> {
    let path = dir.join("boot_epoch");
    let prev = match read_small(&path) {
        Ok(s) => s.trim().parse::<u64>().map_err(|e| {
            Error::record(format!(
                "{}: not a boot epoch ({e}); remove it only if you accept that tokens minted \
                 before could be confused with new ones",
                path.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(Error::file(format!("{}: {e}", path.display()))),
    };
    let next = prev
        .checked_add(1)
        .ok_or_else(|| Error::record(format!("{}: boot epoch overflow", path.display())))?;
    write_atomic(&path, format!("{next}\n").as_bytes(), 0o644)
        .map_err(|e| Error::file(format!("{}: {e}", path.display())))?;
    Ok(next)
}

/// A fresh credential: 32 random bytes, hex.
///
/// # Errors
/// A message when the OS has no randomness to give.
pub fn new_credential() -> Result<String, Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("no randomness for a credential: {e}"),
        )
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads a small file (a boot epoch, a credential): at most 4 KiB, so a file replaced by
/// something endless is an error rather than unbounded memory.
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(4097)
        .read_to_end(&mut buf)?;
    if buf.len() > 4096 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "larger than 4096 bytes",
        ));
    }
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A credential file's credential: private to the service's user, at least 16 printable
/// characters. A missing file is an error here (a reload never invents a credential).
///
/// # Errors
/// A message naming the file.
pub(crate) fn load_existing(path: &Path) -> Result<String, Error> {
    check_private(path, "credential file")?;
    let s = read_small(path).map_err(|e| Error::file(format!("{}: {e}", path.display())))?;
    credential_text(path, &s)
}

fn credential_text(path: &Path, s: &str) -> Result<String, Error> {
    let t = s.trim().to_string();
    if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::config(format!(
            "{}: a credential must be at least 16 printable characters",
            path.display()
        )));
    }
    Ok(t)
}

/// A credential file's credential, the file created (mode 0600, a fresh random credential)
/// when it does not exist; `true` when it was created.
///
/// # Errors
/// A message naming the file.
pub(crate) fn load_or_create(path: &Path) -> Result<(String, bool), Error> {
    check_private(path, "credential file")?;
    match read_small(path) {
        Ok(s) => Ok((credential_text(path, &s)?, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = new_credential()?;
            write_atomic(path, format!("{t}\n").as_bytes(), 0o600)
                .map_err(|e| Error::file(format!("{}: {e}", path.display())))?;
            Ok((t, true))
        }
        Err(e) => Err(Error::file(format!("{}: {e}", path.display()))),
    }
}

/// Loads each role's credential from its file, creating (mode 0600) those that do not exist.
///
/// # Errors
/// A message naming the file.
pub fn credentials(
    dir: &Path,
    agent: Option<&Path>,
    provider: Option<&Path>,
    operator: Option<&Path>,
) -> Result<(Credentials, CredentialFiles), Error> {
    let base = dir.join("credentials");
    let pick = |p: Option<&Path>, name: &str| {
        p.map_or_else(|| base.join(format!("{name}.token")), Path::to_path_buf)
    };
    let (fa, fp, fo) = (
        pick(agent, "agent"),
        pick(provider, "provider"),
        pick(operator, "operator"),
    );
    let (a, ca) = load_or_create(&fa)?;
    let (p, cp) = load_or_create(&fp)?;
    let (o, co) = load_or_create(&fo)?;
    if a == p || a == o || p == o {
        return Err(Error::config(
            "two roles share one credential; each role needs its own",
        ));
    }
    Ok((
        Credentials {
            agent: Secret(a),
            provider: Secret(p),
            operator: Secret(o),
        },
        CredentialFiles {
            agent: fa,
            provider: fp,
            operator: fo,
            created: [ca, cp, co],
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("halo-statedir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn boot_epoch_counts_up_across_starts() {
        let d = tmp("epoch");
        assert_eq!(bump_boot_epoch(&d).unwrap(), 1);
        assert_eq!(bump_boot_epoch(&d).unwrap(), 2);
        assert_eq!(bump_boot_epoch(&d).unwrap(), 3);
        std::fs::write(d.join("boot_epoch"), "garbage").unwrap();
        assert!(
            bump_boot_epoch(&d)
                .unwrap_err()
                .message()
                .contains("boot_epoch")
        );
    }

    #[test]
    fn credentials_are_created_private_and_reused() {
        let d = tmp("creds");
        let (c1, f1) = credentials(&d, None, None, None).unwrap();
        assert_eq!(f1.created, [true, true, true]);
        assert_eq!(c1.agent.expose().len(), 64);
        assert_eq!(format!("{c1:?}").matches("redacted").count(), 3);
        assert!(!format!("{c1:?}").contains(c1.agent.expose()));
        assert_ne!(c1.agent, c1.operator);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let m = std::fs::metadata(&f1.operator)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(m & 0o777, 0o600);
        }
        let (c2, f2) = credentials(&d, None, None, None).unwrap();
        assert_eq!(f2.created, [false, false, false]);
        assert_eq!(c1, c2);
        std::fs::write(&f1.agent, "short").unwrap();
        assert!(credentials(&d, None, None, None).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let open = tmp("open");
            std::fs::create_dir_all(open.join("credentials")).unwrap();
            let f = open.join("credentials/agent.token");
            std::fs::write(&f, "0123456789abcdef0123456789abcdef\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
            let e = credentials(&open, None, None, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("chmod 600") && e.contains("agent.token"), "{e}");
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::set_permissions(
                open.join("credentials"),
                std::fs::Permissions::from_mode(0o777),
            )
            .unwrap();
            let e = credentials(&open, None, None, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("chmod o-w"), "{e}");
        }
    }
}
