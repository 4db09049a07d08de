//! The task's loop: wait for the next input, receipt sync or deadline, handle it, follow the
//! core's call order ([`Task::pump`]), do the periodic work; at shutdown hold the vehicle and
//! refuse what is still queued.

use super::*;

impl Task {
    /// Periodic work: the supervisor's deadlines, checkpoints that are due, metrics.
    pub(super) fn housekeeping(&mut self) {
        self.flush_pilot_texts();
        let t = Instant::now();
        let now = self.now();
        if self.sup.poll_timeout().is_some_and(|d| d <= now) {
            self.sup.handle_timeout(now, &mut self.adapter);
            self.supervised();
        }
        if t.duration_since(self.last_housekeeping) < Duration::from_millis(500) {
            return;
        }
        self.last_housekeeping = t;
        if self.audit.as_ref().is_some_and(|a| a.due(t)) {
            let ok = self.checkpoint(false);
            if !ok && self.sup.failed().is_none() {
                let dropped = self.adapter.discard_staged_targets();
                self.fail_closed(&dropped);
            }
        }
        let now = self.now();
        let cat = self.gw.catalog();
        for (i, s) in cat.sources().iter().enumerate() {
            let ix = halo_core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
            if let Some(age) = self.gw.snapshot().age(ix, now) {
                #[allow(clippy::cast_precision_loss, reason = "seconds for a gauge")]
                let secs = age.0 as f64 / 1e9;
                self.metrics
                    .aoi_seconds
                    .get_or_create(&SourceLabel {
                        source: s.name.to_string(),
                    })
                    .set(secs);
            }
        }
        let v = &self.adapter;
        self.metrics
            .setpoints_streamed
            .set(i64::try_from(v.setpoints_sent()).unwrap_or(i64::MAX));
        self.metrics
            .bridge_events_dropped
            .set(i64::try_from(v.dropped_events()).unwrap_or(i64::MAX));
        if let Some(px4) = v.px4() {
            self.metrics
                .foreign_datagrams
                .set(i64::try_from(px4.foreign_datagrams()).unwrap_or(i64::MAX));
            self.metrics
                .unsigned_refused
                .set(i64::try_from(px4.unsigned_refused()).unwrap_or(i64::MAX));
            let (to_vehicle, to_gcs, forged, _) = px4.gcs_relay();
            let g = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.metrics.gcs_to_vehicle.set(g(to_vehicle));
            self.metrics.gcs_to_gcs.set(g(to_gcs));
            self.metrics.gcs_forged.set(g(forged));
        }
    }

    /// Runs until `shutdown` turns true, then holds the vehicle and waits (at most
    /// `settle`) for it to leave OFFBOARD or for the link to go, flushing receipts.
    pub async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Cmd>,
        mut bridge: VehicleEvents,
        mut shutdown: watch::Receiver<bool>,
        settle: Duration,
    ) -> Task {
        loop {
            let now = self.now();
            let next = [self.gw.poll_timeout(), self.sup.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let wake = next
                .map_or(Duration::from_millis(100), |t| {
                    Duration::from_nanos(t.0.saturating_sub(now.0))
                })
                .min(Duration::from_millis(100));
            #[cfg(feature = "__evaluation")]
            let wake = wake.min(self.late.wait(now));
            self.metrics
                .input_queue_depth
                .set(i64::try_from(cmds.len()).unwrap_or(i64::MAX));
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { break; }
                }
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                Some((id, r)) = next_synced(&mut self.synced) => self.on_synced(id, r),
                Some(cmd) = cmds.recv() => self.handle(cmd),
                () = tokio::time::sleep(wake) => {}
            }
            self.pump();
            self.housekeeping();
        }
        self.shutdown(&mut bridge, settle).await;
        // Refuse what is still queued.
        cmds.close();
        while let Ok(cmd) = cmds.try_recv() {
            super::cmd::refuse(cmd);
        }
        self
    }
}
