//! Admission witnesses, exact action bindings, one-dispatch tokens and the token ledger.
//!
//! - `β_e(C_{t_a})`, the stable support projection: per footprint source its identity, epoch
//!   and provenance, and the certificate's identity. Never clock time or age.
//! - `W_e = CanonWitness_K(d_e, β_e, certificate_e, v_K)`, hashed with its own tag.
//! - `b_e = H(W_e, seq_e)`, where `seq_e = (boot epoch, counter)` is never reused.
//! - A [`DispatchToken`] is bound to (component, digest, generation, sequence, boot epoch) and
//!   authorizes at most one adapter call. It is move-only: the gate consumes it. Its wire form
//!   exists so that a persisted or replayed token can be presented, and refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::catalog::{Catalog, SourceIx, TypeIx, TypeSpec};
use super::digest::{self, Digest, Message, put_str, put_varint, tag};
use super::graph::Component;
use super::ids::Id;
use super::reason::ReasonCode;
use super::state::Snapshot;

/// A sequence identity: boot epoch and a counter that never repeats within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Seq {
    /// Boot epoch at minting.
    pub boot: u64,
    /// Counter within the boot.
    pub n: u64,
}

impl std::fmt::Display for Seq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.boot, self.n)
    }
}

/// One source in the stable projection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StableSource {
    /// Source index.
    pub source: u8,
    /// Epoch at admission.
    pub epoch: u64,
    /// Provenance at admission.
    pub provenance: Id,
}

/// Certificate identity in the stable projection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StableCert {
    /// Certificate id.
    pub id: Id,
    /// Digest it covers.
    pub covers: Digest,
    /// Issuer.
    pub issuer: Id,
}

/// The admission witness `W_e`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Witness {
    /// `d_e`.
    pub digest: Digest,
    /// `β_e`, in footprint order (shared by the witnesses of one type captured from the same
    /// state, see [`Projections`]).
    pub sources: Arc<[StableSource]>,
    /// Certificate identity.
    pub certificate: Option<StableCert>,
    /// Catalog id.
    pub catalog: Id,
    /// `v_K`.
    pub catalog_version: u32,
}

/// The stable projection `β` of the footprint of the type captured last, kept with the state's
/// [`Snapshot::stamp`] it was read at: an admission binds its actions one by one from one state,
/// and actions of one type share their projection (the six route actions of an agent's response
/// read 13 sources each) instead of copying it again.
#[derive(Debug, Default)]
pub struct Projections {
    kept: Option<(TypeIx, u64, Arc<[StableSource]>)>,
}

impl Projections {
    /// `β` of type `ty`'s footprint in `snap`: the one kept when it was read from the same state,
    /// or read now (and kept).
    fn of(&mut self, ty: TypeIx, spec: &TypeSpec, snap: &Snapshot) -> Arc<[StableSource]> {
        if let Some((t, stamp, sources)) = &self.kept
            && *t == ty
            && *stamp == snap.stamp()
        {
            return Arc::clone(sources);
        }
        let sources: Arc<[StableSource]> = project(spec, snap).into();
        self.kept = Some((ty, snap.stamp(), Arc::clone(&sources)));
        sources
    }
}

/// `β` of `spec`'s footprint in `snap`. Sources that were never updated are left out.
fn project(spec: &TypeSpec, snap: &Snapshot) -> Vec<StableSource> {
    spec.footprint
        .iter()
        .filter_map(|&(s, _)| {
            snap.source(s).map(|st| StableSource {
                source: s.0,
                epoch: st.epoch,
                provenance: st.provenance.clone(),
            })
        })
        .collect()
}

impl Witness {
    /// Builds the witness from the current state. Sources that were never updated are left out
    /// (such a component is not locally supported and gets no binding).
    pub fn capture(cat: &Catalog, spec: &TypeSpec, c: &Component, snap: &Snapshot) -> Witness {
        Witness::with_sources(cat, project(spec, snap).into(), c, snap)
    }

    /// [`Witness::capture`], with the projection taken from (and kept in) `kept`.
    pub fn capture_sharing(
        cat: &Catalog,
        spec: &TypeSpec,
        c: &Component,
        snap: &Snapshot,
        kept: &mut Projections,
    ) -> Witness {
        Witness::with_sources(cat, kept.of(c.ty, spec, snap), c, snap)
    }

    fn with_sources(
        cat: &Catalog,
        sources: Arc<[StableSource]>,
        c: &Component,
        snap: &Snapshot,
    ) -> Witness {
        let certificate = c
            .certificate
            .as_ref()
            .and_then(|id| snap.certificate(id))
            .map(|cert| StableCert {
                id: cert.id.clone(),
                covers: cert.covers,
                issuer: cert.issuer.clone(),
            });
        Witness {
            digest: c.digest,
            sources,
            certificate,
            catalog: cat.id().clone(),
            catalog_version: cat.version(),
        }
    }

    /// `H(W_e)`: SHA-256 over the witness's postcard bytes, written here directly (the test
    /// below holds them to postcard's encoding of this struct).
    pub fn hash(&self, buf: &mut Vec<u8>) -> Digest {
        let mut m = Message::new(buf, tag::WITNESS);
        let buf = m.buf();
        buf.extend_from_slice(&self.digest.0);
        put_varint(buf, self.sources.len() as u64);
        for s in self.sources.iter() {
            buf.push(s.source);
            put_varint(buf, s.epoch);
            put_str(buf, s.provenance.as_str());
        }
        match &self.certificate {
            Some(c) => {
                buf.push(1);
                put_str(buf, c.id.as_str());
                buf.extend_from_slice(&c.covers.0);
                put_str(buf, c.issuer.as_str());
            }
            None => buf.push(0),
        }
        put_str(buf, self.catalog.as_str());
        put_varint(buf, u64::from(self.catalog_version));
        m.digest()
    }

    /// WitnessOK: the current stable projection equals the admitted one. Returns the first
    /// difference as a reason code, with the footprint source it concerns when there is one.
    /// Compares field by field, without allocating or hashing.
    pub fn check(
        &self,
        cat: &Catalog,
        spec: &TypeSpec,
        c: &Component,
        snap: &Snapshot,
    ) -> Result<(), (ReasonCode, Option<SourceIx>)> {
        if c.digest != self.digest {
            return Err((ReasonCode::TOKEN_MISMATCH, None));
        }
        if cat.version() != self.catalog_version || *cat.id() != self.catalog {
            return Err((ReasonCode::CATALOG_MISMATCH, None));
        }
        if spec.footprint.len() != self.sources.len() {
            return Err((ReasonCode::SOURCE_MISSING, None));
        }
        for (&(s, _), w) in spec.footprint.iter().zip(self.sources.iter()) {
            let Some(st) = snap.source(s) else {
                return Err((ReasonCode::SOURCE_MISSING, Some(s)));
            };
            if s.0 != w.source {
                return Err((ReasonCode::SOURCE_MISSING, Some(s)));
            }
            if st.epoch != w.epoch {
                return Err((ReasonCode::EPOCH_CHANGED, Some(s)));
            }
            if st.provenance != w.provenance {
                let code = if cat.source(s).is_some_and(|x| x.bounds) {
                    ReasonCode::BOUNDS_PROVENANCE_CHANGED
                } else {
                    ReasonCode::PROVENANCE_CHANGED
                };
                return Err((code, Some(s)));
            }
        }
        let now_cert = c.certificate.as_ref().and_then(|id| snap.certificate(id));
        match (&self.certificate, now_cert) {
            (None, None) => Ok(()),
            (Some(w), Some(n)) if w.id == n.id && w.covers == n.covers && w.issuer == n.issuer => {
                Ok(())
            }
            (Some(_), None) => Err((ReasonCode::CERTIFICATE_UNKNOWN, None)),
            _ => Err((ReasonCode::CERTIFICATE_NOT_BOUND, None)),
        }
    }
}

/// `b_e = H(W_e, seq_e)`.
pub fn binding(witness_hash: &Digest, seq: Seq) -> Digest {
    digest::of_short(
        tag::BINDING,
        &[
            &witness_hash.0,
            &seq.boot.to_le_bytes(),
            &seq.n.to_le_bytes(),
        ],
    )
}

/// A one-dispatch token. Not `Clone`: the final gate takes it by value.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchToken {
    response: Id,
    component: Id,
    digest: Digest,
    generation: u32,
    seq: Seq,
    binding: Digest,
}

/// A token's wire form could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenDecodeError {
    message: String,
}

impl std::fmt::Display for TokenDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable token: {}", self.message)
    }
}

impl std::error::Error for TokenDecodeError {}

impl DispatchToken {
    /// Response id.
    pub fn response(&self) -> &Id {
        &self.response
    }
    /// Component id.
    pub fn component(&self) -> &Id {
        &self.component
    }
    /// Bound digest.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }
    /// Admission generation.
    pub fn generation(&self) -> u32 {
        self.generation
    }
    /// Sequence identity.
    pub fn seq(&self) -> Seq {
        self.seq
    }
    /// `b_e`.
    pub fn binding(&self) -> &Digest {
        &self.binding
    }

    /// Encodes the token (postcard), e.g. to persist it or to replay it in tests.
    pub fn to_wire(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Decodes a token from its wire form. Decoding grants nothing: the gate checks every
    /// presented token against the ledger.
    ///
    /// # Errors
    /// [`TokenDecodeError`] on malformed bytes.
    pub fn from_wire(bytes: &[u8]) -> Result<DispatchToken, TokenDecodeError> {
        postcard::from_bytes(bytes).map_err(|e| TokenDecodeError {
            message: e.to_string(),
        })
    }
}

/// State of a minted token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TokenState {
    /// May still authorize one dispatch.
    Unused,
    /// Consumed by the gate.
    Used,
    /// Revoked (withheld, invalidated, superseded by a later generation).
    Revoked,
}

#[derive(Clone, Debug)]
struct Entry {
    response: Id,
    component: Id,
    digest: Digest,
    generation: u32,
    binding: Digest,
    state: TokenState,
}

/// The trusted authorization ledger: which tokens exist and whether each is fresh.
#[derive(Clone, Debug)]
pub struct Ledger {
    boot: u64,
    next: u64,
    entries: BTreeMap<u64, Entry>,
}

impl Ledger {
    /// A ledger for `boot`. The shell persists the boot epoch and bumps it on every start, so
    /// tokens minted before a restart carry an older epoch and are dead.
    pub fn new(boot: u64) -> Ledger {
        Ledger {
            boot,
            next: 0,
            entries: BTreeMap::new(),
        }
    }

    /// The current boot epoch.
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// Allocates an unused sequence.
    pub fn next_seq(&mut self) -> Seq {
        let n = self.next;
        self.next = self.next.saturating_add(1);
        Seq { boot: self.boot, n }
    }

    /// Records and returns a token for an admitted action instance.
    pub fn mint(
        &mut self,
        response: &Id,
        component: &Id,
        digest: Digest,
        generation: u32,
        seq: Seq,
        binding: Digest,
    ) -> DispatchToken {
        self.entries.insert(
            seq.n,
            Entry {
                response: response.clone(),
                component: component.clone(),
                digest,
                generation,
                binding,
                state: TokenState::Unused,
            },
        );
        DispatchToken {
            response: response.clone(),
            component: component.clone(),
            digest,
            generation,
            seq,
            binding,
        }
    }

    /// FreshAuth, ledger half: the token was minted in this boot, is unused, and matches its
    /// record exactly.
    ///
    /// # Errors
    /// `TOKEN_STALE_BOOT`, `TOKEN_UNKNOWN`, `SEQUENCE_REUSED`, `TOKEN_USED`, `TOKEN_REVOKED` or
    /// `TOKEN_MISMATCH`.
    pub fn check(&self, t: &DispatchToken) -> Result<(), ReasonCode> {
        if t.seq.boot != self.boot {
            return Err(ReasonCode::TOKEN_STALE_BOOT);
        }
        if t.seq.n >= self.next {
            return Err(ReasonCode::TOKEN_UNKNOWN);
        }
        let Some(e) = self.entries.get(&t.seq.n) else {
            // Minted in this boot and since retired with its response.
            return Err(ReasonCode::SEQUENCE_REUSED);
        };
        match e.state {
            TokenState::Used => return Err(ReasonCode::TOKEN_USED),
            TokenState::Revoked => return Err(ReasonCode::TOKEN_REVOKED),
            TokenState::Unused => {}
        }
        if e.response != t.response
            || e.component != t.component
            || e.digest != t.digest
            || e.generation != t.generation
            || e.binding != t.binding
        {
            return Err(ReasonCode::TOKEN_MISMATCH);
        }
        Ok(())
    }

    /// Marks a token used. Call only after [`Ledger::check`] passed.
    pub fn consume(&mut self, seq: Seq) {
        if let Some(e) = self.entries.get_mut(&seq.n) {
            e.state = TokenState::Used;
        }
    }

    /// Revokes a token if it is still unused.
    pub fn revoke(&mut self, seq: Seq) {
        if let Some(e) = self.entries.get_mut(&seq.n)
            && e.state == TokenState::Unused
        {
            e.state = TokenState::Revoked;
        }
    }

    /// Drops the record of a token whose response is gone; its sequence stays burnt.
    pub fn retire(&mut self, seq: Seq) {
        self.entries.remove(&seq.n);
    }

    /// State of a sequence, if recorded.
    pub fn state(&self, seq: Seq) -> Option<TokenState> {
        if seq.boot != self.boot {
            return None;
        }
        self.entries.get(&seq.n).map(|e| e.state)
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no records are held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A projection shared between witnesses is the one a capture reads now: for every
    /// component of a response, and again after an update changes a footprint source.
    #[test]
    fn a_shared_projection_is_the_one_captured_now() {
        let cat =
            Catalog::parse(include_str!("../../catalogs/uav-px4.toml"), "uav-px4.toml").unwrap();
        let st =
            crate::statefile::parse_state(&cat, include_bytes!("../../docs/examples/state.json"))
                .unwrap();
        let traffic = st
            .updates
            .iter()
            .find(|u| cat.source(u.source).unwrap().name.as_str() == "traffic")
            .unwrap()
            .clone();
        let mut snap = Snapshot::new(&cat);
        for u in st.updates {
            snap.apply(&cat, st.now, u).unwrap();
        }
        let route = |id: &str| {
            format!(
                r#"{{"id":"{id}","type":"route_action","certificate":"c-{id}",
                "payload":{{"frame":"local_ned","north_m":1,"east_m":2,"down_m":-10,
                "yaw_deg":0,"duration_s":5}}}}"#
            )
        };
        let text = format!(
            r#"{{"response_id":"r","agent_id":"a","generation":1,
            "catalog":{{"id":"{}","version":{}}},"components":[{},{},
            {{"id":"n","type":"notice","payload":{{"text":"hi"}}}},
            {{"id":"h","type":"hold","payload":{{"duration_s":2}}}}]}}"#,
            cat.id(),
            cat.version(),
            route("a1"),
            route("a2"),
        );
        let raw = crate::envelope::parse_envelope(text.as_bytes()).unwrap();
        let v = crate::graph::validate(&cat, &raw).unwrap();
        let mut kept = Projections::default();
        let mut check = |snap: &Snapshot, which: &[u16]| {
            let mut sources = Vec::new();
            for &i in which {
                let c = v.graph.component(i).unwrap();
                let spec = cat.type_spec(c.ty).unwrap();
                let shared = Witness::capture_sharing(&cat, spec, c, snap, &mut kept);
                assert_eq!(shared, Witness::capture(&cat, spec, c, snap), "{}", c.id);
                sources.push(shared.sources);
            }
            sources
        };
        // Every component, in order and back: the two route actions share one projection.
        let all = check(&snap, &[0, 1, 2, 3, 2, 1, 0]);
        assert!(Arc::ptr_eq(&all[0], &all[1]));
        assert!(Arc::ptr_eq(&all[5], &all[6]));
        // With a route action's projection kept, an update changes a source of its footprint:
        // the next capture reads the new state.
        let before = check(&snap, &[0]);
        let mut u = traffic;
        u.state.provenance = Id::new("utm-feed-b").unwrap();
        u.state.generated_at = st.now;
        snap.apply(&cat, st.now, u).unwrap();
        let after = check(&snap, &[0, 1]);
        assert_ne!(after[0], before[0], "the new provenance is read");
    }

    /// The hand-written bytes are postcard's: with and without a certificate, with one-byte
    /// and multi-byte varints, with no sources.
    #[test]
    fn the_witness_hash_covers_postcards_bytes() {
        let id = |s: &str| Id::new(s).unwrap();
        let mut w = Witness {
            digest: Digest([7; 32]),
            sources: Arc::from([
                StableSource {
                    source: 0,
                    epoch: 5,
                    provenance: id("map-v1"),
                },
                StableSource {
                    source: 200,
                    epoch: u64::MAX,
                    provenance: id(&"p".repeat(64)),
                },
                StableSource {
                    source: 3,
                    epoch: 300,
                    provenance: id("corridor-12"),
                },
            ]),
            certificate: Some(StableCert {
                id: id("cert-1"),
                covers: Digest([0xab; 32]),
                issuer: id("planner.ops"),
            }),
            catalog: id("uav-px4"),
            catalog_version: 70_000,
        };
        let postcard =
            |w: &Witness| Digest::of(tag::WITNESS, &[&postcard::to_allocvec(w).unwrap()]);
        let mut buf = Vec::new();
        assert_eq!(w.hash(&mut buf), postcard(&w));
        w.certificate = None;
        w.catalog_version = 5;
        assert_eq!(w.hash(&mut buf), postcard(&w));
        w.sources = Arc::from([]);
        assert_eq!(w.hash(&mut buf), postcard(&w));
    }
}
