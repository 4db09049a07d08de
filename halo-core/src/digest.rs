//! SHA-256 digests with domain separation, over postcard canonical bytes (docs/envelope.md).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A 32-byte SHA-256 digest. Shown and serialized as lower-case hex in human-readable formats.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Digest(pub [u8; 32]);

/// Domain-separation tags. Each hashed object kind has its own, so bytes of one kind can never
/// be taken for another.
pub mod tag {
    /// A canonical component.
    pub const COMPONENT: &[u8] = b"halo/component/v1\0";
    /// The components an admission receipt names, their digests in envelope order.
    pub const COMPONENTS: &[u8] = b"halo/components/v1\0";
    /// An admission witness `W_e`.
    pub const WITNESS: &[u8] = b"halo/witness/v1\0";
    /// An action binding `b_e = H(W_e, seq_e)`.
    pub const BINDING: &[u8] = b"halo/binding/v1\0";
    /// A receipt in the hash-linked log.
    pub const RECEIPT: &[u8] = b"halo/receipt/v1\0";
}

impl Digest {
    /// SHA-256 over `tag || parts...`.
    pub fn of(tag: &[u8], parts: &[&[u8]]) -> Digest {
        let mut h = Sha256::new();
        h.update(tag);
        for p in parts {
            h.update(p);
        }
        Digest(h.finalize().into())
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        String::from_utf8_lossy(&self.hex_bytes()).into_owned()
    }

    /// Lower-case hex as 64 ASCII bytes on the stack (receipts write many digests).
    pub fn hex_bytes(&self) -> [u8; 64] {
        const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 64];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0) {
            if let [hi, lo] = pair {
                *hi = HEX_DIGITS
                    .get(usize::from(byte >> 4))
                    .copied()
                    .unwrap_or(b'0');
                *lo = HEX_DIGITS
                    .get(usize::from(byte & 0xf))
                    .copied()
                    .unwrap_or(b'0');
            }
        }
        hex
    }

    /// Parses 64 hex digits.
    ///
    /// # Errors
    /// [`HexError`] when `s` is not 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Digest, HexError> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return Err(HexError::Length(b.len()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in b.chunks_exact(2).enumerate() {
            let hi = hexval(pair.first().copied().unwrap_or(b'x'))?;
            let lo = hexval(pair.get(1).copied().unwrap_or(b'x'))?;
            if let Some(slot) = out.get_mut(i) {
                *slot = hi << 4 | lo;
            }
        }
        Ok(Digest(out))
    }

    /// The first 8 hex digits, for logs.
    pub fn short(&self) -> String {
        let mut s = self.to_hex();
        s.truncate(8);
        s
    }
}

/// Why [`Digest::from_hex`] refused its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HexError {
    /// Not 64 characters long (the length it had).
    Length(usize),
    /// A character that is not a hex digit.
    NotHex(char),
}

impl std::fmt::Display for HexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HexError::Length(n) => write!(f, "a digest is 64 hex digits, got {n}"),
            HexError::NotHex(c) => write!(f, "`{c}` is not a hex digit"),
        }
    }
}

impl std::error::Error for HexError {}

fn hexval(c: u8) -> Result<u8, HexError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(HexError::NotHex(char::from(c))),
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let hex = self.hex_bytes();
            s.serialize_str(std::str::from_utf8(&hex).unwrap_or_default())
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Digest::from_hex(&s).map_err(serde::de::Error::custom)
        } else {
            Ok(Digest(<[u8; 32]>::deserialize(d)?))
        }
    }
}

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// A message built in one buffer and hashed there: the tag first ([`Message::new`]), then the
/// bytes, then [`Message::digest`], which pads the buffer in place (FIPS 180-4, 5.1.1) and runs
/// the compression function once over every block. The digest equals [`Digest::of`] over the
/// same tag and bytes; for the small messages admission hashes (a component, a witness, a
/// binding: one to five blocks) it spares the streaming hasher's block buffer and its three
/// calls of the compression function.
pub(crate) struct Message<'b>(&'b mut Vec<u8>);

impl<'b> Message<'b> {
    /// Clears `buf` and starts a message with `tag`.
    pub(crate) fn new(buf: &'b mut Vec<u8>, tag: &[u8]) -> Message<'b> {
        buf.clear();
        buf.extend_from_slice(tag);
        Message(buf)
    }

    /// The buffer, to append the message's bytes to.
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        self.0
    }

    /// SHA-256 over everything written since [`Message::new`], the tag included.
    pub(crate) fn digest(self) -> Digest {
        let buf = self.0;
        let len = buf.len();
        // Zeros after the 0x80 up to 8 bytes short of a block boundary, then the length.
        buf.resize(len + padding_len(len), 0);
        let tail = buf.get_mut(len..).unwrap_or_default();
        pad(tail, len);
        compress_whole(buf)
    }
}

/// How many bytes SHA-256's padding adds to a message of `len` bytes: the 0x80 byte, zeros up
/// to 8 bytes short of a block boundary, and the length in bits (9 to 72 bytes).
fn padding_len(len: usize) -> usize {
    1 + (64 + 55 - len % 64) % 64 + 8
}

/// Writes the padding of a message of `len` bytes into `tail` (zeroed, `padding_len(len)`
/// bytes long).
fn pad(tail: &mut [u8], len: usize) {
    let bits = (len as u64).wrapping_mul(8).to_be_bytes();
    if let Some(first) = tail.first_mut() {
        *first = 0x80;
    }
    let n = tail.len();
    if let Some(end) = tail.get_mut(n.saturating_sub(8)..) {
        end.copy_from_slice(&bits);
    }
}

/// The digest of a padded message: one call of the compression function over its blocks.
fn compress_whole(padded: &[u8]) -> Digest {
    let (blocks, rest) = padded.as_chunks::<64>();
    debug_assert!(rest.is_empty(), "padded to whole blocks");
    let mut state = SHA256_IV;
    sha2::block_api::compress256(&mut state, blocks);
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    Digest(out)
}

/// SHA-256 over `tag || parts...` built on the stack, for messages of at most 119 bytes (two
/// blocks with the padding), such as a binding; longer ones go to [`Digest::of`].
pub(crate) fn of_short(tag: &[u8], parts: &[&[u8]]) -> Digest {
    let len = tag.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let total = len + padding_len(len);
    let mut block = [0u8; 128];
    let Some(msg) = block.get_mut(..total) else {
        return Digest::of(tag, parts);
    };
    let mut at = 0;
    for p in std::iter::once(tag).chain(parts.iter().copied()) {
        if let Some(dst) = msg.get_mut(at..at + p.len()) {
            dst.copy_from_slice(p);
        }
        at += p.len();
    }
    pad(msg.get_mut(len..).unwrap_or_default(), len);
    compress_whole(msg)
}

/// Postcard's encoding, for the hashed forms written by hand (`graph::canonical_digest`,
/// `binding::Witness::hash`): a varint is LEB128, seven bits a byte, low bits first.
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(crate) fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_varint(buf, s.len() as u64);
    put_bytes(buf, s.as_bytes());
}

/// Appends `b`. Most strings hashed here are ids and names of a few bytes, for which a call of
/// `memcpy` costs more than the copy: up to 16 bytes are copied as two overlapping words (of 8
/// or 4 bytes) into room made by one 16-byte store.
fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    let n = b.len();
    if n > 16 {
        buf.extend_from_slice(b);
        return;
    }
    let at = buf.len();
    buf.extend_from_slice(&[0u8; 16]);
    buf.truncate(at + n);
    let Some(dst) = buf.get_mut(at..) else {
        return;
    };
    fn words<const W: usize>(dst: &mut [u8], b: &[u8]) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<W>(), b.first_chunk::<W>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<W>(), b.last_chunk::<W>()) {
            *d = *s;
        }
    }
    if n >= 8 {
        words::<8>(dst, b);
    } else if n >= 4 {
        words::<4>(dst, b);
    } else {
        for (d, s) in dst.iter_mut().zip(b) {
            *d = *s;
        }
    }
}

pub(crate) fn put_opt_str(buf: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            buf.push(1);
            put_str(buf, s);
        }
        None => buf.push(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let d = Digest::of(tag::COMPONENT, &[b"abc"]);
        assert_eq!(Digest::from_hex(&d.to_hex()), Ok(d));
        assert!(Digest::from_hex("zz").is_err());
    }

    #[test]
    fn a_message_hashed_in_its_buffer_is_the_streaming_digest() {
        // Every length around the padding's edges (55, 56, 63, 64 bytes and their multiples)
        // for two tag lengths, over seeded bytes.
        let mut rng = crate::testing::Rng(7);
        let mut buf = Vec::new();
        for tag in [tag::COMPONENT, tag::BINDING, b"".as_slice()] {
            for len in 0..=330 {
                let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
                let mut m = Message::new(&mut buf, tag);
                m.buf().extend_from_slice(&bytes);
                assert_eq!(
                    m.digest(),
                    Digest::of(tag, &[&bytes]),
                    "tag {tag:?}, {len} bytes"
                );
            }
        }
        // The stack form, up to its limit and past it.
        for len in 0..=140 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let (a, b) = bytes.split_at(len / 3);
            assert_eq!(
                of_short(tag::BINDING, &[a, b]),
                Digest::of(tag::BINDING, &[&bytes]),
                "{len} bytes"
            );
        }
        // And the known vector: SHA-256("abc").
        let mut m = Message::new(&mut buf, b"");
        m.buf().extend_from_slice(b"abc");
        assert_eq!(
            m.digest().to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn put_bytes_appends_every_length() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=40 {
            let mut buf = vec![0xee; 3];
            put_bytes(&mut buf, &src[..n]);
            let mut want = vec![0xee; 3];
            want.extend_from_slice(&src[..n]);
            assert_eq!(buf, want, "{n} bytes");
        }
    }

    #[test]
    fn tags_separate_domains() {
        assert_ne!(
            Digest::of(tag::COMPONENT, &[b"x"]),
            Digest::of(tag::WITNESS, &[b"x"])
        );
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        // SHA-256("abc") with an empty tag.
        let d = Digest::of(b"", &[b"abc"]);
        assert_eq!(
            d.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
