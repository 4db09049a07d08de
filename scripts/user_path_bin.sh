#!/usr/bin/env bash
# Builds the `user_path` benchmark of PACKAGE (default halo-core) without running it and prints
# its executable's path; TARGET_DIR (default: cargo's) is where it builds. Run from the package's
# workspace. Used by bench_ab.sh, bench_floor.sh and profile.sh. A build that fails prints
# cargo's messages and exits 1 (the callers would otherwise copy an empty path).
#   scripts/user_path_bin.sh [TARGET_DIR] [PACKAGE]
set -euo pipefail
if [ -n "${1:-}" ]; then
    export CARGO_TARGET_DIR="$1"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
exe=$(cargo bench -p "${2:-halo-core}" --bench user_path --no-run --message-format=json 2>"$log" |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "user_path" and m.get("executable"):
        print(m["executable"])
    elif m.get("reason") == "compiler-message" and m["message"].get("level") == "error":
        print(m["message"].get("rendered", ""), file=sys.stderr)' | tail -1)
if [ -z "$exe" ]; then
    echo "error: the user_path benchmark did not build (in $PWD):" >&2
    tail -n 20 "$log" >&2
    exit 1
fi
echo "$exe"
