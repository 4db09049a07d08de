//! TLS on the listeners: rustls on ring, TLS 1.2 and 1.3 only, HTTP/1.1 by ALPN, with the
//! certificate chain and its key read from PEM files.
//!
//! A [`Tls`] holds the configuration the next handshake uses. [`Tls::reload`] re-reads the
//! files (on SIGHUP, `cli/run.rs`) and swaps it in only when the new pair loads whole; a bad
//! file keeps the old pair and says why. Connections already open keep the session they
//! negotiated: a reload never drops the flight's streams. With `client_ca_file` the
//! listeners also verify client certificates ([`super::client_cert`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::client_cert::{RefuseRevoked, RevokedSerials};

/// The largest certificate chain or key file read, bytes.
pub const MAX_PEM_BYTES: u64 = 256 * 1024;

/// The certificate chain and key files a listener serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The chain, PEM: the listener's certificate first, then any intermediates.
    pub cert_file: PathBuf,
    /// Its private key, PEM (PKCS #8, PKCS #1 RSA or SEC1 EC).
    pub key_file: PathBuf,
    /// The CA, PEM, whose certificates name client principals (mTLS); none: no client
    /// certificates are asked for.
    pub client_ca_file: Option<PathBuf>,
}

/// Why a certificate chain and key could not be served.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read (missing, unreadable, over [`MAX_PEM_BYTES`]).
    Unreadable {
        /// The reader's words, naming the file.
        why: String,
    },
    /// The certificate file holds no `CERTIFICATE` block, or one that is not valid PEM.
    NoCertificate {
        /// The file.
        file: PathBuf,
    },
    /// The key file holds no private key PEM block (or one that is not valid PEM).
    NoKey {
        /// The file.
        file: PathBuf,
    },
    /// The client CA file holds no certificate a verifier can take as a root.
    NoClientCa {
        /// The file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the pair: the key does not match the certificate, or a kind of key it
    /// cannot sign with.
    Refused {
        /// rustls's words.
        why: String,
    },
}

impl TlsError {
    /// The stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            TlsError::Unreadable { .. } => "TLS_FILE_UNREADABLE",
            TlsError::NoCertificate { .. } => "TLS_NO_CERTIFICATE",
            TlsError::NoKey { .. } => "TLS_NO_KEY",
            TlsError::Refused { .. } => "TLS_KEY_REFUSED",
            TlsError::NoClientCa { .. } => "TLS_NO_CLIENT_CA",
        }
    }
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsError::Unreadable { why } => f.write_str(why),
            TlsError::NoCertificate { file } => write!(
                f,
                "{}: no PEM certificate (a `-----BEGIN CERTIFICATE-----` block) in it",
                file.display()
            ),
            TlsError::NoKey { file } => write!(
                f,
                "{}: no PEM private key (`-----BEGIN PRIVATE KEY-----`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`) in it",
                file.display()
            ),
            TlsError::NoClientCa { file, why } => write!(
                f,
                "{}: no CA certificate to verify client certificates with: {why}",
                file.display()
            ),
            TlsError::Refused { why } => write!(
                f,
                "the certificate and key cannot be served together: {why}"
            ),
        }
    }
}

impl std::error::Error for TlsError {}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    crate::io::read_capped(path, MAX_PEM_BYTES, what)
        .map_err(|e| TlsError::Unreadable { why: e.to_string() })
}

/// The cryptography under every TLS session of the gateway's, the listeners' and the operator
/// client's: ring's cipher suites and key exchanges (X25519, P-256, P-384).
///
/// rustls 0.23.48 marks ring's provider deprecated because it has no post-quantum key exchange
/// (X25519MLKEM768, which aws-lc-rs has). ring stays here on purpose: it builds from plain C
/// and assembly with the system compiler, cross-compiles to the Pi without cmake, and is
/// maintained; what a session protects (bearer credentials that rotate, setpoints that are
/// stale within seconds) is not what harvest-now-decrypt-later attacks are after.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[expect(
        deprecated,
        reason = "ring on purpose: no cmake, plain cross-builds (see above)"
    )]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls configuration of `files`: TLS 1.2 and 1.3 on ring's cipher suites, ALPN
/// `http/1.1`, and with a client CA, client certificates asked for (not required: a bearer
/// credential still authenticates), verified against it and refused when `revoked` lists
/// their serial.
///
/// # Errors
/// [`TlsError`] naming the file or the refusal.
pub fn server_config(
    files: &TlsFiles,
    revoked: &Arc<RevokedSerials>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain_pem = read(&files.cert_file, "TLS certificate file")?;
    let key_pem = read(&files.key_file, "TLS key file")?;
    let verifier = match &files.client_ca_file {
        Some(f) => Some(client_verifier(
            &read(f, "TLS client CA file")?,
            f,
            revoked,
        )?),
        None => None,
    };
    server_config_from_pem(&chain_pem, &key_pem, files, verifier)
}

/// The verifier of client certificates signed by the CA in `ca_pem` (`file` names it in
/// errors), refusing the serials `revoked` lists.
///
/// # Errors
/// [`TlsError::NoClientCa`]: no certificate in it a verifier takes as a root.
pub fn client_verifier(
    ca_pem: &[u8],
    file: &Path,
    revoked: &Arc<RevokedSerials>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let refused = |why: String| TlsError::NoClientCa {
        file: file.to_path_buf(),
        why,
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        let c = c.map_err(|_| refused("not valid PEM".into()))?;
        roots.add(c).map_err(|e| refused(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(refused("no `-----BEGIN CERTIFICATE-----` block".into()));
    }
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto_provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| refused(e.to_string()))?;
    Ok(Arc::new(RefuseRevoked {
        inner,
        revoked: Arc::clone(revoked),
    }))
}

/// As [`server_config`], from the files' bytes; `files` names them in errors.
///
/// # Errors
/// [`TlsError`] naming the file or the refusal.
pub fn server_config_from_pem(
    chain_pem: &[u8],
    key_pem: &[u8],
    files: &TlsFiles,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate {
            file: files.cert_file.clone(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            file: files.cert_file.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey {
        file: files.key_file.clone(),
    })?;
    let builder = ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Refused { why: e.to_string() })?;
    let builder = match clients {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Refused { why: e.to_string() })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The TLS configuration the listeners' next handshakes use, reloadable from its files.
pub struct Tls {
    files: TlsFiles,
    revoked: Arc<RevokedSerials>,
    current: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// Loads `files`; client certificates whose serial `revoked` lists are refused.
    ///
    /// # Errors
    /// [`TlsError`] when they cannot be served.
    pub fn load(files: TlsFiles, revoked: Arc<RevokedSerials>) -> Result<Tls, TlsError> {
        let cfg = server_config(&files, &revoked)?;
        Ok(Tls {
            files,
            revoked,
            current: RwLock::new(cfg),
        })
    }

    /// The files it serves.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// An acceptor for one handshake with the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let cfg = self.current.read().unwrap_or_else(PoisonError::into_inner);
        tokio_rustls::TlsAcceptor::from(Arc::clone(&cfg))
    }

    /// Re-reads the files; the new pair serves the next handshakes only when it loads whole.
    ///
    /// # Errors
    /// [`TlsError`]: the old pair stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let cfg = server_config(&self.files, &self.revoked)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = cfg;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> TlsFiles {
        TlsFiles {
            cert_file: PathBuf::from("gw.crt"),
            key_file: PathBuf::from("gw.key"),
            client_ca_file: None,
        }
    }

    #[test]
    fn what_is_not_a_certificate_and_a_key_is_refused_with_its_code() {
        let f = files();
        let e = server_config_from_pem(b"", b"", &f, None).unwrap_err();
        assert_eq!(e.code(), "TLS_NO_CERTIFICATE");
        assert!(
            e.to_string().starts_with("gw.crt: no PEM certificate"),
            "{e}"
        );
        let e = server_config_from_pem(
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
            b"",
            &f,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "TLS_NO_CERTIFICATE");
        // Well-formed PEM whose bytes are no certificate: rustls refuses the pair.
        let e = server_config_from_pem(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            &f,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "TLS_KEY_REFUSED", "{e}");
        let e = server_config_from_pem(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            b"no key here",
            &f,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code(), "TLS_NO_KEY");
        let e = Tls::load(
            TlsFiles {
                cert_file: PathBuf::from("/nonexistent/gw.crt"),
                key_file: PathBuf::from("/nonexistent/gw.key"),
                client_ca_file: None,
            },
            Arc::default(),
        )
        .err()
        .unwrap();
        assert_eq!(e.code(), "TLS_FILE_UNREADABLE");
        assert!(e.to_string().contains("/nonexistent/gw.crt"), "{e}");
    }
}
