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

/// `halo-gateway operator ACTION`: the exit code.
pub(crate) fn operator(
    action: OperatorAction,
    altitude: Option<f64>,
    url: &str,
    follow: Option<&Path>,
    token_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
) -> i32 {
    let url = url.trim_end_matches('/');
    let token_path = token_file.unwrap_or_else(|| {
        let mut c = crate::service::Config::default();
        c.state.dir = state_dir;
        c.state_dir().join("credentials").join("operator.token")
    });
    let token = match crate::io::read_text_capped(&token_path, 4096, "operator credential") {
        Ok(t) => t.trim().to_string(),
        Err(e) => {
            eprintln!(
                "error: operator credential {}: {e} (pass --token-file or --state-dir)",
                token_path.display()
            );
            return EXIT_ERROR;
        }
    };
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(20)))
        .build()
        .new_agent();
    let auth = format!("Bearer {token}");
    if action == OperatorAction::Heads {
        return heads(&agent, url, &auth, follow);
    }
    if follow.is_some() {
        eprintln!("error: --follow goes with `heads`");
        return EXIT_ERROR;
    }
    let result = if action == OperatorAction::Status {
        agent
            .get(format!("{url}/v1/status"))
            .header("Authorization", &auth)
            .call()
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
        agent
            .post(format!("{url}/v1/operator/{name}"))
            .header("Authorization", &auth)
            .send_json(&body)
    };
    match result {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let v: serde_json::Value =
                serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
            if status == 200 {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or(text.clone())
                );
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

/// `operator heads`: prints the gateway's signed heads; with `--follow DIR` keeps each new one
/// in `DIR/<log>-<count>.json` (the head with its log and key, written durably) and confirms it
/// to the gateway (`POST /v1/audit/exported`), until interrupted. `halo-gateway audit verify
/// --key KEY --head FILE` checks a log against such a file.
fn heads(agent: &ureq::Agent, url: &str, auth: &str, follow: Option<&Path>) -> i32 {
    use serde_json::{Value, json};
    let fetch = || -> Result<Value, String> {
        let mut r = agent
            .get(format!("{url}/v1/audit/head"))
            .header("Authorization", auth)
            .call()
            .map_err(|e| format!("cannot reach the gateway at {url}: {e}"))?;
        let text = r.body_mut().read_to_string().unwrap_or_default();
        if r.status().as_u16() != 200 {
            return Err(format!("{} {text}", r.status().as_u16()));
        }
        serde_json::from_str(&text).map_err(|e| format!("not a head: {e}"))
    };
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
                    let ack = agent
                        .post(format!("{url}/v1/audit/exported"))
                        .header("Authorization", auth)
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
