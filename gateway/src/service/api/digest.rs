//! The exact digests the gate checks certificates against, computed as the core computes
//! them (`POST /v1/digest`, the MCP `digest` tool and the reference certifier).

use super::ApiError;

/// `POST /v1/digest`: the exact digest the gate checks a certificate against, for each
/// component of a response envelope, or of `{"component": {...}}` alone (a certifier in any
/// language needs nothing else). The envelope is validated as `POST /v1/responses` validates it
/// (the same reason codes); nothing is admitted.
///
/// # Errors
/// The envelope's rejection.
#[allow(
    clippy::indexing_slicing,
    reason = "a serde_json::Value read by key never panics"
)]
pub fn digests(
    cat: &halo_core::catalog::Catalog,
    bytes: &[u8],
) -> Result<serde_json::Value, ApiError> {
    let bytes = one_component_envelope(cat, bytes);
    let raw = halo_core::envelope::parse_envelope(&bytes).map_err(|r| ApiError::rejection(&r))?;
    let v = halo_core::graph::validate(cat, &raw).map_err(|r| ApiError::rejection(&r))?;
    let components: Vec<serde_json::Value> = v
        .graph
        .components()
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id.as_str(),
                "type": cat.type_spec(c.ty).map(|t| t.name.as_str()),
                "digest": c.digest.to_hex(),
                "certificate": c.certificate.as_ref().map(|x| x.as_str()),
            })
        })
        .collect();
    Ok(serde_json::json!({ "components": components }))
}

/// `{"component": {...}}` as a one-component envelope of `cat`, the form `POST /v1/digest` and
/// `POST /v1/certify` take besides a whole envelope (which is returned as it is).
pub(crate) fn one_component_envelope(cat: &halo_core::catalog::Catalog, bytes: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(m)) if m.len() == 1 && m.contains_key("component") => {
            serde_json::json!({
                "response_id": "one-component", "agent_id": "one-component", "generation": 0,
                "catalog": {"id": cat.id().as_str(), "version": cat.version()},
                "components": [m.get("component")],
            })
            .to_string()
            .into_bytes()
        }
        _ => bytes.to_vec(),
    }
}
