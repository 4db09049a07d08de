#!/usr/bin/env bash
# A flame graph of one user_path benchmark, focused on the call a user makes.
#
#   scripts/profile.sh admission_from_bytes 'Gateway::handle_response'  docs/profiles/admission_from_bytes.svg
#   scripts/profile.sh receipts_of_one_admission 'ReceiptChain<R>::seal' docs/profiles/receipt_sealing.svg
#
# Needs Linux perf (cpu-clock sampling works in VMs without hardware counters) and inferno
# (installed into target/tools on first use: `cargo install inferno`, about two minutes).
# Samples with DWARF call graphs for a few seconds; stacks that do not pass through FRAME are
# dropped (criterion, the untimed setup), and FRAME becomes the root.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=${1:?usage: scripts/profile.sh BENCH FRAME OUT.svg}
frame=${2:?usage: scripts/profile.sh BENCH FRAME OUT.svg}
out=${3:?usage: scripts/profile.sh BENCH FRAME OUT.svg}

command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)" >&2; exit 1; }
tools=target/tools/bin
if ! command -v inferno-flamegraph >/dev/null && [ ! -x "$tools/inferno-flamegraph" ]; then
    echo "==> installing inferno into target/tools (once)" >&2
    cargo install --quiet inferno --no-default-features --features cli --root target/tools
fi
export PATH="$PWD/$tools:$PATH"

echo "==> building the benchmark" >&2
bin=$(scripts/user_path_bin.sh)
[ -x "$bin" ] || { echo "could not find the user_path benchmark binary" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "==> sampling user/$bench" >&2
perf record -q -e cpu-clock -F 1999 --call-graph dwarf,16384 -o "$tmp/perf.data" -- \
    "$bin" --bench "$bench" --warm-up-time 1 --measurement-time 3 >/dev/null 2>&1
perf script -i "$tmp/perf.data" 2>/dev/null | inferno-collapse-perf >"$tmp/all.folded"
python3 - "$frame" "$tmp/all.folded" "$tmp/focus.folded" <<'EOF'
import sys
frame, src, dst = sys.argv[1:]
out = {}
for line in open(src):
    stack, n = line.rstrip("\n").rsplit(" ", 1)
    frames = stack.split(";")
    i = next((k for k, f in enumerate(frames) if frame in f), None)
    if i is not None:
        key = ";".join(frames[i:])
        out[key] = out.get(key, 0) + int(n)
if not out:
    sys.exit(f"no sampled stack passes through {frame!r}")
with open(dst, "w") as f:
    for k, v in out.items():
        f.write(f"{k} {v}\n")
EOF
mkdir -p "$(dirname "$out")"
inferno-flamegraph --minwidth 0.3 --width 1400 \
    --title "$frame (user_path/$bench)" "$tmp/focus.folded" >"$out"
echo "wrote $out" >&2
