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

use halo_core::catalog::{Catalog, Rule, TypeSpec};
use halo_core::envelope::{FORMAT_VERSION, MAX_COMPONENTS, MAX_PREREQUISITES};
use halo_core::payload::{
    HoldPayload, LandPayload, MAX_DURATION_S, MAX_LOCAL_COORD_M, MergePayload, PayloadKind,
    RefreshPayload, ReportPayload, RouteTarget, TextPayload,
};

pub(crate) fn schema_of<T: JsonSchema>() -> Value {
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
    schema_of::<halo_core::ids::Id>()
}

/// The `support` object a component of type `t` takes (each source of its footprint a `claim`,
/// the catalog's required claims required) and whether it is required itself; none for a type
/// without a footprint.
pub(crate) fn support_schema(
    cat: &Catalog,
    t: &halo_core::catalog::TypeSpec,
    claim: &Value,
) -> Option<(Value, bool)> {
    if t.footprint.is_empty() {
        return None;
    }
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
    let needed = !sreq.is_empty();
    Some((
        json!({"type": "object", "additionalProperties": false, "properties": sp, "required": sreq}),
        needed,
    ))
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
        props.insert("payload".into(), bounded_payload_schema(cat, t));
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
        if let Some((support, needed)) = support_schema(cat, t, &claim) {
            if needed {
                required.push(json!("support"));
            }
            props.insert("support".into(), support);
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

/// Keywords a strict structured-output mode documents as supported (OpenAI's strict mode, the
/// strictest of them): anything else is left out of the strict form.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "anyOf",
    "description",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "pattern",
];

/// `schema` with `null` allowed.
fn nullable(mut schema: Value) -> Value {
    let Some(m) = schema.as_object_mut() else {
        return schema;
    };
    if let Some(e) = m.get_mut("enum").and_then(Value::as_array_mut)
        && !e.contains(&Value::Null)
    {
        e.push(Value::Null);
    }
    match m.get("type").cloned() {
        Some(Value::String(t)) => {
            m.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(mut ts)) => {
            if !ts.contains(&json!("null")) {
                ts.push(json!("null"));
            }
            m.insert("type".into(), Value::Array(ts));
        }
        _ if m.contains_key("enum") => {}
        _ => {
            let inner = Value::Object(std::mem::take(m));
            return json!({"anyOf": [inner, {"type": "null"}]});
        }
    }
    schema
}

fn strictify(v: &Value) -> Value {
    let Some(m) = v.as_object() else {
        return v.clone();
    };
    let mut out = serde_json::Map::new();
    for (k, x) in m {
        match k.as_str() {
            "const" => {
                out.insert("enum".into(), json!([x]));
            }
            "properties" => {
                let required: Vec<&str> = m
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut props = serde_json::Map::new();
                for (name, p) in x.as_object().into_iter().flatten() {
                    let sp = strictify(p);
                    props.insert(
                        name.clone(),
                        if required.contains(&name.as_str()) {
                            sp
                        } else {
                            nullable(sp)
                        },
                    );
                }
                let all: Vec<Value> = props.keys().map(|k| json!(k)).collect();
                out.insert("properties".into(), Value::Object(props));
                out.insert("required".into(), Value::Array(all));
                out.insert("additionalProperties".into(), json!(false));
            }
            "required" | "additionalProperties" => {}
            "items" => {
                out.insert(k.clone(), strictify(x));
            }
            "anyOf" | "oneOf" => {
                let alts: Vec<Value> = x.as_array().into_iter().flatten().map(strictify).collect();
                out.insert("anyOf".into(), Value::Array(alts));
            }
            k if STRICT_KEYWORDS.contains(&k) => {
                out.insert(k.to_string(), x.clone());
            }
            _ => {}
        }
    }
    if out.get("type") == Some(&json!("object")) && !out.contains_key("properties") {
        out.insert("properties".into(), json!({}));
        out.insert("required".into(), json!([]));
        out.insert("additionalProperties".into(), json!(false));
    }
    Value::Object(out)
}

/// `GET /v1/schema?strict=true`: the envelope schema in the form a strict structured-output
/// mode accepts: every property required (an optional field is nullable instead, and a `null`
/// means "absent": send the output to `POST /v1/responses?form=strict`), closed objects, no
/// `oneOf`, `const` as a one-value `enum`, only the keywords those modes document. The
/// catalog's numeric ranges are kept.
pub fn strict_envelope_schema(cat: &Catalog) -> Value {
    let mut s = strictify(&envelope_schema(cat));
    if let Some(m) = s.as_object_mut() {
        m.insert(
            "description".into(),
            json!(format!(
                "halo-gateway response envelope, strict form, catalog {} v{}: a null field is absent; POST it to /v1/responses?form=strict",
                cat.id(),
                cat.version()
            )),
        );
    }
    s
}

/// A strict-form document (a response or a candidate) as the core reads it: every member whose
/// value is `null` left out, at any depth. Repeated keys are refused first, as everywhere.
///
/// # Errors
/// `DUPLICATE_KEY` or `MALFORMED_JSON` (400).
pub fn from_strict_form(bytes: &[u8]) -> Result<Vec<u8>, crate::service::api::ApiError> {
    use crate::service::api::ApiError;
    use halo_core::reason::ReasonCode;
    halo_core::strict::check_keys(bytes).map_err(|e| {
        let code = if e.duplicate {
            ReasonCode::DUPLICATE_KEY
        } else {
            ReasonCode::MALFORMED_JSON
        };
        ApiError::new(400, code, e.message)
    })?;
    let mut v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(400, ReasonCode::MALFORMED_JSON, e.to_string()))?;
    strip_nulls(&mut v);
    serde_json::to_vec(&v)
        .map_err(|e| ApiError::new(400, ReasonCode::MALFORMED_JSON, e.to_string()))
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The type's payload schema with the catalog's and the core's limits as numeric ranges.
pub fn bounded_payload_schema(cat: &Catalog, t: &TypeSpec) -> Value {
    let mut s = payload_schema(t.payload);
    let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) else {
        return s;
    };
    let mut set = |field: &str, extra: Value| {
        if let (Some(Value::Object(p)), Value::Object(e)) = (props.get_mut(field), extra) {
            p.extend(e);
        }
    };
    match t.payload {
        PayloadKind::RouteAction => {
            let max_alt = t
                .rules
                .iter()
                .filter_map(|r| match r.rule {
                    Rule::MaxAltitude { max_m } => Some(max_m),
                    _ => None,
                })
                .fold(MAX_LOCAL_COORD_M, f64::min);
            let max_distance = t.rules.iter().find_map(|r| match r.rule {
                Rule::MaxDistance { source, max_m } => {
                    cat.source(source).map(|s| (s.name.to_string(), max_m))
                }
                _ => None,
            });
            let horizontal = match &max_distance {
                Some((src, m)) => format!(
                    "metres in PX4's local NED frame; the target must be within {m} m (horizontal) of `{src}`"
                ),
                None => "metres in PX4's local NED frame".to_string(),
            };
            for f in ["north_m", "east_m"] {
                set(
                    f,
                    json!({"minimum": -MAX_LOCAL_COORD_M, "maximum": MAX_LOCAL_COORD_M, "description": format!("{} ({horizontal})", if f == "north_m" { "north" } else { "east" })}),
                );
            }
            set(
                "down_m",
                json!({"minimum": -max_alt, "maximum": MAX_LOCAL_COORD_M,
                       "description": format!("down, metres (negative is up; at most {max_alt} m above the origin)")}),
            );
            set(
                "yaw_deg",
                json!({"minimum": -360.0, "maximum": 360.0, "description": "heading, degrees clockwise from north"}),
            );
            let max_s = if t.requires_certificate {
                (cat.max_certificate().0 as f64 / 1e9).min(MAX_DURATION_S)
            } else {
                MAX_DURATION_S
            };
            set(
                "duration_s",
                json!({"exclusiveMinimum": 0.0, "maximum": max_s,
                       "description": "how long to fly and hold the target, seconds (the interval the certificate must cover)"}),
            );
            if let Some(origin) = t.origin.and_then(|o| cat.source(o)) {
                return json!({"anyOf": [s, global_target_schema(origin.name.as_str(), max_s)]});
            }
        }
        PayloadKind::Hold => set(
            "duration_s",
            json!({"exclusiveMinimum": 0.0, "maximum": MAX_DURATION_S, "description": "how long to hold, seconds"}),
        ),
        PayloadKind::RefreshRequest => {
            let names: Vec<&str> = cat.sources().iter().map(|s| s.name.as_str()).collect();
            set(
                "sources",
                json!({"minItems": 1, "maxItems": 64, "items": {"enum": names}, "uniqueItems": true}),
            );
        }
        _ => {}
    }
    s
}

/// A route action's target on the globe, for a type with an `origin` source: converted to the
/// local frame through it (claim its epoch).
fn global_target_schema(origin: &str, max_s: f64) -> Value {
    let mut s = schema_of::<halo_core::payload::GlobalTarget>();
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        let ranges = [
            (
                "lat_deg",
                json!({"exclusiveMinimum": -90.0, "exclusiveMaximum": 90.0, "description": "latitude, degrees (WGS 84)"}),
            ),
            (
                "lon_deg",
                json!({"minimum": -180.0, "maximum": 180.0, "description": "longitude, degrees"}),
            ),
            (
                "alt_m",
                json!({"minimum": -MAX_LOCAL_COORD_M, "maximum": MAX_LOCAL_COORD_M, "description": "altitude, metres: above mean sea level for `global`, above home for `global_relative_alt`"}),
            ),
            (
                "yaw_deg",
                json!({"minimum": -360.0, "maximum": 360.0, "description": "heading, degrees clockwise from north"}),
            ),
            (
                "duration_s",
                json!({"exclusiveMinimum": 0.0, "maximum": max_s, "description": "how long to fly and hold the target, seconds (the interval the certificate must cover)"}),
            ),
        ];
        for (field, extra) in ranges {
            if let (Some(Value::Object(p)), Value::Object(e)) = (props.get_mut(field), extra) {
                p.extend(e);
            }
        }
    }
    if let Some(m) = s.as_object_mut() {
        m.insert(
            "description".into(),
            json!(format!("a target on the globe, converted to PX4's local frame through the `{origin}` source: claim its current epoch in `support`")),
        );
    }
    s
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
        let payload = &route["properties"]["payload"]["anyOf"][0];
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
        // The catalog's limits: 120 m altitude.
        assert_eq!(payload["properties"]["down_m"]["minimum"], json!(-120.0));
    }

    /// The rules strict structured-output modes document: the root is an object; every object
    /// lists every property as required and is closed; no `oneOf`, `allOf`, `not`,
    /// conditionals or `const`; only supported keywords.
    fn strict_violations(v: &Value, path: &str, bad: &mut Vec<String>) {
        if let Some(m) = v.as_object() {
            for k in m.keys() {
                if !STRICT_KEYWORDS.contains(&k.as_str()) {
                    bad.push(format!("{path}: keyword `{k}`"));
                }
            }
            if let Some(props) = m.get("properties").and_then(Value::as_object) {
                let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
                keys.sort_unstable();
                let mut req: Vec<&str> = m
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                req.sort_unstable();
                if keys != req {
                    bad.push(format!(
                        "{path}: required {req:?} is not every property {keys:?}"
                    ));
                }
                if m.get("additionalProperties") != Some(&json!(false)) {
                    bad.push(format!("{path}: open object"));
                }
                for (k, x) in props {
                    strict_violations(x, &format!("{path}/{k}"), bad);
                }
            } else if m.get("type") == Some(&json!("object")) {
                bad.push(format!("{path}: object without properties"));
            }
            if let Some(x) = m.get("items") {
                strict_violations(x, &format!("{path}/items"), bad);
            }
            for (i, x) in m
                .get("anyOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                strict_violations(x, &format!("{path}/anyOf/{i}"), bad);
            }
        }
    }

    #[test]
    fn the_strict_form_follows_the_structured_output_rules() {
        let cat = Catalog::parse(crate::io::EMBEDDED_CATALOG, "uav-px4.toml").unwrap();
        let s = strict_envelope_schema(&cat);
        assert_eq!(s["type"], "object");
        let mut bad = Vec::new();
        strict_violations(&s, "", &mut bad);
        assert!(bad.is_empty(), "{bad:#?}");
        // The checker catches what it is for: the present form breaks these rules.
        let mut loose = Vec::new();
        strict_violations(&envelope_schema(&cat), "", &mut loose);
        assert!(
            loose.iter().any(|b| b.contains("keyword `const`"))
                && loose.iter().any(|b| b.contains("is not every property")),
            "{loose:#?}"
        );
        // Optional fields are nullable, the ranges kept.
        let route = s["properties"]["components"]["items"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["properties"]["type"]["enum"] == json!(["route_action"]))
            .unwrap();
        assert_eq!(
            route["properties"]["payload"]["anyOf"][0]["properties"]["down_m"]["minimum"],
            json!(-120.0)
        );
        let vehicle_claim = &route["properties"]["support"]["properties"]["vehicle"];
        assert_eq!(vehicle_claim["type"], json!(["object", "null"]));
        assert_eq!(
            vehicle_claim["properties"]["epoch"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(s["properties"]["format"]["enum"], json!([1, null]));
    }

    #[test]
    fn a_strict_form_document_reads_as_the_envelope_without_its_nulls() {
        let b = br#"{"response_id":"r","components":[{"id":"e1","requires":null,"payload":{"text":"x","unit":null}}],"format":null}"#;
        let v: Value = serde_json::from_slice(&from_strict_form(b).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"response_id":"r","components":[{"id":"e1","payload":{"text":"x"}}]})
        );
        let dup = br#"{"a":null,"a":1}"#;
        assert_eq!(
            from_strict_form(dup).unwrap_err().code(),
            halo_core::reason::ReasonCode::DUPLICATE_KEY
        );
    }
}
