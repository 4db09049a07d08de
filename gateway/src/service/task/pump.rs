//! The core's call order after every input: drain the core's events to the hub, pass every ready
//! token to the final gate (synchronously: nothing here awaits), let the supervisor act on what
//! happened, and write every receipt before what it records leaves.

use super::*;

impl Task {
    /// The core's output side, in the documented order: events, the final gate for every
    /// ready token, receipts. Synchronous.
    pub fn pump(&mut self) {
        let now = self.now();
        self.gw.handle_timeout(now);
        loop {
            let mut progressed = false;
            while let Some(e) = self.gw.poll_event() {
                self.on_core_event(&e);
                progressed = true;
            }
            while let Some(tok) = self.gw.poll_dispatch() {
                // Evaluation only (`Embedded::gate_delay`): the gate runs later, on the task's
                // clock like everything else here; the flight binary has no such hook.
                #[cfg(feature = "__evaluation")]
                let Some(tok) = self.late.defer(now, tok) else {
                    continue;
                };
                self.gate(tok);
                progressed = true;
            }
            #[cfg(feature = "__evaluation")]
            while let Some(tok) = self.late.due(self.now()) {
                self.gate(tok);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        self.after_gates();
    }

    /// The final gate for one ready token, and what follows it at once.
    pub(super) fn gate(&mut self, tok: halo_core::DispatchToken) {
        let t0 = Instant::now();
        let out = self
            .gw
            .final_gate_with(self.now(), tok, &mut self.adapter, &mut self.monitor);
        self.metrics
            .gate_seconds
            .observe(t0.elapsed().as_secs_f64());
        for (binding, what) in self.adapter.take_enqueued() {
            self.sup.handle_enqueued(binding, what);
        }
        self.supervised();
        self.contract_receipts();
        self.on_gate(&out);
    }

    /// After the gates of a pump: ended streams released, receipts written, then what the
    /// gates staged handed to the bridge.
    pub(super) fn after_gates(&mut self) {
        // Streams the supervisor ended (replaced, held, expired) no longer watch their support.
        for b in std::mem::take(&mut self.ended) {
            if let Some((r, c)) = self.adapter.attribute(&b) {
                let (r, c) = (r.clone(), c.clone());
                self.gw.stream_ended(&r, &c);
            }
        }
        // INVARIANT (receipt before setpoint): what the gate staged reaches the bridge only
        // after the receipts of this pump, its own among them, were appended whole.
        if self.write_receipts() {
            self.adapter.release_staged();
        } else {
            let dropped = self.adapter.discard_staged_targets();
            self.fail_closed(&dropped);
        }
    }

    /// Carries out what the supervisor decided, in order, and opens or closes the gate's
    /// adapter as it says.
    pub(super) fn supervised(&mut self) {
        while let Some(o) = self.sup.poll_output() {
            let now = self.now();
            match o {
                Output::StreamEnded(b) => self.ended.push(b),
                Output::Observed(b) => {
                    if let Some((r, c)) = self.adapter.attribute(&b) {
                        let (r, c) = (r.clone(), c.clone());
                        let _ = self.gw.handle_observation(now, &r, &c, true);
                    }
                }
                Output::Control(granted) => {
                    self.push_vehicle_source("control", now, Value::Flag(granted));
                }
                Output::LinkHeard(at) => self.push_vehicle_source("link", at, Value::Flag(true)),
                Output::Answer(ticket, a) => {
                    if let Some(reply) = self.replies.remove(&ticket) {
                        let _ = reply.send(a.map_err(ApiError::refusal));
                    }
                }
                Output::Record(what, detail) => self.gw.record_external(now, what, detail),
                Output::Notice(name, data) => {
                    if name == "vehicle_override" {
                        self.metrics.overrides.inc();
                    }
                    self.tell_notice(name, &data);
                    self.publish(name, &data);
                }
                Output::DenyHoldLatency(latency) => {
                    #[allow(clippy::cast_precision_loss, reason = "seconds for a histogram")]
                    self.metrics
                        .deny_hold_seconds
                        .observe(latency.0 as f64 / 1e9);
                }
                Output::Silent(silent) => {
                    let secs = silent.0 / 1_000_000_000;
                    tracing::warn!(
                        vehicle = %self.vehicle_url,
                        silent_s = secs,
                        "no heartbeat from the vehicle for {secs} s: {}",
                        halo_supervisor::link_hint(&self.vehicle_url)
                    );
                }
            }
        }
        self.adapter.set_open(self.sup.dispatch_open());
    }

    pub(super) fn on_core_event(&mut self, e: &Event) {
        match e {
            Event::Phase {
                component: at,
                phase,
                reason,
            } => {
                let (response, component) = (at.response(), at.id());
                self.metrics.decision(reason.map(|r| r.name()));
                if *phase == halo_core::Phase::Withheld
                    && self
                        .gw
                        .component_report(response, component)
                        .is_some_and(|c| c.action)
                {
                    self.tell(&Told::Withheld {
                        component: component.as_str(),
                        reason: *reason,
                    });
                }
                if let Some(r) = reason {
                    tracing::info!(%response, %component, %phase, reason = %r, "phase");
                } else {
                    tracing::debug!(%response, %component, %phase, "phase");
                }
                self.publish("phase", e);
            }
            Event::Emit {
                component: at,
                path,
                payload,
            } => {
                let (response, component) = (at.response(), at.id());
                tracing::info!(%response, %component, path = %path, "emitted");
                // The payload as the agent wrote it, without the kind's enum tag.
                let body = match serde_json::to_value(payload.as_ref()) {
                    Ok(serde_json::Value::Object(m)) if m.len() == 1 => m
                        .into_iter()
                        .next()
                        .map_or(serde_json::Value::Null, |(_, v)| v),
                    Ok(v) => v,
                    Err(_) => serde_json::Value::Null,
                };
                self.publish(
                    "emit",
                    &json!({"event": "emit", "response": response, "component": component,
                            "path": path, "payload": body}),
                );
            }
            Event::ObligationCreated { id } => {
                // The core keeps the obligation until its event has been polled.
                let Some(obligation) = self.gw.obligation(*id).cloned() else {
                    tracing::warn!(obligation = id.0, "obligation created and already gone");
                    return;
                };
                self.tell(&Told::Refresh {
                    component: obligation.component.id().as_str(),
                    sources: &obligation.required,
                });
                tracing::info!(
                    obligation = obligation.id.0,
                    response = %obligation.component.response(),
                    component = %obligation.component.id(),
                    reason = %obligation.reason,
                    "obligation created: refresh requested"
                );
                let view = self.obligation_view(&obligation);
                self.publish(
                    "obligation_created",
                    &json!({"event": "obligation_created", "obligation": view}),
                );
            }
            Event::ObligationChanged { id, state } => self.publish(
                "obligation_changed",
                &json!({"event": "obligation_changed", "id": id.0,
                        "state": state.name().to_ascii_lowercase(), "open": state.is_live()}),
            ),
            Event::SupportLost {
                component: at,
                binding,
                code,
            } => {
                let now = self.now();
                self.sup.handle_support_lost(
                    now,
                    at.response(),
                    at.id(),
                    binding.0,
                    *code,
                    &mut self.adapter,
                );
                self.supervised();
            }
        }
    }

    pub(super) fn on_gate(&mut self, out: &GateOutcome) {
        self.metrics
            .gate_outcomes
            .get_or_create(&OutcomeLabel {
                outcome: gate_label(out).into(),
            })
            .inc();
        match out {
            GateOutcome::Dispatched {
                response,
                component,
                binding,
                ..
            } => {
                tracing::info!(%response, %component, binding = %binding.short(), "final gate: dispatched");
                self.tell(&Told::Dispatched {
                    component: component.as_str(),
                });
            }
            GateOutcome::Denied {
                response,
                component,
                code,
                ..
            } => tracing::warn!(%response, %component, reason = %code, "final gate: denied"),
            GateOutcome::Refused { code } => {
                tracing::warn!(reason = %code, "final gate: token refused");
            }
            GateOutcome::EnqueueFailed {
                response,
                component,
                error,
                ..
            } => {
                tracing::warn!(%response, %component, error = %error, "final gate: the vehicle adapter refused the enqueue");
            }
        }
        let view = self.gate_view(out);
        self.publish("gate", &view);
    }
}

fn gate_label(o: &GateOutcome) -> &'static str {
    match o {
        GateOutcome::Dispatched { .. } => "dispatched",
        GateOutcome::Denied { .. } => "denied",
        GateOutcome::Refused { .. } => "refused",
        GateOutcome::EnqueueFailed { .. } => "enqueue_failed",
    }
}
