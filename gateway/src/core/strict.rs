//! A strict reading of JSON documents whose parts are held as untyped values (a provider's
//! `value`, a state file, a certificate): every object anywhere in the document must have
//! distinct keys. `serde_json` keeps the last of two equal keys, so two readers of the same bytes
//! could see different values; envelopes already refuse that through their typed fields, and
//! this gives the untyped parts the same rule.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Checks that no object in `bytes` repeats a key.
///
/// # Errors
/// `duplicate key `K`` (with the path to it, e.g. `sources.map`) for the first repeat, or the
/// JSON syntax error.
pub fn no_duplicate_keys(bytes: &[u8]) -> Result<(), String> {
    let mut d = serde_json::Deserializer::from_slice(bytes);
    Walk {
        path: String::new(),
    }
    .deserialize(&mut d)
    .map_err(|e| e.to_string())?;
    d.end().map_err(|e| e.to_string())
}

struct Walk {
    path: String,
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while s
            .next_element_seed(Walk {
                path: format!("{}[{i}]", self.path),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(k) = m.next_key::<String>()? {
            let path = if self.path.is_empty() {
                k.clone()
            } else {
                format!("{}.{k}", self.path)
            };
            if !seen.insert(k) {
                return Err(de::Error::custom(format!("duplicate key `{path}`")));
            }
            m.next_value_seed(Walk { path })?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_found_at_any_depth() {
        assert!(no_duplicate_keys(br#"{"a": [1, {"b": 2}], "c": {"d": null}}"#).is_ok());
        let e = no_duplicate_keys(br#"{"sources": {"map": {}, "map": {}}}"#).unwrap_err();
        assert!(e.contains("duplicate key `sources.map`"), "{e}");
        let e = no_duplicate_keys(br#"{"value": [{"n": 1}, {"n": 1, "n": 2}]}"#).unwrap_err();
        assert!(e.contains("duplicate key `value[1].n`"), "{e}");
        assert!(
            no_duplicate_keys(br#"{"a": 1} x"#).is_err(),
            "trailing bytes"
        );
    }
}
