//! The fast envelope reader against serde_json (`core::envelope::fast`): every envelope and
//! candidate in the test data, the running example, an agent-shaped 32-component response, and
//! fixed mutations of all of them that aim at the places a hand-written reader goes wrong
//! (escapes, numbers, `null`, repeated and unknown fields, whitespace, truncation), and
//! rewrites that stay JSON (keys in another order, other whitespace, one value changed). On every
//! input, whatever the fast reader accepts serde_json must read as the same value; what it does
//! not accept it must leave to serde_json. The oracle is serde_json itself, an independent
//! implementation; the comparison is shown to catch a planted difference.
use crate::common;

use common::Rng;

use halo_core::envelope::fast::Fast;
use halo_core::envelope::{RawResponse, too_many_by_structure};
use halo_eval::fuzzing::{Reading, agree, envelope_readers};
use serde_json::{Value, json};

/// Mutations per seed.
const MUTATIONS: usize = 40;

/// Texts spliced in: each one is something the fast reader must step aside for, or must read
/// exactly as serde_json does.
const SPLICES: &[&str] = &[
    "\\\"",
    "\\u0041",
    "\\n",
    "null",
    "-1",
    "1.0",
    "1e3",
    "01",
    "0",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    " ",
    "\n\t",
    "\u{1}",
    "é",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "true",
    "\"x\"",
];

/// One mutation of `seed`, at a character boundary: a splice, a deletion, a duplicated field
/// (`"key": value` copied after itself) or a truncation.
fn mutate(rng: &mut Rng, seed: &str) -> String {
    let bounds: Vec<usize> = (0..=seed.len())
        .filter(|&i| seed.is_char_boundary(i))
        .collect();
    let at = bounds[rng.below(bounds.len())];
    let (head, tail) = seed.split_at(at);
    match rng.below(5) {
        0 | 1 => format!("{head}{}{tail}", SPLICES[rng.below(SPLICES.len())]),
        2 => {
            let cut = tail
                .char_indices()
                .nth(1 + rng.below(8))
                .map_or(tail.len(), |(i, _)| i);
            format!("{head}{}", &tail[cut..])
        }
        3 => {
            // Repeat the field that starts at the next quote after `at`, up to its comma.
            match tail.find('"').and_then(|q| {
                let f = &tail[q..];
                f.find(',').map(|c| (q, &f[..=c]))
            }) {
                Some((q, field)) => format!("{head}{}{field}{}", &tail[..q], &tail[q..]),
                None => seed.to_string(),
            }
        }
        _ => head.to_string(),
    }
}

/// A value-level mutation of `seed` that stays JSON: written back with its keys in a random
/// order and random whitespace, after changing one thing at random — an integer to another
/// (large ones too), a string to one with an escape or to another plain one, an optional field
/// to `null` — so the fast reader sees well-formed input it should mostly read itself.
fn rewrite(rng: &mut Rng, seed: &str) -> Option<String> {
    let mut v: Value = serde_json::from_str(seed).ok()?;
    let mut leaves = Vec::new();
    paths(&v, &mut Vec::new(), &mut leaves);
    if !leaves.is_empty() {
        let path = &leaves[rng.below(leaves.len())];
        let mut at = &mut v;
        for k in path {
            at = match k {
                Step::Key(k) => &mut at[k.as_str()],
                Step::Ix(i) => &mut at[*i],
            };
        }
        *at = match (&*at, rng.below(4)) {
            (Value::Number(_), 0) => json!(u64::MAX - rng.below(3) as u64),
            (Value::Number(_), _) => json!(rng.below(1000)),
            (Value::String(s), 0) => json!(format!("{s}\"q\"")),
            (Value::String(s), 1) => json!(format!("{s}\u{e9}")),
            (Value::String(s), _) => json!(format!("{s}x")),
            (_, _) => Value::Null,
        };
    }
    let mut out = String::new();
    write(rng, &v, &mut out);
    Some(out)
}

enum Step {
    Key(String),
    Ix(usize),
}

fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                here.push(Step::Key(k.clone()));
                paths(x, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                here.push(Step::Ix(i));
                paths(x, here, out);
                here.pop();
            }
        }
        _ => out.push(
            here.iter()
                .map(|s| match s {
                    Step::Key(k) => Step::Key(k.clone()),
                    Step::Ix(i) => Step::Ix(*i),
                })
                .collect(),
        ),
    }
}

fn write(rng: &mut Rng, v: &Value, out: &mut String) {
    let ws = |rng: &mut Rng, out: &mut String| {
        out.push_str([" ", "", "\n  ", "\t", "", "\r\n"][rng.below(6)]);
    };
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i + 1));
            }
            out.push('{');
            for (n, k) in keys.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                ws(rng, out);
                out.push_str(&Value::String(k.clone()).to_string());
                ws(rng, out);
                out.push(':');
                ws(rng, out);
                write(rng, &m[k], out);
                ws(rng, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (n, x) in a.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                ws(rng, out);
                write(rng, x, out);
            }
            ws(rng, out);
            out.push(']');
        }
        x => out.push_str(&x.to_string()),
    }
}

/// Every response and candidate object in the protocol cases and the admission corpora.
fn corpus() -> Vec<String> {
    let mut out = Vec::new();
    let walk = |v: &Value, out: &mut Vec<String>| {
        fn go(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m {
                        if k == "candidate" && x.is_object() {
                            out.push(x.to_string());
                        } else if k == "responses" {
                            if let Some(rs) = x.as_object() {
                                out.extend(rs.values().map(Value::to_string));
                            }
                        } else if k == "response" && x.is_object() {
                            out.push(x.to_string());
                        } else if k == "response_text" {
                            if let Some(t) = x.as_str() {
                                out.push(t.to_string());
                            }
                        } else {
                            go(x, out);
                        }
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| go(x, out)),
                _ => {}
            }
        }
        go(v, out);
    };
    for f in [
        "protocol/cases.json",
        "admission/structure.json",
        "admission/local.json",
        "admission/closure.json",
    ] {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(common::data_dir().join(f)).unwrap())
                .unwrap();
        walk(&v, &mut out);
    }
    out.push(
        std::fs::read_to_string(common::repo_root().join("docs/examples/response.json")).unwrap(),
    );
    out.push(at_limit(64));
    out.push(at_limit(65));
    out.push(agent_shaped());
    out
}

/// A response of `n` notices, compact: at 64 the fast reader reads it, at 65 it stops where the
/// 65th begins, as serde_json's bounded reader does.
fn at_limit(n: usize) -> String {
    let comps: Vec<Value> = (0..n)
        .map(|k| json!({"id": format!("n{k}"), "type": "notice", "payload": {"text": "leg"}}))
        .collect();
    json!({"response_id": "r-limit", "agent_id": "planner-1", "generation": 1,
           "catalog": {"id": "uav-px4", "version": 6}, "components": comps})
    .to_string()
}

/// A 32-component response like the benchmark's (route actions with claims and certificates,
/// holds, notices, reports, statuses with 200 prerequisites), pretty-printed so whitespace is
/// everywhere.
fn agent_shaped() -> String {
    let mut comps = Vec::new();
    for k in 0..6 {
        comps.push(json!({"id": format!("a{k}"), "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": 10.0 + f64::from(k), "east_m": 3.5,
                        "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 6.0},
            "support": {"map": {"epoch": 7}, "bounds": {"epoch": 3, "provenance": "corridor-12"}},
            "certificate": format!("cert-{k}")}));
    }
    for s in 0..26 {
        let req: Vec<Value> = (0..8)
            .map(|j| json!({"id": format!("a{}", (s + j) % 6), "phase": "dispatched"}))
            .collect();
        comps.push(json!({"id": format!("s{s}"), "type": "status",
                          "payload": {"text": format!("status {s}")}, "requires": req}));
    }
    serde_json::to_string_pretty(&json!({"response_id": "r-agent", "agent_id": "planner-1",
        "generation": 7, "catalog": {"id": "uav-px4", "version": 6}, "components": comps}))
    .unwrap()
}

#[test]
fn the_fast_reader_agrees_with_serde_json() {
    let _timing = common::exclusive();
    let seeds = corpus();
    let mut rng = Rng(0x5eed_f00d);
    let (mut total, mut fast, mut limit, mut aside) = (0, 0, 0, 0);
    let (mut seeds_read, mut structure) = (0, 0);
    for (i, seed) in seeds.iter().enumerate() {
        let (r, c) = envelope_readers(seed.as_bytes());
        if r == Reading::Fast || c == Reading::Fast {
            seeds_read += 1;
        }
        let mut inputs = vec![seed.clone()];
        inputs.extend((0..MUTATIONS).map(|_| mutate(&mut rng, seed)));
        inputs.extend((0..MUTATIONS).filter_map(|_| rewrite(&mut rng, seed)));
        for input in inputs {
            // Refused by the structural count before either reader (which `envelope_readers`
            // holds to refusing nothing serde_json reads).
            if too_many_by_structure(input.as_bytes()).is_some() {
                structure += 1;
            }
            // Panics, naming the input, when the two readers disagree.
            for reading in <[Reading; 2]>::from(envelope_readers(input.as_bytes())) {
                total += 1;
                match reading {
                    Reading::Fast => fast += 1,
                    Reading::RefusedAtLimit => limit += 1,
                    Reading::SteppedAside => aside += 1,
                }
            }
        }
        // The running example, the 64-component response and the agent-shaped response are
        // read by the fast reader; the 65-component one is refused at the limit by both.
        let n = seeds.len();
        if i == n - 2 {
            assert_eq!(envelope_readers(seed.as_bytes()).0, Reading::RefusedAtLimit);
        } else if i == n - 4 || i + 1 == n || i == n - 3 {
            assert_eq!(envelope_readers(seed.as_bytes()).0, Reading::Fast, "{seed}");
        }
    }
    println!(
        "envelope-fast-path: {total}/{total} matched ({} seeds, {seeds_read} read by the fast \
         reader; {fast} readings by the fast reader, {limit} refused by both at the component \
         limit, {aside} left to serde_json; {structure} inputs refused first by the structural \
         count)",
        seeds.len()
    );
    // Pinned: the corpus and the mutations are fixed, so these counts only move when the test
    // data or the fast reader's coverage does.
    assert_eq!(seeds.len(), 165, "corpus size");
    // Each seed, its byte mutations and its rewrites (one seed is not JSON, so it has none),
    // each read as a response and as a candidate.
    assert_eq!(total, 2 * (165 * (MUTATIONS + 1) + 164 * MUTATIONS));
    // 156: the 64-component seed is read, the corpus's own 65-component case now refused at
    // the limit.
    assert_eq!(seeds_read, 156, "seeds the fast reader reads");
    // The fast reader checks payloads itself and leaves those with a `\u` escape or a control
    // character to serde_json (6728 with the 12 global-target admission cases; 6211 before),
    // and refuses at the component limit where serde_json's bounded reader does (the two
    // 65-component seeds and the mutations that keep a 65th component in the plain shape).
    assert_eq!((fast, limit, aside), (6738, 158, 19754), "readings by kind");
    // 115: the 79 inputs both readers refuse at the limit (158 readings, as a response and as
    // a candidate), and 36 mutations of the 65-component seeds that broke something within the
    // first 64 components (both readers leave those to serde_json, which refuses them with
    // another code; the count, reading structure only, refuses them at the limit first).
    assert_eq!(structure, 115, "inputs refused by the structural count");
}

#[test]
fn the_comparison_catches_a_planted_difference() {
    let _timing = common::exclusive();
    // A fast reading that lost a prerequisite's phase, and one serde_json refuses.
    let text = agent_shaped();
    let raw = halo_core::envelope::parse_envelope(text.as_bytes()).unwrap();
    let honest = format!("{raw:?}");
    let planted = honest.replacen("dispatched", "emitted", 1);
    let refused = || serde_json::from_str::<Value>("{").map(|_| String::new());
    let over = || serde_json::from_str::<RawResponse<'_>>(&at_limit(65)).map(|_| String::new());
    let stop = || Fast::TooManyComponents { response_id: None };
    assert_eq!(
        agree(Fast::Read(honest.clone()), Ok(honest.clone())),
        Ok(Reading::Fast)
    );
    assert!(agree(Fast::Read(planted), Ok(honest.clone())).is_err());
    assert!(agree(Fast::Read(honest.clone()), refused()).is_err());
    assert_eq!(agree(Fast::StepAside, refused()), Ok(Reading::SteppedAside));
    // At the component limit: both refuse there, or it is a disagreement.
    assert_eq!(agree(stop(), over()), Ok(Reading::RefusedAtLimit));
    assert!(agree(stop(), Ok(honest)).is_err(), "serde_json read it");
    assert!(
        agree(stop(), refused()).is_err(),
        "serde_json refused it for another reason"
    );
    assert!(agree(Fast::Read(String::new()), over()).is_err());
}
