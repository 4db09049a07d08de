//! The agent link as JSON lines over standard input and output, for agents that spawn the
//! gateway as a child process (`halo-gateway run --agent stdio`).
//!
//! Each input line is one request; `id` is optional and echoed back:
//!
//! ```text
//! {"id": 1, "op": "submit_response", "response": { ...envelope... }}
//! {"id": 2, "op": "submit_candidate", "obligation": 1, "candidate": { ...candidate... }}
//! {"id": 3, "op": "get_response", "response_id": "resp-0007"}
//! {"id": 4, "op": "obligations"}
//! {"id": 5, "op": "status"}
//! ```
//!
//! Each output line is a reply or an event, exactly the bodies the HTTP link returns:
//!
//! ```text
//! {"reply_to": 1, "ok": true, "result": {...}}
//! {"reply_to": 2, "ok": false, "error": {"code": "OUT_OF_SCOPE", "number": 503, "message": "...", "ids": [...]}}
//! {"event": "obligation_created", "event_id": "1.17", "data": {...}}
//! ```
//!
//! The caller holds the agent role and nothing else: providers and the operator still use HTTP.
//! A line over the response limit is refused (`RESPONSE_TOO_LARGE`) without being kept in
//! memory. End of input stops the gateway cleanly.

use serde::Deserialize;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::service::api::ApiError;
use crate::service::infra::hub::Hub;
use crate::service::task::{Answer, Cmd, Party, RESPONSE_LIMIT};
use halo_core::reason::ReasonCode;

/// One request line. A plain struct rather than a tagged enum, so the envelope stays raw
/// bytes and the core's own parser (duplicate keys, unknown fields) sees it as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    #[serde(default)]
    id: Option<serde_json::Value>,
    op: String,
    #[serde(default)]
    response: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    candidate: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    obligation: Option<u64>,
    #[serde(default)]
    response_id: Option<String>,
}

fn missing(field: &str, op: &str) -> Answer {
    Err(ApiError::new(
        400,
        ReasonCode::INVALID_REQUEST,
        format!("`{op}` needs `{field}`"),
    ))
}

/// Outcome of reading one line.
enum Line {
    Text(Vec<u8>),
    TooLong(usize),
    Eof,
}

/// Reads one line of at most `cap` bytes; a longer line is consumed and dropped, never kept.
async fn read_line_capped<R: AsyncBufRead + Unpin>(r: &mut R, cap: usize) -> std::io::Result<Line> {
    let mut out = Vec::new();
    let mut total = 0usize;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if total == 0 {
                Line::Eof
            } else if total > cap {
                Line::TooLong(total)
            } else {
                Line::Text(out)
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if total + chunk <= cap + 1 {
            out.extend_from_slice(buf.get(..chunk).unwrap_or(&[]));
        } else {
            out.clear();
        }
        total += chunk;
        r.consume(chunk);
        if done {
            if total > cap + 1 {
                return Ok(Line::TooLong(total));
            }
            if out.last() == Some(&b'\n') {
                out.pop();
            }
            return Ok(Line::Text(out));
        }
    }
}

fn reply_line(id: Option<serde_json::Value>, a: Answer) -> String {
    let v = match a {
        Ok(result) => serde_json::json!({"reply_to": id, "ok": true, "result": result}),
        Err(e) => {
            let mut body = e.body();
            if let Some(m) = body.as_object_mut() {
                m.insert("reply_to".into(), id.unwrap_or(serde_json::Value::Null));
                m.insert("ok".into(), false.into());
            }
            body
        }
    };
    v.to_string()
}

async fn call(
    cmds: &mpsc::Sender<Cmd>,
    make: impl FnOnce(oneshot::Sender<Answer>) -> Cmd,
) -> Answer {
    crate::service::task::ask(cmds, make).await
}

async fn handle(cmds: &mpsc::Sender<Cmd>, line: &[u8]) -> String {
    let req: Request = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            return reply_line(
                None,
                Err(ApiError::new(
                    400,
                    ReasonCode::INVALID_REQUEST,
                    format!(
                        "not a request line ({e}); expected {{\"op\": \"submit_response\" | \"submit_candidate\" | \"get_response\" | \"obligations\" | \"status\", ...}}"
                    ),
                )),
            );
        }
    };
    let Request {
        id,
        op,
        response,
        candidate,
        obligation,
        response_id,
    } = req;
    let answer = match op.as_str() {
        "submit_response" => match response {
            Some(r) => {
                let bytes = r.get().as_bytes().to_vec();
                call(cmds, |reply| Cmd::Response {
                    by: Party::Anyone,
                    bytes,
                    reply,
                })
                .await
            }
            None => missing("response", &op),
        },
        "submit_candidate" => match (obligation, candidate) {
            (Some(obligation), Some(c)) => {
                let bytes = c.get().as_bytes().to_vec();
                call(cmds, |reply| Cmd::Candidate {
                    by: Party::Anyone,
                    obligation,
                    bytes,
                    reply,
                })
                .await
            }
            (None, _) => missing("obligation", &op),
            (_, None) => missing("candidate", &op),
        },
        "get_response" => match response_id {
            Some(rid) => {
                call(cmds, |reply| Cmd::GetResponse {
                    by: Party::Anyone,
                    id: rid,
                    reply,
                })
                .await
            }
            None => missing("response_id", &op),
        },
        "obligations" => {
            call(cmds, |reply| Cmd::Obligations {
                by: Party::Anyone,
                reply,
            })
            .await
        }
        "status" => call(cmds, |reply| Cmd::Status { reply }).await,
        other => Err(ApiError::new(
            400,
            ReasonCode::INVALID_REQUEST,
            format!(
                "no operation `{other}`; use submit_response, submit_candidate, get_response, obligations or status"
            ),
        )),
    };
    reply_line(id, answer)
}

/// Serves the agent link on `input`/`output` until end of input or shutdown. Returns when the
/// input ended (the caller then stops the gateway).
pub async fn serve<R, W>(
    input: R,
    mut output: W,
    cmds: mpsc::Sender<Cmd>,
    hub: Hub,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<String>(1024);
    // Events: every one from the start, in order.
    let mut reader = hub.reader(crate::service::infra::hub::Resume::Start);
    let boot = hub.boot();
    let ev_tx = out_tx.clone();
    let mut ev_shutdown = shutdown.clone();
    // How far the event lines have been handed to the writer, so the end of input can wait
    // for every event published before it.
    let forwarded = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let fwd = std::sync::Arc::clone(&forwarded);
    let events = tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                i = reader.next() => i,
                _ = ev_shutdown.changed() => {
                    if *ev_shutdown.borrow() { return; }
                    continue;
                }
            };
            let line = match &item {
                crate::service::infra::hub::Item::Event(e) => format!(
                    "{{\"event\":\"{}\",\"event_id\":\"{boot}.{}\",\"data\":{}}}",
                    e.name, e.id, e.data
                ),
                crate::service::infra::hub::Item::Gap { from, to } => format!(
                    "{{\"event\":\"gap\",\"data\":{{\"boot_epoch\":{boot},\"missed_from\":{from},\"missed_to\":{to}}}}}"
                ),
                crate::service::infra::hub::Item::Reset { .. } => continue,
            };
            if ev_tx.send(line).await.is_err() {
                return;
            }
            fwd.store(reader.last(), std::sync::atomic::Ordering::Release);
        }
    });
    let writer = tokio::spawn(async move {
        while let Some(l) = out_rx.recv().await {
            if output.write_all(l.as_bytes()).await.is_err()
                || output.write_all(b"\n").await.is_err()
                || output.flush().await.is_err()
            {
                break;
            }
        }
    });
    let mut input = input;
    loop {
        let line = tokio::select! {
            l = read_line_capped(&mut input, RESPONSE_LIMIT) => l,
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
                continue;
            }
        };
        match line {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::TooLong(n)) => {
                let r = reply_line(
                    None,
                    Err(ApiError::new(
                        413,
                        ReasonCode::RESPONSE_TOO_LARGE,
                        format!("a {n}-byte line; the limit is {RESPONSE_LIMIT} bytes"),
                    )),
                );
                let _ = out_tx.send(r).await;
            }
            Ok(Line::Text(t)) => {
                if t.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let r = handle(&cmds, &t).await;
                let _ = out_tx.send(r).await;
            }
        }
    }
    // Every event published before the end of input goes out before the link closes.
    let published = hub.next_id().saturating_sub(1);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while forwarded.load(std::sync::atomic::Ordering::Acquire) < published
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    events.abort();
    drop(out_tx);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_dropped_not_kept() {
        let data = format!("{}\nok\n", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(8, data.as_bytes());
        assert!(matches!(
            read_line_capped(&mut r, 10).await.unwrap(),
            Line::TooLong(101)
        ));
        match read_line_capped(&mut r, 10).await.unwrap() {
            Line::Text(t) => assert_eq!(t, b"ok"),
            _ => panic!("the next line is intact"),
        }
        assert!(matches!(
            read_line_capped(&mut r, 10).await.unwrap(),
            Line::Eof
        ));
    }
}
