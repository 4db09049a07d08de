#!/usr/bin/env bash
# The seeded-defect harness: builds the core with its private `__seeded-defects` feature
# (single defects in halo-core/src/defect.rs; never in a product build) and runs the schedules against each defect and
# one pair, printing how many schedules each fails, and the bounded model check against the same
# defects (model-check-defects). HALO_DEFECT_SCHEDULES sets the number of
# schedules per defect (default 1,000; the counts are pinned at that default, and CI runs it so
# from scripts/test.sh).
#
#   scripts/seeded_defects.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p halo-core --features __seeded-defects \
    --test core -- --nocapture schedules::seeded_defects admission_oracle_catches \
    model_check::the_model_catches_the_seeded_defects
