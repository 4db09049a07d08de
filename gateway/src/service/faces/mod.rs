//! The faces: how people and programs reach the service. Each turns its protocol into the service
//! task's commands ([`crate::service::task::Cmd`]) and its answers back, over the route table,
//! schemas and errors of [`crate::service::api`]; none of them decides anything.
//!
//! - [`http`]: the HTTP/SSE interface (axum) for the agent, providers and the operator;
//! - [`mcp`]: the MCP server (streamable HTTP on `/mcp`, or standard input and output);
//! - [`stdio`]: the line-delimited JSON link on standard input and output;
//! - [`console`]: the operator's browser console, served by the HTTP face.
//!
//! The pilot's face, STATUSTEXT on the vehicle link, is worded by the task
//! ([`crate::service::task::pilot_text`]), which alone knows when something is worth telling.

pub mod console;
pub mod http;
pub mod mcp;
pub mod stdio;
