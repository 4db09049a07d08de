//! What the task shows: `GET /v1/status`, and the obligation and gate views events carry.

use super::*;

/// What the service knows of the vehicle, from the bridge's events.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VehicleView {
    /// Link up.
    pub link_up: bool,
    /// PX4 mode name.
    pub mode: Option<String>,
    /// Armed.
    pub armed: bool,
    /// Landed state.
    pub landed_state: Option<String>,
    /// Local position, NED m. PX4's local frame does not put the ground at 0 (measured
    /// −0.4 … +1.6 m, moving at each landing): read height from `height_above_home_m`.
    pub position_ned_m: Option<[f32; 3]>,
    /// Height above home, m: PX4's own (GLOBAL_POSITION_INT `relative_alt`); a Crazyflie's
    /// estimate's height (its home is where it booted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height_above_home_m: Option<f64>,
    /// Battery, percent (PX4).
    pub battery_pct: Option<f32>,
    /// Battery, volts (Crazyflie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub battery_v: Option<f32>,
    /// Downward range, m (Crazyflie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub z_range_m: Option<f32>,
    /// The newest ping round trip to the Crazyflie, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_latency_ms: Option<f64>,
    /// The Crazyradio's average retries per acknowledged packet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_retries: Option<f32>,
    /// The Crazyflie's supervisor latched Locked (a watchdog cut the motors; power-cycle it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub locked: bool,
    /// Home altitude AMSL, m (from GLOBAL_POSITION_INT).
    pub home_amsl_m: Option<f64>,
    /// Setpoints sent since start.
    pub setpoints_sent: u64,
    /// Who flies: `gateway` (the operator handed it the vehicle), `operator_hold` (held by
    /// the operator), `operator` (not handed over yet, or taken back by an override).
    pub control: &'static str,
    /// The mode of the last override (a mode change the gateway did not command), until the
    /// operator releases.
    pub override_mode: Option<String>,
    /// Set while the PX4 bridge asks for the EKF origin (`GPS_GLOBAL_ORIGIN`) and none has
    /// come: until then the `origin` source is missing and route actions are withheld.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for_origin: Option<OriginWait>,
}

/// The PX4 bridge is asking for the EKF origin ([`VehicleView::waiting_for_origin`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct OriginWait {
    /// `MAV_CMD_REQUEST_MESSAGE`s sent since the link came up.
    pub requests: u32,
    /// What it means, for people.
    pub note: &'static str,
}

impl Task {
    pub(super) fn status(&self) -> serde_json::Value {
        let now = self.now();
        let cat = self.gw.catalog();
        let sources: Vec<_> = cat
            .sources()
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ix = halo_core::catalog::SourceIx(u8::try_from(i).unwrap_or(u8::MAX));
                let st = self.gw.snapshot().source(ix);
                let mut v = json!({
                    "source": s.name,
                    "age_ms": self.gw.snapshot().age(ix, now).map(Nanos::as_ms),
                    "limit_ms": console::action_age_limit(cat, ix).map(Nanos::as_ms),
                    "epoch": st.map(|x| x.epoch),
                    "provenance": st.map(|x| x.provenance.clone()),
                    "sent_by": self.sent_by.get(&ix.0),
                });
                if let (Some(Value::Bounds(b)), Some(m)) = (st.map(|x| &x.value), v.as_object_mut())
                {
                    m.insert("bounds".into(), json!(b));
                }
                v
            })
            .collect();
        let live_obligations = self.gw.obligations().filter(|o| o.state.is_live()).count();
        json!({
            "service": "halo-gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "boot_epoch": self.boot_epoch,
            "uptime_s": self.clock.origin().elapsed().as_secs(),
            "catalog": {"id": cat.id(), "version": cat.version()},
            "vehicle": VehicleView {
                setpoints_sent: self.adapter.setpoints_sent(),
                control: self.sup.control_name(),
                override_mode: self.sup.vehicle().override_mode.clone(),
                ..self.vehicle.clone()
            },
            "operator_hold": self.sup.held(),
            "audit": {
                "public_key": self.audit.as_ref().map(Signing::public_hex),
                "last_checkpoint": self.audit.as_ref().and_then(Signing::latest_count),
            },
            "contract": self.contract_status(),
            "responses_live": self.gw.response_ids().count(),
            "obligations_live": live_obligations,
            "sources": sources,
            "receipts": {"first": self.receipts_path,
                         "current": self.receipts.as_ref().map(|r| r.current().to_path_buf()),
                         "written": self.receipt_summary().written,
                         "lost": self.receipt_summary().lost,
                         "state": if self.sup.failed().is_some() { "refusing" } else { "ok" },
                         "reason": self.sup.failed()},
            "events_next_id": self.hub.next_id(),
            "vehicle_url": self.vehicle_url,
            "last_decisions": self.recent.iter().map(|(at, l)| json!({
                "at_unix_ms": at, "severity": l.severity, "text": l.text,
            })).collect::<Vec<_>>(),
            "statustext": self.pilot.as_ref().map(|p| json!({
                "sent": p.sent_total(), "dropped": p.dropped_total(),
            })),
        })
    }

    /// An obligation as the HTTP, stdio and MCP interfaces show it: states and the discharge
    /// condition in snake case (the discharge with a `kind` tag), instants as Unix
    /// milliseconds, and whether a candidate may still answer it (`open`).
    pub(super) fn obligation_view(
        &self,
        o: &halo_core::obligation::Obligation,
    ) -> serde_json::Value {
        let halo_core::obligation::Discharge::FreshCandidate { after } = o.discharge;
        json!({
            "id": o.id.0,
            "response": o.component.response(),
            "component": o.component.id(),
            "reason": o.reason,
            "required": o.required,
            "scope": o.scope,
            "assignee": o.assignee,
            "route": o.route,
            "state": o.state.name().to_ascii_lowercase(),
            "open": o.state.is_live(),
            "discharge": {"kind": "fresh_candidate", "after_unix_ms": self.wall_ms(after)},
            "attempts": o.attempts,
            "retry_limit": o.retry_limit,
            "created_at_unix_ms": self.wall_ms(o.created_at),
            "expires_at_unix_ms": self.wall_ms(o.expiry),
        })
    }

    /// A gate outcome as the event stream shows it: the outcome tag and fields as the core
    /// names them, the end of a dispatched interval as Unix milliseconds.
    pub(super) fn gate_view(&self, out: &GateOutcome) -> serde_json::Value {
        let mut v = serde_json::to_value(out).unwrap_or(serde_json::Value::Null);
        if let (GateOutcome::Dispatched { valid_until, .. }, Some(m)) = (out, v.as_object_mut()) {
            m.remove("valid_until");
            m.insert(
                "valid_until_unix_ms".into(),
                json!(self.wall_ms(*valid_until)),
            );
        }
        v
    }
}
