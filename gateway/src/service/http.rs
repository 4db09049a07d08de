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
//! | `POST /v1/state/{source}` | provider |
//! | `POST /v1/certificates`, `DELETE /v1/certificates/{id}` | provider, operator |
//! | `POST /v1/operator/{arm,disarm,takeoff,land,rtl,hold,release}` | operator |
//! | `POST /v1/contract` (register, change version, reauthorize ...) | operator, provider |
//! | `GET /v1/contract` | agent, operator |
//! | `POST /v1/goals`, `POST /v1/goals/witness` | agent |
//! | `POST /v1/audit/exported` (a signed head kept off the machine) | operator |
//! | `GET /v1/status`, `GET /v1/audit/head`, `GET /v1/schema`, `GET /metrics` | anyone (a setting can require a credential) |

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures_util::stream::Stream;
use subtle::ConstantTimeEq;
use tokio::sync::{mpsc, watch};

use super::core_task::{
    Answer, ApiError, Cmd, OperatorOp, RESPONSE_LIMIT, Reply, ask, wall_now_ms,
};
use super::hub::{Hub, HubEvent};
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
}

/// The router.
pub fn router(state: AppState) -> Router {
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
        .with_state(state)
}

fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(e.body())).into_response()
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
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = v.strip_prefix("Bearer ")?.trim().as_bytes();
    let a = token.ct_eq(st.creds.agent.as_bytes());
    let p = token.ct_eq(st.creds.provider.as_bytes());
    let o = token.ct_eq(st.creds.operator.as_bytes());
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
    match axum::body::to_bytes(req.into_body(), limit).await {
        Ok(b) => Ok(b.to_vec()),
        Err(_) => Err(ApiError::new(
            413,
            ReasonCode::BODY_TOO_LARGE,
            format!("the body exceeds {limit} bytes"),
        )),
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
            e.code = ReasonCode::RESPONSE_TOO_LARGE;
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
        authorize(&st, &headers, &[Role::Provider], "write provider state")?;
        let bytes = read_body(req, SMALL_LIMIT).await?;
        let wall_ms = wall_now_ms();
        call(&st, |reply| Cmd::State {
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

fn sse_event(e: &HubEvent) -> SseEvent {
    SseEvent::default()
        .id(e.id.to_string())
        .event(e.name)
        .data(e.data.as_ref())
}

struct StreamState {
    queue: std::collections::VecDeque<SseEvent>,
    live: tokio::sync::broadcast::Receiver<HubEvent>,
    last: u64,
    shutdown: watch::Receiver<bool>,
}

fn event_stream(
    hub: &Hub,
    last_id: u64,
    shutdown: watch::Receiver<bool>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> + use<> {
    let sub = hub.subscribe(last_id);
    let mut queue = std::collections::VecDeque::new();
    if let Some((a, b)) = sub.gap {
        queue.push_back(
            SseEvent::default()
                .event("gap")
                .data(format!("{{\"missed_from\":{a},\"missed_to\":{b}}}")),
        );
    }
    let mut last = last_id;
    for e in &sub.replay {
        queue.push_back(sse_event(e));
        last = e.id;
    }
    let state = StreamState {
        queue,
        live: sub.live,
        last,
        shutdown,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(e) = s.queue.pop_front() {
                return Some((Ok(e), s));
            }
            if *s.shutdown.borrow() {
                return None;
            }
            tokio::select! {
                r = s.live.recv() => match r {
                    Ok(e) if e.id <= s.last => {}
                    Ok(e) => {
                        s.last = e.id;
                        return Some((Ok(sse_event(&e)), s));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let from = s.last + 1;
                        s.last += n;
                        let ev = SseEvent::default()
                            .event("gap")
                            .data(format!("{{\"missed_from\":{from},\"missed_to\":{}}}", s.last));
                        return Some((Ok(ev), s));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                _ = s.shutdown.changed() => {}
            }
        }
    })
}

async fn get_events(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(
        &st,
        &headers,
        &[Role::Agent, Role::Operator],
        "read the event stream",
    ) {
        return error_response(&e);
    }
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let stream = event_stream(&st.hub, last_id, st.shutdown.clone());
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
