#!/usr/bin/env python3
"""A ground station written with pymavlink that only watches: it connects to the simulated PX4's
ground-station port as QGroundControl would (heartbeats from system 255) and records every
POSITION_TARGET_LOCAL_NED the vehicle reports, i.e. what PX4 holds as its target. An
independent observer: it shares no code with the bridge or the simulator.

Usage: gcs_watch.py GCS_PORT MAX_SECONDS
Prints READY once pymavlink is imported and the socket exists, watches until its standard input
closes (or MAX_SECONDS), then prints one JSON line:
  {"count": N, "seconds": S, "runs": [{"fp", "x", "y", "z", "yaw_deg", "first_ms", "last_ms", "n"}]}
where runs are the consecutive stretches of one target, by fingerprint (centimetres and tenths
of a degree, the documented rule), with the vehicle's time_boot_ms of their first and last report.
"""
import json
import math
import os
import sys
import threading
import time

os.environ["MAVLINK20"] = "1"
os.environ.setdefault("MAVLINK_DIALECT", "common")
from pymavlink import mavutil  # noqa: E402

port, limit = int(sys.argv[1]), float(sys.argv[2])
conn = mavutil.mavlink_connection(
    f"udpout:127.0.0.1:{port}", source_system=255, source_component=190, dialect="common"
)
M = mavutil.mavlink
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("READY", flush=True)


def fingerprint(x, y, z, yaw_deg):
    r = lambda v: int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)  # half away from zero
    yaw = math.fmod(yaw_deg, 360.0)
    if yaw <= -180.0:
        yaw += 360.0
    elif yaw > 180.0:
        yaw -= 360.0
    yd = r(yaw * 10)
    return f"n{r(x * 100)}_e{r(y * 100)}_d{r(z * 100)}_y{1800 if yd == -1800 else yd}"


runs, count, first_t, last_t = [], 0, None, None
t_end = time.time() + limit
next_hb = 0.0
while not stop.is_set() and time.time() < t_end:
    now = time.time()
    if now >= next_hb:
        conn.mav.heartbeat_send(M.MAV_TYPE_GCS, M.MAV_AUTOPILOT_INVALID, 0, 0, M.MAV_STATE_ACTIVE)
        next_hb = now + 0.5
    m = conn.recv_match(type="POSITION_TARGET_LOCAL_NED", blocking=True, timeout=0.1)
    if m is None or m.get_srcSystem() != 1:
        continue
    count += 1
    first_t = first_t if first_t is not None else now
    last_t = now
    if not math.isfinite(m.x):
        continue
    yaw = math.degrees(m.yaw) if math.isfinite(m.yaw) else 0.0
    fp = fingerprint(m.x, m.y, m.z, yaw)
    if runs and runs[-1]["fp"] == fp:
        runs[-1]["last_ms"] = m.time_boot_ms
        runs[-1]["n"] += 1
    else:
        runs.append({"fp": fp, "x": m.x, "y": m.y, "z": m.z, "yaw_deg": yaw,
                     "first_ms": m.time_boot_ms, "last_ms": m.time_boot_ms, "n": 1})
seconds = (last_t - first_t) if count > 1 else 0.0
print(json.dumps({"count": count, "seconds": seconds, "runs": runs}), flush=True)
