//! Identifiers: at most 64 bytes of `[A-Za-z0-9._-]`, never empty.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest identifier, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// A validated identifier (component, response, agent, source, provenance, certificate ids).
///
/// Stored inline (no allocation), so cloning is a copy of at most 64 bytes.
#[derive(PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(heapless::String<MAX_ID_LEN>);

impl Clone for Id {
    /// The id's bytes copied at once: heapless's own `clone` pushes them one by one, and the
    /// core clones ids into every event and record.
    fn clone(&self) -> Id {
        let mut out = heapless::String::new();
        // Cannot fail: `out` has the capacity of `self`, which holds the text.
        let copied = out.push_str(self.0.as_str());
        debug_assert!(copied.is_ok());
        Id(out)
    }
}

/// Why a string is not a valid [`Id`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidIdError {
    text: String,
}

impl InvalidIdError {
    fn of(s: &str) -> InvalidIdError {
        InvalidIdError {
            text: s.chars().take(80).collect(),
        }
    }

    /// The offending text, shortened for display.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for InvalidIdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid id `{}`: ids are 1 to {MAX_ID_LEN} bytes of [A-Za-z0-9._-]",
            self.text
        )
    }
}

impl std::error::Error for InvalidIdError {}

/// Bytes that may appear in an id, by value: one load a byte.
#[allow(
    clippy::indexing_slicing,
    reason = "a constant table filled while b < 256, its length"
)]
const ID_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-';
        b += 1;
    }
    t
};

/// True when `b` may appear in an id.
fn id_byte(b: u8) -> bool {
    ID_BYTE.get(usize::from(b)).copied().unwrap_or(false)
}

impl Id {
    /// Validates `s` as an id.
    ///
    /// # Errors
    /// [`InvalidIdError`] when `s` is empty, longer than 64 bytes, or uses another character.
    pub fn new(s: &str) -> Result<Id, InvalidIdError> {
        Id::check(s)?;
        let mut out = heapless::String::new();
        out.push_str(s).map_err(|_| InvalidIdError::of(s))?;
        Ok(Id(out))
    }

    /// Checks `s` against the id rule without building an id.
    ///
    /// # Errors
    /// As [`Id::new`].
    pub fn check(s: &str) -> Result<(), InvalidIdError> {
        if s.is_empty() || s.len() > MAX_ID_LEN || !s.bytes().all(id_byte) {
            return Err(InvalidIdError::of(s));
        }
        Ok(())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// A 64-bit FNV-1a fingerprint of the bytes, for fast lookups. Equal ids have equal
    /// fingerprints; callers confirm a match by comparing the ids.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(self.0.as_str())
    }
}

/// [`Id::fingerprint`] of a text not (yet) made an id.
pub fn fingerprint(s: &str) -> u64 {
    fnv1a(FNV_OFFSET, s.as_bytes())
}

/// Whether two id texts are the same bytes. Ids are short (most a few bytes): those are compared
/// in a loop rather than through a call of `memcmp`, which costs more than the comparison.
pub(crate) fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    if a.len() <= 16 {
        a.iter().zip(b).all(|(x, y)| x == y)
    } else {
        a == b
    }
}

/// FNV-1a's starting state.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`, continued from the state `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl std::fmt::Debug for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.as_str())
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl std::str::FromStr for Id {
    type Err = InvalidIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Id::new(s)
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an id of 1 to 64 bytes of [A-Za-z0-9._-]")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Id, E> {
                Id::new(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl schemars::JsonSchema for Id {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Id".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9._-]{1,64}$",
            "description": "1 to 64 bytes of [A-Za-z0-9._-]"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_alphabet_up_to_64_bytes() {
        assert!(Id::new("e1").is_ok());
        assert!(Id::new("corridor-12.v3_a").is_ok());
        assert!(Id::new(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn a_clone_is_the_same_id() {
        for s in ["e", "corridor-12.v3_a", &"z".repeat(64)] {
            let id = Id::new(s).unwrap();
            let copy = id.clone();
            assert_eq!(copy.as_str(), s);
            assert_eq!(copy, id);
        }
    }

    #[test]
    fn rejects_empty_long_and_foreign_characters() {
        assert!(Id::new("").is_err());
        assert!(Id::new(&"a".repeat(65)).is_err());
        for bad in ["a b", "a/b", "é", "a\n", "a@3", "{}"] {
            assert!(Id::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
