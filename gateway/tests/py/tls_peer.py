#!/usr/bin/env python3
"""An independent TLS peer for the network suite: Python's own `ssl` (OpenSSL underneath),
`httpx` and the official `mcp` SDK, sharing no code with the gateway.

    tls_peer.py --url https://127.0.0.1:PORT --ca ca.crt --wrong-ca other-ca.crt --agent TOKEN

It trusts only the CA it is given (never the system's store, never "verify off"), and checks:
both protocol versions the gateway offers, the ones it must refuse, certificate verification
against the right CA, the wrong CA and the public roots, a request, the event stream and an MCP
session over streamable HTTP.

One JSON line per check on stdout: {"check": name, "ok": bool, "detail": ...}; the end:
{"done": true, "matched": N, "total": M}.
"""

import argparse
import warnings
import asyncio
import json
import socket
import ssl
import sys
import time
from urllib.parse import urlparse

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

RESULTS = []
# Offering TLS 1.1 at all is the point of one check.
warnings.filterwarnings("ignore", message="ssl.TLSVersion.TLSv1_1 is deprecated")


def check(name, ok, detail=""):
    RESULTS.append(bool(ok))
    print(json.dumps({"check": name, "ok": bool(ok), "detail": str(detail)[:300]}), flush=True)


def context(cafile, lo=None, hi=None, weak=False):
    ctx = ssl.create_default_context(cafile=cafile)
    if weak:
        # Let this client offer old protocols at all (OpenSSL 3 refuses them at its default
        # security level), so a refusal is the gateway's, not the client's.
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    if lo is not None:
        ctx.minimum_version = lo
    if hi is not None:
        ctx.maximum_version = hi
    return ctx


def handshake(host, port, ctx):
    """(negotiated version, None) or (None, the error's words)."""
    try:
        with socket.create_connection((host, port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                return tls.version(), None
    except (ssl.SSLError, OSError) as e:
        return None, f"{type(e).__name__}: {e}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--wrong-ca", required=True)
    p.add_argument("--agent", required=True)
    a = p.parse_args()
    u = urlparse(a.url)
    host, port = u.hostname, u.port

    v, e = handshake(host, port, context(a.ca))
    check("ssl: TLS 1.3 by default, the certificate verified against the CA", v == "TLSv1.3", v or e)
    v, e = handshake(host, port, context(a.ca, hi=ssl.TLSVersion.TLSv1_2))
    check("ssl: TLS 1.2 when the client offers no more", v == "TLSv1.2", v or e)
    v, e = handshake(host, port, context(a.ca, lo=ssl.TLSVersion.TLSv1_1, hi=ssl.TLSVersion.TLSv1_1, weak=True))
    # The refusal is the gateway's: an alert it sent (OpenSSL names a received alert
    # `..._ALERT_...`), not this client declining to offer the protocol.
    check("ssl: TLS 1.1 refused by the gateway (an alert from it)",
          v is None and "_ALERT_" in (e or "").upper(), v or e)
    v, e = handshake(host, port, context(a.wrong_ca))
    check("ssl: a client trusting another CA refuses the certificate",
          v is None and "CERTIFICATE_VERIFY_FAILED" in (e or ""), v or e)

    ctx = context(a.ca)
    auth = {"Authorization": f"Bearer {a.agent}"}
    with httpx.Client(verify=ctx, timeout=10) as c:
        r = c.get(f"{a.url}/v1/status")
        ok = r.status_code == 200 and "boot_epoch" in r.json()
        check("httpx: GET /v1/status over TLS", ok, r.status_code)
    try:
        # httpx's own default: the public roots (certifi). The test CA is not among them.
        httpx.get(f"{a.url}/v1/status", timeout=10)
        check("httpx: the public roots do not trust the test CA", False, "connected")
    except httpx.ConnectError as e:
        check("httpx: the public roots do not trust the test CA", "CERTIFICATE_VERIFY_FAILED" in str(e), e)

    # The event stream over TLS: the backlog's first event arrives.
    got = None
    deadline = time.time() + 15
    with httpx.Client(verify=ctx, timeout=httpx.Timeout(15, read=15)) as c:
        with c.stream("GET", f"{a.url}/v1/events", headers=auth) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    got = line
                    break
                if time.time() > deadline:
                    break
    check("httpx: the event stream (SSE) over TLS", got is not None, got)

    async def mcp_session():
        client = httpx.AsyncClient(verify=ctx, headers=auth, timeout=httpx.Timeout(30, read=300))
        async with client:
            async with streamable_http_client(f"{a.url}/mcp", http_client=client) as (r, w, *_):
                async with ClientSession(r, w) as s:
                    init = await s.initialize()
                    tools = await s.list_tools()
                    info = getattr(init, "server_info", None) or getattr(init, "serverInfo", None)
                    return info.name, sorted(t.name for t in tools.tools)

    try:
        name, tools = asyncio.run(mcp_session())
        check("mcp: a session over streamable HTTP over TLS lists the tools",
              "submit_response" in tools, f"{name}: {tools}")
    except Exception as e:  # noqa: BLE001 - the check reports whatever failed
        check("mcp: a session over streamable HTTP over TLS lists the tools", False, repr(e))

    print(json.dumps({"done": True, "matched": sum(RESULTS), "total": len(RESULTS)}), flush=True)
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
