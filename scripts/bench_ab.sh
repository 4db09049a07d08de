#!/usr/bin/env bash
# Before and after on one machine: builds the `user_path` benchmark at BASE (a git revision,
# checked out in a temporary worktree, with this tree's benchmark file copied in so both sides
# run the same measuring code) and at the working tree, then runs the two in turn ROUNDS times
# (default 9) in per-call mode (`HALO_BENCH_CALLS`, 3,000 single calls of each benchmark), and
# prints for each benchmark the lowest 10th percentile and the lowest median over the rounds.
#
# Why not criterion's numbers: on a shared VM a burst of load moves a whole criterion sample,
# and one run's median with it by 20 % or more; a per-call median over thousands of calls moves
# by a few percent, and the lowest of several alternating rounds is what the code costs.
#
#   scripts/bench_ab.sh b193674
#   scripts/bench_ab.sh b193674 15
#   scripts/bench_ab.sh --lto 3     the working tree twice: as `release` builds it (before) and
#                                   with the `dist` profile's code generation, whole-program LTO
#                                   in one codegen unit (after), in target/bench-lto
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: scripts/bench_ab.sh BASE|--lto [ROUNDS]}
rounds=${2:-9}
tmp=$(mktemp -d)
cleanup() {
    git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# The benchmark executable of the package in the current directory, built in target directory
# $1. The base builds in its own target directory (target/bench-base, kept between runs so its
# dependencies build once): cargo names a workspace member's artifacts without its absolute
# path, so in a shared target directory the working tree's build would find the base's
# artifact "fresh" and the two sides would be one binary. The check below refuses that case.
root="$PWD"
bench_bin() {
    "$root/scripts/user_path_bin.sh" "$1" "$2"
}

if [ "$base" = "--lto" ]; then
    echo "==> building user_path in the working tree as release builds it" >&2
    cp "$(bench_bin "$PWD/target" halo-core)" "$tmp/before"
    echo "==> building it again with lto = \"fat\", codegen-units = 1 (target/bench-lto; minutes)" >&2
    cp "$(CARGO_PROFILE_BENCH_LTO=fat CARGO_PROFILE_BENCH_CODEGEN_UNITS=1 bench_bin "$PWD/target/bench-lto" halo-core)" "$tmp/after"
    base="the release profile"
    after_label="fat LTO in one codegen unit"
else
    echo "==> building user_path at $base (with this tree's halo-core/benches/user_path.rs; the" \
        "first run builds the dependencies into target/bench-base, several minutes)" >&2
    git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
    if [ -d "$tmp/base/halo-core/benches" ]; then
        base_pkg=halo-core
        cp halo-core/benches/user_path.rs "$tmp/base/halo-core/benches/user_path.rs"
    else
        # A base from before the core had its own crate: the bench lived in the gateway, the core
        # under halo_gateway::core, the scale fixture under gateway/tests/common.
        base_pkg=halo-gateway
        sed -e 's/halo_core::contract/halo_gateway::contract/g' -e 's/halo_core::/halo_gateway::core::/g' \
            -e 's#"../tests/core/common/contract_scale.rs"#"../tests/common/contract_scale.rs"#' \
            halo-core/benches/user_path.rs >"$tmp/base/gateway/benches/user_path.rs"
    fi
    (cd "$tmp/base" && cp "$(bench_bin "$root/target/bench-base" "$base_pkg")" "$tmp/before")
    echo "==> building user_path in the working tree" >&2
    cp "$(bench_bin "$PWD/target" halo-core)" "$tmp/after"
    if cmp -s "$tmp/before" "$tmp/after"; then
        echo "error: the two builds are the same binary; is $base the working tree's code?" >&2
        exit 1
    fi
fi

for r in $(seq 1 "$rounds"); do
    echo "==> round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    cut -d' ' -f1 /proc/loadavg >>"$tmp/load"
    for side in before after; do
        HALO_BENCH_CALLS=3000 "$tmp/$side" --bench 2>/dev/null |
            sed -n "s/^calls /$side /p" >>"$tmp/results"
    done
done

python3 - "$tmp/results" "$base" "$rounds" "$tmp/load" "${after_label:-the working tree}" <<'EOF'
import sys
loads = [float(x) for x in open(sys.argv[4]).read().split()]
best = {}
for line in open(sys.argv[1]):
    side, bench, p10, med, _unit = line.split()
    old = best.get((bench, side), (float("inf"), float("inf")))
    best[(bench, side)] = (min(old[0], float(p10)), min(old[1], float(med)))
print(f"µs per call, lowest over {sys.argv[3]} alternating rounds of 3,000 calls "
      f"(before = {sys.argv[2]}, after = {sys.argv[5]}); 1-minute load average at the "
      f"rounds' starts {min(loads):.2f}–{max(loads):.2f}")
print(f"{'benchmark':40} {'before p10':>11} {'median':>9} {'after p10':>11} {'median':>9} {'median change':>14}")
for bench in dict.fromkeys(b for b, _ in best):
    x, y = best.get((bench, "before")), best.get((bench, "after"))
    if not x or not y:
        continue
    print(f"{bench:40} {x[0]:11.3f} {x[1]:9.3f} {y[0]:11.3f} {y[1]:9.3f} "
          f"{100 * (y[1] - x[1]) / x[1]:+13.1f} %")
EOF
