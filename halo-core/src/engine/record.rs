//! The canonical text of the gateway's receipt records.
//!
//! An admission's receipt records every component's decision: for a 32-component response,
//! about 9 KB of canonical JSON, which the generic (serde-driven) writer spends most of a
//! receipt's sealing time on. `Record::Admitted` writes itself here, in the generic writer's key
//! order and spelling, byte for byte (the tests below hold the two to the same bytes); every
//! other record goes through the generic writer.

use super::{ComponentReport, Record};
use crate::canonical::{self, Error, write_str, write_u64};
use crate::digest::Digest;
use crate::receipt::CanonicalRecord;

impl CanonicalRecord for Record {
    fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let Record::Admitted {
            response,
            agent,
            generation,
            catalog,
            catalog_version,
            components,
        } = self
        else {
            return canonical::write(out, self);
        };
        // Keys in byte order, as the generic writer sorts them; the tag among them.
        out.extend_from_slice(b"{\"agent\":");
        write_str(out, agent.as_str());
        out.extend_from_slice(b",\"catalog\":");
        write_str(out, catalog.as_str());
        out.extend_from_slice(b",\"catalog_version\":");
        write_u64(out, u64::from(*catalog_version));
        out.extend_from_slice(b",\"components\":[");
        for (i, c) in components.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_component(out, c);
        }
        out.extend_from_slice(b"],\"generation\":");
        write_u64(out, *generation);
        out.extend_from_slice(b",\"kind\":\"admitted\",\"response\":");
        write_str(out, response.as_str());
        out.push(b'}');
        Ok(())
    }
}

fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

fn write_digest(out: &mut Vec<u8>, d: &Digest) {
    out.push(b'"');
    out.extend_from_slice(&d.hex_bytes());
    out.push(b'"');
}

/// One component's decision: `ComponentReport`'s fields in byte order of their names, `None`
/// as `null`, phases and reason codes by name, a sequence as `{"boot":…,"n":…}`.
fn write_component(out: &mut Vec<u8>, c: &ComponentReport) {
    out.extend_from_slice(b"{\"action\":");
    write_bool(out, c.action);
    out.extend_from_slice(b",\"binding\":");
    match &c.binding {
        Some(b) => write_digest(out, b),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"digest\":");
    write_digest(out, &c.digest);
    out.extend_from_slice(b",\"generation\":");
    write_u64(out, u64::from(c.generation));
    out.extend_from_slice(b",\"id\":");
    write_str(out, c.id.as_str());
    out.extend_from_slice(b",\"locally_supported\":");
    write_bool(out, c.locally_supported);
    out.extend_from_slice(b",\"obligation\":");
    match c.obligation {
        Some(o) => write_u64(out, o.0),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"phase\":");
    write_str(out, c.phase.wire_name());
    out.extend_from_slice(b",\"reason\":");
    match c.reason {
        Some(r) => write_str(out, r.name()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"retained\":");
    write_bool(out, c.retained);
    out.extend_from_slice(b",\"seq\":");
    match c.seq {
        Some(s) => {
            out.extend_from_slice(b"{\"boot\":");
            write_u64(out, s.boot);
            out.extend_from_slice(b",\"n\":");
            write_u64(out, s.n);
            out.push(b'}');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"type\":");
    write_str(out, c.ty.as_str());
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::Seq;
    use crate::obligation::ObligationId;
    use crate::phase::Phase;
    use crate::reason::ReasonCode;
    use crate::receipt::ReceiptChain;
    use crate::time::Nanos;

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

    #[test]
    fn an_admission_writes_what_the_value_route_writes() {
        // Every phase, every reason code, each optional field present and absent, extremes.
        let n = ReasonCode::ALL.len().max(9) * 4;
        let records = [
            Record::Admitted {
                response: "resp-1".parse().unwrap(),
                agent: "planner-1".parse().unwrap(),
                generation: u64::MAX,
                catalog: "uav-px4".parse().unwrap(),
                catalog_version: 5,
                components: (0..n).map(report).collect(),
            },
            Record::Admitted {
                response: "r".parse().unwrap(),
                agent: "a".parse().unwrap(),
                generation: 0,
                catalog: "c".parse().unwrap(),
                catalog_version: u32::MAX,
                components: Vec::new(),
            },
            Record::Rejected {
                response: "r \"quoted\"".into(),
                code: ReasonCode::CYCLE,
                ids: vec!["a".into(), "b".into()],
            },
        ];
        for r in &records {
            assert_eq!(
                String::from_utf8(own_text(r)).unwrap(),
                String::from_utf8(value_route(r)).unwrap()
            );
        }
        // Sealed in a chain, the receipt's body is that text.
        let mut chain = ReceiptChain::new();
        chain.push(Nanos::from_ms(1), records[0].clone());
        let sealed = chain.seal().unwrap();
        assert_eq!(sealed.body.as_str().as_bytes(), value_route(&records[0]));
    }
}
