//! `GET /metrics`: Prometheus text exposition through `prometheus-client`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A reason-code label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// Stable reason code, or `none`.
    pub(crate) code: String,
}

/// A gate-outcome label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `dispatched`, `denied`, `refused`, `enqueue_failed`.
    pub(crate) outcome: String,
}

/// A source label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// Catalog source name.
    pub(crate) source: String,
}

/// A principal label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrincipalLabel {
    /// The principal's name.
    pub(crate) principal: String,
}

/// An interface-request label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// Endpoint kind.
    pub(crate) endpoint: String,
    /// HTTP status.
    pub(crate) status: u16,
}

fn latency_histogram() -> Histogram {
    // 1 µs .. ~1 s.
    Histogram::new(exponential_buckets(1e-6, 2.0, 21))
}

/// Every metric the service exports.
pub struct Metrics {
    registry: Registry,
    /// Component decisions by reason code (`none` when retained or dispatched).
    pub(crate) decisions: Family<CodeLabel, Counter>,
    /// Gate outcomes.
    pub(crate) gate_outcomes: Family<OutcomeLabel, Counter>,
    /// Time spent in one final-gate call, seconds.
    pub(crate) gate_seconds: Histogram,
    /// Admission of one response (parse, validate, admit, gate), seconds.
    pub(crate) admission_seconds: Histogram,
    /// From a streaming action's loss of support to the bridge's first hold setpoint, seconds.
    pub(crate) deny_hold_seconds: Histogram,
    /// Depth of the core's input queue.
    pub(crate) input_queue_depth: Gauge,
    /// Age of information per source, seconds (NaN never shown: absent until first update).
    pub(crate) aoi_seconds: Family<SourceLabel, Gauge<f64, AtomicU64>>,
    /// 1 when the autopilot link is up.
    pub(crate) link_up: Gauge,
    /// Setpoints streamed to the vehicle.
    pub(crate) setpoints_streamed: Gauge,
    /// Receipts written.
    pub(crate) receipts_written: Counter,
    /// Receipt writes, truncations and syncs that failed.
    pub(crate) receipt_write_errors: Counter,
    /// Receipts that could not be written at all (the log ends before them).
    pub(crate) receipts_lost: Counter,
    /// 1 while the receipt log refuses (a failed write or the file cap): nothing dispatches.
    pub(crate) receipts_refusing: Gauge,
    /// Connections refused at a listener's cap, by listener.
    pub(crate) connections_refused: Family<CodeLabel, Counter>,
    /// Open HTTP connections.
    pub(crate) connections_open: Gauge,
    /// TLS handshakes that failed or timed out.
    pub(crate) tls_handshake_failures: Counter,
    /// Reloads of the TLS files (SIGHUP), by result (`ok`, or the refusal's code).
    pub(crate) tls_reloads: Family<CodeLabel, Counter>,
    /// Reloads of the credentials and the revocation list (SIGHUP), `ok` or `refused`.
    pub(crate) credential_reloads: Family<CodeLabel, Counter>,
    /// Open event streams.
    pub(crate) event_streams: Gauge,
    /// Event streams refused at a cap, by principal.
    pub(crate) streams_refused: Family<PrincipalLabel, Counter>,
    /// Open MCP sessions on `/mcp` (streamable HTTP).
    pub(crate) mcp_sessions: Gauge,
    /// MCP `initialize` requests refused at the total or the principal's cap, by principal.
    pub(crate) mcp_sessions_refused: Family<PrincipalLabel, Counter>,
    /// MCP sessions closed because a credential reload no longer holds their principal.
    pub(crate) mcp_sessions_revoked: Counter,
    /// Requests refused past their principal's rate, by principal.
    pub(crate) rate_limited: Family<PrincipalLabel, Counter>,
    /// Failed authentications (no credential, a wrong one, a revoked one).
    pub(crate) auth_failures: Counter,
    /// Requests refused while their address was backed off after failed authentications.
    pub(crate) auth_backoff_refused: Counter,
    /// MAVLink datagrams from an address other than the vehicle's, ignored.
    pub(crate) foreign_datagrams: Gauge,
    /// MAVLink frames a signing key refused (unsigned, another key's, replayed), UDP links.
    pub(crate) unsigned_refused: Gauge,
    /// The ground-station relay: frames passed to the vehicle, to the ground station, and the
    /// ground station's frames that claimed the gateway's id, dropped.
    pub(crate) gcs_to_vehicle: Gauge,
    pub(crate) gcs_to_gcs: Gauge,
    pub(crate) gcs_forged: Gauge,
    /// Provider updates refused, by reason.
    pub(crate) updates_refused: Family<CodeLabel, Counter>,
    /// Interface requests by endpoint and status.
    pub(crate) requests: Family<RequestLabel, Counter>,
    /// Events published to the event stream.
    pub(crate) events: Counter,
    /// Bridge events dropped because the gateway did not drain them.
    pub(crate) bridge_events_dropped: Gauge,
    /// Operator overrides: mode changes the gateway did not command while armed.
    pub(crate) overrides: Counter,
    /// Autopilot heartbeat gaps over 1.2 s.
    pub(crate) heartbeat_gaps: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("halo");
        let m = Metrics {
            registry: Registry::default(),
            decisions: Family::default(),
            gate_outcomes: Family::default(),
            gate_seconds: latency_histogram(),
            admission_seconds: latency_histogram(),
            deny_hold_seconds: latency_histogram(),
            input_queue_depth: Gauge::default(),
            aoi_seconds: Family::default(),
            link_up: Gauge::default(),
            setpoints_streamed: Gauge::default(),
            receipts_written: Counter::default(),
            receipt_write_errors: Counter::default(),
            receipts_lost: Counter::default(),
            receipts_refusing: Gauge::default(),
            connections_refused: Family::default(),
            connections_open: Gauge::default(),
            tls_handshake_failures: Counter::default(),
            tls_reloads: Family::default(),
            credential_reloads: Family::default(),
            event_streams: Gauge::default(),
            streams_refused: Family::default(),
            mcp_sessions: Gauge::default(),
            mcp_sessions_refused: Family::default(),
            mcp_sessions_revoked: Counter::default(),
            rate_limited: Family::default(),
            auth_failures: Counter::default(),
            auth_backoff_refused: Counter::default(),
            foreign_datagrams: Gauge::default(),
            unsigned_refused: Gauge::default(),
            gcs_to_vehicle: Gauge::default(),
            gcs_to_gcs: Gauge::default(),
            gcs_forged: Gauge::default(),
            updates_refused: Family::default(),
            requests: Family::default(),
            events: Counter::default(),
            bridge_events_dropped: Gauge::default(),
            overrides: Counter::default(),
            heartbeat_gaps: Counter::default(),
        };
        m.register_decisions(&mut registry);
        m.register_links(&mut registry);
        Metrics { registry, ..m }
    }

    /// The core's and the receipt log's metrics: decisions, gate outcomes, latencies, ages.
    fn register_decisions(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "decisions",
            "Component decisions by reason code",
            m.decisions.clone(),
        );
        registry.register(
            "gate_outcomes",
            "Final-gate outcomes",
            m.gate_outcomes.clone(),
        );
        registry.register(
            "gate_seconds",
            "Time spent in one final-gate call",
            m.gate_seconds.clone(),
        );
        registry.register(
            "admission_seconds",
            "Admission of one response, from bytes to dispatch",
            m.admission_seconds.clone(),
        );
        registry.register(
            "deny_hold_seconds",
            "From a streaming action's loss of support to the first hold setpoint",
            m.deny_hold_seconds.clone(),
        );
        registry.register(
            "input_queue_depth",
            "Requests waiting for the core",
            m.input_queue_depth.clone(),
        );
        registry.register(
            "aoi_seconds",
            "Age of information per source",
            m.aoi_seconds.clone(),
        );
        registry.register(
            "link_up",
            "1 when the autopilot link is up",
            m.link_up.clone(),
        );
        registry.register(
            "setpoints_streamed",
            "Setpoints streamed to the vehicle since start",
            m.setpoints_streamed.clone(),
        );
        registry.register(
            "receipts_written",
            "Receipts written to the log",
            m.receipts_written.clone(),
        );
        registry.register(
            "receipt_write_errors",
            "Receipt writes, truncations and syncs that failed (the gateway then holds and refuses)",
            m.receipt_write_errors.clone(),
        );
        registry.register(
            "receipts_lost",
            "Receipts that could not be written at all (the log ends before them)",
            m.receipts_lost.clone(),
        );
        registry.register(
            "receipts_refusing",
            "1 while the receipt log refuses (a failed write or receipts.max_files): nothing dispatches",
            m.receipts_refusing.clone(),
        );
    }

    /// The connections', the links' and the interfaces' metrics.
    fn register_links(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "connections_refused",
            "HTTP connections refused at a listener's cap, by cap (code)",
            m.connections_refused.clone(),
        );
        registry.register(
            "connections_open",
            "Open HTTP connections",
            m.connections_open.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed or did not finish within listen.header_timeout_ms",
            m.tls_handshake_failures.clone(),
        );
        registry.register(
            "tls_reloads",
            "Reloads of the TLS certificate and key files, by result (ok, or the refusal's code)",
            m.tls_reloads.clone(),
        );
        registry.register(
            "credential_reloads",
            "Reloads of the principals' credentials and the revocation list, ok or refused",
            m.credential_reloads.clone(),
        );
        registry.register(
            "event_streams",
            "Open event streams (GET /v1/events)",
            m.event_streams.clone(),
        );
        registry.register(
            "event_streams_refused",
            "Event streams refused at the role's or the principal's cap, by principal",
            m.streams_refused.clone(),
        );
        registry.register(
            "mcp_sessions",
            "Open MCP sessions on /mcp",
            m.mcp_sessions.clone(),
        );
        registry.register(
            "mcp_sessions_refused",
            "MCP initialize requests refused at the total or the principal's cap, by principal",
            m.mcp_sessions_refused.clone(),
        );
        registry.register(
            "mcp_sessions_revoked",
            "MCP sessions closed because a credential reload no longer holds their principal",
            m.mcp_sessions_revoked.clone(),
        );
        registry.register(
            "rate_limited",
            "Requests refused 429 RATE_LIMITED past their principal's rate, by principal",
            m.rate_limited.clone(),
        );
        registry.register(
            "auth_failures",
            "Failed authentications: no credential, a wrong one or a revoked one",
            m.auth_failures.clone(),
        );
        registry.register(
            "auth_backoff_refused",
            "Requests refused 429 AUTH_BACKOFF while their address was backed off",
            m.auth_backoff_refused.clone(),
        );
        registry.register(
            "foreign_datagrams",
            "MAVLink datagrams from an address other than the vehicle's, ignored",
            m.foreign_datagrams.clone(),
        );
        registry.register(
            "mavlink_unsigned_refused",
            "MAVLink frames refused by the signing key (unsigned, another key's, replayed; UDP links)",
            m.unsigned_refused.clone(),
        );
        registry.register(
            "gcs_relayed_to_vehicle",
            "Ground-station relay: frames passed from the ground station to the vehicle",
            m.gcs_to_vehicle.clone(),
        );
        registry.register(
            "gcs_relayed_to_gcs",
            "Ground-station relay: datagrams or frames passed from the vehicle to the ground station",
            m.gcs_to_gcs.clone(),
        );
        registry.register(
            "gcs_forged_dropped",
            "Ground-station relay: frames claiming the gateway's own id, dropped",
            m.gcs_forged.clone(),
        );
        registry.register(
            "updates_refused",
            "Provider updates refused, by reason code",
            m.updates_refused.clone(),
        );
        registry.register(
            "requests",
            "Interface requests by endpoint and status",
            m.requests.clone(),
        );
        registry.register(
            "events",
            "Events published on the event stream",
            m.events.clone(),
        );
        registry.register(
            "bridge_events_dropped",
            "Bridge events dropped because the gateway did not drain them",
            m.bridge_events_dropped.clone(),
        );
        registry.register(
            "operator_overrides",
            "Mode changes the gateway did not command while armed (the pilot took the vehicle)",
            m.overrides.clone(),
        );
        registry.register(
            "heartbeat_gaps",
            "Gaps over 1.2 s between autopilot heartbeats (PX4 sends 1 Hz)",
            m.heartbeat_gaps.clone(),
        );
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts one component decision.
    pub fn decision(&self, code: Option<&str>) {
        self.decisions
            .get_or_create(&CodeLabel {
                code: code.unwrap_or("none").to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.decision(Some("STALE_SOURCE"));
        m.gate_seconds.observe(2e-6);
        m.aoi_seconds
            .get_or_create(&SourceLabel {
                source: "traffic".into(),
            })
            .set(0.25);
        let t = m.render();
        assert!(
            t.contains("halo_decisions_total{code=\"STALE_SOURCE\"} 1"),
            "{t}"
        );
        assert!(t.contains("halo_gate_seconds_bucket"), "{t}");
        assert!(
            t.contains("halo_aoi_seconds{source=\"traffic\"} 0.25"),
            "{t}"
        );
        m.receipt_write_errors.inc();
        let t = m.render();
        assert!(t.contains("halo_receipt_write_errors_total 1"), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
    }
}
