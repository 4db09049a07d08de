//! Test certificates, made with the `openssl` commands docs/deploy.md gives.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A CA, a second unrelated CA, and a server certificate from each for 127.0.0.1.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub other_cert: PathBuf,
    pub other_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (Debian: apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// docs/deploy.md's recipe: a P-256 CA, then a key, a request and a certificate it signs, with
/// the names a client uses (here 127.0.0.1 and localhost).
pub fn make_pki(dir: &Path) -> Pki {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    for name in ["ca", "other-ca"] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "30",
                "-subj",
                &format!("/CN=halo test {name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        let gw = if name == "ca" {
            "gateway"
        } else {
            "other-gateway"
        };
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                &format!("{gw}.key"),
                "-out",
                &format!("{gw}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{gw}.csr"),
                "-CA",
                &format!("{name}.crt"),
                "-CAkey",
                &format!("{name}.key"),
                "-CAcreateserial",
                "-days",
                "30",
                "-extfile",
                "ext.cnf",
                "-out",
                &format!("{gw}.crt"),
            ],
        );
    }
    Pki {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        cert: dir.join("gateway.crt"),
        key: dir.join("gateway.key"),
        other_cert: dir.join("other-gateway.crt"),
        other_key: dir.join("other-gateway.key"),
    }
}
