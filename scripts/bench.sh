#!/usr/bin/env bash
# Runs the criterion benchmarks of the protocol core and of the whole calls a user makes
# (user_path). Pass a filter to run a subset, e.g.
#   scripts/bench.sh 'admission/V32_E200'
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p halo-core --bench core --bench user_path -- "$@"
