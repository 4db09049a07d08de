#!/usr/bin/env python3
"""Writes the frozen graph artifact for the graph-oracle suite:
halo-core/tests/data/graphs/graphs.json.

135 graphs of 4, 8 and 16 components (45 each) for exhaustive subset enumeration and 45 graphs
of 32 components for the descending-rejection oracle. Each graph is acyclic by construction
(parents are drawn from earlier nodes of a hidden order), then its envelope order is shuffled so
no checker can lean on it. Some nodes are locally unsupported ("bad"). The seed is recorded in
the artifact.

    python3 scripts/gen_graphs.py
"""
import json
import os
import random

SEED = 20261129
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "gateway", "tests", "data", "graphs", "graphs.json")


def graph(rng, n, max_parents, p_bad, p_act):
    kinds = ["act" if rng.random() < p_act else "node" for _ in range(n)]
    parents = []
    for i in range(n):
        k = rng.randint(0, min(i, max_parents, 16))
        ps = sorted(rng.sample(range(i), k)) if k else []
        parents.append(ps)
    bad = [rng.random() < p_bad for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    names = {i: f"v{j:02d}" for j, i in enumerate(rng.sample(range(n), n))}
    nodes = []
    for i in order:
        reqs = []
        for p in parents[i]:
            if kinds[p] == "node":
                phase = "emitted"
            else:
                phase = rng.choice(["dispatched", "observed_success"])
            reqs.append({"id": names[p], "phase": phase})
        nodes.append({"id": names[i], "kind": kinds[i], "bad": bad[i], "requires": reqs})
    return nodes


def main():
    rng = random.Random(SEED)
    graphs = []
    for n in (4, 8, 16):
        for j in range(45):
            graphs.append({"name": f"n{n}-{j:02d}", "size": n, "oracle": "exhaustive",
                           "nodes": graph(rng, n, rng.choice([1, 2, 3, 4]), rng.choice([0.0, 0.1, 0.25, 0.4]),
                                          rng.choice([0.0, 0.2, 0.4]))})
    for j in range(45):
        graphs.append({"name": f"n32-{j:02d}", "size": 32, "oracle": "descending_rejection",
                       "nodes": graph(rng, 32, rng.choice([2, 4, 6, 8]), rng.choice([0.02, 0.05, 0.1, 0.2]),
                                      rng.choice([0.0, 0.2, 0.4]))})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"seed": SEED, "generator": "scripts/gen_graphs.py", "graphs": graphs}, f, indent=0)
        f.write("\n")
    edges = sum(len(nd["requires"]) for g in graphs for nd in g["nodes"])
    print(f"{len(graphs)} graphs, {edges} edges, seed {SEED}")


main()
