#!/usr/bin/env bash
# Admission from bytes against its floor on this CPU, in the same run: ROUNDS (default 3)
# alternating rounds of 3,000 single calls of `user/admission_from_bytes` (the `user_path`
# benchmark) and of the floor (floor/: a SIMD JSON parse of the same bytes with simd-json, and
# SHA-256 over them; its own workspace, so simd-json is never a dependency of the product).
# Prints the lowest 10th percentile and median of each, and admission over the floor.
#   scripts/bench_floor.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "==> building the user_path benchmark and the floor (target/bench-floor)" >&2
bench=$(scripts/user_path_bin.sh)
CARGO_TARGET_DIR="$PWD/target/bench-floor" cargo build --release --manifest-path floor/Cargo.toml >&2
floor="$PWD/target/bench-floor/release/halo-admission-floor"
for r in $(seq 1 "$rounds"); do
    echo "==> round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    HALO_BENCH_CALLS=3000 HALO_BENCH_ONLY=admission_from_bytes \
        HALO_BENCH_WRITE_RESPONSE="$tmp/response.json" "$bench" --bench 2>/dev/null |
        sed -n 's/^calls //p' >>"$tmp/results"
    "$floor" "$tmp/response.json" 3000 | sed -n 's/^calls //p' >>"$tmp/results"
done
echo "the response: $(wc -c <"$tmp/response.json") bytes; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
python3 - "$tmp/results" "$rounds" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    name, p10, med, _unit = line.split()
    o = best.get(name, (float("inf"), float("inf")))
    best[name] = (min(o[0], float(p10)), min(o[1], float(med)))
print(f"µs per call, lowest over {sys.argv[2]} alternating rounds of 3,000 calls")
print(f"{'benchmark':34} {'p10':>9} {'median':>9}")
for name, (p10, med) in best.items():
    print(f"{name:34} {p10:9.3f} {med:9.3f}")
a, f = best.get("user/admission_from_bytes"), best.get("floor/parse_and_hash")
if a and f:
    print(f"admission over the parse-and-hash floor: {a[1] / f[1]:.2f}x (medians)")
PY
