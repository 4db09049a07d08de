//! Reports: what the gateway answers about a response and each of its components.

use super::*;

pub(crate) fn component_report(cat: &Catalog, r: &Resp, i: u16) -> Option<ComponentReport> {
    let c = r.graph.component(i)?;
    let x = r.inst(i)?;
    Some(ComponentReport {
        id: c.id.clone(),
        ty: cat
            .type_spec(c.ty)
            .map(|t| t.name.clone())
            .unwrap_or_else(|| c.id.clone()),
        action: x.class == Class::Action,
        phase: x.phase,
        retained: x.member,
        locally_supported: x.local.ok,
        reason: x.reason,
        digest: c.digest,
        generation: x.generation,
        binding: x.binding,
        seq: x.seq,
        obligation: x.obligation,
    })
}

pub(crate) fn report(cat: &Catalog, r: &Resp) -> AdmissionReport {
    AdmissionReport {
        response: r.id.clone(),
        components: (0..r.graph.len())
            .filter_map(|i| component_report(cat, r, u16::try_from(i).ok()?))
            .collect(),
    }
}
