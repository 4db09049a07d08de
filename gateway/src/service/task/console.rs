//! What the operator's console reads besides the status: every live response with what an
//! operator needs to act on its components (the certificate a component names, the digest a
//! certificate must cover, a route action's target), and the age limits its AoI bars are drawn
//! against.

use serde_json::{Value as Json, json};

use super::Task;
use super::cmd::Party;
use halo_core::catalog::{Catalog, Class, SourceIx};
use halo_core::engine::ComponentReport;
use halo_core::ids::Id;
use halo_core::payload::Payload;
use halo_core::time::Nanos;

impl Task {
    /// `GET /v1/responses`: the live responses in id order, each component as
    /// `GET /v1/responses/{id}` shows it plus `certificate` (the id it names) and, for a route
    /// action in the local frame, `target_ned_m` and `duration_s`.
    pub(super) fn responses_view(&self, by: &Party) -> Json {
        let mut ids: Vec<&Id> = self
            .gw
            .response_ids()
            .filter(|rid| by.sees(self.owners.get(rid.as_str())))
            .collect();
        ids.sort();
        let all: Vec<Json> = ids
            .into_iter()
            .filter_map(|rid| self.response_view(rid))
            .collect();
        Json::Array(all)
    }

    fn response_view(&self, rid: &Id) -> Option<Json> {
        let report = self.gw.response_report(rid)?;
        let graph = self.gw.graph(rid)?;
        let components: Vec<Json> = report
            .components
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or(Json::Null);
                let spec = graph.index_of(&c.id).and_then(|i| graph.component(i));
                if let (Some(m), Some(g)) = (v.as_object_mut(), spec) {
                    m.insert("certificate".into(), json!(g.certificate));
                    if let Payload::RouteAction(t) = &*g.payload {
                        m.insert(
                            "target_ned_m".into(),
                            json!([t.north_m, t.east_m, t.down_m]),
                        );
                        m.insert("duration_s".into(), json!(t.duration_s));
                    }
                }
                v
            })
            .collect();
        let principal = self.owners.get(rid.as_str()).map(|p| p.to_string());
        Some(json!({"response": report.response, "principal": principal, "components": components}))
    }

    /// The `admitted` event: a response (or a fresh candidate's replacement) was taken, so a
    /// client that shows responses knows to read them; `principal` names the agent principal
    /// that sent it (absent for the stdio link's own agent).
    pub(super) fn publish_admitted(
        &self,
        rid: &Id,
        components: &[ComponentReport],
        principal: Option<&Id>,
    ) {
        let components: Vec<&Id> = components.iter().map(|c| &c.id).collect();
        let mut body = json!({"response": rid, "components": components});
        if let (Some(p), Some(m)) = (principal, body.as_object_mut()) {
            m.insert("principal".into(), json!(p));
        }
        self.publish("admitted", &body);
    }
}

/// The age limit an action puts on `source`: the strictest footprint limit among the catalog's
/// action types (none when no action type names the source).
pub(super) fn action_age_limit(cat: &Catalog, source: SourceIx) -> Option<Nanos> {
    cat.types()
        .iter()
        .filter(|t| t.class == Class::Action)
        .filter_map(|t| t.max_age(source))
        .min()
}
