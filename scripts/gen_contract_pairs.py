#!/usr/bin/env python3
"""Writes the mission-contract workflow pairs: halo-core/tests/data/contract/pairs-{uav,ground}.json.

48 matched pairs (96 cases): eight transition classes x three variants x two vocabularies. Each
pair shares one root contract and an identical prefix; the benign member then makes a legitimate
update and the drifted member an illegitimate one. Steps that realize the drift carry
`"drift": true`; the harness (halo-core/tests/core/contract_pairs.rs) runs every case through the full
mechanism and five weaker controls and classifies the outcomes.

Cases are written once in the UAV vocabulary and translated word for word into the ground
(depot vehicle) vocabulary, so both domains see the same structures.

    python3 scripts/gen_contract_pairs.py
"""
import copy
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "gateway", "tests", "data", "contract")

T1 = ["takeoff", "goto(wp1)", "photograph(wp1)", "return", "land"]
T2 = ["takeoff", "goto(wp2)", "photograph(wp2)", "return", "land"]
T3 = ["takeoff", "goto(wp1)", "photograph(wp1)", "goto(wp2)", "photograph(wp2)", "return", "land"]
T4 = ["takeoff", "goto(wp2)", "photograph(wp2)", "goto(wp1)", "photograph(wp1)", "return", "land"]
T5 = ["takeoff", "goto(wp1)", "hold", "photograph(wp1)", "return", "land"]

CONTRACT = {
    "closing": ["airborne == false", "zone == home", "photos >= 1"],
    "discharge": {"review": ["review == true"]},
    "domain": "uav-survey",
    "epoch": 7,
    "forbidden": [
        ["zone == nofly"],
        ["battery == low", "zone == wp2"],
        ["photos >= 3"],
        ["airborne == false", "zone == wp1"],
        ["airborne == false", "zone == wp2"],
    ],
    "initial": {"airborne": False, "battery": "high", "photos": 0, "review": False, "zone": "home"},
    "obligations": ["review"],
    "policy": [],
    "resources": ["camera", "radio", "zone:wp1", "zone:wp2"],
    "root": "survey",
    "traces": [T1, T2, T3, T4, T5],
}

CLOSE_CHILD = ["photos >= 1", "airborne == false", "zone == home"]


def goal(gid, traces, parent="survey", completion=None, closing=None, resources=None, obligations=None,
         frames=None, text=None):
    g = {
        "closing": CLOSE_CHILD if closing is None else closing,
        "completion": [[]] if completion is None else completion,
        "discharged": [],
        "frames": frames or [],
        "id": gid,
        "obligations": ["review"] if obligations is None else obligations,
        "parent": parent,
        "resources": ["camera", "zone:wp1", "zone:wp2"] if resources is None else resources,
        "traces": traces,
    }
    if text:
        g["text"] = text
    return g


def propose(g, **kw):
    return dict({"do": "propose", "goal": g}, **kw)


def replace(old, g, **kw):
    return dict({"do": "replace", "old": old, "goal": g}, **kw)


def effects(goal_id, seq, drift_from=None):
    out = []
    for i, e in enumerate(seq):
        s = {"do": "effect", "goal": goal_id, "effect": e}
        if drift_from is not None and i == drift_from:
            s["drift"] = True
        out.append(s)
    return out


def tail(goal_id):
    return [
        {"do": "observe", "values": {"review": True}},
        {"do": "reauthorize", "goal": goal_id},
        {"do": "close", "goal": goal_id},
        {"do": "close_root"},
    ]


def drift(step):
    s = dict(step)
    s["drift"] = True
    return s


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# --- the eight classes; each returns (benign, drifted, note) for variant k ---------------------

def create(k):
    good = [T1, T2, T3][k]
    bad = [
        ["takeoff", "goto(wp3)", "photograph(wp3)", "return", "land"],
        ["takeoff", "goto(wp2)", "photograph(wp2)", "photograph(wp2)", "photograph(wp2)", "return", "land"],
        ["takeoff", "goto(wp1)", "photograph(wp1)", "goto(nofly)", "return", "land"],
    ][k]
    benign = [propose(goal("g1", [good]))] + effects("g1", good) + tail("g1")
    drifted = [drift(propose(goal("g1", [bad], text="same survey, one more look")))] + \
        effects("g1", bad, first_divergence(good, bad)) + tail("g1")
    return benign, drifted, "a created child whose continuation leaves the contract"


def replace_cls(k):
    first = [T1, T2, T1][k]
    done = first[:2]
    good = [T3[2:], T4[2:], T5[2:]][k]
    bad = [
        ["photograph(wp1)", "goto(wp3)", "photograph(wp3)", "return", "land"],
        ["photograph(wp2)", "goto(nofly)", "return", "land"],
        ["photograph(wp1)", "photograph(wp1)", "photograph(wp1)", "return", "land"],
    ][k]
    prefix = [propose(goal("g1", [first]))] + effects("g1", done)
    benign = prefix + [replace("g1", goal("g1", [good]))] + effects("g1", good) + tail("g1")
    drifted = prefix + [drift(replace("g1", goal("g1", [bad])))] + \
        effects("g1", bad, first_divergence(good, bad)) + tail("g1")
    return benign, drifted, "a replacement that widens the remaining work"


def replan(k):
    done = ["takeoff", "goto(wp1)", "photograph(wp1)"]
    change = [
        {"do": "policy", "rules": [{"rule": "forbid", "when": ["zone == wp2"]}]},
        {"do": "observe", "values": {"battery": "low"}},
        {"do": "policy", "rules": [{"rule": "max_trace_len", "max": 5}]},
    ][k]
    good = ["return", "land"]
    bad = [
        ["goto(wp2)", "photograph(wp2)", "return", "land"],
        ["goto(wp2)", "photograph(wp2)", "return", "land"],
        ["goto(wp2)", "photograph(wp2)", "return", "land"],
    ][k]
    prefix = [propose(goal("g1", [T3]))] + effects("g1", done) + [change, {"do": "cancel", "goal": "g1"}]
    benign = prefix + [replace("g1", goal("g1", [good]))] + effects("g1", good) + tail("g1")
    drifted = prefix + [drift(replace("g1", goal("g1", [bad], text="conditions look fine")))] + \
        effects("g1", bad, 0) + tail("g1")
    return benign, drifted, "a replan after a version change that ignores the change"


def delegate(k):
    plan = [T1, T2, T1][k]
    res = ["camera", "zone:wp1"] if "goto(wp1)" in plan else ["camera", "zone:wp2"]
    good = {"do": "delegate", "goal": "g1", "resources": ["camera"], "root": "survey", "worker": "cam-1"}
    bad = [
        dict(good, root="survey-east"),
        dict(good, resources=["camera", "zone:wp3"]),
        dict(good, resources=["camera", "radio"]),
    ][k]
    bad_effects = [
        ["takeoff", "goto(wp3)", "photograph(wp3)", "return", "land"],
        ["takeoff", "goto(wp3)", "photograph(wp3)", "return", "land"],
        ["takeoff", "goto(wp1)", "photograph(wp1)", "photograph(wp1)", "photograph(wp1)", "return", "land"],
    ][k]
    prefix = [propose(goal("g1", [plan], resources=res))]
    benign = prefix + [good] + effects("g1", plan) + tail("g1")
    drifted = prefix + [drift(bad)] + effects("g1", bad_effects, first_divergence(plan, bad_effects)) + tail("g1")
    return benign, drifted, "a delegation that leaves the root or widens the worker's scope"


def join(k):
    a_wp, b_wp = [("wp1", "wp2"), ("wp2", "wp1"), ("wp1", "wp2")][k]
    a = [f"goto({a_wp})", f"photograph({a_wp})"]
    b = [f"goto({b_wp})", f"photograph({b_wp})"]
    prec = [["a", "b"], ["a", "b"], ["b", "a"]][k]
    first, second = (a, b) if prec[0] == "a" else (b, a)
    joined = first + second
    ga = goal("a", [a], completion=[b + ["return", "land"]], closing=["photos >= 1"])
    gb = goal("b", [b], completion=[a + ["return", "land"]], closing=["photos >= 1"])
    prefix = [{"do": "effect", "goal": "survey", "effect": "takeoff"}, propose(ga), propose(gb)]
    gj = goal("j", [joined], completion=[["return", "land"]], closing=["photos >= 2"])
    good = {"do": "join", "joined": gj, "precedence": [prec], "sources": ["a", "b"]}
    if k == 0:
        # The order is declared nowhere: the complete composition has six interleavings, the
        # proposal supplies one. Its effects are the benign ones.
        bad = dict(good, precedence=[])
        bad_effects = joined
    elif k == 1:
        extra = first + [second[0], second[1], second[1]]
        bad = dict(good, joined=goal("j", [extra], completion=[["return", "land"]], closing=["photos >= 2"]))
        bad_effects = extra
    else:
        wide = first + ["goto(wp3)", "photograph(wp3)"]
        bad = dict(good, sources=["a", "survey-east/c"],
                   joined=goal("j", [wide], completion=[["return", "land"]], closing=["photos >= 2"]))
        bad_effects = wide
    # The joined goal covers the two visits; the root finishes the flight once it closes.
    finish = [{"do": "observe", "values": {"review": True}}, {"do": "reauthorize", "goal": "j"},
              {"do": "close", "goal": "j"}, {"do": "reauthorize", "goal": "survey"}] + \
        effects("survey", ["return", "land"]) + [{"do": "close_root"}]
    benign = prefix + [good] + effects("j", joined) + finish
    drifted = prefix + [drift(bad)] + \
        effects("j", bad_effects, first_divergence(joined, bad_effects) if bad_effects != joined else None) + finish
    return benign, drifted, "a sibling join without its complete composition or across roots"


def stale(k):
    change = [
        {"do": "policy", "rules": [{"rule": "forbid", "when": ["zone == wp2"]}]},
        {"do": "policy", "rules": [{"rule": "forbid", "when": ["photos >= 2"]}]},
        {"do": "policy", "rules": [{"rule": "deny_effect", "effect": "goto(wp2)"}]},
    ][k]
    good = T5[1:]
    bad = T3[1:]
    prefix = [propose(goal("g1", [T1])), {"do": "effect", "goal": "g1", "effect": "takeoff"},
              {"do": "plan", "label": "before"}, change, {"do": "reauthorize", "goal": "g1"}]
    benign = prefix + [{"do": "plan", "label": "after"}, replace("g1", goal("g1", [good]), witness="after")] + \
        effects("g1", good) + tail("g1")
    drifted = prefix + [drift(replace("g1", goal("g1", [bad]), witness="before"))] + \
        effects("g1", bad, first_divergence(good, bad)) + tail("g1")
    return benign, drifted, "an edit planned before a policy change, submitted after it"


def order(k):
    plan = [T1, T2, T3][k]
    bad = [
        ["takeoff", "goto(wp1)", "land"],
        ["takeoff", "goto(wp2)", "return", "land"],
        ["takeoff", "goto(wp1)", "photograph(wp1)", "photograph(wp1)", "photograph(wp1)", "goto(wp2)"],
    ][k]
    prefix = [propose(goal("g1", [plan]))]
    benign = prefix + effects("g1", plan) + tail("g1")
    drifted = prefix + effects("g1", bad, first_divergence(plan, bad)) + tail("g1")
    return benign, drifted, "effects committed out of the authorized order or multiplicity"


def resource(k):
    plan = [T1, T2, T1][k]
    own = ["camera", "zone:wp1"] if "goto(wp1)" in plan else ["camera", "zone:wp2"]
    if k < 2:
        extra = ["zone:wp3", "gimbal:override"][k]
        benign = [propose(goal("g1", [plan], resources=own))] + effects("g1", plan) + tail("g1")
        drifted = [drift(propose(goal("g1", [plan], resources=own + [extra])))] + effects("g1", plan) + tail("g1")
    else:
        # The child asks for a root resource its parent does not hold.
        prefix = [propose(goal("g1", [plan], resources=own))]
        sub_ok = goal("g2", [plan], parent="g1", resources=["camera"])
        sub_bad = goal("g2", [plan], parent="g1", resources=["camera", "radio"])
        tail2 = [{"do": "observe", "values": {"review": True}}, {"do": "reauthorize", "goal": "g2"},
                 {"do": "close", "goal": "g2"}, {"do": "reauthorize", "goal": "g1"},
                 {"do": "close", "goal": "g1"}, {"do": "close_root"}]
        benign = prefix + [propose(sub_ok)] + effects("g2", plan) + tail2
        drifted = prefix + [drift(propose(sub_bad))] + effects("g2", plan) + tail2
    return benign, drifted, "a goal that claims resources outside its parent's or the root's envelope"


CLASSES = [("create", create), ("replace", replace_cls), ("replan", replan), ("delegate", delegate),
           ("join", join), ("stale-witness", stale), ("invalid-order", order), ("resource-scope", resource)]

# --- the ground-operations vocabulary ------------------------------------------------------------

WORDS = {
    "takeoff": "undock", "goto": "drive", "photograph": "pick", "hold": "wait", "return": "park",
    "land": "dock", "home": "dock", "wp1": "bay1", "wp2": "bay2", "wp3": "yard", "nofly": "pit",
    "airborne": "moving", "zone": "at", "photos": "loads", "review": "signoff", "battery": "power",
    "camera": "gripper", "gimbal": "lift", "survey": "depot", "uav-survey": "ground-depot",
}
WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*")


def ground(x):
    if isinstance(x, str):
        if x == "uav-survey":
            return "ground-depot"
        if x.startswith("zone:"):
            return "area:" + ground(x[len("zone:"):])
        return WORD_RE.sub(lambda m: WORDS.get(m.group(0), m.group(0)), x)
    if isinstance(x, list):
        return [ground(v) for v in x]
    if isinstance(x, dict):
        return {ground(k) if k in WORDS else k: ground(v) for k, v in x.items()}
    return x


def main():
    os.makedirs(OUT, exist_ok=True)
    for vocab in ("uav", "ground"):
        pairs = []
        for cls, fn in CLASSES:
            for k in range(3):
                benign, drifted, note = fn(k)
                pair = {
                    "id": f"{vocab}-{cls}-{k + 1}",
                    "class": cls,
                    "note": note,
                    "contract": copy.deepcopy(CONTRACT),
                    "benign": benign,
                    "drifted": drifted,
                }
                if vocab == "ground":
                    pair["contract"] = ground(pair["contract"])
                    pair["benign"] = ground(pair["benign"])
                    pair["drifted"] = ground(pair["drifted"])
                pairs.append(pair)
        path = os.path.join(OUT, f"pairs-{vocab}.json")
        with open(path, "w") as f:
            json.dump(pairs, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {len(pairs)} pairs to {os.path.relpath(path, ROOT)}")
        if vocab == "uav":
            # Two runnable examples for `halo-gateway contract run` (docs/contracts.md).
            ex = next(p for p in pairs if p["id"] == "uav-replan-1")
            for member, name in (("benign", "contract-workflow.json"), ("drifted", "contract-workflow-drifted.json")):
                out = os.path.join(ROOT, "docs", "examples", name)
                with open(out, "w") as f:
                    json.dump({"approved_by": "ops-lead", "contract": ex["contract"], "steps": ex[member]},
                              f, indent=1, sort_keys=True)
                    f.write("\n")
                print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
