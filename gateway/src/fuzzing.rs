//! Entry points for fuzzing: each takes arbitrary bytes from outside, must never panic, and
//! asserts (panics on) an invariant that would be a bug. The libFuzzer targets in `fuzz/` call
//! these, and `tests/fuzz_smoke.rs` runs them on stable over the seed corpora and deterministic
//! mutations of them, so CI exercises every target without a nightly toolchain.

use crate::core::engine::{Config, Gateway};
use crate::core::statefile::parse_state;
use crate::core::{Catalog, Nanos};

/// The example state every envelope is admitted against (healthy sources, map epoch 7).
const STATE: &str = include_str!("../../docs/examples/state.json");
/// The running example, admitted after a refused input to show the refusal changed nothing.
const RESPONSE: &str = include_str!("../../docs/examples/response.json");

fn catalog() -> Option<Catalog> {
    Catalog::parse(crate::service::EMBEDDED_CATALOG, "embedded uav-px4.toml").ok()
}

/// A gateway on the embedded catalog with the example state applied, and its instant.
fn gateway() -> Option<(Gateway, Nanos)> {
    let cat = catalog()?;
    let st = parse_state(&cat, STATE.as_bytes()).ok()?;
    let mut gw = Gateway::new(cat, Config::default());
    for u in st.updates {
        gw.handle_source_update(st.now, u).ok()?;
    }
    for c in st.certificates {
        gw.handle_certificate(st.now, c).ok()?;
    }
    Some((gw, st.now))
}

fn decisions(gw: &mut Gateway, now: Nanos) -> Option<serde_json::Value> {
    let r = gw.handle_response(now, RESPONSE.as_bytes()).ok()?;
    let v = serde_json::to_value(&r).ok()?;
    while gw.poll_event().is_some() {}
    Some(v)
}

/// Envelope bytes: parse, validate, admit against the example state, run the timers; parse
/// them as a candidate too. Invariant: when the envelope is refused, the running example is
/// then admitted with exactly the decisions a fresh gateway makes.
///
/// # Panics
/// When a refused input changed what the gateway decides next.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn envelope(data: &[u8]) {
    let Some((mut gw, now)) = gateway() else {
        return;
    };
    let _ = crate::core::envelope::parse_candidate(data);
    match gw.handle_response(now, data) {
        Ok(_) => {
            gw.handle_timeout(Nanos(now.0.saturating_add(60_000_000_000)));
            while gw.poll_event().is_some() || gw.poll_dispatch().is_some() {}
        }
        Err(_) => {
            let Some((mut fresh, _)) = gateway() else {
                return;
            };
            let want = decisions(&mut fresh, now);
            let got = decisions(&mut gw, now);
            if want != got {
                panic!("a refused envelope changed later decisions: {want:?} vs {got:?}");
            }
        }
    }
    while gw.poll_receipt().is_some() {}
}

/// State-file bytes: parse against the embedded catalog and apply what parses.
pub fn state_file(data: &[u8]) {
    let Some(cat) = catalog() else { return };
    if let Ok(st) = parse_state(&cat, data) {
        let mut gw = Gateway::new(cat, Config::default());
        for u in st.updates {
            let _ = gw.handle_source_update(st.now, u);
        }
        for c in st.certificates {
            let _ = gw.handle_certificate(st.now, c);
        }
    }
    let _ = crate::core::statefile::ProviderUpdate::parse(data);
}

/// Catalog text.
pub fn catalog_text(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Catalog::parse(s, "fuzz.toml");
    }
}

/// Contract domain text, through the monitor's parser and the independent checker's.
pub fn contract_domain(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::contract::Domain::parse(s, "fuzz.toml");
        let _ = sitl::contract_audit::AuditDomain::from_toml(s);
    }
}

/// One receipt line (or several, newline-separated), through both verifiers. Invariant: a
/// line the gateway's verifier reads as canonical is canonical for the independent checker.
///
/// # Panics
/// When the two verifiers disagree on a line's canonical form.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn receipt_lines(data: &[u8]) {
    let mut rs = Vec::new();
    let mut lines = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(r) = crate::audit::parse_line(line) {
            let text = std::str::from_utf8(line).unwrap_or_default();
            if !sitl::contract_audit::is_canonical_line(text) {
                panic!("canonical for the gateway, not for the checker: {text}");
            }
            rs.push(r);
        }
        if let Ok(t) = std::str::from_utf8(line) {
            lines.push(t);
        }
    }
    let _ = crate::audit::verify(&rs, None);
    if let Some(d) = audit_domain() {
        let _ = sitl::contract_audit::audit_lines(&d, &lines, None);
    }
}

fn audit_domain() -> Option<sitl::contract_audit::AuditDomain> {
    sitl::contract_audit::AuditDomain::from_toml(crate::service::EMBEDDED_CONTRACT_DOMAIN).ok()
}
