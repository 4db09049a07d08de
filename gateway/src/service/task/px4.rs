//! The service task's PX4 side: the bridge's events as vehicle sources (through
//! [`crate::vehicle::px4`]), as observations for the supervisor, and as events for people.

use px4_bridge::telemetry::{LandedState, Telemetry};
use px4_bridge::{Command, CommandOutcome, Event as BridgeEvent, Px4Mode};
use serde_json::json;

use super::Task;
use crate::vehicle::px4::telemetry_updates;
use halo_core::digest::Digest;
use halo_core::time::Nanos;
use halo_supervisor::Observation;

fn mode_name(m: Px4Mode) -> String {
    m.to_string()
}

/// A bridge command as people read it.
pub(crate) fn command_text(c: &Command) -> String {
    match c {
        Command::Arm => "arm".into(),
        Command::Disarm => "disarm".into(),
        Command::SetMode { mode } => format!("set mode {mode}"),
        Command::Takeoff {
            altitude_amsl_m: Some(a),
        } => format!("takeoff to {a:.1} m AMSL"),
        Command::Takeoff {
            altitude_amsl_m: None,
        } => "takeoff to the default altitude".into(),
        Command::Land => "land".into(),
        Command::ReturnToLaunch => "return to launch".into(),
        Command::SetMessageInterval {
            message_id,
            interval_us,
        } => {
            if *interval_us > 0 {
                format!(
                    "stream message {message_id} at {:.1} Hz",
                    1e6 / f64::from(*interval_us)
                )
            } else {
                format!("stop message {message_id}")
            }
        }
        Command::RequestMessage { message_id } => format!("request message {message_id}"),
    }
}

/// A command outcome as people read it.
pub(crate) fn outcome_text(o: CommandOutcome) -> &'static str {
    match o {
        CommandOutcome::Accepted => "accepted",
        CommandOutcome::Denied => "denied",
        CommandOutcome::TemporarilyRejected => "temporarily rejected",
        CommandOutcome::Unsupported => "unsupported",
        CommandOutcome::Failed => "failed",
        CommandOutcome::Cancelled => "cancelled",
        CommandOutcome::TimedOut => "timed out (no answer after every retry)",
        CommandOutcome::NotConfirmed => "acknowledged but the mode never showed",
        CommandOutcome::LinkLost => "link lost before an answer",
    }
}

fn landed_text(s: LandedState) -> &'static str {
    match s {
        LandedState::OnGround => "on ground",
        LandedState::InAir => "in air",
        LandedState::Takeoff => "taking off",
        LandedState::Landing => "landing",
        LandedState::Undefined => "unknown",
    }
}

impl Task {
    /// Feeds one PX4 bridge event.
    pub fn on_bridge_event(&mut self, ev: &BridgeEvent) {
        let now = self.now();
        for u in telemetry_updates(self.gw.catalog(), ev, now) {
            self.vehicle_update(now, u);
        }
        if let BridgeEvent::TargetObserved { binding, .. } = ev {
            self.observe(Observation::TargetEchoed { binding: *binding });
        }
        match ev {
            BridgeEvent::Telemetry(u) => {
                self.observe(Observation::Heard {
                    at: u.generated_at,
                    uncertainty: Nanos(u.uncertainty_ns),
                });
                if let (Telemetry::Origin { .. }, Some(w)) =
                    (&u.data, self.vehicle.waiting_for_origin.take())
                {
                    tracing::info!(requests = w.requests, "EKF origin from PX4");
                }
                self.on_telemetry(&u.data);
                // Fail closed, as for every vehicle source: stamped as old as it may be.
                let at = u.generated_at.sub_ns(u.uncertainty_ns);
                self.on_origin_telemetry(at, &u.data);
            }
            BridgeEvent::AutopilotDiscovered {
                system_id,
                component_id,
            } => {
                tracing::info!(system_id, component_id, "autopilot found");
                self.publish(
                    "vehicle_found",
                    &json!({"system_id": system_id, "component_id": component_id}),
                );
            }
            BridgeEvent::Link { up, silent_ms } => self.on_link(*up, *silent_ms),
            BridgeEvent::OriginRequested { attempt } => self.on_origin_requested(*attempt),
            BridgeEvent::ModeChanged { from, to } => {
                let from_s = from.map(mode_name);
                tracing::info!(from = from_s.as_deref().unwrap_or("unknown"), to = %to, "PX4 mode");
                self.vehicle.mode = Some(mode_name(*to));
                self.observe(Observation::Mode { to: mode_name(*to) });
                self.publish(
                    "vehicle_mode",
                    &json!({"from": from_s, "to": mode_name(*to)}),
                );
            }
            BridgeEvent::ArmedChanged { armed } => {
                self.vehicle.armed = *armed;
                tracing::info!(armed, "PX4 {}", if *armed { "armed" } else { "disarmed" });
                self.observe(Observation::Armed { armed: *armed });
                self.publish("vehicle_armed", &json!({"armed": armed}));
            }
            BridgeEvent::Command {
                command,
                outcome,
                reason,
                ..
            } => {
                let text = command_text(command);
                if !matches!(
                    command,
                    Command::SetMessageInterval { .. } | Command::RequestMessage { .. }
                ) {
                    tracing::info!(command = %text, outcome = outcome_text(*outcome), "PX4 command");
                }
                self.publish(
                    "vehicle_command",
                    &json!({"command": text, "outcome": outcome_text(*outcome), "px4_says": reason}),
                );
                if let Some(c) = crate::vehicle::px4_command(command) {
                    self.observe(Observation::CommandEnded {
                        command: c,
                        accepted: *outcome == CommandOutcome::Accepted,
                        outcome: outcome_text(*outcome).into(),
                        reason: reason.clone(),
                    });
                }
            }
            BridgeEvent::StatusText { severity, text } => {
                if *severity <= 4 {
                    tracing::warn!(severity, "PX4: {text}");
                } else {
                    tracing::info!(severity, "PX4: {text}");
                }
                self.publish("vehicle_text", &json!({"severity": severity, "text": text}));
            }
            BridgeEvent::TargetStarted {
                binding,
                fingerprint,
                valid_until,
            } => self.target_started(binding, &fingerprint.to_string(), valid_until.0),
            BridgeEvent::TargetExpired {
                binding,
                fingerprint,
            } => self.target_expired(binding, &fingerprint.to_string()),
            BridgeEvent::Holding { kind, reason } => {
                if *reason == px4_bridge::HoldReason::TargetExpired {
                    self.tell(&super::Told::ExpiryHold);
                }
                self.observe(Observation::Holding { kind: json!(kind) });
                self.publish("vehicle_hold", &json!({"kind": kind, "reason": reason}));
            }
            BridgeEvent::EnqueueDropped { binding, reason } => {
                self.observe(Observation::TargetStopped { binding: *binding });
                tracing::warn!(reason = %reason, "the bridge dropped an enqueued target");
                self.publish(
                    "vehicle_target",
                    &json!({"state": "dropped", "binding": Digest(*binding), "reason": reason.to_string()}),
                );
            }
            BridgeEvent::Override { from, to, stopped } => {
                // The action the override stopped, named for the receipt and the audit.
                let stopped = stopped
                    .as_ref()
                    .and_then(|b| self.adapter.attribute(b))
                    .map_or(
                        serde_json::Value::Null,
                        |(r, c)| json!({"response": r, "component": c}),
                    );
                self.observe(Observation::Override {
                    from: from.map(mode_name),
                    to: mode_name(*to),
                    stopped,
                });
            }
            BridgeEvent::Permission { permitted } => {
                self.observe(Observation::Permission {
                    permitted: *permitted,
                });
            }
            BridgeEvent::HeartbeatGap { gap_ms } => {
                tracing::warn!(
                    gap_ms,
                    "autopilot heartbeat gap of {gap_ms} ms (PX4 sends 1 Hz; the link is declared down after vehicle.link_timeout_ms)"
                );
                self.metrics.heartbeat_gaps.inc();
                self.publish(
                    "vehicle_link",
                    &json!({"up": self.vehicle.link_up, "heartbeat_gap_ms": gap_ms}),
                );
            }
            BridgeEvent::TargetObserved { .. } | BridgeEvent::TimeSync { .. } => {}
        }
    }

    /// The autopilot link went up or down (no heartbeat for `vehicle.link_timeout_ms`).
    fn on_link(&mut self, up: bool, silent_ms: u64) {
        self.vehicle.link_up = up;
        self.metrics.link_up.set(i64::from(up));
        if up {
            tracing::info!("autopilot link up");
        } else {
            tracing::warn!(silent_ms, "autopilot link down: no heartbeat");
        }
        self.observe(Observation::Link { up, silent_ms });
        self.publish("vehicle_link", &json!({"up": up, "silent_ms": silent_ms}));
    }

    /// The bridge asked PX4 for its EKF origin again: said in the log and in `/v1/status`.
    fn on_origin_requested(&mut self, attempt: u32) {
        if attempt == 1 {
            tracing::info!("asking PX4 for its EKF origin (GPS_GLOBAL_ORIGIN)");
        } else if attempt.is_multiple_of(5) {
            tracing::warn!(
                requests = attempt,
                "still no EKF origin from PX4: route actions are withheld \
                 (origin SOURCE_MISSING) until it comes"
            );
        }
        self.vehicle.waiting_for_origin = Some(super::OriginWait {
            requests: attempt,
            note: "waiting for PX4's EKF origin (GPS_GLOBAL_ORIGIN): route actions are \
                   withheld until it comes",
        });
    }

    /// One telemetry sample: the status view, and home's altitude for the takeoff.
    fn on_telemetry(&mut self, t: &Telemetry) {
        match t {
            Telemetry::LocalPosition {
                north_m,
                east_m,
                down_m,
                ..
            } => self.vehicle.position_ned_m = Some([*north_m, *east_m, *down_m]),
            Telemetry::Battery {
                remaining_pct: Some(p),
                ..
            } => self.vehicle.battery_pct = Some(*p),
            Telemetry::GlobalPosition {
                alt_m,
                relative_alt_m,
                ..
            } => {
                // PX4's own height above home (its local frame's z is not: the ground sits
                // anywhere from -0.4 to +1.6 m there, and moves at each landing).
                self.vehicle.height_above_home_m = Some(f64::from(*relative_alt_m));
                let amsl_m = f64::from(*alt_m - *relative_alt_m);
                self.vehicle.home_amsl_m = Some(amsl_m);
                self.observe(Observation::HomeAltitude { amsl_m });
            }
            Telemetry::Landed { state } => {
                self.vehicle.landed_state = Some(landed_text(*state).into());
                // PX4 says "taking off" and "landing" only once its land detector has the
                // vehicle off the ground (EXTENDED_SYS_STATE in PX4 v1.16).
                let airborne = matches!(
                    state,
                    LandedState::InAir | LandedState::Takeoff | LandedState::Landing
                );
                self.observe(Observation::Airborne { airborne });
            }
            _ => {}
        }
    }

    /// `GPS_GLOBAL_ORIGIN` and `HOME_POSITION` into the `origin` source (when the catalog has
    /// one); its stamp renewed at each heartbeat, PX4 announcing the origin only when it moves.
    fn on_origin_telemetry(&mut self, at: Nanos, t: &Telemetry) {
        match t {
            Telemetry::Origin {
                lat_deg,
                lon_deg,
                alt_m,
            } => self
                .geo_origin
                .origin(*lat_deg, *lon_deg, f64::from(*alt_m)),
            Telemetry::Home { alt_m, .. } => self.geo_origin.home_alt(f64::from(*alt_m)),
            Telemetry::Heartbeat { .. } => {}
            _ => return,
        }
        let Some((value, epoch)) = self.geo_origin.value(self.boot_epoch) else {
            return;
        };
        let now = self.now();
        let provenance = self.adapter.provenance();
        if let Some(u) = crate::vehicle::px4::source_update(
            self.gw.catalog(),
            "origin",
            at,
            halo_core::state::Value::Geo(value),
            provenance,
            epoch,
        ) {
            self.vehicle_update(now, u);
        }
    }

    /// The bridge streams a target.
    pub(super) fn target_started(
        &mut self,
        binding: &[u8; 32],
        fingerprint: &str,
        valid_until_ns: u64,
    ) {
        let valid_until_unix_ms = self.wall_ms(Nanos(valid_until_ns));
        self.publish(
            "vehicle_target",
            &json!({"state": "started", "binding": Digest(*binding), "fingerprint": fingerprint,
                    "valid_until_unix_ms": valid_until_unix_ms}),
        );
    }

    /// The bridge stopped a target at the end of its interval.
    pub(super) fn target_expired(&mut self, binding: &[u8; 32], fingerprint: &str) {
        // An expiry hold is a decision of the bridge's: it goes on the record with the action.
        let (response, component) = self.adapter.attribute(binding).map_or(
            (serde_json::Value::Null, serde_json::Value::Null),
            |(r, c)| (json!(r), json!(c)),
        );
        let now = self.now();
        self.gw.record_external(
            now,
            "target_expired",
            json!({"response": response, "component": component, "binding": Digest(*binding),
                   "fingerprint": fingerprint}),
        );
        self.observe(Observation::TargetStopped { binding: *binding });
        self.publish(
            "vehicle_target",
            &json!({"state": "expired", "binding": Digest(*binding), "fingerprint": fingerprint}),
        );
    }
}
