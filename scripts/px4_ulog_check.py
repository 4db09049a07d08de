#!/usr/bin/env python3
"""PX4's own log as the evidence for the PX4 panels against a real PX4: reads the ULog files PX4
wrote during `halo-eval px4-panels --px4 URL` and the targets the gateway dispatched (the
bridge's setpoint logs under the runner's output directory), and checks, from PX4's
`trajectory_setpoint` topic alone, that every dispatched target PX4 flew stopped for good once
something else replaced it: no sample of a target after a sample of a later setpoint (the
deny-hold's hold, the next action). An independent peer: pyulog reads the log, nothing of the
gateway's code is used, and fingerprints follow the documented rule (centimetres, tenths of a
degree).

    pip install pyulog
    scripts/px4_ulog_check.py PX4_LOG_DIR_OR_FILES... --runs target/halo-px4-panels

PX4 logs `trajectory_setpoint` at about 5 Hz by default (SDLOG_PROFILE), so a target must be
held for more than 200 ms to be seen there at all: the runner holds each one until the vehicle
is within 0.3 m of it (seconds), and the deny-hold replaces it after that. Prints
`ulog-targets: N/M matched` (M: dispatched targets seen in the logs) and exits 1 when one is
not. `--self-test` (no pyulog needed; scripts/test.sh runs it) shows the check catches a
planted target flown again and passes a clean sequence.
"""
import argparse
import glob
import json
import math
import os
import sys


def fingerprint(x, y, z, yaw_deg):
    r = lambda v: int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)
    yaw = math.fmod(yaw_deg, 360.0)
    if yaw <= -180.0:
        yaw += 360.0
    elif yaw > 180.0:
        yaw -= 360.0
    yd = r(yaw * 10)
    return f"n{r(x * 100)}_e{r(y * 100)}_d{r(z * 100)}_y{1800 if yd == -1800 else yd}"


def flown_again(order, dispatched):
    """The dispatched targets that appear in `order` (fingerprints in log order, runs of the
    same setpoint collapsed) more than once: flown again after something replaced them."""
    return {fp for fp in set(order) & dispatched if order.count(fp) > 1}


def self_test():
    a, b, c = "n200_e100_d-580_y0", "n300_e150_d-580_y0", "n1_e2_d-580_y0"
    cases = [
        ([a, c, b, c], {a, b}, set()),      # each target replaced by a hold, never back
        ([a, c, a, b], {a, b}, {a}),        # planted: a flown again after its hold
    ]
    matched = sum(flown_again(order, d) == want for order, d, want in cases)
    print(f"ulog-check-self-test: {matched}/{len(cases)} matched")
    return 0 if matched == len(cases) else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    from pyulog import ULog  # only for real logs: pip install pyulog
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="PX4 .ulg files, or directories holding them")
    ap.add_argument("--runs", default="target/halo-px4-panels",
                    help="the px4-panels output directory (default: %(default)s)")
    args = ap.parse_args()
    dispatched = set()
    for f in glob.glob(os.path.join(args.runs, "cold-*", "bridge-setpoints.jsonl")):
        with open(f) as fh:
            for line in fh:
                dispatched.add(json.loads(line)["fingerprint"])
    files = []
    for p in args.logs:
        files += sorted(glob.glob(os.path.join(p, "**", "*.ulg"), recursive=True)) if os.path.isdir(p) else [p]
    seen, bad = {}, {}
    samples = 0
    for f in files:
        data = {d.name: d.data for d in ULog(f, ["trajectory_setpoint"]).data_list}
        ts = data.get("trajectory_setpoint")
        if ts is None:
            continue
        order = []
        for i in range(len(ts["timestamp"])):
            x, y, z = ts["position[0]"][i], ts["position[1]"][i], ts["position[2]"][i]
            if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
                continue
            yaw = ts["yaw"][i]
            fp = fingerprint(x, y, z, math.degrees(yaw) if math.isfinite(yaw) else 0.0)
            samples += 1
            if not order or order[-1] != fp:
                order.append(fp)
        for fp in set(order) & dispatched:
            seen[fp] = seen.get(fp, 0) + 1
        for fp in flown_again(order, dispatched):
            bad[fp] = os.path.basename(f)
    matched = len(seen) - len(bad)
    print(f"  {len(files)} logs, {samples} trajectory_setpoint samples with a position, "
          f"{len(dispatched)} dispatched targets, {len(seen)} of them in PX4's logs")
    for fp, f in sorted(bad.items()):
        print(f"  {fp}: flown again after something replaced it ({f})")
    print(f"ulog-targets: {matched}/{len(seen)} matched")
    return 0 if matched == len(seen) and seen else 1


if __name__ == "__main__":
    sys.exit(main())
