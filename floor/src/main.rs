//! The floor under `user/admission_from_bytes`, measured per call like the `user_path`
//! benchmark's `HALO_BENCH_CALLS` mode (the 10th percentile and the median of N single calls):
//!
//! - `floor/simd_json_dom`: simd-json builds a borrowed DOM of the response bytes (copied into
//!   a scratch buffer outside the timing, as simd-json parses in place);
//! - `floor/simd_json_tape`: simd-json's tape alone (no DOM), its buffers allocated per call
//!   (`simd_json::to_tape`);
//! - `floor/simd_json_tape_reused`: the tape with its buffers kept from call to call
//!   (`Deserializer::from_slice_with_buffers`), the least a SIMD parse of these bytes costs;
//! - `floor/sha256_of_the_bytes`: SHA-256 over every byte of the response once (the core hashes
//!   each component's canonical bytes and the response's, about as many bytes in all);
//! - `floor/parse_and_hash`: the reused-buffer tape and the SHA-256 in one call.
//!
//! The issue's floor (issue 28: "a SIMD DOM parse of the same bytes + typed payloads + SHA-256
//! of what is digested + lookups + admission") has two more terms an outside tool can measure,
//! and one it cannot:
//!
//! - `floor/simd_json_typed`: simd-json reads the envelope straight into typed structs through
//!   serde, with its buffers kept from call to call: every string borrowed, every number read,
//!   every payload typed (one struct with the catalog's payload fields, each optional: the
//!   payload comes before the `type` that names its kind, so the least a one-pass reader does
//!   is read the union), unknown fields refused. A SIMD parse plus typed payloads, with no DOM
//!   in between;
//! - `floor/lookups`: the names a response uses resolved to indices through hash maps (a fast
//!   multiplicative hash, not SipHash): each component id entered once, each component's type
//!   and each claim's source looked up, each prerequisite's parent id and phase resolved;
//! - `floor/typed_parse_lookups_and_hash`: those two and the SHA-256 of the bytes in one call.
//!
//! The admission itself (LocalOK, the closure, witnesses, bindings, tokens, events; about 5 µs in
//! the estimate) has no outside implementation to time, so no floor here counts it.
//! The floor is therefore at least DOM + SHA-256 + lookups, and each of `parse_and_hash`,
//! tape + SHA-256 + lookups, and `typed_parse_lookups_and_hash` is below that when the DOM costs
//! more than its stand-in (`scripts/bench_floor.sh` checks it in the run): admission over any
//! of them bounds admission over the floor from above.
//!
//!   floor FILE [CALLS]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::time::Instant;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The envelope as typed structs, every string borrowed from the parser's buffer (simd-json unescapes in
/// place, so a `&str` always borrows).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(default)]
    format: Option<u32>,
    #[serde(borrow)]
    response_id: &'a str,
    #[serde(borrow)]
    agent_id: &'a str,
    generation: u64,
    #[serde(borrow)]
    catalog: CatalogRef<'a>,
    #[serde(borrow)]
    components: Vec<Component<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogRef<'a> {
    #[serde(borrow)]
    id: &'a str,
    version: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Component<'a> {
    #[serde(borrow)]
    id: &'a str,
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    #[serde(borrow)]
    payload: Payload<'a>,
    #[serde(default, borrow)]
    requires: Vec<Prerequisite<'a>>,
    #[serde(default, borrow, deserialize_with = "claims")]
    support: Vec<(&'a str, Claim<'a>)>,
    #[serde(default, borrow)]
    certificate: Option<&'a str>,
}

/// Every field of the benchmark catalog's payload kinds (routes, holds, notices, status
/// lines, sensor reports), each optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload<'a> {
    #[serde(default, borrow)]
    frame: Option<&'a str>,
    #[serde(default)]
    north_m: Option<f64>,
    #[serde(default)]
    east_m: Option<f64>,
    #[serde(default)]
    down_m: Option<f64>,
    #[serde(default)]
    yaw_deg: Option<f64>,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(default, borrow)]
    text: Option<&'a str>,
    #[serde(default, borrow)]
    sensor: Option<&'a str>,
    #[serde(default, borrow)]
    unit: Option<&'a str>,
    #[serde(default)]
    value: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prerequisite<'a> {
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow)]
    phase: &'a str,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim<'a> {
    #[serde(default)]
    epoch: Option<u64>,
    #[serde(default, borrow)]
    provenance: Option<&'a str>,
}

/// A JSON object of claims, kept as a list in the order sent.
fn claims<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(&'de str, Claim<'de>)>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<(&'de str, Claim<'de>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("claims by source")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0));
            while let Some((k, v)) = m.next_entry::<&'de str, Claim<'de>>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(V)
}

/// FxHash's step (a rotate, an XOR and a multiply per word): the least a hash map lookup of a
/// short name costs, well under std's SipHash.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let (words, tail) = bytes.as_chunks::<8>();
        for w in words {
            self.add(u64::from_le_bytes(*w));
        }
        // The last few bytes as one word, without a copy of variable length.
        let mut last = 0u64;
        for (k, b) in tail.iter().enumerate() {
            last |= u64::from(*b) << (8 * k);
        }
        self.add(last);
    }
    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type Map<'a> = HashMap<&'a str, u16, BuildHasherDefault<Fx>>;

/// The names the response's components use, resolved to indices: ids entered into a map
/// (sized for the response), types and claim sources looked up in the catalog's maps, each
/// prerequisite's parent looked up among the ids and its phase among the three. Returns a sum
/// of what was found, so nothing is optimised away.
fn lookups(env: &Envelope<'_>, types: &Map<'_>, sources: &Map<'_>) -> u64 {
    let mut ids: Map<'_> = Map::with_capacity_and_hasher(env.components.len(), Default::default());
    for (c, i) in env.components.iter().zip(0u16..) {
        ids.insert(c.id, i);
    }
    let mut found = 0u64;
    for c in &env.components {
        found += u64::from(types.get(c.ty).copied().unwrap_or(u16::MAX));
        for (source, _) in &c.support {
            found += u64::from(sources.get(*source).copied().unwrap_or(u16::MAX));
        }
        for p in &c.requires {
            found += u64::from(ids.get(p.id).copied().unwrap_or(u16::MAX));
            found += match p.phase {
                "emitted" => 1,
                "dispatched" => 2,
                "observed_success" => 3,
                _ => 0,
            };
        }
    }
    found
}

fn percentiles(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |q: usize| times.get(times.len() * q / 10).copied().unwrap_or(f64::NAN);
    (at(1), at(5))
}

fn calls(name: &str, n: usize, mut one: impl FnMut() -> f64) {
    let (p10, median) = percentiles((0..n).map(|_| one()).collect());
    println!("calls floor/{name} {p10:.3} {median:.3} µs");
}

/// One timed reading of the response: `bytes` copied into `scratch` first (simd-json parses in
/// place), outside the timing; then `read` on the copy, timed; its result checked and dropped
/// after the clock stops. Microseconds.
fn timed_read<'s, T, E>(
    scratch: &'s mut Vec<u8>,
    bytes: &[u8],
    read: impl FnOnce(&'s mut [u8]) -> Result<T, E>,
) -> f64 {
    scratch.clear();
    scratch.extend_from_slice(bytes);
    let t = Instant::now();
    let v = read(scratch.as_mut_slice());
    let took = t.elapsed().as_secs_f64() * 1e6;
    assert!(v.is_ok(), "the response does not parse");
    drop(black_box(v));
    took
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(file) = args.get(1) else {
        eprintln!("usage: floor FILE [CALLS]");
        std::process::exit(3);
    };
    let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(3000);
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {file}: {e}");
            std::process::exit(1);
        }
    };
    let mut scratch = bytes.clone();
    let mut buffers = simd_json::Buffers::new(bytes.len());
    calls("simd_json_dom", n, || {
        timed_read(&mut scratch, &bytes, |b| {
            simd_json::to_borrowed_value_with_buffers(b, &mut buffers)
        })
    });
    calls("simd_json_tape", n, || {
        timed_read(&mut scratch, &bytes, simd_json::to_tape)
    });
    calls("simd_json_tape_reused", n, || {
        timed_read(&mut scratch, &bytes, |b| {
            simd_json::Deserializer::from_slice_with_buffers(b, &mut buffers)
        })
    });
    calls("sha256_of_the_bytes", n, || {
        let t = Instant::now();
        black_box(Sha256::digest(black_box(&bytes)));
        t.elapsed().as_secs_f64() * 1e6
    });
    calls("parse_and_hash", n, || {
        timed_read(&mut scratch, &bytes, |b| {
            let v = simd_json::Deserializer::from_slice_with_buffers(b, &mut buffers)?;
            Ok::<_, simd_json::Error>((v, Sha256::digest(&bytes)))
        })
    });
    // The typed reading, checked once: every component, prerequisite and claim read.
    let mut typed = bytes.clone();
    let env: Envelope<'_> = match simd_json::serde::from_slice_with_buffers(
        &mut typed,
        &mut buffers,
    ) {
        Ok(env) => env,
        Err(e) => {
            eprintln!(
                "error: {file}: simd-json does not read the response into the typed envelope: {e}"
            );
            std::process::exit(1);
        }
    };
    let (n_requires, n_claims) = env.components.iter().fold((0, 0), |(r, s), c| {
        (r + c.requires.len(), s + c.support.len())
    });
    // What the typed reading holds: every payload field present, every claim's parts, every
    // certificate (each read and typed by the deserializer; counted here once).
    let typed_values: usize = env
        .components
        .iter()
        .map(|c| {
            let p = &c.payload;
            let texts = [p.frame, p.text, p.sensor, p.unit];
            let numbers = [
                p.north_m,
                p.east_m,
                p.down_m,
                p.yaw_deg,
                p.duration_s,
                p.value,
            ];
            let claims: usize = c
                .support
                .iter()
                .map(|(_, cl)| {
                    usize::from(cl.epoch.is_some()) + usize::from(cl.provenance.is_some())
                })
                .sum();
            texts.iter().flatten().count()
                + numbers.iter().flatten().count()
                + claims
                + usize::from(c.certificate.is_some())
        })
        .sum();
    // The catalog's maps: here the type and source names the response uses, in order seen.
    let mut types: Map<'_> = Map::default();
    let mut sources: Map<'_> = Map::default();
    for c in &env.components {
        let n = types.len() as u16;
        types.entry(c.ty).or_insert(n);
        for (source, _) in &c.support {
            let n = sources.len() as u16;
            sources.entry(source).or_insert(n);
        }
    }
    calls("simd_json_typed", n, || {
        timed_read(&mut scratch, &bytes, |b| {
            simd_json::serde::from_slice_with_buffers::<Envelope<'_>>(b, &mut buffers)
        })
    });
    calls("lookups", n, || {
        let t = Instant::now();
        let found = lookups(black_box(&env), &types, &sources);
        let took = t.elapsed().as_secs_f64() * 1e6;
        black_box(found);
        took
    });
    calls("typed_parse_lookups_and_hash", n, || {
        timed_read(&mut scratch, &bytes, |b| {
            let e = simd_json::serde::from_slice_with_buffers::<Envelope<'_>>(b, &mut buffers)?;
            let found = lookups(&e, &types, &sources);
            Ok::<_, simd_json::Error>((e, found, Sha256::digest(&bytes)))
        })
    });
    println!(
        "the response: {} bytes; `{}` from `{}` (generation {}, format {}, catalog `{}` v{}): \
         {} components, {n_requires} prerequisites, {n_claims} claims, {typed_values} typed \
         payload and claim values; {} types and {} sources",
        bytes.len(),
        env.response_id,
        env.agent_id,
        env.generation,
        env.format.unwrap_or(1),
        env.catalog.id,
        env.catalog.version,
        env.components.len(),
        types.len(),
        sources.len(),
    );
}
