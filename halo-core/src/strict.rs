//! A strict reading of JSON documents whose parts are held as untyped values (a provider's
//! `value`, a state file, a certificate): every object anywhere in the document must have
//! distinct keys. `serde_json` keeps the last of two equal keys, so two readers of the same bytes
//! could see different values; envelopes already refuse that through their typed fields, and
//! this gives the untyped parts the same rule.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Checks that no object in `bytes` repeats a key.
///
/// # Errors
/// A [`KeyError`] whose message is `duplicate key `K`` (with the path to it, e.g.
/// `sources.map`) for the first repeat, or the JSON syntax error.
pub fn no_duplicate_keys(bytes: &[u8]) -> Result<(), KeyError> {
    check_keys(bytes)
}

/// Why [`check_keys`] refused a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError {
    /// An object repeats a key (otherwise the text is not JSON: syntax, a number out of range,
    /// nesting too deep, not UTF-8).
    pub duplicate: bool,
    /// What is wrong, for people.
    pub message: String,
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KeyError {}

/// As [`no_duplicate_keys`], telling a repeated key from text that is not JSON at all.
///
/// # Errors
/// [`KeyError`].
pub fn check_keys(bytes: &[u8]) -> Result<(), KeyError> {
    let mut d = serde_json::Deserializer::from_slice(bytes);
    let fail = |e: serde_json::Error| KeyError {
        duplicate: e.is_data() && e.to_string().starts_with(DUPLICATE),
        message: explain(bytes, &e),
    };
    Walk {
        path: String::new(),
    }
    .deserialize(&mut d)
    .map_err(fail)?;
    d.end().map_err(fail)
}

/// How a repeated key's message starts.
const DUPLICATE: &str = "duplicate key `";

/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// A JSON error for people: what was expected where `serde_json`'s own words mislead. A text
/// that starts with a byte-order mark says so (JSON text must not start with one), and a number
/// beyond the u64 range, which `serde_json` reports as "floating point", is reported as the
/// whole number it is not. Other errors are `serde_json`'s message with its line and column.
pub fn explain(bytes: &[u8], e: &serde_json::Error) -> String {
    if bytes.starts_with(BOM) {
        return "the text starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON does \
                not allow; save it without one"
            .into();
    }
    if bytes.starts_with(b"\xff\xfe") || bytes.starts_with(b"\xfe\xff") {
        return "the text is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
            .into();
    }
    if let Err(u) = std::str::from_utf8(bytes) {
        return format!(
            "the text is not UTF-8 (an invalid byte at offset {})",
            u.valid_up_to()
        );
    }
    let msg = e.to_string();
    if let Some(rest) = msg.strip_prefix("invalid type: floating point `")
        && let Some((parsed, tail)) = rest.split_once('`')
    {
        // The number as written: the numeric characters that end at the error's column.
        let written = bytes
            .split(|b| *b == b'\n')
            .nth(e.line().saturating_sub(1))
            .and_then(|l| l.get(..e.column().min(l.len())))
            .map(|l| {
                let n = l
                    .iter()
                    .rev()
                    .take_while(|b| {
                        b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E')
                    })
                    .count();
                String::from_utf8_lossy(l.get(l.len() - n..).unwrap_or_default()).to_string()
            })
            .filter(|w| !w.is_empty());
        let number = written.as_deref().unwrap_or(parsed);
        if let Some(at) = tail.strip_prefix(", expected u64") {
            return format!("{number} is not a whole number from 0 to {}{at}", u64::MAX);
        }
        if let Some(at) = tail.strip_prefix(", expected i64") {
            return format!(
                "{number} is not a whole number from {} to {}{at}",
                i64::MIN,
                i64::MAX
            );
        }
    }
    msg
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
                return Err(de::Error::custom(format!("{DUPLICATE}{path}`")));
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
        assert!(e.message.contains("duplicate key `sources.map`"), "{e}");
        let e = no_duplicate_keys(br#"{"value": [{"n": 1}, {"n": 1, "n": 2}]}"#).unwrap_err();
        assert!(e.message.contains("duplicate key `value[1].n`"), "{e}");
        assert!(
            no_duplicate_keys(br#"{"a": 1} x"#).is_err(),
            "trailing bytes"
        );
    }

    #[test]
    fn a_repeated_key_is_told_from_text_that_is_not_json() {
        assert!(check_keys(br#"{"a": 1, "a": 2}"#).unwrap_err().duplicate);
        let deep = "[".repeat(200) + &"]".repeat(200);
        for (bad, says) in [
            (&br#"{"value": 1e400}"#[..], "out of range"),
            (&br#"{"value": NaN}"#[..], "expected value"),
            (&b"{\"value\": \"\xff\"}"[..], "not UTF-8"),
            (deep.as_bytes(), "recursion limit"),
        ] {
            let e = check_keys(bad).unwrap_err();
            assert!(!e.duplicate, "{}", e.message);
            assert!(e.message.contains(says), "{}", e.message);
        }
    }
}

#[cfg(test)]
mod explain_tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_and_a_number_past_u64_are_named() {
        let bom = b"\xef\xbb\xbf{}";
        let e = serde_json::from_slice::<serde_json::Value>(bom).unwrap_err();
        assert!(explain(bom, &e).contains("byte-order mark"));
        let big = br#"{"n": 18446744073709551616}"#;
        #[derive(serde::Deserialize)]
        struct N {
            #[allow(dead_code, reason = "only parsed")]
            n: u64,
        }
        let e = serde_json::from_slice::<N>(big).err().unwrap();
        let m = explain(big, &e);
        assert!(
            m.contains("is not a whole number from 0 to 18446744073709551615 at line 1"),
            "{m}"
        );
        assert!(
            no_duplicate_keys(bom)
                .unwrap_err()
                .message
                .contains("byte-order mark")
        );
    }
}
