//! The fast reader for envelopes in the shape agents send.
//!
//! Nearly every envelope is plain: strings without escapes, integers written as digits, each
//! known field once. This reader takes exactly that shape in one pass over the bytes and builds
//! the same [`RawResponse`] / [`RawCandidate`] serde_json builds (strings borrowed from the
//! input, payloads as the same raw slices, each checked here to be one well-formed JSON value).
//! Anything else — an escape outside a payload (or a `\u` escape inside one), a number with a
//! fraction or a sign where an integer is read, `null` where it is not read, an unknown or
//! repeated field, a syntax error — makes it step aside with `None`, and
//! [`super::parse_envelope`] reads the input again with serde_json from the start. So every
//! rejection, its reason code and its message still come from one place, and this reader only
//! has to be right about what it accepts.
//!
//! What holds the two to the same answer: `tests/envelope_fast_path.rs` (every corpus envelope
//! and thousands of mutations of them: whatever this reader accepts, serde_json accepts with
//! the same value) and the `envelope` fuzz target, which checks the same on every input.

use std::borrow::Cow;

use super::{
    CatalogRef, Claim, Claims, MAX_COMPONENTS, MAX_PREREQUISITES, MAX_SUPPORT_CLAIMS, RawCandidate,
    RawComponent, RawJson, RawPrerequisite, RawResponse,
};
use crate::ids::Id;

/// What the fast reader made of an envelope.
#[derive(Debug)]
pub enum Fast<T> {
    /// Read: the envelope is in the common shape, and this is what serde_json reads too.
    Read(T),
    /// Refused at the component limit: everything up to a 65th component was in the common
    /// shape, and a 65th begins. Reading stops there, as serde_json's bounded reader does at the
    /// same place; nothing after it is looked at. The response id, when it came first.
    TooManyComponents {
        /// The envelope's `response_id`, when it came before `components`.
        response_id: Option<String>,
    },
    /// Not in the common shape (or in error): serde_json reads it from the start.
    StepAside,
}

impl<T> Fast<T> {
    /// The value read, if any.
    pub fn read(self) -> Option<T> {
        match self {
            Fast::Read(t) => Some(t),
            Fast::TooManyComponents { .. } | Fast::StepAside => None,
        }
    }

    /// The same outcome with the value read mapped by `f`.
    pub fn map_read<U>(self, f: impl FnOnce(T) -> U) -> Fast<U> {
        match self {
            Fast::Read(t) => Fast::Read(f(t)),
            Fast::TooManyComponents { response_id } => Fast::TooManyComponents { response_id },
            Fast::StepAside => Fast::StepAside,
        }
    }
}

/// A response in the common shape, a refusal at the component limit, or a step aside for
/// serde_json to read it.
pub fn response(text: &str) -> Fast<RawResponse<'_>> {
    // A response has no `obligation`: serde_json refuses the field where it stands, so neither
    // a response that has one nor a refusal at the limit after it is this reader's to give.
    outcome(text, false, |f| {
        Some(RawResponse {
            format: f.format.flatten(),
            response_id: f.response_id?,
            agent_id: f.agent_id?,
            generation: f.generation?,
            catalog: f.catalog?,
            components: f.components?,
        })
    })
}

/// A fresh candidate in the common shape, a refusal at the component limit, or a step aside
/// for serde_json to read it.
pub fn candidate(text: &str) -> Fast<RawCandidate<'_>> {
    outcome(text, true, |f| {
        Some(RawCandidate {
            format: f.format.flatten(),
            obligation: f.obligation?,
            response_id: f.response_id?,
            agent_id: f.agent_id?,
            generation: f.generation?,
            catalog: f.catalog?,
            components: f.components?,
        })
    })
}

/// What [`fields`] made of `text`, with the envelope built by `build` (`None`: a field is
/// missing, serde_json reports it). `takes_obligation`: whether the envelope has that field.
fn outcome<'a, T>(
    text: &'a str,
    takes_obligation: bool,
    build: impl FnOnce(Fields<'a>) -> Option<T>,
) -> Fast<T> {
    match fields(text) {
        Err(Stop::TooMany {
            response_id,
            obligation,
        }) if takes_obligation || !obligation => Fast::TooManyComponents { response_id },
        Err(_) => Fast::StepAside,
        Ok(f) if !takes_obligation && f.obligation.is_some() => Fast::StepAside,
        Ok(f) => build(f).map_or(Fast::StepAside, Fast::Read),
    }
}

/// Why [`fields`] stopped early.
enum Stop {
    /// Not the common shape.
    Aside,
    /// A 65th component begins. What was read before it: the response id, and whether an
    /// `obligation` field came.
    TooMany {
        response_id: Option<String>,
        obligation: bool,
    },
}

/// The top-level fields of either envelope, each read at most once.
#[derive(Default)]
struct Fields<'a> {
    format: Option<Option<u32>>,
    obligation: Option<u64>,
    response_id: Option<String>,
    agent_id: Option<String>,
    generation: Option<u64>,
    catalog: Option<CatalogRef>,
    components: Option<Vec<RawComponent<'a>>>,
}

fn fields(text: &str) -> Result<Fields<'_>, Stop> {
    let mut c = Cursor::new(text);
    let mut f = Fields::default();
    let mut over = false;
    let read = c.object(|c, key| match key {
        "format" => put(&mut f.format, c.opt_u32()?),
        "obligation" => put(&mut f.obligation, c.u64()?),
        "response_id" => put(&mut f.response_id, c.string()?),
        "agent_id" => put(&mut f.agent_id, c.string()?),
        "generation" => put(&mut f.generation, c.u64()?),
        "catalog" => put(&mut f.catalog, c.catalog()?),
        "components" if f.components.is_some() => None,
        "components" => put(&mut f.components, c.components(&mut over)?),
        _ => None,
    });
    if over {
        return Err(Stop::TooMany {
            response_id: f.response_id,
            obligation: f.obligation.is_some(),
        });
    }
    read.and_then(|()| c.end()).ok_or(Stop::Aside)?;
    Ok(f)
}

/// Deepest payload nesting this reader takes.
const MAX_RAW_DEPTH: usize = 32;

/// Fills a field once; a second occurrence steps aside (serde_json reports it).
fn put<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Cursor<'a> {
        Cursor { text, at: 0 }
    }

    /// Skips JSON whitespace and returns the next byte. (The scanning loops here work on a
    /// local copy of the position: kept in `self`, every byte would wait on a store.)
    fn peek(&mut self) -> Option<u8> {
        let rest = self.text.as_bytes().get(self.at..)?;
        let skip = rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'))?;
        self.at += skip;
        rest.get(skip).copied()
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.peek()? == want).then(|| self.at += 1)
    }

    /// Only whitespace may follow the top-level value.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string without escapes or control characters, borrowed.
    fn str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let rest = self.text.as_bytes().get(start..)?;
        let len = rest
            .iter()
            .position(|b| matches!(b, b'"' | b'\\' | 0..=0x1f))?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        // Both ends sit next to an ASCII quote, so they are character boundaries.
        let s = self.text.get(start..start + len)?;
        self.at = start + len + 1;
        Some(s)
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_owned)
    }

    fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            let rest = self.text.as_bytes().get(self.at..)?;
            if !rest.starts_with(b"null") {
                return None;
            }
            self.at += 4;
            return Some(true);
        }
        Some(false)
    }

    /// A non-negative integer written as digits: no sign, no leading zero, no fraction or
    /// exponent, within `u64`.
    fn u64(&mut self) -> Option<u64> {
        self.peek()?;
        let rest = self.text.as_bytes().get(self.at..)?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for b in rest.get(..digits)? {
            v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        }
        let leading_zero = digits > 1 && rest.first() == Some(&b'0');
        if digits == 0 || leading_zero || matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.at += digits;
        Some(v)
    }

    fn opt_u32(&mut self) -> Option<Option<u32>> {
        if self.null()? {
            return Some(None);
        }
        u32::try_from(self.u64()?).ok().map(Some)
    }

    /// `{"key": value, ...}`, each value read by `field`.
    fn object(&mut self, field: impl FnMut(&mut Cursor<'a>, &'a str) -> Option<()>) -> Option<()> {
        self.object_with(Cursor::str, field)
    }

    /// `{"key": value, ...}`, each key read by `key` and each value by `field`.
    fn object_with<K>(
        &mut self,
        key: fn(&mut Cursor<'a>) -> Option<K>,
        mut field: impl FnMut(&mut Cursor<'a>, K) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = key(self)?;
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[item, ...]`, each item read by `item`.
    fn array(&mut self, mut item: impl FnMut(&mut Cursor<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object or array kept as its exact text, checked here to be one well-formed JSON
    /// value (what serde_json checks for a raw value); a payload this reader cannot vouch for
    /// (a `\\u` escape, a control character, nesting past 32) steps aside.
    fn raw(&mut self) -> Option<RawJson<'a>> {
        if !matches!(self.peek()?, b'{' | b'[') {
            return None;
        }
        let start = self.at;
        self.value(0)?;
        Some(RawJson(self.text.get(start..self.at)?))
    }

    /// One JSON value at nesting `depth` within a payload.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            // serde_json limits nesting over the whole document; a payload this deep (no
            // payload kind nests past 2) is left to it, so the limit is its.
            b'{' | b'[' if depth >= MAX_RAW_DEPTH => None,
            b'{' => self.object_with(Cursor::json_str, |c, _| c.value(depth + 1)),
            b'[' => self.array(|c| c.value(depth + 1)),
            b'"' => self.json_str(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.number(),
        }
    }

    /// A string inside a payload: plain, or with the one-letter escapes (`\\"`, `\\\\`,
    /// `\\/`, `\\b`, `\\f`, `\\n`, `\\r`, `\\t`).
    fn json_str(&mut self) -> Option<()> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        loop {
            match *bytes.get(at)? {
                b'"' => break,
                b'\\' => {
                    if !matches!(
                        bytes.get(at + 1)?,
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't'
                    ) {
                        return None;
                    }
                    at += 2;
                }
                0..=0x1f => return None,
                _ => at += 1,
            }
        }
        self.at = at + 1;
        Some(())
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        self.text
            .as_bytes()
            .get(self.at..)?
            .starts_with(w)
            .then(|| self.at += w.len())
    }

    /// A JSON number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let digits = |at: usize| {
            bytes
                .get(at..)
                .map_or(0, |r| r.iter().take_while(|b| b.is_ascii_digit()).count())
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => at += digits(at),
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            let n = digits(at + 1);
            if n == 0 {
                return None;
            }
            at += 1 + n;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            let n = digits(at);
            if n == 0 {
                return None;
            }
            at += n;
        }
        self.at = at;
        Some(())
    }

    fn catalog(&mut self) -> Option<CatalogRef> {
        let (mut id, mut version) = (None, None);
        self.object(|c, key| match key {
            "id" => put(&mut id, c.string()?),
            "version" => put(&mut version, u32::try_from(c.u64()?).ok()?),
            _ => None,
        })?;
        Some(CatalogRef {
            id: id?,
            version: version?,
        })
    }

    /// The components, at most [`MAX_COMPONENTS`]: where a next one begins after that many,
    /// `over` is set and reading stops (`None`). A `]` after the comma (a trailing comma) or the
    /// end of the input there steps aside as usual, as serde_json reports those first.
    fn components(&mut self, over: &mut bool) -> Option<Vec<RawComponent<'a>>> {
        let mut out = Vec::with_capacity(MAX_COMPONENTS);
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(out);
        }
        loop {
            out.push(self.component()?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => return None,
            }
            if out.len() == MAX_COMPONENTS {
                *over = !matches!(self.peek(), None | Some(b']'));
                return None;
            }
        }
    }

    fn component(&mut self) -> Option<RawComponent<'a>> {
        let (mut id, mut ty, mut payload) = (None, None, None);
        let (mut requires, mut support, mut certificate) = (None, None, None);
        self.object(|c, key| match key {
            "id" => put(&mut id, Cow::Borrowed(c.str()?)),
            "type" => put(&mut ty, Cow::Borrowed(c.str()?)),
            "payload" => put(&mut payload, c.raw()?),
            "requires" => put(&mut requires, c.requires()?),
            "support" => put(&mut support, c.claims()?),
            "certificate" => {
                let cert = if c.null()? {
                    None
                } else {
                    Some(Cow::Borrowed(c.str()?))
                };
                put(&mut certificate, cert)
            }
            _ => None,
        })?;
        Some(RawComponent {
            id: id?,
            ty: ty?,
            payload: payload?,
            requires: requires.unwrap_or_default(),
            support: support.unwrap_or_default(),
            certificate: certificate.flatten(),
        })
    }

    fn requires(&mut self) -> Option<Vec<RawPrerequisite<'a>>> {
        // Room for as many as a valid component may declare: one allocation, no regrowth.
        let mut out = Vec::with_capacity(MAX_PREREQUISITES);
        self.array(|c| {
            let p = match c.compact_prerequisite() {
                Some(p) => p,
                None => {
                    let (mut id, mut phase) = (None, None);
                    c.object(|c, key| match key {
                        "id" => put(&mut id, Cow::Borrowed(c.str()?)),
                        "phase" => put(&mut phase, Cow::Borrowed(c.str()?)),
                        _ => None,
                    })?;
                    RawPrerequisite {
                        id: id?,
                        phase: phase?,
                    }
                }
            };
            out.push(p);
            Some(())
        })?;
        Some(out)
    }

    /// `{"id":"…","phase":"…"}` written without whitespace, as nearly every prerequisite is,
    /// read by comparing its fixed parts; `None` (and the position unchanged) for any other
    /// spelling, which [`Cursor::object`] then reads.
    fn compact_prerequisite(&mut self) -> Option<RawPrerequisite<'a>> {
        const ID: &[u8; 7] = b"{\"id\":\"";
        const PHASE: &[u8; 10] = b",\"phase\":\"";
        let bytes = self.text.as_bytes();
        if bytes.get(self.at..)?.first_chunk::<7>()? != ID {
            return None;
        }
        let id_start = self.at + ID.len();
        let id_len = bytes
            .get(id_start..)?
            .iter()
            .position(|b| matches!(b, b'"' | b'\\' | 0..=0x1f))?;
        let id_end = id_start + id_len;
        if bytes.get(id_end..)?.first_chunk::<11>()?.split_first()? != (&b'"', PHASE) {
            return None;
        }
        let phase_start = id_end + 1 + PHASE.len();
        // The three phase names, whole with their closing `"}`; anything else is read generally.
        let rest = bytes.get(phase_start..)?;
        let phase_len = match rest.first()? {
            b'e' if rest.first_chunk() == Some(b"emitted\"}") => 7,
            b'd' if rest.first_chunk() == Some(b"dispatched\"}") => 10,
            b'o' if rest.first_chunk() == Some(b"observed_success\"}") => 16,
            _ => return None,
        };
        // Every end sits next to an ASCII quote, so each is a character boundary.
        let id = self.text.get(id_start..id_end)?;
        let phase = self.text.get(phase_start..phase_start + phase_len)?;
        self.at = phase_start + phase_len + 2;
        Some(RawPrerequisite {
            id: Cow::Borrowed(id),
            phase: Cow::Borrowed(phase),
        })
    }

    fn claims(&mut self) -> Option<Claims<'a>> {
        let mut out: Vec<(Cow<'a, str>, Claim)> = Vec::new();
        self.object(|c, key| {
            if out.len() >= MAX_SUPPORT_CLAIMS || out.iter().any(|(k, _)| k == key) {
                return None;
            }
            let (mut epoch, mut provenance) = (None, None);
            c.object(|c, field| match field {
                "epoch" => {
                    let e = if c.null()? { None } else { Some(c.u64()?) };
                    put(&mut epoch, e)
                }
                "provenance" => {
                    let p = if c.null()? {
                        None
                    } else {
                        Some(Id::new(c.str()?).ok()?)
                    };
                    put(&mut provenance, p)
                }
                _ => None,
            })?;
            out.push((
                Cow::Borrowed(key),
                Claim {
                    epoch: epoch.flatten(),
                    provenance: provenance.flatten(),
                },
            ));
            Some(())
        })?;
        Some(Claims(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(text: &str) {
        let fast = response(text).read().map(|r| format!("{r:?}"));
        let slow = serde_json::from_str::<RawResponse<'_>>(text)
            .ok()
            .map(|r| format!("{r:?}"));
        assert!(fast.is_some(), "the fast reader stepped aside on {text}");
        assert_eq!(fast, slow, "{text}");
    }

    fn steps_aside(text: &str) {
        assert!(matches!(response(text), Fast::StepAside), "{text}");
    }

    const OK: &str = r#"{"response_id":"r1","agent_id":"a","generation":1,
        "catalog":{"id":"c","version":1},
        "components":[{"id":"e1","type":"notice","payload":{"text":"a \"quoted\" }"},
          "requires":[{"phase":"emitted","id":"e0"}],
          "support":{"map":{"epoch":7},"bounds":{"provenance":"c-12","epoch":null}},
          "certificate":null}, {"id":"e0","type":"notice","payload":{"text":"x"}}]}"#;

    #[test]
    fn reads_the_common_shape_as_serde_json_does() {
        same(OK);
        same(&OK.replace(
            "\"generation\":1",
            "\"format\":1,\"generation\":18446744073709551615",
        ));
        same(&OK.replace("\"certificate\":null", "\"certificate\":\"cert-1\""));
        // Prerequisites in the compact spelling (read by their fixed parts) and spaced out.
        let compact = OK.replace(
            r#"{"phase":"emitted","id":"e0"}"#,
            r#"{"id":"e0","phase":"emitted"},{"id":"x.1-_","phase":"dispatched"}"#,
        );
        same(&compact);
        same(&compact.replace(r#"{"id":"e0","#, r#"{ "id" : "e0" ,"#));
        // Each phase name is matched whole; any other (rejected later, in stage two) is read
        // by the general object reader.
        for phase in [
            "observed_success",
            "later",
            "dispatched2",
            "emitte",
            "",
            "Emitted",
        ] {
            same(&compact.replace("\"dispatched\"", &format!("\"{phase}\"")));
        }
        // Payloads: every kind of JSON value, checked by this reader.
        for payload in [
            r#"{"n":[-0,0.5,1.5e-3,12E+2,7e0,-3.25E-1,10]}"#,
            r#"{"t":true,"f":false,"z":null,"o":{},"a":[],"s":""}"#,
            r#"{"esc":"\"q\" \\ \/ \b\f\n\r\t","k\"ey":1}"#,
            r#"[ {"a" : [ 1 , [ 2 ] ] } , "x" ]"#,
            r#"{"a":1,"a":2}"#,
        ] {
            same(&OK.replace(r#"{"text":"x"}"#, payload));
        }
        same(
            &OK.replace("\"response_id\"", " \n\t\"response_id\"")
                .replace("}]}", "} ] }\n"),
        );
    }

    #[test]
    fn steps_aside_for_everything_else() {
        steps_aside(&OK.replace("\"r1\"", "\"r\\u0031\""));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":1.0"));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":01"));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":-1"));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":18446744073709551616"));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":1,\"generation\":1"));
        steps_aside(&OK.replace("\"generation\":1", "\"generation\":1,\"extra\":0"));
        steps_aside(&OK.replace("\"epoch\":7", "\"epoch\":7,\"epoch\":7"));
        steps_aside(&OK.replace("\"text\":\"x\"", "\"text\":\"x\",}"));
        steps_aside(&OK.replace("\"c-12\"", "\"c 12\""));
        let compact = OK.replace(
            r#"{"phase":"emitted","id":"e0"}"#,
            r#"{"id":"e0","phase":"emitted"}"#,
        );
        steps_aside(&compact.replace("\"e0\",", "\"e\\u0030\","));
        // Payloads this reader does not vouch for: serde_json reads (and mostly refuses) them.
        for payload in [
            r#"{"u":"\u0041"}"#,
            r#"{"n":01}"#,
            r#"{"n":1.}"#,
            r#"{"n":.5}"#,
            r#"{"n":1e}"#,
            r#"{"n":+1}"#,
            r#"{"n":-}"#,
            r#"{"n":NaN}"#,
            r#"{"n":tru}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            "{\"c\":\"a\u{1}b\"}",
            r#"{"e":"\x"}"#,
        ] {
            steps_aside(&OK.replace(r#"{"text":"x"}"#, payload));
        }
        steps_aside(&compact.replace("\"emitted\"}", "\"emitted\",\"x\":1}"));
        steps_aside(&compact.replace("\"emitted\"}", "\"emitted\",\"id\":\"e0\"}"));
        steps_aside(&OK.replace("{\"text\":\"x\"}", "\"x\""));
        steps_aside(&format!("{OK} x"));
        // Nested past serde_json's document limit only together with the envelope around it.
        let deep = format!("{}1{}", "[".repeat(126), "]".repeat(126));
        steps_aside(&OK.replace("{\"text\":\"x\"}", &format!("{{\"text\":{deep}}}")));
        steps_aside(&OK[..OK.len() - 1]);
    }
}
