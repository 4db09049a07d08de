#!/usr/bin/env python3
"""An independent MCP peer for the gateway's MCP suite: the official Python `mcp` SDK's client.

It connects over stdio (it spawns the gateway: `--stdio BIN ARGS...`) or over streamable HTTP
(`--http URL/mcp --token AGENT`), waits until the operator has handed the gateway a flying
vehicle, lists the tools, flies the running example through `submit_response`, sends a route
action planned against an old map epoch (withheld with an obligation, which must also arrive as
a notification), asks `explain` about it, answers the obligation with a fresh candidate, and
tries the obvious escapes. It certifies its route actions itself as an external certifier would:
`POST /v1/digest` and `POST /v1/certificates` with the provider credential (`--gateway URL
--state DIR`).

One JSON line per check on stdout: {"check": name, "ok": bool, ...}; targets it expects the
vehicle to take: {"target": [n, e, d, yaw]}; the end: {"done": true, "matched": N, "total": M}.
The Rust suite reads the lines and checks the targets against the vehicle's own setpoint log.
"""

import argparse
import asyncio
import json
import os
import sys
import time
import warnings

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

RESULTS = []
# The server speaks protocol 2025-11-25, where resources/subscribe is how a client subscribes.
warnings.filterwarnings("ignore", message="resources/subscribe")


def say(**kv):
    print(json.dumps(kv, sort_keys=True), flush=True)


def check(name, ok, **kv):
    RESULTS.append(bool(ok))
    say(check=name, ok=bool(ok), **kv)


def structured(result):
    return result.structured_content or {}


class Certifier:
    """The external certifier: digests from the gateway, certificates with the provider credential."""

    def __init__(self, url, state):
        self.url = url
        self.state = state
        self.n = 0

    def token(self):
        with open(os.path.join(self.state, "credentials", "provider.token")) as f:
            return f.read().strip()

    def certify(self, component):
        h = {"Authorization": f"Bearer {self.token()}"}
        r = httpx.post(f"{self.url}/v1/digest", json={"component": component}, headers=h, timeout=10)
        r.raise_for_status()
        digest = r.json()["components"][0]["digest"]
        body = {"id": component["certificate"], "covers": digest, "valid_for_ms": 60000, "issuer": "py-peer"}
        r = httpx.post(f"{self.url}/v1/certificates", json=body, headers=h, timeout=10)
        r.raise_for_status()

    def route(self, cid, target, support, tag):
        self.n += 1
        c = {
            "id": cid,
            "type": "route_action",
            "payload": {"frame": "local_ned", "north_m": target[0], "east_m": target[1],
                        "down_m": target[2], "yaw_deg": target[3], "duration_s": 8.0},
            "support": support,
            "certificate": f"cert-py-{tag}-{self.n}",
        }
        self.certify(c)
        return c


def claims(status):
    by = {s["source"]: s for s in status["sources"]}
    return {
        "map": {"epoch": by["map"]["epoch"]},
        "traffic": {"epoch": by["traffic"]["epoch"]},
        "bounds": {"epoch": by["bounds"]["epoch"], "provenance": by["bounds"]["provenance"]},
    }


async def flow(session, cert, notes, updated, tag):
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    expected = {"route_action", "hold", "land", "notice", "report", "status", "refresh_request",
                "submit_response", "obligations", "submit_candidate", "vehicle_status", "explain"}
    check("tools listed", expected <= set(tools), tools=sorted(tools))
    route = tools.get("route_action")
    check(
        "route_action moves the vehicle, vehicle_status reads",
        route is not None and route.annotations.destructive_hint is True
        and tools["vehicle_status"].annotations.read_only_hint is True,
    )
    # The payload is a local target or one on the globe (the catalog names an origin source).
    forms = (route.input_schema["properties"]["payload"].get("anyOf", []) if route is not None else [])
    check(
        "catalog limits in the schema",
        len(forms) == 2
        and forms[0]["properties"]["down_m"]["minimum"] == -120.0
        and forms[1]["properties"]["lat_deg"]["exclusiveMaximum"] == 90.0,
    )
    # The operator hands the gateway a flying vehicle; the agent waits for it.
    deadline = time.time() + 90
    status = {}
    while time.time() < deadline:
        status = structured(await session.call_tool("vehicle_status", {}))
        v = status.get("vehicle", {})
        srcs = {s["source"]: s for s in status.get("sources", [])}
        if v.get("control") == "gateway" and v.get("landed_state") == "in air" \
                and v.get("mode") == "AUTO.LOITER" and srcs.get("map", {}).get("epoch") is not None:
            break
        await asyncio.sleep(0.5)
    check("vehicle handed over", status.get("vehicle", {}).get("control") == "gateway",
          mode=status.get("vehicle", {}).get("mode"))
    await session.subscribe_resource("halo://obligations")
    support = claims(status)

    # The running example as one envelope.
    t1 = [12.0, 3.5, -10.0, 90.0]
    e3 = cert.route("e3", t1, support, tag)
    env = {
        "format": 1, "response_id": f"resp-py-{tag}", "agent_id": "py-peer", "generation": 1,
        "catalog": {"id": "uav-px4", "version": 6},
        "components": [
            {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
            {"id": "e2", "type": "report", "payload": {"sensor": "z_range", "value": 1.42, "unit": "m"}},
            e3,
            {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
             "requires": [{"id": "e3", "phase": "dispatched"}]},
        ],
    }
    r = structured(await session.call_tool("submit_response", {"response": env}))
    phases = {c["id"]: c["phase"] for c in r.get("components", [])}
    check("running example admitted", phases.get("e3") == "dispatched" and phases.get("e1") == "emitted"
          and phases.get("e4") == "emitted", phases=phases)
    say(target=t1)
    await asyncio.sleep(3.0)

    # A route action planned against an old map epoch: withheld, with an obligation.
    stale = json.loads(json.dumps(support))
    stale["map"]["epoch"] = support["map"]["epoch"] - 1
    t2 = [15.0, 4.0, -10.0, 0.0]
    c = cert.route("r1", t2, stale, tag)
    args = {k: c[k] for k in ("id", "payload", "support", "certificate")}
    res = await session.call_tool("route_action", args)
    r = structured(res)
    comp = (r.get("components") or [{}])[0]
    ob = comp.get("obligation") or {}
    check("stale plan withheld with an obligation",
          comp.get("phase") == "withheld" and comp.get("reason") == "EPOCH_CHANGED"
          and ob.get("open") is True and "map" in ob.get("refresh", []),
          phase=comp.get("phase"), reason=comp.get("reason"))
    check("the result tells the model what to do",
          "submit_candidate" in res.content[0].text and "map" in res.content[0].text)
    deadline = time.time() + 5
    while time.time() < deadline and not any(
            n.get("event") == "obligation_created" and n.get("data", {}).get("id") == ob.get("id") for n in notes):
        await asyncio.sleep(0.1)
    check("obligation notified", any(
        n.get("event") == "obligation_created" and n.get("data", {}).get("id") == ob.get("id") for n in notes))
    deadline = time.time() + 5
    while time.time() < deadline and "halo://obligations" not in updated:
        await asyncio.sleep(0.1)
    check("subscribed resource updated", "halo://obligations" in updated, updated=sorted(updated))
    ex = structured(await session.call_tool("explain", {"response_id": r.get("response_id"), "component": "r1"}))
    check("explain names the reason", ex.get("reason") == "EPOCH_CHANGED"
          and any(s["source"] == "map" for s in ex.get("sources", [])))

    # The fresh candidate, planned against the current state.
    status = structured(await session.call_tool("vehicle_status", {}))
    fresh = cert.route("r1", t2, claims(status), tag)
    r = structured(await session.call_tool("submit_candidate", {"obligation": ob.get("id"), "components": [fresh]}))
    comp = (r.get("components") or [{}])[0]
    check("fresh candidate dispatched", comp.get("phase") == "dispatched", phase=comp.get("phase"),
          answer=r if comp.get("phase") != "dispatched" else None)
    say(target=t2)
    await asyncio.sleep(3.0)

    # The obvious escapes: each refused with a reason code, nothing changed.
    before = structured(await session.call_tool("vehicle_status", {}))
    escapes = [
        ("arm", {}, "UNKNOWN_TOOL"),
        ("set_parameter", {"name": "COM_RC_IN_MODE", "value": 4}, "UNKNOWN_TOOL"),
        ("notice", {"payload": {"north_m": 1.0}}, "UNKNOWN_FIELD"),
        ("notice", {"payload": {"text": 5}}, "INVALID_PAYLOAD"),
        ("notice", {"type": "route_action", "payload": {"text": "x"}}, "UNKNOWN_FIELD"),
        ("submit_response", {"response": {
            "response_id": f"resp-py-{tag}-esc", "agent_id": "py-peer", "generation": 9,
            "catalog": {"id": "uav-px4", "version": 6},
            "components": [{"id": "t1", "type": "takeoff", "payload": {"altitude_m": 30}}]}}, "UNKNOWN_TYPE"),
    ]
    for name, a, code in escapes:
        res = await session.call_tool(name, a)
        got = (structured(res).get("error") or {}).get("code")
        check(f"escape {name} refused", res.is_error is True and got == code, got=got)
    after = structured(await session.call_tool("vehicle_status", {}))
    gone = structured(await session.call_tool("explain", {"response_id": f"resp-py-{tag}-esc", "component": "t1"}))
    check("escapes changed nothing", before.get("obligations_live") == after.get("obligations_live")
          and after.get("vehicle", {}).get("mode") == before.get("vehicle", {}).get("mode")
          and (gone.get("error") or {}).get("code") == "RESPONSE_UNKNOWN",
          mode=after.get("vehicle", {}).get("mode"))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--http", help="the /mcp URL")
    p.add_argument("--token", help="the agent credential (HTTP)")
    p.add_argument("--gateway", required=True, help="the gateway's HTTP URL (certificates)")
    p.add_argument("--state", required=True, help="the gateway's state directory (provider credential)")
    p.add_argument("--tag", default="x")
    p.add_argument("--stdio", nargs=argparse.REMAINDER, help="the gateway's command line")
    a = p.parse_args()
    notes = []
    updated = set()

    async def on_log(params):
        if isinstance(params.data, dict):
            notes.append(params.data)

    async def on_message(message):
        params = getattr(message, "params", None)
        if getattr(message, "method", None) == "notifications/resources/updated" and params is not None:
            updated.add(str(params.uri))

    cert = Certifier(a.gateway, a.state)
    if a.stdio:
        server = StdioServerParameters(command=a.stdio[0], args=a.stdio[1:])
        async with stdio_client(server) as (r, w):
            async with ClientSession(r, w, logging_callback=on_log, message_handler=on_message) as s:
                await flow(s, cert, notes, updated, a.tag)
    else:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {a.token}"})
        async with client:
            async with streamable_http_client(a.http, http_client=client) as (r, w, *_):
                async with ClientSession(r, w, logging_callback=on_log, message_handler=on_message) as s:
                    await flow(s, cert, notes, updated, a.tag)
    say(done=True, matched=sum(RESULTS), total=len(RESULTS))
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
