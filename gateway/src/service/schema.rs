//! `GET /v1/schema`: the JSON Schema of the response envelope for the loaded catalog, strict
//! enough for an LLM's structured-output mode: every object closed (`additionalProperties:
//! false`), required fields listed, each component type a closed alternative with its own
//! payload schema, support claims limited to the type's footprint, and the limits the gateway
//! enforces (components, prerequisites, ids).
//!
//! Payload schemas are generated from the core's payload types (`schemars`); the envelope around
//! them follows the catalog, so a schema for another catalog differs exactly where the catalog
//! does.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::core::catalog::Catalog;
use crate::core::envelope::{FORMAT_VERSION, MAX_COMPONENTS, MAX_PREREQUISITES};
use crate::core::payload::{
    HoldPayload, LandPayload, MergePayload, PayloadKind, RefreshPayload, ReportPayload,
    RouteTarget, TextPayload,
};

fn schema_of<T: JsonSchema>() -> Value {
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = g.root_schema_for::<T>().to_value();
    if let Some(m) = v.as_object_mut() {
        m.remove("$schema");
        m.remove("title");
    }
    v
}

/// The JSON Schema of a payload kind (generated from the core's payload types).
pub(crate) fn payload_schema(kind: PayloadKind) -> Value {
    match kind {
        PayloadKind::Notice | PayloadKind::Status => schema_of::<TextPayload>(),
        PayloadKind::Report => schema_of::<ReportPayload>(),
        PayloadKind::RefreshRequest => schema_of::<RefreshPayload>(),
        PayloadKind::RouteAction => schema_of::<RouteTarget>(),
        PayloadKind::Hold => schema_of::<HoldPayload>(),
        PayloadKind::Land => schema_of::<LandPayload>(),
        PayloadKind::Merge => schema_of::<MergePayload>(),
    }
}

/// The JSON Schema of an id.
pub(crate) fn id_schema() -> Value {
    schema_of::<crate::core::ids::Id>()
}

/// The envelope schema for `cat`.
pub fn envelope_schema(cat: &Catalog) -> Value {
    let claim = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "epoch": {"type": "integer", "minimum": 0},
            "provenance": id_schema(),
        },
        "description": "the source's epoch and/or provenance the agent planned against",
    });
    let prereq_phases: Vec<&str> = vec!["emitted", "dispatched", "observed_success"];
    let mut alternatives = Vec::new();
    for t in cat.types() {
        let mut props = serde_json::Map::new();
        let mut required = vec![json!("id"), json!("type"), json!("payload")];
        props.insert("id".into(), id_schema());
        props.insert("type".into(), json!({"const": t.name.as_str()}));
        props.insert("payload".into(), payload_schema(t.payload));
        if !t.prerequisites.is_empty() {
            props.insert(
                "requires".into(),
                json!({
                    "type": "array",
                    "maxItems": MAX_PREREQUISITES,
                    "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["id", "phase"],
                        "properties": {"id": id_schema(), "phase": {"enum": prereq_phases}},
                    },
                }),
            );
        }
        if !t.footprint.is_empty() {
            let mut sp = serde_json::Map::new();
            let mut sreq = Vec::new();
            for (s, _) in &t.footprint {
                if let Some(spec) = cat.source(*s) {
                    sp.insert(spec.name.to_string(), claim.clone());
                    if t.claims_required & (1u64 << s.0) != 0 {
                        sreq.push(json!(spec.name.as_str()));
                    }
                }
            }
            if !sreq.is_empty() {
                required.push(json!("support"));
            }
            props.insert(
                "support".into(),
                json!({"type": "object", "additionalProperties": false, "properties": sp, "required": sreq}),
            );
        }
        if t.requires_certificate {
            props.insert("certificate".into(), id_schema());
            required.push(json!("certificate"));
        }
        alternatives.push(json!({
            "type": "object",
            "title": t.name.as_str(),
            "additionalProperties": false,
            "required": required,
            "properties": props,
        }));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": format!("halo-gateway response envelope, format {FORMAT_VERSION}, catalog {} v{}", cat.id(), cat.version()),
        "type": "object",
        "additionalProperties": false,
        "required": ["response_id", "agent_id", "generation", "catalog", "components"],
        "properties": {
            "format": {"const": FORMAT_VERSION},
            "response_id": id_schema(),
            "agent_id": id_schema(),
            "generation": {"type": "integer", "minimum": 0},
            "catalog": {
                "type": "object",
                "additionalProperties": false,
                "required": ["id", "version"],
                "properties": {"id": {"const": cat.id().as_str()}, "version": {"const": cat.version()}},
            },
            "components": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_COMPONENTS,
                "items": {"anyOf": alternatives},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(v: &Value, path: &str, bad: &mut Vec<String>) {
        if let Some(m) = v.as_object() {
            if m.get("type") == Some(&json!("object"))
                && m.get("additionalProperties") != Some(&json!(false))
            {
                bad.push(path.to_string());
            }
            for (k, x) in m {
                closed(x, &format!("{path}/{k}"), bad);
            }
        } else if let Some(a) = v.as_array() {
            for (i, x) in a.iter().enumerate() {
                closed(x, &format!("{path}/{i}"), bad);
            }
        }
    }

    #[test]
    fn every_object_is_closed_and_every_type_is_an_alternative() {
        let cat = Catalog::parse(crate::io::EMBEDDED_CATALOG, "uav-px4.toml").unwrap();
        let s = envelope_schema(&cat);
        let mut bad = Vec::new();
        closed(&s, "", &mut bad);
        assert!(bad.is_empty(), "open objects at {bad:?}");
        let alts = s["properties"]["components"]["items"]["anyOf"]
            .as_array()
            .unwrap();
        assert_eq!(alts.len(), cat.types().len());
        let route = alts.iter().find(|a| a["title"] == "route_action").unwrap();
        assert_eq!(
            route["required"],
            json!(["id", "type", "payload", "support", "certificate"])
        );
        let payload = &route["properties"]["payload"];
        for f in [
            "frame",
            "north_m",
            "east_m",
            "down_m",
            "yaw_deg",
            "duration_s",
        ] {
            assert!(
                payload["required"].as_array().unwrap().contains(&json!(f)),
                "{payload}"
            );
        }
        assert_eq!(
            route["properties"]["support"]["required"],
            json!(["bounds", "map", "traffic"])
        );
        let status = alts.iter().find(|a| a["title"] == "status").unwrap();
        assert!(status["properties"].get("requires").is_some());
    }
}
