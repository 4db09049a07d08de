//! The service task's commands: what an interface may ask ([`Cmd`]), the one way it asks
//! ([`ask`], a bounded queue that is never waited on), and how the task answers each.

use super::*;

/// An answer to an interface.
pub type Answer = Result<serde_json::Value, ApiError>;

/// Where the answer goes.
pub type Reply = oneshot::Sender<Answer>;

/// Sends one request to the service task and waits for its answer: the one way every interface
/// (HTTP, stdio) reaches the core. The queue is bounded and never waited on: a full queue is
/// `SERVICE_BUSY` at once.
pub async fn ask(cmds: &mpsc::Sender<Cmd>, make: impl FnOnce(Reply) -> Cmd) -> Answer {
    let shutting = || {
        ApiError::new(
            503,
            ReasonCode::SHUTTING_DOWN,
            "the gateway is shutting down",
        )
    };
    let (tx, rx) = oneshot::channel();
    match cmds.try_send(make(tx)) {
        Ok(()) => rx.await.unwrap_or_else(|_| Err(shutting())),
        Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::new(
            503,
            ReasonCode::SERVICE_BUSY,
            "the gateway's input queue is full; retry",
        )),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(shutting()),
    }
}

/// One request to the service task.
pub enum Cmd {
    /// `POST /v1/responses`.
    Response {
        /// Who sends it.
        by: Party,
        /// The envelope bytes.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/obligations/{id}/candidates`.
    Candidate {
        /// Who sends it.
        by: Party,
        /// The obligation named by the path.
        obligation: u64,
        /// The candidate bytes.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/state/{source}`.
    State {
        /// Who writes: a provider or the operator (checked against the source's owner).
        caller: halo_core::catalog::Owner,
        /// The principal that writes, named in the update's receipt.
        by: Option<std::sync::Arc<str>>,
        /// Source name.
        source: String,
        /// The update body.
        bytes: Vec<u8>,
        /// When the request arrived (to map the provider's generation time).
        arrival: Arrival,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/certificates`.
    Certificate {
        /// The certificate body.
        bytes: Vec<u8>,
        /// When the request arrived.
        arrival: Arrival,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/certify`: the reference certifier checks a route action and certifies it.
    Certify {
        /// `{"component": {...}}` or a one-component envelope.
        bytes: Vec<u8>,
        /// When the request arrived.
        arrival: Arrival,
        /// Answer.
        reply: Reply,
    },
    /// `DELETE /v1/certificates/{id}`.
    Revoke {
        /// Certificate id.
        id: String,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/responses/{id}`.
    GetResponse {
        /// Who asks.
        by: Party,
        /// Response id.
        id: String,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/responses`: every live response, for the console.
    Responses {
        /// Who asks.
        by: Party,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/obligations`.
    Obligations {
        /// Who asks.
        by: Party,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/status`.
    Status {
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/audit/head`: the audit key and the latest signed checkpoint.
    AuditHead {
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/audit/exported`: the operator kept a signed head off the machine.
    HeadExported {
        /// `{"log", "count", "head"}`.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/contract` (operator, provider) and `POST /v1/goals` (agent): one
    /// mission-contract operation, as the monitor's JSON request body.
    Contract {
        /// Who calls.
        caller: ContractRole,
        /// The operation JSON (`{"op": "propose_goal", ...}`).
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `GET /v1/contract`.
    ContractStatus {
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/goals/witness`: the witness claim for an edit at current versions.
    Witness {
        /// `{"parent": .., "goal": GoalSpec}`.
        bytes: Vec<u8>,
        /// Answer.
        reply: Reply,
    },
    /// `POST /v1/operator/{op}`.
    Operator {
        /// What.
        op: OperatorOp,
        /// Answer, once the vehicle answered (or at once for hold and release).
        reply: Reply,
    },
}

/// Who sends or asks: an agent principal sees and touches only the responses it sent, their
/// obligations and their events; anyone else (the operator, the stdio and MCP links) all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Party {
    /// No restriction.
    Anyone,
    /// This agent principal.
    Agent(std::sync::Arc<str>),
}

impl Party {
    /// Whether it may see a response sent by `owner` (`None`: sent without a principal).
    pub fn sees(&self, owner: Option<&std::sync::Arc<str>>) -> bool {
        match (self, owner) {
            (Party::Anyone, _) | (Party::Agent(_), None) => true,
            (Party::Agent(a), Some(o)) => a == o,
        }
    }

    /// The name its receipts give the sender of what it sends: an agent principal's (the
    /// operator and the stdio and MCP links send unnamed).
    pub fn sender(&self) -> Option<halo_core::Id> {
        match self {
            Party::Anyone => None,
            Party::Agent(a) => halo_core::Id::new(a).ok(),
        }
    }
}

impl Task {
    /// Handles one interface request.
    pub fn handle(&mut self, cmd: Cmd) {
        // Once receipts cannot be written, no new work is taken: it could not be recorded.
        let cmd = match (self.receipts_refusal(), cmd) {
            (
                Some(e),
                Cmd::Response { reply, .. }
                | Cmd::Candidate { reply, .. }
                | Cmd::Certificate { reply, .. }
                | Cmd::Certify { reply, .. }
                | Cmd::Contract { reply, .. },
            ) => {
                let _ = reply.send(Err(e));
                return;
            }
            (_, cmd) => cmd,
        };
        match cmd {
            Cmd::Response { by, bytes, reply } => {
                let answer = self
                    .claim(&by, &bytes)
                    .and_then(|claimed| self.response_by(&bytes, claimed, by.sender()));
                let _ = reply.send(answer);
            }
            Cmd::Candidate {
                by,
                obligation,
                bytes,
                reply,
            } => {
                let answer = if self.obligation_seen_by(&by, obligation) {
                    self.candidate(obligation, &bytes, by.sender())
                } else {
                    Err(ApiError::new(
                        404,
                        ReasonCode::NO_OBLIGATION,
                        format!("no obligation {obligation} of this agent principal's"),
                    ))
                };
                let _ = reply.send(answer);
            }
            Cmd::State {
                caller,
                by,
                source,
                bytes,
                arrival,
                reply,
            } => {
                let sender = by.and_then(|b| halo_core::Id::new(&b).ok());
                let answer = self.state_update((caller, sender), &source, &bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Certificate {
                bytes,
                arrival,
                reply,
            } => {
                let answer = self.certificate(&bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Certify {
                bytes,
                arrival,
                reply,
            } => {
                let answer = self.certify(&bytes, arrival);
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::Revoke { id, reply } => {
                let answer = self.revoke(&id);
                let _ = reply.send(answer);
            }
            Cmd::GetResponse { by, id, reply } => {
                let answer = Id::new(&id)
                    .ok()
                    .filter(|rid| by.sees(self.owners.get(rid.as_str())))
                    .and_then(|rid| self.gw.response_report(&rid))
                    .ok_or_else(|| {
                        ApiError::new(
                            404,
                            ReasonCode::RESPONSE_UNKNOWN,
                            format!("no live response `{id}`"),
                        )
                    })
                    .and_then(|r| serde_json::to_value(&r).map_err(internal));
                let _ = reply.send(answer);
            }
            Cmd::Responses { by, reply } => {
                let _ = reply.send(Ok(self.responses_view(&by)));
            }
            Cmd::Obligations { by, reply } => {
                let all: Vec<_> = self
                    .gw
                    .obligations()
                    .filter(|o| by.sees(self.owners.get(o.component.response().as_str())))
                    .map(|o| self.obligation_view(o))
                    .collect();
                let _ = reply.send(Ok(serde_json::Value::Array(all)));
            }
            Cmd::Status { reply } => {
                let _ = reply.send(Ok(self.status()));
            }
            Cmd::AuditHead { reply } => {
                let _ = reply.send(Ok(self.audit_head()));
            }
            Cmd::HeadExported { bytes, reply } => {
                let _ = reply.send(self.head_exported(&bytes));
            }
            Cmd::Operator { op, reply } => self.operator(op, reply),
            Cmd::Contract {
                caller,
                bytes,
                reply,
            } => {
                let answer = self.contract_op(caller, &bytes);
                self.contract_receipts();
                self.pump();
                let _ = reply.send(answer);
            }
            Cmd::ContractStatus { reply } => {
                let _ = reply.send(Ok(self.contract_status()));
            }
            Cmd::Witness { bytes, reply } => {
                let _ = reply.send(self.witness(&bytes));
            }
        }
    }

    /// An operator request: the supervisor decides, now or when the vehicle answers.
    pub(super) fn operator(&mut self, op: OperatorOp, reply: Reply) {
        let now = self.now();
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        self.replies.insert(ticket, reply);
        self.sup
            .handle_operator(now, ticket, op, &mut self.adapter, &mut self.monitor);
        // A takeoff's contract effect leaves the monitor's receipts.
        self.contract_receipts();
        self.supervised();
        self.pump();
    }
}

pub(super) fn refuse(cmd: Cmd) {
    let err = || {
        Err(ApiError::new(
            503,
            ReasonCode::SHUTTING_DOWN,
            "the gateway is shutting down",
        ))
    };
    let reply = match cmd {
        Cmd::Response { reply, .. }
        | Cmd::Candidate { reply, .. }
        | Cmd::State { reply, .. }
        | Cmd::Certificate { reply, .. }
        | Cmd::Certify { reply, .. }
        | Cmd::Revoke { reply, .. }
        | Cmd::GetResponse { reply, .. }
        | Cmd::Responses { reply, .. }
        | Cmd::Obligations { reply, .. }
        | Cmd::Status { reply }
        | Cmd::AuditHead { reply }
        | Cmd::HeadExported { reply, .. }
        | Cmd::Operator { reply, .. }
        | Cmd::Contract { reply, .. }
        | Cmd::ContractStatus { reply }
        | Cmd::Witness { reply, .. } => reply,
    };
    let _ = reply.send(err());
}
