//! Client certificates (mTLS): what the gateway reads from one that rustls has verified, the
//! serial numbers revoked, and the verifier that refuses a revoked one at the handshake.
//!
//! A listener with `[listen.tls] client_ca_file` asks every client for a certificate and takes
//! one only when it chains to that CA and is within its validity (rustls's webpki verifier);
//! a client without one may still authenticate with a bearer credential. The principal a
//! certificate names is the one whose `cert_common_name` is the subject's common name
//! (`CN=`). A serial number in the revocation list is refused at the handshake and, for a
//! connection opened before the revocation, at its next request.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_cert::der::Decode as _;
use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
use x509_cert::der::{Tag, Tagged as _};

/// What a verified client certificate says about its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCert {
    /// The subject's common name (`CN=`), when it has one as a UTF-8 or printable string.
    pub common_name: Option<String>,
    /// The serial number, upper-case hex without leading zeros (as `openssl x509 -serial`
    /// prints it).
    pub serial: String,
}

/// The subject's common name and the serial of the DER certificate `der`.
///
/// # Errors
/// The DER does not parse as an X.509 certificate.
pub fn read(der: &[u8]) -> Result<ClientCert, String> {
    let cert = x509_cert::Certificate::from_der(der).map_err(|e| e.to_string())?;
    let tbs = &cert.tbs_certificate;
    let hex: String = tbs
        .serial_number
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let common_name = tbs
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == const_oid_cn())
        .find_map(|atv| match atv.value.tag() {
            Tag::Utf8String => Utf8StringRef::try_from(&atv.value)
                .ok()
                .map(|s| s.as_str().to_string()),
            Tag::PrintableString => PrintableStringRef::try_from(&atv.value)
                .ok()
                .map(|s| s.as_str().to_string()),
            _ => None,
        });
    Ok(ClientCert {
        common_name,
        serial: trimmed(&hex),
    })
}

/// id-at-commonName, 2.5.4.3.
fn const_oid_cn() -> x509_cert::der::asn1::ObjectIdentifier {
    x509_cert::der::asn1::ObjectIdentifier::new_unwrap("2.5.4.3")
}

/// A serial number as a revocation list may write it (`0a:1B`, `000A1B`) in the one form
/// [`read`] gives (`A1B`); `None` when it is not hex. The integer's value is what is compared,
/// so leading zeros and colons do not matter.
pub fn normal_serial(text: &str) -> Option<String> {
    let digits: String = text.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || digits.len() > 64 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(trimmed(&digits))
}

/// Hex digits without their leading zeros, upper case; `0` when nothing is left.
fn trimmed(hex: &str) -> String {
    let t = hex.trim_start_matches('0').to_ascii_uppercase();
    if t.is_empty() { "0".to_string() } else { t }
}

/// The revoked serial numbers the next handshakes refuse, swapped whole by a reload.
#[derive(Debug, Default)]
pub struct RevokedSerials(RwLock<Arc<BTreeSet<String>>>);

impl RevokedSerials {
    /// Whether `serial` ([`normal_serial`]'s form) is revoked.
    pub fn contains(&self, serial: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(serial)
    }

    /// Takes `serials` in place of the list in force.
    pub fn replace(&self, serials: BTreeSet<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(serials);
    }
}

/// rustls's webpki client verifier (chain to the CA, validity, key usage, signatures), then
/// the revocation list: a revoked serial ends the handshake with `certificate_revoked`.
#[derive(Debug)]
pub struct RefuseRevoked {
    /// The webpki verifier every check but revocation is delegated to.
    pub inner: Arc<dyn ClientCertVerifier>,
    /// The serials refused.
    pub revoked: Arc<RevokedSerials>,
}

impl ClientCertVerifier for RefuseRevoked {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        match read(end_entity) {
            Ok(c) if !self.revoked.contains(&c.serial) => Ok(ok),
            Ok(_) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Revoked,
            )),
            Err(_) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::BadEncoding,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_compare_by_value_whatever_their_spelling() {
        assert_eq!(normal_serial("0a:1b").as_deref(), Some("A1B"));
        assert_eq!(normal_serial("000A1B").as_deref(), Some("A1B"));
        assert_eq!(normal_serial("00").as_deref(), Some("0"));
        assert_eq!(normal_serial("xyz"), None);
        assert_eq!(normal_serial(""), None);
        assert_eq!(normal_serial(&"F".repeat(65)), None);
        let r = RevokedSerials::default();
        r.replace(["A1B".to_string()].into());
        assert!(r.contains("A1B") && !r.contains("A1C"));
    }

    #[test]
    fn what_is_not_a_certificate_does_not_read() {
        assert!(read(b"").is_err());
        assert!(read(&[0x30, 0x03, 0x02, 0x01, 0x01]).is_err());
    }
}
