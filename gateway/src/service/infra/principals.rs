//! Who is calling: the named principals, each with a role and a bearer credential, and the
//! revoked ones.
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
    secret: Secret,
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
    /// A revoked principal's.
    Revoked(String),
    /// This principal's.
    Principal(Arc<Principal>),
}

/// The principals in force, and the revoked names.
#[derive(Debug, Default)]
pub struct PrincipalSet {
    list: Vec<Arc<Principal>>,
    revoked: BTreeSet<String>,
}

impl PrincipalSet {
    /// The principal whose credential is `token`, compared in constant time against every
    /// credential (no early exit on a match).
    pub fn identify(&self, token: &[u8]) -> Identified {
        let mut found: Option<&Arc<Principal>> = None;
        for p in &self.list {
            if bool::from(token.ct_eq(p.secret.expose().as_bytes())) {
                found = Some(p);
            }
        }
        match found {
            None => Identified::Unknown,
            Some(p) if self.revoked.contains(&p.name) => Identified::Revoked(p.name.clone()),
            Some(p) => Identified::Principal(Arc::clone(p)),
        }
    }

    /// Whether `name` is in force with this credential (an open stream asks after a reload).
    pub fn holds(&self, p: &Principal) -> bool {
        !self.revoked.contains(&p.name)
            && self.list.iter().any(|q| {
                q.name == p.name && q.role == p.role && q.secret.expose() == p.secret.expose()
            })
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
    /// Its credential's file.
    pub token_file: PathBuf,
    /// A provider's sources (ignored for another role).
    pub sources: Vec<String>,
}

/// One principal as configured: where its credential is.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    role: Role,
    sources: Option<BTreeSet<String>>,
    token_file: PathBuf,
}

/// The principals in force, reloadable from their files.
pub struct Principals {
    entries: Vec<Entry>,
    revoked_file: Option<PathBuf>,
    current: RwLock<Arc<PrincipalSet>>,
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
    /// The three role credentials of `[auth]` as principals `agent`, `provider`, `operator`.
    ///
    /// # Errors
    /// A credential file that cannot be read (they were created at start).
    pub fn from_roles(
        files: &CredentialFiles,
        revoked_file: Option<&Path>,
    ) -> Result<Principals, Error> {
        let entry = |name: &str, role, file: &Path| Entry {
            name: name.to_string(),
            role,
            sources: None,
            token_file: file.to_path_buf(),
        };
        Principals::from_entries(
            vec![
                entry("agent", Role::Agent, &files.agent),
                entry("provider", Role::Provider, &files.provider),
                entry("operator", Role::Operator, &files.operator),
            ],
            revoked_file,
            false,
        )
        .map(|(p, _)| p)
    }

    /// `[[principals]]`, each credential file created (mode 0600, fresh credential) when
    /// absent; also the files created.
    ///
    /// # Errors
    /// A credential file that cannot be read or created, or two principals with one credential.
    pub fn configured(
        list: &[PrincipalSpec],
        revoked_file: Option<&Path>,
    ) -> Result<(Principals, Vec<PathBuf>), Error> {
        let entries = list
            .iter()
            .map(|p| Entry {
                name: p.name.clone(),
                role: p.role,
                sources: (p.role == Role::Provider).then(|| p.sources.iter().cloned().collect()),
                token_file: p.token_file.clone(),
            })
            .collect();
        Principals::from_entries(entries, revoked_file, true)
    }

    fn from_entries(
        entries: Vec<Entry>,
        revoked_file: Option<&Path>,
        create: bool,
    ) -> Result<(Principals, Vec<PathBuf>), Error> {
        let (set, created) = load(&entries, revoked_file, create)?;
        let (generation, _) = watch::channel(0);
        Ok((
            Principals {
                entries,
                revoked_file: revoked_file.map(Path::to_path_buf),
                current: RwLock::new(Arc::new(set)),
                generation,
            },
            created,
        ))
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<PrincipalSet> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
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
                    .any(|q| q.name == p.name && q.secret.expose() != p.secret.expose())
            })
            .map(|p| p.name.clone())
            .collect();
        let revoked = set.revoked.difference(&old.revoked).cloned().collect();
        let out = Reloaded {
            principals: set.list.len(),
            rotated,
            revoked,
        };
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
        let secret = if create {
            let (s, new) = statedir::load_or_create(&e.token_file)?;
            if new {
                created.push(e.token_file.clone());
            }
            s
        } else {
            statedir::load_existing(&e.token_file)?
        };
        if let Some(other) = list.iter().find(|p| p.secret.expose() == secret) {
            return Err(Error::config(format!(
                "principals `{}` and `{}` share one credential; each needs its own",
                other.name, e.name
            )));
        }
        list.push(Arc::new(Principal {
            name: e.name.clone(),
            role: e.role,
            sources: e.sources.clone(),
            secret: Secret::new(secret),
        }));
    }
    let revoked = match revoked_file {
        None => BTreeSet::new(),
        Some(f) => revocation_list(f)?,
    };
    Ok((PrincipalSet { list, revoked }, created))
}

/// A revocation list: principal names, one per line; `#` starts a comment. A missing file is
/// an empty list (nothing revoked yet).
fn revocation_list(path: &Path) -> Result<BTreeSet<String>, Error> {
    if !path.exists() {
        return Ok(BTreeSet::new());
    }
    let text = crate::io::read_text_capped(path, MAX_REVOKED_BYTES, "revocation list")?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
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
            token_file: file,
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
        let (ps, created) = Principals::configured(&list, Some(&revoked)).unwrap();
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
            Identified::Revoked(n) if n == "traffic-feed"
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
        let e = Principals::configured(&list, None).unwrap_err();
        assert!(
            e.message().contains("share one credential"),
            "{}",
            e.message()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
