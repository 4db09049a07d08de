//! `halo-gateway audit show` and `audit verify`: the receipt log for people, and its
//! verification (chain, canonical records, signed checkpoints, a head kept off the machine).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::{EXIT_ERROR, EXIT_OK, EXIT_REJECTED};

/// `halo-gateway audit ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum AuditCmd {
    /// Print a receipt log for people, one line per record: time, index, what was decided.
    Show {
        /// The receipt log file(s), oldest first.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only the decisions: admissions, rejections, phase changes, gate outcomes,
        /// obligations, readmissions, deny-holds and contract decisions (no provider updates).
        #[arg(long)]
        decisions: bool,
    },
    /// Recompute the hash chain and every receipt hash of a JSON-lines receipt log, reading
    /// each record strictly. Give the files of a rotated log in order (`boot-3.jsonl
    /// boot-3.1.jsonl ...`): the chain runs across them. With `--key`, check the signed
    /// checkpoints too: every receipt must be covered by a signature of that key and the log
    /// must end with the gateway's shutdown checkpoint. Exit 0 when it verifies, 2 when not.
    Verify {
        /// The receipt log file(s), oldest first.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The gateway's audit public key: 64 hex digits, or a file holding them
        /// (`STATE/audit-key.pub`; the demo writes `receipts.pub`).
        #[arg(long)]
        key: Option<String>,
        /// A signed head kept off the vehicle: the body of `GET /v1/audit/head` as it is, a
        /// file `halo-gateway operator heads --follow` wrote, or a bare checkpoint. The log must
        /// hold exactly that checkpoint. Needs `--key`.
        #[arg(long, requires = "key")]
        head: Option<PathBuf>,
    },
}

/// One receipt as a line for people.
pub fn receipt_line(r: &halo_core::receipt::Receipt) -> Option<(bool, String)> {
    let body = r.body.value();
    let b = &body;
    let s = |k: &str| b.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
    let code = |k: &str| {
        b.get(k)
            .and_then(serde_json::Value::as_str)
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    };
    let kind = s("kind");
    // The principal that sent a response or an update, when the receipt names it.
    let sender = b.get("sender").and_then(serde_json::Value::as_str);
    let by = sender.map(|p| format!(" from {p}")).unwrap_or_default();
    let (decision, text) = match kind {
        "admitted" | "readmitted" => {
            let comps = halo_core::receipt::recorded_components(b)
                .iter()
                .map(|c| {
                    let why = c
                        .reason
                        .as_ref()
                        .map(|x| format!(" ({x})"))
                        .unwrap_or_default();
                    format!("{} {}{why}", c.id, c.phase)
                })
                .collect::<Vec<_>>()
                .join(", ");
            (true, format!("{kind} {}{by}: {comps}", s("response")))
        }
        "rejected" | "candidate_rejected" => (
            true,
            format!("{kind} {}{by}{}", s("response"), code("code")),
        ),
        "phase" => (
            true,
            format!(
                "{}/{} {}{}",
                s("response"),
                s("component"),
                s("phase"),
                code("reason")
            ),
        ),
        "gate" => (
            true,
            format!(
                "gate {}/{} {}{}{}",
                s("response"),
                s("component"),
                s("outcome"),
                code("code"),
                b.get("effect")
                    .and_then(serde_json::Value::as_str)
                    .map(|e| format!(", effect {e}"))
                    .unwrap_or_default()
            ),
        ),
        "gate_refused" => (true, format!("gate refused a token{}", code("code"))),
        "obligation" => (
            true,
            format!(
                "obligation {} for {}/{}: {}{}",
                b.get("id").map(ToString::to_string).unwrap_or_default(),
                s("response"),
                s("component"),
                s("state"),
                code("reason")
            ),
        ),
        "support_lost" => (
            true,
            format!(
                "support lost while streaming {}/{}{}",
                s("response"),
                s("component"),
                code("code")
            ),
        ),
        "external" => external_line(b),
        "source_update" => (
            false,
            format!(
                "source {} epoch {} from {}{}",
                s("source"),
                b.get("epoch").map(ToString::to_string).unwrap_or_default(),
                s("provenance"),
                // "from" names the provenance here.
                sender
                    .map(|p| format!(" (sent by {p})"))
                    .unwrap_or_default()
            ),
        ),
        "source_summary" => (
            false,
            format!(
                "source {}: {} updates summarized",
                s("source"),
                b.get("updates")
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
        ),
        "rejected_summary" => {
            let n = |k: &str| b.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
            #[allow(clippy::cast_precision_loss, reason = "seconds for people")]
            let over = n("last_at_ns").saturating_sub(n("first_at_ns")) as f64 / 1e9;
            (
                true,
                format!(
                    "rejected {} responses{}, {} to {} over {over:.3} s (summarized)",
                    n("refused"),
                    code("code"),
                    s("first_response"),
                    s("last_response")
                ),
            )
        }
        "update_refused" => (
            true,
            format!("update of {}{by} refused{}", s("source"), code("code")),
        ),
        "certificate" => (
            false,
            format!(
                "certificate {}{}",
                s("id"),
                if b.get("revoked") == Some(&serde_json::Value::Bool(true)) {
                    " revoked"
                } else {
                    ""
                }
            ),
        ),
        "checkpoint" => (
            false,
            format!(
                "{}checkpoint over {} receipts, signed by key {}…",
                if b.get("final") == Some(&serde_json::Value::Bool(true)) {
                    "shutdown "
                } else {
                    ""
                },
                b.get("count").map(ToString::to_string).unwrap_or_default(),
                s("key").get(..8).unwrap_or("?")
            ),
        ),
        _ => (false, kind.to_string()),
    };
    Some((decision, text))
}

/// An `external` receipt (the supervisor's and the operator's decisions, the contract monitor's
/// verdicts) in words, and whether it is a decision.
fn external_line(b: &serde_json::Value) -> (bool, String) {
    let s = |k: &str| b.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
    let what = s("what");
    let detail = b.get("detail").cloned().unwrap_or_default();
    let decision = matches!(
        what,
        "deny_hold"
            | "deny_hold_done"
            | "target_expired"
            | "contract"
            | "operator_hold"
            | "operator_release"
            | "operator_override"
            | "control_granted"
            | "takeoff_stalled"
            | "operator_command"
            | "shutdown"
    );
    let d = |k: &str| {
        detail
            .get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    // The action a hold or an override stopped, when one was streaming.
    let stopped = detail.get("stopped").filter(|v| !v.is_null()).map(|v| {
        let g = |k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or("?");
        format!("; stopped streaming {}/{}", g("response"), g("component"))
    });
    let text = if what == "operator_override" {
        let stopped = stopped.unwrap_or_else(|| "; nothing was streaming".into());
        format!(
            "operator override: PX4 went from {} to {} (not commanded by the gateway){stopped}",
            d("from"),
            d("to")
        )
    } else if what == "operator_release"
        || (what == "operator_hold" && detail.get("held") == Some(&serde_json::Value::Bool(false)))
    {
        "operator release: agent actions may dispatch again".to_string()
    } else if what == "operator_hold" {
        format!(
            "operator hold: agent actions do not dispatch{}",
            stopped.unwrap_or_default()
        )
    } else if what == "target_expired" {
        format!(
            "expiry hold: the certified interval of {}/{} ended, the vehicle holds",
            d("response"),
            d("component")
        )
    } else if what == "control_granted" {
        format!(
            "the operator handed the vehicle to the gateway ({})",
            d("by")
        )
    } else if what == "contract" {
        let body = detail.get("body").cloned().unwrap_or_default();
        let op = body
            .get("request")
            .and_then(|r| r.get("op"))
            .and_then(|o| o.get("op"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?")
            .to_string();
        let verdict = body
            .get("verdict")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?");
        let reason = body
            .get("reason")
            .and_then(serde_json::Value::as_str)
            .map(|x| format!(" ({x})"))
            .unwrap_or_default();
        format!("contract {op}: {verdict}{reason}")
    } else {
        format!("{what} {detail}")
    };
    (decision, text)
}

/// `halo-gateway audit show`: the exit code.
pub(crate) fn audit_show(paths: &[PathBuf], decisions_only: bool) -> i32 {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    for p in paths {
        // A log torn by a crash is shown up to its last whole record, then said to be torn.
        let log = match crate::audit::read_log(std::slice::from_ref(p)) {
            Ok(log) => log,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        };
        let rs = log.receipts;
        for r in &rs {
            let Some((decision, text)) = receipt_line(r) else {
                continue;
            };
            if decisions_only && !decision {
                continue;
            }
            #[allow(clippy::cast_precision_loss, reason = "seconds for people")]
            let t = r.at_ns as f64 / 1e9;
            if let Err(e) = writeln!(out, "{:>6} {t:>10.3}s  {text}", r.index) {
                // A reader that stopped early (`| head`) is not an error of the log.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return EXIT_OK;
                }
                eprintln!("error: cannot write the log's lines: {e}");
                return EXIT_ERROR;
            }
        }
        if let Some(t) = log.torn {
            eprintln!(
                "warning: {}:{}: the last record is torn at byte {} ({} bytes of it, a crash while \
                 writing); shown above is everything before it. `halo-gateway audit verify` \
                 checks the intact part.",
                t.file.display(),
                t.line,
                t.offset,
                t.bytes
            );
        }
    }
    EXIT_OK
}

/// `halo-gateway audit verify`: the exit code.
pub(crate) fn audit_verify(paths: &[PathBuf], key: Option<&str>, head: Option<&Path>) -> i32 {
    let key = match key.map(crate::audit::public_key).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: --key {e}");
            return EXIT_ERROR;
        }
    };
    let kept = match head {
        Some(p) => match crate::io::read_capped(p, crate::io::MAX_CONFIG_BYTES, "signed head")
            .map_err(|e| e.to_string())
            .and_then(|b| kept_heads(&b).map_err(|e| format!("{}: {e}", p.display())))
        {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        },
        None => None,
    };
    let label = if paths.len() == 1 {
        paths
            .first()
            .map_or(String::new(), |p| p.display().to_string())
    } else {
        format!("{} files", paths.len())
    };
    let log = match crate::audit::read_log(paths) {
        Ok(l) => l,
        Err(crate::audit::ReadError::Io(e)) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
        Err(crate::audit::ReadError::Record(e)) => {
            println!("{e}");
            return EXIT_REJECTED;
        }
    };
    let v = match crate::audit::verify(&log.receipts, key.as_ref()) {
        Ok(v) => v,
        Err(f) => {
            println!("{label}: receipt {}: {}", f.index, f.why);
            return EXIT_REJECTED;
        }
    };
    let last = (v.first + v.count).saturating_sub(1);
    if v.count == 0 {
        println!("{label}: no receipts");
    } else if v.first == 0 {
        println!("{label}: {} receipts, chain and hashes verify", v.count);
    } else {
        println!(
            "{label}: receipts {}..{last} ({}) verify; the chain starts at receipt {}: the files \
             before it were rotated away or not given, so the link into the first file is taken \
             as given",
            v.first, v.count, v.first
        );
    }
    let mut ok = report_signatures(&v, key.is_some(), last);
    if let (Some(heads), Some(k)) = (&kept, key.as_ref()) {
        ok &= report_kept_head(paths, heads, &log, k);
    }
    if key.is_some() && v.count == 0 {
        ok = false;
        println!("  no evidence: the log holds no receipts, so nothing is covered by a signature");
    }
    if let Some(t) = &log.torn {
        ok = false;
        println!(
            "  {}:{}: torn record at byte {} ({} bytes, no newline): the log was cut off mid-write; \
             the {} receipts before it are the ones checked above",
            t.file.display(),
            t.line,
            t.offset,
            t.bytes,
            v.count
        );
    }
    if ok { EXIT_OK } else { EXIT_REJECTED }
}

/// What the signatures say of a verified log, printed; false when they leave receipts uncovered.
fn report_signatures(v: &crate::audit::Verified, key_given: bool, last: u64) -> bool {
    let mut ok = true;
    match (key_given, v.covered) {
        (true, Some(covered)) => {
            println!(
                "  {} signed checkpoint{} under the given key",
                v.checkpoints,
                if v.checkpoints == 1 {
                    " verifies"
                } else {
                    "s verify"
                }
            );
            if covered < v.first + v.count {
                ok = false;
                println!(
                    "  receipts {covered}..{last} are not covered by any signature: the log was cut or \
                     appended to after its last checkpoint (or the gateway is still running, or stopped \
                     without its shutdown checkpoint)"
                );
            } else if !v.ends_final && v.count > 0 {
                ok = false;
                println!(
                    "  the log ends at a periodic checkpoint, not the shutdown one: receipts written \
                     after it may have been cut (or the gateway is still running, or crashed); compare \
                     with a signed head kept off the vehicle (--head)"
                );
            } else if v.count > 0 {
                println!(
                    "  every receipt is covered; the log ends with the gateway's shutdown checkpoint"
                );
            }
        }
        _ => {
            println!(
                "  integrity only: without --key this shows the log is internally consistent, not who \
                 wrote it; a rewrite that recomputes every hash passes too{}",
                if v.keys.is_empty() {
                    String::new()
                } else {
                    format!(
                        ". {} signed checkpoint{} present (key {}…): give --key to check them",
                        v.checkpoints,
                        if v.checkpoints == 1 { " is" } else { "s are" },
                        v.keys.first().and_then(|k| k.get(..8)).unwrap_or("")
                    )
                }
            );
        }
    }
    ok
}

/// Whether the log holds the signed head kept off the vehicle (printed either way).
fn report_kept_head(
    paths: &[PathBuf],
    heads: &[(Option<String>, halo_core::receipt::Checkpoint)],
    log: &crate::audit::Log,
    k: &ed25519_dalek::VerifyingKey,
) -> bool {
    let mut ok = true;
    // A body of `GET /v1/audit/head` may carry this start's head and the previous
    // start's: the one for these files is the one whose log they are, else the one that
    // holds.
    let stem = paths
        .first()
        .and_then(|p| crate::service::store::receipts::stem_of(p));
    let named = heads
        .iter()
        .find(|(log, _)| log.is_some() && *log == stem)
        .map(|(_, h)| h);
    let result = match named {
        Some(h) => crate::audit::check_head(&log.receipts, h, k).map(|()| h.count),
        None => heads
            .iter()
            .map(|(_, h)| crate::audit::check_head(&log.receipts, h, k).map(|()| h.count))
            .find(Result::is_ok)
            .unwrap_or_else(|| {
                heads.first().map_or(
                    Err(crate::error::Error::record("no signed head in the file")),
                    |(_, h)| crate::audit::check_head(&log.receipts, h, k).map(|()| h.count),
                )
            }),
    };
    match result {
        Ok(count) => println!("  the log holds the signed head you kept (receipt {count})"),
        Err(e) => {
            ok = false;
            println!("  {e}");
        }
    }
    ok
}

/// The signed heads in a kept file: a bare checkpoint (as `--head` took before), the body of
/// `GET /v1/audit/head` (its `checkpoint` and `previous`), or a file `operator heads --follow`
/// wrote (`{"log", "public_key", "checkpoint"}`); each with the log it names, if any.
fn kept_heads(
    bytes: &[u8],
) -> Result<Vec<(Option<String>, halo_core::receipt::Checkpoint)>, String> {
    use halo_core::receipt::Checkpoint;
    if let Ok(c) = serde_json::from_slice::<Checkpoint>(bytes) {
        return Ok(vec![(None, c)]);
    }
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not a signed head: {e}"))?;
    let mut out = Vec::new();
    let log = v.get("log").and_then(|l| l.as_str()).map(str::to_owned);
    if let Some(c) = v.get("checkpoint").filter(|c| !c.is_null()) {
        let c: Checkpoint = serde_json::from_value(c.clone())
            .map_err(|e| format!("`checkpoint` is not a signed head: {e}"))?;
        out.push((log, c));
    }
    if let Some(p) = v.get("previous").filter(|p| !p.is_null()) {
        let plog = p.get("log").and_then(|l| l.as_str()).map(str::to_owned);
        let c: Checkpoint =
            serde_json::from_value(p.get("checkpoint").cloned().unwrap_or_default())
                .map_err(|e| format!("`previous.checkpoint` is not a signed head: {e}"))?;
        out.push((plog, c));
    }
    if out.is_empty() {
        return Err(
            "no signed head in it (the gateway had signed none yet when it was fetched)".into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use halo_core::receipt::ReceiptChain;
    use halo_core::time::Nanos;
    use serde_json::json;

    fn line(body: serde_json::Value) -> Option<(bool, String)> {
        let mut c = ReceiptChain::new();
        c.push(Nanos(1), body);
        receipt_line(&c.seal()?)
    }

    #[test]
    fn a_compact_admission_and_a_refusal_summary_read_for_people() {
        let admitted = json!({"kind": "admitted", "response": "r-1", "components": {
            "ids": ["e1", "e3", "e2"], "digest": "00",
            "decisions": [
                {"at": [0, 2], "phase": "emitted", "type": "notice"},
                {"at": [1], "phase": "withheld", "reason": "EPOCH_CHANGED", "type": "route_action"}]}});
        assert_eq!(
            line(admitted),
            Some((
                true,
                "admitted r-1: e1 emitted, e3 withheld (EPOCH_CHANGED), e2 emitted".into()
            ))
        );
        let summary = json!({"kind": "rejected_summary", "code": "TOO_MANY_RESPONSES",
            "refused": 50, "first_response": "a-1", "last_response": "a-50",
            "first_at_ns": 1_000_000_000u64, "last_at_ns": 3_500_000_000u64});
        assert_eq!(
            line(summary),
            Some((
                true,
                "rejected 50 responses (TOO_MANY_RESPONSES), a-1 to a-50 over 2.500 s (summarized)"
                    .into()
            ))
        );
    }
}
