#!/usr/bin/env python3
"""A keyed autopilot written with pymavlink, to verify the signatures px4-bridge puts on what it
sends (pymavlink's own SHA-256 signature check, not the mavlink crate's).

It signs everything it sends with KEY (64 hex digits), heartbeats as PX4 (system 1, component 1)
once it has heard anything, acknowledges commands, and refuses unsigned frames. After DURATION
seconds it prints one JSON line: the sources and counts of the messages it took, and pymavlink's
signature counters. Usage: signed_autopilot.py PORT DURATION KEY
"""
import json
import os
import sys
import time

os.environ["MAVLINK20"] = "1"
os.environ.setdefault("MAVLINK_DIALECT", "common")
from pymavlink import mavutil  # noqa: E402

port, duration, key = int(sys.argv[1]), float(sys.argv[2]), bytes.fromhex(sys.argv[3])
conn = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=1, source_component=1, dialect="common")
conn.setup_signing(key, sign_outgoing=True, allow_unsigned_callback=lambda mav, msg_id: False, link_id=0)
mav = conn.mav
print("READY", flush=True)

taken = {}
sources = set()
t0 = time.time()
next_hb = 0.0
heard = False
while time.time() - t0 < duration:
    now = time.time()
    if heard and now >= next_hb:
        mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_QUADROTOR, mavutil.mavlink.MAV_AUTOPILOT_PX4,
                           mavutil.mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, (3 << 24) | (4 << 16),
                           mavutil.mavlink.MAV_STATE_STANDBY)
        next_hb = now + 1.0
    msg = conn.recv_match(blocking=True, timeout=0.02)
    if msg is None:
        continue
    # Anything arriving (even refused) shows a peer is there: answer with heartbeats.
    heard = True
    t = msg.get_type()
    if t == "BAD_DATA":
        continue
    taken[t] = taken.get(t, 0) + 1
    sources.add((msg.get_srcSystem(), msg.get_srcComponent()))
    if t == "COMMAND_LONG":
        mav.command_ack_send(msg.command, mavutil.mavlink.MAV_RESULT_ACCEPTED, 0, 0,
                             msg.get_srcSystem(), msg.get_srcComponent())
    elif t == "TIMESYNC" and msg.tc1 == 0:
        mav.timesync_send(time.monotonic_ns(), msg.ts1)

s = mav.signing
print(json.dumps({
    "taken": taken,
    "sources": sorted(sources),
    "goodsig": s.goodsig_count,
    "badsig": s.badsig_count,
    "unsigned_refused": s.reject_count,
}), flush=True)
