//! Stage one's first step: the components counted by their structure alone.
//!
//! An envelope with more than [`MAX_COMPONENTS`] components is refused whatever else it
//! holds, and refusing it should cost what the limit allows, not what reading 64 components
//! (or the whole input) costs. So before either reader runs, the top-level `components` array
//! is found and its elements counted from the input's structure only: string boundaries
//! (quotes, with backslash escapes) and brackets. Nothing inside an element is read. Where a
//! 65th element begins, the envelope is `TOO_MANY_COMPONENTS`.
//!
//! The count works on 64-byte blocks with 16-byte SIMD compares (through `wide`, which is SSE2
//! on x86_64 and NEON on aarch64, both part of those targets' baseline, and plain code
//! elsewhere): one bit per byte for quotes, backslashes, opening and closing brackets; the
//! escaped bytes from the backslash runs; the bytes inside strings as a running XOR of the
//! unescaped quotes; then the brackets outside strings, walked in order to follow the depth.
//! About 9 bytes a nanosecond here (the backslash mask is assembled only for the blocks that
//! hold one), against about 1.4 for the readers, which build what they read.
//!
//! What it promises, held by the tests below and by the `envelope` fuzz target: on valid
//! JSON, an array is over the limit exactly when it has more than `limit` elements that are
//! objects or arrays (components are objects); on anything else it may say either, and the
//! input is refused either way.

use wide::u8x16;

use super::MAX_COMPONENTS;

/// How far into an envelope its `components` array is looked for: the fields before it are
/// short (ids of at most 64 bytes, a catalog reference, a few integers), so a plain envelope's
/// array begins well within this. Past it the readers decide, as they always have.
const PREFIX: usize = 1024;

/// The top-level fields an envelope or a candidate may hold before its components.
const FIELDS: [&str; 6] = [
    "format",
    "response_id",
    "agent_id",
    "generation",
    "catalog",
    "obligation",
];

/// When the envelope's top-level `components` array holds more than [`MAX_COMPONENTS`]
/// elements: the response id if a plain one came before the array (else empty), for the
/// refusal's receipt. `None` when it does not, or when the array is not found by structure
/// within the envelope's first [`PREFIX`] bytes among known fields (the readers then decide).
pub(crate) fn too_many_components(bytes: &[u8]) -> Option<String> {
    let (start, response_id) = components_start(bytes)?;
    let array = bytes.get(start..)?;
    over_limit(array, MAX_COMPONENTS).then(|| {
        response_id
            .and_then(|id| std::str::from_utf8(id).ok())
            .unwrap_or_default()
            .to_owned()
    })
}

/// Where the top-level `components` array begins (its `[`), and the plain `response_id` read
/// before it. The envelope must open as an object whose keys before `components` are plain
/// known fields, each once.
fn components_start(bytes: &[u8]) -> Option<(usize, Option<&[u8]>)> {
    let end = bytes.len().min(PREFIX);
    let head = bytes.get(..end)?;
    let mut i = skip_ws(head, 0);
    if head.get(i) != Some(&b'{') {
        return None;
    }
    let mut seen = [false; FIELDS.len()];
    let mut response_id = None;
    loop {
        i = skip_ws(head, i + 1);
        let (key, after) = plain_string(head, i)?;
        i = skip_ws(head, after);
        if head.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(head, i + 1);
        if key == b"components" {
            return (head.get(i) == Some(&b'[')).then_some((i, response_id));
        }
        let field = FIELDS.iter().position(|f| f.as_bytes() == key)?;
        let once = seen.get_mut(field)?;
        if *once {
            return None;
        }
        *once = true;
        if key == b"response_id" {
            let (id, after) = plain_string(head, i)?;
            response_id = Some(id);
            i = after;
        } else {
            i = skip_value(head, i)?;
        }
        i = skip_ws(head, i);
        if head.get(i) != Some(&b',') {
            return None;
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The text of a string without escapes starting at `i`, and the position after it.
fn plain_string(b: &[u8], i: usize) -> Option<(&[u8], usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let rest = b.get(i + 1..)?;
    let len = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
    if rest.get(len) != Some(&b'"') {
        return None;
    }
    Some((rest.get(..len)?, i + 1 + len + 1))
}

/// The position after the value that starts at `i` (a string, a number or literal, or an
/// object or array), found by structure.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match *b.get(j)? {
            b'"' => {
                j = string_end(b, j)?;
                if depth == 0 {
                    return Some(j);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            // The end of a number or literal.
            b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some(j),
            _ => {}
        }
        j += 1;
    }
}

/// The position after the string that starts at `i` (a `"`), escapes skipped.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// Whether the JSON array beginning at `array[0]` (a `[`) holds more than `limit` elements
/// that begin with `{` or `[`, counted by structure; stops where the one past the limit begins.
/// An array that ends, or input that runs out, first is not over.
pub(crate) fn over_limit(array: &[u8], limit: usize) -> bool {
    let mut scan = Scan::default();
    let mut blocks = array.chunks_exact(64);
    for block in blocks.by_ref() {
        let Ok(block) = <&[u8; 64]>::try_from(block) else {
            return false;
        };
        match scan.block(block, limit) {
            Some(over) => return over,
            None => continue,
        }
    }
    // The last, short block, padded with spaces (which are nothing to the scan).
    let rest = blocks.remainder();
    let mut last = [b' '; 64];
    if let Some(head) = last.get_mut(..rest.len()) {
        head.copy_from_slice(rest);
    }
    scan.block(&last, limit).unwrap_or(false)
}

/// The state carried from one block to the next.
#[derive(Default)]
struct Scan {
    /// All ones when the block begins inside a string.
    in_string: u64,
    /// 1 when the block's first byte is escaped (the previous block ended in an odd run of
    /// backslashes).
    escape: u64,
    /// Brackets open, the array's own included.
    depth: usize,
    /// Elements begun.
    elements: usize,
}

impl Scan {
    /// One block: `Some(true)` where the element past `limit` begins, `Some(false)` where the
    /// array closes (or the brackets do not balance), `None` to go on.
    fn block(&mut self, block: &[u8; 64], limit: usize) -> Option<bool> {
        let m = Masks::of(block);
        // Most blocks hold no backslash and follow none.
        let escaped = if m.backslash | self.escape == 0 {
            0
        } else {
            escaped(m.backslash, &mut self.escape)
        };
        let quotes = m.quote & !escaped;
        let inside = prefix_xor(quotes) ^ self.in_string;
        // All ones when the block ends inside a string (the top bit says).
        self.in_string = 0u64.wrapping_sub(inside >> 63);
        let open = m.open & !inside;
        let close = m.close & !inside;
        let mut brackets = open | close;
        while brackets != 0 {
            let bit = brackets & brackets.wrapping_neg();
            brackets ^= bit;
            if open & bit != 0 {
                if self.depth == 1 {
                    self.elements += 1;
                    if self.elements > limit {
                        return Some(true);
                    }
                }
                self.depth += 1;
            } else {
                match self.depth.checked_sub(1) {
                    // The array's own `]`, or more closed than opened: not over.
                    None | Some(0) => return Some(false),
                    Some(d) => self.depth = d,
                }
            }
        }
        None
    }
}

/// One bit per byte of a 64-byte block (bit `i` for byte `i`).
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{` and `[` (the two differ only in bit 5, which is set here before comparing).
    open: u64,
    /// `}` and `]`.
    close: u64,
}

impl Masks {
    fn of(block: &[u8; 64]) -> Masks {
        let (quote, backslash, open, close) = (
            u8x16::splat(b'"'),
            u8x16::splat(b'\\'),
            u8x16::splat(b'{'),
            u8x16::splat(b'}'),
        );
        let bit5 = u8x16::splat(0x20);
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        let mut lanes = [u8x16::splat(0); 4];
        let mut any_backslash = u8x16::splat(0);
        for (k, lane) in block.chunks_exact(16).enumerate() {
            let Ok(lane) = <[u8; 16]>::try_from(lane) else {
                continue;
            };
            let v = u8x16::new(lane);
            let folded = v | bit5;
            let shift = 16 * k;
            let bits = |x: u8x16| u64::from(x.move_mask() as u16) << shift;
            m.quote |= bits(v.cmp_eq(quote));
            m.open |= bits(folded.cmp_eq(open));
            m.close |= bits(folded.cmp_eq(close));
            let b = v.cmp_eq(backslash);
            any_backslash |= b;
            if let Some(slot) = lanes.get_mut(k) {
                *slot = b;
            }
        }
        // Backslashes are rare outside payload text: their mask is assembled only when present.
        if any_backslash.move_mask() != 0 {
            for (k, b) in lanes.iter().enumerate() {
                m.backslash |= u64::from(b.move_mask() as u16) << (16 * k);
            }
        }
        m
    }
}

/// Bit `i` set when byte `i` is escaped: it follows a run of backslashes of odd length. A run
/// that starts at an even position escapes the bytes at odd distances from its start, which are
/// the odd positions; one that starts at an odd position, the even ones. Adding each run's
/// odd-position start to the run carries across it, which marks where the runs starting at odd
/// positions end, and so which parity to take for each. `carry` is 1 when the block's first
/// byte is escaped by the previous block, and becomes the same for the next.
fn escaped(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash that is itself escaped begins no run.
    let backslash = backslash & !*carry;
    let follows = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows;
    let (sum, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (sum << 1)) & follows
}

/// Bit `i` is the XOR of bits `0..=i`: with the unescaped quotes, the bytes inside strings
/// (opening quote included, closing quote not).
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// The reference: a byte-by-byte walk of the array, written apart from the block scan. A
    /// backslash escapes the byte after it wherever it stands (in valid JSON only strings hold
    /// backslashes; on other input this is what the scan does too); an unescaped quote opens or
    /// closes a string; brackets count outside strings.
    fn by_bytes(array: &[u8], limit: usize) -> bool {
        let (mut depth, mut elements, mut in_string, mut escape) = (0usize, 0, false, false);
        for &b in array {
            let escaped = escape;
            escape = b == b'\\' && !escaped;
            if b == b'"' && !escaped {
                in_string = !in_string;
                continue;
            }
            if in_string {
                continue;
            }
            match b {
                b'{' | b'[' => {
                    if depth == 1 {
                        elements += 1;
                        if elements > limit {
                            return true;
                        }
                    }
                    depth += 1;
                }
                b'}' | b']' => match depth.checked_sub(1) {
                    None | Some(0) => return false,
                    Some(d) => depth = d,
                },
                _ => {}
            }
        }
        false
    }

    /// A JSON string whose text is drawn from the characters that matter to the scan.
    fn string(r: &mut Rng) -> String {
        let mut s = String::from("\"");
        for _ in 0..r.below(12) {
            s.push_str(
                [
                    "a", "\\\"", "\\\\", "{", "}", "[", "]", ",", "\\n", "é", "\\u005c", " ",
                ][r.below(12) as usize],
            );
        }
        // Backslash runs of every length up to the block size's neighbourhood, now and then.
        if r.below(8) == 0 {
            s.push_str(&"\\\\".repeat(r.below(40) as usize));
        }
        s.push('"');
        s
    }

    /// A JSON value nested up to `depth`.
    fn value(r: &mut Rng, depth: u32) -> String {
        match if depth == 0 { r.below(3) } else { r.below(5) } {
            0 => string(r),
            1 => ["0", "-1.5e3", "true", "null"][r.below(4) as usize].into(),
            2 => format!("{}", r.next() % 1000),
            3 => {
                let n = r.below(4);
                let items: Vec<String> = (0..n).map(|_| value(r, depth - 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => {
                let n = r.below(4);
                let items: Vec<String> = (0..n)
                    .map(|_| format!("{}:{}", string(r), value(r, depth - 1)))
                    .collect();
                format!("{{ {} }}", items.join(" , "))
            }
        }
    }

    /// Arrays of `n` objects, each a few members of any of the values above.
    fn array(r: &mut Rng, n: usize) -> String {
        let items: Vec<String> = (0..n)
            .map(|_| {
                let members: Vec<String> = (0..r.below(5))
                    .map(|_| format!("{}:{}", string(r), value(r, 3)))
                    .collect();
                format!("{{{}}}", members.join(","))
            })
            .collect();
        format!(
            "[{}]",
            items.join(if r.below(2) == 0 { "," } else { ",\n  " })
        )
    }

    #[test]
    fn on_valid_json_the_count_is_exact() {
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        let mut checked = 0;
        for round in 0..600 {
            let n = r.below(80) as usize;
            let text = array(&mut r, n);
            // The oracle is serde_json's reading of the same text.
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            let len = parsed.as_array().unwrap().len();
            assert_eq!(len, n);
            for limit in [0, n.saturating_sub(1), n, 64] {
                assert_eq!(
                    over_limit(text.as_bytes(), limit),
                    len > limit,
                    "round {round}, {n} elements, limit {limit}: {text}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 2400);
    }

    #[test]
    fn the_block_scan_is_the_byte_walk_on_any_bytes() {
        // Valid arrays, then the same with bytes flipped, dropped and duplicated: the block
        // scan and the byte walk agree whatever the input.
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..2000 {
            let n = r.below(70) as usize;
            let mut bytes = array(&mut r, n).into_bytes();
            for _ in 0..r.below(4) {
                let at = r.below(bytes.len() as u64) as usize;
                match r.below(3) {
                    0 => bytes[at] = b"\"\\{}[], x"[r.below(9) as usize],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => {
                        let b = bytes[at];
                        bytes.insert(at, b);
                    }
                }
                if bytes.is_empty() {
                    bytes.push(b'[');
                }
            }
            bytes[0] = b'[';
            for limit in [0, 1, n / 2, 64] {
                assert_eq!(
                    over_limit(&bytes, limit),
                    by_bytes(&bytes, limit),
                    "round {round}, limit {limit}: {:?}",
                    String::from_utf8_lossy(&bytes)
                );
            }
        }
    }

    #[test]
    fn backslash_runs_across_block_edges() {
        // A string whose backslash run ends at every position around the first block's edge,
        // with an odd or even length: the quote after it closes the string or not.
        for pad in 0..70 {
            for run in 0..6 {
                let text = format!(
                    "[{{\"k\":\"{}{}\"}},{{}},{{}}]",
                    "x".repeat(pad),
                    "\\\\".repeat(run) + if run % 2 == 1 { "\\\"" } else { "" }
                );
                let parsed: Option<serde_json::Value> = serde_json::from_str(&text).ok();
                if let Some(v) = parsed {
                    let len = v.as_array().unwrap().len();
                    assert_eq!(over_limit(text.as_bytes(), 2), len > 2, "{text}");
                    assert_eq!(over_limit(text.as_bytes(), 3), len > 3, "{text}");
                }
                assert_eq!(
                    over_limit(text.as_bytes(), 2),
                    by_bytes(text.as_bytes(), 2),
                    "{text}"
                );
            }
        }
    }

    /// An envelope's prefix: fields in any order, whitespace, the response id when plain.
    #[test]
    fn the_components_array_is_found_among_known_fields() {
        let array = format!("[{}]", vec!["{}"; 65].join(","));
        let small = "[{},{}]";
        let env = |fields: &str, comps: &str| format!("{{{fields}\"components\":{comps}}}");
        let cases: [(String, Option<&str>); 9] = [
            (
                env(
                    r#""response_id":"r-1","agent_id":"a","generation":1,"catalog":{"id":"c","version":2},"#,
                    &array,
                ),
                Some("r-1"),
            ),
            (
                env(r#" "generation" : 1 , "catalog":{"id":"c"},"#, &array),
                Some(""),
            ),
            (
                env(r#""obligation":3,"response_id":"r-2","#, &array),
                Some("r-2"),
            ),
            (env(r#""response_id":"r-1","#, small), None),
            // An unknown or repeated field, an escaped key or id, a broken prefix: not found.
            (env(r#""extra":1,"#, &array), None),
            (env(r#""generation":1,"generation":2,"#, &array), None),
            (env(r#""respons\u0065_id":"r","#, &array), None),
            (env(r#""response_id":"r\u0031","#, &array), None),
            (env(r#""generation":1"#, &array), None),
        ];
        for (text, want) in cases {
            assert_eq!(
                too_many_components(text.as_bytes()).as_deref(),
                want,
                "{text}"
            );
        }
        // Past the prefix, the readers decide.
        let far = env(
            &format!(r#""catalog":{{"id":"{}"}},"#, "c".repeat(PREFIX)),
            &array,
        );
        assert_eq!(too_many_components(far.as_bytes()), None);
    }
}
