//! The service task's Crazyflie side: bridge events to sources and vehicle state, the operator's
//! commands, and the shutdown (land, then stop).
//!
//! Differences from PX4, each deliberate:
//!
//! - No flight modes: the gateway's permission to fly is its own flag, granted by an operator
//!   takeoff through the gateway or `operator release`, withdrawn by an operator hold.
//! - No return-to-launch: the operator lands.
//! - A target is observed (`OBSERVED_SUCCESS`) when the state estimate comes within
//!   [`halo_supervisor::ARRIVAL_M`] of it: the Crazyflie does not echo targets (the
//!   supervisor decides).
//! - Shutdown lands the vehicle and waits for it (the supervisor decides): once this process
//!   stops, the Crazyflie's emergency-stop watchdog (refreshed by the bridge) cuts the motors
//!   within a second.

use crazyflie_bridge::shell::BridgeEvent;
use crazyflie_bridge::telemetry::sup;
use crazyflie_bridge::{Event as PacerEvent, Telemetry};
use serde_json::json;

use super::Task;
use crate::vehicle::crazyflie::{telemetry_updates, to_ned};
use halo_core::digest::Digest;
use halo_core::time::Nanos;
use halo_supervisor::Observation;

impl Task {
    /// Feeds one Crazyflie bridge event.
    pub(super) fn on_cf_event(&mut self, ev: &BridgeEvent) {
        let now = self.now();
        if let BridgeEvent::Connected { attempt, took_ms } = ev {
            // A new connection: the vehicle's sources start a new epoch.
            self.vehicle_epoch = u64::from(*attempt);
            tracing::info!(attempt, took_ms, "Crazyflie connected");
            self.publish(
                "vehicle_found",
                &json!({"vehicle": "crazyflie", "connection": attempt, "took_ms": took_ms}),
            );
        }
        for u in telemetry_updates(self.gw.catalog(), ev, now, self.vehicle_epoch) {
            self.vehicle_update(now, u);
        }
        match ev {
            BridgeEvent::Telemetry(u) => {
                // The radio's statistics come from the dongle, not from the vehicle.
                if !matches!(u.data, Telemetry::LinkStats { .. }) {
                    self.observe(Observation::Heard {
                        at: u.generated_at,
                        uncertainty: Nanos(u.uncertainty_ns),
                    });
                }
                self.on_cf_sample(&u.data);
            }
            BridgeEvent::Pacer(p) => self.on_pacer_event(p),
            BridgeEvent::Connected { .. } => {}
            BridgeEvent::ConnectFailed {
                attempt,
                error,
                retry_in_ms,
            } => {
                tracing::warn!(attempt, retry_in_ms, "Crazyflie reconnect failed: {error}");
                self.publish(
                    "vehicle_link",
                    &json!({"up": false, "reconnect_attempt": attempt, "error": error.to_string(), "retry_in_ms": retry_in_ms}),
                );
            }
            BridgeEvent::Disconnected { reason } => {
                tracing::warn!("Crazyflie link lost: {reason}");
                self.publish("vehicle_link", &json!({"up": false, "reason": reason}));
            }
            BridgeEvent::Refused { what, reason } => {
                tracing::warn!(what, "the Crazyflie bridge refused: {reason}");
                self.publish(
                    "vehicle_command",
                    &json!({"command": what, "outcome": "refused", "reason": reason.to_string()}),
                );
            }
        }
    }

    fn on_cf_sample(&mut self, t: &Telemetry) {
        match t {
            Telemetry::State { position_m, .. } => {
                let ned = to_ned(*position_m);
                #[allow(clippy::cast_possible_truncation, reason = "a view for people")]
                {
                    self.vehicle.position_ned_m = Some(ned.map(|v| v as f32));
                }
                self.vehicle.height_above_home_m = Some(-ned[2]);
                // The target is observed once the estimate reached it.
                self.observe(Observation::Position { ned_m: ned });
            }
            Telemetry::Power { vbat_v, .. } => self.vehicle.battery_v = Some(*vbat_v),
            Telemetry::Range { z_range_m } => self.vehicle.z_range_m = *z_range_m,
            Telemetry::Supervisor { bits } => {
                self.vehicle.armed = bits & sup::IS_ARMED != 0;
                self.vehicle.locked = bits & sup::IS_LOCKED != 0;
                self.vehicle.landed_state = Some(
                    if bits & sup::IS_FLYING != 0 {
                        "in air"
                    } else {
                        "on ground"
                    }
                    .into(),
                );
            }
            Telemetry::Ping { latency_ms } => self.vehicle.link_latency_ms = Some(*latency_ms),
            Telemetry::LinkStats { avg_retries, .. } => self.vehicle.link_retries = *avg_retries,
            Telemetry::Yaw { .. } => {}
        }
    }

    fn on_pacer_event(&mut self, p: &PacerEvent) {
        match p {
            PacerEvent::Link { up, silent_ms } => {
                self.vehicle.link_up = *up;
                self.metrics.link_up.set(i64::from(*up));
                if *up {
                    tracing::info!("Crazyflie link up");
                } else {
                    tracing::warn!(silent_ms, "Crazyflie link down: no telemetry");
                }
                self.observe(Observation::Link {
                    up: *up,
                    silent_ms: *silent_ms,
                });
                self.publish("vehicle_link", &json!({"up": up, "silent_ms": silent_ms}));
            }
            PacerEvent::Armed { armed } => {
                self.vehicle.armed = *armed;
                self.observe(Observation::Armed { armed: *armed });
                tracing::info!(
                    armed,
                    "Crazyflie {}",
                    if *armed { "armed" } else { "disarmed" }
                );
                self.publish("vehicle_armed", &json!({"armed": armed}));
            }
            PacerEvent::Flying { flying } => {
                tracing::info!(
                    flying,
                    "Crazyflie {}",
                    if *flying { "flying" } else { "on the ground" }
                );
                self.publish("vehicle_flying", &json!({"flying": flying}));
            }
            PacerEvent::Locked => {
                self.vehicle.locked = true;
                tracing::error!(
                    "the Crazyflie is locked: a watchdog cut the motors; power-cycle it before flying again"
                );
                self.observe(Observation::Locked);
                self.publish("vehicle_locked", &json!({}));
            }
            PacerEvent::TargetStarted {
                binding,
                fingerprint,
                valid_until,
            } => self.target_started(binding, &fingerprint.to_string(), valid_until.0),
            PacerEvent::TargetExpired {
                binding,
                fingerprint,
            } => self.target_expired(binding, &fingerprint.to_string()),
            PacerEvent::TargetDropped { binding, reason } => {
                self.observe(Observation::TargetStopped { binding: *binding });
                tracing::warn!(reason = %reason, "the Crazyflie bridge dropped a target");
                self.publish(
                    "vehicle_target",
                    &json!({"state": "dropped", "binding": Digest(*binding), "reason": reason.to_string()}),
                );
            }
            PacerEvent::Holding { reason, at_m } => {
                self.observe(Observation::Holding {
                    kind: json!("go_to"),
                });
                self.publish(
                    "vehicle_hold",
                    &json!({"kind": "go_to", "reason": reason.to_string(), "at_m": at_m}),
                );
            }
            PacerEvent::Landing => {
                self.observe(Observation::Landing);
                self.publish("vehicle_landing", &json!({}));
            }
        }
    }
}
