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
    openssl_env(dir, args, &[]);
}

fn openssl_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) {
    let out = Command::new("openssl")
        .args(args)
        .envs(env.iter().copied())
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

/// A P-256 key `stem.key` and a certificate request `stem.csr` for subject `CN=cn`.
fn key_and_request(dir: &Path, cn: &str, stem: &str) {
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
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{stem}.key"),
            "-out",
            &format!("{stem}.csr"),
        ],
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
        key_and_request(dir, "localhost", gw);
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

/// A client certificate and its key.
pub struct ClientPair {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Its serial as `openssl x509 -noout -serial` prints it (`serial=…`): the line a
    /// revocation list takes.
    pub serial_line: String,
}

/// docs/deploy.md's client-certificate recipe: a P-256 key and a certificate for subject
/// `CN=cn` signed by `ca` (`"ca"` or `"other-ca"` of [`make_pki`]), for client authentication.
/// `expired`: valid for one day in 2020 (openssl run under libfaketime).
pub fn client_cert(dir: &Path, ca: &str, cn: &str, stem: &str, expired: bool) -> ClientPair {
    std::fs::write(dir.join("client-ext.cnf"), "extendedKeyUsage=clientAuth\n").unwrap();
    let (key, csr, crt) = (
        format!("{stem}.key"),
        format!("{stem}.csr"),
        format!("{stem}.crt"),
    );
    key_and_request(dir, cn, stem);
    let lib = super::libfaketime();
    let env: Vec<(&str, &str)> = match (&lib, expired) {
        (Some(l), true) => vec![
            ("LD_PRELOAD", l.to_str().unwrap()),
            ("FAKETIME", "@2020-01-01 00:00:00"),
        ],
        (None, true) => panic!("an expired certificate needs libfaketime (Debian: faketime)"),
        (_, false) => vec![],
    };
    openssl_env(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            if expired { "1" } else { "30" },
            "-extfile",
            "client-ext.cnf",
            "-out",
            &crt,
        ],
        &env,
    );
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in", &crt])
        .current_dir(dir)
        .output()
        .expect("openssl");
    ClientPair {
        cert: dir.join(&crt),
        key: dir.join(&key),
        serial_line: String::from_utf8_lossy(&out.stdout).trim().to_string(),
    }
}
