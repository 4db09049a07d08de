#!/usr/bin/env bash
# The mission-contract scale study (docs/contracts.md#scale-study): every cell's decision,
# median / p95 / p99 latency and retained-state bytes. Writes target/contract-scale.json.
#   scripts/contract_scale.sh            # full run (5 blocks x (10 + 40) calls per cell)
#   scripts/contract_scale.sh --quick    # smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p halo-core --bench contract_scale -- "$@"
