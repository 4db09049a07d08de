#!/usr/bin/env bash
# The PX4 panels through the running service, at their size: per cold start a fresh simulated
# PX4 over UDP and a fresh `halo-gateway run`, an agent and providers over HTTP, the vehicle's
# own record of the setpoints it took as the evidence. The results are in docs/conformance.md.
#
#   deny-hold, px4-latency   COLD_STARTS x ACTIONS route actions, each lost while it streams
#                            (about 40 s per cold start of 4 on two cores)
#   px4-profiles             COLD_STARTS x 41 support-profile conditions (about 97 s each)
#   recovery-routes          COLD_STARTS x 48 routes and 6 controls (about 80 s each)
#   px4-mechanisms           COLD_STARTS x 12 conditions x the paper's 4 variants, a fresh
#                            simulator and service per variant (about 220 s per cold start;
#                            MECHANISM_ARGS=--all-variants runs all eight)
#
# CI runs a slice of each (halo-eval/tests/eval/px4_panels.rs). Add `--px4 URL` through
# PANEL_ARGS to fly a running PX4 instead (docs/px4.md).
#
#   scripts/px4_panels.sh [COLD_STARTS] [ACTIONS_PER_START]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10}"
read -r -a extra <<< "${PANEL_ARGS:-}"
cargo build --release --quiet -p halo-eval
bin=target/release/halo-eval
rc=0
panel() {
  local start=$(date +%s)
  "$bin" "$@" "${extra[@]}" || rc=$?
  echo "$1 wall time: $(( $(date +%s) - start )) s"
}
panel px4-panels --cold-starts "$n" --per-start "${2:-4}"
panel px4-profiles --cold-starts "$n"
panel recovery-routes --cold-starts "$n"
read -r -a mech <<< "${MECHANISM_ARGS:-}"
panel px4-mechanisms --cold-starts "$n" "${mech[@]}"
exit "$rc"
