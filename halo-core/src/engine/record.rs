//! The canonical text of the gateway's receipt records.
//!
//! An admission's receipt records every component's decision. Since receipt format 3 it does
//! so compactly (`Decisions`): the component ids in envelope order, one digest over their
//! component digests, and each distinct decision once with the positions of the components it
//! was made for. A 32-component response's receipt shrank from about 9 KB to 1–2.5 KB, which is
//! what a companion's SD card writes per bundle. `Record::Admitted` and `Record::Readmitted`
//! write themselves here, in the generic writer's key order and spelling, byte for byte (the
//! tests below hold the two to the same bytes); every other record goes through the generic
//! writer.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{ComponentReport, Record};
use crate::binding::Seq;
use crate::canonical::{self, Error, write_str, write_u64};
use crate::digest::{Digest, Message, tag};
use crate::ids::Id;
use crate::names::ComponentRef;
use crate::obligation::ObligationId;
use crate::phase::Phase;
use crate::reason::ReasonCode;
use crate::receipt::CanonicalRecord;

/// The component decisions of an admission or readmission, as its receipt records them
/// (receipt format 3):
///
/// ```json
/// {"decisions":[{"action":false,"at":[0,1],"generation":1,"locally_supported":true,
///                "phase":"emitted","retained":true,"type":"notice"}, …],
///  "digest":"…","ids":["e1","e2",…]}
/// ```
///
/// `ids` lists the components in envelope order; `digest` is SHA-256 over
/// `halo/components/v1\0` followed by their component digests (32 bytes each) in that order, so
/// the response's text still pins every component; each entry of `decisions` is one decision
/// and `at` the positions in `ids` it was made for. `binding`, `obligation`, `reason` and `seq`
/// appear only when the decision has one. Format 2 wrote every component's report in full;
/// [`crate::receipt::recorded_components`] reads both.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decisions(pub(crate) std::sync::Arc<[ComponentReport]>);

/// Everything of a component's report but its id and digest: what `decisions` groups by.
fn same_decision(a: &ComponentReport, b: &ComponentReport) -> bool {
    a.phase == b.phase
        && a.reason == b.reason
        && a.action == b.action
        && a.retained == b.retained
        && a.locally_supported == b.locally_supported
        && a.generation == b.generation
        && a.binding == b.binding
        && a.seq == b.seq
        && a.obligation == b.obligation
        && a.ty == b.ty
}

impl Decisions {
    /// For each component, the position of the first component with the same decision.
    fn leaders(&self) -> Vec<usize> {
        let mut firsts: Vec<usize> = Vec::new();
        let mut leader = Vec::with_capacity(self.0.len());
        for (i, c) in self.0.iter().enumerate() {
            let found = firsts
                .iter()
                .copied()
                .find(|&f| self.0.get(f).is_some_and(|x| same_decision(x, c)));
            leader.push(found.unwrap_or_else(|| {
                firsts.push(i);
                i
            }));
        }
        leader
    }

    /// SHA-256 over the tag and the component digests in order.
    fn digest(&self) -> Digest {
        // The tag, the digests and the padding (at most 72 bytes), hashed in one buffer.
        let mut buf = Vec::with_capacity(tag::COMPONENTS.len() + 32 * self.0.len() + 72);
        let mut m = Message::new(&mut buf, tag::COMPONENTS);
        for c in self.0.iter() {
            m.buf().extend_from_slice(&c.digest.0);
        }
        m.digest()
    }

    /// The decisions' canonical text.
    fn write(&self, out: &mut Vec<u8>) {
        let leader = self.leaders();
        out.extend_from_slice(b"{\"decisions\":[");
        let mut first = true;
        for (i, c) in self.0.iter().enumerate() {
            if leader.get(i) != Some(&i) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_decision(out, c, &leader, i);
        }
        out.extend_from_slice(b"],\"digest\":");
        write_digest(out, &self.digest());
        out.extend_from_slice(b",\"ids\":[");
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, c.id.as_str());
        }
        out.extend_from_slice(b"]}");
    }
}

/// One decision as the generic writer sees it (the same keys, the same absences).
#[derive(serde::Serialize)]
struct Group<'a> {
    action: bool,
    at: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binding: Option<Digest>,
    generation: u32,
    locally_supported: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    obligation: Option<ObligationId>,
    phase: Phase,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<ReasonCode>,
    retained: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<Seq>,
    #[serde(rename = "type")]
    ty: &'a Id,
}

impl Serialize for Decisions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let leader = self.leaders();
        let groups: Vec<Group<'_>> = self
            .0
            .iter()
            .enumerate()
            .filter(|(i, _)| leader.get(*i) == Some(i))
            .map(|(i, c)| Group {
                action: c.action,
                at: (i..leader.len())
                    .filter(|j| leader.get(*j) == Some(&i))
                    .collect(),
                binding: c.binding,
                generation: c.generation,
                locally_supported: c.locally_supported,
                obligation: c.obligation,
                phase: c.phase,
                reason: c.reason,
                retained: c.retained,
                seq: c.seq,
                ty: &c.ty,
            })
            .collect();
        let ids: Vec<&Id> = self.0.iter().map(|c| &c.id).collect();
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("decisions", &groups)?;
        m.serialize_entry("digest", &self.digest())?;
        m.serialize_entry("ids", &ids)?;
        m.end()
    }
}

impl CanonicalRecord for Record {
    fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        match self {
            // Keys in byte order, as the generic writer sorts them; the tag among them.
            Record::Admitted(a) => {
                let super::Admitted {
                    response,
                    agent,
                    generation,
                    catalog,
                    catalog_version,
                    components,
                    sender,
                } = a.as_ref();
                out.extend_from_slice(b"{\"agent\":");
                write_str(out, agent.as_str());
                out.extend_from_slice(b",\"catalog\":");
                write_str(out, catalog.as_str());
                out.extend_from_slice(b",\"catalog_version\":");
                write_u64(out, u64::from(*catalog_version));
                out.extend_from_slice(b",\"components\":");
                components.write(out);
                out.extend_from_slice(b",\"generation\":");
                write_u64(out, *generation);
                out.extend_from_slice(b",\"kind\":\"admitted\",\"response\":");
                write_str(out, response.as_str());
                write_sender(out, sender.as_ref());
                out.push(b'}');
                Ok(())
            }
            Record::Readmitted {
                response,
                obligation,
                components,
                sender,
            } => {
                out.extend_from_slice(b"{\"components\":");
                components.write(out);
                out.extend_from_slice(b",\"kind\":\"readmitted\",\"obligation\":");
                write_u64(out, obligation.0);
                out.extend_from_slice(b",\"response\":");
                write_str(out, response.as_str());
                write_sender(out, sender.as_ref());
                out.push(b'}');
                Ok(())
            }
            // The records an update queues by the hundred, written directly too: a component
            // named by its `ComponentRef` would otherwise go through the generic writer's
            // flattened map.
            Record::Phase {
                component,
                phase,
                reason,
                generation,
            } => {
                write_component(out, b"{\"component\":", component);
                out.extend_from_slice(b",\"generation\":");
                write_u64(out, u64::from(*generation));
                out.extend_from_slice(b",\"kind\":\"phase\",\"phase\":");
                write_str(out, phase.wire_name());
                out.extend_from_slice(b",\"reason\":");
                write_reason(out, *reason);
                write_response(out, component);
                Ok(())
            }
            Record::Obligation {
                id,
                component,
                state,
                reason,
            } => {
                write_component(out, b"{\"component\":", component);
                out.extend_from_slice(b",\"id\":");
                write_u64(out, id.0);
                out.extend_from_slice(b",\"kind\":\"obligation\",\"reason\":");
                write_str(out, reason.name());
                out.extend_from_slice(b",\"response\":");
                write_str(out, component.response().as_str());
                out.extend_from_slice(b",\"state\":");
                write_str(out, state.wire_name());
                out.push(b'}');
                Ok(())
            }
            Record::Gate {
                component,
                seq,
                binding,
                outcome,
                code,
                effect,
            } => {
                out.extend_from_slice(b"{\"binding\":");
                write_digest(out, binding);
                out.extend_from_slice(b",\"code\":");
                write_reason(out, *code);
                write_component(out, b",\"component\":", component);
                if let Some(e) = effect {
                    out.extend_from_slice(b",\"effect\":");
                    write_str(out, e);
                }
                out.extend_from_slice(b",\"kind\":\"gate\",\"outcome\":");
                write_str(out, outcome);
                out.extend_from_slice(b",\"response\":");
                write_str(out, component.response().as_str());
                out.extend_from_slice(b",\"seq\":");
                write_seq(out, *seq);
                out.push(b'}');
                Ok(())
            }
            _ => canonical::write(out, self),
        }
    }
}

/// `lead` then the component's id.
fn write_component(out: &mut Vec<u8>, lead: &[u8], c: &ComponentRef) {
    out.extend_from_slice(lead);
    write_str(out, c.id().as_str());
}

/// A `"sender"` member when the sender is known (it sorts after `"response"`, the last member
/// of the records that have one).
fn write_sender(out: &mut Vec<u8>, sender: Option<&Id>) {
    if let Some(s) = sender {
        out.extend_from_slice(b",\"sender\":");
        write_str(out, s.as_str());
    }
}

/// The closing `"response"` member and the object's end.
fn write_response(out: &mut Vec<u8>, c: &ComponentRef) {
    out.extend_from_slice(b",\"response\":");
    write_str(out, c.response().as_str());
    out.push(b'}');
}

/// A reason code by name, or `null`.
fn write_reason(out: &mut Vec<u8>, r: Option<ReasonCode>) {
    match r {
        Some(r) => write_str(out, r.name()),
        None => out.extend_from_slice(b"null"),
    }
}

/// A sequence as `{"boot":…,"n":…}`.
fn write_seq(out: &mut Vec<u8>, s: Seq) {
    out.extend_from_slice(b"{\"boot\":");
    write_u64(out, s.boot);
    out.extend_from_slice(b",\"n\":");
    write_u64(out, s.n);
    out.push(b'}');
}

fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

fn write_digest(out: &mut Vec<u8>, d: &Digest) {
    out.push(b'"');
    out.extend_from_slice(&d.hex_bytes());
    out.push(b'"');
}

/// One decision: [`Group`]'s fields in byte order of their names, absent when `None`, phases
/// and reason codes by name, a sequence as `{"boot":…,"n":…}`; `at` lists the positions whose
/// leader (the first component with the same decision) is `me`.
fn write_decision(out: &mut Vec<u8>, c: &ComponentReport, leaders: &[usize], me: usize) {
    out.extend_from_slice(b"{\"action\":");
    write_bool(out, c.action);
    out.extend_from_slice(b",\"at\":[");
    let mut first = true;
    for (j, _) in leaders
        .iter()
        .enumerate()
        .skip(me)
        .filter(|(_, l)| **l == me)
    {
        if !first {
            out.push(b',');
        }
        first = false;
        write_u64(out, j as u64);
    }
    out.push(b']');
    if let Some(b) = &c.binding {
        out.extend_from_slice(b",\"binding\":");
        write_digest(out, b);
    }
    out.extend_from_slice(b",\"generation\":");
    write_u64(out, u64::from(c.generation));
    out.extend_from_slice(b",\"locally_supported\":");
    write_bool(out, c.locally_supported);
    if let Some(o) = c.obligation {
        out.extend_from_slice(b",\"obligation\":");
        write_u64(out, o.0);
    }
    out.extend_from_slice(b",\"phase\":");
    write_str(out, c.phase.wire_name());
    if let Some(r) = c.reason {
        out.extend_from_slice(b",\"reason\":");
        write_str(out, r.name());
    }
    out.extend_from_slice(b",\"retained\":");
    write_bool(out, c.retained);
    if let Some(s) = c.seq {
        out.extend_from_slice(b",\"seq\":");
        write_seq(out, s);
    }
    out.extend_from_slice(b",\"type\":");
    write_str(out, c.ty.as_str());
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::super::Admitted;
    use super::*;
    use crate::binding::Seq;
    use crate::obligation::ObligationId;
    use crate::phase::Phase;
    use crate::reason::ReasonCode;
    use crate::receipt::ReceiptChain;
    use crate::time::Nanos;
    use sha2::Digest as _;

    /// What receipts have always hashed: serde_json's text of the record's `Value`.
    fn value_route(r: &Record) -> Vec<u8> {
        serde_json::to_vec(&serde_json::to_value(r).unwrap()).unwrap()
    }

    fn own_text(r: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        r.write_canonical(&mut out).unwrap();
        out
    }

    fn report(i: usize) -> ComponentReport {
        let phases = Phase::ALL;
        let reasons = ReasonCode::ALL;
        let byte = u8::try_from(i % 256).unwrap();
        ComponentReport {
            id: format!("c{i}.x-_{}", "z".repeat(i % 50)).parse().unwrap(),
            ty: ["route_action", "notice", "status"][i % 3].parse().unwrap(),
            action: i.is_multiple_of(2),
            phase: phases[i % phases.len()],
            retained: i.is_multiple_of(3),
            locally_supported: !i.is_multiple_of(5),
            reason: (!i.is_multiple_of(4)).then(|| reasons[i % reasons.len()]),
            digest: Digest([byte; 32]),
            generation: [0, 1, u32::MAX][i % 3],
            binding: (i.is_multiple_of(2)).then_some(Digest([byte ^ 0x5a; 32])),
            seq: (i % 3 != 1).then_some(Seq {
                boot: [0, 7, u64::MAX][i % 3],
                n: u64::try_from(i).unwrap() * 1_000_003,
            }),
            obligation: (i % 4 == 1).then_some(ObligationId([1, 0, u64::MAX][i % 3])),
        }
    }

    /// A response-shaped mix: notices emitted, statuses refused with their action, route
    /// actions bound (binding and sequence each their own), one withheld with an obligation.
    fn mix() -> Vec<ComponentReport> {
        (0..32)
            .map(|i| {
                let byte = u8::try_from(i).unwrap();
                let (ty, action, phase, reason) = match i % 4 {
                    0 => ("notice", false, Phase::Emitted, None),
                    1 | 2 => ("status", false, Phase::Withheld, Some(ReasonCode::ALL[3])),
                    _ => ("route_action", true, Phase::Retained, None),
                };
                ComponentReport {
                    id: format!("e{i}").parse().unwrap(),
                    ty: ty.parse().unwrap(),
                    action,
                    phase: if i == 7 { Phase::Withheld } else { phase },
                    retained: i % 4 != 1,
                    locally_supported: i % 4 != 2,
                    reason,
                    digest: Digest([byte; 32]),
                    generation: 1,
                    binding: action.then_some(Digest([byte ^ 0x5a; 32])),
                    seq: action.then_some(Seq {
                        boot: 3,
                        n: u64::from(byte),
                    }),
                    obligation: (i == 7).then_some(ObligationId(9)),
                }
            })
            .collect()
    }

    /// A base component, its twin (one decision for both), and one component for each field that
    /// differs from the base in that field alone (each a decision of its own).
    fn one_field_apart() -> Vec<ComponentReport> {
        let base = ComponentReport {
            id: "base".parse().unwrap(),
            ty: "status".parse().unwrap(),
            action: false,
            phase: Phase::Withheld,
            retained: true,
            locally_supported: true,
            reason: Some(ReasonCode::EPOCH_CHANGED),
            digest: Digest([0; 32]),
            generation: 1,
            binding: None,
            seq: None,
            obligation: None,
        };
        let edits: [fn(&mut ComponentReport); 11] = [
            |_| {},
            |c| c.ty = "notice".parse().unwrap(),
            |c| c.action = true,
            |c| c.phase = Phase::Pending,
            |c| c.retained = false,
            |c| c.locally_supported = false,
            |c| c.reason = None,
            |c| c.generation = 2,
            |c| c.binding = Some(Digest([7; 32])),
            |c| c.seq = Some(Seq { boot: 1, n: 1 }),
            |c| c.obligation = Some(ObligationId(1)),
        ];
        std::iter::once(base.clone())
            .chain(edits.iter().enumerate().map(|(i, edit)| {
                let mut c = base.clone();
                c.id = format!("x{i}").parse().unwrap();
                c.digest = Digest([u8::try_from(i).unwrap() + 1; 32]);
                edit(&mut c);
                c
            }))
            .collect()
    }

    fn admitted(components: Vec<ComponentReport>) -> Record {
        Record::Admitted(Box::new(Admitted {
            response: "resp-1".parse().unwrap(),
            agent: "planner-1".parse().unwrap(),
            generation: u64::MAX,
            catalog: "uav-px4".parse().unwrap(),
            catalog_version: 5,
            components: Decisions(components.into()),
            sender: None,
        }))
    }

    /// Every record that names a component by its `ComponentRef`, and the boxed ones: each
    /// phase, obligation state and gate outcome, optional fields present and absent, extremes.
    fn named_records() -> Vec<Record> {
        use super::super::{CertificateRecord, GateRefused, SourceSummary, SourceUpdated};
        use crate::names::Names;
        use crate::obligation::ObligationState;
        let ids: Vec<Id> = ["a0", "s.1_x-Z", "n2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let names = Names::new(&"resp-0007".parse().unwrap(), &ids);
        let at = |i| crate::names::ComponentRef::new(&names, i).unwrap();
        let mut out = Vec::new();
        for (k, phase) in Phase::ALL.iter().enumerate() {
            out.push(Record::Phase {
                component: at(u16::try_from(k % 3).unwrap()),
                phase: *phase,
                reason: (k % 2 == 0).then(|| ReasonCode::ALL[k % ReasonCode::ALL.len()]),
                generation: [0, 1, u32::MAX][k % 3],
            });
        }
        for (k, state) in [
            ObligationState::Created,
            ObligationState::Dispatched,
            ObligationState::ExternalSupportReceived,
            ObligationState::ReadyForReadmission,
            ObligationState::Discharged,
            ObligationState::Failed,
            ObligationState::Expired,
        ]
        .into_iter()
        .enumerate()
        {
            out.push(Record::Obligation {
                id: ObligationId([0, 1, u64::MAX][k % 3]),
                component: at(u16::try_from(k % 3).unwrap()),
                state,
                reason: ReasonCode::ALL[k],
            });
        }
        for (k, outcome) in ["dispatched", "denied", "enqueue_failed"]
            .into_iter()
            .enumerate()
        {
            out.push(Record::Gate {
                component: at(u16::try_from(k).unwrap()),
                seq: Seq {
                    boot: [0, 7, u64::MAX][k],
                    n: [u64::MAX, 0, 12][k],
                },
                binding: Digest([u8::try_from(k).unwrap() * 77; 32]),
                outcome,
                code: (k > 0).then_some(ReasonCode::ADAPTER_REJECTED),
                effect: (k == 0).then(|| "move \"quoted\" é".to_string()),
            });
        }
        out.push(Record::SupportLost {
            component: at(1),
            binding: Digest([9; 32]),
            code: ReasonCode::EPOCH_CHANGED,
        });
        out.push(Record::GateRefused(Box::new(GateRefused {
            response: "r".parse().unwrap(),
            component: "c".parse().unwrap(),
            seq: Seq { boot: 1, n: 2 },
            code: ReasonCode::TOKEN_USED,
        })));
        out.push(Record::SourceUpdate(Box::new(SourceUpdated {
            source: "traffic".parse().unwrap(),
            epoch: u64::MAX,
            provenance: "utm-feed-a".parse().unwrap(),
            generated_at_ns: 5,
            sender: None,
        })));
        out.push(Record::SourceUpdate(Box::new(SourceUpdated {
            source: "traffic".parse().unwrap(),
            epoch: 1,
            provenance: "utm-feed-a".parse().unwrap(),
            generated_at_ns: 5,
            sender: Some("traffic-feed".parse().unwrap()),
        })));
        out.push(Record::SourceSummary(Box::new(SourceSummary {
            source: "map".parse().unwrap(),
            updates: 3,
            first_generated_at_ns: 1,
            last_generated_at_ns: 2,
            epoch: 7,
            provenance: "p".parse().unwrap(),
        })));
        out.push(Record::Certificate(Box::new(CertificateRecord {
            id: "cert-1".parse().unwrap(),
            covers: Digest([3; 32]),
            valid_until_ns: 0,
            revoked: true,
        })));
        out
    }

    #[test]
    fn admissions_and_readmissions_write_what_the_value_route_writes() {
        // Every phase, every reason code, each optional field present and absent, extremes;
        // components that share a decision and components that share none.
        let n = ReasonCode::ALL.len().max(9) * 4;
        let records = [
            admitted((0..n).map(report).collect()),
            admitted(mix()),
            admitted(one_field_apart()),
            Record::Admitted(Box::new(Admitted {
                response: "r".parse().unwrap(),
                agent: "a".parse().unwrap(),
                generation: 0,
                catalog: "c".parse().unwrap(),
                catalog_version: u32::MAX,
                components: Decisions(Vec::new().into()),
                sender: Some("agent-b".parse().unwrap()),
            })),
            Record::Readmitted {
                response: "r-2".parse().unwrap(),
                obligation: ObligationId(u64::MAX),
                components: Decisions(mix().into_iter().skip(3).take(5).collect()),
                sender: None,
            },
            Record::Readmitted {
                response: "r-3".parse().unwrap(),
                obligation: ObligationId(2),
                components: Decisions(mix().into_iter().take(2).collect()),
                sender: Some("agent-a".parse().unwrap()),
            },
            Record::Rejected {
                response: "r \"quoted\"".into(),
                code: ReasonCode::CYCLE,
                ids: vec!["a".into(), "b".into()],
                sender: None,
            },
        ];
        for r in records.iter().chain(&named_records()) {
            assert_eq!(
                String::from_utf8(own_text(r)).unwrap(),
                String::from_utf8(value_route(r)).unwrap()
            );
        }
        for r in &records {
            assert_eq!(
                String::from_utf8(own_text(r)).unwrap(),
                String::from_utf8(value_route(r)).unwrap()
            );
        }
        // Sealed in a chain, the receipt's body is that text.
        let mut chain = ReceiptChain::new();
        chain.push(Nanos::from_ms(1), records[1].clone());
        let sealed = chain.seal().unwrap();
        assert_eq!(sealed.body.as_str().as_bytes(), value_route(&records[1]));
    }

    /// Format 3's text, pinned: changing it changes what every new receipt hashes.
    #[test]
    fn the_compact_admission_text_is_pinned() {
        let d = |b: u8| Digest([b; 32]);
        let notice = |id: &str, digest: u8| ComponentReport {
            id: id.parse().unwrap(),
            ty: "notice".parse().unwrap(),
            action: false,
            phase: Phase::Emitted,
            retained: true,
            locally_supported: true,
            reason: None,
            digest: d(digest),
            generation: 1,
            binding: None,
            seq: None,
            obligation: None,
        };
        let r = admitted(vec![
            notice("e1", 1),
            ComponentReport {
                id: "e3".parse().unwrap(),
                ty: "route_action".parse().unwrap(),
                action: true,
                phase: Phase::Invalidated,
                retained: false,
                locally_supported: false,
                reason: Some(ReasonCode::EPOCH_CHANGED),
                digest: d(3),
                generation: 2,
                binding: Some(d(0xab)),
                seq: Some(Seq { boot: 1, n: 4 }),
                obligation: Some(ObligationId(7)),
            },
            notice("e2", 2),
        ]);
        let ab = "ab".repeat(32);
        // SHA-256 over the tag and the three digests, computed apart from the writer.
        let mut h = sha2::Sha256::new();
        h.update(b"halo/components/v1\0");
        for b in [1u8, 3, 2] {
            h.update([b; 32]);
        }
        let root: [u8; 32] = h.finalize().into();
        let root = Digest(root).to_hex();
        assert_eq!(
            String::from_utf8(own_text(&r)).unwrap(),
            format!(
                "{{\"agent\":\"planner-1\",\"catalog\":\"uav-px4\",\"catalog_version\":5,\"components\":\
                 {{\"decisions\":[{{\"action\":false,\"at\":[0,2],\"generation\":1,\"locally_supported\":true,\
                 \"phase\":\"emitted\",\"retained\":true,\"type\":\"notice\"}},{{\"action\":true,\"at\":[1],\
                 \"binding\":\"{ab}\",\"generation\":2,\"locally_supported\":false,\"obligation\":7,\
                 \"phase\":\"invalidated\",\"reason\":\"EPOCH_CHANGED\",\"retained\":false,\"seq\":{{\"boot\":1,\
                 \"n\":4}},\"type\":\"route_action\"}}],\"digest\":\"{root}\",\"ids\":[\"e1\",\"e3\",\"e2\"]}},\
                 \"generation\":18446744073709551615,\"kind\":\"admitted\",\"response\":\"resp-1\"}}"
            )
        );
    }

    /// Read back by its own rules (not by this module's code), a compact record gives every
    /// component's report but its digest, in order, and the digest over theirs.
    #[test]
    fn a_compact_admission_reads_back_to_every_report() {
        use serde_json::Value;
        let sets = [mix(), one_field_apart(), (0..40).map(report).collect()];
        for reports in sets {
            let body: Value =
                serde_json::from_slice(&own_text(&admitted(reports.clone()))).unwrap();
            let c = &body["components"];
            let ids = c["ids"].as_array().unwrap();
            assert_eq!(ids.len(), reports.len());
            let mut seen = vec![0u32; reports.len()];
            for d in c["decisions"].as_array().unwrap() {
                for at in d["at"].as_array().unwrap() {
                    let at = usize::try_from(at.as_u64().unwrap()).unwrap();
                    seen[at] += 1;
                    // The full report, rebuilt: the decision's fields, the id at `at`, and the
                    // fields a decision leaves out when they are none.
                    let mut full = d.as_object().unwrap().clone();
                    full.remove("at");
                    full.insert("id".into(), ids[at].clone());
                    for k in ["binding", "obligation", "reason", "seq"] {
                        full.entry(k).or_insert(Value::Null);
                    }
                    let mut want = serde_json::to_value(&reports[at]).unwrap();
                    want.as_object_mut().unwrap().remove("digest");
                    assert_eq!(Value::Object(full), want, "component {at}");
                }
            }
            assert!(
                seen.iter().all(|n| *n == 1),
                "each position in one decision: {seen:?}"
            );
            let mut h = sha2::Sha256::new();
            h.update(b"halo/components/v1\0");
            for r in &reports {
                h.update(r.digest.0);
            }
            let root: [u8; 32] = h.finalize().into();
            assert_eq!(c["digest"].as_str().unwrap(), Digest(root).to_hex());
        }
        // The mix's 32 components make 11 decisions: the notices, the refused statuses of two
        // kinds, and each of the eight bound actions its own.
        let body: Value = serde_json::from_slice(&own_text(&admitted(mix()))).unwrap();
        assert_eq!(
            body["components"]["decisions"].as_array().unwrap().len(),
            11
        );
        // The base and its twin share one; each one-field difference makes its own.
        let body: Value = serde_json::from_slice(&own_text(&admitted(one_field_apart()))).unwrap();
        assert_eq!(
            body["components"]["decisions"].as_array().unwrap().len(),
            11
        );
    }

    /// Readers see the same components in both formats.
    #[test]
    fn readers_see_the_same_components_in_both_formats() {
        for reports in [mix(), one_field_apart(), (0..40).map(report).collect()] {
            let old = serde_json::json!({"kind": "admitted", "components": reports});
            let new: serde_json::Value =
                serde_json::from_slice(&own_text(&admitted(reports.clone()))).unwrap();
            let a = crate::receipt::recorded_components(&old);
            assert_eq!(a.len(), reports.len());
            assert_eq!(a, crate::receipt::recorded_components(&new));
            assert_eq!(
                a[1].reason.as_deref(),
                reports[1].reason.map(ReasonCode::name)
            );
        }
    }
}
