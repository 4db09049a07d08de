#!/usr/bin/env python3
"""Writes the hand-written protocol transition cases: halo-core/tests/data/protocol/cases.json.

Each case is a script of steps with the outcome the protocol requires at that step, written by
hand from the specification. The harness is halo-core/tests/core/protocol_cases.rs.

    python3 scripts/gen_protocol_cases.py
"""
import copy
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "halo-core", "tests", "data", "protocol", "cases.json")

ROUTE = {"frame": "local_ned", "north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0, "duration_s": 8.0}
SUPPORT = {"map": {"epoch": 7}, "traffic": {"epoch": 41}, "bounds": {"epoch": 3, "provenance": "corridor-12"}}
CAT = {"id": "uav-px4", "version": 6}


def e3(**payload_over):
    p = dict(ROUTE)
    p.update(payload_over)
    return {"id": "e3", "type": "route_action", "payload": p, "support": copy.deepcopy(SUPPORT),
            "certificate": "cert-9f2c"}


def running(rid="r1", gen=12, e4_phase="dispatched"):
    return {"response_id": rid, "agent_id": "planner-1", "generation": gen, "catalog": CAT, "components": [
        {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
        {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 10.2, "unit": "m"}},
        e3(),
        {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
         "requires": [{"id": "e3", "phase": e4_phase}]},
    ]}


def candidate(components, gen=13, rid="r1", agent="planner-1"):
    return {"obligation": 0, "response_id": rid, "agent_id": agent, "generation": gen, "catalog": CAT,
            "components": components}


def setup(at=1000, cert_until=30000, rid="r1"):
    return [{"at": at, "healthy": True},
            {"at": at, "certify": {"response": rid, "component": "e3", "id": "cert-9f2c", "until": cert_until}}]


def admitted(at=1100):
    return {"at": at, "submit": "r1", "expect_phases": {"r1": {"e1": "EMITTED", "e2": "EMITTED", "e3": "RETAINED",
                                                                "e4": "PENDING:DEPS_NOT_READY"}},
            "expect_emitted": ["r1/e1", "r1/e2"]}


def upd(source, value, epoch, prov, at, gen=None):
    u = {"source": source, "value": value, "epoch": epoch, "provenance": prov}
    if gen is not None:
        u["generated_at"] = gen
    return {"at": at, "update": u}


OBL = {"response": "r1", "component": "e3"}
cases = []


def case(name, steps, responses=None, catalog="uav-px4", variant=None):
    c = {"name": name, "catalog": catalog, "responses": responses or {"r1": running()}, "steps": steps}
    if variant:
        c["variant"] = variant
    cases.append(c)


# 1 -- event ordering: drift before admission blocks the action at admission.
case("ordering/drift-before-admission", setup() + [
    upd("map", None, 8, "map-service", 1050),
    {"at": 1100, "submit": "r1", "expect_phases": {"r1": {
        "e1": "EMITTED", "e2": "EMITTED", "e3": "WITHHELD:EPOCH_CHANGED", "e4": "WITHHELD:PARENT_WITHHELD"}}},
    {"at": 1100, "poll": "t", "expect_adapter_calls": 0},
])

# 2 -- event ordering: a claimed epoch changes after admission; the event withholds e3 at once and
# revokes its token, so the gate refuses it.
case("ordering/claimed-epoch-changes-after-admission", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    upd("map", None, 8, "map-service", 1150, 1150),
    {"at": 1160, "check": True, "expect_phases": {"r1": {"e3": "WITHHELD:EPOCH_CHANGED", "e4": "WITHHELD:PARENT_WITHHELD"}}},
    {"at": 1200, "gate": "t", "expect": "refused:TOKEN_REVOKED", "expect_adapter_calls": 0},
])

# 3 -- final recheck: an epoch e3 did not claim changes after admission. LocalOK still holds, so
# the event leaves e3 retained; only WitnessOK at the gate sees it.
case("final-recheck/unclaimed-epoch-caught-by-witness", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    upd("vehicle", "airborne", 2, "px4", 1150, 1150),
    {"at": 1160, "check": True, "expect_phases": {"r1": {"e3": "RETAINED"}}},
    {"at": 1200, "gate": "t", "expect": "denied:EPOCH_CHANGED", "expect_adapter_calls": 0,
     "expect_phases": {"r1": {"e3": "WITHHELD:EPOCH_CHANGED", "e4": "WITHHELD:PARENT_WITHHELD",
                              "e1": "EMITTED", "e2": "EMITTED"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "DISPATCHED", "scope": ["e3", "e4"]}},
])

# 4 -- final recheck: the link monitor's provenance changes after admission (same epoch).
case("final-recheck/provenance-change-caught-by-witness", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    upd("link", True, 1, "link-monitor-b", 1150, 1150),
    {"at": 1200, "gate": "t", "expect": "denied:PROVENANCE_CHANGED", "expect_adapter_calls": 0},
])

# 5 -- final recheck: age of information lapses between poll and gate with no event in between;
# the gate brings time up to the decision instant and the action is withheld, not dispatched.
case("final-recheck/aoi-lapses-before-the-gate", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 3001, "gate": "t", "expect": "refused:TOKEN_REVOKED", "expect_adapter_calls": 0,
     "expect_phases": {"r1": {"e3": "WITHHELD:STALE_SOURCE"}}},
])

# 6 -- final recheck: certificate coverage ends before the interval could be flown.
# Admitted at 1100 with t_end + guard = 9350 < 9400; at 1150 coverage is 9400 >= 9400.
case("final-recheck/interval-coverage-ends", setup(cert_until=9400) + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1150, "gate": "t", "expect": "refused:TOKEN_REVOKED", "expect_adapter_calls": 0,
     "expect_phases": {"r1": {"e3": "WITHHELD:INTERVAL_NOT_COVERED"}}},
])

# 7 -- certificate revoked after admission.
case("final-recheck/certificate-revoked", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1150, "revoke_certificate": "cert-9f2c", "expect_phases": {"r1": {"e3": "WITHHELD:CERTIFICATE_UNKNOWN"}}},
    {"at": 1200, "gate": "t", "expect": "refused:TOKEN_REVOKED", "expect_adapter_calls": 0},
])

# 8 -- token non-reuse.
case("token/used-token-is-refused", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1110, "gate": "t", "expect": "dispatched", "expect_adapter_calls": 1,
     "expect_phases": {"r1": {"e3": "DISPATCHED", "e4": "EMITTED"}},
     "expect_emitted": ["r1/e1", "r1/e2", "r1/e4"]},
    {"at": 1120, "replay": "t", "expect": "refused:TOKEN_USED", "expect_adapter_calls": 1},
    {"at": 1130, "poll": "again"},
])

# 9 -- two consumers race for one token: exactly one enqueue.
case("token/two-consumers-race", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1110, "race": "t", "expect_enqueues": 1, "expect_loser": "refused:TOKEN_USED"},
    {"at": 1120, "check": True, "expect_phases": {"r1": {"e3": "DISPATCHED"}}},
])

# 10 -- a token minted before a restart is dead after it.
case("token/restart-token-replay", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1200, "restart": True},
    {"at": 1210, "replay": "t", "expect": "refused:TOKEN_STALE_BOOT", "expect_adapter_calls": 0},
])

# 11 -- duplicate-sequence replay after the response is retired: the sequence stays burnt.
case("token/sequence-replay-after-retirement", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1110, "gate": "t", "expect": "dispatched"},
    {"at": 12000, "timeout": True, "expect_phases": {"r1": {"e3": "ABSENT"}}},
    {"at": 12010, "replay": "t", "expect": "refused:SEQUENCE_REUSED", "expect_adapter_calls": 1},
])

# 12 -- a failed enqueue consumes the token; the instance FAILED and needs fresh admission.
case("enqueue/failed-enqueue-consumes-token", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1100, "refuse_adapter": 1},
    {"at": 1110, "gate": "t", "expect": "enqueue_failed", "expect_adapter_calls": 0,
     "expect_phases": {"r1": {"e3": "FAILED:ADAPTER_REJECTED", "e4": "WITHHELD:PARENT_WITHHELD"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "READY_FOR_READMISSION", "required": []}},
    {"at": 1120, "replay": "t", "expect": "refused:TOKEN_USED", "expect_adapter_calls": 0},
    {"at": 1130, "poll": "none"},
])

# 13 -- after a failed enqueue, a fresh candidate with a later generation dispatches; the old
# token stays dead.
case("enqueue/fresh-candidate-after-failed-enqueue", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1100, "refuse_adapter": 1},
    {"at": 1110, "gate": "t", "expect": "enqueue_failed"},
    {"at": 1200, "candidate": candidate([e3()]), "obligation_of": OBL, "expect": "accepted",
     "expect_phases": {"r1": {"e3": "RETAINED"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "DISCHARGED"}},
    {"at": 1200, "poll": "t2", "component": "e3"},
    {"at": 1210, "replay": "t", "expect": "refused:TOKEN_USED"},
    {"at": 1220, "gate": "t2", "expect": "dispatched", "expect_adapter_calls": 1,
     "expect_phases": {"r1": {"e4": "EMITTED"}}},
])

# 14 -- terminal parent failure invalidates only the unemitted dependents.
case("terminal/observation-failure-invalidates-waiting-dependent", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1110, "gate": "t", "expect": "dispatched", "expect_phases": {"r1": {"e4": "PENDING:DEPS_NOT_READY"}}},
    {"at": 1500, "observe": {"response": "r1", "component": "e3", "success": False},
     "expect_phases": {"r1": {"e3": "FAILED:OBSERVATION_FAILED", "e4": "INVALIDATED:PARENT_FAILED",
                              "e1": "EMITTED", "e2": "EMITTED"}}},
], responses={"r1": running(e4_phase="observed_success")})

# 15 -- an already emitted dependent is not rolled back.
case("terminal/emitted-dependent-stays-emitted", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    {"at": 1110, "gate": "t", "expect": "dispatched", "expect_phases": {"r1": {"e4": "EMITTED"}}},
    {"at": 1500, "observe": {"response": "r1", "component": "e3", "success": False},
     "expect_phases": {"r1": {"e3": "FAILED:OBSERVATION_FAILED", "e4": "EMITTED"}}},
])

# 16 -- a terminal denial ends the instance without an obligation; nothing can replace it. The
# vehicle is no longer airborne (VEHICLE_STATE): not a Table 6 profile, the plan itself is void.
case("terminal/vehicle-not-airborne-is-terminal", setup() + [
    admitted(),
    upd("vehicle", "landed", 1, "px4", 1200, 1200),
    {"at": 1210, "check": True, "expect_phases": {"r1": {"e3": "INVALIDATED:VEHICLE_STATE", "e4": "INVALIDATED:PARENT_FAILED",
                                                          "e1": "EMITTED", "e2": "EMITTED"}},
     "expect_no_token": True},
    {"at": 1300, "candidate": dict(candidate([e3()]), obligation=999), "expect": "rejected:NO_OBLIGATION"},
])

# 16b -- OPS-1: low energy after admission withholds the action with an obligation on Table 6's
# route (refreshed preflight support, then a new admission); its dependent is withheld with it.
case("recovery/energy-low-routes-to-refreshed-preflight", setup() + [
    admitted(),
    upd("battery", 20.0, 1, "px4", 1200, 1200),
    {"at": 1210, "check": True, "expect_phases": {"r1": {"e3": "WITHHELD:ENERGY_LOW", "e4": "WITHHELD:PARENT_WITHHELD",
                                                          "e1": "EMITTED", "e2": "EMITTED"}},
     "expect_no_token": True,
     "expect_obligation": {"response": "r1", "component": "e3", "state": "DISPATCHED", "route": "refresh_preflight"}},
])

# 17 -- scoped recovery: stale traffic, refreshed support, a fresh candidate dispatches.
def fresh_but_traffic(at=3400):
    # Everything but traffic refreshed, so traffic is the only stale source at 3500.
    return [upd("vehicle", "airborne", 1, "px4", at, at), upd("link", True, 1, "link-monitor", at, at),
            upd("z_range", 10.2, 1, "rangefinder", at, at)]


case("recovery/fresh-candidate-after-refresh", setup() + fresh_but_traffic() + [
    {"at": 3500, "submit": "r1", "expect_phases": {"r1": {"e3": "WITHHELD:STALE_SOURCE", "e4": "WITHHELD:PARENT_WITHHELD"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "DISPATCHED", "required": ["traffic"]}},
    upd("traffic", [], 41, "utm-feed-a", 3600, 3600),
    {"at": 3600, "check": True, "expect_obligation": {"response": "r1", "component": "e3", "state": "READY_FOR_READMISSION"},
     "expect_no_token": True, "expect_adapter_calls": 0},
    {"at": 3700, "healthy": True},
    {"at": 3700, "candidate": candidate([e3()]), "obligation_of": OBL, "expect": "accepted"},
    {"at": 3700, "poll": "t", "component": "e3"},
    {"at": 3710, "gate": "t", "expect": "dispatched", "expect_adapter_calls": 1,
     "expect_phases": {"r1": {"e3": "DISPATCHED", "e4": "EMITTED"}}},
])

# 18 -- the replacement scope does not reach independent components.
case("recovery/out-of-scope-candidate", setup() + [
    {"at": 3500, "submit": "r1"},
    {"at": 3600, "candidate": candidate([{"id": "e1", "type": "notice", "payload": {"text": "changed"}}]),
     "obligation_of": OBL, "expect": "rejected:OUT_OF_SCOPE",
     "expect_phases": {"r1": {"e1": "EMITTED"}}},
    {"at": 3600, "check": True, "expect_obligation": {"response": "r1", "component": "e3", "state": "DISPATCHED"}},
])

# 19 -- a candidate must carry a later generation.
case("recovery/older-generation-rejected", setup() + [
    {"at": 3500, "submit": "r1"},
    {"at": 3700, "healthy": True},
    {"at": 3700, "candidate": candidate([e3()], gen=12), "obligation_of": OBL, "expect": "rejected:GENERATION_STALE"},
    {"at": 3700, "candidate": candidate([e3()], gen=11), "obligation_of": OBL, "expect": "rejected:GENERATION_STALE"},
    {"at": 3700, "candidate": candidate([e3()], gen=13), "obligation_of": OBL, "expect": "accepted"},
])

# 20 -- a candidate answering for another agent is refused.
case("recovery/other-agent-rejected", setup() + [
    {"at": 3500, "submit": "r1"},
    {"at": 3700, "healthy": True},
    {"at": 3700, "candidate": candidate([e3()], agent="planner-2"), "obligation_of": OBL, "expect": "rejected:AGENT_MISMATCH"},
])

# 21 -- obligation expiry: the instance ends, its dependent with it, later candidates are refused.
case("recovery/obligation-expiry", setup() + [
    {"at": 3500, "submit": "r1"},
    {"at": 33500, "timeout": True, "expect_phases": {"r1": {"e3": "INVALIDATED:OBLIGATION_EXPIRED",
                                                             "e4": "INVALIDATED:PARENT_FAILED"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "EXPIRED"}},
    {"at": 33600, "healthy": True},
    {"at": 33600, "candidate": candidate([e3()]), "obligation_of": OBL, "expect": "rejected:OBLIGATION_EXPIRED"},
])

# 22 -- retry limit: three unsupported candidates fail the obligation.
case("recovery/retry-limit", setup() + [
    {"at": 3500, "submit": "r1"},
    {"at": 3600, "candidate": candidate([e3()]), "obligation_of": OBL, "expect": "rejected:CANDIDATE_NOT_SUPPORTED"},
    {"at": 3700, "candidate": candidate([e3()], gen=14), "obligation_of": OBL, "expect": "rejected:CANDIDATE_NOT_SUPPORTED"},
    {"at": 3800, "candidate": candidate([e3()], gen=15), "obligation_of": OBL, "expect": "rejected:CANDIDATE_NOT_SUPPORTED",
     "expect_phases": {"r1": {"e3": "INVALIDATED:RETRY_LIMIT", "e4": "INVALIDATED:PARENT_FAILED"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "FAILED"}},
    {"at": 3900, "healthy": True},
    {"at": 3900, "candidate": candidate([e3()], gen=16), "obligation_of": OBL, "expect": "rejected:OBLIGATION_NOT_LIVE"},
])

# 23 -- obligation states: two sources needed; the first refresh is only external support.
case("recovery/obligation-state-progression", setup() + fresh_but_traffic() + [
    upd("map", None, 8, "map-service", 3400, 3400),
    {"at": 3500, "submit": "r1", "expect_phases": {"r1": {"e3": "WITHHELD:EPOCH_CHANGED"}},
     "expect_obligation": {"response": "r1", "component": "e3", "state": "DISPATCHED", "required": ["map", "traffic"]}},
    upd("traffic", [], 41, "utm-feed-a", 3600, 3600),
    {"at": 3600, "check": True, "expect_obligation": {"response": "r1", "component": "e3", "state": "EXTERNAL_SUPPORT_RECEIVED"}},
    upd("map", None, 7, "map-service", 3700, 3700),
    {"at": 3700, "check": True, "expect_obligation": {"response": "r1", "component": "e3", "state": "READY_FOR_READMISSION"},
     "expect_no_token": True, "expect_adapter_calls": 0},
], responses={"r1": running()})

# 24 -- locality: an update outside e3's footprint leaves it exactly as it was; an update inside
# that keeps support re-evaluates it without changing its binding.
case("locality/unrelated-update-changes-nothing", setup() + [
    admitted(),
    {"at": 1100, "check": True, "expect_binding_unchanged": {"response": "r1", "component": "e3"}},
    upd("z_range", 9.0, 2, "rangefinder", 1150, 1150),
    {"at": 1150, "check": True, "expect_phases": {"r1": {"e3": "RETAINED", "e2": "EMITTED"}},
     "expect_binding_unchanged": {"response": "r1", "component": "e3"}},
    upd("wind", 6.0, 1, "weather", 1160, 1160),
    {"at": 1160, "check": True, "expect_phases": {"r1": {"e3": "RETAINED"}},
     "expect_binding_unchanged": {"response": "r1", "component": "e3"}},
    {"at": 1170, "poll": "t", "component": "e3"},
    {"at": 1180, "gate": "t", "expect": "dispatched"},
])

# 25 -- a rejected response changes nothing; a duplicate live id is refused.
case("input/rejections-change-nothing", setup() + [
    {"at": 1050, "submit": "@malformed", "expect_rejected": "MALFORMED_JSON", "expect_emitted": []},
    admitted(),
    {"at": 1120, "submit": "r1", "expect_rejected": "DUPLICATE_RESPONSE",
     "expect_phases": {"r1": {"e3": "RETAINED", "e4": "PENDING:DEPS_NOT_READY"}}, "expect_emitted": ["r1/e1", "r1/e2"]},
    {"at": 1130, "update": {"source": "traffic", "value": [], "epoch": 42, "provenance": "utm-feed-a", "generated_at": 900},
     "expect_error": "OUT_OF_ORDER_UPDATE", "expect_phases": {"r1": {"e3": "RETAINED"}}},
    {"at": 1140, "update": {"source": "traffic", "value": [], "epoch": 42, "provenance": "utm-feed-a", "generated_at": 9000},
     "expect_error": "FUTURE_TIMESTAMP", "expect_phases": {"r1": {"e3": "RETAINED"}}},
])

# 26 -- rolling: each window needs refreshed support and a new admission.
GR = {"id": "graph-test", "version": 1}
track = {"response_id": "rt", "agent_id": "a", "generation": 1, "catalog": GR, "components": [
    {"id": "trk", "type": "track", "payload": {"duration_s": 1.0}}]}
case("rolling/renewal-needs-refreshed-support", [
    upd("x", None, 1, "p", 1000, 1000),
    upd("y", True, 1, "p", 1000, 1000),
    {"at": 1000, "submit": "rt", "expect_phases": {"rt": {"trk": "RETAINED"}}},
    {"at": 1000, "poll": "w1", "component": "trk"},
    {"at": 1010, "gate": "w1", "expect": "dispatched", "expect_adapter_calls": 1},
    {"at": 1100, "renew": {"response": "rt", "component": "trk"}, "expect": "rejected:ROLLING_NOT_REFRESHED"},
    upd("y", True, 1, "p", 1200, 1200),
    {"at": 1200, "renew": {"response": "rt", "component": "trk"}, "expect": "rejected:ROLLING_NOT_REFRESHED"},
    upd("x", None, 1, "p", 1200, 1200),
    {"at": 1210, "renew": {"response": "rt", "component": "trk"}, "expect": "accepted",
     "expect_phases": {"rt": {"trk": "RETAINED"}}},
    {"at": 1210, "poll": "w2", "component": "trk"},
    {"at": 1220, "replay": "w1", "expect": "refused:TOKEN_USED"},
    {"at": 1220, "gate": "w2", "expect": "dispatched", "expect_adapter_calls": 2},
], responses={"rt": track}, catalog="graph-test")

# 27 -- rolling: a window that cannot be covered by raw support is not admitted.
case("rolling/window-must-be-covered", [
    upd("x", None, 1, "p", 1000, 1000),
    upd("y", True, 1, "p", 1000, 1000),
    {"at": 1300, "submit": "rt", "expect_phases": {"rt": {"trk": "WITHHELD:INTERVAL_NOT_COVERED"}}},
], responses={"rt": track}, catalog="graph-test")

# 28 -- AdmissionOnly has no final recheck: the unclaimed epoch change slips through. This is
# the control for case 3, with the same steps and the opposite outcome.
case("variant/admission-only-misses-post-admission-drift", setup() + [
    admitted(),
    {"at": 1100, "poll": "t", "component": "e3"},
    upd("vehicle", "airborne", 2, "px4", 1150, 1150),
    {"at": 1200, "gate": "t", "expect": "dispatched", "expect_adapter_calls": 1},
], variant="admission_only")

os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as f:
    json.dump({"cases": cases}, f, indent=1)
    f.write("\n")
print(f"{len(cases)} protocol cases")
