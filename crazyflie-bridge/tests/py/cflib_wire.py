"""Encodes the bridge's commands with bitcraze's own Python library (cflib), independently of
the Rust side: reads JSON lines of commands on stdin (the bridge's `Out` as JSON), calls the
matching cflib Commander / HighLevelCommander / Supervisor method on a fake Crazyflie that
captures packets, and prints one JSON list of hex packets (header byte first) per command.

cflib is GPLv3: a test-time tool only, installed from PyPI, never vendored.
"""
import json
import sys

from cflib.crazyflie.commander import Commander
from cflib.crazyflie.high_level_commander import HighLevelCommander
from cflib.crazyflie.supervisor import Supervisor


class FakePlatform:
    def get_protocol_version(self):
        return 12  # what the simulated Crazyflie reports; supervisor port, go_to_2


class FakeCrazyflie:
    def __init__(self):
        self.platform = FakePlatform()
        self.sent = []

    def send_packet(self, pk):
        self.sent.append(bytes([pk.header]) + bytes(pk.data))

    def add_port_callback(self, port, cb):
        pass


def main():
    cf = FakeCrazyflie()
    commander = Commander(cf)
    hlc = HighLevelCommander(cf)
    supervisor = Supervisor(cf)
    out = []
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        c = json.loads(line)
        kind = c["command"]
        cf.sent.clear()
        if kind == "position":
            commander.send_position_setpoint(c["x_m"], c["y_m"], c["z_m"], c["yaw_deg"])
        elif kind == "notify_stop":
            commander.send_notify_setpoint_stop(c["remain_valid_ms"])
        elif kind == "go_to":
            hlc.go_to(c["x_m"], c["y_m"], c["z_m"], c["yaw_rad"], c["duration_s"],
                      relative=False, linear=False)
        elif kind == "land":
            hlc.land(c["height_m"], c["duration_s"], yaw=None)
        elif kind == "takeoff":
            hlc.takeoff(c["height_m"], c["duration_s"], yaw=None)
        elif kind == "arm":
            supervisor.send_arming_request(c["arm"])
        elif kind == "estop_watchdog":
            supervisor.send_emergency_stop_watchdog()
        else:
            raise SystemExit(f"unknown command {kind}")
        out.append([p.hex() for p in cf.sent])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
