//! `halo-gateway operator`: vehicle commands, holds and status against a running gateway, and
//! the signed receipt heads kept off the machine (`heads --follow DIR`).

use std::path::{Path, PathBuf};

use super::{EXIT_ERROR, EXIT_OK, EXIT_PARTIAL};

/// What `halo-gateway operator` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OperatorAction {
    /// Arm the vehicle.
    Arm,
    /// Disarm it (on the ground).
    Disarm,
    /// Take off to `--altitude` above home.
    Takeoff,
    /// Land where it is.
    Land,
    /// Return to launch.
    Rtl,
    /// Stop the current target and hold; no agent action dispatches until released.
    Hold,
    /// Release a hold (and hand the vehicle back to the gateway after an override).
    Release,
    /// The gateway's status.
    Status,
    /// The signed receipt heads (`--follow DIR` keeps each new one).
    Heads,
}

/// How `halo-gateway operator` reaches and proves itself to the gateway.
pub(crate) struct Connection<'a> {
    /// The gateway's base URL.
    pub url: &'a str,
    /// The operator's bearer credential file (`STATE/credentials/operator.token` when absent).
    pub token_file: Option<PathBuf>,
    /// The state directory that holds the default credential file.
    pub state_dir: Option<PathBuf>,
    /// With `https://`: the CA certificate that signed the gateway's.
    pub cacert: Option<&'a Path>,
    /// With mTLS: the operator's client certificate (chain) and private key, PEM; then no
    /// bearer credential is sent (the certificate names the principal).
    pub identity: Option<(&'a Path, &'a Path)>,
}

/// `halo-gateway operator ACTION`: the exit code.
pub(crate) fn operator(
    action: OperatorAction,
    altitude: Option<f64>,
    conn: Connection<'_>,
    follow: Option<&Path>,
    json: bool,
) -> i32 {
    let url = conn.url.trim_end_matches('/');
    let agent = match client(url, conn.cacert, conn.identity) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    // A client certificate is the credential; otherwise the bearer token file.
    let auth = if conn.identity.is_some() {
        Auth(None)
    } else {
        let token_path = conn.token_file.unwrap_or_else(|| {
            let mut c = crate::service::Config::default();
            c.state.dir = conn.state_dir;
            c.state_dir().join("credentials").join("operator.token")
        });
        match crate::io::read_text_capped(&token_path, 4096, "operator credential") {
            Ok(t) => Auth(Some(format!("Bearer {}", t.trim()))),
            Err(e) => {
                eprintln!(
                    "error: operator credential {}: {e} (pass --token-file or --state-dir, or --cert and --key with mTLS)",
                    token_path.display()
                );
                return EXIT_ERROR;
            }
        }
    };
    if action == OperatorAction::Heads {
        return heads(&agent, url, &auth, follow);
    }
    if follow.is_some() {
        eprintln!("error: --follow goes with `heads`");
        return EXIT_ERROR;
    }
    if action == OperatorAction::Status && !json {
        return status(&agent, url, &auth);
    }
    let result = if action == OperatorAction::Status {
        auth.on(agent.get(format!("{url}/v1/status"))).call()
    } else {
        let name = match action {
            OperatorAction::Arm => "arm",
            OperatorAction::Disarm => "disarm",
            OperatorAction::Takeoff => "takeoff",
            OperatorAction::Land => "land",
            OperatorAction::Rtl => "rtl",
            OperatorAction::Hold => "hold",
            OperatorAction::Release => "release",
            OperatorAction::Status | OperatorAction::Heads => "status",
        };
        let body = match (action, altitude) {
            (OperatorAction::Takeoff, Some(a)) => serde_json::json!({"altitude_m": a}),
            (OperatorAction::Takeoff, None) => {
                eprintln!("error: takeoff needs --altitude <m above home>");
                return EXIT_ERROR;
            }
            _ => serde_json::json!({}),
        };
        auth.on(agent.post(format!("{url}/v1/operator/{name}")))
            .send_json(&body)
    };
    match result {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let v: serde_json::Value =
                serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
            if status == 200 {
                if json || action == OperatorAction::Status {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&v).unwrap_or(text.clone())
                    );
                } else {
                    println!("{}", answer_in_words(action, &v));
                }
                EXIT_OK
            } else {
                let err = v.get("error");
                let code = err
                    .and_then(|e| e.get("code"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("?");
                let msg = err
                    .and_then(|e| e.get("message"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or(&text);
                eprintln!("error: {status} {code}: {msg}");
                EXIT_PARTIAL
            }
        }
        Err(e) => {
            eprintln!("error: cannot reach the gateway at {url}: {e}");
            EXIT_ERROR
        }
    }
}

/// The `Authorization` header a request carries: the bearer credential, or none when the
/// client certificate is the credential.
struct Auth(Option<String>);

impl Auth {
    fn on<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.0 {
            Some(v) => r.header("Authorization", v),
            None => r,
        }
    }
}

/// The HTTP client for `url`: over `https://`, TLS 1.2 or 1.3 trusting only `cacert`'s
/// certificates (the gateway's own CA), presenting `identity`'s client certificate when given;
/// no TLS for `http://`.
fn client(
    url: &str,
    cacert: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<ureq::Agent, String> {
    let b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(20)));
    let https = url.starts_with("https://");
    if !https && identity.is_some() {
        return Err(format!(
            "--cert and --key go with an https:// URL (mTLS), not {url}"
        ));
    }
    let b = match (https, cacert) {
        (false, None) => b,
        (false, Some(_)) => return Err(format!("--cacert goes with an https:// URL, not {url}")),
        (true, None) => {
            return Err(format!(
                "{url} is TLS: give --cacert with the CA certificate that signed the gateway's (docs/deploy.md)"
            ));
        }
        (true, Some(f)) => {
            use rustls_pki_types::pem::PemObject as _;
            let pem = crate::io::read_capped(f, 256 * 1024, "CA certificate file")
                .map_err(|e| e.to_string())?;
            let roots: Vec<ureq::tls::Certificate<'static>> =
                rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
                    .map(|c| c.map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()))
                    .collect::<Result<_, _>>()
                    .map_err(|_| format!("{}: not a PEM certificate file", f.display()))?;
            if roots.is_empty() {
                return Err(format!("{}: no PEM certificate in it", f.display()));
            }
            let client_cert = identity.map(client_identity).transpose()?;
            b.tls_config(
                ureq::tls::TlsConfig::builder()
                    .provider(ureq::tls::TlsProvider::Rustls)
                    .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(roots)))
                    .client_cert(client_cert)
                    .unversioned_rustls_crypto_provider(
                        crate::service::infra::tls::crypto_provider(),
                    )
                    .build(),
            )
        }
    };
    Ok(b.build().new_agent())
}

/// The client certificate chain and private key of `--cert` and `--key` (PEM).
fn client_identity((cert, key): (&Path, &Path)) -> Result<ureq::tls::ClientCert, String> {
    use rustls_pki_types::pem::PemObject as _;
    let pem = crate::io::read_capped(cert, 256 * 1024, "client certificate file")
        .map_err(|e| e.to_string())?;
    let chain: Vec<ureq::tls::Certificate<'static>> =
        rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
            .map(|c| c.map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{}: not a PEM certificate file", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no PEM certificate in it", cert.display()));
    }
    let pem =
        crate::io::read_capped(key, 64 * 1024, "client key file").map_err(|e| e.to_string())?;
    let key = ureq::tls::PrivateKey::from_pem(&pem).map_err(|_| {
        format!(
            "{}: not a PEM private key (PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    Ok(ureq::tls::ClientCert::new_with_certs(&chain, key))
}

/// `GET url+path` with the credential: its JSON body, or why not (unreachable, a status other
/// than 200 with the body, a body that is not JSON), naming the path.
fn get_json(
    agent: &ureq::Agent,
    url: &str,
    path: &str,
    auth: &Auth,
) -> Result<serde_json::Value, String> {
    let mut r = auth
        .on(agent.get(format!("{url}{path}")))
        .call()
        .map_err(|e| format!("cannot reach the gateway at {url}: {e}"))?;
    let text = r.body_mut().read_to_string().unwrap_or_default();
    if r.status().as_u16() != 200 {
        return Err(format!("{path}: {} {text}", r.status().as_u16()));
    }
    serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))
}

/// `operator heads`: prints the gateway's signed heads; with `--follow DIR` keeps each new one
/// in `DIR/<log>-<count>.json` (the head with its log and key, written durably) and confirms it
/// to the gateway (`POST /v1/audit/exported`), until interrupted. `halo-gateway audit verify
/// --key KEY --head FILE` checks a log against such a file.
fn heads(agent: &ureq::Agent, url: &str, auth: &Auth, follow: Option<&Path>) -> i32 {
    use serde_json::{Value, json};
    let fetch = || get_json(agent, url, "/v1/audit/head", auth);
    let Some(dir) = follow else {
        return match fetch() {
            Ok(v) => {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                EXIT_OK
            }
            Err(e) => {
                eprintln!("error: {e}");
                EXIT_ERROR
            }
        };
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: {}: {e}", dir.display());
        return EXIT_ERROR;
    }
    eprintln!(
        "keeping the signed heads of {url} in {} (Ctrl-C stops)",
        dir.display()
    );
    let mut warned = false;
    loop {
        match fetch() {
            Ok(v) => {
                warned = false;
                let key = v.get("public_key").cloned().unwrap_or(Value::Null);
                let mut found = Vec::new();
                if let Some(c) = v.get("checkpoint").filter(|c| !c.is_null()) {
                    found.push((v.get("log").cloned().unwrap_or(Value::Null), c.clone()));
                }
                if let Some(p) = v.get("previous").filter(|p| !p.is_null()) {
                    found.push((
                        p.get("log").cloned().unwrap_or(Value::Null),
                        p.get("checkpoint").cloned().unwrap_or(Value::Null),
                    ));
                }
                for (log, cp) in found {
                    let (Some(name), Some(count), Some(head)) = (
                        log.as_str(),
                        cp.get("count").and_then(Value::as_u64),
                        cp.get("head").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let file = dir.join(format!("{name}-{count:012}.json"));
                    if file.exists() {
                        continue;
                    }
                    let body = json!({"log": name, "public_key": key, "checkpoint": cp});
                    if let Err(e) =
                        crate::io::write_atomic(&file, format!("{body}\n").as_bytes(), 0o644)
                    {
                        eprintln!("error: {}: {e}", file.display());
                        return EXIT_ERROR;
                    }
                    let ack = auth
                        .on(agent.post(format!("{url}/v1/audit/exported")))
                        .send_json(json!({"log": name, "count": count, "head": head}));
                    let confirmed = ack.is_ok_and(|r| r.status().as_u16() == 200);
                    println!(
                        "{name} receipt {count}: kept in {}{}",
                        file.display(),
                        if confirmed {
                            ""
                        } else {
                            " (the gateway did not confirm it; it will not delete what it covers)"
                        }
                    );
                }
            }
            Err(e) => {
                if !warned {
                    eprintln!("warning: {e}; retrying every second");
                    warned = true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// A command's answer in words (`--json` prints the gateway's answer as it is).
fn answer_in_words(action: OperatorAction, v: &serde_json::Value) -> String {
    let outcome = v
        .get("outcome")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("sent");
    match action {
        OperatorAction::Hold => {
            "hold: the vehicle holds; no agent action dispatches until `operator release`".into()
        }
        OperatorAction::Release => {
            "release: agent actions may dispatch again; the gateway may fly the vehicle".into()
        }
        OperatorAction::Takeoff => format!(
            "takeoff: {outcome}{}",
            v.get("altitude_m")
                .and_then(serde_json::Value::as_f64)
                .map(|a| format!(" (to {a} m above home)"))
                .unwrap_or_default()
        ),
        other => format!(
            "{}: {}",
            clap::ValueEnum::to_possible_value(&other)
                .map(|p| p.get_name().to_string())
                .unwrap_or_default(),
            outcome.replace('_', " ")
        ),
    }
}

/// `operator status`: a short summary for people — which gateway answered, the vehicle, who
/// flies, the receipts, open obligations and the last decisions (`--json`: the raw status).
fn status(agent: &ureq::Agent, url: &str, auth: &Auth) -> i32 {
    let fetch = |path: &str| get_json(agent, url, path, auth);
    let st = match fetch("/v1/status") {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    // The obligations need a credential the status does not; say so rather than fail.
    let obligations = fetch("/v1/obligations?state=open");
    let now_ms = crate::service::infra::clock::wall_now_ms();
    print!("{}", summary(url, &st, obligations.as_ref().ok(), now_ms));
    if let Err(e) = obligations {
        println!("obligations  not shown: {e}");
    }
    EXIT_OK
}

/// The status summary's text (pure: the tests feed it bodies).
pub(crate) fn summary(
    url: &str,
    st: &serde_json::Value,
    obligations: Option<&serde_json::Value>,
    now_ms: u64,
) -> String {
    use serde_json::Value;
    use std::fmt::Write as _;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "gateway      {url}: halo-gateway {}, boot {}, up {}",
        s(st, "version"),
        n(st, "boot_epoch").map_or("?".into(), |b| b.to_string()),
        n(st, "uptime_s").map_or("?".into(), duration_words)
    );
    let cat = st.get("catalog").cloned().unwrap_or_default();
    let v = st.get("vehicle").cloned().unwrap_or_default();
    let vehicle = vehicle_words(st, &v);
    let _ = writeln!(o, "vehicle      {vehicle}");
    let control = match v.get("control").and_then(Value::as_str) {
        Some("gateway") => "the gateway flies (agent actions dispatch)".to_string(),
        Some("operator_hold") => {
            "operator hold: no agent action dispatches until `operator release`".to_string()
        }
        _ => match v.get("override_mode").and_then(Value::as_str) {
            Some(m) => {
                format!("the pilot took over ({m}); `operator release` hands the vehicle back")
            }
            None => "the operator's: not handed to the gateway yet (a takeoff through the \
                     gateway or `operator release` does)"
                .to_string(),
        },
    };
    let _ = writeln!(o, "control      {control}");
    let rec = st.get("receipts").cloned().unwrap_or_default();
    let receipts = if rec.get("state").and_then(Value::as_str) == Some("refusing") {
        format!(
            "REFUSING: {} (nothing dispatches, the vehicle holds)",
            s(&rec, "reason")
        )
    } else {
        format!(
            "ok, {} written, {} lost{}",
            n(&rec, "written").unwrap_or(0),
            n(&rec, "lost").unwrap_or(0),
            st.get("audit")
                .and_then(|a| a.get("last_checkpoint"))
                .and_then(Value::as_u64)
                .map(|c| format!(", last signed checkpoint at receipt {c}"))
                .unwrap_or_default()
        )
    };
    let _ = writeln!(o, "receipts     {receipts}");
    let _ = writeln!(
        o,
        "work         catalog {} v{}, {} response{} live, {} setpoint{} sent",
        s(&cat, "id"),
        n(&cat, "version").unwrap_or(0),
        n(st, "responses_live").unwrap_or(0),
        if n(st, "responses_live") == Some(1) {
            ""
        } else {
            "s"
        },
        n(&v, "setpoints_sent").unwrap_or(0),
        if n(&v, "setpoints_sent") == Some(1) {
            ""
        } else {
            "s"
        },
    );
    if let Some(Value::Array(obs)) = obligations {
        obligation_lines(&mut o, obs, now_ms);
    }
    let decisions = st
        .get("last_decisions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if decisions.is_empty() {
        let _ = writeln!(o, "decisions    none yet");
    } else {
        let _ = writeln!(o, "decisions    the last {}, newest last:", decisions.len());
        for d in &decisions {
            let ago = n(d, "at_unix_ms")
                .map(|t| {
                    let ms = now_ms.saturating_sub(t);
                    #[allow(clippy::cast_precision_loss, reason = "seconds for people")]
                    let secs = ms as f64 / 1000.0;
                    format!("{secs:>7.1} s ago")
                })
                .unwrap_or_default();
            let text = s(d, "text");
            let _ = writeln!(o, "  {ago}  {}", text.trim_start_matches("HALO: "));
        }
    }
    o
}

/// The vehicle's line of the summary: its link, PX4 mode, arming, landed state, height, battery.
fn vehicle_words(st: &serde_json::Value, v: &serde_json::Value) -> String {
    use serde_json::Value;
    use std::fmt::Write as _;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    let link = if v.get("link_up") == Some(&Value::Bool(true)) {
        "link up"
    } else {
        "LINK DOWN"
    };
    let mut vehicle = format!("{}, {link}", s(st, "vehicle_url"));
    if let Some(m) = v.get("mode").and_then(Value::as_str) {
        let _ = write!(vehicle, ", mode {m}");
    }
    let armed = v.get("armed") == Some(&Value::Bool(true));
    vehicle.push_str(if armed { ", armed" } else { ", disarmed" });
    if let Some(l) = v.get("landed_state").and_then(Value::as_str) {
        let _ = write!(vehicle, ", {l}");
    }
    if let Some(h) = f(v, "height_above_home_m") {
        let _ = write!(vehicle, ", {h:.1} m above home");
    }
    if let Some(b) = f(v, "battery_pct") {
        let _ = write!(vehicle, ", battery {b:.0} %");
    } else if let Some(b) = f(v, "battery_v") {
        let _ = write!(vehicle, ", battery {b:.2} V");
    }
    vehicle
}

/// The open obligations, one line each: what is missing, what a candidate may replace, when it
/// expires.
fn obligation_lines(o: &mut String, obs: &[serde_json::Value], now_ms: u64) {
    use serde_json::Value;
    use std::fmt::Write as _;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    if obs.is_empty() {
        let _ = writeln!(o, "obligations  none open");
    } else {
        let _ = writeln!(o, "obligations  {} open", obs.len());
        for ob in obs {
            let list = |k: &str| {
                ob.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default()
            };
            let left = n(ob, "expires_at_unix_ms")
                .map(|e| {
                    if e > now_ms {
                        format!("expires in {}", duration_words((e - now_ms) / 1000))
                    } else {
                        "expired".into()
                    }
                })
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "  #{} {}/{}: {}; refresh {}; a fresh candidate may replace {}; {left}",
                n(ob, "id").unwrap_or(0),
                s(ob, "response"),
                s(ob, "component"),
                ob.get("reason")
                    .and_then(Value::as_str)
                    .and_then(halo_core::ReasonCode::from_name)
                    .map_or_else(|| s(ob, "reason"), |c| c.description().to_string()),
                list("required"),
                list("scope"),
            );
        }
    }
}

/// Seconds as `42 s`, `3 min 12 s` or `2 h 5 min`.
fn duration_words(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, (secs % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_summary_says_who_answered_and_what_holds_in_words() {
        let st = json!({
            "service": "halo-gateway", "version": "0.1.0", "boot_epoch": 4, "uptime_s": 192,
            "catalog": {"id": "uav-px4", "version": 6}, "vehicle_url": "serial:/dev/ttyAMA0:921600",
            "vehicle": {"link_up": true, "mode": "AUTO.LOITER", "armed": true, "landed_state": "in air",
                        "height_above_home_m": 5.16, "battery_pct": 97.0, "setpoints_sent": 37,
                        "control": "operator", "override_mode": "AUTO.LOITER"},
            "receipts": {"written": 72, "lost": 0, "state": "ok"},
            "audit": {"last_checkpoint": 71},
            "responses_live": 1,
            "last_decisions": [{"at_unix_ms": 1_000_000, "severity": 5,
                                "text": "HALO: pilot took over (AUTO.LOITER), gateway off"}],
        });
        let obs = json!([{"id": 3, "response": "st-2", "component": "b", "reason": "EPOCH_CHANGED",
                          "required": ["map"], "scope": ["b"], "expires_at_unix_ms": 1_012_500}]);
        let text = summary("http://companion.local:9640", &st, Some(&obs), 1_002_500);
        let want = "\
gateway      http://companion.local:9640: halo-gateway 0.1.0, boot 4, up 3 min 12 s
vehicle      serial:/dev/ttyAMA0:921600, link up, mode AUTO.LOITER, armed, in air, 5.2 m above home, battery 97 %
control      the pilot took over (AUTO.LOITER); `operator release` hands the vehicle back
receipts     ok, 72 written, 0 lost, last signed checkpoint at receipt 71
work         catalog uav-px4 v6, 1 response live, 37 setpoints sent
obligations  1 open
  #3 st-2/b: a source epoch differs from the one planned against or admitted with; refresh map; a fresh candidate may replace b; expires in 10 s
decisions    the last 1, newest last:
      2.5 s ago  pilot took over (AUTO.LOITER), gateway off
";
        assert_eq!(text, want);
        assert!(!text.contains("Some("), "no Debug text");
        // A refusing log and a held gateway read as such.
        let mut st = st;
        st["receipts"] = json!({"state": "refusing", "reason": "disk full"});
        st["vehicle"]["control"] = json!("operator_hold");
        let text = summary("u", &st, Some(&json!([])), 0);
        assert!(text.contains("receipts     REFUSING: disk full"), "{text}");
        assert!(text.contains("control      operator hold"), "{text}");
        assert!(text.contains("obligations  none open"), "{text}");
    }
}
