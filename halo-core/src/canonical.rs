//! Canonical JSON written straight from a `Serialize` value: object keys sorted (by their
//! bytes) at every level, no whitespace, numbers and strings exactly as `serde_json` writes
//! them. The bytes equal `serde_json::to_vec(&serde_json::to_value(v)?)` — what receipts have
//! always hashed — without building the `Value` tree, which was most of a receipt's cost.
//!
//! Matching the `Value` route in the corners: an `f32` is widened to `f64` first; a non-finite
//! float is `null`; integer and char map keys become strings; when two entries of one object
//! share a key the last one wins. Anything `to_value` refuses is refused here too
//! ([`Error`]), so a record either encodes the same way on both routes or on neither. The
//! corners are unit-tested against the `Value` route; the protocol-cases, schedules and
//! contract-audit suites check every body they seal against it too.

use std::fmt;

use serde::ser::{self, Serialize};

/// A value that has no canonical JSON form (a non-string map key, a failing `Serialize`).
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error(msg.to_string())
    }
}

/// Appends the canonical JSON of `value` to `out`. On error `out` may hold a partial write:
/// callers start from an empty or truncated buffer.
///
/// # Errors
/// When `value` has no JSON form (see [`Error`]).
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(Canon { out })
}

/// The canonical JSON of `value`.
///
/// # Errors
/// As [`write`].
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value)?;
    Ok(out)
}

/// Bytes a JSON string cannot hold as they are: control characters, `"` and `\\`.
#[allow(
    clippy::indexing_slicing,
    reason = "a constant table filled while b < 256, its length"
)]
const ESCAPED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b < 0x20 || b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    t
};

/// Writes an unsigned integer as `serde_json` does: its decimal digits.
pub(crate) fn write_u64(out: &mut Vec<u8>, v: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    let mut v = v;
    loop {
        i -= 1;
        if let Some(d) = b.get_mut(i) {
            // v % 10 < 10.
            #[allow(clippy::cast_possible_truncation, reason = "a decimal digit")]
            let digit = (v % 10) as u8;
            *d = b'0' + digit;
        }
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    out.extend_from_slice(b.get(i..).unwrap_or_default());
}

/// Writes a JSON string with `serde_json`'s escaping (also for records that write themselves).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    // Most strings in a record (ids, names, hex digests) need no escape: check the whole string,
    // then copy it. Short ones (most of them) by table, one load a byte; longer ones without
    // branching per byte (the compiler vectorizes the fold).
    let needs_escape = if s.len() < 32 {
        s.bytes()
            .any(|b| ESCAPED.get(usize::from(b)).copied().unwrap_or(true))
    } else {
        s.bytes().fold(false, |acc, b| {
            acc | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    };
    if needs_escape {
        // Writing into a Vec cannot fail, and a &str always serializes.
        let _ = serde_json::to_writer(&mut *out, s);
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

fn scalar<T: Serialize>(out: &mut Vec<u8>, v: T) -> Result<(), Error> {
    serde_json::to_writer(&mut *out, &v).map_err(|e| Error(e.to_string()))
}

struct Canon<'a> {
    out: &'a mut Vec<u8>,
}

impl Canon<'_> {
    fn scalar<T: Serialize>(self, v: T) -> Result<(), Error> {
        scalar(self.out, v)
    }
}

/// Serializer methods that hand their value to one helper method of `self`.
macro_rules! forward {
    ($helper:ident -> $ok:ty: $($method:ident($t:ty)),* $(,)?) => {
        $(fn $method(self, v: $t) -> Result<$ok, Error> {
            self.$helper(v)
        })*
    };
}

/// An object being written: each entry's value goes into `buf`, its key and byte range into
/// `entries` (map keys' text into `keys`); `finish` sorts them and writes the object. The three
/// buffers come from a per-thread pool and go back to it, so a record is written without
/// allocating once the pool is warm.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    /// Outer key for an enum variant (`{"Variant":{...}}`).
    variant: Option<&'static str>,
    /// `None` once `finish` has handed it back.
    scratch: Option<Scratch>,
    /// The key of the entry whose value comes next (maps).
    pending: Option<Key>,
}

#[derive(Default)]
struct Scratch {
    buf: Vec<u8>,
    entries: Vec<(Key, usize, usize)>,
    keys: String,
    /// Indices into `entries` in the order they are written.
    order: Vec<u32>,
}

/// The field sequence of a struct, by the addresses of its `&'static str` keys.
type Fields = Vec<(usize, usize)>;

/// Cached orders, by a hash of the field sequence ([`fields_hash`]); equal hashes are told apart
/// by comparing the sequences.
type Orders = std::collections::BTreeMap<u64, Vec<(Fields, Vec<u32>)>>;

thread_local! {
    /// Written orders of struct field sequences seen before: a derived struct gives the same
    /// keys in the same order every time (bar skipped fields), so its sorted order is worked
    /// out once per sequence rather than once per object. Looked up by hash: a process that
    /// writes many record types holds hundreds of sequences.
    static ORDERS: std::cell::RefCell<(Orders, usize)> =
        const { std::cell::RefCell::new((Orders::new(), 0)) };
}

/// A hash of a sequence of static keys by their addresses (`None` when a key is not static).
fn fields_hash(entries: &[(Key, usize, usize)]) -> Option<u64> {
    entries
        .iter()
        .try_fold(0xcbf2_9ce4_8422_2325u64, |h, e| match e.0 {
            Key::Static(k) => Some(
                (h ^ (k.as_ptr() as u64))
                    .wrapping_mul(0x0000_0100_0000_01b3)
                    .rotate_left(17)
                    ^ (k.len() as u64),
            ),
            Key::Owned(..) => None,
        })
}

fn fields_match(fields: &Fields, entries: &[(Key, usize, usize)]) -> bool {
    fields.len() == entries.len()
        && fields.iter().zip(entries).all(|(f, e)| match e.0 {
            Key::Static(k) => *f == (k.as_ptr() as usize, k.len()),
            Key::Owned(..) => false,
        })
}

#[derive(Clone, Copy)]
enum Key {
    Static(&'static str),
    /// A byte range of [`Scratch::keys`].
    Owned(usize, usize),
}

thread_local! {
    static POOL: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Scratch {
    fn take() -> Scratch {
        POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default()
    }

    fn give_back(mut self) {
        // Keep the pool bounded (32 scratches, one per nesting level in use) and its buffers
        // modest (a buffer grown past 64 KiB by an unusually large record is dropped), so a
        // companion computer holds at most about 2 MiB here.
        if self.buf.capacity() > 64 << 10 || self.keys.capacity() > 64 << 10 {
            return;
        }
        self.buf.clear();
        self.entries.clear();
        self.keys.clear();
        self.order.clear();
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < 32 {
                p.push(self);
            }
        });
    }

    /// Fills `order` with the entries to write: sorted by key (stably), and of equal keys only
    /// the last (as a map insert keeps it).
    fn write_order(&self, order: &mut Vec<u32>) {
        order.clear();
        let hash = fields_hash(&self.entries);
        if let Some(h) = hash {
            let hit = ORDERS.with(|o| {
                o.borrow()
                    .0
                    .get(&h)
                    .and_then(|bucket| bucket.iter().find(|(f, _)| fields_match(f, &self.entries)))
                    .map(|(_, ord)| order.extend_from_slice(ord))
                    .is_some()
            });
            if hit {
                return;
            }
        }
        let n = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        order.extend(0..n);
        // Maps from sorted containers (BTreeMap, Value) arrive in order without repeats: one
        // pass confirms it and the sort is skipped.
        let in_order = self
            .entries
            .iter()
            .zip(self.entries.iter().skip(1))
            .all(|(a, b)| self.key(a.0) < self.key(b.0));
        if in_order {
            return;
        }
        let key_of = |i: u32| self.entries.get(i as usize).map_or("", |e| self.key(e.0));
        order.sort_by(|&a, &b| key_of(a).cmp(key_of(b)));
        // Of a run of equal keys keep the last.
        let mut kept = 0;
        for j in 0..order.len() {
            let (Some(&cur), next) = (order.get(j), order.get(j + 1).copied()) else {
                continue;
            };
            if next.is_some_and(|nx| key_of(nx) == key_of(cur)) {
                continue;
            }
            if let Some(slot) = order.get_mut(kept) {
                *slot = cur;
            }
            kept += 1;
        }
        order.truncate(kept);
        if let Some(h) = hash {
            let fields: Fields = self
                .entries
                .iter()
                .map(|e| match e.0 {
                    Key::Static(k) => (k.as_ptr() as usize, k.len()),
                    Key::Owned(a, b) => (a, b),
                })
                .collect();
            ORDERS.with(|o| {
                let (map, len) = &mut *o.borrow_mut();
                if *len < 512 {
                    map.entry(h).or_default().push((fields, order.clone()));
                    *len += 1;
                }
            });
        }
    }

    fn key(&self, k: Key) -> &str {
        match k {
            Key::Static(s) => s,
            Key::Owned(a, b) => self.keys.get(a..b).unwrap_or_default(),
        }
    }
}

impl<'a> Object<'a> {
    fn new(out: &'a mut Vec<u8>, variant: Option<&'static str>) -> Object<'a> {
        Object {
            out,
            variant,
            scratch: Some(Scratch::take()),
            pending: None,
        }
    }

    fn scratch(&mut self) -> &mut Scratch {
        self.scratch.get_or_insert_with(Scratch::default)
    }

    fn value<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Result<(), Error> {
        let sc = self.scratch();
        let start = sc.buf.len();
        value.serialize(Canon { out: &mut sc.buf })?;
        let end = sc.buf.len();
        sc.entries.push((key, start, end));
        Ok(())
    }

    fn finish(mut self) {
        let mut scratch = self.scratch.take().unwrap_or_default();
        let out = &mut *self.out;
        let mut order = std::mem::take(&mut scratch.order);
        scratch.write_order(&mut order);
        if let Some(v) = self.variant {
            out.push(b'{');
            write_str(out, v);
            out.push(b':');
        }
        out.push(b'{');
        for (n, &i) in order.iter().enumerate() {
            let Some(&(key, start, end)) = scratch.entries.get(i as usize) else {
                continue;
            };
            if n > 0 {
                out.push(b',');
            }
            write_str(out, scratch.key(key));
            out.push(b':');
            out.extend_from_slice(scratch.buf.get(start..end).unwrap_or_default());
        }
        out.push(b'}');
        if self.variant.is_some() {
            out.push(b'}');
        }
        scratch.order = order;
        scratch.give_back();
    }
}

impl Drop for Object<'_> {
    fn drop(&mut self) {
        // Only after an error: `finish` has taken it.
        if let Some(s) = self.scratch.take() {
            s.give_back();
        }
    }
}

/// An array being written (sequences, tuples, tuple variants).
struct Array<'a> {
    out: &'a mut Vec<u8>,
    variant: bool,
    first: bool,
}

impl Array<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Canon {
            out: &mut *self.out,
        })
    }

    fn finish(self) {
        self.out.push(b']');
        if self.variant {
            self.out.push(b'}');
        }
    }
}

impl<'a> ser::Serializer for Canon<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Array<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    forward!(scalar -> (): serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64));
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        // The Value route holds a 128-bit integer only when it fits 64 bits.
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(x), _) => scalar(self.out, x),
            (_, Ok(x)) => scalar(self.out, x),
            _ => Err(Error("number out of range".into())),
        }
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        match u64::try_from(v) {
            Ok(x) => scalar(self.out, x),
            Err(_) => Err(Error("number out of range".into())),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        // As the Value route: widened to f64 (and `null` when not finite).
        scalar(self.out, f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        scalar(self.out, v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        let mut b = [0u8; 4];
        write_str(self.out, v.encode_utf8(&mut b));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        scalar(self.out, v)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        write_str(self.out, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
        value.serialize(Canon {
            out: &mut *self.out,
        })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Array<'a>, Error> {
        self.out.push(b'[');
        Ok(Array {
            out: self.out,
            variant: false,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Array<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Array<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Array<'a>, Error> {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.extend_from_slice(b":[");
        Ok(Array {
            out: self.out,
            variant: true,
            first: true,
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'a>, Error> {
        Ok(Object::new(self.out, None))
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Object<'a>, Error> {
        Ok(Object::new(self.out, None))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Object<'a>, Error> {
        Ok(Object::new(self.out, Some(variant)))
    }
}

impl ser::SerializeSeq for Array<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTuple for Array<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Array<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Array<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        let keys = &mut self.scratch().keys;
        self.pending = Some(key.serialize(KeyOnly { keys })?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self
            .pending
            .take()
            .ok_or_else(|| Error("a map value without its key".into()))?;
        self.value(key, value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.value(Key::Static(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.value(Key::Static(key), value)
    }
    fn end(self) -> Result<(), Error> {
        self.finish();
        Ok(())
    }
}

/// Map keys: strings, and what the Value route turns into strings (integers, chars, bools,
/// unit variants, newtype wrappers of those).
struct KeyOnly<'k> {
    keys: &'k mut String,
}

impl KeyOnly<'_> {
    fn owned(self, v: impl fmt::Display) -> Result<Key, Error> {
        use std::fmt::Write;
        let a = self.keys.len();
        write!(self.keys, "{v}").map_err(|e| Error(e.to_string()))?;
        Ok(Key::Owned(a, self.keys.len()))
    }
}

fn refused() -> Error {
    Error("key must be a string".into())
}

impl ser::Serializer for KeyOnly<'_> {
    type Ok = Key;
    type Error = Error;
    type SerializeSeq = ser::Impossible<Key, Error>;
    type SerializeTuple = ser::Impossible<Key, Error>;
    type SerializeTupleStruct = ser::Impossible<Key, Error>;
    type SerializeTupleVariant = ser::Impossible<Key, Error>;
    type SerializeMap = ser::Impossible<Key, Error>;
    type SerializeStruct = ser::Impossible<Key, Error>;
    type SerializeStructVariant = ser::Impossible<Key, Error>;

    fn serialize_f32(self, _v: f32) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_f64(self, _v: f64) -> Result<Key, Error> {
        Err(refused())
    }
    forward!(owned -> Key: serialize_bool(bool), serialize_i8(i8), serialize_i16(i16),
        serialize_i32(i32), serialize_i64(i64), serialize_u8(u8), serialize_u16(u16),
        serialize_u32(u32), serialize_u64(u64), serialize_char(char));

    fn serialize_str(self, v: &str) -> Result<Key, Error> {
        let a = self.keys.len();
        self.keys.push_str(v);
        Ok(Key::Owned(a, self.keys.len()))
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_none(self) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_unit(self) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Key, Error> {
        Ok(Key::Static(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Key, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<Key, Error> {
        Err(refused())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(refused())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(refused())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(refused())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(refused())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(refused())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Error> {
        Err(refused())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;

    use super::*;

    fn value_route<T: Serialize>(v: &T) -> Option<Vec<u8>> {
        serde_json::to_value(v)
            .ok()
            .and_then(|x| serde_json::to_vec(&x).ok())
    }

    fn same<T: Serialize>(v: &T) {
        assert_eq!(
            to_vec(v).ok().map(String::from_utf8),
            value_route(v).map(String::from_utf8)
        );
    }

    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Rec {
        Zed {
            b: u32,
            a: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            skipped: Option<u8>,
        },
        Floats {
            x: f32,
            y: f64,
            n: f64,
        },
    }

    #[derive(Serialize)]
    enum Ext {
        Unit,
        New(i64),
        Tup(u8, String),
        St { z: bool, y: char },
    }

    #[derive(Serialize)]
    struct Flat {
        k: u8,
        #[serde(flatten)]
        rest: BTreeMap<String, u8>,
    }

    #[test]
    fn equals_the_value_route_in_the_corners() {
        same(&Rec::Zed {
            b: 7,
            a: Some("é \"q\" \\ \u{1}\n".into()),
            skipped: None,
        });
        same(&Rec::Floats {
            x: 0.1,
            y: 1e-7,
            n: f64::NAN,
        });
        same(&Rec::Floats {
            x: f32::INFINITY,
            y: -0.0,
            n: 1.0,
        });
        same(&vec![Ext::Unit, Ext::New(-3), Ext::Tup(1, "t".into())]);
        same(&Ext::St { z: true, y: 'ß' });
        let mut h: HashMap<u32, Vec<u8>> = HashMap::new();
        for i in 0..40 {
            h.insert(i * 7919 % 1000, vec![1, 2]);
        }
        same(&h);
        same(&BTreeMap::from([('b', 1), ('a', 2)]));
        same(&(1u8, "x", [0.5f64; 2], ()));
        same(&Some(u64::MAX));
        same(&i128::from(i64::MIN));
        // A flattened map shadowing a field: the Value route keeps the later entry.
        same(&Flat {
            k: 1,
            rest: BTreeMap::from([("k".to_string(), 2), ("a".to_string(), 3)]),
        });
        same(&serde_json::json!({"b": [1, {"d": null, "c": 2.5}], "a": "x"}));
    }

    #[test]
    fn a_struct_seen_before_is_written_in_the_same_order() {
        // The second object of a field sequence takes its order from the cache; a skipped
        // field makes another sequence.
        for _ in 0..3 {
            for skipped in [None, Some(3), None] {
                same(&Rec::Zed {
                    b: 1,
                    a: None,
                    skipped,
                });
            }
            same(&vec![
                Ext::St { z: false, y: 'a' },
                Ext::St { z: true, y: 'b' },
            ]);
        }
    }

    #[test]
    fn what_the_value_route_refuses_is_refused() {
        let m: BTreeMap<Vec<u8>, u8> = BTreeMap::from([(vec![1], 1)]);
        assert!(value_route(&m).is_none());
        assert!(to_vec(&m).is_err());
        assert!(to_vec(&u128::MAX).is_err());
    }
}
