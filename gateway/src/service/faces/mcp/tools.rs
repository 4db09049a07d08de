//! The MCP tools, generated from the loaded catalog: one per component type (its input schema
//! from the type's payload kind, with the catalog's limits as `minimum`/`maximum`), and the
//! fixed tools around them. Pure functions of the catalog, so a test reads them without a
//! running gateway.
//!
//! A component tool's call becomes a one-component response envelope
//! ([`component_envelope`]); everything in it but the type, the response's identity and the
//! catalog is the caller's, and the core validates it exactly as it validates `POST
//! /v1/responses` (an unknown field, a payload of the wrong shape, a claim on a source outside
//! the type's footprint: each its own reason code).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use crate::service::api::ApiError;
use crate::service::api::schema::id_schema;
use halo_core::catalog::{Catalog, Class, TypeSpec};
use halo_core::envelope::FORMAT_VERSION;
use halo_core::payload::PayloadKind;
use halo_core::reason::ReasonCode;

/// What a tool does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolKind {
    /// Sends one component of this catalog type (by name) as a one-component response.
    Component(String),
    /// Sends a whole response envelope.
    SubmitResponse,
    /// Lists the obligations.
    Obligations,
    /// Answers an obligation with a fresh candidate.
    SubmitCandidate,
    /// The vehicle and the sources' ages.
    VehicleStatus,
    /// Why a component was withheld.
    Explain,
}

/// The fixed tools' names (a catalog type of the same name gets the `component_` prefix).
pub const FIXED: [&str; 5] = [
    "submit_response",
    "obligations",
    "submit_candidate",
    "vehicle_status",
    "explain",
];

/// The agent the component tools speak as; a fresh candidate must come from the same agent.
pub const MCP_AGENT: &str = "mcp-agent";

fn object(v: Value) -> Arc<JsonObject> {
    Arc::new(match v {
        Value::Object(m) => m,
        _ => Map::new(),
    })
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn claim_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "epoch": {"type": "integer", "minimum": 0},
            "provenance": id_schema(),
        },
        "description": "the source's epoch and/or provenance you planned against (vehicle_status shows the current ones)",
    })
}

/// The input schema of the tool for type `t`.
pub fn component_input_schema(cat: &Catalog, t: &TypeSpec, certifier: bool) -> Value {
    let payload = crate::service::api::schema::bounded_payload_schema(cat, t);
    let payload_required = payload
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
        || payload.get("anyOf").is_some();
    let mut props = Map::new();
    let mut required = Vec::new();
    let mut id = id_schema();
    if let Some(m) = id.as_object_mut() {
        m.insert(
            "description".into(),
            json!(format!(
                "the component's id (default `{}`); a certificate covers the id too",
                t.name
            )),
        );
    }
    props.insert("id".into(), id);
    props.insert("payload".into(), payload);
    if payload_required {
        required.push(json!("payload"));
    }
    if let Some((mut support, needed)) =
        crate::service::api::schema::support_schema(cat, t, &claim_schema())
    {
        if needed {
            required.push(json!("support"));
        }
        if let Some(m) = support.as_object_mut() {
            m.insert(
                "description".into(),
                json!("what you planned against: source name → {epoch, provenance}"),
            );
        }
        props.insert("support".into(), support);
    }
    if t.requires_certificate {
        let mut c = id_schema();
        if let Some(m) = c.as_object_mut() {
            m.insert(
                "description".into(),
                json!("the id of a certificate a certifier issued for this exact component (its digest)"),
            );
        }
        if certifier {
            if let Some(m) = c.as_object_mut() {
                m.insert(
                    "description".into(),
                    json!("the id of a certificate issued for this exact component; leave it out and the gateway's reference certifier checks the path and certifies it"),
                );
            }
            props.insert("certificate".into(), c);
        } else {
            props.insert("certificate".into(), c);
            required.push(json!("certificate"));
        }
    }
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": required,
        "properties": props,
    })
}

/// A description a model can act on: what the type does, what it depends on, what can stop it.
fn component_description(cat: &Catalog, t: &TypeSpec, certifier: bool) -> String {
    let what = match t.payload {
        PayloadKind::RouteAction => {
            "Fly to a position target in PX4's local NED frame and hold it for `duration_s`."
        }
        PayloadKind::Hold => "Hold the current position for `duration_s`.",
        PayloadKind::Land => "Land where the vehicle is.",
        PayloadKind::Notice => "Send a notice to the operator.",
        PayloadKind::Status => "Send a status message to the operator.",
        PayloadKind::Report => "Report a sensor reading.",
        PayloadKind::RefreshRequest => "Ask the providers to refresh the named sources.",
        PayloadKind::Merge => "Merge one branch into another.",
    };
    let mut d = format!(
        "{what} Sends one `{}` component as a response of its own.",
        t.name
    );
    if t.class == Class::Action {
        d.push_str(
            " An action: it passes admission and the final dispatch gate, which re-checks it against the current state right before the vehicle gets it.",
        );
    }
    if !t.footprint.is_empty() {
        let deps: Vec<String> = t
            .footprint
            .iter()
            .filter_map(|(s, age)| {
                cat.source(*s)
                    .map(|spec| format!("{} (at most {} ms old)", spec.name, ms(age.0)))
            })
            .collect();
        d.push_str(&format!(" Depends on: {}.", deps.join(", ")));
    }
    if !t.rules.is_empty() {
        let codes: Vec<&str> = t.rules.iter().map(|r| r.code.name()).collect();
        d.push_str(&format!(" Can be withheld with: {}.", codes.join(", ")));
    }
    if t.requires_certificate && certifier {
        d.push_str(" Needs a certificate for this exact component: name one in `certificate`, or leave it out and the gateway's reference certifier checks the path from the vehicle and certifies it (or refuses with the reason).");
    } else if t.requires_certificate {
        d.push_str(" Needs `certificate`: a certificate issued for this exact component.");
    }
    if !t.recovery.recoverable.is_empty() {
        d.push_str(
            " When it is withheld the result carries an obligation: refresh what it names, then answer it with `submit_candidate`.",
        );
    }
    d
}

fn annotations(title: &str, moves_vehicle: bool) -> ToolAnnotations {
    if moves_vehicle {
        ToolAnnotations::with_title(title)
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true)
    } else {
        ToolAnnotations::with_title(title).read_only(true)
    }
}

/// The component object `schema` of a candidate's or an envelope's components.
fn any_component() -> Value {
    json!({"type": "object", "description": "a component: {id, type, payload, support?, certificate?, requires?}, as in the envelope schema (resource halo://schema/envelope)"})
}

/// Every tool for `cat`, with what it does.
pub fn tools(cat: &Catalog, certifier: bool) -> Vec<(Tool, ToolKind)> {
    let mut out = Vec::new();
    for t in cat.types() {
        let name = if FIXED.contains(&t.name.as_str()) {
            format!("component_{}", t.name)
        } else {
            t.name.to_string()
        };
        let moves = t.class == Class::Action;
        let tool = Tool::new(
            name.clone(),
            component_description(cat, t, certifier),
            object(component_input_schema(cat, t, certifier)),
        )
        .with_title(format!("send {}", t.name))
        .with_annotations(annotations(&format!("send {}", t.name), moves));
        out.push((tool, ToolKind::Component(t.name.to_string())));
    }
    out.push((
        Tool::new(
            "submit_response",
            "Send a whole response envelope (several components with prerequisites between them). The envelope is the one `POST /v1/responses` takes (schema: resource halo://schema/envelope); the answer gives each component's phase, and each withheld action's obligation.",
            object(json!({
                "type": "object", "additionalProperties": false, "required": ["response"],
                "properties": {"response": {"type": "object", "description": "the response envelope"}},
            })),
        )
        .with_annotations(annotations("send a response", true)),
        ToolKind::SubmitResponse,
    ));
    out.push((
        Tool::new(
            "obligations",
            "List the obligations: what each withheld action waits for (the sources to refresh), its scope, how long it stays open and how many attempts are left.",
            object(json!({
                "type": "object", "additionalProperties": false,
                "properties": {"state": {"enum": ["open", "all"], "description": "`open` (the default): the ones a candidate may still answer"}},
            })),
        )
        .with_annotations(annotations("list obligations", false)),
        ToolKind::Obligations,
    ));
    out.push((
        Tool::new(
            "submit_candidate",
            "Answer an obligation with fresh components planned against the current state: the same component ids as the withheld ones (within the obligation's scope), new support claims and, for an action, a new certificate. It goes through full admission and the gate again.",
            object(json!({
                "type": "object", "additionalProperties": false, "required": ["obligation", "components"],
                "properties": {
                    "obligation": {"type": "integer", "minimum": 1},
                    "components": {"type": "array", "minItems": 1, "maxItems": halo_core::envelope::MAX_COMPONENTS, "items": any_component()},
                },
            })),
        )
        .with_annotations(annotations("answer an obligation", true)),
        ToolKind::SubmitCandidate,
    ));
    out.push((
        Tool::new(
            "vehicle_status",
            "The vehicle (PX4 mode, armed, link, height above home, battery, who has control) and every source's epoch, provenance and age: what to claim in `support`.",
            object(json!({"type": "object", "additionalProperties": false, "properties": {}})),
        )
        .with_annotations(annotations("vehicle status", false)),
        ToolKind::VehicleStatus,
    ));
    out.push((
        Tool::new(
            "explain",
            "Why a component was withheld: the reason, the sources it depends on with their age against their limit, and what to refresh.",
            object(json!({
                "type": "object", "additionalProperties": false, "required": ["response_id", "component"],
                "properties": {"response_id": id_schema(), "component": id_schema()},
            })),
        )
        .with_annotations(annotations("explain a decision", false)),
        ToolKind::Explain,
    ));
    out
}

/// `INVALID_REQUEST` for people.
pub fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(400, ReasonCode::INVALID_REQUEST, message)
}

/// The component a component tool sends: `args` is the component without its type (`id`
/// defaults to the type's name; a `land` may leave out its empty payload).
///
/// # Errors
/// `UNKNOWN_FIELD` when `args` names the type (the tool does); nothing else is checked here:
/// the core validates the envelope as it validates every response.
pub fn component_object(
    cat: &Catalog,
    type_name: &str,
    args: &JsonObject,
) -> Result<JsonObject, ApiError> {
    if args.contains_key("type") {
        return Err(ApiError::with_ids(
            400,
            ReasonCode::UNKNOWN_FIELD,
            format!(
                "`type` is not an argument: the tool `{type_name}` sends a `{type_name}`; use that type's own tool or submit_response"
            ),
            vec!["type".into()],
        ));
    }
    let mut c = Map::new();
    c.insert(
        "id".into(),
        args.get("id").cloned().unwrap_or_else(|| json!(type_name)),
    );
    c.insert("type".into(), json!(type_name));
    let kind = cat
        .type_ix(type_name)
        .and_then(|ix| cat.type_spec(ix))
        .map(|t| t.payload);
    match args.get("payload") {
        Some(p) => {
            c.insert("payload".into(), p.clone());
        }
        None if matches!(kind, Some(PayloadKind::Land)) => {
            c.insert("payload".into(), json!({}));
        }
        None => {}
    }
    for (k, v) in args {
        if !matches!(k.as_str(), "id" | "payload") {
            c.insert(k.clone(), v.clone());
        }
    }
    Ok(c)
}

/// The one-component response around `component`.
///
/// # Errors
/// None in practice (serialising a JSON value); a `Result` for the callers' `?`.
pub fn component_envelope(
    cat: &Catalog,
    component: JsonObject,
    response_id: &str,
    generation: u64,
) -> Result<Vec<u8>, ApiError> {
    let env = json!({
        "format": FORMAT_VERSION,
        "response_id": response_id,
        "agent_id": MCP_AGENT,
        "generation": generation,
        "catalog": {"id": cat.id().as_str(), "version": cat.version()},
        "components": [Value::Object(component)],
    });
    serde_json::to_vec(&env).map_err(|e| invalid(e.to_string()))
}

/// Whether a component of `type_name` needs a certificate.
pub fn needs_certificate(cat: &Catalog, type_name: &str) -> bool {
    cat.type_ix(type_name)
        .and_then(|ix| cat.type_spec(ix))
        .is_some_and(|t| t.requires_certificate)
}

/// The candidate `submit_candidate` sends for obligation `obligation` of `response_id`.
///
/// # Errors
/// None today; a `Result` so a caller treats it as the other builders.
pub fn candidate_envelope(
    cat: &Catalog,
    obligation: u64,
    response_id: &str,
    agent_id: &str,
    generation: u64,
    components: &Value,
) -> Result<Vec<u8>, ApiError> {
    let env = json!({
        "obligation": obligation,
        "response_id": response_id,
        "agent_id": agent_id,
        "generation": generation,
        "catalog": {"id": cat.id().as_str(), "version": cat.version()},
        "components": components,
    });
    serde_json::to_vec(&env).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> Catalog {
        Catalog::parse(crate::io::EMBEDDED_CATALOG, "uav-px4.toml").unwrap()
    }

    #[test]
    fn one_tool_per_type_and_the_fixed_ones() {
        let c = cat();
        let t = tools(&c, false);
        let names: Vec<&str> = t.iter().map(|(t, _)| t.name.as_ref()).collect();
        for ty in c.types() {
            assert!(names.contains(&ty.name.as_str()), "{names:?}");
        }
        for f in FIXED {
            assert!(names.contains(&f), "{names:?}");
        }
        assert_eq!(t.len(), c.types().len() + FIXED.len());
        // Nothing reaches parameters, modes, arming or raw MAVLink.
        for bad in [
            "arm",
            "takeoff",
            "set_mode",
            "param_set",
            "mavlink",
            "fence",
        ] {
            assert!(!names.iter().any(|n| n.contains(bad)), "{bad} in {names:?}");
        }
        let route = &t.iter().find(|(t, _)| t.name == "route_action").unwrap().0;
        let a = route.annotations.as_ref().unwrap();
        assert_eq!(
            (a.destructive_hint, a.read_only_hint),
            (Some(true), Some(false))
        );
        let notice = &t.iter().find(|(t, _)| t.name == "notice").unwrap().0;
        assert_eq!(
            notice.annotations.as_ref().unwrap().read_only_hint,
            Some(true)
        );
    }

    #[test]
    fn the_route_schema_carries_the_catalog_limits() {
        let c = cat();
        let t = c
            .types()
            .iter()
            .find(|t| t.name.as_str() == "route_action")
            .unwrap();
        let s = component_input_schema(&c, t, false);
        assert_eq!(s["required"], json!(["payload", "support", "certificate"]));
        // A local target or one on the globe (the catalog names an `origin` source).
        let p = &s["properties"]["payload"]["anyOf"][0]["properties"];
        let g = &s["properties"]["payload"]["anyOf"][1]["properties"];
        let frames = g["frame"].to_string();
        assert!(
            frames.contains("\"global\"") && frames.contains("global_relative_alt"),
            "{frames}"
        );
        assert_eq!(g["lat_deg"]["exclusiveMaximum"], json!(90.0));
        assert_eq!(g["duration_s"]["maximum"], json!(600.0));
        // max_altitude 120 m in the catalog; max_certificate 600 s bounds the duration.
        assert_eq!(p["down_m"]["minimum"], json!(-120.0));
        assert_eq!(p["duration_s"]["maximum"], json!(600.0));
        assert_eq!(
            p["north_m"]["maximum"],
            json!(halo_core::payload::MAX_LOCAL_COORD_M)
        );
        assert!(
            p["north_m"]["description"]
                .as_str()
                .unwrap()
                .contains("500 m")
        );
        assert_eq!(
            s["properties"]["support"]["required"],
            json!(["bounds", "map", "traffic"])
        );
        // The land tool needs no payload.
        let land = c
            .types()
            .iter()
            .find(|t| t.name.as_str() == "land")
            .unwrap();
        assert_eq!(
            component_input_schema(&c, land, false)["required"],
            json!([])
        );
        // With the reference certifier on, a route action may leave its certificate out.
        assert_eq!(
            component_input_schema(&c, t, true)["required"],
            json!(["payload", "support"])
        );
    }

    #[test]
    fn a_component_call_is_a_one_component_response() {
        let c = cat();
        let args: JsonObject = serde_json::from_value(json!({
            "payload": {"text": "hello"}
        }))
        .unwrap();
        let comp = component_object(&c, "notice", &args).unwrap();
        let b = component_envelope(&c, comp, "mcp-1-1", 4).unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v["components"],
            json!([{"id": "notice", "type": "notice", "payload": {"text": "hello"}}])
        );
        assert_eq!(v["generation"], 4);
        // The core takes it as it is.
        let raw = halo_core::envelope::parse_envelope(&b).unwrap();
        halo_core::graph::validate(&c, &raw).unwrap();
        // `type` is the tool's.
        let bad: JsonObject =
            serde_json::from_value(json!({"type": "route_action", "payload": {}})).unwrap();
        let e = component_object(&c, "notice", &bad).unwrap_err();
        assert_eq!(e.code, ReasonCode::UNKNOWN_FIELD);
    }
}
