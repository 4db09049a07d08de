//! SHA-256 digests with domain separation, over postcard canonical bytes (DESIGN §4).

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
    /// A message when `s` is not 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Digest, String> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return Err(format!("a digest is 64 hex digits, got {}", b.len()));
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

fn hexval(c: u8) -> Result<u8, String> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!("`{}` is not a hex digit", char::from(c))),
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
    buf.extend_from_slice(s.as_bytes());
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
