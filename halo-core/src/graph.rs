//! Stage two of validation: typed components and the phase-labelled response graph
//! `G_R = (V, D_φ)`.
//!
//! Everything here runs before admission and fails closed: duplicate ids, unknown types,
//! invalid payloads, claims outside the footprint, missing references, self-references,
//! duplicate prerequisites, phases the catalog does not allow and cycles all reject the response
//! whole, with the reason code and the offending ids.

use super::catalog::{Catalog, SourceIx, TypeIx};
use super::digest::{Digest, Message, put_opt_str, put_str, put_varint, tag};
use super::envelope::{
    CatalogRef, Claim, MAX_COMPONENTS, MAX_PAYLOAD_BYTES, MAX_PREREQUISITES, RawComponent,
    RawResponse, Rejection,
};
use super::ids::{Id, InvalidIdError, fingerprint, same_text};
use super::payload::Payload;
use super::phase::Phase;
use super::reason::ReasonCode;

/// A validated, typed component with its canonical digest `d_e`.
#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    /// Component id.
    pub id: Id,
    /// Catalog type.
    pub ty: TypeIx,
    /// Typed payload, shared with the events that emit it.
    pub payload: std::sync::Arc<Payload>,
    /// Declared prerequisites that name a component of the response, resolved once:
    /// `(parent index in envelope order, phase)`, sorted by the parent's id (a parent named
    /// twice is listed twice; the graph rejects that). Held in place: at most
    /// [`MAX_PREREQUISITES`], four bytes each.
    pub requires: heapless::Vec<(u16, Phase), MAX_PREREQUISITES>,
    /// Declared prerequisites that name no component of the response, sorted by id; empty for a
    /// well-formed response (the graph rejects any as `MISSING_REFERENCE`).
    pub unresolved: Vec<(Id, Phase)>,
    /// Support claims by source, sorted by source.
    pub claims: Vec<(SourceIx, Claim)>,
    /// Certificate reference.
    pub certificate: Option<Id>,
    /// `d_e = Digest(Canonicalize(e))`.
    pub digest: Digest,
}

impl Component {
    /// The claim for `source`, if the component carries one.
    pub fn claim(&self, source: SourceIx) -> Option<&Claim> {
        self.claims
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, c)| c)
    }
}

/// `d_e = Digest(Canonicalize(e))`: SHA-256 over the component's canonical postcard bytes,
/// with names instead of catalog indices, so the digest does not depend on how a catalog orders
/// its tables.
///
/// The bytes are those postcard gives the struct
/// `{id: str, ty: str, payload: Payload, requires: [(str, str)], claims: [(str, Option<u64>,
/// Option<str>)], certificate: Option<str>}` (the test below keeps that struct and compares).
/// Everything but the payload is written here directly: lengths and integers as LEB128 varints,
/// `Option` as a 0/1 tag, no intermediate lists. `requires` are the parent ids with their
/// phases in the component's order (by parent id).
fn canonical_digest(
    cat: &Catalog,
    c: &Component,
    requires: &[(&str, Phase)],
    buf: &mut Vec<u8>,
) -> Digest {
    let mut m = Message::new(buf, tag::COMPONENT);
    let buf = m.buf();
    let ty = cat.type_spec(c.ty).map_or("", |t| t.name.as_str());
    put_str(buf, c.id.as_str());
    put_str(buf, ty);
    c.payload.put_postcard(buf);
    put_varint(buf, requires.len() as u64);
    for (p, q) in requires {
        put_str(buf, p);
        // Each phase name shorter than 128 bytes: its length is one varint byte.
        buf.extend_from_slice(q.prerequisite_postcard());
    }
    put_varint(buf, c.claims.len() as u64);
    for (s, cl) in &c.claims {
        put_str(buf, cat.source(*s).map_or("", |x| x.name.as_str()));
        match cl.epoch {
            Some(e) => {
                buf.push(1);
                put_varint(buf, e);
            }
            None => buf.push(0),
        }
        put_opt_str(buf, cl.provenance.as_ref().map(Id::as_str));
    }
    put_opt_str(buf, c.certificate.as_ref().map(Id::as_str));
    m.digest()
}

fn invalid_id(e: InvalidIdError) -> Rejection {
    Rejection::new(
        ReasonCode::INVALID_ID,
        vec![e.text().to_string()],
        e.to_string(),
    )
}

fn id_of(s: &str) -> Result<Id, Rejection> {
    Id::new(s).map_err(invalid_id)
}

/// Validates one raw component against the catalog: ids, limits, type, payload, claims and
/// digest, and resolves its prerequisites against `parents`, the ids of the response it belongs
/// to. References are checked later, over the whole graph.
///
/// # Errors
/// A [`Rejection`] naming the component.
pub fn build_component<P: Parents + ?Sized>(
    cat: &Catalog,
    raw: &RawComponent<'_>,
    parents: &P,
    buf: &mut Vec<u8>,
) -> Result<Component, Rejection> {
    let mut one = Vec::with_capacity(1);
    build_component_into(cat, raw, parents, buf, &mut one)?;
    // `build_component_into` pushed exactly one component when it returned Ok.
    one.pop().ok_or_else(|| {
        Rejection::new(
            ReasonCode::INVALID_PAYLOAD,
            Vec::new(),
            "no component built",
        )
    })
}

/// [`build_component`], appending the component to `out` (unchanged on error).
fn build_component_into<P: Parents + ?Sized>(
    cat: &Catalog,
    raw: &RawComponent<'_>,
    parents: &P,
    buf: &mut Vec<u8>,
    out: &mut Vec<Component>,
) -> Result<(), Rejection> {
    let id = id_of(&raw.id)?;
    let me = || vec![raw.id.to_string()];
    if raw.requires.len() > MAX_PREREQUISITES {
        return Err(Rejection::new(
            ReasonCode::TOO_MANY_PREREQUISITES,
            me(),
            format!(
                "{} prerequisites; the limit is {MAX_PREREQUISITES}",
                raw.requires.len()
            ),
        ));
    }
    let payload_len = raw.payload.get().len();
    if payload_len > MAX_PAYLOAD_BYTES {
        return Err(Rejection::new(
            ReasonCode::PAYLOAD_TOO_LARGE,
            me(),
            format!("payload is {payload_len} bytes; the limit is {MAX_PAYLOAD_BYTES}"),
        ));
    }
    let ty = cat.type_ix(&raw.ty).ok_or_else(|| {
        Rejection::new(
            ReasonCode::UNKNOWN_TYPE,
            me(),
            format!("type `{}` is not in the catalog", raw.ty),
        )
    })?;
    let spec = cat
        .type_spec(ty)
        .ok_or_else(|| Rejection::new(ReasonCode::UNKNOWN_TYPE, me(), "type index out of range"))?;
    let payload = Payload::parse(spec.payload, raw.payload.get()).map_err(|m| {
        Rejection::new(
            m.code(),
            me(),
            format!("payload of `{}` as {}: {m}", raw.id, spec.payload.name()),
        )
    })?;
    if matches!(payload, Payload::GlobalRoute(_)) && spec.origin.is_none() {
        return Err(Rejection::new(
            ReasonCode::INVALID_PAYLOAD,
            me(),
            format!(
                "payload of `{}`: type `{}` takes `local_ned` targets only (its catalog names \
                 no `origin` source to convert a global target through)",
                raw.id, spec.name
            ),
        ));
    }

    // Checked and resolved in the order sent (the first offence is the one reported); each
    // parent is looked up once, here, and the graph works with its index from then on.
    let mut sent: heapless::Vec<(Option<(u16, u8)>, Phase), MAX_PREREQUISITES> =
        heapless::Vec::new();
    let mut unresolved_count = 0;
    for r in &raw.requires {
        Id::check(&r.id).map_err(invalid_id)?;
        let phase = Phase::from_prerequisite_name(&r.phase).ok_or_else(|| {
            Rejection::new(
                ReasonCode::PHASE_NOT_ALLOWED,
                me(),
                format!(
                    "`{}` is not a prerequisite phase (emitted, dispatched, observed_success)",
                    r.phase
                ),
            )
        })?;
        let parent = parents.resolve(&r.id);
        unresolved_count += usize::from(parent.is_none());
        // Cannot overflow: the count was checked against the limit above.
        let _ = sent.push((parent, phase));
    }
    // The order by parent id, as sent indices: by the parents' ranks in id order when all
    // resolved (equal ranks are one parent named twice and keep the order sent); by the ids
    // themselves otherwise (the graph will reject the response, but the digest stays right).
    let name_at = |i: u8| raw.requires.get(usize::from(i)).map(|r| &*r.id);
    let mut order: heapless::Vec<(u8, u8), MAX_PREREQUISITES> = sent
        .iter()
        .zip(0u8..)
        .map(|((parent, _), i)| (parent.map_or(u8::MAX, |(_, rank)| rank), i))
        .collect();
    if unresolved_count == 0 {
        order.sort_unstable();
    } else {
        order.sort_by(|a, b| name_at(a.1).cmp(&name_at(b.1)).then(a.1.cmp(&b.1)));
    }
    let mut requires = heapless::Vec::new();
    let mut unresolved = Vec::with_capacity(unresolved_count);
    // The same in parent id order, named, for the digest. (Every sent index has its entry in
    // both lists, and at most MAX_PREREQUISITES of them.)
    let mut named: heapless::Vec<(&str, Phase), MAX_PREREQUISITES> = heapless::Vec::new();
    for &(_, i) in &order {
        if let (Some(&(parent, phase)), Some(name)) = (sent.get(usize::from(i)), name_at(i)) {
            match parent {
                // Cannot overflow: at most MAX_PREREQUISITES were sent.
                Some((p, _)) => {
                    let _ = requires.push((p, phase));
                }
                None => unresolved.push((id_of(name)?, phase)),
            }
            let _ = named.push((name, phase));
        }
    }

    let claims = support_claims(cat, raw, spec)?;

    let certificate = raw.certificate.as_deref().map(id_of).transpose()?;
    // Built in place at the end of `out` (a component is a few hundred bytes; moving each
    // through a return value and into the list was measurable).
    out.push(Component {
        id,
        ty,
        payload: std::sync::Arc::new(payload),
        requires,
        unresolved,
        claims,
        certificate,
        digest: Digest::default(),
    });
    if let Some(c) = out.last_mut() {
        c.digest = canonical_digest(cat, c, &named, buf);
    }
    Ok(())
}

/// A component's support claims, each on a source of its type's footprint and naming an epoch
/// or a provenance, in source order.
fn support_claims(
    cat: &Catalog,
    raw: &RawComponent<'_>,
    spec: &crate::catalog::TypeSpec,
) -> Result<Vec<(SourceIx, Claim)>, Rejection> {
    let me = || vec![raw.id.to_string()];
    let mut claims = Vec::with_capacity(raw.support.0.len());
    for (name, claim) in &raw.support.0 {
        let src = cat
            .source_ix(name)
            .filter(|s| spec.footprint_mask & (1u64 << s.0) != 0)
            .ok_or_else(|| {
                Rejection::new(
                    ReasonCode::UNKNOWN_SUPPORT_SOURCE,
                    me(),
                    format!(
                        "claim for `{name}`, which is not in the footprint of `{}`",
                        spec.name
                    ),
                )
            })?;
        if claim.epoch.is_none() && claim.provenance.is_none() {
            return Err(Rejection::new(
                ReasonCode::INVALID_PAYLOAD,
                me(),
                format!("the claim for `{name}` names neither an epoch nor a provenance"),
            ));
        }
        claims.push((src, claim.clone()));
    }
    claims.sort_by_key(|(s, _)| *s);
    Ok(claims)
}

/// The ids a component's prerequisites may name, with where each sits: the components of the
/// response it belongs to.
pub trait Parents {
    /// The envelope index of the component named `id` and that id's rank in byte order among
    /// the response's ids, if a component has that id.
    fn resolve(&self, id: &str) -> Option<(u16, u8)>;
}

const SLOTS: usize = 2 * MAX_COMPONENTS;
const EMPTY: u16 = u16::MAX;

fn slot_of(h: u64) -> usize {
    (h as usize) & (SLOTS - 1)
}

/// Where each id of a response sits: an open-addressing table over the ids' fingerprints (at
/// most 64 ids in 128 slots; every hit is confirmed by comparing the ids), and each id's rank in
/// byte order, by which prerequisites sort.
#[derive(Clone, Debug, PartialEq)]
struct IdIndex {
    slots: [u16; SLOTS],
    fingerprints: heapless::Vec<u64, MAX_COMPONENTS>,
    ranks: heapless::Vec<u8, MAX_COMPONENTS>,
    /// An id occurs twice (the table holds its first occurrence).
    duplicated: bool,
}

impl IdIndex {
    /// The index over `ids`, which callers have limited to MAX_COMPONENTS (the fixed-size
    /// lists hold that many).
    fn new(ids: &[&str]) -> IdIndex {
        let mut ix = IdIndex {
            slots: [EMPTY; SLOTS],
            fingerprints: ids.iter().map(|id| fingerprint(id)).collect(),
            ranks: heapless::Vec::new(),
            duplicated: false,
        };
        for (i, &h) in ix.fingerprints.iter().enumerate() {
            let mut s = slot_of(h);
            while let Some(&j) = ix.slots.get(s) {
                if j == EMPTY {
                    if let Some(x) = ix.slots.get_mut(s) {
                        *x = u16::try_from(i).unwrap_or(EMPTY);
                    }
                    break;
                }
                if ix.fingerprints.get(usize::from(j)) == Some(&h)
                    && ids.get(usize::from(j)) == ids.get(i)
                {
                    ix.duplicated = true;
                    break;
                }
                s = (s + 1) & (SLOTS - 1);
            }
        }
        // Ranks: sorted by each id's first eight bytes as a big-endian number (zero-padded: an
        // id has no zero byte, so a shorter id that is a prefix sorts first, as in byte order),
        // equal heads compared whole.
        let mut order: heapless::Vec<(u64, u8), MAX_COMPONENTS> = ids
            .iter()
            .zip(0u8..)
            .map(|(id, i)| {
                let mut head = [0u8; 8];
                let n = id.len().min(8);
                if let (Some(h), Some(b)) = (head.get_mut(..n), id.as_bytes().get(..n)) {
                    h.copy_from_slice(b);
                }
                (u64::from_be_bytes(head), i)
            })
            .collect();
        let id_at = |i: u8| ids.get(usize::from(i));
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| id_at(a.1).cmp(&id_at(b.1))));
        let _ = ix.ranks.resize(ids.len(), 0);
        for (rank, &(_, i)) in (0u8..).zip(&order) {
            if let Some(r) = ix.ranks.get_mut(usize::from(i)) {
                *r = rank;
            }
        }
        ix
    }

    /// The index and rank of `id`, whose text at an index `id_at` gives.
    fn find<'a>(&self, id: &str, id_at: impl Fn(u16) -> Option<&'a str>) -> Option<(u16, u8)> {
        let h = fingerprint(id);
        let mut s = slot_of(h);
        loop {
            let ix = *self.slots.get(s)?;
            if ix == EMPTY {
                return None;
            }
            if self.fingerprints.get(usize::from(ix)) == Some(&h)
                && id_at(ix).is_some_and(|x| same_text(x, id))
            {
                return Some((ix, *self.ranks.get(usize::from(ix))?));
            }
            s = (s + 1) & (SLOTS - 1);
        }
    }
}

fn too_many_components(n: usize) -> Rejection {
    Rejection::new(
        ReasonCode::TOO_MANY_COMPONENTS,
        Vec::new(),
        format!("{n} components; the limit is {MAX_COMPONENTS}"),
    )
}

/// The component ids of a raw response, against which [`build_component`] resolves its
/// components' prerequisites.
pub struct ResponseIds<'r> {
    ids: heapless::Vec<&'r str, MAX_COMPONENTS>,
    index: IdIndex,
}

impl<'r> ResponseIds<'r> {
    /// The ids of `components`.
    ///
    /// # Errors
    /// `TOO_MANY_COMPONENTS` beyond the limit.
    pub fn new(components: &'r [RawComponent<'_>]) -> Result<ResponseIds<'r>, Rejection> {
        if components.len() > MAX_COMPONENTS {
            return Err(too_many_components(components.len()));
        }
        // Cannot overflow: the count was refused above otherwise.
        let ids: heapless::Vec<&str, MAX_COMPONENTS> = components.iter().map(|c| &*c.id).collect();
        let index = IdIndex::new(&ids);
        Ok(ResponseIds { ids, index })
    }
}

impl Parents for ResponseIds<'_> {
    fn resolve(&self, id: &str) -> Option<(u16, u8)> {
        self.index
            .find(id, |ix| self.ids.get(usize::from(ix)).copied())
    }
}

/// The validated, acyclic, phase-labelled response graph.
///
/// Adjacency is stored compressed (one flat array plus offsets), and `topo` lists every
/// component with parents before children.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    comps: Vec<Component>,
    parent_off: Vec<u32>,
    parents: Vec<(u16, Phase)>,
    child_off: Vec<u32>,
    children: Vec<u16>,
    topo: Vec<u16>,
    /// Per component, every transitive dependent as a bit set (computed once, in reverse
    /// topological order), so [`Graph::descendants`] is an OR over its roots.
    below: Vec<u64>,
    index: IdIndex,
}

impl Parents for Graph {
    fn resolve(&self, id: &str) -> Option<(u16, u8)> {
        self.index.find(id, |ix| {
            self.comps.get(usize::from(ix)).map(|c| c.id.as_str())
        })
    }
}

impl Graph {
    /// Builds and checks the graph over `comps`, whose prerequisites were resolved against
    /// these components in this order (as [`ResponseIds`] over the raw response or this
    /// [`Graph`] for a replacement do).
    ///
    /// # Errors
    /// `EMPTY_RESPONSE`, `TOO_MANY_COMPONENTS`, `DUPLICATE_ID`, `SELF_REFERENCE`,
    /// `MISSING_REFERENCE`, `DUPLICATE_PREREQUISITE`, `PHASE_NOT_ALLOWED` or `CYCLE`, with the
    /// offending ids.
    pub fn build(cat: &Catalog, comps: Vec<Component>) -> Result<Graph, Rejection> {
        if comps.len() > MAX_COMPONENTS {
            return Err(too_many_components(comps.len()));
        }
        let index = {
            // Cannot overflow: the count was refused above otherwise.
            let ids: heapless::Vec<&str, MAX_COMPONENTS> =
                comps.iter().map(|c| c.id.as_str()).collect();
            IdIndex::new(&ids)
        };
        Graph::assemble(cat, comps, index)
    }

    /// [`Graph::build`] with the index over the components' ids already made, by stage: ids
    /// unique, every prerequisite resolved and allowed (the edges), the children, then a
    /// topological order (or the cycle named).
    fn assemble(cat: &Catalog, comps: Vec<Component>, index: IdIndex) -> Result<Graph, Rejection> {
        let n = comps.len();
        if n == 0 {
            return Err(Rejection::new(
                ReasonCode::EMPTY_RESPONSE,
                Vec::new(),
                "the response has no components",
            ));
        }
        if n > MAX_COMPONENTS {
            return Err(too_many_components(n));
        }
        if index.duplicated {
            return Err(duplicate_ids(&comps, &index));
        }
        let e = edges(cat, &comps)?;
        let (child_off, children) = children_of(n, &e);
        let mut remaining = e.indeg;
        let Some(topo) = topological(n, &mut remaining, &child_off, &children) else {
            return Err(cycle(&comps, &remaining, &child_off, &children));
        };
        let below = transitive_dependents(&topo, &child_off, &children);
        Ok(Graph {
            comps,
            parent_off: e.parent_off,
            parents: e.parents,
            child_off,
            children,
            topo,
            below,
            index,
        })
    }

    /// Number of components `|V|`.
    pub fn len(&self) -> usize {
        self.comps.len()
    }
    /// Never true for a built graph; present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.comps.is_empty()
    }
    /// Number of validated references `|D_φ|`.
    pub fn edge_count(&self) -> usize {
        self.parents.len()
    }
    /// All components in envelope order.
    pub fn components(&self) -> &[Component] {
        &self.comps
    }
    /// One component.
    pub fn component(&self, i: u16) -> Option<&Component> {
        self.comps.get(usize::from(i))
    }
    /// `D_φ(e)`: parents of `i` with required phases.
    pub fn parents(&self, i: u16) -> &[(u16, Phase)] {
        let a = self.parent_off.get(usize::from(i)).copied().unwrap_or(0) as usize;
        let b = self
            .parent_off
            .get(usize::from(i) + 1)
            .copied()
            .unwrap_or(0) as usize;
        self.parents.get(a..b).unwrap_or(&[])
    }
    /// Direct dependents of `i`.
    pub fn children(&self, i: u16) -> &[u16] {
        let a = self.child_off.get(usize::from(i)).copied().unwrap_or(0) as usize;
        let b = self.child_off.get(usize::from(i) + 1).copied().unwrap_or(0) as usize;
        self.children.get(a..b).unwrap_or(&[])
    }
    /// Parents before children.
    pub fn topo(&self) -> &[u16] {
        &self.topo
    }
    /// The index of a component id.
    pub fn index_of(&self, id: &Id) -> Option<u16> {
        self.resolve(id.as_str()).map(|(ix, _)| ix)
    }
    /// Every transitive dependent of the given roots (roots excluded unless reachable from
    /// another root), as a bit set over component indices.
    pub fn descendants(&self, roots: u64) -> u64 {
        let mut seen = 0u64;
        let mut r = roots;
        while r != 0 {
            let i = r.trailing_zeros() as usize;
            r &= r - 1;
            seen |= self.below.get(i).copied().unwrap_or(0);
        }
        seen
    }
    /// Replaces one component (fresh readmission); the caller rebuilds the graph to revalidate.
    pub fn into_components(self) -> Vec<Component> {
        self.comps
    }
}

/// A validated response: identity plus graph.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedResponse {
    /// Response id.
    pub response_id: Id,
    /// Agent id.
    pub agent_id: Id,
    /// The agent's generation counter.
    pub generation: u64,
    /// The graph.
    pub graph: Graph,
}

/// Checks the catalog reference.
///
/// # Errors
/// `CATALOG_MISMATCH`.
pub fn check_catalog_ref(cat: &Catalog, r: &CatalogRef) -> Result<(), Rejection> {
    if r.id != cat.id().as_str() || r.version != cat.version() {
        return Err(Rejection::new(
            ReasonCode::CATALOG_MISMATCH,
            Vec::new(),
            format!(
                "the response names catalog `{}` v{}; loaded is `{}` v{}",
                r.id,
                r.version,
                cat.id(),
                cat.version()
            ),
        ));
    }
    Ok(())
}

/// Validates a whole raw response (stage two).
///
/// # Errors
/// A [`Rejection`]; see the module documentation for the checks and their order.
pub fn validate(cat: &Catalog, raw: &RawResponse<'_>) -> Result<ValidatedResponse, Rejection> {
    let response_id = id_of(&raw.response_id)?;
    let agent_id = id_of(&raw.agent_id)?;
    check_catalog_ref(cat, &raw.catalog)?;
    let ids = ResponseIds::new(&raw.components)?;
    let mut buf = Vec::with_capacity(256);
    let mut comps = Vec::with_capacity(raw.components.len());
    for c in &raw.components {
        build_component_into(cat, c, &ids, &mut buf, &mut comps)?;
    }
    let graph = Graph::assemble(cat, comps, ids.index)?;
    Ok(ValidatedResponse {
        response_id,
        agent_id,
        generation: raw.generation,
        graph,
    })
}

/// A response's prerequisite edges: each component's parents (compressed), and the degrees.
struct Edges {
    parent_off: Vec<u32>,
    parents: Vec<(u16, Phase)>,
    /// In- and out-degrees, at most [`MAX_COMPONENTS`] of each (refused before otherwise).
    indeg: [u32; MAX_COMPONENTS],
    outdeg: [u32; MAX_COMPONENTS],
}

/// The ids that appear twice, named in fingerprint order, each once.
fn duplicate_ids(comps: &[Component], index: &IdIndex) -> Rejection {
    let mut by_fp: Vec<(u64, u16)> = index.fingerprints.iter().copied().zip(0u16..).collect();
    by_fp.sort_unstable();
    let id_at = |ix: u16| comps.get(usize::from(ix)).map(|c| &c.id);
    let mut dups: Vec<String> = Vec::new();
    for (k, &(h, a)) in by_fp.iter().enumerate() {
        for &(h2, b) in by_fp.get(k + 1..).unwrap_or(&[]) {
            if h2 != h {
                break;
            }
            if let (Some(x), Some(y)) = (id_at(a), id_at(b))
                && x == y
                && !dups.contains(&x.to_string())
            {
                dups.push(x.to_string());
            }
        }
    }
    Rejection::new(
        ReasonCode::DUPLICATE_ID,
        dups,
        "component ids must be unique",
    )
}

/// The references, in envelope order, each component's by parent: every prerequisite must name
/// another component of the response, once, of a type and phase the catalog allows. The
/// problems are reported in this precedence: self references, missing, repeated, phases.
fn edges(cat: &Catalog, comps: &[Component]) -> Result<Edges, Rejection> {
    let n = comps.len();
    let mut parent_off = Vec::with_capacity(n + 1);
    let mut parents = Vec::with_capacity(comps.iter().map(|c| c.requires.len()).sum());
    let mut indeg = [0u32; MAX_COMPONENTS];
    let mut outdeg = [0u32; MAX_COMPONENTS];
    let mut problems: [Vec<String>; 4] = Default::default();
    for (i, c) in comps.iter().enumerate() {
        parent_off.push(u32::try_from(parents.len()).unwrap_or(u32::MAX));
        let spec = cat.type_spec(c.ty);
        let mut prev: Option<u16> = None;
        for &(p, phase) in &c.requires {
            if usize::from(p) == i {
                problems[0].push(c.id.to_string());
                continue;
            }
            let Some(parent) = comps.get(usize::from(p)) else {
                // Resolved against other components than these: a caller's mistake.
                problems[1].push(format!("{}->#{p}", c.id));
                continue;
            };
            if prev == Some(p) {
                problems[2].push(format!("{}->{}", c.id, parent.id));
                continue;
            }
            prev = Some(p);
            let allowed = spec.is_some_and(|s| s.allows(parent.ty, phase));
            if !allowed {
                problems[3].push(format!(
                    "{}->{}@{}",
                    c.id,
                    parent.id,
                    phase.prerequisite_name()
                ));
                continue;
            }
            parents.push((p, phase));
            if let Some(d) = indeg.get_mut(i) {
                *d += 1;
            }
            if let Some(d) = outdeg.get_mut(usize::from(p)) {
                *d += 1;
            }
        }
        let mut prev: Option<&Id> = None;
        for (pid, _) in &c.unresolved {
            if prev == Some(pid) {
                problems[2].push(format!("{}->{}", c.id, pid));
                continue;
            }
            prev = Some(pid);
            problems[1].push(format!("{}->{}", c.id, pid));
        }
    }
    parent_off.push(u32::try_from(parents.len()).unwrap_or(u32::MAX));
    let [selfs, missing, dupes, phases] = problems;
    let refused = [
        (
            ReasonCode::SELF_REFERENCE,
            selfs,
            "a component cannot require itself",
        ),
        (
            ReasonCode::MISSING_REFERENCE,
            missing,
            "prerequisites must name components of the same response",
        ),
        (
            ReasonCode::DUPLICATE_PREREQUISITE,
            dupes,
            "a prerequisite is named twice",
        ),
        (
            ReasonCode::PHASE_NOT_ALLOWED,
            phases,
            "the catalog does not allow these prerequisite types and phases",
        ),
    ];
    for (code, ids, message) in refused {
        if !ids.is_empty() {
            return Err(Rejection::new(code, ids, message));
        }
    }
    Ok(Edges {
        parent_off,
        parents,
        indeg,
        outdeg,
    })
}

/// The children of every component (the reverse adjacency), compressed.
fn children_of(n: usize, e: &Edges) -> (Vec<u32>, Vec<u16>) {
    let mut child_off = Vec::with_capacity(n + 1);
    let mut acc = 0u32;
    for d in e.outdeg.iter().take(n) {
        child_off.push(acc);
        acc += d;
    }
    child_off.push(acc);
    let mut fill = [0u32; MAX_COMPONENTS];
    for (f, &o) in fill.iter_mut().zip(&child_off) {
        *f = o;
    }
    let mut children = vec![0u16; e.parents.len()];
    for c in 0..n {
        let (a, b) = (
            e.parent_off.get(c).copied().unwrap_or(0),
            e.parent_off.get(c + 1).copied().unwrap_or(0),
        );
        for &(p, _) in e.parents.get(a as usize..b as usize).unwrap_or(&[]) {
            if let Some(slot) = fill.get_mut(usize::from(p)) {
                if let Some(ch) = children.get_mut(*slot as usize) {
                    *ch = u16::try_from(c).unwrap_or(u16::MAX);
                }
                *slot += 1;
            }
        }
    }
    (child_off, children)
}

/// Per node, the bit set of its transitive dependents: children are finished before their
/// parents when `topo` is walked backwards.
fn transitive_dependents(topo: &[u16], child_off: &[u32], children: &[u16]) -> Vec<u64> {
    let mut below = vec![0u64; topo.len()];
    for &u in topo.iter().rev() {
        let (a, b) = (
            child_off.get(usize::from(u)).copied().unwrap_or(0),
            child_off.get(usize::from(u) + 1).copied().unwrap_or(0),
        );
        let mut m = 0u64;
        for &ch in children.get(a as usize..b as usize).unwrap_or(&[]) {
            m |= (1u64 << ch) | below.get(usize::from(ch)).copied().unwrap_or(0);
        }
        if let Some(slot) = below.get_mut(usize::from(u)) {
            *slot = m;
        }
    }
    below
}

/// Kahn's algorithm over the in-degrees `remaining`: parents before children. `None` on a
/// cycle, with the in-degrees left over in `remaining` (nodes on a cycle and nodes below one
/// keep theirs).
fn topological(
    n: usize,
    remaining: &mut [u32; MAX_COMPONENTS],
    child_off: &[u32],
    children: &[u16],
) -> Option<Vec<u16>> {
    let mut topo = Vec::with_capacity(n);
    for (i, d) in remaining.iter().enumerate().take(n) {
        if *d == 0 {
            topo.push(u16::try_from(i).unwrap_or(u16::MAX));
        }
    }
    let mut head = 0;
    while let Some(&u) = topo.get(head) {
        head += 1;
        let (a, b) = (
            child_off.get(usize::from(u)).copied().unwrap_or(0),
            child_off.get(usize::from(u) + 1).copied().unwrap_or(0),
        );
        for &ch in children.get(a as usize..b as usize).unwrap_or(&[]) {
            if let Some(d) = remaining.get_mut(usize::from(ch)) {
                *d -= 1;
                if *d == 0 {
                    topo.push(ch);
                }
            }
        }
    }
    (topo.len() == n).then_some(topo)
}

/// The cycle, named: of the nodes Kahn's algorithm left over, those below the cycle (no
/// left-over child) are peeled off until only the cycle's remain.
fn cycle(
    comps: &[Component],
    remaining: &[u32; MAX_COMPONENTS],
    child_off: &[u32],
    children: &[u16],
) -> Rejection {
    let n = comps.len();
    let mut left: Vec<bool> = remaining.iter().take(n).map(|d| *d > 0).collect();
    loop {
        let mut peeled = false;
        for u in 0..n {
            if !left.get(u).copied().unwrap_or(false) {
                continue;
            }
            let (a, b) = (
                child_off.get(u).copied().unwrap_or(0),
                child_off.get(u + 1).copied().unwrap_or(0),
            );
            let has_left_child = children
                .get(a as usize..b as usize)
                .unwrap_or(&[])
                .iter()
                .any(|&c| left.get(usize::from(c)).copied().unwrap_or(false));
            if !has_left_child {
                if let Some(l) = left.get_mut(u) {
                    *l = false;
                }
                peeled = true;
            }
        }
        if !peeled {
            break;
        }
    }
    let stuck: Vec<String> = left
        .iter()
        .enumerate()
        .filter(|(_, l)| **l)
        .filter_map(|(i, _)| comps.get(i).map(|c| c.id.to_string()))
        .collect();
    Rejection::new(ReasonCode::CYCLE, stuck, "the prerequisites form a cycle")
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::envelope::parse_envelope;

    /// The canonical form as a struct for postcard: the reference `canonical_digest` must
    /// reproduce byte for byte.
    #[derive(Serialize)]
    struct Reference<'a> {
        id: &'a str,
        ty: &'a str,
        payload: &'a Payload,
        requires: Vec<(&'a str, &'static str)>,
        claims: Vec<(&'a str, Option<u64>, Option<&'a str>)>,
        certificate: Option<&'a str>,
    }

    fn reference(cat: &Catalog, g: &Graph, c: &Component) -> Digest {
        let r = Reference {
            id: c.id.as_str(),
            ty: cat.type_spec(c.ty).map_or("", |t| t.name.as_str()),
            payload: &c.payload,
            requires: c
                .requires
                .iter()
                .map(|&(p, q)| (g.component(p).unwrap().id.as_str(), q.prerequisite_name()))
                .collect(),
            claims: c
                .claims
                .iter()
                .map(|(s, cl)| {
                    (
                        cat.source(*s).map_or("", |x| x.name.as_str()),
                        cl.epoch,
                        cl.provenance.as_ref().map(Id::as_str),
                    )
                })
                .collect(),
            certificate: c.certificate.as_ref().map(Id::as_str),
        };
        Digest::of(tag::COMPONENT, &[&postcard::to_allocvec(&r).unwrap()])
    }

    #[test]
    fn the_written_canonical_form_is_postcards() {
        let cat =
            Catalog::parse(include_str!("../../catalogs/uav-px4.toml"), "uav-px4.toml").unwrap();
        let long = "x".repeat(200);
        let text = format!(
            r#"{{"response_id":"r","agent_id":"a","generation":1,
            "catalog":{{"id":"{}","version":{}}},
            "components":[
              {{"id":"a1","type":"route_action","certificate":"cert-{}",
                "payload":{{"frame":"local_ned","north_m":1.5,"east_m":-2,"down_m":-10,
                            "yaw_deg":90,"duration_s":6}},
                "support":{{"map":{{"epoch":18446744073709551615}},"traffic":{{"epoch":200}},
                            "bounds":{{"epoch":3,"provenance":"corridor-12"}}}}}},
              {{"id":"n1","type":"notice","payload":{{"text":"{long}"}}}},
              {{"id":"r1","type":"report","payload":{{"sensor":"z_range","value":1.0}}}},
              {{"id":"s1","type":"status","payload":{{"text":"ok"}},
                "requires":[{{"id":"r1","phase":"emitted"}},{{"id":"n1","phase":"emitted"}},
                            {{"id":"a1","phase":"dispatched"}}]}}]}}"#,
            cat.id(),
            cat.version(),
            "x".repeat(59),
        );
        let raw = parse_envelope(text.as_bytes()).unwrap();
        let v = validate(&cat, &raw).unwrap();
        for i in 0..4 {
            let c = v.graph.component(i).unwrap();
            assert_eq!(c.digest, reference(&cat, &v.graph, c), "component {}", c.id);
        }
    }

    /// A response of notices `ids` (in that order) and one status `s` requiring `requires`.
    fn response_text(cat: &Catalog, ids: &[&str], requires: &[&str]) -> String {
        let mut comps: Vec<String> = ids
            .iter()
            .map(|id| format!(r#"{{"id":"{id}","type":"notice","payload":{{"text":"n"}}}}"#))
            .collect();
        let reqs: Vec<String> = requires
            .iter()
            .map(|id| format!(r#"{{"id":"{id}","phase":"emitted"}}"#))
            .collect();
        comps.push(format!(
            r#"{{"id":"s","type":"status","payload":{{"text":"ok"}},"requires":[{}]}}"#,
            reqs.join(",")
        ));
        format!(
            r#"{{"response_id":"r","agent_id":"a","generation":1,"catalog":{{"id":"{}","version":{}}},"components":[{}]}}"#,
            cat.id(),
            cat.version(),
            comps.join(",")
        )
    }

    #[test]
    fn prerequisites_resolve_to_their_parents_in_id_order() {
        let cat =
            Catalog::parse(include_str!("../../catalogs/uav-px4.toml"), "uav-px4.toml").unwrap();
        // Ids alike in their first eight bytes, a prefix of another, and one past them all.
        let ids = [
            "notice-long-b",
            "notice-long-a",
            "notice-l",
            "zz",
            "notice-long-a2",
        ];
        let sent = [
            "zz",
            "notice-long-a2",
            "notice-long-b",
            "notice-l",
            "notice-long-a",
        ];
        let text = response_text(&cat, &ids, &sent);
        let raw = parse_envelope(text.as_bytes()).unwrap();
        let v = validate(&cat, &raw).unwrap();
        let s = v.graph.component(5).unwrap();
        let named: Vec<&str> = s
            .requires
            .iter()
            .map(|&(p, _)| v.graph.component(p).unwrap().id.as_str())
            .collect();
        let mut sorted = sent.to_vec();
        sorted.sort_unstable();
        assert_eq!(named, sorted);
        assert!(s.unresolved.is_empty());
        assert_eq!(s.digest, reference(&cat, &v.graph, s));
        for (i, id) in ids.iter().enumerate() {
            let i = u16::try_from(i).unwrap();
            assert_eq!(v.graph.index_of(&id.parse().unwrap()), Some(i));
        }
        assert_eq!(v.graph.index_of(&"notice-long".parse().unwrap()), None);
    }

    #[test]
    fn a_missing_parent_is_named_and_the_digest_does_not_depend_on_it() {
        let cat =
            Catalog::parse(include_str!("../../catalogs/uav-px4.toml"), "uav-px4.toml").unwrap();
        let sent = ["n2", "gone", "n1", "gone"];
        let whole = response_text(&cat, &["n1", "n2", "gone"], &sent);
        let partial = response_text(&cat, &["n1", "n2"], &sent);
        let (whole, partial) = (
            parse_envelope(whole.as_bytes()).unwrap(),
            parse_envelope(partial.as_bytes()).unwrap(),
        );
        let mut buf = Vec::new();
        let ids = ResponseIds::new(&whole.components).unwrap();
        let resolved = build_component(&cat, &whole.components[3], &ids, &mut buf).unwrap();
        let ids = ResponseIds::new(&partial.components).unwrap();
        let missing = build_component(&cat, &partial.components[2], &ids, &mut buf).unwrap();
        assert_eq!(missing.digest, resolved.digest);
        assert_eq!(missing.requires, [(0, Phase::Emitted), (1, Phase::Emitted)]);
        let gone: Vec<&str> = missing.unresolved.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(gone, ["gone", "gone"]);

        // Missing outranks the repeated name; each missing parent is named once.
        let e = validate(&cat, &partial).unwrap_err();
        assert_eq!(e.code(), ReasonCode::MISSING_REFERENCE);
        assert_eq!(e.ids(), ["s->gone".to_string()]);
        let e = validate(&cat, &whole).unwrap_err();
        assert_eq!(e.code(), ReasonCode::DUPLICATE_PREREQUISITE);
        assert_eq!(e.ids(), ["s->gone".to_string()]);
    }

    /// `descendants` (an OR of per-node masks computed at build) against a search over the
    /// children lists, on seeded random graphs of 1 to 64 nodes and random root sets.
    #[test]
    fn descendants_are_every_node_reachable_from_a_root() {
        let cat = Catalog::parse(
            include_str!("../tests/data/catalogs/graph.toml"),
            "graph.toml",
        )
        .unwrap();
        let mut rng = crate::testing::Rng(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next();
        for round in 0..200 {
            let n = 1 + (next() % 64) as usize;
            let comps: Vec<String> = (0..n)
                .map(|i| {
                    let mut parents: Vec<usize> = (0..i).filter(|_| next() % 4 == 0).collect();
                    parents.truncate(16);
                    let reqs: Vec<String> = parents
                        .iter()
                        .map(|p| format!(r#"{{"id":"n{p}","phase":"emitted"}}"#))
                        .collect();
                    format!(
                        r#"{{"id":"n{i}","type":"node","payload":{{"text":"t"}},"requires":[{}]}}"#,
                        reqs.join(",")
                    )
                })
                .collect();
            let text = format!(
                r#"{{"response_id":"r","agent_id":"a","generation":1,"catalog":{{"id":"{}","version":{}}},"components":[{}]}}"#,
                cat.id(),
                cat.version(),
                comps.join(",")
            );
            let raw = parse_envelope(text.as_bytes()).unwrap();
            let g = validate(&cat, &raw).unwrap().graph;
            for _ in 0..20 {
                let roots = next() & next() & if n == 64 { u64::MAX } else { (1 << n) - 1 };
                let mut seen = 0u64;
                let mut stack: Vec<u16> = (0..n as u16).filter(|i| roots & (1 << i) != 0).collect();
                while let Some(u) = stack.pop() {
                    for &c in g.children(u) {
                        if seen & (1 << c) == 0 {
                            seen |= 1 << c;
                            stack.push(c);
                        }
                    }
                }
                assert_eq!(
                    g.descendants(roots),
                    seen,
                    "round {round}, roots {roots:#x}"
                );
            }
        }
    }
}
