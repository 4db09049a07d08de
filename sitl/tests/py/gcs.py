#!/usr/bin/env python3
"""A ground station written with pymavlink, commanding the simulated PX4 the way one commands a
real PX4 SITL. Prints one JSON line with what it observed. Usage: gcs.py PORT
"""
import json
import math
import os
import sys
import time

os.environ["MAVLINK20"] = "1"
os.environ.setdefault("MAVLINK_DIALECT", "common")
from pymavlink import mavutil  # noqa: E402

port = int(sys.argv[1])
conn = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=255, source_component=190, dialect="common")
mav = conn.mav
M = mavutil.mavlink
print("READY", flush=True)
res = {}


def wait(pred, timeout, types=None):
    end = time.time() + timeout
    while time.time() < end:
        m = conn.recv_match(type=types, blocking=True, timeout=0.05)
        if m is not None and pred(m):
            return m
    return None


def ack_for(cmd, timeout=2.0):
    m = wait(lambda m: m.command == cmd, timeout, "COMMAND_ACK")
    return None if m is None else m.result


def mode(hb):
    return ((hb.custom_mode >> 16) & 0xFF, (hb.custom_mode >> 24) & 0xFF)


def drain():
    while conn.recv_match(blocking=False) is not None:
        pass


def rate_from(stamps):
    # Rate from the autopilot's own time_boot_ms, so socket buffering cannot distort it.
    if len(stamps) < 3 or stamps[-1] == stamps[0]:
        return 0.0
    return (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1000.0)


def count(t, secs):
    drain()
    stamps, end = [], time.time() + secs
    while time.time() < end:
        m = conn.recv_match(type=t, blocking=True, timeout=0.05)
        if m is not None:
            stamps.append(m.time_boot_ms)
    return rate_from(stamps)


hb = wait(lambda m: True, 10, "HEARTBEAT")
res["heartbeat"] = {"system": hb.get_srcSystem(), "component": hb.get_srcComponent(), "autopilot": hb.autopilot,
                    "type": hb.type, "mode": mode(hb), "armed": bool(hb.base_mode & M.MAV_MODE_FLAG_SAFETY_ARMED)}
time.sleep(2.2)  # the simulator's estimator needs 2 s after boot
res["lpn_rate_default"] = count("LOCAL_POSITION_NED", 2.0)
ptl = wait(lambda m: True, 2, "POSITION_TARGET_LOCAL_NED")
res["target_before_offboard"] = {"type_mask": ptl.type_mask, "x_nan": math.isnan(ptl.x)}

# OFFBOARD while disarmed, with no stream: accepted and shown in the heartbeat.
mav.command_long_send(1, 1, M.MAV_CMD_DO_SET_MODE, 0, 1, 6, 0, 0, 0, 0, 0)
res["offboard_disarmed_ack"] = ack_for(M.MAV_CMD_DO_SET_MODE)
hb = wait(lambda m: mode(m)[0] == 6, 3, "HEARTBEAT")
res["offboard_disarmed_heartbeat"] = hb is not None

# Arming in OFFBOARD without a stream is refused (PX4 gives no STATUSTEXT for it).
mav.command_long_send(1, 1, M.MAV_CMD_COMPONENT_ARM_DISARM, 0, 1, 0, 0, 0, 0, 0, 0)
res["arm_without_stream_ack"], res["arm_denied_text"] = None, None
end = time.time() + 1.5
while time.time() < end:
    m = conn.recv_match(type=["COMMAND_ACK", "STATUSTEXT"], blocking=True, timeout=0.05)
    if m is None:
        continue
    if m.get_type() == "STATUSTEXT":
        res["arm_denied_text"] = m.text
    elif m.command == M.MAV_CMD_COMPONENT_ARM_DISARM:
        res["arm_without_stream_ack"] = m.result

# Stream setpoints for 1.5 s at 20 Hz, then arm: accepted; the vehicle climbs to 3 m.
mask = 0x09F8
def sp(z):
    mav.set_position_target_local_ned_send(0, 1, 1, M.MAV_FRAME_LOCAL_NED, mask, 0, 0, z, 0, 0, 0, 0, 0, 0, 0.5, 0)
end = time.time() + 1.5
while time.time() < end:
    sp(-3.0)
    time.sleep(0.05)
mav.command_long_send(1, 1, M.MAV_CMD_COMPONENT_ARM_DISARM, 0, 1, 0, 0, 0, 0, 0, 0)
res["arm_with_stream_ack"] = None
end = time.time() + 6
acks, zs, echo = [], [], None
while time.time() < end:
    sp(-3.0)
    deadline = time.time() + 0.05
    while time.time() < deadline:
        m = conn.recv_match(blocking=True, timeout=0.01)
        if m is None:
            continue
        t = m.get_type()
        if t == "COMMAND_ACK" and m.command == M.MAV_CMD_COMPONENT_ARM_DISARM and res["arm_with_stream_ack"] is None:
            res["arm_with_stream_ack"] = m.result
        elif t == "LOCAL_POSITION_NED":
            zs.append(m.z)
        elif t == "POSITION_TARGET_LOCAL_NED":
            echo = {"type_mask": m.type_mask, "frame": m.coordinate_frame, "x": m.x, "y": m.y, "z": m.z, "yaw": m.yaw}
res["altitude_after_6s"] = -zs[-1] if zs else None
res["target_echo_in_offboard"] = echo

# Ask for 50 Hz LOCAL_POSITION_NED (keep streaming meanwhile).
mav.command_long_send(1, 1, M.MAV_CMD_SET_MESSAGE_INTERVAL, 0, 32, 20000, 0, 0, 0, 0, 0)
res["interval_ack"] = ack_for(M.MAV_CMD_SET_MESSAGE_INTERVAL)
drain()
stamps, end = [], time.time() + 2.0
while time.time() < end:
    sp(-3.0)
    deadline = time.time() + 0.05
    while time.time() < deadline:
        m = conn.recv_match(type="LOCAL_POSITION_NED", blocking=True, timeout=0.01)
        if m is not None:
            stamps.append(m.time_boot_ms)
res["lpn_rate_requested_50"] = rate_from(stamps)

# A command to component 0 is ACKed twice.
mav.command_long_send(1, 0, M.MAV_CMD_SET_MESSAGE_INTERVAL, 0, 32, 20000, 0, 0, 0, 0, 0)
acks, end = 0, time.time() + 1.0
while time.time() < end:
    sp(-3.0)
    m = conn.recv_match(type="COMMAND_ACK", blocking=True, timeout=0.05)
    if m is not None and m.command == M.MAV_CMD_SET_MESSAGE_INTERVAL:
        acks += 1
res["broadcast_acks"] = acks

# Stop the stream: PX4's offboard-loss failsafe shows POSCTL (main 3).
stopped = time.time()
hb = wait(lambda m: mode(m)[0] == 3, 5, "HEARTBEAT")
res["failsafe_after_s"] = None if hb is None else time.time() - stopped
# It descends and disarms by itself.
hb = wait(lambda m: not (m.base_mode & M.MAV_MODE_FLAG_SAFETY_ARMED), 15, "HEARTBEAT")
res["disarmed_after_failsafe"] = hb is not None
print(json.dumps(res), flush=True)
