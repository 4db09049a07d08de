//! The log as lines: each the one canonical encoding of its record, signed checkpoints checked
//! with this checker's own construction of the signed message, and the entry points.

#[allow(
    clippy::wildcard_imports,
    reason = "one module split by part; the parts share its items"
)]
use super::*;

/// The one encoding of a receipt line: `index`, `prev`, `at_ns`, `body` (keys sorted, no
/// whitespace), `wall_unix_ms` when present, `hash`, in that order. `None` when the record has
/// another field or a field of the wrong type.
pub(super) fn canonical_line(rec: &Value) -> Option<String> {
    let m = rec.as_object()?;
    let known = ["index", "prev", "at_ns", "body", "wall_unix_ms", "hash"];
    if m.keys().any(|k| !known.contains(&k.as_str())) {
        return None;
    }
    let num = |k: &str| m.get(k).and_then(Value::as_u64);
    let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let mut out = format!(
        "{{\"index\":{},\"prev\":{},\"at_ns\":{},\"body\":{}",
        num("index")?,
        serde_json::to_string(&text("prev")?).ok()?,
        num("at_ns")?,
        serde_json::to_string(m.get("body")?).ok()?
    );
    if m.contains_key("wall_unix_ms") {
        out.push_str(&format!(",\"wall_unix_ms\":{}", num("wall_unix_ms")?));
    }
    out.push_str(&format!(
        ",\"hash\":{}}}",
        serde_json::to_string(&text("hash")?).ok()?
    ));
    Some(out)
}

/// Whether `line` is the one canonical encoding of the receipt it parses to.
pub fn is_canonical_line(line: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| canonical_line(&v))
        .is_some_and(|c| c == line)
}

/// Audits a receipt log given as its lines (without newlines): each line must be the canonical
/// encoding of its record (so duplicate keys, unknown fields, whitespace and escapes are
/// refused, and a blank line is an error), then as [`audit_signed`].
///
/// # Errors
/// The first line or receipt that does not verify, and why.
pub fn audit_lines(
    domain: &AuditDomain,
    lines: &[&str],
    key: Option<&[u8; 32]>,
) -> Result<AuditReport, AuditError> {
    let mut values = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let fail = |what: &str| AuditError {
            index: i,
            what: what.to_string(),
        };
        if line.trim().is_empty() {
            return Err(fail("a blank line; the gateway never writes one"));
        }
        let v: Value = serde_json::from_str(line).map_err(|e| AuditError {
            index: i,
            what: format!("not a JSON record: {e}"),
        })?;
        if canonical_line(&v).as_deref() != Some(*line) {
            return Err(fail(
                "not the canonical encoding of a receipt (a duplicate key, an unknown field, \
                 reordered keys, whitespace or escapes): the bytes are not the ones hashed",
            ));
        }
        values.push(v);
    }
    audit_signed(domain, &values, key)
}

/// The signed message of a checkpoint body, built from its documented layout: the tag
/// `halo/checkpoint/v1\0`, then `count`, the 32 bytes of `head`, `at_ns`, `wall_unix_ms` as
/// big-endian u64s, then one byte for `final`.
pub(super) fn checkpoint_message(body: &Value) -> Option<Vec<u8>> {
    let head = unhex(body["head"].as_str()?)?;
    let mut m = b"halo/checkpoint/v1\0".to_vec();
    m.extend_from_slice(&body["count"].as_u64()?.to_be_bytes());
    m.extend_from_slice(&head);
    m.extend_from_slice(&body["at_ns"].as_u64()?.to_be_bytes());
    m.extend_from_slice(&body["wall_unix_ms"].as_u64()?.to_be_bytes());
    m.push(u8::from(body["final"].as_bool()?));
    Some(m)
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Checks one checkpoint body at stream position `i` whose receipt links to `prev`.
pub(super) fn check_checkpoint(
    body: &Value,
    i: usize,
    prev: &str,
    key: Option<&[u8; 32]>,
) -> Result<(), String> {
    let fields: BTreeSet<&str> = body
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let want: BTreeSet<&str> = [
        "kind",
        "count",
        "head",
        "at_ns",
        "wall_unix_ms",
        "final",
        "key",
        "sig",
    ]
    .into_iter()
    .collect();
    if fields != want {
        return Err("a checkpoint with other fields than a checkpoint's".into());
    }
    if body["count"].as_u64() != Some(i as u64) || body["head"].as_str() != Some(prev) {
        return Err("a checkpoint whose count and head are not the chain's at that point".into());
    }
    let Some(k) = key else { return Ok(()) };
    if body["key"].as_str() != Some(hex(k).as_str()) {
        return Err("a checkpoint signed by another key than the one given".into());
    }
    let msg = checkpoint_message(body).ok_or("a checkpoint with malformed fields")?;
    let sig: [u8; 64] = body["sig"]
        .as_str()
        .and_then(unhex)
        .and_then(|v| v.try_into().ok())
        .ok_or("a checkpoint signature that is not 128 hex digits")?;
    let vk = ed25519_dalek::VerifyingKey::from_bytes(k).map_err(|_| "not an Ed25519 public key")?;
    vk.verify_strict(&msg, &ed25519_dalek::Signature::from_bytes(&sig))
        .map_err(|_| "the checkpoint's signature does not verify under the given key".to_string())
}

/// Audits a receipt stream (each a parsed JSON receipt line) against a domain, without
/// checking signatures.
///
/// # Errors
/// The first receipt that does not verify, and why.
pub fn audit(domain: &AuditDomain, receipts: &[Value]) -> Result<AuditReport, AuditError> {
    audit_signed(domain, receipts, None)
}

/// Audits a receipt stream against a domain. With `key` (an Ed25519 public key), every receipt
/// must be covered by a checkpoint signed with it and the stream must end with a final one.
///
/// # Errors
/// The first receipt that does not verify, and why.
pub fn audit_signed(
    domain: &AuditDomain,
    receipts: &[Value],
    key: Option<&[u8; 32]>,
) -> Result<AuditReport, AuditError> {
    let mut r = Replay::new(domain);
    let mut prev = "0".repeat(64);
    let mut covered = 0usize;
    let mut ends_final = false;
    for (i, rec) in receipts.iter().enumerate() {
        let fail = |what: String| AuditError { index: i, what };
        // The chain.
        let mut input = json!({
            "at_ns": rec["at_ns"],
            "body": rec["body"],
            "index": rec["index"],
            "prev": rec["prev"],
        });
        if let (Some(w), Some(m)) = (rec.get("wall_unix_ms"), input.as_object_mut()) {
            m.insert("wall_unix_ms".into(), w.clone());
        }
        let bytes = serde_json::to_vec(&input).map_err(|e| fail(e.to_string()))?;
        let hash = hex(&sha(&[b"halo/receipt/v1\0", &bytes]));
        if rec["index"].as_u64() != Some(i as u64)
            || rec["prev"].as_str() != Some(prev.as_str())
            || rec["hash"].as_str() != Some(hash.as_str())
        {
            return Err(fail("hash chain broken".into()));
        }
        let body = &rec["body"];
        if body["kind"] == "checkpoint" {
            check_checkpoint(body, i, &prev, key).map_err(fail)?;
            prev = hash;
            r.report.checkpoints += 1;
            covered = i + 1;
            ends_final = body["final"] == true;
            continue;
        }
        ends_final = false;
        if i == 0 && body.get("request").is_none() && body.get("kind").is_some() {
            return Err(fail(
                "this is a gateway receipt log, not a contract log: check it with \
                 `halo-gateway audit verify` (contract decisions inside it are receipts of kind \
                 `external`, what `contract`)"
                    .into(),
            ));
        }
        prev = hash;
        let req = &body["request"];
        let caller = req["caller"].as_str().unwrap_or("");
        let op = &req["op"];
        let verdict = body["verdict"].as_str().unwrap_or("");
        if Ver::of(&body["before"]) != Some(r.ver) {
            return Err(fail("versions before do not continue the stream".into()));
        }
        let before = r.snapshot();
        // Idempotent replays of a commit key.
        if op["op"] == "commit_effect"
            && let Some(key) = op["key"].as_str()
            && let Some((orig, idx, v)) = r.keys.get(key).cloned()
        {
            let exact = orig == *req;
            let ok = if exact {
                verdict == v && body["replay_of"].as_u64() == Some(idx as u64)
            } else {
                verdict == "deny" && body["replay_of"].is_null()
            };
            if !ok || claimed(body) != before {
                return Err(fail(
                    "an idempotency-key reuse that is not an exact, inert replay".into(),
                ));
            }
            if exact {
                r.report.replays += 1;
            }
            r.report.receipts += 1;
            continue;
        }
        if !body["replay_of"].is_null() {
            return Err(fail("a replay with no original".into()));
        }
        match r.judge(caller, op) {
            Ok(fx) => {
                if verdict != "allow" {
                    return Err(fail(format!(
                        "recorded {verdict}; the checker derives allow"
                    )));
                }
                let edit = fx.edit.clone();
                let reservation = fx.reservation;
                r.apply(fx);
                if body["edit"].as_str().map(String::from) != edit {
                    return Err(fail("edit digest differs".into()));
                }
                if body["reservation"].as_u64() != reservation {
                    return Err(fail("reservation differs".into()));
                }
                if claimed(body) != r.snapshot() {
                    return Err(fail(format!(
                        "state after differs: recorded {} derived {}",
                        claimed(body),
                        r.snapshot()
                    )));
                }
                if op["op"] == "commit_effect"
                    && let Some(k) = op["key"].as_str()
                {
                    r.keys
                        .insert(k.to_string(), (req.clone(), i, verdict.to_string()));
                }
                r.report.allowed += 1;
            }
            Err(why) => {
                if verdict == "allow" {
                    return Err(fail(format!(
                        "recorded allow; the checker derives a refusal: {why}"
                    )));
                }
                if claimed(body) != before {
                    return Err(fail("a refusal changed the configuration".into()));
                }
            }
        }
        r.report.receipts += 1;
    }
    if key.is_some() {
        if covered < receipts.len() {
            return Err(AuditError {
                index: covered,
                what: format!(
                    "receipts {covered}..{} are not covered by a signature of the given key (the log was cut or appended to after its last checkpoint)",
                    receipts.len().saturating_sub(1)
                ),
            });
        }
        if !ends_final && !receipts.is_empty() {
            return Err(AuditError {
                index: receipts.len().saturating_sub(1),
                what: "the log does not end with a final checkpoint: receipts after it may have been cut".into(),
            });
        }
        r.report.signed = !receipts.is_empty();
    }
    r.report.closed = r.lifecycle == Some("closed");
    Ok(r.report)
}
