//! The HTTP interface (axum on tokio): agent link, providers, operator, status and metrics.
//!
//! Every route checks its role first: no credential is 401 `UNAUTHENTICATED`, a credential of a
//! role the route does not admit is 403 `FORBIDDEN_ROLE`. Credentials are compared in constant
//! time. Bodies are read through a size cap; a body over it is 413 and changes nothing. Every
//! error is JSON: `{"error": {"code", "number", "message", "ids"}}`.
//!
//! | route | roles |
//! | --- | --- |
//! | `POST /v1/responses` | agent |
//! | `GET /v1/responses/{id}` | agent, operator |
//! | `POST /v1/obligations/{id}/candidates` | agent |
//! | `GET /v1/obligations` | agent, operator |
//! | `GET /v1/events` (SSE, `Last-Event-ID`) | agent, operator |
//! | `POST /v1/state/{source}` | the source's owner (catalog `owner`): provider or operator; never a vehicle source |
//! | `POST /v1/certificates`, `DELETE /v1/certificates/{id}` | provider, operator |
//! | `POST /v1/operator/{arm,disarm,takeoff,land,rtl,hold,release}` | operator |
//! | `POST /v1/contract` (register, change version, reauthorize ...) | operator, provider |
//! | `GET /v1/contract` | agent, operator |
//! | `POST /v1/goals`, `POST /v1/goals/witness` | agent |
//! | `POST /v1/audit/exported` (a signed head kept off the machine) | operator |
//! | `GET /v1/status`, `GET /v1/audit/head`, `GET /v1/schema`, `GET /metrics` | anyone (a setting can require a credential) |

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures_util::stream::Stream;
use subtle::ConstantTimeEq;
use tokio::sync::{mpsc, watch};

use super::core_task::{
    Answer, ApiError, Cmd, OperatorOp, RESPONSE_LIMIT, Reply, ask, wall_now_ms,
};
use super::hub::{Hub, Item, Reader};
use super::listener::{RateLimited, RequestIds};
use super::metrics::{Metrics, RequestLabel};
use super::statedir::Credentials;
use crate::core::reason::ReasonCode;

/// Largest body for every route but responses and candidates.
pub const SMALL_LIMIT: usize = 64 * 1024;

/// A caller's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The untrusted planner.
    Agent,
    /// A trusted state provider or certificate issuer.
    Provider,
    /// The operator.
    Operator,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Provider => "provider",
            Role::Operator => "operator",
        }
    }
}

/// Shared state of the HTTP layer.
#[derive(Clone)]
pub struct AppState {
    /// The core task's input.
    pub cmds: mpsc::Sender<Cmd>,
    /// Events.
    pub hub: Hub,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Credentials.
    pub creds: Arc<Credentials>,
    /// Require a credential for status and metrics.
    pub require_for_read: bool,
    /// Turns true at shutdown (ends event streams).
    pub shutdown: watch::Receiver<bool>,
    /// The envelope's JSON Schema for the loaded catalog.
    pub schema: Arc<String>,
    /// Open event streams per role, and the cap.
    pub streams: Arc<StreamCaps>,
    /// This listener serves the operator credential only (`listen.operator`).
    pub operator_only: bool,
    /// Each catalog source's owner, so a write from the wrong party is refused before its
    /// body is read.
    pub owners: Arc<std::collections::BTreeMap<String, crate::core::catalog::Owner>>,
}

/// Open event streams per role, against a cap per role.
#[derive(Debug, Default)]
pub struct StreamCaps {
    /// Most open streams per role.
    pub max_per_role: usize,
    agent: AtomicUsize,
    operator: AtomicUsize,
}

impl StreamCaps {
    /// A cap of `max_per_role` streams for each role.
    pub fn new(max_per_role: usize) -> StreamCaps {
        StreamCaps {
            max_per_role,
            ..StreamCaps::default()
        }
    }

    fn counter(&self, role: Role) -> &AtomicUsize {
        match role {
            Role::Operator => &self.operator,
            Role::Agent | Role::Provider => &self.agent,
        }
    }

    /// A place for one more stream of `role`, or `None` at the cap.
    fn take(self: &Arc<Self>, role: Role, metrics: &Arc<Metrics>) -> Option<StreamPlace> {
        let c = self.counter(role);
        let mut n = c.load(Ordering::Acquire);
        loop {
            if n >= self.max_per_role {
                return None;
            }
            match c.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        metrics.event_streams.inc();
        Some(StreamPlace {
            caps: Arc::clone(self),
            role,
            metrics: Arc::clone(metrics),
        })
    }
}

/// One open stream's place under its role's cap; freed when the stream ends.
struct StreamPlace {
    caps: Arc<StreamCaps>,
    role: Role,
    metrics: Arc<Metrics>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.caps.counter(self.role).fetch_sub(1, Ordering::AcqRel);
        self.metrics.event_streams.dec();
    }
}

/// The settings of the layers every route goes through.
#[derive(Clone, Debug)]
pub struct Layers {
    /// A request body must keep arriving (no gap longer than this).
    pub body_timeout: Duration,
    /// A request must be answered within this (event streams answer at once, then stream).
    pub request_timeout: Duration,
    /// The start's boot epoch, for request ids.
    pub boot: u64,
}

/// The router, with every layer: request ids (`x-request-id`, in error bodies too), the
/// request log, timeouts, the content type, JSON errors, and the operator listener's
/// credential check.
pub fn router(state: AppState, layers: &Layers) -> Router {
    use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
    let operator_only = state.operator_only;
    let guard_state = state.clone();
    let routes = routes(state);
    let routes = if operator_only {
        routes.layer(axum::middleware::from_fn_with_state(
            guard_state,
            operator_listener_guard,
        ))
    } else {
        routes
    };
    routes
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
        .layer(SetRequestIdLayer::x_request_id(RequestIds::new(layers.boot)))
}

fn routes(state: AppState) -> Router {
    Router::new()
        .route("/v1/responses", post(post_response))
        .route("/v1/responses/{id}", get(get_response))
        .route("/v1/obligations", get(get_obligations))
        .route("/v1/obligations/{id}/candidates", post(post_candidate))
        .route("/v1/events", get(get_events))
        .route("/v1/state/{source}", post(post_state))
        .route("/v1/certificates", post(post_certificate))
        .route("/v1/certificates/{id}", delete(delete_certificate))
        .route("/v1/operator/{action}", post(post_operator))
        .route("/v1/contract", post(post_contract).get(get_contract))
        .route("/v1/goals", post(post_goal))
        .route("/v1/goals/witness", post(post_witness))
        .route("/v1/status", get(get_status))
        .route("/v1/audit/head", get(get_audit_head))
        .route("/v1/audit/exported", post(post_head_exported))
        .route("/metrics", get(get_metrics))
        .route("/v1/schema", get(get_schema))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
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
    match role_of(&st, req.headers()) {
        Some(Role::Operator) => next.run(req).await,
        Some(r) => error_response(&ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            format!(
                "this is the operator's listener (listen.operator); the {} credential uses the main one",
                r.name()
            ),
        )),
        None => {
            warn_unauthenticated(req.headers());
            error_response(&ApiError::new(
                401,
                ReasonCode::UNAUTHENTICATED,
                "this is the operator's listener: send `Authorization: Bearer <operator credential>`",
            ))
        }
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

fn answer_response(st: &AppState, endpoint: &str, a: Answer) -> Response {
    let (status, resp) = match a {
        Ok(v) => (200, (StatusCode::OK, axum::Json(v)).into_response()),
        Err(e) => (e.status, error_response(&e)),
    };
    st.metrics
        .requests
        .get_or_create(&RequestLabel {
            endpoint: endpoint.into(),
            status,
        })
        .inc();
    resp
}

/// The caller's role from `Authorization: Bearer …`, compared in constant time against every
/// credential.
fn role_of(st: &AppState, headers: &HeaderMap) -> Option<Role> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim().as_bytes();
    let a = token.ct_eq(st.creds.agent.expose().as_bytes());
    let p = token.ct_eq(st.creds.provider.expose().as_bytes());
    let o = token.ct_eq(st.creds.operator.expose().as_bytes());
    if bool::from(a) {
        Some(Role::Agent)
    } else if bool::from(p) {
        Some(Role::Provider)
    } else if bool::from(o) {
        Some(Role::Operator)
    } else {
        None
    }
}

fn authorize(
    st: &AppState,
    headers: &HeaderMap,
    allowed: &[Role],
    what: &str,
) -> Result<Role, ApiError> {
    let Some(role) = role_of(st, headers) else {
        warn_unauthenticated(headers);
        let why = if headers.contains_key(header::AUTHORIZATION) {
            "the credential is not valid"
        } else {
            "send `Authorization: Bearer <credential>`"
        };
        return Err(ApiError::new(401, ReasonCode::UNAUTHENTICATED, why));
    };
    if allowed.contains(&role) {
        Ok(role)
    } else {
        let who: Vec<&str> = allowed.iter().map(|r| r.name()).collect();
        Err(ApiError::new(
            403,
            ReasonCode::FORBIDDEN_ROLE,
            format!(
                "the {} credential may not {what}; this needs the {} credential",
                role.name(),
                who.join(" or ")
            ),
        ))
    }
}

async fn read_body(req: Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    check_json(req.headers())?;
    // Read through the cap (never more than `limit` bytes held). A declared length over it
    // is refused the same way once the cap is reached, rather than at once: closing with the
    // body unread resets the connection under a client that is still sending it.
    match axum::body::to_bytes(req.into_body(), limit).await {
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
                    ReasonCode::BODY_TOO_LARGE,
                    format!("the body exceeds {limit} bytes"),
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

/// Sends a command to the core and waits for its answer.
async fn call(st: &AppState, make: impl FnOnce(Reply) -> Cmd) -> Answer {
    ask(&st.cmds, make).await
}

async fn post_response(State(st): State<AppState>, headers: HeaderMap, req: Request) -> Response {
    let r = async {
        authorize(&st, &headers, &[Role::Agent], "submit responses")?;
        let bytes = read_body(req, RESPONSE_LIMIT).await.map_err(|mut e| {
            if e.status == 413 {
                e.code = ReasonCode::RESPONSE_TOO_LARGE;
            }
            e
        })?;
        call(&st, |reply| Cmd::Response { bytes, reply }).await
    }
    .await;
    answer_response(&st, "responses", r)
}

async fn get_response(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Agent, Role::Operator],
            "read responses",
        )?;
        call(&st, |reply| Cmd::GetResponse { id, reply }).await
    }
    .await;
    answer_response(&st, "response", r)
}

async fn get_obligations(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Agent, Role::Operator],
            "read obligations",
        )?;
        call(&st, |reply| Cmd::Obligations { reply }).await
    }
    .await;
    answer_response(&st, "obligations", r)
}

async fn post_candidate(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let r = async {
        authorize(&st, &headers, &[Role::Agent], "submit candidates")?;
        let obligation: u64 = id.parse().map_err(|_| {
            ApiError::new(
                404,
                ReasonCode::NO_OBLIGATION,
                format!("`{id}` is not an obligation id"),
            )
        })?;
        let bytes = read_body(req, RESPONSE_LIMIT).await?;
        call(&st, |reply| Cmd::Candidate {
            obligation,
            bytes,
            reply,
        })
        .await
    }
    .await;
    answer_response(&st, "candidates", r)
}

async fn post_state(
    State(st): State<AppState>,
    Path(source): Path<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let r = async {
        let role = authorize(
            &st,
            &headers,
            &[Role::Provider, Role::Operator],
            "write source state",
        )?;
        let caller = match role {
            Role::Operator => crate::core::catalog::Owner::Operator,
            _ => crate::core::catalog::Owner::Provider,
        };
        if let Some(owner) = st.owners.get(&source).filter(|o| **o != caller) {
            let who = match owner {
                crate::core::catalog::Owner::Vehicle => {
                    "the gateway itself, from the vehicle link".to_string()
                }
                o => format!("the {} credential", o.name()),
            };
            return Err(ApiError::new(
                403,
                ReasonCode::SOURCE_NOT_WRITABLE,
                format!(
                    "source `{source}` is written by {who}, not the {} credential",
                    caller.name()
                ),
            ));
        }
        let bytes = read_body(req, SMALL_LIMIT).await?;
        let wall_ms = wall_now_ms();
        call(&st, |reply| Cmd::State {
            caller,
            source,
            bytes,
            wall_ms,
            reply,
        })
        .await
    }
    .await;
    answer_response(&st, "state", r)
}

async fn post_certificate(
    State(st): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Provider, Role::Operator],
            "issue certificates",
        )?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        let wall_ms = wall_now_ms();
        call(&st, |reply| Cmd::Certificate {
            bytes,
            wall_ms,
            reply,
        })
        .await
    }
    .await;
    answer_response(&st, "certificates", r)
}

async fn delete_certificate(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Provider, Role::Operator],
            "revoke certificates",
        )?;
        call(&st, |reply| Cmd::Revoke { id, reply }).await
    }
    .await;
    answer_response(&st, "revoke", r)
}

async fn post_contract(State(st): State<AppState>, headers: HeaderMap, req: Request) -> Response {
    let r = async {
        let role = authorize(
            &st,
            &headers,
            &[Role::Operator, Role::Provider],
            "change the mission contract",
        )?;
        let caller = match role {
            Role::Operator => crate::contract::Role::Operator,
            _ => crate::contract::Role::Provider,
        };
        let bytes = read_body(req, SMALL_LIMIT).await?;
        call(&st, |reply| Cmd::Contract {
            caller,
            bytes,
            reply,
        })
        .await
    }
    .await;
    answer_response(&st, "contract", r)
}

async fn get_contract(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Agent, Role::Operator],
            "read the mission contract",
        )?;
        call(&st, |reply| Cmd::ContractStatus { reply }).await
    }
    .await;
    answer_response(&st, "contract", r)
}

async fn post_goal(State(st): State<AppState>, headers: HeaderMap, req: Request) -> Response {
    let r = async {
        authorize(&st, &headers, &[Role::Agent], "propose goals")?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        call(&st, |reply| Cmd::Contract {
            caller: crate::contract::Role::Agent,
            bytes,
            reply,
        })
        .await
    }
    .await;
    answer_response(&st, "goals", r)
}

async fn post_witness(State(st): State<AppState>, headers: HeaderMap, req: Request) -> Response {
    let r = async {
        authorize(&st, &headers, &[Role::Agent], "ask for a witness")?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        call(&st, |reply| Cmd::Witness { bytes, reply }).await
    }
    .await;
    answer_response(&st, "witness", r)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TakeoffBody {
    altitude_m: f64,
}

async fn post_operator(
    State(st): State<AppState>,
    Path(action): Path<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let r = async {
        authorize(&st, &headers, &[Role::Operator], "command the vehicle")?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        let op = match action.as_str() {
            "arm" => OperatorOp::Arm,
            "disarm" => OperatorOp::Disarm,
            "land" => OperatorOp::Land,
            "rtl" => OperatorOp::ReturnToLaunch,
            "hold" => OperatorOp::Hold,
            "release" => OperatorOp::Release,
            "takeoff" => {
                let b: TakeoffBody = serde_json::from_slice(&bytes).map_err(|e| {
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
        };
        call(&st, |reply| Cmd::Operator { op, reply }).await
    }
    .await;
    answer_response(&st, "operator", r)
}

/// A read-only query of the core: open to anyone, or to any role's credential with
/// `auth.require_for_read`.
async fn read_query(
    st: &AppState,
    headers: &HeaderMap,
    what: &str,
    endpoint: &'static str,
    cmd: impl FnOnce(Reply) -> Cmd,
) -> Response {
    let r = async {
        if st.require_for_read {
            authorize(
                st,
                headers,
                &[Role::Agent, Role::Provider, Role::Operator],
                what,
            )?;
        }
        call(st, cmd).await
    }
    .await;
    answer_response(st, endpoint, r)
}

async fn get_status(State(st): State<AppState>, headers: HeaderMap) -> Response {
    read_query(&st, &headers, "read status", "status", |reply| {
        Cmd::Status { reply }
    })
    .await
}

async fn get_audit_head(State(st): State<AppState>, headers: HeaderMap) -> Response {
    read_query(
        &st,
        &headers,
        "read the audit head",
        "audit_head",
        |reply| Cmd::AuditHead { reply },
    )
    .await
}

async fn post_head_exported(
    State(st): State<AppState>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let r = async {
        authorize(
            &st,
            &headers,
            &[Role::Operator],
            "confirm a kept signed head",
        )?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        call(&st, |reply| Cmd::HeadExported { bytes, reply }).await
    }
    .await;
    answer_response(&st, "audit_exported", r)
}

async fn get_metrics(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if st.require_for_read {
        if let Err(e) = authorize(
            &st,
            &headers,
            &[Role::Agent, Role::Provider, Role::Operator],
            "read metrics",
        ) {
            return error_response(&e);
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

async fn get_schema(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if st.require_for_read {
        if let Err(e) = authorize(
            &st,
            &headers,
            &[Role::Agent, Role::Provider, Role::Operator],
            "read the schema",
        ) {
            return error_response(&e);
        }
    }
    (
        [(header::CONTENT_TYPE, "application/schema+json")],
        st.schema.as_str().to_string(),
    )
        .into_response()
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

struct StreamState {
    hub: Hub,
    reader: Reader,
    shutdown: watch::Receiver<bool>,
    _place: StreamPlace,
}

/// An event stream: a cursor into the shared backlog (nothing is copied per client), waiting
/// on the hub when it has caught up.
fn event_stream(
    hub: &Hub,
    reader: Reader,
    shutdown: watch::Receiver<bool>,
    place: StreamPlace,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + use<> {
    let state = StreamState {
        hub: hub.clone(),
        reader,
        shutdown,
        _place: place,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        if *s.shutdown.borrow() {
            return None;
        }
        let item = tokio::select! {
            i = s.reader.next() => i,
            _ = s.shutdown.changed() => return None,
        };
        let ev = sse_item(&s.hub, &item);
        Some((Ok(ev), s))
    })
}

async fn get_events(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let role = match authorize(
        &st,
        &headers,
        &[Role::Agent, Role::Operator],
        "read the event stream",
    ) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
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
    let Some(place) = st.streams.take(role, &st.metrics) else {
        return error_response(&ApiError::new(
            429,
            ReasonCode::TOO_MANY_STREAMS,
            format!(
                "the {} credential has {} event streams open, the most allowed (listen.max_event_streams); close one",
                role.name(),
                st.streams.max_per_role
            ),
        ));
    };
    let stream = event_stream(&st.hub, st.hub.reader(from), st.shutdown.clone(), place);
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
