#!/usr/bin/env python3
"""A pilot at a ground station, written with pymavlink: switches the simulated PX4's mode the way
QGroundControl does (MAV_CMD_DO_SET_MODE from system 255) and waits until the vehicle's own
heartbeat shows each mode. An independent MAVLink peer: it shares no code with the gateway.

Usage: pilot.py GCS_PORT MODE [MODE ...]   (MODE: POSCTL, AUTO.LOITER, AUTO.RTL or AUTO.LAND)
       pilot.py GCS_PORT watch SECONDS      (only watch what the vehicle holds as its target)
       pilot.py GCS_PORT origin LAT LON ALT (move the EKF origin as a ground station does:
                                             SET_GPS_GLOBAL_ORIGIN, then wait for the vehicle's
                                             GPS_GLOBAL_ORIGIN to announce it)
       pilot.py GCS_PORT texts              (a ground station's message list: prints READY,
                                             then collects every STATUSTEXT until stdin says
                                             `stop`; `mode NAME` on stdin switches the mode
                                             meanwhile, `forge` sends a land command in the
                                             gateway's name (system 1, component 191). Prints {"texts": [{"sys", "comp",
                                             "severity", "text", "t_ms"}, ...], "switched": [...]})
Prints one JSON line: {"switched": [{"mode", "confirmed", "after_ms"}, ...]}; exit 0 when every
switch was confirmed. Watching prints {"targets": [...]}: the position targets the vehicle
reported in POSITION_TARGET_LOCAL_NED, as fingerprints (centimetres and tenths of a degree,
the documented rule), each once, in the order first seen.
"""
import math
import json
import os
import sys
import time

os.environ["MAVLINK20"] = "1"
os.environ.setdefault("MAVLINK_DIALECT", "common")
from pymavlink import mavutil  # noqa: E402

MODES = {"POSCTL": (3, 0), "AUTO.LOITER": (4, 3), "AUTO.RTL": (4, 5), "AUTO.LAND": (4, 6)}
port = int(sys.argv[1])
conn = mavutil.mavlink_connection(
    f"udpout:127.0.0.1:{port}", source_system=255, source_component=190, dialect="common"
)
M = mavutil.mavlink


def heartbeat():
    conn.mav.heartbeat_send(M.MAV_TYPE_GCS, M.MAV_AUTOPILOT_INVALID, 0, 0, M.MAV_STATE_ACTIVE)


def vehicle_heartbeat(timeout):
    m = conn.recv_match(type="HEARTBEAT", blocking=True, timeout=timeout)
    if m is not None and m.get_srcSystem() == 1 and m.get_srcComponent() == 1:
        return m
    return None


def mode_of(hb):
    return ((hb.custom_mode >> 16) & 0xFF, (hb.custom_mode >> 24) & 0xFF)


# Make ourselves known (the vehicle streams to a ground station once it has heard from it).
deadline = time.time() + 5
seen = None
while seen is None and time.time() < deadline:
    heartbeat()
    seen = vehicle_heartbeat(0.2)
if seen is None:
    print(json.dumps({"error": "no heartbeat from the vehicle on the ground-station port"}))
    sys.exit(1)

def fingerprint(x, y, z, yaw_deg):
    r = lambda v: int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)  # half away from zero
    yaw = math.fmod(yaw_deg, 360.0)
    if yaw <= -180.0:
        yaw += 360.0
    elif yaw > 180.0:
        yaw -= 360.0
    yd = r(yaw * 10)
    return f"n{r(x * 100)}_e{r(y * 100)}_d{r(z * 100)}_y{1800 if yd == -1800 else yd}"


if sys.argv[2] == "watch":
    seen, end = [], time.time() + float(sys.argv[3])
    while time.time() < end:
        heartbeat()
        m = conn.recv_match(type="POSITION_TARGET_LOCAL_NED", blocking=True, timeout=0.2)
        if m is None or m.get_srcSystem() != 1 or not math.isfinite(m.x):
            continue
        fp = fingerprint(m.x, m.y, m.z, math.degrees(m.yaw) if math.isfinite(m.yaw) else 0.0)
        if fp not in seen:
            seen.append(fp)
    print(json.dumps({"targets": seen}), flush=True)
    sys.exit(0)

if sys.argv[2] == "origin":
    lat, lon, alt = (float(x) for x in sys.argv[3:6])
    want = (round(lat * 1e7), round(lon * 1e7), round(alt * 1000))
    t0, ok = time.time(), False
    while not ok and time.time() < t0 + 5:
        conn.mav.set_gps_global_origin_send(1, want[0], want[1], want[2])
        end = time.time() + 0.5
        while time.time() < end:
            m = conn.recv_match(type="GPS_GLOBAL_ORIGIN", blocking=True, timeout=0.1)
            if m is not None and (m.latitude, m.longitude, m.altitude) == want:
                ok = True
                break
    print(json.dumps({"origin": {"confirmed": ok, "after_ms": round((time.time() - t0) * 1000)}}), flush=True)
    sys.exit(0 if ok else 1)

def switch(name):
    main, sub = MODES[name]
    t0 = time.time()
    conn.mav.command_long_send(1, 1, M.MAV_CMD_DO_SET_MODE, 0, 1, main, sub, 0, 0, 0, 0)
    return {"mode": name, "main": main, "sub": sub, "t0": t0}


if sys.argv[2] == "texts":
    import select

    texts, switched, pending = [], [], None
    t_start, last_hb = time.time(), 0.0
    print("READY", flush=True)
    done = False
    while not done:
        if time.time() - last_hb > 0.5:
            heartbeat()
            last_hb = time.time()
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready:
            line = sys.stdin.readline().split()
            if not line or line[0] == "stop":
                done = True
            elif line[0] == "mode":
                pending = switch(line[1])
            elif line[0] == "forge":
                # A frame that claims to be the gateway's (system 1, component 191): a land
                # command a relay must never pass on in the gateway's name.
                own = (conn.mav.srcSystem, conn.mav.srcComponent)
                conn.mav.srcSystem, conn.mav.srcComponent = 1, 191
                conn.mav.command_long_send(1, 1, M.MAV_CMD_NAV_LAND, 0, 0, 0, 0, 0, 0, 0, 0)
                conn.mav.srcSystem, conn.mav.srcComponent = own
        m = conn.recv_match(blocking=True, timeout=0.02)
        if m is None:
            continue
        if m.get_type() == "STATUSTEXT":
            texts.append({"sys": m.get_srcSystem(), "comp": m.get_srcComponent(),
                          "severity": m.severity, "text": m.text,
                          "t_ms": round((time.time() - t_start) * 1000)})
        elif (m.get_type() == "HEARTBEAT" and pending is not None and m.get_srcComponent() == 1
              and mode_of(m) == (pending["main"], pending["sub"])):
            switched.append({"mode": pending["mode"], "confirmed": True,
                             "after_ms": round((time.time() - pending["t0"]) * 1000)})
            pending = None
    print(json.dumps({"texts": texts, "switched": switched}), flush=True)
    sys.exit(0)

out = {"switched": []}
for name in sys.argv[2:]:
    main, sub = MODES[name]
    t0 = time.time()
    conn.mav.command_long_send(1, 1, M.MAV_CMD_DO_SET_MODE, 0, 1, main, sub, 0, 0, 0, 0)
    ok = False
    while time.time() < t0 + 3:
        hb = vehicle_heartbeat(0.1)
        if hb is not None and mode_of(hb) == (main, sub):
            ok = True
            break
    out["switched"].append(
        {"mode": name, "confirmed": ok, "after_ms": round((time.time() - t0) * 1000)}
    )
    if not ok:
        break
print(json.dumps(out), flush=True)
sys.exit(0 if out["switched"] and all(s["confirmed"] for s in out["switched"]) else 1)
