//! Who is calling: the named principals, each with a role and a credential (a bearer token
//! from a file, or a client certificate's common name under mTLS), and the revoked ones (by
//! name, or a certificate by serial).
//!
//! With no `[[principals]]` the three role credentials of `[auth]` are three principals named
//! `agent`, `provider` and `operator` (the provider writes every provider-owned source), so a
//! loopback setup is what it always was. With `[[principals]]` only those are taken: several
//! agents and providers, each provider writing the sources it is given and nothing else.
//!
//! [`Principals::reload`] (SIGHUP) re-reads every credential file and the revocation list and
//! swaps them in only when all of them load; the generation it bumps tells open event streams
//! and MCP sessions to look again at whether their principal still holds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use subtle::ConstantTimeEq as _;
use tokio::sync::watch;

use crate::error::Error;
use crate::service::api::routes::Role;
use crate::service::infra::client_cert::{self, ClientCert, RevokedSerials};
use crate::service::store::statedir::{self, CredentialFiles, Secret};

/// The largest revocation list read, bytes.
pub const MAX_REVOKED_BYTES: u64 = 64 * 1024;

/// One principal: a name, a role, a credential and, for a provider, the sources it writes.
#[derive(Debug)]
pub struct Principal {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The sources a provider writes; `None`: every source its role owns (the default
    /// provider).
    sources: Option<BTreeSet<String>>,
    credential: Credential,
}

/// How a principal proves who it is.
#[derive(Debug)]
enum Credential {
    /// A bearer token.
    Token(Secret),
    /// A client certificate with this subject common name; `serial`: the one a connection
    /// presented (none in the configured set).
    Certificate {
        common_name: String,
        serial: Option<String>,
    },
}

impl Credential {
    /// Whether `self` and `other` are one credential (a certificate: one common name, the
    /// serial apart).
    fn same(&self, other: &Credential) -> bool {
        match (self, other) {
            (Credential::Token(a), Credential::Token(b)) => a.expose() == b.expose(),
            (
                Credential::Certificate { common_name: a, .. },
                Credential::Certificate { common_name: b, .. },
            ) => a == b,
            _ => false,
        }
    }
}

impl Principal {
    /// Whether it may write `source` (its role's ownership is checked apart).
    pub fn may_write(&self, source: &str) -> bool {
        self.sources.as_ref().is_none_or(|s| s.contains(source))
    }

    /// The sources it was given, in order (`None`: all its role's).
    pub fn sources(&self) -> Option<Vec<&str>> {
        self.sources
            .as_ref()
            .map(|s| s.iter().map(String::as_str).collect())
    }
}

/// Who a credential belongs to.
#[derive(Debug)]
pub enum Identified {
    /// No principal has it.
    Unknown,
    /// A revoked principal's (its name), or a certificate whose serial is revoked (the name
    /// it would have had, or its common name; and the serial).
    Revoked(String, Option<String>),
    /// This principal's.
    Principal(Arc<Principal>),
}

/// The principals in force, and the revoked names.
#[derive(Debug, Default)]
pub struct PrincipalSet {
    list: Vec<Arc<Principal>>,
    revoked: BTreeSet<String>,
    revoked_serials: BTreeSet<String>,
}

impl PrincipalSet {
    /// The principal whose credential is `token`, compared in constant time against every
    /// credential (no early exit on a match).
    pub fn identify(&self, token: &[u8]) -> Identified {
        let mut found: Option<&Arc<Principal>> = None;
        for p in &self.list {
            if let Credential::Token(s) = &p.credential
                && bool::from(token.ct_eq(s.expose().as_bytes()))
            {
                found = Some(p);
            }
        }
        match found {
            None => Identified::Unknown,
            Some(p) if self.revoked.contains(&p.name) => Identified::Revoked(p.name.clone(), None),
            Some(p) => Identified::Principal(Arc::clone(p)),
        }
    }

    /// The principal a verified client certificate names (by its subject common name), with
    /// the serial it presented; a revoked serial or name is [`Identified::Revoked`].
    pub fn identify_certificate(&self, cert: &ClientCert) -> Identified {
        let Some(cn) = cert.common_name.as_deref() else {
            return Identified::Unknown;
        };
        let found = self.list.iter().find(|p| {
            matches!(&p.credential, Credential::Certificate { common_name, .. } if common_name == cn)
        });
        let name = found.map_or(cn, |p| p.name.as_str()).to_string();
        if self.revoked_serials.contains(&cert.serial) {
            return Identified::Revoked(name, Some(cert.serial.clone()));
        }
        match found {
            None => Identified::Unknown,
            Some(p) if self.revoked.contains(&p.name) => Identified::Revoked(name, None),
            Some(p) => Identified::Principal(Arc::new(Principal {
                name: p.name.clone(),
                role: p.role,
                sources: p.sources.clone(),
                credential: Credential::Certificate {
                    common_name: cn.to_string(),
                    serial: Some(cert.serial.clone()),
                },
            })),
        }
    }

    /// Whether `p` is in force with this credential (an open stream asks after a reload): its
    /// name not revoked, nor the serial of the certificate it came with.
    pub fn holds(&self, p: &Principal) -> bool {
        if let Credential::Certificate {
            serial: Some(s), ..
        } = &p.credential
            && self.revoked_serials.contains(s)
        {
            return false;
        }
        !self.revoked.contains(&p.name)
            && self
                .list
                .iter()
                .any(|q| q.name == p.name && q.role == p.role && q.credential.same(&p.credential))
    }

    /// Every principal, in the configuration's order.
    pub fn list(&self) -> &[Arc<Principal>] {
        &self.list
    }

    /// The revoked names.
    pub fn revoked(&self) -> &BTreeSet<String> {
        &self.revoked
    }
}

/// One principal as the configuration gives it (`[[principals]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrincipalSpec {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its credential.
    pub credential: CredentialSpec,
    /// A provider's sources (ignored for another role).
    pub sources: Vec<String>,
}

/// Where a principal's credential comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSpec {
    /// A bearer token in this file.
    TokenFile(PathBuf),
    /// A client certificate from the listeners' client CA with this subject common name.
    CertCommonName(String),
}

/// One principal as configured: where its credential is.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    role: Role,
    sources: Option<BTreeSet<String>>,
    credential: CredentialSpec,
}

/// The principals in force, reloadable from their files.
pub struct Principals {
    entries: Vec<Entry>,
    revoked_file: Option<PathBuf>,
    current: RwLock<Arc<PrincipalSet>>,
    serials: Arc<RevokedSerials>,
    generation: watch::Sender<u64>,
}

impl std::fmt::Debug for Principals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principals")
            .field("principals", &self.entries.len())
            .finish_non_exhaustive()
    }
}

/// What a reload changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Principals in force.
    pub principals: usize,
    /// Of them, those whose credential changed.
    pub rotated: Vec<String>,
    /// Names revoked now.
    pub revoked: Vec<String>,
}

impl Principals {
    /// The three role credentials of `[auth]` as principals `agent`, `provider`, `operator`;
    /// `serials` is kept to the revocation list's certificate serials (the TLS handshake
    /// reads it).
    ///
    /// # Errors
    /// A credential file that cannot be read (they were created at start).
    pub fn from_roles(
        files: &CredentialFiles,
        revoked_file: Option<&Path>,
        serials: Arc<RevokedSerials>,
    ) -> Result<Principals, Error> {
        let entry = |name: &str, role, file: &Path| Entry {
            name: name.to_string(),
            role,
            sources: None,
            credential: CredentialSpec::TokenFile(file.to_path_buf()),
        };
        Principals::from_entries(
            vec![
                entry("agent", Role::Agent, &files.agent),
                entry("provider", Role::Provider, &files.provider),
                entry("operator", Role::Operator, &files.operator),
            ],
            revoked_file,
            false,
            serials,
        )
        .map(|(p, _)| p)
    }

    /// `[[principals]]`, each token file created (mode 0600, fresh credential) when absent;
    /// also the files created. `serials` as in [`Principals::from_roles`].
    ///
    /// # Errors
    /// A credential file that cannot be read or created, or two principals with one credential.
    pub fn configured(
        list: &[PrincipalSpec],
        revoked_file: Option<&Path>,
        serials: Arc<RevokedSerials>,
    ) -> Result<(Principals, Vec<PathBuf>), Error> {
        let entries = list
            .iter()
            .map(|p| Entry {
                name: p.name.clone(),
                role: p.role,
                sources: (p.role == Role::Provider).then(|| p.sources.iter().cloned().collect()),
                credential: p.credential.clone(),
            })
            .collect();
        Principals::from_entries(entries, revoked_file, true, serials)
    }

    fn from_entries(
        entries: Vec<Entry>,
        revoked_file: Option<&Path>,
        create: bool,
        serials: Arc<RevokedSerials>,
    ) -> Result<(Principals, Vec<PathBuf>), Error> {
        let (set, created) = load(&entries, revoked_file, create)?;
        let (generation, _) = watch::channel(0);
        serials.replace(set.revoked_serials.clone());
        Ok((
            Principals {
                entries,
                revoked_file: revoked_file.map(Path::to_path_buf),
                current: RwLock::new(Arc::new(set)),
                serials,
                generation,
            },
            created,
        ))
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<PrincipalSet> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The revoked certificate serials, for the TLS handshake; a reload replaces them.
    pub fn revoked_serials(&self) -> Arc<RevokedSerials> {
        Arc::clone(&self.serials)
    }

    /// Bumped at each reload that took: an open stream re-checks its principal.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Re-reads every credential file and the revocation list; the new set is taken only when
    /// all of them load (a missing file is an error: a reload never invents a credential).
    ///
    /// # Errors
    /// The first file that does not load; the set in force stays.
    pub fn reload(&self) -> Result<Reloaded, Error> {
        let (set, _) = load(&self.entries, self.revoked_file.as_deref(), false)?;
        let old = self.current();
        let rotated = set
            .list
            .iter()
            .filter(|p| {
                old.list
                    .iter()
                    .any(|q| q.name == p.name && !q.credential.same(&p.credential))
            })
            .map(|p| p.name.clone())
            .collect();
        let revoked = set
            .revoked
            .difference(&old.revoked)
            .cloned()
            .chain(
                set.revoked_serials
                    .difference(&old.revoked_serials)
                    .map(|s| format!("certificate serial {s}")),
            )
            .collect();
        let out = Reloaded {
            principals: set.list.len(),
            rotated,
            revoked,
        };
        self.serials.replace(set.revoked_serials.clone());
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
        Ok(out)
    }
}

/// Each entry's credential and the revocation list.
fn load(
    entries: &[Entry],
    revoked_file: Option<&Path>,
    create: bool,
) -> Result<(PrincipalSet, Vec<PathBuf>), Error> {
    let mut list: Vec<Arc<Principal>> = Vec::with_capacity(entries.len());
    let mut created = Vec::new();
    for e in entries {
        let credential = match &e.credential {
            CredentialSpec::CertCommonName(cn) => Credential::Certificate {
                common_name: cn.clone(),
                serial: None,
            },
            CredentialSpec::TokenFile(file) => Credential::Token(Secret::new(if create {
                let (s, new) = statedir::load_or_create(file)?;
                if new {
                    created.push(file.clone());
                }
                s
            } else {
                statedir::load_existing(file)?
            })),
        };
        if let Some(other) = list.iter().find(|p| p.credential.same(&credential)) {
            return Err(Error::config(format!(
                "principals `{}` and `{}` share one credential; each needs its own",
                other.name, e.name
            )));
        }
        list.push(Arc::new(Principal {
            name: e.name.clone(),
            role: e.role,
            sources: e.sources.clone(),
            credential,
        }));
    }
    let (revoked, revoked_serials) = match revoked_file {
        None => (BTreeSet::new(), BTreeSet::new()),
        Some(f) => revocation_list(f)?,
    };
    Ok((
        PrincipalSet {
            list,
            revoked,
            revoked_serials,
        },
        created,
    ))
}

/// A revocation list, one entry per line, `#` starting a comment: a principal's name, or a
/// client certificate's serial as `serial=<hex>` (what `openssl x509 -noout -serial` prints)
/// or `serial:<hex>`. A missing file is an empty list (nothing revoked yet); a serial that is
/// not hex refuses the whole list.
fn revocation_list(path: &Path) -> Result<(BTreeSet<String>, BTreeSet<String>), Error> {
    if !path.exists() {
        return Ok((BTreeSet::new(), BTreeSet::new()));
    }
    let text = crate::io::read_text_capped(path, MAX_REVOKED_BYTES, "revocation list")?;
    parse_revocations(&text, &path.display().to_string())
}

/// A revocation list's text ([`revocation_list`]'s form): the names and the serials
/// ([`client_cert::normal_serial`]'s form); `origin` names it in errors.
///
/// # Errors
/// A `serial=` line that is not hex, naming its line.
pub fn parse_revocations(
    text: &str,
    origin: &str,
) -> Result<(BTreeSet<String>, BTreeSet<String>), Error> {
    let (mut names, mut serials) = (BTreeSet::new(), BTreeSet::new());
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let serial = line
            .strip_prefix("serial=")
            .or_else(|| line.strip_prefix("serial:"));
        match serial {
            None => {
                names.insert(line.to_string());
            }
            Some(hex) => {
                let s = client_cert::normal_serial(hex.trim()).ok_or_else(|| {
                    Error::config(format!(
                        "{origin}:{}: `{line}` is not a certificate serial (hex, as `openssl x509 -noout -serial` prints it)",
                        n + 1
                    ))
                })?;
                serials.insert(s);
            }
        }
    }
    Ok((names, serials))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("halo-principals-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn cfg(name: &str, role: Role, file: PathBuf, sources: &[&str]) -> PrincipalSpec {
        PrincipalSpec {
            name: name.into(),
            role,
            credential: CredentialSpec::TokenFile(file),
            sources: sources.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn credentials_identify_their_principal_rotate_and_revoke() {
        let d = dir("rotate");
        let list = vec![
            cfg("a", Role::Agent, d.join("a.token"), &[]),
            cfg(
                "traffic-feed",
                Role::Provider,
                d.join("t.token"),
                &["traffic"],
            ),
            cfg("op", Role::Operator, d.join("o.token"), &[]),
        ];
        let revoked = d.join("revoked");
        let (ps, created) = Principals::configured(&list, Some(&revoked), Arc::default()).unwrap();
        assert_eq!(created.len(), 3);
        let read = |f: &str| {
            std::fs::read_to_string(d.join(f))
                .unwrap()
                .trim()
                .to_string()
        };
        let set = ps.current();
        let Identified::Principal(t) = set.identify(read("t.token").as_bytes()) else {
            panic!("the provider's credential names it");
        };
        assert_eq!((t.name.as_str(), t.role), ("traffic-feed", Role::Provider));
        assert!(t.may_write("traffic") && !t.may_write("map"));
        assert!(matches!(
            set.identify(b"not a credential at all"),
            Identified::Unknown
        ));
        // Rotation: a new credential in the file; the old one is refused after the reload.
        let old = read("a.token");
        std::fs::write(d.join("a.token"), "a-new-credential-of-the-agent\n").unwrap();
        let w = ps.watch();
        let r = ps.reload().unwrap();
        assert_eq!(r.rotated, vec!["a".to_string()]);
        assert!(w.has_changed().unwrap());
        let set2 = ps.current();
        assert!(matches!(set2.identify(old.as_bytes()), Identified::Unknown));
        assert!(matches!(
            set2.identify(b"a-new-credential-of-the-agent"),
            Identified::Principal(_)
        ));
        let Identified::Principal(a_old) = set.identify(old.as_bytes()) else {
            panic!()
        };
        assert!(
            !set2.holds(&a_old),
            "a stream of the old credential no longer holds"
        );
        // Revocation by name.
        std::fs::write(&revoked, "# leaked 2026-12-06\ntraffic-feed\n").unwrap();
        let r = ps.reload().unwrap();
        assert_eq!(r.revoked, vec!["traffic-feed".to_string()]);
        let set3 = ps.current();
        assert!(matches!(
            set3.identify(read("t.token").as_bytes()),
            Identified::Revoked(n, None) if n == "traffic-feed"
        ));
        assert!(!set3.holds(&t));
        // A reload that cannot read a file changes nothing.
        std::fs::remove_file(d.join("o.token")).unwrap();
        assert!(ps.reload().is_err());
        assert!(matches!(
            ps.current().identify(b"a-new-credential-of-the-agent"),
            Identified::Principal(_)
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_certificate_names_its_principal_until_its_serial_or_name_is_revoked() {
        let d = dir("certs");
        let list = vec![
            PrincipalSpec {
                name: "agent-m".into(),
                role: Role::Agent,
                credential: CredentialSpec::CertCommonName("agent-m.fleet".into()),
                sources: vec![],
            },
            cfg("op", Role::Operator, d.join("o.token"), &[]),
        ];
        let revoked = d.join("revoked");
        let serials = Arc::new(RevokedSerials::default());
        let (ps, created) =
            Principals::configured(&list, Some(&revoked), Arc::clone(&serials)).unwrap();
        assert_eq!(
            created.len(),
            1,
            "a certificate principal has no token file"
        );
        let cert = |cn: &str, serial: &str| ClientCert {
            common_name: Some(cn.into()),
            serial: serial.into(),
        };
        let Identified::Principal(m) = ps
            .current()
            .identify_certificate(&cert("agent-m.fleet", "1A"))
        else {
            panic!("the certificate names agent-m");
        };
        assert_eq!((m.name.as_str(), m.role), ("agent-m", Role::Agent));
        assert!(matches!(
            ps.current()
                .identify_certificate(&cert("someone-else", "1A")),
            Identified::Unknown
        ));
        assert!(
            matches!(ps.current().identify(b"agent-m.fleet"), Identified::Unknown),
            "a common name is no bearer credential"
        );
        // The serial revoked, as `openssl x509 -noout -serial` prints it, with leading zeros.
        std::fs::write(&revoked, "serial=001A\n").unwrap();
        let r = ps.reload().unwrap();
        assert_eq!(r.revoked, vec!["certificate serial 1A".to_string()]);
        assert!(
            serials.contains("1A"),
            "the handshake's list is the reloaded one"
        );
        assert!(
            !ps.current().holds(&m),
            "a stream of the revoked certificate stops holding"
        );
        assert!(matches!(
            ps.current().identify_certificate(&cert("agent-m.fleet", "1A")),
            Identified::Revoked(n, Some(s)) if n == "agent-m" && s == "1A"
        ));
        // Its reissued certificate (a new serial) is agent-m again.
        let Identified::Principal(m2) = ps
            .current()
            .identify_certificate(&cert("agent-m.fleet", "1B"))
        else {
            panic!("the reissued certificate names agent-m");
        };
        assert!(ps.current().holds(&m2));
        // A serial that is not hex refuses the list; the one in force stays.
        std::fs::write(&revoked, "serial=1A\nserial=not-hex\n").unwrap();
        let e = ps.reload().unwrap_err();
        assert!(
            e.message().contains(":2: `serial=not-hex`"),
            "{}",
            e.message()
        );
        assert!(serials.contains("1A"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn two_principals_with_one_credential_are_refused() {
        let d = dir("shared");
        std::fs::write(d.join("x.token"), "one-credential-for-two-parties\n").unwrap();
        std::fs::write(d.join("y.token"), "one-credential-for-two-parties\n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        for f in ["x.token", "y.token"] {
            std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let list = vec![
            cfg("x", Role::Agent, d.join("x.token"), &[]),
            cfg("y", Role::Operator, d.join("y.token"), &[]),
        ];
        let e = Principals::configured(&list, None, Arc::default()).unwrap_err();
        assert!(
            e.message().contains("share one credential"),
            "{}",
            e.message()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
