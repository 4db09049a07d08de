#!/usr/bin/env bash
# The deep run of the bounded model checks: every interleaving of the environment's moves up
# to a depth, for the core (halo-core/tests/core/model_check.rs; each seed's response shapes)
# and for the supervisor (gateway/tests/flight/supervisor_model.rs; three starts). Depth D
# counts the start as the first state: traces of D - 1 moves. CI's slice runs both at depth 5;
# this runs them at 6 by default. Prints one `model-check: N states, depth D, P properties,
# V violations` line per model and seed, with any counterexample in words.
#
#   scripts/model_check.sh                      # both at depth 6 (about 5 minutes here)
#   scripts/model_check.sh 7 6 0x48414C50       # core depth 7 for one seed (over 10 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
core_depth="${1:-6}"
supervisor_depth="${2:-6}"
seeds="${3:-0x48414C50,0x48414C51,0x48414C53,0x48414D58}"
for d in "$core_depth" "$supervisor_depth"; do
  case "$d" in
    ''|*[!0-9]*|0|1) echo "error: a depth is a whole number of states, 2 or more, not \`$d\`" >&2; exit 2 ;;
  esac
done
echo "==> the core's model check: depth $core_depth, seeds $seeds"
HALO_MODEL_DEPTH="$core_depth" HALO_MODEL_SEEDS="$seeds" \
  cargo test --release --locked -p halo-core --test core -- --nocapture \
  model_check::every_interleaving_up_to_the_depth_keeps_the_promises
echo "==> the supervisor's model check: depth $supervisor_depth"
HALO_MODEL_DEPTH="$supervisor_depth" \
  cargo test --release --locked -p halo-gateway --test flight -- --nocapture \
  supervisor_model::every_interleaving_up_to_the_depth_keeps_the_supervisors_promises
