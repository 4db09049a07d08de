#!/usr/bin/env python3
"""An autopilot stand-in written with pymavlink, to decode what px4-bridge sends.

It heartbeats as PX4 (system 1, component 1), answers TIMESYNC and acknowledges commands, and
records every message the bridge sends. After DURATION seconds it prints one JSON line with what
it saw. Usage: fake_autopilot.py PORT DURATION
"""
import json
import os
import sys
import time

os.environ["MAVLINK20"] = "1"
os.environ.setdefault("MAVLINK_DIALECT", "common")
from pymavlink import mavutil  # noqa: E402

port, duration = int(sys.argv[1]), float(sys.argv[2])
conn = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=1, source_component=1, dialect="common")
mav = conn.mav
print("READY", flush=True)

out = {"heartbeats": [], "setpoints": [], "commands": [], "timesync_requests": 0, "timesync_targets": [],
       "bad": 0}
t0 = time.time()
next_hb = 0.0
heard = False
while time.time() - t0 < duration:
    now = time.time()
    if heard and now >= next_hb:
        # PX4, disarmed, AUTO.LOITER: custom_mode = sub 3 << 24 | main 4 << 16.
        mav.heartbeat_send(mavutil.mavlink.MAV_TYPE_QUADROTOR, mavutil.mavlink.MAV_AUTOPILOT_PX4,
                           mavutil.mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, (3 << 24) | (4 << 16),
                           mavutil.mavlink.MAV_STATE_STANDBY)
        next_hb = now + 1.0
    msg = conn.recv_match(blocking=True, timeout=0.02)
    if msg is None:
        continue
    t = msg.get_type()
    if t == "BAD_DATA":
        out["bad"] += 1
        continue
    if not heard:
        heard = True
        next_hb = 0.0
    src = (msg.get_srcSystem(), msg.get_srcComponent())
    if t == "HEARTBEAT":
        out["heartbeats"].append({"t": now - t0, "src": src, "type": msg.type, "autopilot": msg.autopilot,
                                  "mavlink_version": msg.mavlink_version})
    elif t == "SET_POSITION_TARGET_LOCAL_NED":
        out["setpoints"].append({"t": now - t0, "src": src, "type_mask": msg.type_mask, "frame": msg.coordinate_frame,
                                 "target": [msg.target_system, msg.target_component],
                                 "x": msg.x, "y": msg.y, "z": msg.z, "yaw": msg.yaw})
    elif t == "COMMAND_LONG":
        out["commands"].append({"command": msg.command, "params": [msg.param1, msg.param2, msg.param3],
                                "confirmation": msg.confirmation,
                                "target": [msg.target_system, msg.target_component]})
        mav.command_ack_send(msg.command, mavutil.mavlink.MAV_RESULT_ACCEPTED, 0, 0, src[0], src[1])
    elif t == "TIMESYNC":
        if msg.tc1 == 0:
            out["timesync_requests"] += 1
            # pymavlink's common.xml may predate TIMESYNC's target extension fields.
            out["timesync_targets"].append([getattr(msg, "target_system", None), getattr(msg, "target_component", None)])
            mav.timesync_send(time.monotonic_ns(), msg.ts1)

sps = out["setpoints"]
summary = {
    "heartbeats": len(out["heartbeats"]),
    "heartbeat_types": sorted({h["type"] for h in out["heartbeats"]}),
    "heartbeat_autopilots": sorted({h["autopilot"] for h in out["heartbeats"]}),
    "heartbeat_sources": sorted({tuple(h["src"]) for h in out["heartbeats"]}),
    "heartbeat_span_s": (out["heartbeats"][-1]["t"] - out["heartbeats"][0]["t"]) if len(out["heartbeats"]) > 1 else 0,
    "setpoints": len(sps),
    "setpoint_rate_hz": (len(sps) - 1) / (sps[-1]["t"] - sps[0]["t"]) if len(sps) > 2 else 0,
    "type_masks": sorted({s["type_mask"] for s in sps}),
    "frames": sorted({s["frame"] for s in sps}),
    "targets": sorted({tuple(s["target"]) for s in sps}),
    "last_setpoint": sps[-1] if sps else None,
    "interval_commands": [c for c in out["commands"] if c["command"] == 511],
    "other_commands": [c for c in out["commands"] if c["command"] != 511],
    "timesync_requests": out["timesync_requests"],
    "timesync_targets": sorted({tuple(x) for x in out["timesync_targets"]}),
    "bad_data": out["bad"],
}
print(json.dumps(summary), flush=True)
