//! The operator's console: one page of plain HTML, CSS and JavaScript compiled into the binary
//! and served at `GET /` on both listeners (docs/console.md). The page holds no data and no
//! secret, so it needs no credential; it asks the gateway's own routes for everything it shows
//! with the operator credential typed into it (kept in the tab's session storage, sent as
//! `Authorization: Bearer`, never in a URL), and follows `GET /v1/events` for what changes.
//! No build step, nothing fetched from elsewhere: it works on the companion's own network.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use halo_core::reason::ReasonCode;

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("console.js");
const STYLE: &str = include_str!("console.css");

/// Scripts, styles and connections from this origin only; no inline script, no frames.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The page's routes: `/`, `/console.js`, `/console.css`, `/console/reasons.json` (the reason
/// codes in words) and `/favicon.ico` (answered empty, so a browser's request for it is no
/// error).
pub fn routes() -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset(PAGE, "text/html; charset=utf-8") }),
        )
        .route(
            "/console.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route("/console/reasons.json", get(|| async { reasons() }))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

/// Every reason code with the sentence that explains it, so the page shows words next to a
/// code it has not seen before.
fn reasons() -> Response {
    let table: serde_json::Map<String, serde_json::Value> = ReasonCode::ALL
        .iter()
        .map(|c| (c.name().to_string(), c.description().into()))
        .collect();
    asset(
        serde_json::Value::Object(table).to_string(),
        "application/json",
    )
}

fn asset(body: impl IntoResponse, ty: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}
