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
//! - `floor/parse_and_hash`: the reused-buffer tape and the SHA-256 in one call (the floor the
//!   admission is compared with).
//!
//! Excluded, and part of a real admission: typed payloads, id checks, lookups, LocalOK, the
//! closure, bindings, tokens, events (the estimate of those is about 10 µs more).
//!
//!   floor FILE [CALLS]

use std::hint::black_box;
use std::time::Instant;

use sha2::{Digest, Sha256};

fn percentiles(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |q: usize| times.get(times.len() * q / 10).copied().unwrap_or(f64::NAN);
    (at(1), at(5))
}

fn calls(name: &str, n: usize, mut one: impl FnMut() -> f64) {
    let (p10, median) = percentiles((0..n).map(|_| one()).collect());
    println!("calls floor/{name} {p10:.3} {median:.3} µs");
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
    let mut parse = |scratch: &mut Vec<u8>| {
        scratch.clear();
        scratch.extend_from_slice(&bytes);
        let t = Instant::now();
        let v = simd_json::to_borrowed_value_with_buffers(scratch, &mut buffers);
        let took = t.elapsed().as_secs_f64() * 1e6;
        assert!(v.is_ok(), "the response does not parse");
        drop(black_box(v));
        took
    };
    calls("simd_json_dom", n, || parse(&mut scratch));
    let mut tape_scratch = bytes.clone();
    calls("simd_json_tape", n, || {
        tape_scratch.clear();
        tape_scratch.extend_from_slice(&bytes);
        let t = Instant::now();
        let v = simd_json::to_tape(&mut tape_scratch);
        let took = t.elapsed().as_secs_f64() * 1e6;
        assert!(v.is_ok(), "the response does not parse");
        drop(black_box(v));
        took
    });
    let mut reused = bytes.clone();
    calls("simd_json_tape_reused", n, || {
        reused.clear();
        reused.extend_from_slice(&bytes);
        let t = Instant::now();
        let v = simd_json::Deserializer::from_slice_with_buffers(&mut reused, &mut buffers);
        let took = t.elapsed().as_secs_f64() * 1e6;
        assert!(v.is_ok(), "the response does not parse");
        drop(black_box(v));
        took
    });
    calls("sha256_of_the_bytes", n, || {
        let t = Instant::now();
        black_box(Sha256::digest(black_box(&bytes)));
        t.elapsed().as_secs_f64() * 1e6
    });
    let mut both = scratch.clone();
    calls("parse_and_hash", n, || {
        both.clear();
        both.extend_from_slice(&bytes);
        let t = Instant::now();
        let v = simd_json::Deserializer::from_slice_with_buffers(&mut both, &mut buffers);
        let h = Sha256::digest(&bytes);
        let took = t.elapsed().as_secs_f64() * 1e6;
        assert!(v.is_ok());
        drop(black_box((v, h)));
        took
    });
    println!("the response: {} bytes", bytes.len());
}
