#!/usr/bin/env bash
# The cross-domain transfer panel at the paper's size: 12 cases × 6 variants × 10 repetitions
# = 720 executions, each in a fresh temporary bare Git repository (needs `git` >= 2.38 for
# `merge-tree --write-tree`). CI runs the same test with 2 repetitions.
#
#   scripts/git_transfer.sh [REPETITIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
HALO_GIT_REPS="${1:-10}" cargo test --release -p halo-eval --test eval git_transfer:: -- --nocapture
