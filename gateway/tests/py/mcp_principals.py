#!/usr/bin/env python3
"""Two agent principals over MCP (streamable HTTP), with the official `mcp` SDK and `httpx`,
sharing no code with the gateway.

    mcp_principals.py --url http://127.0.0.1:PORT --a TOKEN_A --b TOKEN_B --obligation N \
        --withheld RESPONSE_JSON

N is the obligation of a response agent A sent over HTTP (withheld). RESPONSE_JSON is another
response that is withheld with an obligation when agent A sends it: while both sessions are
open it is sent over HTTP, and agent A's session is told of its obligation, agent B's not. Checks: agent A's
MCP session lists that obligation and agent B's does not; a request on agent A's session with
agent B's credential is refused; agent A's session goes on.

One JSON line per check on stdout: {"check": name, "ok": bool, "detail": ...}; the end:
{"done": true, "matched": N, "total": M}.
"""

import argparse
import asyncio
import json
import sys

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append(bool(ok))
    print(json.dumps({"check": name, "ok": bool(ok), "detail": str(detail)[:400]}), flush=True)


def text_of(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


async def run(a):
    url = f"{a.url}/mcp"
    mark = f"Obligation {a.obligation} "

    seen = {}

    async def remember(response):
        # The session id the server gave agent A's session (the SDK keeps it to itself).
        sid = response.headers.get("mcp-session-id")
        if sid:
            seen["a"] = sid

    def client(token, hooks=None):
        return httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(30, read=60),
                                 event_hooks={"response": hooks or []})

    async with client(a.a, [remember]) as ca, client(a.b) as cb:
        async with streamable_http_client(url, http_client=ca) as (ra, wa, *_):
            told = {"a": [], "b": []}

            def logger(who):
                async def on_log(params):
                    told[who].append(json.dumps(params.data))
                return on_log

            async with ClientSession(ra, wa, logging_callback=logger("a")) as sa:
                await sa.initialize()
                listed_a = text_of(await sa.call_tool("obligations", {"state": "all"}))
                check("agent A's MCP session lists its obligation", mark in listed_a, listed_a)
                async with streamable_http_client(url, http_client=cb) as (rb, wb, *_):
                    async with ClientSession(rb, wb, logging_callback=logger("b")) as sb:
                        await sb.initialize()
                        # Agent A's withheld response over HTTP, both sessions listening.
                        await asyncio.sleep(0.5)
                        body = json.loads(a.withheld)
                        rid = body["response_id"]
                        r = await ca.post(f"{a.url}/v1/responses", json=body)
                        await asyncio.sleep(2.0)
                        a_told = [m for m in told["a"] if rid in m]
                        b_told = [m for m in told["b"] if rid in m]
                        check("agent A's session is told of its new obligation (the control)",
                              r.status_code == 200 and len(a_told) > 0, f"{r.status_code} {told['a'][-3:]}")
                        check("agent B's session is told nothing of agent A's response",
                              len(b_told) == 0, b_told)
                        listed_b = text_of(await sb.call_tool("obligations", {"state": "all"}))
                        check("agent B's MCP session does not list agent A's obligation",
                              mark not in listed_b, listed_b)
                # Agent A's session id with agent B's credential.
                sid = seen.get("a", "")
                r = await cb.post(url, headers={
                    "Mcp-Session-Id": sid,
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "Mcp-Protocol-Version": "2025-06-18",
                }, json={"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                         "params": {"name": "obligations", "arguments": {"state": "all"}}})
                body = r.text
                check("agent B on agent A's session id is refused, and sees nothing of A's",
                      "agent principal `agent-a`'s" in body and mark not in body,
                      f"{r.status_code} {body}")
                again = text_of(await sa.call_tool("obligations", {"state": "all"}))
                check("agent A's session goes on", mark in again, again)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--obligation", required=True)
    p.add_argument("--withheld", required=True)
    a = p.parse_args()
    try:
        asyncio.run(run(a))
    except Exception as e:  # noqa: BLE001 - the check reports whatever failed
        check("the MCP sessions ran", False, repr(e))
    print(json.dumps({"done": True, "matched": sum(RESULTS), "total": len(RESULTS)}), flush=True)
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
