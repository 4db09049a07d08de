#!/usr/bin/env bash
# `halo-gateway run` under load (a benchmark, never a test): four agent clients post
# 32-component bundles as fast as the gateway accepts them for SECONDS (default 60), providers
# publish at 50 Hz, one target streams; under the default limits and under
# done_retention_ms = 100. Prints accepted / refused / lost bundles, their latency, resident
# memory over time, input-queue depth, setpoint gaps at the vehicle and receipt volume.
# Usage: scripts/bench_load.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
cargo build --release -p halo-eval --example bench_load && cargo build --release -p halo-gateway --bin halo-gateway
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
target/release/examples/bench_load "$SECONDS_EACH" target/release/halo-gateway
target/release/examples/bench_load "$SECONDS_EACH" target/release/halo-gateway 100
