//! What every room stands on: the one clock ([`clock`]), the event hub the streams read
//! ([`hub`]), the TCP listener with its connection limits ([`listener`]), its TLS ([`tls`])
//! and client certificates ([`client_cert`]), who is calling ([`principals`]) and the limits
//! per principal and peer ([`limits`]), the Prometheus metrics ([`metrics`]) and real-time
//! scheduling ([`realtime`]). Nothing here knows the protocol or a face.

pub mod client_cert;
pub mod clock;
pub mod hub;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod principals;
pub mod realtime;
pub mod tls;
