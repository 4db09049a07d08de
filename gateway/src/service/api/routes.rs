//! The one table of routes: each route's method and path, the roles it admits, its body cap and
//! what it does. The HTTP face authorizes against it ([`crate::service::faces::http`]), the
//! OpenAPI document is generated from it ([`super::openapi`]) and docs/run.md's role table is
//! [`role_table`]'s output (a test holds them equal). It knows nothing of axum.

use halo_core::reason::ReasonCode;

use halo_core::envelope::MAX_RESPONSE_BYTES as RESPONSE_LIMIT;

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
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Provider => "provider",
            Role::Operator => "operator",
        }
    }
}

/// Who may use a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// These roles.
    Roles(&'static [Role]),
    /// The owner of the source the path names (catalog `owner`): provider or operator; never a
    /// vehicle source.
    SourceOwner,
    /// Anyone; any role's credential with `auth.require_for_read`.
    Read,
}

/// How large a route's body may be, and the code for one that is larger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyCap {
    /// Bytes.
    pub bytes: usize,
    /// The reason code of a 413.
    pub too_large: ReasonCode,
}

const SMALL: Option<BodyCap> = Some(BodyCap {
    bytes: SMALL_LIMIT,
    too_large: ReasonCode::BODY_TOO_LARGE,
});

/// One route: what the role table says of it.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// Method.
    pub method: &'static str,
    /// Path, as the router matches it.
    pub path: &'static str,
    /// Who may use it.
    pub access: Access,
    /// What it does, in "the agent credential may not …".
    pub what: &'static str,
    /// Its label in `halo_http_requests_total` (none: not counted).
    pub endpoint: Option<&'static str>,
    /// Its body cap (none: it takes no body).
    pub body: Option<BodyCap>,
    /// A note for the role table (a provider's limited use of a route).
    pub note: &'static str,
}

use Role::{Agent, Operator, Provider};

/// Every route the listeners serve, with the roles each admits: the one place authorization is
/// decided ([`Caller`]), rendered as docs/run.md's role table ([`role_table`]).
pub const ROUTES: &[Route] = &[
    Route {
        method: "POST",
        path: "/v1/responses",
        access: Access::Roles(&[Agent]),
        what: "submit responses",
        endpoint: Some("responses"),
        body: Some(BodyCap {
            bytes: RESPONSE_LIMIT,
            too_large: ReasonCode::RESPONSE_TOO_LARGE,
        }),
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/responses",
        access: Access::Roles(&[Agent, Operator]),
        what: "read responses",
        endpoint: Some("response"),
        body: None,
        note: "every live one, with the certificate each component names and route targets",
    },
    Route {
        method: "GET",
        path: "/v1/responses/{id}",
        access: Access::Roles(&[Agent, Operator]),
        what: "read responses",
        endpoint: Some("response"),
        body: None,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/obligations/{id}/candidates",
        access: Access::Roles(&[Agent]),
        what: "submit candidates",
        endpoint: Some("candidates"),
        body: Some(BodyCap {
            bytes: RESPONSE_LIMIT,
            too_large: ReasonCode::BODY_TOO_LARGE,
        }),
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/obligations",
        access: Access::Roles(&[Agent, Operator]),
        what: "read obligations",
        endpoint: Some("obligations"),
        body: None,
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/events",
        access: Access::Roles(&[Agent, Operator]),
        what: "read the event stream",
        endpoint: None,
        body: None,
        note: "SSE, `Last-Event-ID`",
    },
    Route {
        method: "POST",
        path: "/v1/state/{source}",
        access: Access::SourceOwner,
        what: "write source state",
        endpoint: Some("state"),
        body: SMALL,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/certificates",
        access: Access::Roles(&[Provider, Operator]),
        what: "issue certificates",
        endpoint: Some("certificates"),
        body: SMALL,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/certify",
        access: Access::Roles(&[Agent, Provider, Operator]),
        what: "ask the reference certifier",
        endpoint: Some("certify"),
        body: Some(BodyCap {
            bytes: RESPONSE_LIMIT,
            too_large: ReasonCode::RESPONSE_TOO_LARGE,
        }),
        note: "when `[certifier] enabled`",
    },
    Route {
        method: "POST",
        path: "/v1/digest",
        access: Access::Roles(&[Provider, Operator]),
        what: "compute digests",
        endpoint: Some("digest"),
        body: Some(BodyCap {
            bytes: RESPONSE_LIMIT,
            too_large: ReasonCode::RESPONSE_TOO_LARGE,
        }),
        note: "",
    },
    Route {
        method: "DELETE",
        path: "/v1/certificates/{id}",
        access: Access::Roles(&[Provider, Operator]),
        what: "revoke certificates",
        endpoint: Some("revoke"),
        body: None,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/operator/{action}",
        access: Access::Roles(&[Operator]),
        what: "command the vehicle",
        endpoint: Some("operator"),
        body: SMALL,
        note: "`arm`, `disarm`, `takeoff`, `land`, `rtl`, `hold`, `release`",
    },
    Route {
        method: "POST",
        path: "/v1/contract",
        access: Access::Roles(&[Operator, Provider]),
        what: "change the mission contract",
        endpoint: Some("contract"),
        body: SMALL,
        note: "the provider: `change_version` with `observe`",
    },
    Route {
        method: "GET",
        path: "/v1/contract",
        access: Access::Roles(&[Agent, Operator]),
        what: "read the mission contract",
        endpoint: Some("contract"),
        body: None,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/goals",
        access: Access::Roles(&[Agent]),
        what: "propose goals",
        endpoint: Some("goals"),
        body: SMALL,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/goals/witness",
        access: Access::Roles(&[Agent]),
        what: "ask for a witness",
        endpoint: Some("witness"),
        body: SMALL,
        note: "",
    },
    Route {
        method: "POST",
        path: "/v1/audit/exported",
        access: Access::Roles(&[Operator]),
        what: "confirm a kept signed head",
        endpoint: Some("audit_exported"),
        body: SMALL,
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/status",
        access: Access::Read,
        what: "read status",
        endpoint: Some("status"),
        body: None,
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/audit/head",
        access: Access::Read,
        what: "read the audit head",
        endpoint: Some("audit_head"),
        body: None,
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/schema",
        access: Access::Read,
        what: "read the schema",
        endpoint: None,
        body: None,
        note: "",
    },
    Route {
        method: "GET",
        path: "/v1/openapi.json",
        access: Access::Read,
        what: "read the OpenAPI document",
        endpoint: None,
        body: None,
        note: "",
    },
    Route {
        method: "GET",
        path: "/metrics",
        access: Access::Read,
        what: "read metrics",
        endpoint: None,
        body: None,
        note: "",
    },
];

/// docs/run.md's role table, from [`ROUTES`].
pub fn role_table() -> String {
    let mut out =
        String::from("| route | agent | provider | operator |\n| --- | --- | --- | --- |\n");
    for r in ROUTES {
        let cell = |role: Role| -> String {
            match r.access {
                Access::Roles(rs) if rs.contains(&role) => "yes".into(),
                Access::Roles(_) => String::new(),
                Access::SourceOwner if role == Agent => String::new(),
                Access::SourceOwner => "the sources it owns".into(),
                Access::Read => "anyone".into(),
            }
        };
        let note = if r.note.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.note)
        };
        let read = if r.access == Access::Read {
            " (open; any credential with `auth.require_for_read`)"
        } else {
            ""
        };
        out.push_str(&format!(
            "| `{} {}`{note}{read} | {} | {} | {} |\n",
            r.method,
            r.path,
            cell(Agent),
            cell(Provider),
            cell(Operator)
        ));
    }
    out
}
