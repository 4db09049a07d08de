#!/usr/bin/env bash
# The PX4 panels through the running service (`deny-hold`, `px4-latency`) at their size: 10
# cold starts (a fresh simulated PX4 over UDP and a fresh service each) of 4 route actions
# back to back. About 40 s per cold start on two cores. CI runs 2 cold starts of 3 actions
# (halo-eval/tests/eval/px4_panels.rs). The results are in docs/conformance.md.
#
#   scripts/px4_panels.sh [COLD_STARTS] [ACTIONS_PER_START]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
cargo run --release --quiet -p halo-eval -- px4-panels --cold-starts "${1:-10}" --per-start "${2:-4}"
echo "wall time: $(( $(date +%s) - start )) s"
