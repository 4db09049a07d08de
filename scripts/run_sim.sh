#!/usr/bin/env bash
# `halo-gateway run` on the embedded simulated vehicle, from any directory: builds the
# evaluation binary (release) when needed and runs `halo-eval run` with the options given,
# which are `halo-gateway run`'s (`--listen`, `--state-dir`, `--config`, `--agent stdio`,
# `--vehicle-kind crazyflie`, ...) plus `--sim-setpoint-log FILE`. Relative paths are the
# caller's. The flight binary (`halo-gateway`) links no simulator: this is the one way in.
#
#   scripts/run_sim.sh [run options...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p halo-eval --bin halo-eval >&2
exec "$target/release/halo-eval" run "$@"
