#!/usr/bin/env bash
# End-to-end cost of `halo-gateway run` (a benchmark, never a test):
#   latency: bundles POSTed over loopback HTTP to the first setpoint carrying them at the
#            simulated PX4's socket, p50/p90/p99 over N bundles (default 10000);
#   memory:  resident memory and CPU of the `run` process while it streams 20 Hz setpoints and
#            takes 50 Hz telemetry, sampled every second for SECONDS (default 600).
#   latency-neighbour: the latency with one and then two CPU-bound neighbour processes on the
#            host, each at the default scheduler and then with SCHED_FIFO (`[realtime] priority = 50`; needs root
#            or `ulimit -r 50`).
# Usage: scripts/bench_e2e.sh [latency N] [latency-neighbour N] [memory SECONDS]
#   (latency and memory, with defaults, when no args)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p halo-eval --example bench_e2e && cargo build --release -p halo-gateway --bin halo-gateway
BENCH=target/release/examples/bench_e2e
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
if [ $# -eq 0 ]; then
  set -- latency 10000 memory 600
fi
while [ $# -gt 0 ]; do
  case "$1" in
    latency) "$BENCH" latency "${2:-10000}"; shift 2 || shift ;;
    latency-neighbour)
      for k in 1 2; do
        "$BENCH" latency "${2:-10000}" --neighbours "$k"
        "$BENCH" latency "${2:-10000}" --neighbours "$k" --realtime 50
      done
      shift 2 || shift ;;
    memory) "$BENCH" memory "${2:-600}" target/release/halo-gateway; shift 2 || shift ;;
    *) echo "usage: $0 [latency N] [latency-neighbour N] [memory SECONDS]" >&2; exit 3 ;;
  esac
done
