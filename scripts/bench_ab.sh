#!/usr/bin/env bash
# Before and after on one machine: builds the `user_path` benchmark at BASE (a git revision,
# checked out in a temporary worktree) and at the working tree, runs the two binaries in turn
# ROUNDS times (default 5), and prints for each benchmark the lowest of its per-round criterion
# medians, before and after. A shared VM's speed moves by tens of percent within minutes; one
# run's median moves with it, the lowest median of several alternating rounds does not.
#
#   scripts/bench_ab.sh b193674            # every user_path benchmark, 5 rounds
#   scripts/bench_ab.sh b193674 7 'user/(admission|contract)'
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: scripts/bench_ab.sh BASE [ROUNDS] [FILTER]}
rounds=${2:-5}
filter=${3:-user/}
tmp=$(mktemp -d)
cleanup() {
    git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# The benchmark executable of the package in the current directory (same target directory for
# both, so dependencies build once; each binary is copied out before the next build).
bench_bin() {
    CARGO_TARGET_DIR="$target" cargo bench -p halo-gateway --bench user_path --no-run \
        --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "user_path" and m.get("executable"):
        print(m["executable"])' | tail -1
}

target="$PWD/target"
echo "==> building user_path at $base" >&2
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
(cd "$tmp/base" && cp "$(bench_bin)" "$tmp/before")
echo "==> building user_path in the working tree" >&2
cp "$(bench_bin)" "$tmp/after"

for r in $(seq 1 "$rounds"); do
    for side in before after; do
        echo "==> round $r/$rounds: $side" >&2
        "$tmp/$side" --bench --warm-up-time 1 --measurement-time 3 "$filter" 2>/dev/null |
            sed -n "s/^\([a-z_]*\/[a-z_0-9]*\) *time: *\[[^ ]* [^ ]* \([0-9.]*\) \([µnm]*s\).*/$side \1 \2 \3/p;
                    s/^\([a-z_]*\/[a-z_0-9]*\)$/$side name \1/p;
                    s/^ *time: *\[[^ ]* [^ ]* \([0-9.]*\) \([µnm]*s\).*/$side time \1 \2/p" \
            >>"$tmp/results"
    done
done

python3 - "$tmp/results" "$base" <<'EOF'
import sys
scale = {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}
best = {}
name = {}
for line in open(sys.argv[1]):
    side, a, b, *rest = line.split()
    if a == "name":
        name[side] = b
        continue
    if a == "time":
        bench, value, unit = name.get(side), float(b), rest[0]
    else:
        bench, value, unit = a, float(b), rest[0]
    us = value * scale[unit]
    key = (bench, side)
    best[key] = min(best.get(key, us), us)
benches = sorted({b for b, _ in best}, key=lambda b: b)
print(f"lowest median of the rounds, µs (before = {sys.argv[2]}, after = working tree)")
print(f"{'benchmark':44} {'before':>10} {'after':>10} {'change':>8}")
for b in benches:
    x, y = best.get((b, "before")), best.get((b, "after"))
    ch = f"{100 * (y - x) / x:+.0f} %" if x and y else ""
    fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
    print(f"{b:44} {fmt(x)} {fmt(y)} {ch:>8}")
EOF
