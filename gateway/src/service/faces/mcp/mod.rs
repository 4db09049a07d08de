//! The Model Context Protocol server (on `rmcp`, the official Rust SDK): the agent link that MCP
//! hosts speak, over standard input and output (`halo-gateway run --mcp stdio`) and over
//! streamable HTTP at `/mcp` on the agent listener (the agent credential).
//!
//! It is one more interface of the same service task: every tool call is a request on the
//! task's bounded queue, exactly what the HTTP routes send, so a component tool's call passes
//! admission, the final gate, the mission contract and the receipts as `POST /v1/responses`
//! does. The tools are generated from the loaded catalog ([`tools`]); none reaches the flight
//! controller's parameters, fences, modes, arming or raw MAVLink: the agent is untrusted.
//!
//! Obligations, phase changes and the vehicle's state changes reach the client as
//! `notifications/message` (logger `halo-gateway`, the event in `data`), and as
//! `notifications/resources/updated` for the resources it subscribed to.

#![allow(
    deprecated,
    reason = "MCP logging notifications are how hosts up to protocol 2025-11-25, the versions this server speaks, hear about events; SEP-2577 deprecates them for 2026-07-28 only"
)]
#![allow(
    clippy::indexing_slicing,
    reason = "reads of serde_json::Value by key or position never panic: a missing entry reads as Null"
)]

pub mod tools;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourcesResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::service::api::ApiError;
use crate::service::infra::clock::Clock;
use crate::service::infra::clock::wall_now_ms;
use crate::service::infra::hub::{Hub, Item, Resume};
use crate::service::task::{Answer, Cmd, Party, ask};
use halo_core::catalog::Catalog;
use halo_core::reason::ReasonCode;
use tools::{MCP_AGENT, ToolKind};

/// The resources a client may read and subscribe to.
const RESOURCES: [(&str, &str, &str); 5] = [
    (
        "halo://catalog",
        "catalog",
        "the loaded catalog: sources, component types, what each depends on and its rules",
    ),
    (
        "halo://schema/envelope",
        "envelope schema",
        "the JSON Schema of a response envelope for the loaded catalog",
    ),
    (
        "halo://contract",
        "mission contract",
        "the mission contract in force: goals, committed effects, versions",
    ),
    (
        "halo://obligations",
        "open obligations",
        "the obligations a fresh candidate may still answer",
    ),
    (
        "halo://vehicle/status",
        "vehicle status",
        "the vehicle and every source's epoch, provenance and age",
    ),
];

/// How many of its own responses' agents and generations the server remembers (a candidate
/// must come from the same agent with a later generation).
const REMEMBERED: usize = 256;

/// What every session shares: the service task's queue, the event hub, the catalog and the
/// tools generated from it.
pub struct Shared {
    cmds: mpsc::Sender<Cmd>,
    hub: Hub,
    catalog: Arc<Catalog>,
    tools: Vec<Tool>,
    kinds: HashMap<String, ToolKind>,
    schema: Arc<String>,
    catalog_json: String,
    next_response: AtomicU64,
    generation: AtomicU64,
    /// Response id → (agent id, generation), newest last.
    sent: Mutex<VecDeque<(String, String, u64)>>,
    shutdown: watch::Receiver<bool>,
    /// The reference certifier is on: a component that needs a certificate and names none
    /// is certified by it before it is sent.
    certifier: bool,
    next_certificate: AtomicU64,
    /// The service's clock, for arrival stamps ([`crate::service::infra::clock`]).
    clock: Clock,
}

impl Shared {
    /// The server's shared part for the service's task and catalog.
    pub fn new(
        cmds: mpsc::Sender<Cmd>,
        hub: Hub,
        catalog: Arc<Catalog>,
        schema: Arc<String>,
        shutdown: watch::Receiver<bool>,
        certifier: bool,
        clock: Clock,
    ) -> Arc<Shared> {
        let generated = tools::tools(&catalog, certifier);
        let kinds = generated
            .iter()
            .map(|(t, k)| (t.name.to_string(), k.clone()))
            .collect();
        let tools = generated.into_iter().map(|(t, _)| t).collect();
        let catalog_json = catalog_summary(&catalog).to_string();
        // Generations start from the wall clock so a restarted server's candidates stay later
        // than the responses an earlier one sent.
        let start = wall_now_ms();
        Arc::new(Shared {
            cmds,
            hub,
            catalog,
            tools,
            kinds,
            schema,
            catalog_json,
            next_response: AtomicU64::new(1),
            generation: AtomicU64::new(start),
            sent: Mutex::new(VecDeque::new()),
            shutdown,
            certifier,
            clock,
            next_certificate: AtomicU64::new(1),
        })
    }

    fn next_generation(&self, at_least: u64) -> u64 {
        let g = self.generation.fetch_add(1, Ordering::Relaxed);
        let g = g.max(at_least);
        self.generation.fetch_max(g + 1, Ordering::Relaxed);
        g
    }

    fn remember(&self, response: &str, agent: &str, generation: u64) {
        if let Ok(mut s) = self.sent.lock() {
            if s.len() >= REMEMBERED {
                s.pop_front();
            }
            s.push_back((response.to_string(), agent.to_string(), generation));
        }
    }

    fn remembered(&self, response: &str) -> Option<(String, u64)> {
        self.sent.lock().ok().and_then(|s| {
            s.iter()
                .rev()
                .find(|(r, _, _)| r == response)
                .map(|(_, a, g)| (a.clone(), *g))
        })
    }
}

/// The agent principal an MCP request over HTTP came from, put on the request by the
/// listener's guard once it authenticated it.
#[derive(Clone, Debug)]
pub struct McpCaller(pub Arc<str>);

/// One MCP session's server: the shared part, and the session's own subscriptions and log
/// level. The notification task ends with the session.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
    session: Arc<Session>,
}

struct Session {
    /// The agent principal the session's first call came from over HTTP (each later call must
    /// come from it); none over stdio, where the link itself is the agent.
    agent: Mutex<Option<Arc<str>>>,
    subscribed: Arc<Mutex<BTreeSet<String>>>,
    level: Arc<Mutex<LoggingLevel>>,
    forwarder: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(mut f) = self.forwarder.lock()
            && let Some(t) = f.take()
        {
            t.abort();
        }
    }
}

impl McpServer {
    /// A new session's server.
    pub fn new(shared: Arc<Shared>) -> McpServer {
        McpServer {
            shared,
            session: Arc::new(Session {
                agent: Mutex::new(None),
                subscribed: Arc::new(Mutex::new(BTreeSet::new())),
                level: Arc::new(Mutex::new(LoggingLevel::Info)),
                forwarder: Mutex::new(None),
            }),
        }
    }

    /// Whom the session's requests speak for: its agent principal over HTTP, anyone over
    /// stdio.
    fn party(&self) -> Party {
        self.agent().map_or(Party::Anyone, Party::Agent)
    }

    /// The agent principal the session is bound to, if any.
    fn agent(&self) -> Option<Arc<str>> {
        self.session
            .agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Binds the session to the agent principal a request over HTTP came from (the guard in
    /// `faces/http.rs` authenticated it and put it on the request), and refuses a request of
    /// another principal on it: a session id is not a credential.
    fn bind(&self, extensions: &rmcp::model::Extensions) -> Result<(), ApiError> {
        let Some(caller) = extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpCaller>())
        else {
            return Ok(());
        };
        let mut bound = self
            .session
            .agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*bound {
            None => {
                *bound = Some(Arc::clone(&caller.0));
                Ok(())
            }
            Some(owner) if *owner == caller.0 => Ok(()),
            Some(owner) => Err(ApiError::new(
                403,
                ReasonCode::SESSION_NOT_YOURS,
                format!(
                    "this MCP session is agent principal `{owner}`'s, not `{}`'s; open a session of your own",
                    caller.0
                ),
            )),
        }
    }

    async fn ask(&self, make: impl FnOnce(crate::service::task::Reply) -> Cmd) -> Answer {
        ask(&self.shared.cmds, make).await
    }

    /// An envelope to the task, as the MCP link's agent, and the tool's answer from its
    /// decision.
    async fn respond(&self, bytes: Vec<u8>, agent: &str, generation: u64) -> CallToolResult {
        let answer = self
            .ask(|reply| Cmd::Response {
                by: self.party(),
                bytes,
                reply,
            })
            .await;
        self.decision(answer, agent, generation).await
    }

    async fn call(&self, name: &str, mut args: JsonObject) -> Result<CallToolResult, McpError> {
        // A model's strict structured output sends an absent argument as null.
        args.retain(|_, v| !v.is_null());
        let Some(kind) = self.shared.kinds.get(name).cloned() else {
            let listed: Vec<&str> = self.shared.tools.iter().map(|t| t.name.as_ref()).collect();
            return Ok(refused(&ApiError::new(
                404,
                ReasonCode::UNKNOWN_TOOL,
                format!(
                    "no tool `{name}`: this server has {} (the agent cannot reach parameters, modes, arming or raw MAVLink)",
                    listed.join(", ")
                ),
            )));
        };
        Ok(match kind {
            ToolKind::Component(t) => self.send_component(&t, &args).await,
            ToolKind::SubmitResponse => self.submit_response(&args).await,
            ToolKind::Obligations => self.obligations(&args).await,
            ToolKind::SubmitCandidate => self.submit_candidate(&args).await,
            ToolKind::VehicleStatus => self.vehicle_status().await,
            ToolKind::Explain => self.explain(&args).await,
        })
    }

    async fn send_component(&self, type_name: &str, args: &JsonObject) -> CallToolResult {
        let sh = &self.shared;
        let n = sh.next_response.fetch_add(1, Ordering::Relaxed);
        let response_id = format!("mcp-{}-{n}", sh.hub.boot());
        let generation = sh.next_generation(0);
        let mut component = match tools::component_object(&sh.catalog, type_name, args) {
            Ok(c) => c,
            Err(e) => return refused(&e),
        };
        if let Err(e) = self.auto_certify(&mut component).await {
            return refused(&e);
        }
        let bytes =
            match tools::component_envelope(&sh.catalog, component, &response_id, generation) {
                Ok(b) => b,
                Err(e) => return refused(&e),
            };
        sh.remember(&response_id, MCP_AGENT, generation);
        self.respond(bytes, MCP_AGENT, generation).await
    }

    /// With the reference certifier on, a component that needs a certificate and names none
    /// gets one: a fresh id, then the certifier's check of this exact component (its refusal
    /// is the tool's answer).
    async fn auto_certify(&self, component: &mut JsonObject) -> Result<(), ApiError> {
        let sh = &self.shared;
        let ty = component
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !sh.certifier
            || component.contains_key("certificate")
            || !tools::needs_certificate(&sh.catalog, ty)
        {
            return Ok(());
        }
        let n = sh.next_certificate.fetch_add(1, Ordering::Relaxed);
        component.insert(
            "certificate".into(),
            json!(format!("mcp-cert-{}-{n}", sh.hub.boot())),
        );
        let bytes = serde_json::to_vec(&json!({ "component": component }))
            .map_err(|e| tools::invalid(e.to_string()))?;
        let arrival = sh.clock.arrival();
        self.ask(|reply| Cmd::Certify {
            bytes,
            arrival,
            reply,
        })
        .await
        .map(|_| ())
    }

    async fn submit_response(&self, args: &JsonObject) -> CallToolResult {
        if let Some(extra) = args.keys().find(|k| k.as_str() != "response") {
            return refused(&unknown_argument(extra, "submit_response", "response"));
        }
        let Some(env) = args.get("response") else {
            return refused(&tools::invalid(
                "`submit_response` needs `response`, the envelope",
            ));
        };
        let agent = env
            .get("agent_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let generation = env.get("generation").and_then(Value::as_u64).unwrap_or(0);
        if let Some(r) = env.get("response_id").and_then(Value::as_str) {
            self.shared.remember(r, &agent, generation);
        }
        // A model's strict structured output: a null member is absent.
        let bytes = match serde_json::to_vec(env)
            .map_err(|e| tools::invalid(e.to_string()))
            .and_then(|b| crate::service::api::schema::from_strict_form(&b))
        {
            Ok(b) => b,
            Err(e) => return refused(&e),
        };
        self.respond(bytes, &agent, generation).await
    }

    async fn submit_candidate(&self, args: &JsonObject) -> CallToolResult {
        if let Some(extra) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "obligation" | "components"))
        {
            return refused(&unknown_argument(
                extra,
                "submit_candidate",
                "obligation, components",
            ));
        }
        let Some(obligation) = args.get("obligation").and_then(Value::as_u64) else {
            return refused(&tools::invalid(
                "`submit_candidate` needs `obligation`, the obligation's number",
            ));
        };
        let Some(mut components) = args.get("components").filter(|c| c.is_array()).cloned() else {
            return refused(&tools::invalid(
                "`submit_candidate` needs `components`, an array of components",
            ));
        };
        if let Some(list) = components.as_array_mut() {
            for c in list.iter_mut() {
                if let Some(m) = c.as_object_mut()
                    && let Err(e) = self.auto_certify(m).await
                {
                    return refused(&e);
                }
            }
        }
        let all = match self
            .ask(|reply| Cmd::Obligations {
                by: self.party(),
                reply,
            })
            .await
        {
            Ok(v) => v,
            Err(e) => return refused(&e),
        };
        let Some(o) = all
            .as_array()
            .and_then(|a| a.iter().find(|o| o["id"].as_u64() == Some(obligation)))
        else {
            return refused(&ApiError::new(
                404,
                ReasonCode::NO_OBLIGATION,
                format!("no obligation {obligation}; `obligations` lists them"),
            ));
        };
        let response_id = o["response"].as_str().unwrap_or_default().to_string();
        // The candidate comes from the response's agent, with a generation later than the
        // instances it replaces.
        let (agent, sent_generation) = self
            .shared
            .remembered(&response_id)
            .unwrap_or_else(|| (MCP_AGENT.to_string(), 0));
        let rid = response_id.clone();
        let report = self
            .ask(|reply| Cmd::GetResponse {
                by: self.party(),
                id: rid,
                reply,
            })
            .await
            .unwrap_or(Value::Null);
        let floor = report["components"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["generation"].as_u64())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
            .max(sent_generation)
            .saturating_add(1);
        let generation = self.shared.next_generation(floor);
        let bytes = match tools::candidate_envelope(
            &self.shared.catalog,
            obligation,
            &response_id,
            &agent,
            generation,
            &components,
        ) {
            Ok(b) => b,
            Err(e) => return refused(&e),
        };
        self.shared.remember(&response_id, &agent, generation);
        let answer = self
            .ask(|reply| Cmd::Candidate {
                by: self.party(),
                obligation,
                bytes,
                reply,
            })
            .await;
        self.decision(answer, &agent, generation).await
    }

    async fn obligations(&self, args: &JsonObject) -> CallToolResult {
        if let Some(extra) = args.keys().find(|k| k.as_str() != "state") {
            return refused(&unknown_argument(extra, "obligations", "state"));
        }
        let all = match args.get("state").map(|v| v.as_str()) {
            None | Some(Some("open")) => false,
            Some(Some("all")) => true,
            Some(_) => return refused(&tools::invalid("`state` is `open` or `all`")),
        };
        match self
            .ask(|reply| Cmd::Obligations {
                by: self.party(),
                reply,
            })
            .await
        {
            Ok(v) => {
                let list = self.render_obligations(&v, all);
                let text = if list.is_empty() {
                    if all {
                        "no obligations".to_string()
                    } else {
                        "no open obligations".to_string()
                    }
                } else {
                    list.iter()
                        .map(obligation_sentence)
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                ok(text, json!({"obligations": list}))
            }
            Err(e) => refused(&e),
        }
    }

    async fn vehicle_status(&self) -> CallToolResult {
        match self.ask(|reply| Cmd::Status { reply }).await {
            Ok(v) => {
                let s = status_view(&v);
                ok(status_sentence(&s), s)
            }
            Err(e) => refused(&e),
        }
    }

    async fn explain(&self, args: &JsonObject) -> CallToolResult {
        if let Some(extra) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "response_id" | "component"))
        {
            return refused(&unknown_argument(
                extra,
                "explain",
                "response_id, component",
            ));
        }
        let (Some(rid), Some(cid)) = (
            args.get("response_id").and_then(Value::as_str),
            args.get("component").and_then(Value::as_str),
        ) else {
            return refused(&tools::invalid(
                "`explain` needs `response_id` and `component`",
            ));
        };
        let id = rid.to_string();
        let report = match self
            .ask(|reply| Cmd::GetResponse {
                by: self.party(),
                id,
                reply,
            })
            .await
        {
            Ok(r) => r,
            Err(e) => return refused(&e),
        };
        let Some(c) = report["components"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["id"] == cid))
        else {
            return refused(&ApiError::with_ids(
                404,
                ReasonCode::NOT_FOUND,
                format!("response `{rid}` has no component `{cid}`"),
                vec![cid.to_string()],
            ));
        };
        let status = self
            .ask(|reply| Cmd::Status { reply })
            .await
            .unwrap_or(Value::Null);
        let obligations = self
            .ask(|reply| Cmd::Obligations {
                by: self.party(),
                reply,
            })
            .await
            .unwrap_or(Value::Null);
        let obligation = c["obligation"].as_u64().and_then(|n| {
            self.render_obligations(&obligations, true)
                .into_iter()
                .find(|o| o["id"].as_u64() == Some(n))
        });
        let e = explanation(&self.shared.catalog, c, &status, obligation);
        ok(e["summary"].as_str().unwrap_or_default().to_string(), e)
    }

    /// A decision for the model: each component's phase in words, and each withheld action's
    /// obligation with what to refresh.
    async fn decision(&self, answer: Answer, agent: &str, generation: u64) -> CallToolResult {
        let v = match answer {
            // A candidate's answer carries the response's current report.
            Ok(v) if v.get("current").is_some() => v["current"].clone(),
            Ok(v) => v,
            Err(e) => return refused(&e),
        };
        let obligations = if v["components"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["obligation"].is_u64()))
        {
            let all = self
                .ask(|reply| Cmd::Obligations {
                    by: self.party(),
                    reply,
                })
                .await
                .unwrap_or(Value::Null);
            self.render_obligations(&all, true)
        } else {
            Vec::new()
        };
        let mut lines = Vec::new();
        let mut components = Vec::new();
        let response = v["response"].as_str().unwrap_or_default().to_string();
        for c in v["components"].as_array().into_iter().flatten() {
            let id = c["id"].as_str().unwrap_or_default();
            let phase = c["phase"].as_str().unwrap_or_default().to_ascii_lowercase();
            let reason = c["reason"].as_str();
            let obligation = c["obligation"]
                .as_u64()
                .and_then(|n| obligations.iter().find(|o| o["id"].as_u64() == Some(n)));
            let mut line = format!("{id} ({}): {phase}", c["type"].as_str().unwrap_or(""));
            if let Some(r) = reason {
                line.push_str(&format!(" — {r}: {}", reason_text(r)));
            }
            if let Some(o) = obligation {
                line.push_str(&format!(". {}", obligation_sentence(o)));
            }
            lines.push(line);
            components.push(json!({
                "id": id,
                "type": c["type"],
                "phase": phase,
                "reason": reason,
                "reason_text": reason.map(reason_text),
                "action": c["action"],
                "digest": c["digest"],
                "obligation": obligation,
            }));
        }
        ok(
            format!("response {response}:\n{}", lines.join("\n")),
            json!({
                "response_id": response,
                "agent_id": agent,
                "generation": generation,
                "components": components,
            }),
        )
    }

    /// Obligations in the agent's words: lower-case states, the time left in milliseconds and
    /// as wall time.
    fn render_obligations(&self, v: &Value, all: bool) -> Vec<Value> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(render_obligation)
            .filter(|o| all || o["open"] == true)
            .collect()
    }

    async fn resource(&self, uri: &str) -> Result<String, McpError> {
        let answer = match uri {
            "halo://catalog" => return Ok(self.shared.catalog_json.clone()),
            "halo://schema/envelope" => return Ok(self.shared.schema.as_str().to_string()),
            "halo://contract" => self.ask(|reply| Cmd::ContractStatus { reply }).await,
            "halo://obligations" => self
                .ask(|reply| Cmd::Obligations {
                    by: self.party(),
                    reply,
                })
                .await
                .map(|v| json!({"obligations": self.render_obligations(&v, false)})),
            "halo://vehicle/status" => self
                .ask(|reply| Cmd::Status { reply })
                .await
                .map(|v| status_view(&v)),
            _ => {
                return Err(McpError::resource_not_found(
                    format!("no resource `{uri}`"),
                    Some(json!({"code": ReasonCode::NOT_FOUND.name()})),
                ));
            }
        };
        answer.map(|v| v.to_string()).map_err(|e| {
            McpError::internal_error(
                format!("{}: {}", e.code().name(), e.message()),
                Some(e.body()),
            )
        })
    }

    /// Forwards the hub's events from now on to this session's peer until it goes away.
    fn start_forwarder(&self, peer: Peer<RoleServer>) {
        let hub = self.shared.hub.clone();
        let subscribed = Arc::clone(&self.session.subscribed);
        let level = Arc::clone(&self.session.level);
        let mut shutdown = self.shared.shutdown.clone();
        let from = hub.next_id().saturating_sub(1);
        let me = self.agent();
        let task = tokio::spawn(async move {
            let mut reader = hub.reader(Resume::After(from));
            loop {
                let item = tokio::select! {
                    i = reader.next() => i,
                    _ = shutdown.changed() => {
                        if *shutdown.borrow() { return; }
                        continue;
                    }
                };
                let (name, id, data) = match &item {
                    // Another agent principal's response, obligation or their events.
                    Item::Event(e) if me.as_deref().is_some_and(|a| !e.visible_to(a)) => continue,
                    Item::Event(e) => (e.name(), e.id(), e.data().to_string()),
                    Item::Gap { from, to } => (
                        "gap",
                        *to,
                        json!({"missed_from": from, "missed_to": to}).to_string(),
                    ),
                    Item::Reset { .. } => continue,
                };
                let Some((lvl, resource)) = notification_for(name) else {
                    continue;
                };
                let min = level.lock().map(|l| *l).unwrap_or(LoggingLevel::Info);
                if rank(lvl) >= rank(min) {
                    let data: Value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                    let data = notification_data(name, &data);
                    let p = LoggingMessageNotificationParam::new(
                        lvl,
                        json!({"event": name, "event_id": hub.wire_id(id), "data": data}),
                    )
                    .with_logger("halo-gateway");
                    if peer.notify_logging_message(p).await.is_err() {
                        return;
                    }
                }
                if let Some(uri) = resource {
                    let wanted = subscribed.lock().map(|s| s.contains(uri)).unwrap_or(false);
                    if wanted
                        && peer
                            .notify_resource_updated(
                                rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                            )
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
            }
        });
        if let Ok(mut f) = self.session.forwarder.lock()
            && let Some(old) = f.replace(task)
        {
            old.abort();
        }
    }
}

/// An obligation in the agent's words: a lower-case state, the time left in milliseconds and
/// as wall time (`now_ns` on the service's clock).
fn render_obligation(o: &Value) -> Value {
    let open = o["open"] == true;
    let left_ms = o["expires_at_unix_ms"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(wall_now_ms());
    json!({
        "id": o["id"],
        "state": o["state"],
        "open": open,
        "response_id": o["response"],
        "component": o["component"],
        "scope": o["scope"],
        "reason": o["reason"],
        "reason_text": o["reason"].as_str().map(reason_text),
        "refresh": o["required"],
        "route": o["route"],
        "attempts": o["attempts"],
        "retry_limit": o["retry_limit"],
        "expires_in_ms": if open { json!(left_ms) } else { Value::Null },
        "expires_at_unix_ms": if open { o["expires_at_unix_ms"].clone() } else { Value::Null },
    })
}

/// An event's data in the agent's words: obligations as the tools render them, phases in lower
/// case, no monotonic instants.
fn notification_data(name: &str, raw: &Value) -> Value {
    match name {
        "obligation_created" => render_obligation(&raw["obligation"]),
        "obligation_changed" => {
            json!({"id": raw["id"], "state": raw["state"], "open": raw["open"]})
        }
        "phase" => json!({
            "response_id": raw["response"],
            "component": raw["component"],
            "phase": raw["phase"].as_str().map(str::to_ascii_lowercase),
            "reason": raw["reason"],
        }),
        "gate" => json!({
            "response_id": raw["response"],
            "component": raw["component"],
            "outcome": raw["outcome"],
            "reason": raw.get("reason").cloned().unwrap_or(Value::Null),
        }),
        _ => raw.clone(),
    }
}

/// Which events a client hears about, at which level, and the resource each changes.
fn notification_for(name: &str) -> Option<(LoggingLevel, Option<&'static str>)> {
    Some(match name {
        "obligation_created" => (LoggingLevel::Warning, Some("halo://obligations")),
        "obligation_changed" => (LoggingLevel::Info, Some("halo://obligations")),
        "phase" | "gate" => (LoggingLevel::Info, None),
        "contract" => (LoggingLevel::Info, Some("halo://contract")),
        "vehicle_hold" | "vehicle_locked" | "vehicle_link" => {
            (LoggingLevel::Warning, Some("halo://vehicle/status"))
        }
        "vehicle_armed" | "vehicle_flying" | "vehicle_landing" => {
            (LoggingLevel::Info, Some("halo://vehicle/status"))
        }
        "shutdown" => (LoggingLevel::Warning, None),
        "gap" => (LoggingLevel::Warning, None),
        _ => return None,
    })
}

fn rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn unknown_argument(name: &str, tool: &str, takes: &str) -> ApiError {
    ApiError::with_ids(
        400,
        ReasonCode::UNKNOWN_FIELD,
        format!("`{tool}` takes {takes}; not `{name}`"),
        vec![name.to_string()],
    )
}

fn reason_text(code: &str) -> &'static str {
    ReasonCode::from_name(code).map_or("", ReasonCode::description)
}

fn ok(text: String, structured: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

/// A refusal the model reads: the stable code, the message, the offending ids.
fn refused(e: &ApiError) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "refused: {} — {}",
        e.code().name(),
        e.message()
    ))]);
    r.structured_content = Some(e.body());
    r
}

fn obligation_sentence(o: &Value) -> String {
    let refresh: Vec<&str> = o["refresh"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let scope: Vec<&str> = o["scope"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if o["open"] == true {
        format!(
            "Obligation {} is open ({}): {}then call submit_candidate with obligation {} and fresh components for {} within {} ms (attempt {} of {}).",
            o["id"],
            o["reason"].as_str().unwrap_or(""),
            if refresh.is_empty() {
                String::new()
            } else {
                format!(
                    "wait until {} is refreshed (vehicle_status shows the current epochs), ",
                    refresh.join(", ")
                )
            },
            o["id"],
            scope.join(", "),
            o["expires_in_ms"],
            o["attempts"],
            o["retry_limit"],
        )
    } else {
        format!(
            "Obligation {} is {} ({}).",
            o["id"],
            o["state"].as_str().unwrap_or(""),
            o["reason"].as_str().unwrap_or("")
        )
    }
}

/// The vehicle and the sources, for the agent.
fn status_view(v: &Value) -> Value {
    let veh = &v["vehicle"];
    json!({
        "vehicle": {
            "mode": veh["mode"],
            "armed": veh["armed"],
            "landed_state": veh["landed_state"],
            "link_up": veh["link_up"],
            "control": veh["control"],
            "height_above_home_m": veh["height_above_home_m"],
            "position_ned_m": veh["position_ned_m"],
            "battery_pct": veh["battery_pct"],
        },
        "operator_hold": v["operator_hold"],
        "sources": v["sources"],
        "obligations_live": v["obligations_live"],
        "responses_live": v["responses_live"],
        "catalog": v["catalog"],
    })
}

fn status_sentence(s: &Value) -> String {
    let veh = &s["vehicle"];
    let mut out = format!(
        "vehicle: {}, {}, {}, link {}, control: {}, height above home {} m, battery {} %",
        veh["mode"].as_str().unwrap_or("unknown mode"),
        if veh["armed"] == true {
            "armed"
        } else {
            "disarmed"
        },
        veh["landed_state"].as_str().unwrap_or("unknown"),
        if veh["link_up"] == true { "up" } else { "down" },
        veh["control"].as_str().unwrap_or("unknown"),
        veh["height_above_home_m"]
            .as_f64()
            .map_or("?".to_string(), |h| format!("{h:.1}")),
        veh["battery_pct"]
            .as_f64()
            .map_or("?".to_string(), |b| format!("{b:.0}")),
    );
    if s["operator_hold"] == true {
        out.push_str("; the operator holds the vehicle: actions do not dispatch");
    }
    out.push_str("\nsources (epoch, provenance, age):");
    for src in s["sources"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {}: {}",
            src["source"].as_str().unwrap_or(""),
            if src["age_ms"].is_null() {
                "never published".to_string()
            } else {
                format!(
                    "epoch {}, {}, {} ms old",
                    src["epoch"],
                    src["provenance"].as_str().unwrap_or("-"),
                    src["age_ms"]
                )
            }
        ));
    }
    out
}

/// Why a component is where it is: its reason, the sources its type depends on with their age
/// against their limit, its obligation.
fn explanation(cat: &Catalog, c: &Value, status: &Value, obligation: Option<Value>) -> Value {
    let ty = c["type"].as_str().unwrap_or_default();
    let spec = cat.type_ix(ty).and_then(|ix| cat.type_spec(ix));
    let mut sources = Vec::new();
    let mut stale = Vec::new();
    for (s, limit) in spec.map(|t| t.footprint.as_slice()).unwrap_or_default() {
        let Some(name) = cat.source(*s).map(|x| x.name.to_string()) else {
            continue;
        };
        let now = status["sources"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["source"] == name.as_str()));
        let age = now.and_then(|x| x["age_ms"].as_u64());
        let limit_ms = limit.0 / 1_000_000;
        let over = age.is_none_or(|a| a > limit_ms);
        if over {
            stale.push(name.clone());
        }
        sources.push(json!({
            "source": name,
            "age_ms": age,
            "limit_ms": limit_ms,
            "stale": over,
            "epoch": now.map(|x| x["epoch"].clone()),
            "provenance": now.map(|x| x["provenance"].clone()),
        }));
    }
    let phase = c["phase"].as_str().unwrap_or_default().to_ascii_lowercase();
    let reason = c["reason"].as_str();
    let mut summary = format!("{} ({ty}) is {phase}", c["id"].as_str().unwrap_or_default());
    if let Some(r) = reason {
        summary.push_str(&format!(": {r} — {}", reason_text(r)));
    }
    summary.push('.');
    if !stale.is_empty() {
        summary.push_str(&format!(
            " Older than their limit or never published now: {}.",
            stale.join(", ")
        ));
    }
    if let Some(o) = &obligation {
        summary.push(' ');
        summary.push_str(&obligation_sentence(o));
    }
    json!({
        "component": c["id"],
        "type": ty,
        "phase": phase,
        "reason": reason,
        "reason_text": reason.map(reason_text),
        "sources": sources,
        "stale_now": stale,
        "obligation": obligation,
        "summary": summary,
    })
}

/// The catalog as a resource: sources, types, what each depends on, its rules and recovery.
fn catalog_summary(cat: &Catalog) -> Value {
    let sources: Vec<Value> = cat
        .sources()
        .iter()
        .map(|s| json!({"name": s.name.as_str(), "owner": s.owner.name()}))
        .collect();
    let types: Vec<Value> = cat
        .types()
        .iter()
        .map(|t| {
            let footprint: serde_json::Map<String, Value> = t
                .footprint
                .iter()
                .filter_map(|(s, age)| {
                    cat.source(*s)
                        .map(|x| (x.name.to_string(), json!(age.0 / 1_000_000)))
                })
                .collect();
            json!({
                "name": t.name.as_str(),
                "action": t.class == halo_core::catalog::Class::Action,
                "payload": t.payload.name(),
                "max_age_ms": footprint,
                "requires_certificate": t.requires_certificate,
                "rules": t.rules.iter().map(|r| r.code.name()).collect::<Vec<_>>(),
                "recoverable": t.recovery.recoverable.iter().map(|c| c.name()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let zones: Vec<&str> = cat.zones().iter().map(|(n, _)| n.as_str()).collect();
    json!({"id": cat.id().as_str(), "version": cat.version(), "sources": sources, "types": types, "zones": zones})
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        let mut caps = caps;
        caps.logging = Some(JsonObject::new());
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("halo-gateway", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "halo-gateway stands between you and a real aircraft. Each tool sends what it names through the gateway's admission and final dispatch gate: an action flies only if every source it depends on is fresh and unchanged since you planned, its rules hold, and a certificate covers that exact action. Read `vehicle_status` for the current epochs to claim in `support`. When an action is withheld the result names an obligation: wait for what it names to be refreshed, then answer it with `submit_candidate`. Arming, takeoff and modes stay the operator's.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // Sessions and server-initiated notifications as MCP hosts speak them today.
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.shared.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if let Err(e) = self.bind(&context.extensions) {
            return Ok(refused(&e).into());
        }
        let args = request.arguments.unwrap_or_default();
        self.call(&request.name, args).await.map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(
            RESOURCES
                .iter()
                .map(|(uri, name, d)| {
                    Resource::new(*uri, *name)
                        .with_description(*d)
                        .with_mime_type("application/json")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.bind(&context.extensions)
            .map_err(|e| McpError::invalid_request(e.message().to_string(), None))?;
        let text = self.resource(&request.uri).await?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri).with_mime_type("application/json"),
        ])
        .into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !RESOURCES.iter().any(|(u, _, _)| *u == request.uri) {
            return Err(McpError::resource_not_found(
                format!("no resource `{}`", request.uri),
                None,
            ));
        }
        if let Ok(mut s) = self.session.subscribed.lock() {
            s.insert(request.uri);
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut s) = self.session.subscribed.lock() {
            s.remove(&request.uri);
        }
        Ok(())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut l) = self.session.level.lock() {
            *l = request.level;
        }
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // The session's principal, from the request that initialized it, before any event
        // is forwarded: an agent's session gets only what that agent may see.
        if self.bind(&context.extensions).is_err() {
            return;
        }
        self.start_forwarder(context.peer);
    }
}

/// The streamable HTTP server for `/mcp`, and its session manager (the listener's guard counts
/// its sessions against `listen.max_mcp_sessions`).
pub type HttpService = rmcp::transport::StreamableHttpService<
    McpServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

/// The `/mcp` service on `shared`, ending its sessions at shutdown. Host checking is off: every
/// request carries the agent credential (checked before this service runs), which a page
/// rebound to this address does not have.
pub fn http_service(
    shared: &Arc<Shared>,
    body_limit: usize,
) -> (
    HttpService,
    Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
) {
    let manager = Arc::new(
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default(),
    );
    let config = rmcp::transport::StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(body_limit);
    let cancel = config.cancellation_token.clone();
    let mut shutdown = shared.shutdown.clone();
    tokio::spawn(async move {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        cancel.cancel();
    });
    let sh = Arc::clone(shared);
    let service = rmcp::transport::StreamableHttpService::new(
        move || Ok(McpServer::new(Arc::clone(&sh))),
        Arc::clone(&manager),
        config,
    );
    (service, manager)
}

/// Serves one MCP session on `input`/`output` (`halo-gateway run --mcp stdio`) until the client
/// closes it or the service shuts down.
///
/// # Errors
/// The handshake's failure, for people.
pub async fn serve_stdio<R, W>(
    shared: Arc<Shared>,
    input: R,
    output: W,
) -> Result<(), crate::error::Error>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use rmcp::ServiceExt as _;
    let mut shutdown = shared.shutdown.clone();
    let running = McpServer::new(shared)
        .serve((input, output))
        .await
        .map_err(|e| {
            crate::error::Error::new(
                crate::error::ErrorKind::System,
                format!("MCP handshake on standard input failed: {e}"),
            )
        })?;
    let cancel = running.cancellation_token();
    tokio::select! {
        r = running.waiting() => { let _ = r; }
        _ = async {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() { break; }
            }
        } => { cancel.cancel(); }
    }
    Ok(())
}
