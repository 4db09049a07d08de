//! The core task's Crazyflie side: bridge events to sources and vehicle state, the operator's
//! commands, and the shutdown (land, then stop).
//!
//! Differences from PX4, each deliberate:
//!
//! - No flight modes: the gateway's permission to fly is its own flag, granted by an operator
//!   takeoff through the gateway or `operator release`, withdrawn by an operator hold.
//! - No return-to-launch: the operator lands.
//! - A target is observed (`OBSERVED_SUCCESS`) when the state estimate comes within
//!   [`ARRIVAL_M`] of it: the Crazyflie does not echo targets.
//! - Shutdown lands the vehicle and waits for it: once this process stops, the supervisor's
//!   emergency-stop watchdog (refreshed by the bridge) cuts the motors within a second.

use std::time::Duration;

use crazyflie_bridge::shell::{BridgeEvent, CfHandle};
use crazyflie_bridge::telemetry::sup;
use crazyflie_bridge::{Event as PacerEvent, Telemetry};
use serde_json::json;

use super::{ApiError, Core, OperatorOp, Reply, VehicleEvents};
use crate::core::digest::Digest;
use crate::core::reason::ReasonCode;
use crate::core::time::Nanos;
use crate::vehicle::crazyflie::{telemetry_updates, to_ned};

/// A target counts as reached when the estimate is this close, m.
pub const ARRIVAL_M: f64 = 0.15;

impl Core {
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
                    self.refresh_link(now, u.generated_at.0, u.uncertainty_ns);
                }
                self.on_cf_sample(&u.data);
            }
            BridgeEvent::Pacer(p) => self.on_pacer_event(now, p),
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
                // The target is observed once the estimate reached it.
                if let Some((b, target)) = self.adapter.vehicle.pending_arrival {
                    let d2: f64 = ned.iter().zip(target).map(|(a, b)| (a - b) * (a - b)).sum();
                    if d2.sqrt() <= ARRIVAL_M {
                        self.adapter.vehicle.pending_arrival = None;
                        let now = self.now();
                        self.observed(now, &b);
                    }
                }
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

    fn on_pacer_event(&mut self, now: Nanos, p: &PacerEvent) {
        match p {
            PacerEvent::Link { up, silent_ms } => {
                self.vehicle.link_up = *up;
                self.metrics.link_up.set(i64::from(*up));
                if *up {
                    tracing::info!("Crazyflie link up");
                } else {
                    self.adapter.vehicle.target_ended();
                    tracing::warn!(silent_ms, "Crazyflie link down: no telemetry");
                }
                self.publish("vehicle_link", &json!({"up": up, "silent_ms": silent_ms}));
            }
            PacerEvent::Armed { armed } => {
                self.vehicle.armed = *armed;
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
                self.adapter.vehicle.target_ended();
                tracing::error!(
                    "the Crazyflie is locked: a watchdog cut the motors; power-cycle it before flying again"
                );
                self.gw.record_external(now, "vehicle_locked", json!({}));
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
                self.adapter.vehicle.target_ended_if(binding);
                tracing::warn!(reason = %reason, "the Crazyflie bridge dropped a target");
                self.publish(
                    "vehicle_target",
                    &json!({"state": "dropped", "binding": Digest(*binding), "reason": reason.to_string()}),
                );
            }
            PacerEvent::Holding { reason, at_m } => {
                self.holding(now, json!("go_to"));
                self.publish(
                    "vehicle_hold",
                    &json!({"kind": "go_to", "reason": reason.to_string(), "at_m": at_m}),
                );
            }
            PacerEvent::Landing => {
                self.adapter.vehicle.target_ended();
                self.publish("vehicle_landing", &json!({}));
            }
        }
    }

    /// The operator's commands on a Crazyflie: arm, disarm, takeoff, land (hold and release
    /// are the vehicle-independent ones).
    pub(super) fn operator_crazyflie(&mut self, h: &CfHandle, op: OperatorOp, reply: Reply) {
        let now = self.now();
        let r = match op {
            OperatorOp::Arm => h.arm(true),
            OperatorOp::Disarm => h.arm(false),
            OperatorOp::Land => h.land(),
            OperatorOp::ReturnToLaunch => {
                let _ = reply.send(Err(ApiError::new(
                    409,
                    ReasonCode::VEHICLE_COMMAND_FAILED,
                    "a Crazyflie has no return-to-launch; land it (`operator land`)",
                )));
                return;
            }
            OperatorOp::Takeoff { altitude_m } => {
                if !(altitude_m.is_finite() && (0.2..=2.0).contains(&altitude_m)) {
                    let _ = reply.send(Err(ApiError::new(
                        422,
                        ReasonCode::INVALID_REQUEST,
                        format!(
                            "takeoff height {altitude_m} m is outside 0.2..2 m (a Crazyflie on the bench)"
                        ),
                    )));
                    return;
                }
                if let Err(e) = self.contract_takeoff() {
                    let _ = reply.send(Err(e));
                    self.pump();
                    return;
                }
                #[allow(clippy::cast_possible_truncation, reason = "the radio carries f32")]
                h.takeoff(altitude_m as f32)
            }
            OperatorOp::Hold | OperatorOp::Release => Ok(()),
        };
        self.gw.record_external(
            now,
            "operator_command",
            json!({"action": op.name(), "command": op.name(),
                   "outcome": r.as_ref().map_or_else(ToString::to_string, |()| "sent".into())}),
        );
        match r {
            Ok(()) => {
                if matches!(op, OperatorOp::Takeoff { .. }) {
                    self.grant_control(now, "takeoff");
                }
                let _ = reply.send(Ok(json!({"action": op.name(), "outcome": "sent"})));
            }
            Err(e) => {
                let _ = reply.send(Err(ApiError::new(
                    409,
                    ReasonCode::VEHICLE_COMMAND_FAILED,
                    format!("the Crazyflie bridge refused `{}`: {e}", op.name()),
                )));
            }
        }
    }

    /// Lands the Crazyflie (if flying) and waits, at most `settle`, for it to reach the ground
    /// or for the link to go; then disarms.
    pub(super) async fn shutdown_crazyflie(
        &mut self,
        h: &CfHandle,
        bridge: &mut VehicleEvents,
        settle: Duration,
    ) {
        let now = self.now();
        let flying = h.flying();
        if flying {
            let _ = h.land();
        }
        self.adapter.vehicle.target_ended();
        self.gw
            .record_external(now, "shutdown", json!({"land_requested": flying}));
        tracing::info!(flying, "shutting down: landing the Crazyflie");
        let deadline = tokio::time::Instant::now() + settle;
        while h.link_up() && h.flying() {
            tokio::select! {
                Some(ev) = bridge.recv() => self.on_vehicle_event(&ev),
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!("the Crazyflie is still flying; stopping (its emergency-stop watchdog cuts the motors within 1 s)");
                    break;
                }
            }
            self.pump();
        }
        if h.link_up() && !h.flying() {
            let _ = h.arm(false);
        }
        let now = self.now();
        self.gw.record_external(
            now,
            "shutdown",
            json!({"flying": h.flying(), "armed": h.armed(), "link_up": h.link_up()}),
        );
    }
}
