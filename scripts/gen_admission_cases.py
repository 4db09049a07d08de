#!/usr/bin/env python3
"""Writes the admission-oracle conformance cases under halo-core/tests/data/admission/.

Every expectation here is written by hand from the protocol's rules (the case families below
say which rule they exercise); nothing is produced by running the gateway. Re-run after editing:

    python3 scripts/gen_admission_cases.py
"""
import copy
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "halo-core", "tests", "data", "admission")

NOW = 10_100
GEN = 10_000


def src(value, epoch, prov, at=GEN):
    return {"value": value, "epoch": epoch, "provenance": prov, "generated_at_ms": at}


# PX4 SITL's default home, where the local frame's origin sits (catalog v6's `origin` source).
ORIGIN = {"lat_deg": 47.397742, "lon_deg": 8.545594, "alt_m": 488.0, "home_alt_m": 488.0}
EARTH_R = 6_371_000.0


def latlon_at(north, east, origin=ORIGIN):
    """The latitude and longitude `north`, `east` metres from the origin on a sphere of PX4's
    radius: the great-circle destination at distance hypot(north, east) along bearing
    atan2(east, north) (the spherical "direct" problem; the gateway projects the other way)."""
    d = math.hypot(north, east) / EARTH_R
    theta = math.atan2(east, north)
    p1, l1 = math.radians(origin["lat_deg"]), math.radians(origin["lon_deg"])
    p2 = math.asin(math.sin(p1) * math.cos(d) + math.cos(p1) * math.sin(d) * math.cos(theta))
    l2 = l1 + math.atan2(math.sin(theta) * math.sin(d) * math.cos(p1), math.cos(d) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), math.degrees(l2)


def global_route(north, east, alt_m, frame="global"):
    lat, lon = latlon_at(north, east)
    return {"frame": frame, "lat_deg": lat, "lon_deg": lon, "alt_m": alt_m, "yaw_deg": 90.0, "duration_s": 8.0}


def global_running(north=12.0, east=3.5, alt_m=498.0, frame="global", origin_claim={"epoch": 1}):
    r = running()
    e3 = comp(r, "e3")
    e3["payload"] = global_route(north, east, alt_m, frame)
    if origin_claim is not None:
        e3["support"]["origin"] = origin_claim
    return r


BOUNDS = {"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0,
          "down_min": -60.0, "down_max": 0.0}


def healthy_state():
    return {
        "now_ms": NOW,
        "sources": {
            "traffic": src([{"north_m": 400.0, "east_m": 400.0, "down_m": -50.0}], 41, "utm-feed-a"),
            "map": src(None, 7, "map-service"),
            "bounds": src(dict(BOUNDS), 3, "corridor-12"),
            "vehicle": src("airborne", 1, "px4"),
            "home": src({"north_m": 0.0, "east_m": 0.0, "down_m": 0.0}, 1, "px4"),
            "origin": src(dict(ORIGIN), 1, "px4"),
            "battery": src(80.0, 1, "px4"),
            "link": src(True, 1, "link-monitor"),
            "authority": src(True, 1, "operator"),
            "airspace": src(True, 1, "laanc"),
            "preflight": src(True, 1, "operator"),
            "wind": src(4.0, 1, "weather"),
            "z_range": src(1.42, 1, "rangefinder"),
            "control": src(True, 1, "px4"),
        },
        "certificates": [{"id": "cert-9f2c", "covers": {"component": "e3"}, "valid_until_ms": 30_000,
                          "issuer": "tube-verifier"}],
    }


ROUTE = {"frame": "local_ned", "north_m": 12.0, "east_m": 3.5, "down_m": -10.0, "yaw_deg": 90.0,
         "duration_s": 8.0}
SUPPORT = {"map": {"epoch": 7}, "traffic": {"epoch": 41},
           "bounds": {"epoch": 3, "provenance": "corridor-12"}}


def running(**over):
    r = {
        "response_id": "resp-0007", "agent_id": "planner-1", "generation": 12,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
            {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 1.42, "unit": "m"}},
            {"id": "e3", "type": "route_action", "payload": dict(ROUTE), "support": copy.deepcopy(SUPPORT),
             "certificate": "cert-9f2c"},
            {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
             "requires": [{"id": "e3", "phase": "dispatched"}]},
        ],
    }
    r.update(over)
    return r


def comp(resp, cid):
    for c in resp["components"]:
        if c["id"] == cid:
            return c
    raise KeyError(cid)


E = {"phase": "EMITTED"}
R = {"phase": "RETAINED"}


def P(reason="DEPS_NOT_READY"):
    return {"phase": "PENDING", "reason": reason}


def W(reason, obligation=None, route=None):
    d = {"phase": "WITHHELD", "reason": reason}
    if obligation is not None:
        d["obligation"] = obligation
    if route is not None:
        d["route"] = route
    return d


def I(reason):
    return {"phase": "INVALIDATED", "reason": reason}


def ok_running():
    return {"e1": E, "e2": E, "e3": R, "e4": P()}


def e3_blocked(reason, recoverable=True, route=None):
    """e3 denied at admission: recoverable -> WITHHELD with an obligation (naming `route` when
    given: the paper's Table 6 route per profile), e4 withheld by closure; terminal ->
    INVALIDATED and e4 invalidated with it."""
    if recoverable:
        return {"e1": E, "e2": E, "e3": W(reason, True, route), "e4": W("PARENT_WITHHELD")}
    return {"e1": E, "e2": E, "e3": I(reason), "e4": I("PARENT_FAILED")}


cases = {"local": [], "structure": [], "closure": []}


def case(family, name, expect, state=None, response=None, response_text=None, catalog="uav-px4"):
    c = {"name": f"{family}/{name}", "catalog": catalog, "state": state or healthy_state()}
    if response_text is not None:
        c["response_text"] = response_text
    else:
        c["response"] = response if response is not None else running()
    c["expect"] = expect
    cases[family].append(c)


def comps(expect):
    return {"components": expect}


def rejected(code, ids=None):
    d = {"code": code}
    if ids is not None:
        d["ids"] = ids
    return {"rejected": d}


# ---------------------------------------------------------------- local support (UAV catalog)
case("local", "all-supported", comps(ok_running()))

s = healthy_state(); s["sources"]["traffic"]["generated_at_ms"] = NOW - 2000
case("local", "traffic-age-equals-limit-is-fresh", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["traffic"]["generated_at_ms"] = NOW - 2001
case("local", "traffic-one-ms-past-limit", comps(e3_blocked("STALE_SOURCE")), state=s)

s = healthy_state(); s["sources"]["z_range"]["generated_at_ms"] = NOW - 501
case("local", "report-source-stale-only-report-withheld",
     comps({"e1": E, "e2": W("STALE_SOURCE"), "e3": R, "e4": P()}), state=s)

s = healthy_state(); s["sources"]["z_range"]["generated_at_ms"] = NOW - 500
case("local", "report-source-at-limit", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["map"]["epoch"] = 8
case("local", "map-epoch-changed", comps(e3_blocked("EPOCH_CHANGED", route="replan")), state=s)

s = healthy_state(); s["sources"]["traffic"]["epoch"] = 42
case("local", "traffic-epoch-changed", comps(e3_blocked("EPOCH_CHANGED")), state=s)

s = healthy_state(); s["sources"]["bounds"]["provenance"] = "corridor-13"
case("local", "bounds-provenance-changed", comps(e3_blocked("BOUNDS_PROVENANCE_CHANGED")), state=s)

s = healthy_state(); s["sources"]["bounds"]["epoch"] = 4
case("local", "bounds-epoch-changed", comps(e3_blocked("EPOCH_CHANGED")), state=s)

s = healthy_state(); del s["sources"]["traffic"]
case("local", "traffic-never-received", comps(e3_blocked("SOURCE_MISSING")), state=s)

s = healthy_state(); del s["sources"]["z_range"]
case("local", "range-never-received", comps({"e1": E, "e2": W("SOURCE_MISSING"), "e3": R, "e4": P()}), state=s)

r = running(); comp(r, "e3")["payload"]["north_m"] = 120.0
case("local", "target-outside-corridor", comps(e3_blocked("OUT_OF_BOUNDS", route="corrected_scope")), response=r)

r = running(); comp(r, "e3")["payload"]["north_m"] = 100.0
case("local", "target-on-corridor-edge", comps(ok_running()), response=r)

s = healthy_state(); s["sources"]["bounds"]["value"]["down_min"] = -200.0
r = running(); comp(r, "e3")["payload"]["down_m"] = -130.0
case("local", "target-above-altitude-limit", comps(e3_blocked("OPERATING_LIMIT", route="corrected_scope")),
     state=s, response=r)

s = healthy_state(); s["sources"]["bounds"]["value"]["down_min"] = -200.0
r = running(); comp(r, "e3")["payload"]["down_m"] = -120.0
case("local", "target-at-altitude-limit", comps(ok_running()), state=s, response=r)

s = healthy_state(); s["sources"]["home"]["value"] = {"north_m": 600.0, "east_m": 0.0, "down_m": 0.0}
case("local", "target-too-far-from-home", comps(e3_blocked("OPERATING_LIMIT", route="corrected_scope")), state=s)

s = healthy_state(); s["sources"]["battery"]["value"] = 24.9
case("local", "battery-below-minimum", comps(e3_blocked("ENERGY_LOW", route="refresh_preflight")), state=s)

s = healthy_state(); s["sources"]["battery"]["value"] = 25.0
case("local", "battery-at-minimum", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["link"]["value"] = False
case("local", "link-unhealthy", comps(e3_blocked("LINK_UNHEALTHY", route="refresh_preflight")), state=s)

s = healthy_state(); s["sources"]["authority"]["value"] = False
case("local", "pilot-authority-not-current", comps(e3_blocked("AUTHORITY_NOT_CURRENT", route="fresh_authority")), state=s)

s = healthy_state(); s["sources"]["airspace"]["value"] = False
case("local", "airspace-not-authorized",
     comps(e3_blocked("AIRSPACE_NOT_AUTHORIZED", route="fresh_authorization")), state=s)

s = healthy_state(); s["sources"]["preflight"]["value"] = False
case("local", "preflight-missing", comps(e3_blocked("PREFLIGHT_MISSING", route="refresh_preflight")), state=s)

s = healthy_state(); s["sources"]["wind"]["value"] = 12.5
case("local", "wind-above-limit", comps(e3_blocked("OPERATING_LIMIT", route="corrected_scope")), state=s)

s = healthy_state(); s["sources"]["wind"]["value"] = 12.0
case("local", "wind-at-limit", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["traffic"]["value"] = [{"north_m": 12.0, "east_m": 3.5, "down_m": -39.9}]
case("local", "intruder-inside-separation", comps(e3_blocked("SEPARATION_LOST", route="fresh_traffic")), state=s)

s = healthy_state(); s["sources"]["traffic"]["value"] = [{"north_m": 12.0, "east_m": 3.5, "down_m": -40.0}]
case("local", "intruder-exactly-at-separation", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["traffic"]["value"] = []
case("local", "no-traffic", comps(ok_running()), state=s)

s = healthy_state(); s["sources"]["vehicle"]["value"] = "landed"
case("local", "vehicle-not-airborne-terminal", comps(e3_blocked("VEHICLE_STATE", recoverable=False)), state=s)

s = healthy_state(); s["certificates"] = []
case("local", "certificate-unknown", comps(e3_blocked("CERTIFICATE_UNKNOWN")), state=s)

r = running(); del comp(r, "e3")["certificate"]
case("local", "certificate-not-referenced-terminal",
     comps(e3_blocked("CERTIFICATE_MISSING", recoverable=False)), response=r)

s = healthy_state(); s["certificates"][0]["covers"] = {"component": "e1"}
case("local", "certificate-covers-another-digest", comps(e3_blocked("CERTIFICATE_NOT_BOUND")), state=s)

# t_end + guard = 10100 + 8000 + 250 = 18350: equality fails closed, one more ms passes.
s = healthy_state(); s["certificates"][0]["valid_until_ms"] = 18_350
case("local", "interval-end-plus-guard-equals-certificate-end", comps(e3_blocked("INTERVAL_NOT_COVERED")), state=s)

s = healthy_state(); s["certificates"][0]["valid_until_ms"] = 18_351
case("local", "interval-covered-by-one-ms", comps(ok_running()), state=s)

s = healthy_state(); s["certificates"][0]["valid_until_ms"] = NOW
case("local", "certificate-expired", comps(e3_blocked("CERTIFICATE_EXPIRED")), state=s)

r = running(); del comp(r, "e3")["support"]["traffic"]
case("local", "required-claim-missing-terminal", comps(e3_blocked("CLAIM_MISSING", recoverable=False)), response=r)

r = running(); comp(r, "e3")["support"]["traffic"] = {"epoch": 41, "provenance": "utm-feed-b"}
case("local", "claimed-provenance-differs", comps(e3_blocked("PROVENANCE_CHANGED")), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e3", "phase": "observed_success"}]
case("local", "status-waits-for-observation", comps(ok_running()), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e1", "phase": "emitted"}]
case("local", "status-after-notice-emits-in-the-same-admission",
     comps({"e1": E, "e2": E, "e3": R, "e4": E}), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e2", "phase": "emitted"}]
s = healthy_state(); s["sources"]["z_range"]["generated_at_ms"] = 9_000
case("local", "status-after-stale-report-withheld",
     comps({"e1": E, "e2": W("STALE_SOURCE"), "e3": R, "e4": W("PARENT_WITHHELD")}), state=s, response=r)

s = healthy_state(); s["sources"] = {}
case("local", "empty-state-only-footprintless-notice-emits",
     comps({"e1": E, "e2": W("SOURCE_MISSING"), "e3": W("SOURCE_MISSING", True), "e4": W("PARENT_WITHHELD")}),
     state=s)

r = running(components=[{"id": "h1", "type": "hold", "payload": {"duration_s": 5.0}}])
case("local", "hold-supported", comps({"h1": R}), response=r)

r = running(components=[{"id": "l1", "type": "land", "payload": {}}])
s = healthy_state(); s["sources"]["vehicle"]["generated_at_ms"] = NOW - 1001
case("local", "land-with-stale-vehicle-state", comps({"l1": W("STALE_SOURCE", True)}), state=s, response=r)

r = running(components=[{"id": "q1", "type": "refresh_request", "payload": {"sources": ["traffic", "map"]}}])
case("local", "refresh-request-emits", comps({"q1": E}), response=r)

# Global targets (catalog v6): converted through `origin`, whose epoch they claim; the rules see
# the converted point. 498 m AMSL is 10 m above the origin: the running example's e3 again.
case("local", "global-target-converted-inside-corridor", comps(ok_running()), response=global_running())

case("local", "global-target-converted-outside-corridor",
     comps(e3_blocked("OUT_OF_BOUNDS", route="corrected_scope")), response=global_running(north=120.0))

# Home 10 m below the origin: 70 m above home is 60 m above the origin, the corridor's top edge;
# 71 m is above it.
s = healthy_state(); s["sources"]["origin"]["value"]["home_alt_m"] = 478.0
case("local", "global-relative-altitude-counts-from-home", comps(ok_running()), state=s,
     response=global_running(alt_m=70.0, frame="global_relative_alt"))

s = healthy_state(); s["sources"]["origin"]["value"]["home_alt_m"] = 478.0
case("local", "global-relative-altitude-above-corridor",
     comps(e3_blocked("OUT_OF_BOUNDS", route="corrected_scope")), state=s,
     response=global_running(alt_m=71.0, frame="global_relative_alt"))

case("local", "global-target-without-origin-claim-terminal",
     comps(e3_blocked("CLAIM_MISSING", recoverable=False)), response=global_running(origin_claim=None))

case("local", "global-target-origin-claim-without-epoch-terminal",
     comps(e3_blocked("CLAIM_MISSING", recoverable=False)),
     response=global_running(origin_claim={"provenance": "px4"}))

s = healthy_state(); s["sources"]["origin"]["epoch"] = 2
s["sources"]["origin"]["value"]["lat_deg"] = 47.398742
case("local", "global-target-planned-against-an-old-origin",
     comps(e3_blocked("EPOCH_CHANGED", route="replan")), state=s, response=global_running())

s = healthy_state(); del s["sources"]["origin"]
case("local", "global-target-origin-never-received", comps(e3_blocked("SOURCE_MISSING")), state=s,
     response=global_running())

s = healthy_state(); del s["sources"]["origin"]
case("local", "local-target-origin-never-received", comps(e3_blocked("SOURCE_MISSING")), state=s)

# About 111 km north of the origin: past the local frame's 100 km, no local point to fly.
case("local", "global-target-beyond-the-local-frame",
     comps(e3_blocked("OUT_OF_BOUNDS", route="corrected_scope")), response=global_running(north=111_000.0))

# ---------------------------------------------------------------- structure (rejected whole)
r = running(); r["components"][1]["id"] = "e1"
case("structure", "duplicate-id", rejected("DUPLICATE_ID", ["e1"]), response=r)

r = global_running(); comp(r, "e3")["payload"]["lat_deg"] = 90.0
case("structure", "global-target-latitude-at-the-pole", rejected("INVALID_PAYLOAD", ["e3"]), response=r)

r = global_running(); comp(r, "e3")["payload"]["north_m"] = 12.0
case("structure", "global-target-with-a-local-field", rejected("UNKNOWN_FIELD", ["e3"]), response=r)

r = running(); r["components"][0]["type"] = "poem"
case("structure", "unknown-type", rejected("UNKNOWN_TYPE", ["e1"]), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e9", "phase": "dispatched"}]
case("structure", "missing-reference", rejected("MISSING_REFERENCE", ["e4->e9"]), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e4", "phase": "emitted"}]
case("structure", "self-reference", rejected("SELF_REFERENCE", ["e4"]), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e1", "phase": "dispatched"}]
case("structure", "phase-a-notice-cannot-reach", rejected("PHASE_NOT_ALLOWED", ["e4->e1@dispatched"]), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e3", "phase": "done"}]
case("structure", "unknown-phase-name", rejected("PHASE_NOT_ALLOWED", ["e4"]), response=r)

r = running(); comp(r, "e3")["requires"] = [{"id": "e1", "phase": "emitted"}]
case("structure", "type-may-not-declare-prerequisites", rejected("PHASE_NOT_ALLOWED", ["e3->e1@emitted"]), response=r)

r = running(); comp(r, "e4")["requires"] = [{"id": "e3", "phase": "dispatched"}, {"id": "e3", "phase": "observed_success"}]
case("structure", "duplicate-prerequisite", rejected("DUPLICATE_PREREQUISITE", ["e4->e3"]), response=r)

r = running(); r["catalog"]["version"] = 2
case("structure", "catalog-version-mismatch", rejected("CATALOG_MISMATCH"), response=r)

r = running(); r["catalog"]["id"] = "uav-ardupilot"
case("structure", "catalog-id-mismatch", rejected("CATALOG_MISMATCH"), response=r)

r = running(); r["priority"] = "high"
case("structure", "unknown-envelope-field", rejected("UNKNOWN_FIELD"), response=r)

r = running(); comp(r, "e1")["urgent"] = True
case("structure", "unknown-component-field", rejected("UNKNOWN_FIELD"), response=r)

r = running(); comp(r, "e3")["payload"]["speed_m_s"] = 20.0
case("structure", "unknown-payload-field", rejected("UNKNOWN_FIELD", ["e3"]), response=r)

text = json.dumps(running()).replace('"generation": 12', '"generation": 12, "generation": 13', 1)
case("structure", "duplicate-envelope-key", rejected("DUPLICATE_KEY"), response_text=text)

text = json.dumps(running()).replace('"north_m": 12.0', '"north_m": 12.0, "north_m": 99.0', 1)
case("structure", "duplicate-payload-key", rejected("DUPLICATE_KEY", ["e3"]), response_text=text)

text = json.dumps(running()).replace('"map": {"epoch": 7}', '"map": {"epoch": 7}, "map": {"epoch": 8}', 1)
case("structure", "duplicate-support-key", rejected("DUPLICATE_KEY"), response_text=text)


def notices(n, prefix="n"):
    return [{"id": f"{prefix}{i}", "type": "notice", "payload": {"text": f"notice {i}"}} for i in range(n)]


case("structure", "sixty-five-components", rejected("TOO_MANY_COMPONENTS"), response=running(components=notices(65)))
case("structure", "sixty-four-components-accepted", {"components": {}, "default": E},
     response=running(components=notices(64)))

many = notices(17) + [{"id": "s", "type": "status", "payload": {"text": "all sent"},
                       "requires": [{"id": f"n{i}", "phase": "emitted"} for i in range(17)]}]
case("structure", "seventeen-prerequisites", rejected("TOO_MANY_PREREQUISITES", ["s"]), response=running(components=many))

many = notices(16) + [{"id": "s", "type": "status", "payload": {"text": "all sent"},
                       "requires": [{"id": f"n{i}", "phase": "emitted"} for i in range(16)]}]
case("structure", "sixteen-prerequisites-accepted", {"components": {}, "default": E}, response=running(components=many))


def text_of_len(n):
    # {"text":"..."} is 11 bytes around the text.
    return "x" * (n - 11)


r = running(components=[{"id": "big", "type": "notice", "payload": {"text": text_of_len(4097)}}])
case("structure", "payload-4097-bytes", rejected("PAYLOAD_TOO_LARGE", ["big"]), response=r)
r = running(components=[{"id": "big", "type": "notice", "payload": {"text": text_of_len(4096)}}])
case("structure", "payload-4096-bytes-accepted", comps({"big": E}), response=r)

r = running(); r["components"][0]["id"] = "a" * 65
case("structure", "id-65-bytes", rejected("INVALID_ID"), response=r)
r = running(components=[{"id": "a" * 64, "type": "notice", "payload": {"text": "x"}}])
case("structure", "id-64-bytes-accepted", comps({"a" * 64: E}), response=r)
r = running(); r["components"][0]["id"] = "e 1"
case("structure", "id-with-space", rejected("INVALID_ID"), response=r)
r = running(); r["response_id"] = "resp/7"
case("structure", "response-id-with-slash", rejected("INVALID_ID"), response=r)

case("structure", "no-components", rejected("EMPTY_RESPONSE"), response=running(components=[]))

r = running(); comp(r, "e3")["payload"]["duration_s"] = 0.0
case("structure", "zero-duration", rejected("INVALID_PAYLOAD", ["e3"]), response=r)
r = running(); comp(r, "e3")["payload"]["frame"] = "global_wgs84"
case("structure", "unknown-frame", rejected("INVALID_PAYLOAD", ["e3"]), response=r)
r = running(); comp(r, "e3")["payload"]["north_m"] = 1.0e9
case("structure", "coordinate-out-of-range", rejected("INVALID_PAYLOAD", ["e3"]), response=r)
r = running(); comp(r, "e1")["support"] = {"traffic": {"epoch": 41}}
case("structure", "claim-outside-footprint", rejected("UNKNOWN_SUPPORT_SOURCE", ["e1"]), response=r)
r = running(); comp(r, "e3")["support"]["map"] = {}
case("structure", "claim-names-nothing", rejected("INVALID_PAYLOAD", ["e3"]), response=r)
r = running(); r["format"] = 2
case("structure", "future-format-version", rejected("UNSUPPORTED_FORMAT"), response=r)
case("structure", "not-json", rejected("MALFORMED_JSON"), response_text="resp-0007: fly to WP3")
r = running(); r["generation"] = "12"
case("structure", "generation-as-string", rejected("MALFORMED_JSON"), response=r)
r = running(); del r["agent_id"]
case("structure", "missing-agent-id", rejected("MALFORMED_JSON"), response=r)

# ---------------------------------------------------------------- closure (synthetic catalog)


def gstate():
    return {"now_ms": 1_000, "sources": {"x": src(None, 1, "p", 1_000), "y": src(True, 1, "p", 1_000)},
            "certificates": []}


def gnode(cid, parents=(), bad=False, kind="node"):
    c = {"id": cid, "type": kind, "payload": {"text": cid} if kind == "node" else {"duration_s": 1.0},
         "support": {"x": {"epoch": 2 if bad else 1}}}
    if parents:
        c["requires"] = [{"id": p, "phase": ph} for p, ph in parents]
    return c


def gresp(components):
    return {"response_id": "g", "agent_id": "a", "generation": 1,
            "catalog": {"id": "graph-test", "version": 1}, "components": components}


def gcase(name, components, expect=None, rejected_=None):
    if rejected_ is not None:
        case("closure", name, rejected_, state=gstate(), response=gresp(components), catalog="graph-test")
    else:
        case("closure", name, comps(expect), state=gstate(), response=gresp(components), catalog="graph-test")


EM = "emitted"
DI = "dispatched"


def chain(n, bad_at=None):
    cs = []
    for i in range(n):
        cs.append(gnode(f"c{i}", [(f"c{i-1}", EM)] if i else (), bad=(i == bad_at)))
    exp = {}
    for i in range(n):
        if bad_at is None or i < bad_at:
            exp[f"c{i}"] = E
        elif i == bad_at:
            exp[f"c{i}"] = W("EPOCH_CHANGED")
        else:
            exp[f"c{i}"] = W("PARENT_WITHHELD")
    return cs, exp


for n, bad in [(3, None), (3, 0), (3, 1), (3, 2), (16, 8), (16, 15), (16, 0)]:
    cs, exp = chain(n, bad)
    gcase(f"chain-{n}-bad-{bad}", cs, exp)

diamond = lambda bad: [gnode("a", bad=(bad == "a")), gnode("b", [("a", EM)], bad=(bad == "b")),
                       gnode("c", [("a", EM)], bad=(bad == "c")), gnode("d", [("b", EM), ("c", EM)], bad=(bad == "d"))]
gcase("diamond-all-supported", diamond(None), {"a": E, "b": E, "c": E, "d": E})
gcase("diamond-one-side-removed", diamond("b"), {"a": E, "b": W("EPOCH_CHANGED"), "c": E, "d": W("PARENT_WITHHELD")})
gcase("diamond-root-removed", diamond("a"),
      {"a": W("EPOCH_CHANGED"), "b": W("PARENT_WITHHELD"), "c": W("PARENT_WITHHELD"), "d": W("PARENT_WITHHELD")})
gcase("diamond-sink-removed", diamond("d"), {"a": E, "b": E, "c": E, "d": W("EPOCH_CHANGED")})

gcase("two-lineages-one-removed",
      [gnode("a", bad=True), gnode("b", [("a", EM)]), gnode("c"), gnode("d", [("c", EM)])],
      {"a": W("EPOCH_CHANGED"), "b": W("PARENT_WITHHELD"), "c": E, "d": E})
gcase("fan-out-root-removed",
      [gnode("r", bad=True)] + [gnode(f"k{i}", [("r", EM)]) for i in range(5)],
      dict([("r", W("EPOCH_CHANGED"))] + [(f"k{i}", W("PARENT_WITHHELD")) for i in range(5)]))
gcase("fan-in-one-parent-removed",
      [gnode(f"p{i}", bad=(i == 3)) for i in range(5)] + [gnode("sink", [(f"p{i}", EM) for i in range(5)])],
      dict([(f"p{i}", W("EPOCH_CHANGED") if i == 3 else E) for i in range(5)] + [("sink", W("PARENT_WITHHELD"))]))
gcase("own-failure-reported-before-parent",
      [gnode("a", bad=True), gnode("b", [("a", EM)], bad=True)],
      {"a": W("EPOCH_CHANGED"), "b": W("EPOCH_CHANGED")})
gcase("alternating-roots",
      sum([[gnode(f"r{i}", bad=(i % 2 == 0)), gnode(f"k{i}", [(f"r{i}", EM)])] for i in range(8)], []),
      dict(sum([[(f"r{i}", W("EPOCH_CHANGED") if i % 2 == 0 else E),
                 (f"k{i}", W("PARENT_WITHHELD") if i % 2 == 0 else E)] for i in range(8)], [])))
gcase("action-in-chain-retained-dependent-pending",
      [gnode("a"), gnode("b", [("a", EM)], kind="act"), gnode("c", [("b", DI)])],
      {"a": E, "b": R, "c": P()})
gcase("action-in-chain-removed",
      [gnode("a"), gnode("b", [("a", EM)], kind="act", bad=True), gnode("c", [("b", DI)])],
      {"a": E, "b": W("EPOCH_CHANGED", True), "c": W("PARENT_WITHHELD")})
gcase("action-waits-for-pending-parent",
      [gnode("a", kind="act"), gnode("b", [("a", DI)], kind="act")],
      {"a": R, "b": P()})
gcase("action-whose-parent-is-removed",
      [gnode("a", bad=True), gnode("b", [("a", EM)], kind="act")],
      {"a": W("EPOCH_CHANGED"), "b": W("PARENT_WITHHELD", True)})
gcase("mixed-parents-one-action-pending",
      [gnode("n"), gnode("act", kind="act"), gnode("s", [("n", EM), ("act", DI)])],
      {"n": E, "act": R, "s": P()})
gcase("lattice-middle-removed",
      [gnode("a"), gnode("b"), gnode("c", [("a", EM), ("b", EM)], bad=True), gnode("d", [("a", EM)]),
       gnode("e", [("c", EM), ("d", EM)]), gnode("f", [("d", EM)])],
      {"a": E, "b": E, "c": W("EPOCH_CHANGED"), "d": E, "e": W("PARENT_WITHHELD"), "f": E})
gcase("envelope-order-not-topological",
      [gnode("z", [("y", EM)]), gnode("y", [("x", EM)]), gnode("x")],
      {"x": E, "y": E, "z": E})
gcase("two-cycle", [gnode("a", [("b", EM)]), gnode("b", [("a", EM)])], rejected_=rejected("CYCLE", ["a", "b"]))
gcase("three-cycle", [gnode("a", [("c", EM)]), gnode("b", [("a", EM)]), gnode("c", [("b", EM)])],
      rejected_=rejected("CYCLE", ["a", "b", "c"]))
gcase("cycle-with-tail-names-the-cycle",
      [gnode("a", [("c", EM)]), gnode("b", [("a", EM)]), gnode("c", [("b", EM)]), gnode("d", [("a", EM)])],
      rejected_=rejected("CYCLE", ["a", "b", "c"]))
gcase("cycle-beside-valid-lineage-rejects-whole",
      [gnode("ok"), gnode("a", [("b", EM)]), gnode("b", [("a", EM)])],
      rejected_=rejected("CYCLE", ["a", "b"]))
gcase("action-phase-mismatch",
      [gnode("a", kind="act"), gnode("b", [("a", EM)])],
      rejected_=rejected("PHASE_NOT_ALLOWED", ["b->a@emitted"]))

os.makedirs(OUT, exist_ok=True)
total = 0
for fam, cs in cases.items():
    with open(os.path.join(OUT, f"{fam}.json"), "w") as f:
        json.dump({"cases": cs}, f, indent=1)
        f.write("\n")
    total += len(cs)
    print(f"{fam}: {len(cs)} cases")
print(f"total: {total}")
