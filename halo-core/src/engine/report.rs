//! Reports: what the gateway answers about a response and each of its components.

use super::*;

pub(crate) fn component_report(cat: &Catalog, r: &Resp, i: u16) -> Option<ComponentReport> {
    Some(of(cat, r.graph.component(i)?, r.inst(i)?))
}

/// The report of component `c` in its state `x`.
fn of(cat: &Catalog, c: &crate::graph::Component, x: &Inst) -> ComponentReport {
    ComponentReport {
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
    }
}

pub(crate) fn report(cat: &Catalog, r: &Resp) -> AdmissionReport {
    AdmissionReport {
        response: r.id.clone(),
        // One allocation, of the exact length (a zip of two slices knows it).
        components: r
            .graph
            .components()
            .iter()
            .zip(&r.inst)
            .map(|(c, x)| of(cat, c, x))
            .collect(),
    }
}
