//! The HTTP interface (axum on tokio): agent link, providers, operator, status and metrics.
//!
//! Authorization lives in one place: the [`Caller`] extractor checks every request against
//! [`ROUTES`], the one table of routes and the roles each admits, before the handler runs and
//! before any body is read. No credential is 401 `UNAUTHENTICATED`, a credential of a role the
//! route does not admit is 403 `FORBIDDEN_ROLE`, a write to a source the caller does not own is
//! 403 `SOURCE_NOT_WRITABLE`. Credentials are compared in constant time. Bodies are read by the
//! [`JsonBody`] extractor: JSON only (415), through the route's size cap (413), within the body
//! timeout (408); an error changes nothing. Every error is JSON:
//! `{"error": {"code", "number", "message", "ids"}, "request_id"}`. docs/run.md's role table is
//! [`role_table`]'s output (a test holds them equal).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{
    ConnectInfo, FromRequest, FromRequestParts, MatchedPath, Path, Request, State,
};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use futures_util::stream::Stream;
use tokio::sync::{mpsc, watch};

use crate::service::api::ApiError;
use crate::service::api::digest::digests;
use crate::service::api::routes::{Access, BodyCap, ROUTES, Role, Route, SMALL_LIMIT};
use crate::service::infra::clock::{Arrival, Clock};
use crate::service::infra::hub::{Hub, Item, Reader};
use crate::service::infra::limits::{Limits, retry_after_secs};
use crate::service::infra::listener::{PeerCertificate, RateLimited, RequestIds};
use crate::service::infra::metrics::{Metrics, PrincipalLabel, RequestLabel};
use crate::service::infra::principals::{Identified, Principal, Principals};
use crate::service::task::{Answer, Cmd, OperatorOp, Party, RESPONSE_LIMIT, Reply, ask};
use Role::{Agent, Operator, Provider};
use halo_core::reason::ReasonCode;

/// Shared state of the HTTP layer.
#[derive(Clone)]
pub struct AppState {
    /// The service task's input.
    pub(crate) cmds: mpsc::Sender<Cmd>,
    /// Events.
    pub(crate) hub: Hub,
    /// Metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// The principals and their credentials (reloadable).
    pub(crate) principals: Arc<Principals>,
    /// Require a credential for status and metrics.
    pub(crate) require_for_read: bool,
    /// Turns true at shutdown (ends event streams).
    pub(crate) shutdown: watch::Receiver<bool>,
    /// The envelope's JSON Schema for the loaded catalog.
    pub(crate) schema: Arc<String>,
    /// Open event streams per role, and the cap.
    pub(crate) streams: Arc<StreamCaps>,
    /// This listener serves the operator credential only (`listen.operator`).
    pub(crate) operator_only: bool,
    /// Each catalog source's owner, so a write from the wrong party is refused before its
    /// body is read.
    pub(crate) owners: Arc<std::collections::BTreeMap<String, halo_core::catalog::Owner>>,
    /// The loaded catalog (`POST /v1/digest`).
    pub(crate) catalog: Arc<halo_core::catalog::Catalog>,
    /// The MCP server's shared part (`/mcp` on the main listener), and its session caps.
    pub(crate) mcp: Option<McpFace>,
    /// The service's clock: each request's arrival is stamped on it ([`stamp_arrival`]).
    pub(crate) clock: Clock,
    /// The request rate per principal and this listener's authentication backoff.
    pub(crate) limits: Arc<Limits>,
}

/// Open event streams per role and per principal, against a cap for each.
#[derive(Debug, Default)]
pub struct StreamCaps {
    /// Most open streams per role.
    pub max_per_role: usize,
    /// Most open streams of one principal.
    pub max_per_principal: usize,
    agent: AtomicUsize,
    operator: AtomicUsize,
    /// Open streams by principal name (only names with a stream open).
    per_principal: Mutex<HashMap<Arc<str>, usize>>,
}

/// Why a stream was refused a place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamCap {
    Role,
    Principal,
}

impl StreamCaps {
    /// A cap of `max_per_role` streams for each role and `max_per_principal` for each
    /// principal.
    pub fn new(max_per_role: usize, max_per_principal: usize) -> StreamCaps {
        StreamCaps {
            max_per_role,
            max_per_principal,
            ..StreamCaps::default()
        }
    }

    fn counter(&self, role: Role) -> &AtomicUsize {
        match role {
            Role::Operator => &self.operator,
            Role::Agent | Role::Provider => &self.agent,
        }
    }

    /// A place for one more stream of `principal`, or the cap it is at.
    fn take(
        self: &Arc<Self>,
        principal: &Principal,
        metrics: &Arc<Metrics>,
    ) -> Result<StreamPlace, StreamCap> {
        let name: Arc<str> = Arc::from(principal.name.as_str());
        {
            let mut open = self
                .per_principal
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mine = open.entry(Arc::clone(&name)).or_insert(0);
            if *mine >= self.max_per_principal {
                if *mine == 0 {
                    open.remove(&name);
                }
                return Err(StreamCap::Principal);
            }
            *mine += 1;
        }
        let c = self.counter(principal.role);
        let mut n = c.load(Ordering::Acquire);
        loop {
            if n >= self.max_per_role {
                self.release(&name);
                return Err(StreamCap::Role);
            }
            match c.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        metrics.event_streams.inc();
        Ok(StreamPlace {
            caps: Arc::clone(self),
            role: principal.role,
            name,
            metrics: Arc::clone(metrics),
        })
    }

    fn release(&self, name: &Arc<str>) {
        let mut open = self
            .per_principal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(name);
            }
        }
    }
}

/// One open stream's place under its role's and its principal's caps; freed when the
/// stream ends.
struct StreamPlace {
    caps: Arc<StreamCaps>,
    role: Role,
    name: Arc<str>,
    metrics: Arc<Metrics>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.caps.counter(self.role).fetch_sub(1, Ordering::AcqRel);
        self.caps.release(&self.name);
        self.metrics.event_streams.dec();
    }
}

/// The settings of the layers every route goes through.
#[derive(Clone, Debug)]
pub struct Layers {
    /// A request body must keep arriving (no gap longer than this).
    pub(crate) body_timeout: Duration,
    /// A request must be answered within this (event streams answer at once, then stream).
    pub(crate) request_timeout: Duration,
    /// The start's boot epoch, for request ids.
    pub(crate) boot: u64,
}

/// `/mcp` on the main listener: the MCP server's shared part and its session caps.
#[derive(Clone)]
pub struct McpFace {
    /// What every session shares.
    pub shared: Arc<crate::service::faces::mcp::Shared>,
    /// Sessions open at once (`listen.max_mcp_sessions`).
    pub max_sessions: usize,
    /// Sessions of one principal (`listen.max_mcp_sessions_per_principal`).
    pub per_principal: usize,
}

/// The router, with every layer: request ids (`x-request-id`, in error bodies too), the
/// request log, timeouts, the content type, JSON errors, and the operator listener's
/// credential check.
pub fn router(state: AppState, layers: &Layers) -> Router {
    use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
    let operator_only = state.operator_only;
    let clock = state.clock;
    let guard_state = state.clone();
    let mcp = (!operator_only).then(|| state.mcp.clone()).flatten();
    let mut routes = routes(state);
    if let Some(face) = mcp {
        routes = routes.merge(mcp_routes(guard_state.clone(), &face));
    }
    let routes = if operator_only {
        routes.layer(axum::middleware::from_fn_with_state(
            guard_state,
            operator_listener_guard,
        ))
    } else {
        routes
    };
    // The console's page holds no data, so it is served without a credential on both
    // listeners (outside the operator listener's guard); everything it shows comes from the
    // routes above with the credential the operator types into it.
    routes
        .merge(crate::service::faces::console::routes())
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            layers.body_timeout,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            layers.request_timeout,
        ))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    let id = req
                        .headers()
                        .get("x-request-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    tracing::debug_span!("request", id, method = %req.method(), path = req.uri().path())
                })
                .on_request(())
                // Refusals are answers, not failures: the response line below is the log.
                .on_failure(())
                .on_response(
                    |resp: &Response, latency: Duration, _span: &tracing::Span| {
                        let status = resp.status().as_u16();
                        let ms = latency.as_secs_f64() * 1e3;
                        if status == 500 {
                            tracing::warn!(status, latency_ms = ms, "request failed");
                        } else {
                            tracing::debug!(status, latency_ms = ms, "request");
                        }
                    },
                ),
        )
        .layer(axum::middleware::from_fn_with_state(clock, stamp_arrival))
        .layer(SetRequestIdLayer::x_request_id(RequestIds::new(layers.boot)))
}

/// Stamps the request's arrival on both clocks before anything else reads it (its body, a
/// credential check, the service task's queue), so a provider's generation time and a
/// certificate's end are mapped at the arrival ([`crate::service::infra::clock`]).
async fn stamp_arrival(
    State(clock): State<Clock>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    req.extensions_mut().insert(clock.arrival());
    next.run(req).await
}

/// The request's arrival ([`stamp_arrival`]; stamped now if a router without the layer
/// served it).
struct Arrived(Arrival);

impl FromRequestParts<AppState> for Arrived {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Arrived, Infallible> {
        Ok(Arrived(
            parts
                .extensions
                .get::<Arrival>()
                .copied()
                .unwrap_or_else(|| st.clock.arrival()),
        ))
    }
}

/// The handler of a route in [`ROUTES`].
fn handler(r: &Route) -> Option<MethodRouter<AppState>> {
    Some(match (r.method, r.path) {
        ("POST", "/v1/responses") => post(post_response),
        ("GET", "/v1/responses") => get(get_responses),
        ("GET", "/v1/responses/{id}") => get(get_response),
        ("POST", "/v1/obligations/{id}/candidates") => post(post_candidate),
        ("GET", "/v1/obligations") => get(get_obligations),
        ("GET", "/v1/events") => get(get_events),
        ("POST", "/v1/state/{source}") => post(post_state),
        ("POST", "/v1/certificates") => post(post_certificate),
        ("DELETE", "/v1/certificates/{id}") => delete(delete_certificate),
        ("POST", "/v1/digest") => post(post_digest),
        ("POST", "/v1/certify") => post(post_certify),
        ("POST", "/v1/operator/{action}") => post(post_operator),
        ("POST", "/v1/contract") => post(post_contract),
        ("GET", "/v1/contract") => get(get_contract),
        ("POST", "/v1/goals") => post(post_goal),
        ("POST", "/v1/goals/witness") => post(post_witness),
        ("GET", "/v1/status") => get(get_status),
        ("GET", "/v1/audit/head") => get(get_audit_head),
        ("POST", "/v1/audit/exported") => post(post_head_exported),
        ("GET", "/metrics") => get(get_metrics),
        ("GET", "/v1/schema") => get(get_schema),
        ("GET", "/v1/openapi.json") => get(get_openapi),
        _ => return None,
    })
}

/// The router: exactly the routes of [`ROUTES`], each with its handler.
fn routes(state: AppState) -> Router {
    let mut router = Router::new();
    let mut paths: Vec<&str> = ROUTES.iter().map(|r| r.path).collect();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        let methods = ROUTES
            .iter()
            .filter(|r| r.path == path)
            .filter_map(handler)
            .fold(MethodRouter::new(), MethodRouter::merge);
        router = router.route(path, methods);
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// `/mcp`: the MCP server over streamable HTTP ([`crate::service::faces::mcp`]), for the agent
/// credential only (401 / 403 as every route). An `initialize` (a POST without
/// `Mcp-Session-Id`) while `max_sessions` sessions are open, or while its principal holds
/// `per_principal`, is `429 TOO_MANY_STREAMS`; a session idle for five minutes is closed, and
/// so is a session whose principal a credential reload no longer holds (rotated or revoked).
fn mcp_routes(state: AppState, face: &McpFace) -> Router {
    let (service, sessions) =
        crate::service::faces::mcp::http_service(&face.shared, RESPONSE_LIMIT + SMALL_LIMIT);
    let owners = Arc::new(McpOwners::default());
    tokio::spawn(close_unheld_mcp_sessions(
        Arc::clone(&state.principals),
        Arc::clone(&sessions),
        Arc::clone(&owners),
        Arc::clone(&state.metrics),
        state.shutdown.clone(),
    ));
    let (max_sessions, per_principal) = (face.max_sessions, face.per_principal);
    // One `initialize` at a time from the count to its session's record, so two racing
    // requests cannot both pass a cap with one place left (rmcp answers at once, from memory).
    let opening = Arc::new(tokio::sync::Mutex::new(()));
    let guard = move |mut req: Request, next: axum::middleware::Next| {
        let state = state.clone();
        let sessions = Arc::clone(&sessions);
        let owners = Arc::clone(&owners);
        let opening = Arc::clone(&opening);
        async move {
            let checked = authorize(
                &state,
                (req.headers(), req.extensions()),
                &[Role::Agent],
                "use the MCP server",
                true,
            );
            let principal = match checked {
                Err(e) => return error_response(&e),
                // The tools act for this principal and the session is bound to it.
                Ok(p) => {
                    req.extensions_mut()
                        .insert(crate::service::faces::mcp::McpCaller(Arc::from(
                            p.name.as_str(),
                        )));
                    p
                }
            };
            let opens =
                req.method() == Method::POST && !req.headers().contains_key("mcp-session-id");
            let _turn = if opens {
                Some(opening.lock().await)
            } else {
                None
            };
            if opens {
                let open: std::collections::HashSet<Arc<str>> =
                    sessions.sessions.read().await.keys().cloned().collect();
                let (total, mine) = owners.count(&open, &principal.name);
                let refusal = if total >= max_sessions {
                    Some(format!(
                        "{max_sessions} MCP sessions are open (listen.max_mcp_sessions); close one (DELETE /mcp with its Mcp-Session-Id) or wait for an idle one to end"
                    ))
                } else if mine >= per_principal {
                    Some(format!(
                        "principal `{}` has {mine} MCP sessions open (listen.max_mcp_sessions_per_principal); close one (DELETE /mcp with its Mcp-Session-Id) or wait for an idle one to end",
                        principal.name
                    ))
                } else {
                    None
                };
                if let Some(message) = refusal {
                    state
                        .metrics
                        .mcp_sessions_refused
                        .get_or_create(&PrincipalLabel {
                            principal: principal.name.clone(),
                        })
                        .inc();
                    return error_response(&ApiError::new(
                        429,
                        ReasonCode::TOO_MANY_STREAMS,
                        message,
                    ));
                }
            }
            let delete = req.method() == Method::DELETE;
            let mut resp = next.run(req).await;
            if opens
                && resp.status().is_success()
                && let Some(id) = resp
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
            {
                owners.insert(Arc::from(id), principal);
            }
            state
                .metrics
                .mcp_sessions
                .set(sessions.sessions.read().await.len() as i64);
            // A closed session: rmcp answers 202, the MCP SDKs expect 200 or 204.
            if delete && resp.status() == StatusCode::ACCEPTED {
                *resp.status_mut() = StatusCode::NO_CONTENT;
            }
            resp
        }
    };
    Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(guard))
}

/// Who opened each MCP session, by the id the server gave it. An entry whose session rmcp
/// has ended (closed, idle) is dropped at the next count, so the table never holds more than
/// the sessions open plus those that ended since the last `initialize`.
#[derive(Default)]
struct McpOwners {
    by_session: Mutex<HashMap<Arc<str>, Arc<Principal>>>,
}

impl McpOwners {
    fn insert(&self, id: Arc<str>, p: Arc<Principal>) {
        self.lock().insert(id, p);
    }

    /// Drops the sessions not in `open` and answers (sessions open, sessions of `name`).
    fn count(&self, open: &std::collections::HashSet<Arc<str>>, name: &str) -> (usize, usize) {
        let mut m = self.lock();
        m.retain(|id, _| open.contains(id));
        let mine = m.values().filter(|p| p.name == name).count();
        (open.len(), mine)
    }

    /// Removes and answers the sessions whose principal `keep` no longer holds.
    fn take_unheld(&self, keep: impl Fn(&Principal) -> bool) -> Vec<(Arc<str>, Arc<Principal>)> {
        let mut m = self.lock();
        let gone: Vec<Arc<str>> = m
            .iter()
            .filter(|(_, p)| !keep(p))
            .map(|(id, _)| Arc::clone(id))
            .collect();
        gone.into_iter()
            .filter_map(|id| m.remove(&id).map(|p| (id, p)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Principal>>> {
        self.by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// At each credential reload, closes the MCP sessions whose principal it no longer holds:
/// their open `GET /mcp` stream ends and the session id is unknown from then on.
async fn close_unheld_mcp_sessions(
    principals: Arc<Principals>,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    owners: Arc<McpOwners>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    use rmcp::transport::streamable_http_server::session::SessionManager as _;
    let mut changed = principals.watch();
    loop {
        tokio::select! {
            r = changed.changed() => if r.is_err() { return },
            _ = shutdown.changed() => return,
        }
        let current = principals.current();
        for (id, p) in owners.take_unheld(|p| current.holds(p)) {
            if let Err(e) = sessions.close_session(&id).await {
                tracing::warn!(principal = %p.name, "could not close an MCP session: {e}");
                continue;
            }
            metrics.mcp_sessions_revoked.inc();
            tracing::info!(principal = %p.name, "MCP session closed: its credential is no longer in force");
        }
    }
}

fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
    if let Some(secs) = e.retry_after_secs() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"halo-gateway\""),
        );
    }
    r
}

/// Largest error body the JSON-error layer reads to add the request id.
const ERROR_BODY_CAP: usize = 64 * 1024;

/// Every error is JSON with the request id: a framework error without a body (a timeout's
/// 408, a 405) gets one; a JSON error body gets `request_id`.
async fn json_errors(req: Request, next: axum::middleware::Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, ERROR_BODY_CAP)
        .await
        .unwrap_or_default();
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        let (code, message) = match status {
            StatusCode::REQUEST_TIMEOUT => (
                ReasonCode::REQUEST_TIMEOUT,
                "the request was not received or answered within the timeout",
            ),
            StatusCode::METHOD_NOT_ALLOWED => (
                ReasonCode::METHOD_NOT_ALLOWED,
                "this route does not take that method",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => {
                (ReasonCode::BODY_TOO_LARGE, "the request body is too large")
            }
            _ => (ReasonCode::INVALID_REQUEST, "the request failed"),
        };
        ApiError::new(status.as_u16(), code, message).body()
    });
    if let (Some(obj), Some(id)) = (v.as_object_mut(), id) {
        obj.insert("request_id".into(), id.into());
    }
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(v.to_string()))
}

/// A request with a body must say it is JSON (`application/json` or `application/…+json`,
/// parameters allowed); an empty body may come without a type.
///
/// # Errors
/// 415 `UNSUPPORTED_MEDIA_TYPE`.
fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim() != "0")
        && (headers.contains_key(header::CONTENT_LENGTH)
            || headers.contains_key(header::TRANSFER_ENCODING));
    let ty = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"))
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let json = match ty.as_deref() {
        Some(t) => {
            t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"))
        }
        None => !has_body,
    };
    if json {
        return Ok(());
    }
    Err(ApiError::new(
        415,
        ReasonCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "the body is `{}`; send it as JSON with `Content-Type: application/json`",
            ty.as_deref().unwrap_or("of no stated type")
        ),
    ))
}

/// On the operator's listener every route needs the operator credential.
async fn operator_listener_guard(
    State(st): State<AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    // The route's own check (the `Caller`) counts the request against the rate.
    match authenticate(&st, req.headers(), req.extensions()) {
        Ok(p) if p.role == Role::Operator => next.run(req).await,
        Ok(p) => error_response(&ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            format!(
                "this is the operator's listener (listen.operator); the {} credential uses the main one",
                p.role.name()
            ),
        )),
        Err(e) if e.code() == ReasonCode::UNAUTHENTICATED => error_response(&ApiError::new(
            401,
            ReasonCode::UNAUTHENTICATED,
            "this is the operator's listener: send `Authorization: Bearer <operator credential>`",
        )),
        Err(e) => error_response(&e),
    }
}

async fn method_not_allowed(req: Request<Body>) -> Response {
    error_response(&ApiError::new(
        405,
        ReasonCode::METHOD_NOT_ALLOWED,
        format!(
            "`{}` does not take {} (the `Allow` header says what it takes; docs/run.md lists the routes)",
            req.uri().path(),
            req.method()
        ),
    ))
}

static AUTH_WARNING: RateLimited = RateLimited::new(Duration::from_secs(5));

fn warn_unauthenticated(headers: &HeaderMap) {
    if let Some(held) = AUTH_WARNING.allow() {
        let with = if headers.contains_key(header::AUTHORIZATION) {
            "a credential that is not valid"
        } else {
            "no credential"
        };
        tracing::warn!(held_back = held, "a request with {with} was refused (401)");
    }
}

/// The route a request matched.
fn route_of(method: &Method, path: Option<&MatchedPath>) -> Option<&'static Route> {
    let path = path?.as_str();
    ROUTES
        .iter()
        .find(|r| r.path == path && r.method == method.as_str())
}

/// Who sent a request: the bearer credential when it has an `Authorization` header (compared
/// in constant time against every credential), else the client certificate its TLS connection
/// verified (mTLS), else nobody.
fn identify(st: &AppState, headers: &HeaderMap, ext: &Extensions) -> Identified {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return match ext.get::<PeerCertificate>() {
            Some(c) => st.principals.current().identify_certificate(&c.0),
            None => Identified::Unknown,
        };
    };
    let Ok(v) = v.to_str().map(str::trim) else {
        return Identified::Unknown;
    };
    // The scheme is case-insensitive (RFC 9110 §11.1).
    match v.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            st.principals.current().identify(token.trim().as_bytes())
        }
        _ => Identified::Unknown,
    }
}

/// The caller's principal, when it sent a credential in force.
fn principal_of(st: &AppState, headers: &HeaderMap, ext: &Extensions) -> Option<Arc<Principal>> {
    match identify(st, headers, ext) {
        Identified::Principal(p) => Some(p),
        Identified::Unknown | Identified::Revoked(..) => None,
    }
}

/// The address a request came from (the listener puts it on every request).
fn peer_of(ext: &Extensions) -> IpAddr {
    ext.get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |c| c.0.ip())
}

static BACKOFF_WARNING: RateLimited = RateLimited::new(Duration::from_secs(5));

/// The caller's principal, or why not: an address backed off after failed authentications
/// is refused before its credential is looked at (429 `AUTH_BACKOFF`); no credential, a wrong
/// one or a revoked one is 401 and counts as a failure of its address.
fn authenticate(
    st: &AppState,
    headers: &HeaderMap,
    ext: &Extensions,
) -> Result<Arc<Principal>, ApiError> {
    let (peer, now) = (peer_of(ext), Instant::now());
    if let Err(wait) = st.limits.may_try(peer, now) {
        st.metrics.auth_backoff_refused.inc();
        let secs = retry_after_secs(wait);
        return Err(ApiError::new(
            429,
            ReasonCode::AUTH_BACKOFF,
            format!(
                "too many failed authentications from {peer}; try again in {secs} s (listen.auth_failures_before_backoff)"
            ),
        )
        .retry_after(secs));
    }
    let refusal = match identify(st, headers, ext) {
        Identified::Principal(p) => {
            st.limits.succeeded(peer);
            return Ok(p);
        }
        Identified::Revoked(name, None) => ApiError::new(
            401,
            ReasonCode::CREDENTIAL_REVOKED,
            format!("principal `{name}` is revoked; its credential is refused everywhere"),
        ),
        Identified::Revoked(name, Some(serial)) => ApiError::new(
            401,
            ReasonCode::CREDENTIAL_REVOKED,
            format!(
                "the client certificate of `{name}` (serial {serial}) is revoked; it is refused everywhere"
            ),
        ),
        Identified::Unknown => {
            let why = if headers.contains_key(header::AUTHORIZATION) {
                "the credential is not valid".to_string()
            } else if let Some(c) = ext.get::<PeerCertificate>() {
                format!(
                    "the client certificate's common name ({}) is no principal's cert_common_name; send `Authorization: Bearer <credential>` or a certificate issued for a principal",
                    c.0.common_name.as_deref().unwrap_or("none")
                )
            } else {
                "send `Authorization: Bearer <credential>`".to_string()
            };
            ApiError::new(401, ReasonCode::UNAUTHENTICATED, why)
        }
    };
    warn_unauthenticated(headers);
    st.metrics.auth_failures.inc();
    if let Some(backoff) = st.limits.failed(peer, now)
        && let Some(held) = BACKOFF_WARNING.allow()
    {
        tracing::warn!(
            %peer,
            backoff_s = backoff.as_secs(),
            held_back = held,
            "an address failed to authenticate {} times in a row; it is refused until the backoff ends",
            st.limits.settings().failures_before_backoff
        );
    }
    Err(refusal)
}

/// One request of `p` against its rate: 429 `RATE_LIMITED` with `Retry-After` past it.
fn take_rate(st: &AppState, p: &Principal) -> Result<(), ApiError> {
    let Err(wait) = st.limits.request(&p.name) else {
        return Ok(());
    };
    st.metrics
        .rate_limited
        .get_or_create(&PrincipalLabel {
            principal: p.name.clone(),
        })
        .inc();
    let (l, secs) = (st.limits.settings(), retry_after_secs(wait));
    Err(ApiError::new(
        429,
        ReasonCode::RATE_LIMITED,
        format!(
            "principal `{}` sent more than {} requests a second (a burst of {}; listen.requests_per_second_per_principal); try again in {} s",
            p.name, l.per_second, l.burst, secs
        ),
    )
    .retry_after(secs))
}

/// The caller's principal if its role is `allowed`, and the request counted against its
/// rate when `rated` ([`authenticate`], [`take_rate`]).
fn authorize(
    st: &AppState,
    req: (&HeaderMap, &Extensions),
    allowed: &[Role],
    what: &str,
    rated: bool,
) -> Result<Arc<Principal>, ApiError> {
    let p = authenticate(st, req.0, req.1)?;
    if allowed.contains(&p.role) {
        if rated {
            take_rate(st, &p)?;
        }
        Ok(p)
    } else {
        let who: Vec<&str> = allowed.iter().map(|r| r.name()).collect();
        Err(ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            format!(
                "the {} credential may not {what}; this needs the {} credential",
                p.role.name(),
                who.join(" or ")
            ),
        ))
    }
}

/// A refusal before the handler ran, counted under its route's endpoint.
pub struct Refused(Response);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        self.0
    }
}

fn refused(st: &AppState, route: Option<&Route>, e: &ApiError) -> Refused {
    if let Some(endpoint) = route.and_then(|r| r.endpoint) {
        count(st, endpoint, e.status);
    }
    Refused(error_response(e))
}

fn count(st: &AppState, endpoint: &str, status: u16) {
    st.metrics
        .requests
        .get_or_create(&RequestLabel {
            endpoint: endpoint.into(),
            status,
        })
        .inc();
}

/// The authorized caller of a route: its role (none on an open route) and, on
/// `/v1/state/{source}`, the owner it writes as. Extracting it is the one authorization check:
/// 401 without a valid credential, 403 for a role the route does not admit or a source the
/// caller does not own.
pub struct Caller {
    /// The caller's role, when it sent a valid credential.
    pub role: Option<Role>,
    /// The caller's principal, when it sent a valid credential.
    pub principal: Option<Arc<Principal>>,
    /// The route it called.
    pub route: &'static Route,
}

impl Caller {
    /// Who it is to the task: an agent principal sees only its own responses.
    fn party(&self) -> Party {
        match &self.principal {
            Some(p) if p.role == Role::Agent => Party::Agent(Arc::from(p.name.as_str())),
            _ => Party::Anyone,
        }
    }

    /// The catalog owner a provider or operator writes as.
    fn owner(&self) -> halo_core::catalog::Owner {
        match self.role {
            Some(Role::Operator) => halo_core::catalog::Owner::Operator,
            _ => halo_core::catalog::Owner::Provider,
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Caller, Refused> {
        let Some(route) = route_of(&parts.method, parts.extensions.get::<MatchedPath>()) else {
            let e = ApiError::new(
                500,
                ReasonCode::INVALID_REQUEST,
                "a route without an entry in the role table",
            );
            return Err(refused(st, None, &e));
        };
        // The operator's commands (a hold) are never rate limited.
        let rated = route.path != "/v1/operator/{action}";
        let check = |allowed: &[Role]| {
            authorize(
                st,
                (&parts.headers, &parts.extensions),
                allowed,
                route.what,
                rated,
            )
        };
        let principal = match route.access {
            Access::Read if !st.require_for_read => {
                principal_of(st, &parts.headers, &parts.extensions)
            }
            Access::Read => Some(
                check(&[Agent, Provider, Operator]).map_err(|e| refused(st, Some(route), &e))?,
            ),
            Access::Roles(allowed) => {
                Some(check(allowed).map_err(|e| refused(st, Some(route), &e))?)
            }
            Access::SourceOwner => {
                let p = check(&[Provider, Operator]).map_err(|e| refused(st, Some(route), &e))?;
                let caller = Caller {
                    role: Some(p.role),
                    principal: Some(Arc::clone(&p)),
                    route,
                };
                // Only the source's owner writes it, and the check comes before the body is
                // read: the vehicle's own sources come from the vehicle link alone.
                let source = Path::<String>::from_request_parts(parts, st)
                    .await
                    .map(|Path(s)| s)
                    .unwrap_or_default();
                if let Some(owner) = st.owners.get(&source).filter(|o| **o != caller.owner()) {
                    let who = match owner {
                        halo_core::catalog::Owner::Vehicle => {
                            "the gateway itself, from the vehicle link".to_string()
                        }
                        o => format!("the {} credential", o.name()),
                    };
                    let e = ApiError::new(
                        403,
                        ReasonCode::SOURCE_NOT_WRITABLE,
                        format!(
                            "source `{source}` is written by {who}, not the {} credential",
                            caller.owner().name()
                        ),
                    );
                    return Err(refused(st, Some(route), &e));
                }
                // A provider principal writes the sources it was given and nothing else.
                if !p.may_write(&source) {
                    let given = p.sources().unwrap_or_default();
                    let e = ApiError::new(
                        403,
                        ReasonCode::SOURCE_NOT_WRITABLE,
                        format!(
                            "principal `{}` may not write source `{source}`; it writes {}",
                            p.name,
                            if given.is_empty() {
                                "no source".to_string()
                            } else {
                                given.join(", ")
                            }
                        ),
                    );
                    return Err(refused(st, Some(route), &e));
                }
                return Ok(caller);
            }
        };
        Ok(Caller {
            role: principal.as_ref().map(|p| p.role),
            principal,
            route,
        })
    }
}

/// A request body, read as its route allows: JSON only (`application/json` or
/// `application/…+json`; 415 otherwise), through the route's cap (413 with the route's code;
/// never more than the cap held), within the body timeout (408).
pub struct JsonBody(pub Vec<u8>);

impl FromRequest<AppState> for JsonBody {
    type Rejection = Refused;

    async fn from_request(req: Request, st: &AppState) -> Result<JsonBody, Refused> {
        let route = route_of(req.method(), req.extensions().get::<MatchedPath>());
        let cap = route.and_then(|r| r.body).unwrap_or(BodyCap {
            bytes: SMALL_LIMIT,
            too_large: ReasonCode::BODY_TOO_LARGE,
        });
        read_body(req, cap)
            .await
            .map(JsonBody)
            .map_err(|e| refused(st, route, &e))
    }
}

async fn read_body(req: Request, cap: BodyCap) -> Result<Vec<u8>, ApiError> {
    check_json(req.headers())?;
    // Read through the cap (never more than the cap held). A declared length over it is
    // refused the same way once the cap is reached, rather than at once: closing with the
    // body unread resets the connection under a client that is still sending it.
    match axum::body::to_bytes(req.into_body(), cap.bytes).await {
        Ok(b) => Ok(b.to_vec()),
        Err(e) => {
            // The length limit, or the body stopped arriving (the body timeout) or broke.
            // (http-body-util's `LengthLimitError`, somewhere in the chain.)
            let mut cause: Option<&dyn std::error::Error> = Some(&e);
            let mut too_large = false;
            while let Some(c) = cause {
                too_large |= c.to_string().contains("length limit exceeded");
                cause = c.source();
            }
            if too_large {
                Err(ApiError::new(
                    413,
                    cap.too_large,
                    format!("the body exceeds {} bytes", cap.bytes),
                ))
            } else {
                Err(ApiError::new(
                    408,
                    ReasonCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive whole ({e}); listen.body_timeout_ms bounds the wait"
                    ),
                ))
            }
        }
    }
}

/// The service task's answer to a caller, counted under its route.
async fn ask_core(st: &AppState, caller: &Caller, make: impl FnOnce(Reply) -> Cmd) -> Response {
    answer(st, caller, ask(&st.cmds, make).await)
}

fn answer(st: &AppState, caller: &Caller, a: Answer) -> Response {
    let (status, resp) = match a {
        Ok(v) => (200, (StatusCode::OK, axum::Json(v)).into_response()),
        Err(e) => (e.status, error_response(&e)),
    };
    if let Some(endpoint) = caller.route.endpoint {
        count(st, endpoint, status);
    }
    resp
}

/// The body as the core reads it: `?form=strict` is the strict structured-output form (a `null`
/// member is absent, [`crate::service::api::schema::from_strict_form`]); no query, the body as sent.
fn body_form(uri: &axum::http::Uri, body: Vec<u8>) -> Result<Vec<u8>, ApiError> {
    match uri.query() {
        None | Some("") => Ok(body),
        Some("form=strict") => crate::service::api::schema::from_strict_form(&body),
        Some(q) => Err(ApiError::new(
            400,
            ReasonCode::INVALID_REQUEST,
            format!("unknown query `{q}`; `form=strict` reads the strict structured-output form"),
        )),
    }
}

async fn post_response(
    State(st): State<AppState>,
    c: Caller,
    uri: axum::http::Uri,
    body: JsonBody,
) -> Response {
    let bytes = match body_form(&uri, body.0) {
        Ok(b) => b,
        Err(e) => return answer(&st, &c, Err(e)),
    };
    let by = c.party();
    ask_core(&st, &c, |reply| Cmd::Response { by, bytes, reply }).await
}

async fn get_responses(State(st): State<AppState>, c: Caller) -> Response {
    let by = c.party();
    ask_core(&st, &c, |reply| Cmd::Responses { by, reply }).await
}

async fn get_response(State(st): State<AppState>, c: Caller, Path(id): Path<String>) -> Response {
    let by = c.party();
    ask_core(&st, &c, |reply| Cmd::GetResponse { by, id, reply }).await
}

/// `GET /v1/obligations[?state=open|all]`: every obligation (the default, `all`) or the open
/// ones, a candidate may still answer; any other filter is `400 INVALID_REQUEST`.
async fn get_obligations(State(st): State<AppState>, c: Caller, uri: axum::http::Uri) -> Response {
    let mut open_only = false;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair {
            "state=open" => open_only = true,
            "state=all" => open_only = false,
            other => {
                let e = ApiError::new(
                    400,
                    ReasonCode::INVALID_REQUEST,
                    format!("unknown filter `{other}`; `state=open` or `state=all`"),
                );
                return answer(&st, &c, Err(e));
            }
        }
    }
    let by = c.party();
    let a = ask(&st.cmds, |reply| Cmd::Obligations { by, reply })
        .await
        .map(|v| match v {
            serde_json::Value::Array(all) if open_only => {
                serde_json::Value::Array(all.into_iter().filter(|o| o["open"] == true).collect())
            }
            v => v,
        });
    answer(&st, &c, a)
}

async fn post_candidate(
    State(st): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    uri: axum::http::Uri,
    body: JsonBody,
) -> Response {
    let bytes = match body_form(&uri, body.0) {
        Ok(b) => b,
        Err(e) => return answer(&st, &c, Err(e)),
    };
    let Ok(obligation) = id.parse::<u64>() else {
        let e = ApiError::new(
            404,
            ReasonCode::NO_OBLIGATION,
            format!("`{id}` is not an obligation id"),
        );
        return answer(&st, &c, Err(e));
    };
    let by = c.party();
    ask_core(&st, &c, |reply| Cmd::Candidate {
        by,
        obligation,
        bytes,
        reply,
    })
    .await
}

async fn post_state(
    State(st): State<AppState>,
    Arrived(arrival): Arrived,
    c: Caller,
    Path(source): Path<String>,
    body: JsonBody,
) -> Response {
    let caller = c.owner();
    let by = c.principal.as_ref().map(|p| Arc::from(p.name.as_str()));
    ask_core(&st, &c, |reply| Cmd::State {
        caller,
        by,
        source,
        bytes: body.0,
        arrival,
        reply,
    })
    .await
}

async fn post_certificate(
    State(st): State<AppState>,
    Arrived(arrival): Arrived,
    c: Caller,
    body: JsonBody,
) -> Response {
    ask_core(&st, &c, |reply| Cmd::Certificate {
        bytes: body.0,
        arrival,
        reply,
    })
    .await
}

async fn post_certify(
    State(st): State<AppState>,
    Arrived(arrival): Arrived,
    c: Caller,
    body: JsonBody,
) -> Response {
    ask_core(&st, &c, |reply| Cmd::Certify {
        bytes: body.0,
        arrival,
        reply,
    })
    .await
}

async fn post_digest(State(st): State<AppState>, c: Caller, body: JsonBody) -> Response {
    let a = digests(&st.catalog, &body.0);
    answer(&st, &c, a)
}

async fn delete_certificate(
    State(st): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> Response {
    ask_core(&st, &c, |reply| Cmd::Revoke { id, reply }).await
}

async fn post_contract(State(st): State<AppState>, c: Caller, body: JsonBody) -> Response {
    let caller = match c.role {
        Some(Role::Operator) => halo_core::contract::Role::Operator,
        _ => halo_core::contract::Role::Provider,
    };
    ask_core(&st, &c, |reply| Cmd::Contract {
        caller,
        bytes: body.0,
        reply,
    })
    .await
}

async fn get_contract(State(st): State<AppState>, c: Caller) -> Response {
    ask_core(&st, &c, |reply| Cmd::ContractStatus { reply }).await
}

async fn post_goal(State(st): State<AppState>, c: Caller, body: JsonBody) -> Response {
    ask_core(&st, &c, |reply| Cmd::Contract {
        caller: halo_core::contract::Role::Agent,
        bytes: body.0,
        reply,
    })
    .await
}

async fn post_witness(State(st): State<AppState>, c: Caller, body: JsonBody) -> Response {
    ask_core(&st, &c, |reply| Cmd::Witness {
        bytes: body.0,
        reply,
    })
    .await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TakeoffBody {
    altitude_m: f64,
}

/// The operator action a path names, with its body (a takeoff's altitude).
fn operator_op(action: &str, body: &[u8]) -> Result<OperatorOp, ApiError> {
    Ok(match action {
        "arm" => OperatorOp::Arm,
        "disarm" => OperatorOp::Disarm,
        "land" => OperatorOp::Land,
        "rtl" => OperatorOp::ReturnToLaunch,
        "hold" => OperatorOp::Hold,
        "release" => OperatorOp::Release,
        "takeoff" => {
            let b: TakeoffBody = serde_json::from_slice(body).map_err(|e| {
                ApiError::new(
                    400,
                    ReasonCode::INVALID_REQUEST,
                    format!("takeoff needs {{\"altitude_m\": <height above home>}}: {e}"),
                )
            })?;
            OperatorOp::Takeoff {
                altitude_m: b.altitude_m,
            }
        }
        other => {
            return Err(ApiError::new(
                404,
                ReasonCode::NOT_FOUND,
                format!(
                    "no operator action `{other}`; use arm, disarm, takeoff, land, rtl, hold or release"
                ),
            ));
        }
    })
}

async fn post_operator(
    State(st): State<AppState>,
    c: Caller,
    Path(action): Path<String>,
    body: JsonBody,
) -> Response {
    match operator_op(&action, &body.0) {
        Ok(op) => ask_core(&st, &c, |reply| Cmd::Operator { op, reply }).await,
        Err(e) => answer(&st, &c, Err(e)),
    }
}

async fn get_status(State(st): State<AppState>, c: Caller) -> Response {
    ask_core(&st, &c, |reply| Cmd::Status { reply }).await
}

async fn get_audit_head(State(st): State<AppState>, c: Caller) -> Response {
    ask_core(&st, &c, |reply| Cmd::AuditHead { reply }).await
}

async fn post_head_exported(State(st): State<AppState>, c: Caller, body: JsonBody) -> Response {
    ask_core(&st, &c, |reply| Cmd::HeadExported {
        bytes: body.0,
        reply,
    })
    .await
}

async fn get_metrics(State(st): State<AppState>, _: Caller) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

/// `GET /v1/openapi.json` ([`crate::service::api::openapi`]).
async fn get_openapi(State(st): State<AppState>, _: Caller) -> Response {
    axum::Json(crate::service::api::openapi::openapi(&st.catalog)).into_response()
}

/// `GET /v1/schema`, and `?strict=true`: the strict structured-output form.
async fn get_schema(State(st): State<AppState>, c: Caller, uri: axum::http::Uri) -> Response {
    let body = match uri.query() {
        None | Some("") | Some("strict=false") => st.schema.as_str().to_string(),
        Some("strict=true") => {
            crate::service::api::schema::strict_envelope_schema(&st.catalog).to_string()
        }
        Some(q) => {
            let e = ApiError::new(
                400,
                ReasonCode::INVALID_REQUEST,
                format!(
                    "unknown query `{q}`; `strict=true` gives the strict structured-output form"
                ),
            );
            return answer(&st, &c, Err(e));
        }
    };
    ([(header::CONTENT_TYPE, "application/schema+json")], body).into_response()
}

async fn not_found(req: Request<Body>) -> Response {
    error_response(&ApiError::new(
        404,
        ReasonCode::NOT_FOUND,
        format!("no route {} {}", req.method(), req.uri().path()),
    ))
}

fn sse_item(hub: &Hub, item: &Item) -> SseEvent {
    match item {
        Item::Event(e) => SseEvent::default()
            .id(hub.wire_id(e.id))
            .event(e.name)
            .data(e.data.as_ref()),
        Item::Gap { from, to } => SseEvent::default().event("gap").data(format!(
            "{{\"boot_epoch\":{},\"missed_from\":{from},\"missed_to\":{to}}}",
            hub.boot()
        )),
        Item::Reset { previous_boot } => SseEvent::default().event("reset").data(format!(
            "{{\"boot_epoch\":{},\"previous_boot_epoch\":{previous_boot},\"why\":\"the gateway restarted; the events of the earlier start are gone, what follows is this start's\"}}",
            hub.boot()
        )),
    }
}

/// Whose stream it is: the principal, so the stream ends when a reload refuses its
/// credential, and for an agent its name, so it carries only its own responses' events.
struct StreamOwner {
    principal: Arc<Principal>,
    principals: Arc<Principals>,
    changed: watch::Receiver<u64>,
}

struct StreamState {
    hub: Hub,
    reader: Reader,
    shutdown: watch::Receiver<bool>,
    owner: StreamOwner,
    _place: StreamPlace,
}

/// An event stream: a cursor into the shared backlog (nothing is copied per client), waiting
/// on the hub when it has caught up. It ends at shutdown and when a credential reload no
/// longer holds its principal (rotated or revoked).
fn event_stream(
    hub: &Hub,
    reader: Reader,
    shutdown: watch::Receiver<bool>,
    owner: StreamOwner,
    place: StreamPlace,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + use<> {
    let state = StreamState {
        hub: hub.clone(),
        reader,
        shutdown,
        owner,
        _place: place,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if *s.shutdown.borrow() {
                return None;
            }
            let item = tokio::select! {
                i = s.reader.next() => i,
                _ = s.shutdown.changed() => return None,
                r = s.owner.changed.changed() => {
                    if r.is_err() || !s.owner.principals.current().holds(&s.owner.principal) {
                        tracing::info!(principal = %s.owner.principal.name, "event stream closed: its credential is no longer in force");
                        return None;
                    }
                    continue;
                }
            };
            let p = &s.owner.principal;
            if let Item::Event(e) = &item
                && p.role == Role::Agent
                && !e.visible_to(&p.name)
            {
                continue;
            }
            let ev = sse_item(&s.hub, &item);
            return Some((Ok(ev), s));
        }
    })
}

async fn get_events(State(st): State<AppState>, c: Caller, headers: HeaderMap) -> Response {
    let (Some(role), Some(principal)) = (c.role, c.principal.clone()) else {
        return error_response(&ApiError::new(
            401,
            ReasonCode::UNAUTHENTICATED,
            "send `Authorization: Bearer <credential>`",
        ));
    };
    let raw = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let from = match st.hub.resume(raw) {
        Ok(f) => f,
        Err(e) => {
            return error_response(&ApiError::new(
                400,
                ReasonCode::INVALID_EVENT_ID,
                e.to_string(),
            ));
        }
    };
    let place = match st.streams.take(&principal, &st.metrics) {
        Ok(place) => place,
        Err(cap) => {
            st.metrics
                .streams_refused
                .get_or_create(&PrincipalLabel {
                    principal: principal.name.clone(),
                })
                .inc();
            let message = match cap {
                StreamCap::Role => format!(
                    "the {} role has {} event streams open, the most allowed (listen.max_event_streams); close one",
                    role.name(),
                    st.streams.max_per_role
                ),
                StreamCap::Principal => format!(
                    "principal `{}` has {} event streams open, the most one principal may (listen.max_event_streams_per_principal); close one",
                    principal.name, st.streams.max_per_principal
                ),
            };
            return error_response(&ApiError::new(429, ReasonCode::TOO_MANY_STREAMS, message));
        }
    };
    let owner = StreamOwner {
        principal,
        changed: st.principals.watch(),
        principals: Arc::clone(&st.principals),
    };
    let stream = event_stream(
        &st.hub,
        st.hub.reader(from),
        st.shutdown.clone(),
        owner,
        place,
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_its_handler_and_the_docs_table_is_the_route_table() {
        for r in ROUTES {
            assert!(
                handler(r).is_some(),
                "{} {} has no handler",
                r.method,
                r.path
            );
        }
        let docs = include_str!("../../../../docs/run.md");
        assert!(
            docs.contains(&crate::service::api::routes::role_table()),
            "docs/run.md's role table is not the route table; it should read:\n{}",
            crate::service::api::routes::role_table()
        );
    }
}
