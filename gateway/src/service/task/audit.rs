//! The service task's receipts: appended before what they record leaves (the gate's staged
//! setpoints are released only after the pump's receipts were written whole), signed
//! checkpoints, the heads people keep off the machine, and failing closed when the log
//! refuses.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Answer, ApiError, Task};
use halo_core::digest::Digest;
use halo_core::reason::ReasonCode;

/// How the receipts of a start ended, for the exit code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptSummary {
    /// Receipts on disk.
    pub written: u64,
    /// Receipts that could not be written.
    pub lost: u64,
    /// Why the log refused, if it did.
    pub failure: Option<String>,
}

/// The last signed checkpoint of the start before this one, found at the end of its log at
/// start (its shutdown checkpoint after a clean stop), so the operator can keep it: it is
/// written as that start stops, after the last head a follower could fetch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PreviousHead {
    /// Its log (`boot-3`).
    pub log: String,
    /// The checkpoint.
    pub checkpoint: halo_core::receipt::Checkpoint,
}

impl PreviousHead {
    /// The newest receipt file in `dir` that is not `current`'s log, if it ends with a signed
    /// checkpoint.
    pub fn find(dir: &std::path::Path, current: &std::path::Path) -> Option<PreviousHead> {
        use crate::service::store::receipts::{files_in, last_line, stem_of};
        let now = stem_of(current);
        let files = files_in(dir, "");
        let last = files.iter().rev().find(|p| stem_of(p) != now)?;
        let line = last_line(last).ok()??;
        let r = crate::audit::parse_line(&line).ok()?;
        let checkpoint = halo_core::receipt::Checkpoint::from_body(&r.body).ok()??;
        Some(PreviousHead {
            log: stem_of(last)?,
            checkpoint,
        })
    }
}

/// Checkpoint signing: the key, when checkpoints are due, and the latest one.
pub struct Signing {
    signer: crate::audit::Signer,
    every: u64,
    interval: Duration,
    /// Receipts written since the last checkpoint.
    since: u64,
    /// When the oldest of them was written.
    since_at: Option<Instant>,
    latest: Option<halo_core::receipt::Checkpoint>,
    /// The newest checkpoints written this start, `(count, head)`, for the operator's
    /// confirmation that one was kept ([`ISSUED_KEPT`] at most).
    issued: VecDeque<(u64, Digest)>,
    /// Checkpoints written and waiting for their sync (by sync id), oldest first; bounded by
    /// the sync worker's queue.
    pending: VecDeque<(u64, halo_core::receipt::Checkpoint)>,
}

/// Checkpoints remembered for `POST /v1/audit/exported`.
const ISSUED_KEPT: usize = 64;

impl Signing {
    /// Signs with `signer` after at most `every` receipts or `interval` after the oldest
    /// receipt no checkpoint covers yet, and at shutdown.
    pub fn new(signer: crate::audit::Signer, every: u64, interval: Duration) -> Signing {
        Signing {
            signer,
            every: every.max(1),
            interval,
            since: 0,
            since_at: None,
            latest: None,
            issued: VecDeque::new(),
            pending: VecDeque::new(),
        }
    }

    /// The audit public key, hex.
    pub fn public_hex(&self) -> String {
        self.signer.public_hex()
    }

    /// How many receipts the newest checkpoint covers.
    pub fn latest_count(&self) -> Option<u64> {
        self.latest.as_ref().map(|c| c.count)
    }

    /// Whether a checkpoint is due at `t`: the oldest uncovered receipt is `interval` old.
    pub fn due(&self, t: Instant) -> bool {
        self.since_at
            .is_some_and(|at| t.duration_since(at) >= self.interval)
    }
}

impl Task {
    /// The receipt log refused: the supervisor closes dispatch for good and holds the vehicle
    /// (and lands it with `receipts.full_action = "land"`); an alarm for people; the records
    /// saying so go into the space the log's reserve freed. Decides once.
    pub(super) fn fail_closed(&mut self, dropped: &[[u8; 32]]) {
        let now = self.now();
        let why = match self.receipts.as_ref().map(|r| r.health().clone()) {
            Some(crate::service::store::receipts::Health::Refusing(w)) => w.to_string(),
            _ => "receipts could not be written".to_string(),
        };
        self.metrics.receipts_refusing.set(1);
        let withheld: Vec<(halo_core::ids::Id, halo_core::ids::Id)> = dropped
            .iter()
            .filter_map(|b| self.adapter.attribute(b))
            .map(|(r, c)| (r.clone(), c.clone()))
            .collect();
        for (r, c) in &withheld {
            self.gw.stream_ended(r, c);
        }
        if let Some(done) = self
            .sup
            .handle_receipts_failed(&why, dropped, &mut self.adapter)
        {
            let action = if done.landing { "land" } else { "hold" };
            tracing::error!(
                reason = %why,
                withheld = withheld.len(),
                "receipts unavailable: nothing dispatches, the vehicle holds{}; restart with room for receipts",
                if done.landing { " and lands" } else { "" }
            );
            let ids: Vec<_> = withheld
                .iter()
                .map(|(r, c)| json!({"response": r, "component": c}))
                .collect();
            self.gw.record_external(
                now,
                "receipts_unavailable",
                json!({"reason": why, "withheld": ids, "hold": done.hold, "was_streaming": done.was_streaming,
                       "action": action}),
            );
            self.tell(&super::Told::ReceiptsFailed {
                landing: done.landing,
            });
            self.publish(
                "receipts_unavailable",
                &json!({"reason": why, "withheld": ids, "action": action}),
            );
        }
        self.supervised();
        // The records of the hold go out now (into the freed reserve); nothing is staged but
        // holds, which are released whatever the outcome.
        let _ = self.write_receipts();
        self.adapter.discard_staged_targets();
    }

    /// The last receipts could not be written at shutdown: the run's exit says so.
    pub(super) fn record_shutdown_failure(&mut self) {
        self.late_failure = Some("the last receipts could not be written at shutdown".into());
    }

    /// How the receipts ended: on disk, lost, and why the log refused.
    pub fn receipt_summary(&self) -> ReceiptSummary {
        let failure = self
            .sup
            .failed()
            .map(str::to_string)
            .or_else(|| self.late_failure.clone());
        match &self.receipts {
            Some(r) => ReceiptSummary {
                written: r.written(),
                lost: r.lost(),
                failure,
            },
            None => ReceiptSummary {
                written: self.receipts_unlogged,
                lost: 0,
                failure: None,
            },
        }
    }

    pub(super) fn receipts_refusal(&self) -> Option<ApiError> {
        self.sup.failed().map(|why| {
            ApiError::new(
                503,
                ReasonCode::RECEIPTS_UNAVAILABLE,
                format!("receipts cannot be written ({why}); the gateway holds the vehicle and takes no new work until it is restarted with room for receipts"),
            )
        })
    }

    /// Moves the monitor's sealed receipts into the one log, whole (its own chain inside).
    pub(super) fn contract_receipts(&mut self) {
        let now = self.now();
        while let Some(r) = self.monitor.poll_receipt() {
            let v = serde_json::to_value(&r).unwrap_or(serde_json::Value::Null);
            self.gw.record_external(now, "contract", v);
        }
    }

    /// Seals every pending receipt and appends them (a signed checkpoint too when one is due);
    /// true when every one of them was written whole and the log still takes records.
    pub(super) fn write_receipts(&mut self) -> bool {
        let due = self
            .audit
            .as_ref()
            .is_some_and(|a| a.since.saturating_add(self.gw.pending_receipts() as u64) >= a.every);
        if due {
            return self.checkpoint(false);
        }
        let base = self.clock.origin_wall_ms();
        let mut lines = Vec::new();
        while let Some(r) = self
            .gw
            .poll_receipt_with_wall(|at| Some(base.saturating_add(at.as_ms())))
        {
            lines.push(r.to_json_line());
        }
        let n = lines.len() as u64;
        let ok = self.append(&lines);
        if n > 0
            && let Some(a) = self.audit.as_mut()
        {
            a.since += n;
            a.since_at.get_or_insert_with(Instant::now);
        }
        ok
    }

    /// Appends sealed receipts to the log and counts them; true when all were written and the
    /// log still takes records.
    fn append(&mut self, lines: &[String]) -> bool {
        let Some(log) = self.receipts.as_mut() else {
            self.receipts_unlogged += lines.len() as u64;
            return true;
        };
        if lines.is_empty() {
            return log.health() == &crate::service::store::receipts::Health::Ok;
        }
        let errors_before = log.write_errors();
        let a = log.append(lines);
        self.metrics.receipts_written.inc_by(a.written);
        if a.lost > 0 {
            self.metrics.receipts_lost.inc_by(a.lost);
        }
        let errors = log.write_errors() - errors_before;
        if errors > 0 {
            self.metrics.receipt_write_errors.inc_by(errors);
        }
        a.lost == 0 && !a.failed_now && log.health() == &crate::service::store::receipts::Health::Ok
    }

    /// Seals what is pending and a signed checkpoint over the whole chain so far (`last` at
    /// shutdown), writes them and syncs the log. No checkpoint is signed once a receipt was
    /// lost: its signature would cover records that are not on disk. True as
    /// [`Task::write_receipts`].
    pub(super) fn checkpoint(&mut self, last: bool) -> bool {
        let may_sign = self
            .receipts
            .as_ref()
            .is_none_or(crate::service::store::receipts::ReceiptLog::may_sign);
        let now = self.now();
        let base = self.clock.origin_wall_ms();
        let wall = base.saturating_add(now.as_ms());
        let (lines, signed) = match self.audit.as_mut() {
            Some(a) if may_sign => {
                let mut signed = None;
                let rs = self.gw.seal_with_checkpoint(
                    now,
                    |at| Some(base.saturating_add(at.as_ms())),
                    |head, count| {
                        let cp = a.signer.checkpoint(head, count, now.0, wall, last);
                        signed = Some(cp.clone());
                        cp
                    },
                );
                a.since = 0;
                a.since_at = None;
                (
                    rs.iter()
                        .map(halo_core::Receipt::to_json_line)
                        .collect::<Vec<_>>(),
                    signed,
                )
            }
            _ => {
                let rs: Vec<String> = std::iter::from_fn(|| {
                    self.gw
                        .poll_receipt_with_wall(|at| Some(base.saturating_add(at.as_ms())))
                })
                .map(|r| r.to_json_line())
                .collect();
                (rs, None)
            }
        };
        let ok = self.append(&lines);
        if !ok {
            return false;
        }
        // The fsync that makes the checkpoint durable runs on the sync worker (not at
        // shutdown: the exit code waits for it); the head is offered only once it is durable.
        if !last {
            let job = self
                .receipts
                .as_ref()
                .and_then(crate::service::store::receipts::ReceiptLog::detached_sync);
            if let (Some(job), Some(worker)) = (job, self.syncer.as_ref()) {
                self.next_sync += 1;
                let id = self.next_sync;
                match worker.submit(id, job) {
                    Ok(()) => {
                        if let (Some(cp), Some(a)) = (signed, self.audit.as_mut()) {
                            a.pending.push_back((id, cp));
                        }
                        return true;
                    }
                    // The worker is behind: sync in place this once.
                    Err(job) => {
                        let r = job();
                        return self.synced_in_place(r, signed, last);
                    }
                }
            }
        }
        let r = match self.receipts.as_mut() {
            Some(w) => w.sync(),
            None => Ok(()),
        };
        self.synced_in_place(r, signed, last)
    }

    /// A sync of the log done here (in place): the head is offered when it held.
    fn synced_in_place(
        &mut self,
        r: std::io::Result<()>,
        signed: Option<halo_core::receipt::Checkpoint>,
        last: bool,
    ) -> bool {
        if let Err(e) = &r {
            if let Some(log) = self.receipts.as_mut()
                && log.health() == &crate::service::store::receipts::Health::Ok
            {
                log.sync_failed(e);
            }
            return false;
        }
        if let Some(cp) = signed {
            self.publish_head(cp, last);
        }
        true
    }

    /// A signed head is durable: offered at `GET /v1/audit/head` and for the operator's
    /// confirmation that it was kept.
    fn publish_head(&mut self, cp: halo_core::receipt::Checkpoint, last: bool) {
        tracing::debug!(count = cp.count, head = %cp.head.short(), last, "signed checkpoint");
        if let Some(a) = self.audit.as_mut() {
            if a.issued.len() == ISSUED_KEPT {
                a.issued.pop_front();
            }
            a.issued.push_back((cp.count, cp.head));
            a.latest = Some(cp);
        }
    }

    /// The sync worker finished sync `id`: the heads it made durable are offered; a failed
    /// sync fails the log closed as a failed write does.
    pub(super) fn on_synced(&mut self, id: u64, r: std::io::Result<()>) {
        match r {
            Ok(()) => {
                while let Some(cp) = self.audit.as_mut().and_then(|a| {
                    a.pending
                        .front()
                        .is_some_and(|(i, _)| *i <= id)
                        .then(|| a.pending.pop_front())
                        .flatten()
                }) {
                    self.publish_head(cp.1, false);
                }
            }
            Err(e) => {
                if let Some(a) = self.audit.as_mut() {
                    a.pending.clear();
                }
                if let Some(log) = self.receipts.as_mut() {
                    log.sync_failed(&e);
                }
                let dropped = self.adapter.discard_staged_targets();
                self.fail_closed(&dropped);
            }
        }
    }

    /// `GET /v1/audit/head`: the audit key, this start's newest signed checkpoint (only one
    /// whose record is on disk), the previous start's last one, and what the operator confirmed
    /// as kept off the machine. `halo-gateway audit verify --head` reads this body as it is.
    pub(super) fn audit_head(&self) -> serde_json::Value {
        let log = self.receipts.as_ref().map(|r| r.stem().to_string());
        let exported = self.receipts.as_ref().map(|r| {
            let e = r.exported();
            let mut m = serde_json::Map::new();
            if let Some(l) = &log {
                m.insert(l.clone(), e.covered(l).into());
            }
            if let Some(p) = &self.previous_head {
                m.insert(p.log.clone(), e.covered(&p.log).into());
            }
            m
        });
        json!({
            "public_key": self.audit.as_ref().map(|a| a.signer.public_hex()),
            "log": log,
            "checkpoint": self.audit.as_ref().and_then(|a| a.latest.as_ref()),
            "previous": self.previous_head,
            "exported": exported,
        })
    }

    /// `POST /v1/audit/exported`: the operator kept this signed head off the machine, so
    /// rotation may delete what it covers once the log is of an earlier start.
    pub(super) fn head_exported(&mut self, bytes: &[u8]) -> Answer {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Kept {
            log: String,
            count: u64,
            head: String,
        }
        let k: Kept = serde_json::from_slice(bytes).map_err(|err| {
            let e = halo_core::strict::explain(bytes, &err);
            ApiError::new(
                400,
                ReasonCode::INVALID_REQUEST,
                format!("expected {{\"log\", \"count\", \"head\"}} of a signed head: {e}"),
            )
        })?;
        let head = Digest::from_hex(&k.head)
            .map_err(|e| ApiError::new(400, ReasonCode::INVALID_REQUEST, format!("`head`: {e}")))?;
        let ours = self.receipts.as_ref().map(|r| r.stem().to_string());
        let known = if Some(&k.log) == ours.as_ref() {
            self.audit
                .as_ref()
                .is_some_and(|a| a.issued.iter().any(|(c, h)| *c == k.count && *h == head))
        } else {
            self.previous_head.as_ref().is_some_and(|p| {
                p.log == k.log && p.checkpoint.count == k.count && p.checkpoint.head == head
            })
        };
        if !known {
            return Err(ApiError::new(
                404,
                ReasonCode::NOT_FOUND,
                format!(
                    "`{}` has no signed head at receipt {} with that chain head that this gateway issued or found",
                    k.log, k.count
                ),
            ));
        }
        let Some(log) = self.receipts.as_mut() else {
            return Err(ApiError::new(
                404,
                ReasonCode::NOT_FOUND,
                "this gateway keeps no receipt log",
            ));
        };
        let moved = log.mark_exported(&k.log, k.count + 1).map_err(|e| {
            ApiError::new(
                503,
                ReasonCode::RECEIPTS_UNAVAILABLE,
                format!("cannot record the exported head: {e}"),
            )
        })?;
        let now = self.now();
        if moved {
            self.gw.record_external(
                now,
                "head_exported",
                json!({"log": k.log, "count": k.count, "head": head}),
            );
            self.pump();
        }
        Ok(json!({"log": k.log, "covered": k.count + 1, "recorded": moved}))
    }
}
