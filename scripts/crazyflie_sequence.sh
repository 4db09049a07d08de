#!/usr/bin/env bash
# The paper's Crazyflie sequence at its size: 10 repetitions, each from a cold start (a new
# `halo-eval run` process on the embedded simulated Crazyflie). About 8 s per repetition.
# CI runs the same test with 2 repetitions.
#
#   scripts/crazyflie_sequence.sh [REPETITIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
CF_SEQUENCE_REPS="${1:-10}" cargo test --release -p halo-eval --test eval crazyflie_sequence:: -- --nocapture
