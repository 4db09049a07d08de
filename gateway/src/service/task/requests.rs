//! The interfaces' requests to the service task: their bodies read strictly (pure readers the fuzz
//! target `service_bodies` drives), handed to the core or the monitor, and answered.

use serde::Deserialize;
use serde_json::json;

use halo_core::state::UpdateError;
pub use halo_core::update::{CertificateBody, UpdateBody};

use std::time::Instant;

use super::pilot_text::Told;
use super::{Answer, ApiError, Arrival, Task, internal, verdict_name};
use halo_core::contract::{Op, Request as ContractRequest, Role as ContractRole};
use halo_core::digest::Digest;
use halo_core::ids::Id;
use halo_core::reason::ReasonCode;
use halo_core::state::{Certificate, SourceUpdate};
use halo_core::time::Nanos;

impl Task {
    pub(super) fn contract_op(&mut self, caller: ContractRole, bytes: &[u8]) -> Answer {
        let op = read_contract_op(bytes)?;
        let name = op.name();
        let d = self.monitor.handle(ContractRequest { caller, op });
        tracing::info!(
            op = name,
            verdict = verdict_name(d.verdict),
            reason = d.reason.map(|r| r.name()).unwrap_or("none"),
            "mission contract"
        );
        let mut v = serde_json::to_value(&d).map_err(internal)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("op".into(), name.into());
        }
        self.publish("contract", &v);
        Ok(v)
    }

    pub(super) fn contract_status(&self) -> serde_json::Value {
        let m = &self.monitor;
        json!({
            "registered": m.root_state().is_some(),
            "root_state": m.root_state(),
            "versions": m.versions(),
            "witness_path": m.witness_path(),
            "trace": m.trace(),
            "trace_digest": m.trace_digest(),
            "goal_revisions": m.goal_revisions(),
            "domain": m.domain().id,
        })
    }

    pub(super) fn witness(&self, bytes: &[u8]) -> Answer {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Req {
            parent: String,
            goal: halo_core::contract::GoalSpec,
        }
        let r: Req = serde_json::from_slice(bytes).map_err(|err| {
            let e = halo_core::strict::explain(bytes, &err);
            ApiError::new(
                400,
                ReasonCode::SCHEMA_INVALID,
                format!("expected {{\"parent\", \"goal\"}}: {e}"),
            )
        })?;
        let digest = halo_core::contract::monitor::edit_digest(&r.goal);
        serde_json::to_value(self.monitor.witness_for(&r.parent, &digest)).map_err(internal)
    }

    pub(super) fn candidate(
        &mut self,
        obligation: u64,
        bytes: &[u8],
        sender: Option<halo_core::Id>,
    ) -> Answer {
        let named = halo_core::envelope::parse_candidate(bytes).map(|c| c.obligation);
        if let Ok(n) = named
            && n != obligation
        {
            return Err(ApiError::new(
                400,
                ReasonCode::OBLIGATION_MISMATCH,
                format!("the URL names obligation {obligation}, the candidate names {n}"),
            ));
        }
        let now = self.now();
        let r = self
            .gw
            .with_sender(sender.clone(), |gw| gw.handle_candidate(now, bytes));
        if let Ok(rep) = &r {
            self.publish_admitted(&rep.response, &rep.components, sender.as_ref());
        }
        self.pump();
        if let Some(e) = self.receipts_refusal() {
            return Err(e);
        }
        match r {
            Ok(rep) => {
                let current = self.gw.response_report(&rep.response);
                Ok(
                    json!({"response": rep.response, "obligation": rep.obligation,
                          "readmitted": rep.components, "current": current}),
                )
            }
            Err(rej) => Err(ApiError::rejection(&rej)),
        }
    }

    pub(super) fn state_update(
        &mut self,
        (caller, sender): (halo_core::catalog::Owner, Option<halo_core::Id>),
        source: &str,
        bytes: &[u8],
        arrival: Arrival,
    ) -> Answer {
        use halo_core::catalog::Owner;
        let cat = self.gw.catalog();
        let Some(ix) = cat.source_ix(source) else {
            return Err(ApiError::new(
                404,
                ReasonCode::UNKNOWN_SOURCE,
                format!("the catalog defines no source `{source}`"),
            ));
        };
        // Only the source's owner writes it: the vehicle's own sources come from the vehicle
        // link alone, so no credential can forge a landed state, a link or the control grant.
        let owner = cat.source(ix).map_or(Owner::Provider, |s| s.owner);
        if owner != caller {
            let who = match owner {
                Owner::Vehicle => "the gateway itself, from the vehicle link".to_string(),
                o => format!("the {} credential", o.name()),
            };
            return Err(ApiError::new(
                403,
                ReasonCode::SOURCE_NOT_WRITABLE,
                format!(
                    "source `{source}` is written by {who}, not the {} credential",
                    caller.name()
                ),
            ));
        }
        let now = self.now();
        // Mapped at the arrival, not at `now`: the time the update waited in the queue counts
        // toward its age.
        let u = read_update_at(cat, source, bytes, arrival)?;
        let (epoch, generated_at) = (u.state.epoch, u.state.generated_at);
        match self
            .gw
            .with_sender(sender.clone(), |gw| gw.handle_source_update(now, u))
        {
            Ok(()) => {
                match sender {
                    Some(by) => self.sent_by.insert(ix.0, by),
                    None => self.sent_by.remove(&ix.0),
                };
                let age_ms = now.saturating_sub(generated_at).as_ms();
                Ok(json!({"source": source, "epoch": epoch, "age_ms": age_ms}))
            }
            Err(e) => {
                self.metrics
                    .updates_refused
                    .get_or_create(&crate::service::infra::metrics::CodeLabel {
                        code: e.code().name().into(),
                    })
                    .inc();
                Err(ApiError::new(422, e.code(), e.message().to_string()))
            }
        }
    }

    /// `POST /v1/certify`: the reference certifier ([`crate::service::task::certifier`]) checks the
    /// route action against the current state and the vehicle's position and, when it passes,
    /// issues a certificate for its exact digest through [`Task::certificate`] (a receipt like
    /// any other). The component names the certificate's id in its `certificate` field (the
    /// digest covers it).
    pub(super) fn certify(&mut self, bytes: &[u8], arrival: Arrival) -> Answer {
        use halo_core::payload::Payload;
        let cfg = self.certifier.clone();
        if !cfg.enabled {
            return Err(ApiError::new(
                409,
                ReasonCode::CERTIFIER_DISABLED,
                "the reference certifier is off; enable it with `[certifier] enabled = true`, or certify with your own (POST /v1/digest, POST /v1/certificates)",
            ));
        }
        let cat = self.gw.catalog();
        let envelope = crate::service::api::digest::one_component_envelope(cat, bytes);
        let raw =
            halo_core::envelope::parse_envelope(&envelope).map_err(|r| ApiError::rejection(&r))?;
        let v = halo_core::graph::validate(cat, &raw).map_err(|r| ApiError::rejection(&r))?;
        let [c] = v.graph.components() else {
            return Err(ApiError::new(
                400,
                ReasonCode::INVALID_REQUEST,
                "the certifier takes one component: {\"component\": {...}}",
            ));
        };
        let c = c.clone();
        let digest = c.digest.to_hex();
        if !matches!(
            c.payload.as_ref(),
            Payload::RouteAction(_) | Payload::GlobalRoute(_)
        ) {
            return Err(ApiError::new(
                422,
                ReasonCode::INVALID_REQUEST,
                "the reference certifier certifies route actions only",
            ));
        }
        let Some(cert_id) = c.certificate.clone() else {
            return Err(ApiError::with_ids(
                422,
                ReasonCode::INVALID_REQUEST,
                "name the certificate to issue in the component's `certificate` field (the digest covers it)",
                vec![c.id.to_string()],
            ));
        };
        let Some(from) = self.vehicle.position_ned_m else {
            return Err(ApiError::new(
                409,
                ReasonCode::NO_VEHICLE_LINK,
                "the vehicle's position is not known yet: the certifier sweeps the path from it",
            ));
        };
        let from = from.map(f64::from);
        let Some(spec) = cat.type_spec(c.ty) else {
            return Err(ApiError::new(400, ReasonCode::UNKNOWN_TYPE, "unknown type"));
        };
        // A global target is swept where the gate would fly it: converted through the origin
        // in force now.
        let Some(local) = halo_core::support::route_target(spec, &c.payload, self.gw.snapshot())
        else {
            return Err(ApiError::with_ids(
                422,
                ReasonCode::OUT_OF_BOUNDS,
                "the global target has no local point: the vehicle's origin is not known yet, or the point lies beyond the local frame (±100 km)",
                vec![c.id.to_string()],
            ));
        };
        let target = &local;
        crate::service::task::certifier::check(&cfg, cat, spec, self.gw.snapshot(), from, target)
            .map_err(|r| ApiError::with_ids(422, r.code, r.message, vec![c.id.to_string()]))?;
        let valid_for_ms =
            crate::service::task::certifier::valid_for_ms(&cfg, cat, target.duration_s);
        let body = json!({
            "id": cert_id.as_str(),
            "covers": digest,
            "valid_for_ms": valid_for_ms,
            "issuer": cfg.issuer,
        });
        let issued = self.certificate(body.to_string().as_bytes(), arrival)?;
        Ok(json!({
            "certificate": cert_id.as_str(),
            "component": c.id.as_str(),
            "covers": digest,
            "valid_for_ms": valid_for_ms,
            "valid_until_unix_ms": arrival.wall_ms + valid_for_ms,
            "issuer": cfg.issuer,
            "checked": "corridor, altitude limit and intruder separation along the straight path from the vehicle, over the action's duration",
            "issued": issued,
        }))
    }

    pub(super) fn certificate(&mut self, bytes: &[u8], arrival: Arrival) -> Answer {
        let (body, covers) = read_certificate(bytes)?;
        let now = self.now();
        let valid_until = match (body.valid_until_unix_ms, body.valid_for_ms) {
            // From the arrival, as the issuer meant it: the queue's time is not added.
            (Some(u), None) => arrival.map(u),
            (None, Some(ms)) => arrival.mono.saturating_add(Nanos::from_ms(ms)),
            _ => {
                return Err(ApiError::new(
                    422,
                    ReasonCode::INVALID_UPDATE,
                    "give exactly one of `valid_until_unix_ms` and `valid_for_ms`",
                ));
            }
        };
        if valid_until <= now {
            return Err(ApiError::new(
                422,
                ReasonCode::CERTIFICATE_EXPIRED,
                "the certificate's interval has already ended",
            ));
        }
        let cert = Certificate {
            id: body.id.clone(),
            covers,
            valid_until,
            issuer: body.issuer,
        };
        self.gw
            .handle_certificate(now, cert)
            .map_err(|e| ApiError::new(422, e.code(), e.message().to_string()))?;
        Ok(json!({"certificate": body.id, "covers": covers,
                  "valid_for_ms": valid_until.saturating_sub(now).as_ms()}))
    }
}

/// The HTTP answer to an update or certificate that cannot be taken.
fn refused(e: UpdateError) -> ApiError {
    let status = match e.code() {
        ReasonCode::UNKNOWN_SOURCE => 404,
        ReasonCode::VALUE_KIND_MISMATCH => 422,
        _ => 400,
    };
    ApiError::new(status, e.code(), e.message())
}

/// A provider update of `source`, read strictly and typed against the source's kind by the
/// core's one constructor; `generated_at` maps the provider's Unix ms onto the gateway's
/// clock. Pure: the fuzz target `service_bodies` drives it.
///
/// # Errors
/// `DUPLICATE_KEY`, `INVALID_UPDATE` (not JSON, or not the update's shape), `UNKNOWN_SOURCE`,
/// `VALUE_KIND_MISMATCH`.
pub fn read_update(
    cat: &halo_core::catalog::Catalog,
    source: &str,
    bytes: &[u8],
    generated_at: impl FnOnce(u64) -> Nanos,
) -> Result<SourceUpdate, ApiError> {
    let body = UpdateBody::parse(source, bytes).map_err(refused)?;
    let at = generated_at(body.generated_at_unix_ms);
    SourceUpdate::from_json(cat, source, &body.value, body.epoch, body.provenance, at)
        .map_err(refused)
}

/// A provider update as the service takes it: its generation time mapped at the request's
/// arrival, never at the instant the task gets to it (the queue's time counts toward its age).
/// Pure.
///
/// # Errors
/// As [`read_update`].
pub fn read_update_at(
    cat: &halo_core::catalog::Catalog,
    source: &str,
    bytes: &[u8],
    arrival: Arrival,
) -> Result<SourceUpdate, ApiError> {
    read_update(cat, source, bytes, |ms| arrival.map(ms))
}

/// A certificate's body and the digest it covers, read strictly. Pure.
///
/// # Errors
/// `DUPLICATE_KEY`, `INVALID_UPDATE`.
pub fn read_certificate(bytes: &[u8]) -> Result<(CertificateBody, Digest), ApiError> {
    let body = CertificateBody::parse(bytes).map_err(refused)?;
    // A `covers` that is not a digest is well-formed JSON with a bad value: 422.
    let covers = body
        .covers()
        .map_err(|e| ApiError::new(422, e.code(), e.message()))?;
    Ok((body, covers))
}

/// A mission-contract operation's body, read; effects are the gate's alone. Pure.
///
/// # Errors
/// `SCHEMA_INVALID`, `FORBIDDEN_ROLE`.
pub fn read_contract_op(bytes: &[u8]) -> Result<Op, ApiError> {
    let op: Op = serde_json::from_slice(bytes).map_err(|err| {
        let e = halo_core::strict::explain(bytes, &err);
        ApiError::new(
            400,
            ReasonCode::SCHEMA_INVALID,
            format!("not a contract operation: {e}"),
        )
    })?;
    if matches!(op, Op::AuthorizeEffect { .. } | Op::CommitEffect { .. }) {
        return Err(ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            "effects are authorized and committed only at the final gate",
        ));
    }
    Ok(op)
}

impl Task {
    /// `POST /v1/responses`: admission, the pump (the gate for what became ready), and the
    /// decisions as they stand after it.
    pub(super) fn response(&mut self, bytes: &[u8], sender: Option<halo_core::Id>) -> Answer {
        let t0 = Instant::now();
        let now = self.now();
        let r = self
            .gw
            .with_sender(sender.clone(), |gw| gw.handle_response(now, bytes));
        if let Ok(rep) = &r {
            self.publish_admitted(&rep.response, &rep.components, sender.as_ref());
            // Withheld at admission: told before the refresh requests the pump publishes.
            for c in rep
                .components
                .iter()
                .filter(|c| c.action && c.phase == halo_core::Phase::Withheld)
            {
                self.tell(&Told::Withheld {
                    component: c.id.as_str(),
                    reason: c.reason,
                });
            }
        }
        self.pump();
        self.metrics
            .admission_seconds
            .observe(t0.elapsed().as_secs_f64());
        // The receipts of this very response could not be written: what it would have
        // dispatched was dropped, so the report would not be true.
        if let Some(e) = self.receipts_refusal() {
            return Err(e);
        }
        match r {
            Ok(rep) => {
                let current = self.gw.response_report(&rep.response).unwrap_or(rep);
                for c in current.components.iter() {
                    self.metrics.decision(c.reason.map(|r| r.name()));
                }
                let withheld = current
                    .components
                    .iter()
                    .filter(|c| c.reason.is_some())
                    .count();
                tracing::debug!(
                    response = %current.response,
                    components = current.components.len(),
                    withheld,
                    us = t0.elapsed().as_micros() as u64,
                    "admission"
                );
                serde_json::to_value(&current).map_err(internal)
            }
            Err(rej) => {
                self.metrics.decision(Some(rej.code().name()));
                tracing::debug!(reason = %rej.code(), "admission: response rejected whole");
                Err(ApiError::rejection(&rej))
            }
        }
    }

    /// `DELETE /v1/certificates/{id}`: a held certificate revoked (what it covered loses its
    /// support).
    pub(super) fn revoke(&mut self, id: &str) -> Answer {
        match Id::new(id) {
            Ok(cid) => {
                let held = self.gw.snapshot().certificate(&cid).is_some();
                if held {
                    let now = self.now();
                    self.gw.handle_certificate_revoked(now, &cid);
                    self.pump();
                    Ok(json!({"revoked": id}))
                } else {
                    Err(ApiError::new(
                        404,
                        ReasonCode::CERTIFICATE_UNKNOWN,
                        format!("no certificate `{id}` is held"),
                    ))
                }
            }
            Err(e) => Err(ApiError::new(400, ReasonCode::INVALID_ID, e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> halo_core::catalog::Catalog {
        halo_core::catalog::Catalog::parse(crate::io::EMBEDDED_CATALOG, "uav-px4.toml")
            .unwrap_or_else(|e| panic!("the embedded catalog: {e}"))
    }

    fn traffic(generated_at_unix_ms: u64) -> Vec<u8> {
        json!({"value": [{"north_m": 300.0, "east_m": -200.0, "down_m": -40.0}], "epoch": 41,
               "provenance": "utm-feed-a", "generated_at_unix_ms": generated_at_unix_ms})
        .to_string()
        .into_bytes()
    }

    /// An update that waited in the task's queue is as old as it is: the time it waited
    /// counts. Traffic generated 1.7 s before it arrived, taken 0.5 s after that, is 2.2 s
    /// old — past the route actions' 2 s footprint — where pairing the arrival's wall time
    /// with the task's later monotonic time made it 1.7 s and fresh.
    #[test]
    fn an_update_delayed_in_the_queue_is_as_old_as_it_is() {
        let cat = catalog();
        let arrival = Arrival {
            mono: Nanos::from_ms(10_000),
            wall_ms: 1_800_000_000_000,
        };
        let taken = Nanos::from_ms(10_500);
        let u = read_update_at(&cat, "traffic", &traffic(arrival.wall_ms - 1700), arrival)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(u.state.generated_at, Nanos::from_ms(8_300));
        let age = taken.saturating_sub(u.state.generated_at);
        assert_eq!(age, Nanos::from_ms(2_200));
        let traffic_ix = cat.source_ix("traffic");
        let footprint = cat
            .types()
            .iter()
            .find(|t| t.name.as_str() == "route_action")
            .and_then(|t| t.footprint.iter().find(|(s, _)| Some(*s) == traffic_ix))
            .map(|(_, max_age)| *max_age)
            .unwrap_or_else(|| panic!("route_action has a traffic footprint"));
        assert!(
            age > footprint,
            "stale, as it should be: {age:?} vs {footprint:?}"
        );
        // The old pairing (the arrival's wall time with the task's `now`) hid the wait: it
        // put the generation 1.7 s before `taken`, a fresh 1.7 s old.
        let biased = taken.saturating_sub(Nanos::from_ms(1_700));
        assert!(taken.saturating_sub(biased) < footprint);
        assert!(u.state.generated_at < biased);
        // Taken at once, the same update is exactly as old as the provider says.
        let u = read_update_at(&cat, "traffic", &traffic(arrival.wall_ms - 1700), arrival)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            arrival.mono.saturating_sub(u.state.generated_at),
            Nanos::from_ms(1_700)
        );
    }
}
