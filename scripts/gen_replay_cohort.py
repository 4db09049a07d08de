#!/usr/bin/env python3
"""Writes the structured-response replay cohort (docs/conformance.md, `replay-panel`):
halo-core/tests/data/replay/cohort.jsonl, one recorded response per line:

    {"family": NAME, "provenance": {"source": ..., "seed": ..., "digest": "sha256:HEX"}, "envelope": {...}}

No live model is reachable from this machine, so the cohort is generated: 15 families of
structurally different responses for the `uav-px4` catalog (component counts, which types, how
statuses depend on actions, notices and reports, action/non-action mixes), 15 responses each,
plus malformed ones that must be rejected whole. Every claim refers to the baseline state
docs/examples/state.json. The digest is SHA-256 of the envelope as compact JSON with sorted
keys; the replay runner checks it. Fixed seed: rerunning writes the same bytes.

    python3 scripts/gen_replay_cohort.py
"""
import hashlib
import json
import pathlib
import random

SEED = 20261201
PER_FAMILY = 15
rng = random.Random(SEED)
CATALOG = {"id": "uav-px4", "version": 6}
CLAIMS = {"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}}


def r1(lo, hi):
    return round(rng.uniform(lo, hi), 1)


class Builder:
    def __init__(self, rid):
        self.rid = rid
        self.comps = []

    def add(self, ty, payload, requires=None, **extra):
        cid = f"c{len(self.comps) + 1}"
        c = {"id": cid, "type": ty, "payload": payload}
        if requires:
            c["requires"] = [{"id": p, "phase": q} for p, q in requires]
        c.update(extra)
        self.comps.append(c)
        return cid

    def notice(self, requires=None):
        return self.add("notice", {"text": f"notice {len(self.comps) + 1}"}, requires)

    def report(self):
        return self.add("report", {"sensor": "z_range", "value": r1(2.0, 30.0), "unit": "m"})

    def refresh(self):
        return self.add("refresh_request", {"sources": ["traffic", "wind"]})

    def route(self):
        cid = f"c{len(self.comps) + 1}"
        payload = {"frame": "local_ned", "north_m": r1(5.0, 60.0), "east_m": r1(-20.0, 40.0),
                   "down_m": r1(-40.0, -5.0), "yaw_deg": r1(0.0, 359.0), "duration_s": r1(4.0, 12.0)}
        return self.add("route_action", payload, None, support=json.loads(json.dumps(CLAIMS)),
                        certificate=f"cert-{self.rid}-{cid}")

    def hold(self):
        return self.add("hold", {"duration_s": r1(2.0, 10.0)})

    def land(self):
        return self.add("land", {})

    def status(self, parents):
        return self.add("status", {"text": f"status {len(self.comps) + 1}"}, parents)

    def envelope(self, generation):
        comps = list(self.comps)
        rng.shuffle(comps)  # envelope order is not the dependency order
        return {"response_id": self.rid, "agent_id": "planner-1", "generation": generation,
                "catalog": CATALOG, "components": comps}


def act_phase():
    return rng.choice(["dispatched", "observed_success"])


def fam_notices(b):
    for _ in range(rng.randint(1, 3)):
        b.notice()


def fam_reports(b):
    for _ in range(rng.randint(1, 3)):
        b.report()
    if rng.random() < 0.5:
        b.notice()


def fam_single_route(b):
    b.route()


def fam_route_status(b):
    a = b.route()
    b.status([(a, "dispatched")])


def fam_route_observed_status(b):
    a = b.route()
    b.status([(a, "observed_success")])


def fam_two_routes_join(b):
    a, c = b.route(), b.route()
    b.status([(a, act_phase()), (c, act_phase())])


def fam_running_example(b):
    b.notice()
    b.report()
    a = b.route()
    b.status([(a, "dispatched")])


def fam_status_on_report(b):
    r = b.report()
    b.status([(r, "emitted")])
    if rng.random() < 0.5:
        a = b.route()
        b.status([(a, act_phase()), (r, "emitted")])


def fam_hold_status(b):
    h = b.hold()
    b.status([(h, act_phase())])


def fam_land_status(b):
    b.notice()
    l = b.land()
    b.status([(l, "dispatched")])


def fam_route_hold_land(b):
    a, h, l = b.route(), b.hold(), b.land()
    b.status([(a, "dispatched")])
    b.status([(h, "dispatched"), (l, act_phase())])


def fam_fan_out(b):
    a = b.route()
    for _ in range(rng.randint(2, 4)):
        b.status([(a, act_phase())])


def fam_refresh_report(b):
    b.refresh()
    r = b.report()
    n = b.notice()
    b.status([(r, "emitted"), (n, "emitted")])


def fam_large_mixed(b):
    parents = []
    for _ in range(rng.randint(2, 3)):
        parents.append((b.route(), "action"))
    for _ in range(rng.randint(1, 2)):
        parents.append((b.notice(), "non_action"))
    parents.append((b.report(), "non_action"))
    if rng.random() < 0.5:
        parents.append((b.hold(), "action"))
    for _ in range(rng.randint(2, 4)):
        k = rng.randint(1, min(3, len(parents)))
        picks = rng.sample(parents, k)
        b.status([(p, act_phase() if kind == "action" else "emitted") for p, kind in picks])


def fam_actions_only(b):
    for _ in range(rng.randint(2, 3)):
        rng.choice([b.route, b.hold])()


FAMILIES = [
    ("notices", fam_notices), ("reports", fam_reports), ("single-route", fam_single_route),
    ("route-status", fam_route_status), ("route-observed-status", fam_route_observed_status),
    ("two-routes-join", fam_two_routes_join), ("running-example", fam_running_example),
    ("status-on-report", fam_status_on_report), ("hold-status", fam_hold_status),
    ("land-status", fam_land_status), ("route-hold-land", fam_route_hold_land),
    ("fan-out", fam_fan_out), ("refresh-report", fam_refresh_report),
    ("large-mixed", fam_large_mixed), ("actions-only", fam_actions_only),
]


def malformed(k):
    """Responses the gateway must reject whole, whatever the variant."""
    b = Builder(f"bad-{k}")
    a = b.route()
    b.status([(a, "dispatched")])
    env = b.envelope(1)
    kind = ["dangling", "unknown-type", "duplicate-id", "catalog-version", "cycle", "bad-phase"][k]
    comps = env["components"]
    st = next(c for c in comps if c["type"] == "status")
    if kind == "dangling":
        st["requires"] = [{"id": "nowhere", "phase": "dispatched"}]
    elif kind == "unknown-type":
        st["type"] = "teleport"
    elif kind == "duplicate-id":
        st["id"] = comps[0]["id"] if comps[0] is not st else comps[1]["id"]
    elif kind == "catalog-version":
        env["catalog"] = {"id": "uav-px4", "version": 4}
    elif kind == "cycle":
        st["requires"].append({"id": st["id"], "phase": "emitted"})
    elif kind == "bad-phase":
        st["requires"] = [{"id": a, "phase": "emitted"}]  # an action never reaches `emitted`
    return f"malformed-{kind}", env


def digest(env):
    text = json.dumps(env, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "halo-core/tests/data/replay/cohort.jsonl"
    lines = []
    gen = 0
    for name, build in FAMILIES:
        for k in range(PER_FAMILY):
            gen += 1
            b = Builder(f"{name}-{k + 1}")
            build(b)
            env = b.envelope(gen)
            lines.append({"family": name, "provenance": {"source": "gen_replay_cohort.py", "seed": SEED,
                                                         "digest": digest(env)}, "envelope": env})
    for k in range(6):
        fam, env = malformed(k)
        lines.append({"family": fam, "provenance": {"source": "gen_replay_cohort.py", "seed": SEED,
                                                    "digest": digest(env)}, "envelope": env})
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":"), ensure_ascii=False) + "\n")
    comps = sum(len(l["envelope"]["components"]) for l in lines[:-6])
    print(f"{len(lines)} responses ({len(lines) - 6} valid in {len(FAMILIES)} families, 6 malformed), "
          f"{comps} components -> {out}")


main()
