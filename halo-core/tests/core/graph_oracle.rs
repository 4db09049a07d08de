//! `graph-oracle`: the retained set of generated graphs against independent oracles.
//!
//! - 135 graphs of 4, 8 and 16 components: exhaustive enumeration of every subset.
//! - 45 graphs of 32 components: a descending-rejection oracle that sweeps the edge list until
//!   nothing changes.
//!
//! Neither oracle calls the core's closure code; they read the frozen artifact
//! (`tests/data/graphs/graphs.json`, from `scripts/gen_graphs.py`) and the gateway's admission
//! report only. Local soundness, closure and greatest-set maximality are checked separately
//! from exact-set agreement.
use std::collections::BTreeMap;

use crate::common::*;
use halo_core::{Config, Gateway, Nanos};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Artifact {
    seed: u64,
    #[allow(dead_code, reason = "recorded provenance")]
    generator: String,
    graphs: Vec<G>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct G {
    name: String,
    size: usize,
    oracle: String,
    nodes: Vec<Node>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Node {
    id: String,
    kind: String,
    bad: bool,
    requires: Vec<Req>,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct Req {
    id: String,
    phase: String,
}

/// Index-based view used by the oracles: `parents[i]` and `local[i]`.
struct Plain {
    local: Vec<bool>,
    parents: Vec<Vec<usize>>,
}

fn plain(g: &G) -> Plain {
    let idx: BTreeMap<&str, usize> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    Plain {
        local: g.nodes.iter().map(|n| !n.bad).collect(),
        parents: g
            .nodes
            .iter()
            .map(|n| n.requires.iter().map(|r| idx[r.id.as_str()]).collect())
            .collect(),
    }
}

/// Exhaustive oracle: every subset; keep those that are locally supported and closed; the
/// answer is the largest, which must contain every other valid subset.
fn exhaustive(p: &Plain) -> u64 {
    let n = p.local.len();
    assert!(n <= 16);
    let pmask: Vec<u64> = p
        .parents
        .iter()
        .map(|ps| ps.iter().fold(0u64, |m, &q| m | 1 << q))
        .collect();
    let lmask: u64 = p
        .local
        .iter()
        .enumerate()
        .fold(0, |m, (i, &l)| if l { m | 1 << i } else { m });
    let mut valid = Vec::new();
    for x in 0u64..(1 << n) {
        if x & !lmask != 0 {
            continue;
        }
        let closed = (0..n).all(|i| x & (1 << i) == 0 || pmask[i] & !x == 0);
        if closed {
            valid.push(x);
        }
    }
    let best = *valid.iter().max_by_key(|x| x.count_ones()).unwrap();
    for v in &valid {
        assert_eq!(
            v & !best,
            0,
            "the largest valid subset must contain every valid subset"
        );
    }
    best
}

/// Descending-rejection oracle: reject the locally unsupported, then sweep the edge list,
/// rejecting any child of a rejected parent, until a sweep changes nothing.
fn descending_rejection(p: &Plain) -> u64 {
    let n = p.local.len();
    let mut rejected: Vec<bool> = p.local.iter().map(|l| !l).collect();
    let edges: Vec<(usize, usize)> = p
        .parents
        .iter()
        .enumerate()
        .flat_map(|(c, ps)| ps.iter().map(move |&q| (c, q)))
        .collect();
    loop {
        let mut changed = false;
        for &(child, parent) in &edges {
            if rejected[parent] && !rejected[child] {
                rejected[child] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    (0..n).filter(|&i| !rejected[i]).fold(0, |m, i| m | 1 << i)
}

fn response(g: &G) -> String {
    let comps: Vec<serde_json::Value> = g
        .nodes
        .iter()
        .map(|n| {
            let payload = if n.kind == "node" {
                serde_json::json!({"text": n.id})
            } else {
                serde_json::json!({"duration_s": 1.0})
            };
            serde_json::json!({
                "id": n.id, "type": n.kind, "payload": payload,
                "support": {"x": {"epoch": if n.bad { 2 } else { 1 }}},
                "requires": n.requires,
            })
        })
        .collect();
    serde_json::json!({"response_id": g.name, "agent_id": "a", "generation": 1,
        "catalog": {"id": "graph-test", "version": 1}, "components": comps})
    .to_string()
}

fn gateway_retained(g: &G) -> u64 {
    let mut gw = Gateway::new(catalog_named("graph-test"), Config::default());
    put(&mut gw, 1_000, "x", serde_json::Value::Null, 1, "p", 1_000);
    let rep = gw
        .handle_response(Nanos::from_ms(1_000), response(g).as_bytes())
        .unwrap();
    assert_eq!(rep.components.len(), g.size);
    rep.components
        .iter()
        .enumerate()
        .fold(0u64, |m, (i, c)| if c.retained { m | 1 << i } else { m })
}

#[derive(Default)]
struct Tally {
    graphs: usize,
    exact: usize,
    local_soundness: usize,
    closure: usize,
    maximality: usize,
    edges: usize,
}

#[test]
fn graph_oracle() {
    let art: Artifact =
        serde_json::from_slice(&std::fs::read(data_dir().join("graphs/graphs.json")).unwrap())
            .unwrap();
    let mut by_size: BTreeMap<usize, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for g in &art.graphs {
        let p = plain(g);
        let got = gateway_retained(g);
        let want = match g.oracle.as_str() {
            "exhaustive" => exhaustive(&p),
            "descending_rejection" => descending_rejection(&p),
            o => panic!("unknown oracle {o}"),
        };
        let n = p.local.len();
        let t = by_size.entry(g.size).or_default();
        t.graphs += 1;
        t.edges += p.parents.iter().map(Vec::len).sum::<usize>();
        // Local soundness: everything retained is locally supported.
        let sound = (0..n).all(|i| got & (1 << i) == 0 || p.local[i]);
        // Closure: every retained component's parents are retained.
        let closed = (0..n)
            .all(|i| got & (1 << i) == 0 || p.parents[i].iter().all(|&q| got & (1 << q) != 0));
        // Maximality: every excluded component is justified, by its own local failure or by an
        // excluded parent; by induction over the acyclic graph none can join any valid set.
        let maximal = (0..n).all(|i| {
            got & (1 << i) != 0 || !p.local[i] || p.parents[i].iter().any(|&q| got & (1 << q) == 0)
        });
        t.local_soundness += usize::from(sound);
        t.closure += usize::from(closed);
        t.maximality += usize::from(maximal);
        if got == want {
            t.exact += 1;
        } else {
            failures.push(format!("{}: gateway {got:#x}, oracle {want:#x}", g.name));
        }
    }
    let total: usize = by_size.values().map(|t| t.graphs).sum();
    let exact: usize = by_size.values().map(|t| t.exact).sum();
    println!("graph-oracle: {exact}/{total} matched (seed {})", art.seed);
    assert_eq!(total, 180, "the corpus: every graph, pinned");
    println!(
        "  {:>4} {:>6} {:>6} {:>6} {:>8} {:>8} {:>10}",
        "|V|", "graphs", "edges", "exact", "sound", "closed", "maximal"
    );
    for (n, t) in &by_size {
        println!(
            "  {:>4} {:>6} {:>6} {:>6} {:>8} {:>8} {:>10}",
            n, t.graphs, t.edges, t.exact, t.local_soundness, t.closure, t.maximality
        );
    }
    for f in &failures {
        println!("  MISMATCH {f}");
    }
    assert_eq!(total, 180);
    assert_eq!(by_size.get(&32).map(|t| t.graphs), Some(45));
    assert_eq!(
        [4, 8, 16]
            .iter()
            .map(|n| by_size.get(n).map_or(0, |t| t.graphs))
            .sum::<usize>(),
        135
    );
    assert!(failures.is_empty());
    for t in by_size.values() {
        assert_eq!(
            (t.local_soundness, t.closure, t.maximality),
            (t.graphs, t.graphs, t.graphs)
        );
    }
}

/// The oracles themselves must be able to fail: a deliberately wrong answer is caught.
#[test]
fn oracles_reject_a_wrong_answer() {
    let p = Plain {
        local: vec![true, false, true],
        parents: vec![vec![], vec![0], vec![1]],
    };
    assert_eq!(exhaustive(&p), 0b001);
    assert_eq!(descending_rejection(&p), 0b001);
    assert_ne!(exhaustive(&p), 0b101, "keeping an orphan must not match");
}
