//! Hash-linked receipts.
//!
//! Each receipt carries its index, the hash of the previous receipt, the decision instant and a
//! body; its hash is SHA-256 over a domain tag and the canonical JSON of
//! `{"at_ns", "body", "index", "prev"}` (keys sorted, no whitespace). Canonical JSON rather than
//! postcard so that an independent verifier can recompute every hash from the JSONL file alone,
//! without sharing this crate's types.
//!
//! Building a receipt is split in two: decisions push a body (cheap, inside critical sections),
//! and [`ReceiptChain::seal`] hashes and links it later, in push order, so the dispatch gate never
//! waits on hashing.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::canonical::write_u64;
use super::digest::{Digest, Message, tag};
use super::time::Nanos;

/// A receipt's record as canonical JSON text (keys sorted, no whitespace): exactly the bytes
/// its hash covers. Sealing writes it straight from the typed record
/// ([`super::canonical`]); reading a receipt from a log parses the body and writes it back in
/// canonical form, so a body whose keys were merely reordered still verifies, as it always has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body(String);

impl Body {
    /// The canonical text of `value`.
    pub fn from_value(value: &serde_json::Value) -> Body {
        Body::of(value)
    }

    /// The canonical text of any record (`null` when it has no JSON form, as the `Value`
    /// route gave).
    pub fn of<T: Serialize + ?Sized>(record: &T) -> Body {
        Body::written(256, |out| super::canonical::write(out, record))
    }

    /// The text `write` appends to an empty buffer of `capacity` bytes, or `null` when it
    /// fails.
    fn written(
        capacity: usize,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), super::canonical::Error>,
    ) -> Body {
        let mut out = Vec::with_capacity(capacity);
        if write(&mut out).is_err() {
            out.clear();
            out.extend_from_slice(b"null");
        }
        // Canonical JSON is UTF-8 by construction (serde_json writes strings as given).
        Body(String::from_utf8(out).unwrap_or_else(|_| "null".to_owned()))
    }

    /// The body as a JSON value.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Changes the body through its JSON value (tools and tests that forge receipts).
    pub fn edit(&mut self, f: impl FnOnce(&mut serde_json::Value)) {
        let mut v = self.value();
        f(&mut v);
        *self = Body::from_value(&v);
    }
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Body, D::Error> {
        serde_json::Value::deserialize(d).map(|v| Body::from_value(&v))
    }
}

/// A sealed receipt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Position in the chain, from 0.
    pub index: u64,
    /// Hash of the previous receipt (all zeros for the first).
    pub prev: Digest,
    /// Decision instant on the gateway's monotonic clock.
    pub at_ns: u64,
    /// The record, as canonical JSON.
    pub body: Body,
    /// Wall-clock time of the decision, Unix ms, when the shell knows it (format 2). Hashed
    /// when present, so a log written without it (format 1) verifies unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_unix_ms: Option<u64>,
    /// This receipt's hash.
    pub hash: Digest,
}

impl Receipt {
    /// The bytes hashed into [`Receipt::hash`].
    pub fn hash_input(index: u64, prev: &Digest, at_ns: u64, body: &serde_json::Value) -> Vec<u8> {
        Receipt::hash_input_wall(index, prev, at_ns, None, body)
    }

    /// The bytes hashed into [`Receipt::hash`], with the optional wall-clock time (format 2).
    pub fn hash_input_wall(
        index: u64,
        prev: &Digest,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: &serde_json::Value,
    ) -> Vec<u8> {
        Receipt::hash_input_canonical(index, prev, at_ns, wall_unix_ms, &Body::from_value(body))
    }

    /// The hashed bytes: the canonical JSON of `{"at_ns", "body", "index", "prev"}` plus
    /// `"wall_unix_ms"` when present (keys in that, sorted, order).
    fn hash_input_canonical(
        index: u64,
        prev: &Digest,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: &Body,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(body.0.len() + 160);
        Receipt::write_hash_input(&mut out, index, prev, at_ns, wall_unix_ms, body);
        out
    }

    /// Appends [`Receipt::hash_input_canonical`] to `out`.
    fn write_hash_input(
        out: &mut Vec<u8>,
        index: u64,
        prev: &Digest,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: &Body,
    ) {
        out.extend_from_slice(b"{\"at_ns\":");
        write_u64(out, at_ns);
        out.extend_from_slice(b",\"body\":");
        out.extend_from_slice(body.0.as_bytes());
        out.extend_from_slice(b",\"index\":");
        write_u64(out, index);
        out.extend_from_slice(b",\"prev\":\"");
        out.extend_from_slice(&prev.hex_bytes());
        out.push(b'"');
        if let Some(w) = wall_unix_ms {
            out.extend_from_slice(b",\"wall_unix_ms\":");
            write_u64(out, w);
        }
        out.push(b'}');
    }

    /// The receipt hash: SHA-256 over the tag and the hashed bytes, written after the tag into
    /// one buffer and hashed there. (Feeding the body to the hash in place, without this copy,
    /// measured slower for the common small receipts.)
    fn hash_of(
        index: u64,
        prev: &Digest,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: &Body,
    ) -> Digest {
        // The tag, the fixed keys, a hex digest and the numbers, and the padding, in 256 bytes.
        let mut buf = Vec::with_capacity(body.0.len() + 256);
        let mut m = Message::new(&mut buf, tag::RECEIPT);
        Receipt::write_hash_input(m.buf(), index, prev, at_ns, wall_unix_ms, body);
        m.digest()
    }

    /// Recomputes this receipt's hash from its fields.
    pub fn recompute(&self) -> Digest {
        Receipt::hash_of(
            self.index,
            &self.prev,
            self.at_ns,
            self.wall_unix_ms,
            &self.body,
        )
    }

    /// The receipt that follows `prev` (or starts a chain, when `None`) with `body`, sealed.
    pub fn next(
        prev: Option<&Receipt>,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: serde_json::Value,
    ) -> Receipt {
        let (index, prev) = prev.map_or((0, Digest::default()), |p| (p.index + 1, p.hash));
        Receipt::sealed(index, prev, at_ns, wall_unix_ms, Body::from_value(&body))
    }

    /// The receipt at `index` after the hash `prev`, with its hash computed.
    fn sealed(
        index: u64,
        prev: Digest,
        at_ns: u64,
        wall_unix_ms: Option<u64>,
        body: Body,
    ) -> Receipt {
        let hash = Receipt::hash_of(index, &prev, at_ns, wall_unix_ms, &body);
        Receipt {
            index,
            prev,
            at_ns,
            body,
            wall_unix_ms,
            hash,
        }
    }

    /// One JSON line: the fields in declaration order, the body's canonical text as is (the
    /// same bytes `serde_json` writes for this struct, without parsing the body again).
    pub fn to_json_line(&self) -> String {
        let mut out = Vec::with_capacity(self.body.0.len() + 200);
        out.extend_from_slice(b"{\"index\":");
        write_u64(&mut out, self.index);
        out.extend_from_slice(b",\"prev\":\"");
        out.extend_from_slice(&self.prev.hex_bytes());
        out.extend_from_slice(b"\",\"at_ns\":");
        write_u64(&mut out, self.at_ns);
        out.extend_from_slice(b",\"body\":");
        out.extend_from_slice(self.body.0.as_bytes());
        if let Some(w) = self.wall_unix_ms {
            out.extend_from_slice(b",\"wall_unix_ms\":");
            write_u64(&mut out, w);
        }
        out.extend_from_slice(b",\"hash\":\"");
        out.extend_from_slice(&self.hash.hex_bytes());
        out.extend_from_slice(b"\"}");
        // Only ASCII was added around a UTF-8 body.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// A signed checkpoint: the chain head it covers, how many receipts precede it, when, and an
/// Ed25519 signature by the gateway's audit key over [`Checkpoint::message`]. It is itself a
/// receipt in the chain (body `{"kind": "checkpoint", ...}`) whose `prev` is `head` and whose
/// `index` is `count`, so every receipt linked into `head` is covered by the signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Receipts before this one in the chain (this checkpoint's index).
    pub count: u64,
    /// Hash of the receipt before this one (all zeros when `count` is 0).
    pub head: Digest,
    /// Monotonic instant of signing, ns since the gateway's origin.
    pub at_ns: u64,
    /// Wall-clock instant of signing, Unix ms.
    pub wall_unix_ms: u64,
    /// True for the checkpoint written at a clean shutdown: nothing follows it.
    #[serde(rename = "final")]
    pub last: bool,
    /// The signer's Ed25519 public key, 64 hex digits.
    pub key: String,
    /// The signature over [`Checkpoint::message`], 128 hex digits.
    pub sig: String,
}

/// A receipt whose body says `"kind": "checkpoint"` but whose fields are not a checkpoint's
/// (serde_json's words for what is wrong).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotACheckpoint(pub String);

impl std::fmt::Display for NotACheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a checkpoint record that is not one: {}", self.0)
    }
}

impl std::error::Error for NotACheckpoint {}

impl Checkpoint {
    /// Domain tag of the signed message.
    pub const TAG: &'static [u8] = b"halo/checkpoint/v1\0";

    /// The signed bytes: the tag, then `count`, `head`, `at_ns`, `wall_unix_ms` (big-endian
    /// u64s; `head` as its 32 bytes) and one byte for `final`.
    pub fn message(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(Self::TAG.len() + 8 * 3 + 32 + 1);
        m.extend_from_slice(Self::TAG);
        m.extend_from_slice(&self.count.to_be_bytes());
        m.extend_from_slice(&self.head.0);
        m.extend_from_slice(&self.at_ns.to_be_bytes());
        m.extend_from_slice(&self.wall_unix_ms.to_be_bytes());
        m.push(u8::from(self.last));
        m
    }

    /// The checkpoint a receipt body holds, when it is one (`{"kind": "checkpoint", ...}`).
    ///
    /// # Errors
    /// [`NotACheckpoint`] when the body says it is a checkpoint but its fields are not one's.
    pub fn from_body(body: &Body) -> Result<Option<Checkpoint>, NotACheckpoint> {
        // Canonical text: a checkpoint's body has this exact member; most bodies do not.
        if !body.as_str().contains(r#""kind":"checkpoint""#) {
            return Ok(None);
        }
        let v = body.value();
        let Some(m) = v.as_object() else {
            return Ok(None);
        };
        if m.get("kind").and_then(serde_json::Value::as_str) != Some("checkpoint") {
            return Ok(None);
        }
        let mut m = m.clone();
        m.remove("kind");
        serde_json::from_value(serde_json::Value::Object(m))
            .map(Some)
            .map_err(|e| NotACheckpoint(e.to_string()))
    }

    /// This checkpoint as a receipt body.
    pub fn to_body(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.insert("kind".into(), "checkpoint".into());
        }
        v
    }
}

/// A chain under construction: pending records and the sealed tail.
#[derive(Clone, Debug)]
pub struct ReceiptChain<R> {
    next_index: u64,
    prev: Digest,
    pending: VecDeque<(Nanos, R)>,
    /// Capacity for the next body's text: the last one's length, plus a little.
    last_len: usize,
}

impl<R> Default for ReceiptChain<R> {
    fn default() -> Self {
        ReceiptChain {
            next_index: 0,
            prev: Digest::default(),
            pending: VecDeque::new(),
            last_len: 0,
        }
    }
}

/// A record a chain seals, as canonical JSON.
///
/// The default writes it through [`super::canonical::write`] from its `Serialize`. A record
/// that holds parts of its text already written (by the decision that made it) may write
/// itself instead, byte for byte what the default writes; its tests hold it to that.
pub trait CanonicalRecord: Serialize {
    /// Appends the record's canonical JSON to `out`.
    ///
    /// # Errors
    /// When the record has no JSON form.
    fn write_canonical(&self, out: &mut Vec<u8>) -> Result<(), super::canonical::Error> {
        super::canonical::write(out, self)
    }
}

/// Free-form records (tools, tests).
impl CanonicalRecord for serde_json::Value {}

impl<R: CanonicalRecord> ReceiptChain<R> {
    /// An empty chain.
    pub fn new() -> ReceiptChain<R> {
        ReceiptChain::default()
    }

    /// Queues a record. Nothing is serialized or hashed here, so decision paths stay cheap.
    pub fn push(&mut self, at: Nanos, body: R) {
        self.pending.push_back((at, body));
    }

    /// Makes room for at least `room` pending records in all (see [`VecDeque::reserve`]).
    pub fn reserve(&mut self, room: usize) {
        self.pending
            .reserve(room.saturating_sub(self.pending.len()));
    }

    /// The position the next pushed record will take among the pending ones, for
    /// [`ReceiptChain::insert_at`].
    pub fn mark(&self) -> usize {
        self.pending.len()
    }

    /// Queues a record at a position taken with [`ReceiptChain::mark`] (before records pushed
    /// since), so a cause is recorded before the effects that were decided first. Nothing may
    /// be sealed between the mark and the insert; a stale mark appends.
    pub fn insert_at(&mut self, mark: usize, at: Nanos, body: R) {
        let i = mark.min(self.pending.len());
        self.pending.insert(i, (at, body));
    }

    /// Serializes, hashes, links and returns the oldest pending record.
    pub fn seal(&mut self) -> Option<Receipt> {
        self.seal_with_wall(|_| None)
    }

    /// As [`ReceiptChain::seal`], stamping the wall-clock time `wall(at)` the shell maps the
    /// decision instant to (Unix ms).
    pub fn seal_with_wall(&mut self, wall: impl Fn(Nanos) -> Option<u64>) -> Option<Receipt> {
        let (at, record) = self.pending.pop_front()?;
        // Sized as the last body was when that was a common size (256 B to 4 KiB): a chain's
        // records are mostly alike, so the text is mostly written without regrowing. After an
        // unusually large one (an admission summary) the next starts small again.
        let capacity = match self.last_len {
            n @ 256..=4096 => n,
            _ => 256,
        };
        let body = Body::written(capacity, |out| record.write_canonical(out));
        self.last_len = body.0.len() + 16;
        let r = Receipt::sealed(self.next_index, self.prev, at.0, wall(at), body);
        self.next_index += 1;
        self.prev = r.hash;
        Some(r)
    }

    /// The hash of the last sealed receipt (zeros before the first) and the number sealed.
    pub fn head(&self) -> (Digest, u64) {
        (self.prev, self.next_index)
    }

    /// Records waiting to be sealed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The records waiting to be sealed, oldest first (tests compare their texts).
    #[cfg(test)]
    pub(crate) fn pending_records(&self) -> impl Iterator<Item = &R> {
        self.pending.iter().map(|(_, r)| r)
    }
}

/// Checks a sequence of receipts: indices count from 0, each `prev` is the previous hash, and
/// each hash recomputes. Returns the index of the first bad receipt.
///
/// # Errors
/// The index of the first receipt that does not verify, and why.
pub fn verify_chain<'a>(
    receipts: impl IntoIterator<Item = &'a Receipt>,
) -> Result<u64, (u64, &'static str)> {
    let mut prev = Digest::default();
    let mut n = 0u64;
    for r in receipts {
        if r.index != n {
            return Err((n, "index out of sequence"));
        }
        if r.prev != prev {
            return Err((n, "prev does not match the previous hash"));
        }
        if r.recompute() != r.hash {
            return Err((n, "hash does not recompute"));
        }
        prev = r.hash;
        n += 1;
    }
    Ok(n)
}

/// Checks a contiguous stretch of a chain that may start after index 0 (older files rotated
/// away): the first receipt's index and `prev` are taken as given, everything after is checked
/// as [`verify_chain`] does. Returns the first index and the count.
///
/// # Errors
/// The index of the first receipt that does not verify, and why.
pub fn verify_chain_from<'a>(
    receipts: impl IntoIterator<Item = &'a Receipt>,
) -> Result<(u64, u64), (u64, &'static str)> {
    let mut it = receipts.into_iter().peekable();
    let Some(first) = it.peek() else {
        return Ok((0, 0));
    };
    let start = first.index;
    let mut prev = first.prev;
    let mut n = 0u64;
    for r in it {
        let want = start + n;
        if r.index != want {
            return Err((want, "index out of sequence"));
        }
        if r.prev != prev {
            return Err((want, "prev does not match the previous hash"));
        }
        if r.recompute() != r.hash {
            return Err((want, "hash does not recompute"));
        }
        prev = r.hash;
        n += 1;
    }
    Ok((start, n))
}

/// One component's decision as an `admitted` or `readmitted` receipt records it, for readers
/// (`audit show`, `plot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedComponent {
    /// Component id.
    pub id: String,
    /// Catalog type name.
    pub ty: String,
    /// Phase, by its wire name.
    pub phase: String,
    /// Reason code, by name, when the decision has one.
    pub reason: Option<String>,
}

/// The components an `admitted` or `readmitted` receipt body records, in envelope order: from
/// receipt format 3's `{"decisions", "digest", "ids"}` (each decision once, with the positions
/// it was made for), or from the earlier formats' list of full component reports. Empty for any
/// other body; a position no decision names is left out.
pub fn recorded_components(body: &serde_json::Value) -> Vec<RecordedComponent> {
    use serde_json::Value;
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let one = |id: String, d: &Value| RecordedComponent {
        id,
        ty: text(d, "type").unwrap_or_default(),
        phase: text(d, "phase").unwrap_or_default(),
        reason: text(d, "reason"),
    };
    match body.get("components") {
        // Formats 1 and 2: one full report per component.
        Some(Value::Array(reports)) => reports
            .iter()
            .map(|c| one(text(c, "id").unwrap_or_default(), c))
            .collect(),
        // Format 3.
        Some(Value::Object(m)) => {
            let ids: Vec<&str> = m
                .get("ids")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|i| i.as_str().unwrap_or("")).collect())
                .unwrap_or_default();
            let mut slots: Vec<Option<RecordedComponent>> = vec![None; ids.len()];
            for d in m
                .get("decisions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for at in d.get("at").and_then(Value::as_array).into_iter().flatten() {
                    let at = at.as_u64().and_then(|x| usize::try_from(x).ok());
                    if let Some((slot, id)) = at.and_then(|a| slots.get_mut(a).zip(ids.get(a))) {
                        *slot = Some(one((*id).to_owned(), d));
                    }
                }
            }
            slots.into_iter().flatten().collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_links_and_detects_tampering() {
        let mut c = ReceiptChain::new();
        for i in 0..5u64 {
            c.push(Nanos(i * 10), serde_json::json!({"kind": "x", "i": i}));
        }
        let mut rs: Vec<Receipt> = std::iter::from_fn(|| c.seal()).collect();
        assert_eq!(verify_chain(&rs), Ok(5));
        rs[2].body = Body::from_value(&serde_json::json!({"kind": "x", "i": 99}));
        assert_eq!(verify_chain(&rs), Err((2, "hash does not recompute")));
        rs[2].hash = rs[2].recompute();
        assert_eq!(
            verify_chain(&rs),
            Err((3, "prev does not match the previous hash"))
        );
    }

    #[test]
    fn a_rotated_tail_verifies_from_its_first_index() {
        let mut c = ReceiptChain::new();
        for i in 0..6u64 {
            c.push(Nanos(i), serde_json::json!({"kind": "x", "i": i}));
        }
        let rs: Vec<Receipt> = std::iter::from_fn(|| c.seal()).collect();
        assert_eq!(verify_chain_from(&rs[2..]), Ok((2, 4)));
        assert!(
            verify_chain(&rs[2..]).is_err(),
            "the strict check wants index 0"
        );
        let mut gap: Vec<Receipt> = rs[2..].to_vec();
        gap.remove(1);
        assert_eq!(verify_chain_from(&gap), Err((3, "index out of sequence")));
    }

    #[test]
    fn wall_time_is_hashed_and_optional() {
        let mut c = ReceiptChain::new();
        c.push(Nanos(5), serde_json::json!({"kind": "x"}));
        c.push(Nanos(6), serde_json::json!({"kind": "y"}));
        let a = c
            .seal_with_wall(|at| Some(1_700_000_000_000 + at.0))
            .unwrap();
        let b = c.seal().unwrap();
        assert_eq!(a.wall_unix_ms, Some(1_700_000_000_005));
        assert_eq!(b.wall_unix_ms, None);
        let mut rs = vec![a, b];
        assert_eq!(verify_chain(&rs), Ok(2));
        let line = rs[0].to_json_line();
        let back: Receipt = serde_json::from_str(&line).unwrap();
        assert_eq!(back, rs[0]);
        rs[0].wall_unix_ms = Some(1);
        assert_eq!(verify_chain(&rs), Err((0, "hash does not recompute")));
    }

    #[test]
    fn the_json_line_is_what_serde_writes_and_reads_back() {
        let mut c = ReceiptChain::new();
        c.push(
            Nanos(3),
            serde_json::json!({"z": "é\n", "a": [1.5, -2, null], "kind": "x"}),
        );
        c.push(Nanos(u64::MAX), serde_json::json!({}));
        let a = c.seal_with_wall(|_| Some(0)).unwrap();
        let b = c.seal().unwrap();
        for r in [a, b] {
            let line = r.to_json_line();
            assert_eq!(line, serde_json::to_string(&r).unwrap());
            let back: Receipt = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r);
            assert_eq!(back.recompute(), r.hash);
        }
    }

    #[test]
    fn hash_input_is_pinned() {
        // Changing the canonical form breaks every stored audit log; this pins it.
        let body = serde_json::json!({"b": 1, "a": [true, null]});
        let bytes = Receipt::hash_input(7, &Digest::default(), 42, &body);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"{"at_ns":42,"body":{"a":[true,null],"b":1},"index":7,"prev":"0000000000000000000000000000000000000000000000000000000000000000"}"#
        );
    }
}
