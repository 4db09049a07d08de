//! What the faces share below them: the API's error form, the route table, the JSON schemas and
//! the OpenAPI document generated from them, and the digest computation. Nothing here depends on
//! a face or on the service task.

pub mod digest;
pub mod openapi;
pub mod routes;
pub mod schema;

use halo_core::envelope::Rejection;
use halo_core::reason::ReasonCode;
use serde_json::json;

use halo_supervisor::Refusal;

/// An error answer: HTTP status, stable code, message, offending ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub(crate) status: u16,
    /// Stable reason code.
    pub(crate) code: ReasonCode,
    /// A message for people.
    pub(crate) message: String,
    /// Offending ids, if any.
    pub(crate) ids: Vec<String>,
    /// Seconds to wait before trying again (`Retry-After`), for a refusal that passes.
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    /// An error without ids.
    pub fn new(status: u16, code: ReasonCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            ids: Vec::new(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to try again in `secs` seconds (`Retry-After`).
    pub fn retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }

    /// Seconds to wait before trying again, if the refusal passes.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    /// An error naming the offending ids.
    pub fn with_ids(
        status: u16,
        code: ReasonCode,
        message: impl Into<String>,
        ids: Vec<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            ids,
            retry_after: None,
        }
    }

    /// The offending ids.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The stable reason code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The JSON body: `{"error": {"code", "number", "message", "ids"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "code": self.code.name(),
            "number": self.code.number(),
            "message": self.message,
            "ids": self.ids,
        }})
    }

    /// A supervisor's refusal of an operator request, with its HTTP status.
    pub(crate) fn refusal(r: Refusal) -> ApiError {
        let status = match r.code {
            ReasonCode::INVALID_REQUEST => 422,
            ReasonCode::NO_VEHICLE_LINK | ReasonCode::SERVICE_BUSY => 503,
            _ => 409,
        };
        ApiError::new(status, r.code, r.message)
    }

    /// A core rejection, with its HTTP status.
    pub(crate) fn rejection(r: &Rejection) -> ApiError {
        let status = match r.code() {
            ReasonCode::RESPONSE_TOO_LARGE => 413,
            ReasonCode::DUPLICATE_RESPONSE => 409,
            ReasonCode::TOO_MANY_RESPONSES => 429,
            ReasonCode::NO_OBLIGATION | ReasonCode::RESPONSE_UNKNOWN => 404,
            _ => 422,
        };
        ApiError {
            status,
            code: r.code(),
            message: r.message().to_string(),
            ids: r.ids().to_vec(),
            retry_after: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.message)
    }
}
