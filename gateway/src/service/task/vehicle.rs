//! The vehicle's side: the bridge's events as vehicle sources and the supervisor's observations.

use super::*;

/// The vehicle bridge's event stream.
pub enum VehicleEvents {
    /// From the PX4 bridge.
    Px4(mpsc::Receiver<BridgeEvent>),
    /// From the Crazyflie bridge.
    Crazyflie(mpsc::Receiver<crazyflie_bridge::shell::BridgeEvent>),
}

impl VehicleEvents {
    pub(super) async fn recv(&mut self) -> Option<VehicleEvent> {
        match self {
            VehicleEvents::Px4(r) => r.recv().await.map(VehicleEvent::Px4),
            VehicleEvents::Crazyflie(r) => r.recv().await.map(VehicleEvent::Crazyflie),
        }
    }
}

impl Task {
    /// An update of one of the vehicle's own sources (provenance and epoch the vehicle's).
    pub(super) fn push_vehicle_source(&mut self, name: &str, at: Nanos, value: Value) {
        let now = self.now();
        let (provenance, epoch) = (self.adapter.provenance(), self.vehicle_epoch);
        if let Some(u) = source_update(self.gw.catalog(), name, at, value, provenance, epoch) {
            self.vehicle_update(now, u);
        }
    }

    /// One update of a source the gateway owns (the vehicle's), monotonic by construction: a
    /// sample's conservative stamp (generation time minus its mapping uncertainty) can fall
    /// behind the previous sample's when the TIMESYNC fit or its uncertainty moves; it is then
    /// the previous stamp, which is still no later than this sample's true generation time
    /// (it was generated after the previous one). So the core never refuses the gateway's own
    /// updates as out of order.
    pub(super) fn vehicle_update(&mut self, now: Nanos, u: SourceUpdate) {
        let u = crate::vehicle::px4::monotonic(self.gw.snapshot(), u);
        if let Err(e) = self.gw.handle_source_update(now, u) {
            // Receipted by the core; a future stamp is clock trouble worth a line.
            tracing::debug!(code = %e.code(), "a vehicle source update was refused: {}", e.message());
        }
    }

    /// Feeds one observation of the vehicle to the supervisor and carries out what it decides.
    pub(super) fn observe(&mut self, o: halo_supervisor::Observation) {
        let now = self.now();
        self.sup.handle_observation(now, o, &mut self.adapter);
        self.supervised();
    }

    pub(super) fn on_vehicle_event(&mut self, ev: &VehicleEvent) {
        match ev {
            VehicleEvent::Px4(e) => self.on_bridge_event(e),
            VehicleEvent::Crazyflie(e) => self.on_cf_event(e),
        }
    }

    /// Holds the vehicle (the supervisor makes it safe), waits at most `settle` for it to
    /// settle or for the link to go, then writes the last receipts and the final checkpoint.
    pub(super) async fn shutdown(&mut self, bridge: &mut VehicleEvents, settle: Duration) {
        self.publish("shutdown", &json!({"reason": "signal"}));
        self.sup.begin_shutdown(&mut self.adapter);
        self.supervised();
        let deadline = tokio::time::Instant::now() + settle;
        let mut settled = self.sup.shutdown_settled(&self.adapter);
        while !settled {
            tokio::select! {
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                () = tokio::time::sleep_until(deadline) => break,
            }
            self.pump();
            settled = self.sup.shutdown_settled(&self.adapter);
        }
        self.sup.finish_shutdown(settled, &mut self.adapter);
        self.supervised();
        let now = self.now();
        self.gw.flush_summaries(now);
        self.pump();
        if !self.checkpoint(true) && self.sup.failed().is_none() {
            self.record_shutdown_failure();
        }
    }
}
