//! The response envelope an agent sends, parsed with every limit enforced.
//!
//! Parsing is two-staged. [`parse_envelope`] checks the byte limit and the JSON shape (unknown
//! fields and duplicate keys rejected, payloads kept raw). [`super::graph::validate`] then checks
//! ids, limits, types, payloads, claims and references against the catalog. Either stage fails
//! with a [`Rejection`]: one reason code, the offending ids, and a message. A rejection changes
//! nothing: no token, no phase, no obligation.
//!
//! Stage one reads the common shape with [`fast`] and everything else with serde_json (see
//! there for why the two agree).
//!
//! The format is documented in `docs/envelope.md`.

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use super::ids::Id;
use super::reason::ReasonCode;

/// The fast stage-one reader for the plain shape, held equal to serde_json by a suite and a fuzz
/// target; everything it steps aside from goes to serde_json.
mod count;
pub mod fast;

/// Format version this gateway speaks.
pub const FORMAT_VERSION: u32 = 1;
/// Most components per response.
pub const MAX_COMPONENTS: usize = 64;
/// Most prerequisites per component.
pub const MAX_PREREQUISITES: usize = 16;
/// Largest payload, in bytes of its JSON text.
pub const MAX_PAYLOAD_BYTES: usize = 4096;
/// Most support claims per component.
pub const MAX_SUPPORT_CLAIMS: usize = 32;
/// Largest whole response, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 512 * 1024;

/// Why a response (or a candidate) was rejected whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejection {
    code: ReasonCode,
    ids: Vec<String>,
    message: String,
}

impl Rejection {
    /// A rejection with offending ids.
    pub fn new(code: ReasonCode, ids: Vec<String>, message: impl Into<String>) -> Rejection {
        Rejection {
            code,
            ids,
            message: message.into(),
        }
    }
    /// The stable code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }
    /// Offending ids (components, references), possibly empty.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }
    /// A message for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if !self.ids.is_empty() {
            write!(f, " (")?;
            for (i, id) in self.ids.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "`{id}`")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

/// `{"id": .., "version": ..}` naming the catalog the agent planned against.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogRef {
    /// Catalog id.
    pub id: String,
    /// Catalog version.
    pub version: u32,
}

/// A declared prerequisite `(p, q)`, as sent.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrerequisite<'a> {
    /// Parent component id (borrowed from the input unless it holds escapes).
    #[serde(borrow)]
    pub id: std::borrow::Cow<'a, str>,
    /// Required phase name.
    #[serde(borrow)]
    pub phase: std::borrow::Cow<'a, str>,
}

/// One support claim: the epoch and/or provenance the agent planned against.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// Expected epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Expected provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Id>,
}

/// Support claims keyed by source name, duplicates rejected, in the order sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims<'a>(pub Vec<(std::borrow::Cow<'a, str>, Claim)>);

/// A map key borrowed from the input when it holds no escapes.
struct Key<'a>(std::borrow::Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a source name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'a>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Claims<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Claims<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of source name to {epoch, provenance}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Claims<'a>, A::Error> {
                let mut out: Vec<(std::borrow::Cow<'a, str>, Claim)> = Vec::new();
                while let Some(Key(k)) = m.next_key::<Key<'a>>()? {
                    if out.iter().any(|(x, _)| *x == k) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{k}`")));
                    }
                    if out.len() >= MAX_SUPPORT_CLAIMS {
                        return Err(serde::de::Error::custom(format!(
                            "too many support claims: at most {MAX_SUPPORT_CLAIMS}"
                        )));
                    }
                    let v: Claim = m.next_value()?;
                    out.push((k, v));
                }
                Ok(Claims(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A payload's exact JSON text, known to be one well-formed JSON value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// The text, as sent.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

impl std::fmt::Debug for RawJson<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RawJson").field(&self.0).finish()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawJson<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(|r| RawJson(r.get()))
    }
}

/// A component as sent, payload still raw.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawComponent<'a> {
    /// Component id (borrowed from the input unless it holds escapes).
    #[serde(borrow)]
    pub id: std::borrow::Cow<'a, str>,
    /// Component type name.
    #[serde(rename = "type", borrow)]
    pub ty: std::borrow::Cow<'a, str>,
    /// Raw payload JSON.
    #[serde(borrow)]
    pub payload: RawJson<'a>,
    /// Declared prerequisites.
    #[serde(default, borrow)]
    pub requires: Vec<RawPrerequisite<'a>>,
    /// Support claims.
    #[serde(default, borrow)]
    pub support: Claims<'a>,
    /// Certificate reference.
    #[serde(default, borrow)]
    pub certificate: Option<std::borrow::Cow<'a, str>>,
}

/// A response as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponse<'a> {
    /// Format version; 1 when absent.
    #[serde(default)]
    pub format: Option<u32>,
    /// Response id.
    pub response_id: String,
    /// Agent id.
    pub agent_id: String,
    /// The agent's generation counter.
    pub generation: u64,
    /// The catalog the agent planned against.
    pub catalog: CatalogRef,
    /// Components.
    #[serde(borrow, deserialize_with = "bounded_components")]
    pub components: Vec<RawComponent<'a>>,
}

/// A fresh candidate for an obligation, as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCandidate<'a> {
    /// Format version; 1 when absent.
    #[serde(default)]
    pub format: Option<u32>,
    /// The obligation the candidate answers.
    pub obligation: u64,
    /// The response it belongs to.
    pub response_id: String,
    /// Agent id.
    pub agent_id: String,
    /// The agent's generation counter; must be later than the replaced instances'.
    pub generation: u64,
    /// The catalog the agent planned against.
    pub catalog: CatalogRef,
    /// Replacement components.
    #[serde(borrow, deserialize_with = "bounded_components")]
    pub components: Vec<RawComponent<'a>>,
}

/// What serde_json reports when a 65th component begins.
const TOO_MANY_COMPONENTS_ERROR: &str = "too many components";

/// The components array, read up to [`MAX_COMPONENTS`]: where another begins after that many,
/// reading stops with an error before that component is read (so a refusal costs what the
/// limit allows, whatever the input's size).
fn bounded_components<'de: 'a, 'a, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<RawComponent<'a>>, D::Error> {
    struct V<'a>(std::marker::PhantomData<&'a ()>);
    /// Refuses the element it is asked for without reading it.
    struct Refuse;
    impl<'de> serde::de::DeserializeSeed<'de> for Refuse {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
            Err(serde::de::Error::custom(TOO_MANY_COMPONENTS_ERROR))
        }
    }
    impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
        type Value = Vec<RawComponent<'a>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of components")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Vec<RawComponent<'a>>, A::Error> {
            let mut out = Vec::with_capacity(MAX_COMPONENTS);
            while out.len() < MAX_COMPONENTS {
                match seq.next_element()? {
                    Some(c) => out.push(c),
                    None => return Ok(out),
                }
            }
            seq.next_element_seed(Refuse)?;
            Ok(out)
        }
    }
    d.deserialize_seq(V(std::marker::PhantomData))
}

/// The refusal of a response or candidate with more than [`MAX_COMPONENTS`] components, from
/// either reader of stage one.
fn too_many_components() -> Rejection {
    Rejection::new(
        ReasonCode::TOO_MANY_COMPONENTS,
        Vec::new(),
        format!("more than {MAX_COMPONENTS} components; the limit is {MAX_COMPONENTS}"),
    )
}

/// Maps a serde_json error to the most specific code.
pub(crate) fn classify_json_error(e: &serde_json::Error) -> ReasonCode {
    let msg = e.to_string();
    if msg.starts_with(TOO_MANY_COMPONENTS_ERROR) {
        ReasonCode::TOO_MANY_COMPONENTS
    } else if msg.contains("unknown field")
        || msg.contains("unknown variant") && msg.contains("field")
    {
        ReasonCode::UNKNOWN_FIELD
    } else if msg.contains("duplicate field") || msg.contains("duplicate key") {
        ReasonCode::DUPLICATE_KEY
    } else if msg.contains("too many support claims") {
        ReasonCode::TOO_MANY_SUPPORT_CLAIMS
    } else {
        ReasonCode::MALFORMED_JSON
    }
}

fn check_size(bytes: &[u8]) -> Result<(), Rejection> {
    if bytes.len() > MAX_RESPONSE_BYTES {
        return Err(Rejection::new(
            ReasonCode::RESPONSE_TOO_LARGE,
            Vec::new(),
            format!("{} bytes; the limit is {MAX_RESPONSE_BYTES}", bytes.len()),
        ));
    }
    Ok(())
}

fn utf8(bytes: &[u8]) -> Result<&str, Rejection> {
    std::str::from_utf8(bytes).map_err(|e| {
        Rejection::new(
            ReasonCode::MALFORMED_JSON,
            Vec::new(),
            format!("not UTF-8: {e}"),
        )
    })
}

fn check_format(format: Option<u32>) -> Result<(), Rejection> {
    match format {
        None | Some(FORMAT_VERSION) => Ok(()),
        Some(v) => Err(Rejection::new(
            ReasonCode::UNSUPPORTED_FORMAT,
            Vec::new(),
            format!("format {v}; this gateway speaks format {FORMAT_VERSION}"),
        )),
    }
}

/// Stage one for a response: byte limit, UTF-8 and JSON shape.
///
/// # Errors
/// A [`Rejection`] with `RESPONSE_TOO_LARGE`, `MALFORMED_JSON`, `UNKNOWN_FIELD`,
/// `DUPLICATE_KEY`, `TOO_MANY_SUPPORT_CLAIMS` or `UNSUPPORTED_FORMAT`.
pub fn parse_envelope(bytes: &[u8]) -> Result<RawResponse<'_>, Rejection> {
    parse_envelope_named(bytes).map_err(|(rej, _)| rej)
}

/// [`parse_envelope`], and with a rejection the response id when the reader had it (a
/// response refused at the component limit names itself in its receipt).
///
/// # Errors
/// As [`parse_envelope`], with the response id or an empty string.
pub fn parse_envelope_named(bytes: &[u8]) -> Result<RawResponse<'_>, (Rejection, String)> {
    let raw: RawResponse<'_> = read(bytes, fast::response)?;
    check_format(raw.format).map_err(|e| (e, raw.response_id.clone()))?;
    check_generation(raw.generation).map_err(|e| (e, raw.response_id.clone()))?;
    Ok(raw)
}

/// The largest generation taken: 2^53 - 1, the largest integer every JSON reader keeps exact.
pub const MAX_GENERATION: u64 = (1 << 53) - 1;

/// A generation past [`MAX_GENERATION`] is refused: an agent that sends `u64::MAX` would
/// otherwise leave no later generation for a fresh candidate.
///
/// # Errors
/// `GENERATION_OUT_OF_RANGE`.
fn check_generation(g: u64) -> Result<(), Rejection> {
    if g > MAX_GENERATION {
        return Err(Rejection::new(
            ReasonCode::GENERATION_OUT_OF_RANGE,
            Vec::new(),
            format!("generation {g} is larger than {MAX_GENERATION} (2^53 - 1)"),
        ));
    }
    Ok(())
}

/// Stage one for a fresh candidate.
///
/// # Errors
/// As [`parse_envelope`].
pub fn parse_candidate(bytes: &[u8]) -> Result<RawCandidate<'_>, Rejection> {
    let raw: RawCandidate<'_> = read(bytes, fast::candidate).map_err(|(rej, _)| rej)?;
    check_format(raw.format)?;
    check_generation(raw.generation)?;
    Ok(raw)
}

/// Stage one's first step, by itself: when the envelope's top-level `components` array, found
/// by structure, holds more than [`MAX_COMPONENTS`] elements, the response id for the refusal's
/// receipt (empty when none came plainly before the array). See `count` for what it reads.
pub fn too_many_by_structure(bytes: &[u8]) -> Option<String> {
    count::too_many_components(bytes)
}

/// The byte limit, the component count by structure and UTF-8, then the fast reader, or
/// serde_json where it steps aside. A
/// rejection comes with the response id when the fast reader had read it.
fn read<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
    fast: impl FnOnce(&'a str) -> fast::Fast<T>,
) -> Result<T, (Rejection, String)> {
    check_size(bytes).map_err(|e| (e, String::new()))?;
    // The component limit first, by structure alone: a refusal costs what the limit allows.
    if let Some(response_id) = count::too_many_components(bytes) {
        return Err((too_many_components(), response_id));
    }
    let text = utf8(bytes).map_err(|e| (e, String::new()))?;
    match fast(text) {
        fast::Fast::Read(raw) => Ok(raw),
        fast::Fast::TooManyComponents { response_id } => {
            Err((too_many_components(), response_id.unwrap_or_default()))
        }
        fast::Fast::StepAside => serde_json::from_str(text).map_err(|e| {
            let rej = match classify_json_error(&e) {
                ReasonCode::TOO_MANY_COMPONENTS => too_many_components(),
                code => Rejection::new(code, Vec::new(), super::strict::explain(bytes, &e)),
            };
            (rej, String::new())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"response_id":"r1","agent_id":"a","generation":1,
        "catalog":{"id":"c","version":1},
        "components":[{"id":"e1","type":"notice","payload":{"text":"hi"}}]}"#;

    #[test]
    fn a_generation_past_two_to_the_53_is_refused() {
        let at = |g: u64| OK.replace("\"generation\":1", &format!("\"generation\":{g}"));
        assert!(parse_envelope(at(MAX_GENERATION).as_bytes()).is_ok());
        for g in [MAX_GENERATION + 1, u64::MAX] {
            let e = parse_envelope(at(g).as_bytes()).unwrap_err();
            assert_eq!(e.code(), ReasonCode::GENERATION_OUT_OF_RANGE, "{g}");
        }
    }

    #[test]
    fn parses_a_minimal_envelope() {
        let r = parse_envelope(OK.as_bytes()).unwrap();
        assert_eq!(r.components.len(), 1);
        assert_eq!(r.components[0].payload.get(), r#"{"text":"hi"}"#);
    }

    #[test]
    fn rejects_unknown_fields_and_duplicate_keys() {
        let unknown = OK.replace("\"generation\":1", "\"generation\":1,\"extra\":true");
        assert_eq!(
            parse_envelope(unknown.as_bytes()).unwrap_err().code(),
            ReasonCode::UNKNOWN_FIELD
        );
        let dup = OK.replace("\"generation\":1", "\"generation\":1,\"generation\":2");
        assert_eq!(
            parse_envelope(dup.as_bytes()).unwrap_err().code(),
            ReasonCode::DUPLICATE_KEY
        );
        let dup_claim = OK.replace(
            "\"payload\":{\"text\":\"hi\"}",
            "\"payload\":{\"text\":\"hi\"},\"support\":{\"map\":{\"epoch\":1},\"map\":{\"epoch\":2}}",
        );
        assert_eq!(
            parse_envelope(dup_claim.as_bytes()).unwrap_err().code(),
            ReasonCode::DUPLICATE_KEY
        );
    }

    /// 64 components are read; a 65th is refused where it begins, by either reader, and what
    /// follows is never read (here it is not even JSON). The plain-shape reader keeps the
    /// response id for the rejection's receipt.
    #[test]
    fn a_65th_component_is_refused_where_it_begins() {
        let text = |rid: &str, n: usize, tail: &str| {
            let comps: Vec<String> = (0..n)
                .map(|k| format!(r#"{{"id":"e{k}","type":"notice","payload":{{"text":"hi"}}}}"#))
                .collect();
            format!(
                r#"{{"response_id":"{rid}","agent_id":"a","generation":1,"catalog":{{"id":"c","version":1}},"components":[{}{tail}"#,
                comps.join(",")
            )
        };
        for rid in ["r1", "r\\u0031"] {
            let at_64 = text(rid, 64, "]}");
            assert_eq!(
                parse_envelope(at_64.as_bytes()).unwrap().components.len(),
                64
            );
            for tail in [
                r#",{"id":"e64","type":"notice","payload":{"text":"hi"}}]}"#,
                ",{ not json",
                ",7",
            ] {
                let over = text(rid, 64, tail);
                let (rej, named) = parse_envelope_named(over.as_bytes()).unwrap_err();
                assert_eq!(rej.code(), ReasonCode::TOO_MANY_COMPONENTS, "{rid} {tail}");
                assert_eq!(rej.message(), "more than 64 components; the limit is 64");
                // The escaped id is read by serde_json, which does not hand it back.
                assert_eq!(named, if rid == "r1" { "r1" } else { "" });
            }
            // A trailing comma or the end of the input after the 64th is malformed, as before.
            for tail in [",]}", ","] {
                let bad = text(rid, 64, tail);
                assert_eq!(
                    parse_envelope(bad.as_bytes()).unwrap_err().code(),
                    ReasonCode::MALFORMED_JSON,
                    "{rid} {tail}"
                );
            }
        }
    }

    #[test]
    fn rejects_oversize_and_bad_format() {
        let big = vec![b' '; MAX_RESPONSE_BYTES + 1];
        assert_eq!(
            parse_envelope(&big).unwrap_err().code(),
            ReasonCode::RESPONSE_TOO_LARGE
        );
        let v2 = OK.replacen('{', "{\"format\":2,", 1);
        assert_eq!(
            parse_envelope(v2.as_bytes()).unwrap_err().code(),
            ReasonCode::UNSUPPORTED_FORMAT
        );
        assert_eq!(
            parse_envelope(b"{").unwrap_err().code(),
            ReasonCode::MALFORMED_JSON
        );
    }
}
