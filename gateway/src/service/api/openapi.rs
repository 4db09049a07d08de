//! `GET /v1/openapi.json`: an OpenAPI 3.1 document of the HTTP routes, generated from the one
//! route table the router is built from ([`ROUTES`]: method, path, the roles each admits, its
//! body cap) and from the schemas `GET /v1/schema` serves, so it cannot drift from what the
//! listener answers. Clients can be generated from it. `/mcp` (the MCP server) is named in the
//! description, not described as REST.

use serde_json::{Map, Value, json};

use crate::service::api::routes::{Access, ROUTES, Role, Route};
use halo_core::catalog::Catalog;

fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "number", "message", "ids"],
                "properties": {
                    "code": {"type": "string", "description": "a stable reason code, e.g. `EPOCH_CHANGED`"},
                    "number": {"type": "integer"},
                    "message": {"type": "string", "description": "for people"},
                    "ids": {"type": "array", "items": {"type": "string"}},
                },
            },
            "request_id": {"type": "string"},
        },
    })
}

/// The request body's schema of a route with a body.
fn body_schema(r: &Route) -> Value {
    match (r.method, r.path) {
        ("POST", "/v1/responses") => json!({"$ref": "#/components/schemas/Envelope"}),
        ("POST", "/v1/obligations/{id}/candidates") => json!({
            "description": "a fresh candidate: the envelope's fields and `obligation` (docs/envelope.md)",
            "type": "object",
            "required": ["obligation", "response_id", "agent_id", "generation", "catalog", "components"],
            "properties": {
                "obligation": {"type": "integer", "minimum": 1},
                "response_id": {"type": "string"},
                "agent_id": {"type": "string"},
                "generation": {"type": "integer", "minimum": 0},
                "catalog": {"type": "object"},
                "components": {"type": "array", "items": {"type": "object"}},
            },
        }),
        ("POST", "/v1/state/{source}") => json!({
            "description": "a provider update (docs/envelope.md): give one of generated_at_unix_ms and generated_at_ms",
            "type": "object",
            "required": ["epoch", "provenance"],
            "properties": {
                "value": {"description": "the source's value, of its catalog kind (null for `none`)"},
                "epoch": {"type": "integer", "minimum": 0},
                "provenance": {"type": "string"},
                "generated_at_unix_ms": {"type": "integer", "minimum": 0},
                "generated_at_ms": {"type": "integer", "minimum": 0},
            },
        }),
        ("POST", "/v1/certificates") => json!({
            "type": "object",
            "required": ["id", "covers"],
            "properties": {
                "id": {"type": "string"},
                "covers": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "the component digest (POST /v1/digest)"},
                "valid_for_ms": {"type": "integer", "minimum": 1},
                "valid_until_unix_ms": {"type": "integer", "minimum": 1},
                "issuer": {"type": "string"},
            },
        }),
        ("POST", "/v1/digest") | ("POST", "/v1/certify") => json!({
            "description": "`{\"component\": {...}}`, or a whole envelope",
            "anyOf": [
                {"type": "object", "required": ["component"], "properties": {"component": {"type": "object"}}},
                {"$ref": "#/components/schemas/Envelope"},
            ],
        }),
        ("POST", "/v1/operator/{action}") => json!({
            "description": "`takeoff`: {\"altitude_m\": number}; the other actions: {}",
            "type": "object",
            "properties": {"altitude_m": {"type": "number", "exclusiveMinimum": 0}},
        }),
        _ => json!({
            "description": "see docs/run.md and docs/contracts.md",
            "type": "object",
        }),
    }
}

fn operation_id(r: &Route) -> String {
    let mut id = r.method.to_ascii_lowercase();
    for seg in r.path.split('/').filter(|s| !s.is_empty() && *s != "v1") {
        id.push('_');
        id.push_str(
            &seg.trim_start_matches('{')
                .trim_end_matches('}')
                .replace('-', "_"),
        );
    }
    id
}

fn roles(r: &Route) -> Vec<&'static str> {
    let name = |x: &Role| match x {
        Role::Agent => "agent",
        Role::Provider => "provider",
        Role::Operator => "operator",
    };
    match r.access {
        Access::Roles(rs) => rs.iter().map(name).collect(),
        Access::SourceOwner => vec!["provider", "operator"],
        Access::Read => Vec::new(),
    }
}

/// The document for the loaded catalog.
pub fn openapi(cat: &Catalog) -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for r in ROUTES {
        let params: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|p| json!({"name": p, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let who = roles(r);
        let mut op = json!({
            "operationId": operation_id(r),
            "summary": r.what,
            "description": if who.is_empty() {
                "open; any role's credential with `auth.require_for_read`".to_string()
            } else {
                format!("the {} credential{}", who.join(" or "), if r.note.is_empty() { String::new() } else { format!(" ({})", r.note) })
            },
            "x-roles": who,
            "parameters": params,
            "responses": {
                "200": {"description": "the answer", "content": {"application/json": {"schema": {"type": ["object", "array"]}}}},
                "4XX": {"description": "refused, with a stable reason code", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "5XX": {"description": "the gateway cannot take it now (busy, shutting down, receipts unavailable)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        });
        if let Some(m) = op.as_object_mut() {
            if !who.is_empty() {
                m.insert("security".into(), json!([{"bearer": []}]));
            }
            if let Some(cap) = r.body {
                m.insert(
                    "requestBody".into(),
                    json!({
                        "required": true,
                        "description": format!("at most {} bytes (more is 413 {})", cap.bytes, cap.too_large.name()),
                        "content": {"application/json": {"schema": body_schema(r)}},
                    }),
                );
            }
            if r.path == "/v1/events" {
                m.insert(
                    "responses".into(),
                    json!({
                        "200": {"description": "server-sent events; resume with Last-Event-ID", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                        "4XX": {"description": "refused", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    }),
                );
            }
        }
        let entry = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        if let Some(e) = entry.as_object_mut() {
            e.insert(r.method.to_ascii_lowercase(), op);
        }
    }
    let mut envelope = crate::service::api::schema::envelope_schema(cat);
    if let Some(m) = envelope.as_object_mut() {
        m.remove("$schema");
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "halo-gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!(
                "The HTTP interface of halo-gateway for catalog {} v{} (docs/run.md). Bearer credentials per role: agent, provider, operator. The MCP server is at /mcp on the same listener (docs/mcp.md).",
                cat.id(),
                cat.version()
            ),
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Envelope": envelope, "Error": error_schema()},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_in_the_document_with_its_roles() {
        let cat = Catalog::parse(crate::io::EMBEDDED_CATALOG, "uav-px4.toml").unwrap();
        let d = openapi(&cat);
        let mut n = 0;
        for r in ROUTES {
            let op = &d["paths"][r.path][r.method.to_ascii_lowercase()];
            assert!(op.is_object(), "{} {} missing", r.method, r.path);
            assert_eq!(op["x-roles"], json!(roles(r)), "{} {}", r.method, r.path);
            assert_eq!(op["requestBody"].is_object(), r.body.is_some());
            n += 1;
        }
        let ops: usize = d["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(ops, n, "an operation without a route");
        let ids: std::collections::BTreeSet<String> = ROUTES.iter().map(operation_id).collect();
        assert_eq!(ids.len(), ROUTES.len(), "operation ids are unique");
    }
}
