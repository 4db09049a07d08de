#!/usr/bin/env bash
# Runs the full seeded-schedule suite (10,000 schedules, or $1) in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
HALO_SCHEDULES="${1:-10000}" cargo test --release -p halo-core --test core schedules:: -- --nocapture
