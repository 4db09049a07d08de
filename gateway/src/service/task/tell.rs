//! Telling the pilot: STATUSTEXT lines worded by [`super::pilot_text`], paced and counted.

use super::*;

impl Task {
    /// One decision in words: kept among the last decisions, and queued for the ground station.
    pub(super) fn tell(&mut self, t: &crate::service::task::pilot_text::Told<'_>) {
        let l = crate::service::task::pilot_text::line(t);
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        let at = self.wall_ms(self.now());
        self.recent.push_back((at, l.clone()));
        if t.for_pilot()
            && let Some(p) = self.pilot.as_mut()
        {
            p.push(l);
        }
    }

    /// A supervisor notice that the pilot should hear of.
    pub(super) fn tell_notice(&mut self, name: &str, data: &serde_json::Value) {
        let text = |k: &str| data.get(k).and_then(serde_json::Value::as_str);
        let reason = text("reason").and_then(ReasonCode::from_name);
        match name {
            "deny_hold" if data.get("held") == Some(&serde_json::Value::Bool(true)) => {
                self.tell(&Told::DenyHold {
                    component: text("component").unwrap_or("?"),
                    reason,
                });
            }
            "vehicle_override" => self.tell(&Told::Override {
                to: text("to").unwrap_or("?"),
            }),
            "operator_hold" => self.tell(&Told::OperatorHold(
                data.get("held") == Some(&serde_json::Value::Bool(true)),
            )),
            _ => {}
        }
    }

    /// Hands the next due line to the bridge (one per `pilot_text::INTERVAL`).
    pub(super) fn flush_pilot_texts(&mut self) {
        let now = self.now();
        let (Some(p), Some(h)) = (self.pilot.as_mut(), self.adapter.px4()) else {
            return;
        };
        if !h.link_up() {
            return;
        }
        if let Some(l) = p.poll(now)
            && let Err(e) = h.status_text(l.severity, &l.text)
        {
            tracing::debug!(error = %e, text = %l.text, "status text for the ground station not sent");
        }
    }
}
