//! The one HTTP client of the service's API for everything that plays a party from outside:
//! the flight tests, the evaluation crate's demos and panels, the benchmarks. It speaks only the
//! documented wire forms (docs/run.md): a bearer credential, a JSON body, a JSON answer.

use std::time::Duration;

use serde_json::{Value, json};

/// A client that returns every status as an answer (a 4xx is a result to judge, not an
/// error) and gives up on a request after `timeout` (none: a stream that may stay open).
pub fn agent(timeout: Option<Duration>) -> ureq::Agent {
    let b = ureq::Agent::config_builder().http_status_as_error(false);
    match timeout {
        Some(t) => b.timeout_global(Some(t)),
        None => b.timeout_recv_body(None),
    }
    .build()
    .new_agent()
}

/// As [`agent`], trusting only the PEM certificates `ca_pem` for `https://` URLs (a gateway
/// with `[listen.tls]`, its certificate signed by a test CA).
///
/// # Errors
/// `ca_pem` holds no PEM certificate.
pub fn agent_trusting(
    timeout: Option<Duration>,
    ca_pem: &[u8],
) -> Result<ureq::Agent, ureq::Error> {
    let roots = ureq::tls::parse_pem(ca_pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if roots.is_empty() {
        return Err(ureq::Error::Tls("no PEM certificate in the CA file"));
    }
    #[expect(
        deprecated,
        reason = "ring, as the gateway's own TLS (gateway/src/service/infra/tls.rs)"
    )]
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(roots)))
        .unversioned_rustls_crypto_provider(provider)
        .build();
    let b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(tls);
    Ok(match timeout {
        Some(t) => b.timeout_global(Some(t)),
        None => b.timeout_recv_body(None),
    }
    .build()
    .new_agent())
}

/// One request: `GET`, `POST` or `DELETE` on `url`, with an optional bearer credential and an
/// optional JSON body; the status and the body read as JSON (`null` when it is not).
///
/// # Errors
/// The transport's error: no connection, a timeout. A status is never an error.
pub fn request(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<(u16, Value), ureq::Error> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let resp = match method {
        "POST" => {
            let mut r = agent.post(url).header("Content-Type", "application/json");
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            r.send(body.unwrap_or(b""))
        }
        m => {
            let mut r = if m == "DELETE" {
                agent.delete(url)
            } else {
                agent.get(url)
            };
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            r.call()
        }
    };
    let mut resp = resp?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// A route action in the running example's form: local NED target `[north, east, down, yaw]`,
/// flown for `duration_s`, planned against map epoch `map_epoch` (traffic 41, bounds 3 of
/// `corridor-12`), with certificate `cert`.
pub fn route_action(id: &str, t: [f64; 4], duration_s: f64, map_epoch: u64, cert: &str) -> Value {
    json!({"id": id, "type": "route_action",
           "payload": {"frame": "local_ned", "north_m": t[0], "east_m": t[1], "down_m": t[2],
                       "yaw_deg": t[3], "duration_s": duration_s},
           "support": {"map": {"epoch": map_epoch}, "traffic": {"epoch": 41},
                       "bounds": {"epoch": 3, "provenance": "corridor-12"}},
           "certificate": cert})
}
