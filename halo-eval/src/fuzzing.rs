//! Entry points for fuzzing: each takes arbitrary bytes from outside, must never panic, and
//! asserts (panics on) an invariant that would be a bug. The libFuzzer targets in `fuzz/` call
//! these, and `tests/fuzz_smoke.rs` runs them on stable over the seed corpora and deterministic
//! mutations of them, so CI exercises every target without a nightly toolchain.

use halo_core::engine::{Config, Gateway};
use halo_core::statefile::parse_state;
use halo_core::{Catalog, Nanos};

/// The example state every envelope is admitted against (healthy sources, map epoch 7).
const STATE: &str = include_str!("../../docs/examples/state.json");
/// The running example, admitted after a refused input to show the refusal changed nothing.
const RESPONSE: &str = include_str!("../../docs/examples/response.json");

/// What every input starts from, parsed once per process (a fuzzer runs millions of inputs).
struct Fixtures {
    catalog: Catalog,
    state: halo_core::statefile::StateFile,
    /// The running example's decisions on a fresh gateway.
    fresh: Option<serde_json::Value>,
    domain: halo_core::contract::Domain,
    checker: sitl::oracle::contract_audit::AuditDomain,
}

fn fixtures() -> Option<&'static Fixtures> {
    static F: std::sync::OnceLock<Option<Fixtures>> = std::sync::OnceLock::new();
    F.get_or_init(|| {
        let catalog = Catalog::parse(crate::io::EMBEDDED_CATALOG, "embedded uav-px4.toml").ok()?;
        let state = parse_state(&catalog, STATE.as_bytes()).ok()?;
        let domain = halo_core::contract::Domain::parse(
            crate::io::EMBEDDED_CONTRACT_DOMAIN,
            "embedded contract-uav.toml",
        )
        .ok()?;
        let checker = sitl::oracle::contract_audit::AuditDomain::from_toml(
            crate::io::EMBEDDED_CONTRACT_DOMAIN,
        )
        .ok()?;
        let mut f = Fixtures {
            catalog,
            state,
            fresh: None,
            domain,
            checker,
        };
        let (mut gw, now) = gateway_from(&f)?;
        f.fresh = decisions(&mut gw, now);
        Some(f)
    })
    .as_ref()
}

fn catalog() -> Option<Catalog> {
    fixtures().map(|f| f.catalog.clone())
}

/// A gateway on the embedded catalog with the example state applied, and its instant.
fn gateway_from(f: &Fixtures) -> Option<(Gateway, Nanos)> {
    let st = f.state.clone();
    let mut gw = Gateway::new(f.catalog.clone(), Config::default());
    for u in st.updates {
        gw.handle_source_update(st.now, u).ok()?;
    }
    for c in st.certificates {
        gw.handle_certificate(st.now, c).ok()?;
    }
    Some((gw, st.now))
}

fn gateway() -> Option<(Gateway, Nanos)> {
    gateway_from(fixtures()?)
}

fn decisions(gw: &mut Gateway, now: Nanos) -> Option<serde_json::Value> {
    let r = gw.handle_response(now, RESPONSE.as_bytes()).ok()?;
    let v = serde_json::to_value(&r).ok()?;
    while gw.poll_event().is_some() {}
    Some(v)
}

/// Envelope bytes: parse, validate, admit against the example state, run the timers; parse
/// them as a candidate too. Invariants: the two stage-one readers agree
/// ([`envelope_readers`]); when the envelope is refused, the running example is then admitted
/// with exactly the decisions a fresh gateway makes.
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
    let _ = halo_core::envelope::parse_candidate(data);
    envelope_readers(data);
    payload_readers(gw.catalog(), data);
    match gw.handle_response(now, data) {
        Ok(_) => {
            gw.handle_timeout(Nanos(now.0.saturating_add(60_000_000_000)));
            while gw.poll_event().is_some() || gw.poll_dispatch().is_some() {}
        }
        Err(_) => {
            let want = fixtures().and_then(|f| f.fresh.clone());
            let got = decisions(&mut gw, now);
            if want != got {
                panic!("a refused envelope changed later decisions: {want:?} vs {got:?}");
            }
        }
    }
    while gw.poll_receipt().is_some() {}
}

/// Every payload of an envelope that reads, typed as its catalog type's kind both ways: by
/// [`halo_core::Payload::parse`] (which reads plainly written payloads directly) and by
/// serde_json alone. Returns how many payloads were compared.
///
/// # Panics
/// When the two readings differ (the canonical bytes of what they read, or their refusals):
/// a component's digest would then depend on how its payload was spelled.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn payload_readers(catalog: &Catalog, data: &[u8]) -> usize {
    use halo_core::Payload;
    let Ok(raw) = halo_core::envelope::parse_envelope(data) else {
        return 0;
    };
    let mut compared = 0;
    for c in &raw.components {
        let Some(kind) = catalog
            .type_ix(&c.ty)
            .and_then(|t| catalog.type_spec(t))
            .map(|t| t.payload)
        else {
            continue;
        };
        let text = c.payload.get();
        let bytes = |p: Result<Payload, halo_core::payload::PayloadError>| {
            p.map(|p| postcard::to_allocvec(&p).ok())
        };
        let (direct, serde) = (
            bytes(Payload::parse(kind, text)),
            bytes(Payload::parse_by_serde_json(kind, text)),
        );
        if direct != serde {
            panic!("payload {text:?} as {kind:?}: {direct:?} directly, {serde:?} by serde_json");
        }
        compared += 1;
    }
    compared
}

/// What the envelope readers made of one input (see [`envelope_readers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The fast reader read it, and serde_json read the same value.
    Fast,
    /// The fast reader refused it at the component limit, and so did serde_json.
    RefusedAtLimit,
    /// The fast reader stepped aside; serde_json alone decides.
    SteppedAside,
}

/// Envelope bytes read as a response and as a candidate by both readers of stage one: the fast
/// reader (`core::envelope::fast`) and serde_json. Returns what the fast reader did with each.
///
/// # Panics
/// When the fast reader accepted an input serde_json refuses or reads differently, or refused
/// one at the component limit that serde_json does not refuse there, or the structural count
/// refused one serde_json reads: it would then decide a response the product's documented
/// parser would not.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn envelope_readers(data: &[u8]) -> (Reading, Reading) {
    use halo_core::envelope::{RawCandidate, RawResponse, fast, too_many_by_structure};
    // The structural count refuses nothing serde_json would take (whose bounded reader stops
    // at a 65th component itself).
    if too_many_by_structure(data).is_some()
        && (serde_json::from_slice::<RawResponse<'_>>(data).is_ok()
            || serde_json::from_slice::<RawCandidate<'_>>(data).is_ok())
    {
        panic!(
            "the structural count refuses what serde_json reads: {:?}",
            String::from_utf8_lossy(data)
        );
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return (Reading::SteppedAside, Reading::SteppedAside);
    };
    let response = agree(
        fast::response(text).map_read(|r| format!("{r:?}")),
        serde_json::from_str::<RawResponse<'_>>(text).map(|r| format!("{r:?}")),
    );
    let candidate = agree(
        fast::candidate(text).map_read(|r| format!("{r:?}")),
        serde_json::from_str::<RawCandidate<'_>>(text).map(|r| format!("{r:?}")),
    );
    let (Ok(r), Ok(c)) = (response, candidate) else {
        panic!("the fast envelope reader disagrees with serde_json on {text:?}");
    };
    (r, c)
}

/// Whether the fast reader's outcome agrees with serde_json's.
///
/// # Errors
/// The two outcomes, when the fast reader read something serde_json refuses or reads
/// otherwise, or refused at the component limit what serde_json does not refuse so.
pub fn agree(
    fast: halo_core::envelope::fast::Fast<String>,
    serde: Result<String, serde_json::Error>,
) -> Result<Reading, (String, Option<String>)> {
    use halo_core::envelope::fast::Fast;
    let at_limit = |e: &serde_json::Error| e.to_string().starts_with("too many components");
    match (fast, serde) {
        (Fast::StepAside, _) => Ok(Reading::SteppedAside),
        (Fast::Read(f), Ok(s)) if f == s => Ok(Reading::Fast),
        (Fast::TooManyComponents { .. }, Err(e)) if at_limit(&e) => Ok(Reading::RefusedAtLimit),
        (Fast::Read(f), s) => Err((f, s.ok())),
        (Fast::TooManyComponents { .. }, s) => Err(("refused at the limit".into(), s.ok())),
    }
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
    let _ = halo_core::statefile::ProviderUpdate::parse(data);
}

/// Gateway configuration text (`run --config`). Invariant: a configuration that parses never
/// leaves a listener other machines reach on plaintext unless it says `insecure_plaintext`,
/// and never says both that and `[listen.tls]`.
///
/// # Panics
/// When a parsed configuration breaks that.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn gateway_config(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = halo_gateway::service::Config::parse(s, "fuzz.toml") {
        let l = &c.listen;
        if !l.plaintext_exposed().is_empty() && !l.insecure_plaintext {
            panic!(
                "plaintext on {:?} taken without insecure_plaintext",
                l.plaintext_exposed()
            );
        }
        if l.tls.is_some() && l.insecure_plaintext {
            panic!("[listen.tls] and insecure_plaintext both taken");
        }
        let client_ca = l.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        for p in &c.principals {
            if p.token_file.is_some() == p.cert_common_name.is_some() {
                panic!("principal {} taken without exactly one credential", p.name);
            }
            if p.cert_common_name.is_some() && !client_ca {
                panic!("certificate principal {} taken without a client CA", p.name);
            }
        }
    }
}

/// A TLS certificate chain, its key and a client CA (`[listen.tls]`'s files), separated by
/// NULs: the bytes up to the first are the chain, then the key, then (after a second NUL) the
/// client CA. Anything is a typed refusal or a configuration, never a panic.
pub fn tls_pem(data: &[u8]) {
    use halo_gateway::service::infra::tls;
    let mut parts = data.splitn(3, |b| *b == 0);
    let chain = parts.next().unwrap_or_default();
    let key = parts.next().unwrap_or(chain);
    let ca = parts.next();
    let files = tls::TlsFiles {
        cert_file: "fuzz.crt".into(),
        key_file: "fuzz.key".into(),
        client_ca_file: ca.map(|_| "fuzz-ca.crt".into()),
    };
    let clients = ca.and_then(|ca| {
        tls::client_verifier(ca, std::path::Path::new("fuzz-ca.crt"), &Default::default()).ok()
    });
    let _ = tls::server_config_from_pem(chain, key, &files, clients);
}

/// What a client certificate and a revocation list give the gateway: the bytes as a DER
/// certificate (its common name and serial), and as the text of `auth.revoked_file`.
/// Invariant: every serial either yields is in the one form both compare in (upper-case hex,
/// no leading zero), so a serial written any way `openssl` prints it meets the certificate's.
///
/// # Panics
/// When a serial is not in that form.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn client_identity(data: &[u8]) {
    use halo_gateway::service::infra::{client_cert, principals};
    let normal = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
            && (s == "0" || !s.starts_with('0'))
    };
    if let Ok(c) = client_cert::read(data)
        && !normal(&c.serial)
    {
        panic!("a certificate's serial read as {:?}", c.serial);
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok((_, serials)) = principals::parse_revocations(text, "fuzz")
        && let Some(s) = serials.iter().find(|s| !normal(s))
    {
        panic!("a revocation list's serial read as {s:?}");
    }
}

/// Catalog text.
pub fn catalog_text(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Catalog::parse(s, "fuzz.toml");
    }
}

/// Contract domain text, through the monitor's parser and the independent checker's. Invariant:
/// the two readers accept exactly the same domains (a domain one of them refuses cannot be
/// replayed by the other).
///
/// # Panics
/// When one reader accepts a domain the other refuses.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn contract_domain(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let monitor = halo_core::contract::Domain::parse(s, "fuzz.toml");
        let checker = sitl::oracle::contract_audit::AuditDomain::from_toml(s);
        match (monitor, checker) {
            (Ok(_), Err(e)) => panic!("the monitor accepts, the checker refuses ({e}):\n{s}"),
            (Err(e), Ok(_)) => panic!("the checker accepts, the monitor refuses ({e}):\n{s}"),
            _ => {}
        }
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
            if !sitl::oracle::contract_audit::is_canonical_line(text) {
                panic!("canonical for the gateway, not for the checker: {text}");
            }
            rs.push(r);
        }
        if let Ok(t) = std::str::from_utf8(line) {
            lines.push(t);
        }
    }
    let _ = crate::audit::verify(&rs, None);
    if let Some(f) = fixtures() {
        let _ = sitl::oracle::contract_audit::audit_lines(&f.checker, &lines, None);
    }
}

/// A script of vehicle messages and bridge calls for the PX4 bridge's offboard state machine,
/// two bytes per step: PX4 heartbeats (mode and armed state from the argument), positions,
/// command acknowledgements, TIMESYNC, raw MAVLink bytes (decoded by the `mavlink` crate), time
/// passing (every timer served), targets enqueued with an interval, holds, mode commands and the
/// operator's permission. Invariants, kept by this function's own bookkeeping: the target's
/// setpoint is never sent at or after its `valid_until`, never after a hold was asked for or an
/// override reported, and never before it was enqueued.
///
/// # Panics
/// When the bridge sends the target's setpoint outside its interval or while holding.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn offboard(data: &[u8]) -> usize {
    use px4_bridge::mavlink::MavHeader;
    use px4_bridge::mavlink::dialects::common::{
        COMMAND_ACK_DATA, HEARTBEAT_DATA, LOCAL_POSITION_NED_DATA, MavAutopilot, MavCmd,
        MavMessage, MavModeFlag, MavResult, MavType, TIMESYNC_DATA,
    };
    use px4_bridge::offboard::{Config as BridgeConfig, Event, Offboard};
    use px4_bridge::{Command, Mono, Px4Mode, Setpoint};

    const TARGET: Setpoint = Setpoint {
        north_m: 1234.5,
        east_m: -321.25,
        down_m: -7.75,
        yaw_deg: 33.0,
    };
    let modes = [
        Px4Mode::OFFBOARD,
        Px4Mode::HOLD,
        Px4Mode::POSCTL,
        Px4Mode::LAND,
        Px4Mode::RTL,
        Px4Mode::TAKEOFF,
    ];
    let px4 = MavHeader {
        system_id: 1,
        component_id: 1,
        sequence: 0,
    };
    let mut now = Mono(1_000_000_000);
    let mut ob = Offboard::new(
        BridgeConfig {
            offboard_permitted_at_start: true,
            ..BridgeConfig::default()
        },
        now,
    );
    // Our bookkeeping: the enqueued target's interval end, if it may stream.
    let mut live: Option<Mono> = None;
    let mut sent = 0usize;
    let mut check = |ob: &mut Offboard, now: Mono, live: &mut Option<Mono>| {
        while let Some(m) = ob.poll_transmit() {
            if let MavMessage::SET_POSITION_TARGET_LOCAL_NED(sp) = &m {
                #[allow(clippy::float_cmp, reason = "the exact bits the bridge was given")]
                let ours = sp.x == TARGET.north_m && sp.y == TARGET.east_m && sp.z == TARGET.down_m;
                if ours && !live.is_some_and(|vu| now < vu) {
                    panic!(
                        "the target's setpoint was sent at {now:?} outside its interval ({live:?})"
                    );
                }
                sent += usize::from(ours);
            }
        }
        while let Some(e) = ob.poll_event() {
            if matches!(
                e,
                Event::Override { .. } | Event::TargetExpired { .. } | Event::Holding { .. }
            ) {
                *live = None;
            }
        }
    };
    let mut steps = data.chunks(2);
    let mut seq = 0u8;
    while let Some(step) = steps.next() {
        let (op, arg) = (
            step.first().copied().unwrap_or(0),
            step.get(1).copied().unwrap_or(0),
        );
        let mode = modes
            .get(usize::from(arg) % modes.len())
            .copied()
            .unwrap_or(Px4Mode::HOLD);
        match op % 10 {
            0 => {
                let mut base = MavModeFlag::MAV_MODE_FLAG_CUSTOM_MODE_ENABLED;
                if arg & 0x80 != 0 {
                    base |= MavModeFlag::MAV_MODE_FLAG_SAFETY_ARMED;
                }
                let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA {
                    custom_mode: mode.custom_mode(),
                    mavtype: MavType::MAV_TYPE_QUADROTOR,
                    autopilot: MavAutopilot::MAV_AUTOPILOT_PX4,
                    base_mode: base,
                    ..HEARTBEAT_DATA::DEFAULT
                });
                ob.handle_message(now, &px4, &hb);
            }
            1 => {
                let pos = MavMessage::LOCAL_POSITION_NED(LOCAL_POSITION_NED_DATA {
                    time_boot_ms: u32::try_from(now.0 / 1_000_000).unwrap_or(0),
                    x: f32::from(arg) - 100.0,
                    z: -f32::from(arg % 20),
                    ..LOCAL_POSITION_NED_DATA::DEFAULT
                });
                ob.handle_message(now, &px4, &pos);
            }
            2 => {
                // Time passes: every timer up to the end is served at its instant.
                let end = Mono(now.0 + u64::from(arg) * 5_000_000);
                loop {
                    let t = ob.poll_timeout();
                    if t > end {
                        break;
                    }
                    now = Mono(now.0.max(t.0));
                    ob.handle_timeout(now);
                    check(&mut ob, now, &mut live);
                }
                now = end;
                ob.handle_timeout(now);
            }
            3 => {
                let vu = Mono(now.0 + u64::from(arg) * 10_000_000);
                if ob.try_enqueue(now, TARGET, [arg; 32], vu).is_ok() {
                    live = Some(vu);
                }
            }
            4 => {
                ob.hold(now);
                live = None;
            }
            5 => {
                let _ = ob.command(now, Command::SetMode { mode });
            }
            6 => {
                let take: Vec<u8> = steps
                    .by_ref()
                    .take(usize::from(arg % 40))
                    .flatten()
                    .copied()
                    .collect();
                for (h, m) in sitl::sim::wire::decode(&take).0 {
                    ob.handle_message(now, &h, &m);
                }
            }
            7 => {
                let ack = MavMessage::COMMAND_ACK(COMMAND_ACK_DATA {
                    command: if arg & 1 == 0 {
                        MavCmd::MAV_CMD_DO_SET_MODE
                    } else {
                        MavCmd::MAV_CMD_COMPONENT_ARM_DISARM
                    },
                    result: if arg & 2 == 0 {
                        MavResult::MAV_RESULT_ACCEPTED
                    } else {
                        MavResult::MAV_RESULT_DENIED
                    },
                    ..COMMAND_ACK_DATA::DEFAULT
                });
                ob.handle_message(now, &px4, &ack);
            }
            8 => {
                let ts = MavMessage::TIMESYNC(TIMESYNC_DATA {
                    tc1: i64::from(arg) * 1_000_000 + 1,
                    ts1: i64::try_from(now.0).unwrap_or(0) - i64::from(arg) * 1000,
                    ..TIMESYNC_DATA::DEFAULT
                });
                ob.handle_message(now, &px4, &ts);
            }
            _ => {
                if arg & 1 == 0 {
                    ob.permit_offboard();
                }
                let raw = sitl::sim::wire::encode(
                    px4,
                    &MavMessage::HEARTBEAT(HEARTBEAT_DATA::DEFAULT),
                    &mut seq,
                );
                for (h, m) in sitl::sim::wire::decode(&raw).0 {
                    ob.handle_message(now, &h, &m);
                }
            }
        }
        check(&mut ob, now, &mut live);
    }
    sent
}

/// A contract workflow file (JSON), run through the monitor on the embedded domain with every
/// step attempted; its receipts then go to the independent checker. Invariant: the checker
/// accepts the log the monitor wrote (every decision it re-derives matches).
///
/// # Panics
/// When the monitor's receipts do not pass the independent audit.
#[allow(
    clippy::panic,
    reason = "a fuzz target reports a broken invariant by panicking"
)]
pub fn contract_workflow(data: &[u8]) {
    use halo_core::contract::workflow::{Runner, WorkflowFile};
    let Ok(wf) = serde_json::from_slice::<WorkflowFile>(data) else {
        return;
    };
    let Some(f) = fixtures() else {
        return;
    };
    let checker = &f.checker;
    let mut runner = Runner::new(halo_core::contract::Monitor::new(f.domain.clone()), "fuzz");
    if runner.register(&wf.contract, &wf.approved_by).allowed() {
        for step in &wf.steps {
            let _ = runner.step(step);
        }
    }
    let mut values = Vec::new();
    while let Some(r) = runner.monitor_mut().poll_receipt() {
        values.push(serde_json::to_value(&r).unwrap_or_default());
    }
    if let Err(e) = sitl::oracle::contract_audit::audit(checker, &values) {
        panic!("the independent checker rejects the monitor's own log: {e}");
    }
}

/// The service's request bodies: the same bytes as a provider update for every source of the
/// embedded catalog, as a certificate, and as a mission-contract operation, through the
/// readers `POST /v1/state/{source}`, `POST /v1/certificates` and `POST /v1/contract` use; what
/// they accept is then applied to a gateway and a monitor. Invariants: a refusal carries one
/// of the codes its reader documents and a message; nothing accepted makes the core panic.
///
/// # Panics
/// When a reader refuses with an undocumented code or an empty message.
pub fn service_bodies(data: &[u8]) {
    use crate::service::task::{read_certificate, read_contract_op, read_update};
    use halo_core::reason::ReasonCode as R;
    let Some(f) = fixtures() else { return };
    let check = |e: &crate::service::api::ApiError, allowed: &[R]| {
        assert!(
            allowed.contains(&e.code()) && !e.message().is_empty(),
            "an undocumented refusal: {e}"
        );
    };
    let Some((mut gw, now)) = gateway_from(f) else {
        return;
    };
    for s in f.catalog.sources() {
        match read_update(&f.catalog, s.name.as_str(), data, |_| now) {
            Ok(u) => {
                let _ = gw.handle_source_update(now, u);
            }
            Err(e) => check(
                &e,
                &[
                    R::DUPLICATE_KEY,
                    R::INVALID_UPDATE,
                    R::UNKNOWN_SOURCE,
                    R::VALUE_KIND_MISMATCH,
                ],
            ),
        }
    }
    match read_certificate(data) {
        Ok((body, covers)) => {
            let ms = body.valid_for_ms.or(body.valid_until_unix_ms).unwrap_or(0);
            let cert = halo_core::state::Certificate {
                id: body.id,
                covers,
                valid_until: now.saturating_add(Nanos::from_ms(ms)),
                issuer: body.issuer,
            };
            let _ = gw.handle_certificate(now, cert);
        }
        Err(e) => check(&e, &[R::DUPLICATE_KEY, R::INVALID_UPDATE]),
    }
    gw.handle_timeout(now.saturating_add(Nanos::from_ms(60_000)));
    match read_contract_op(data) {
        Ok(op) => {
            let mut m = halo_core::contract::Monitor::new(f.domain.clone());
            for caller in [
                halo_core::contract::Role::Operator,
                halo_core::contract::Role::Provider,
                halo_core::contract::Role::Agent,
            ] {
                let _ = m.handle(halo_core::contract::Request {
                    caller,
                    op: op.clone(),
                });
            }
        }
        Err(e) => check(&e, &[R::SCHEMA_INVALID, R::FORBIDDEN_ROLE]),
    }
}

/// A `Last-Event-ID` header against a hub of boot 3 holding events 1 to 10. Invariants: an id
/// the hub takes is of this or an earlier start and not ahead of its newest event, and a
/// reader from it starts right after it; the hub publishes and serves as before whatever was
/// sent.
///
/// # Panics
/// When the hub accepts an impossible id, a reader starts elsewhere, or the hub stops working.
pub fn last_event_id(data: &[u8]) {
    use crate::service::infra::hub::{Hub, Item, Resume};
    let hub = Hub::new(3);
    for i in 0..10 {
        hub.publish("x", format!("{i}"));
    }
    let text = String::from_utf8_lossy(data);
    match hub.resume(Some(&text)) {
        Ok(Resume::After(n)) => {
            assert!((1..=10).contains(&n), "took id {n} the hub never issued");
            let mut r = hub.reader(Resume::After(n));
            let first = r.try_next();
            assert!(
                match &first {
                    Some(Item::Event(e)) => e.id() == n + 1,
                    None => n == 10,
                    Some(_) => false,
                },
                "a reader after {n} began with {first:?}"
            );
        }
        Ok(Resume::EarlierStart(b)) => assert!(b < 3, "a reset for boot {b}"),
        Ok(Resume::Start) | Err(_) => {}
    }
    assert_eq!(
        hub.publish("y", "11".into()),
        11,
        "the hub stopped counting"
    );
    let mut r = hub.reader(Resume::After(10));
    assert!(
        matches!(r.try_next(), Some(Item::Event(e)) if e.id() == 11),
        "the hub stopped serving"
    );
}
