#!/usr/bin/env bash
# Builds halo-gateway for a Raspberry Pi-class companion (aarch64-unknown-linux-gnu, 64-bit
# Raspberry Pi OS or Debian) on an x86_64 Debian host, then tests what it built under user-mode
# emulation (qemu-aarch64):
#
#   1. the flight binary, `dist` profile (stripped, LTO, one codegen unit):
#      target/aarch64-unknown-linux-gnu/dist/halo-gateway (under CARGO_TARGET_DIR when set) —
#      the file docs/deploy.md installs;
#   2. the workspace's unit tests and the core's conformance suites, built for aarch64 and run
#      under qemu-aarch64, with their `N/M matched` lines (the flight, peer and browser suites
#      spawn Python peers and a browser and stay on the host: scripts/test.sh runs them);
#   3. the demo on the embedded simulated vehicle (`halo-eval demo`) under qemu-aarch64, with
#      its peak resident memory.
#
# What a fresh host lacks is installed: the Rust target (rustup), Debian's cross C compiler (the
# vendored libusb of the Crazyflie link is C) and qemu-user. CI does not run this (a cross build
# of the workspace takes tens of minutes on two cores); docs/deploy.md says what it runs.
#
# Usage: scripts/build_aarch64.sh [--binary-only]
#   --binary-only   step 1 only
# The report goes to stdout and to target/aarch64-report.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
# Cargo's target directory (CARGO_TARGET_DIR, as cargo reads it).
OUTDIR=${CARGO_TARGET_DIR:-target}
SYSROOT=/usr/aarch64-linux-gnu
BINARY_ONLY=0
for a in "$@"; do
  case "$a" in
    --binary-only) BINARY_ONLY=1 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument \`$a\` (try --help)" >&2; exit 2 ;;
  esac
done

need_apt() {
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "==> installing $* (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; } \
      || { echo "error: could not install $*" >&2; exit 1; }
  else
    echo "error: this needs Debian's $* (as root: apt-get install $*)" >&2
    exit 1
  fi
}

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  echo "==> rustup target add $TARGET"
  rustup target add "$TARGET"
fi
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need_apt gcc-aarch64-linux-gnu libc6-dev-arm64-cross
command -v qemu-aarch64 >/dev/null 2>&1 || need_apt qemu-user
[ -x /usr/bin/time ] || need_apt time

# The cross linker and C compiler, and qemu as the runner of everything cargo runs for the target.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $SYSROOT"

mkdir -p target
REPORT=target/aarch64-report.txt
: > "$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }
T0=$(date +%s)

say "==> 1. the flight binary (cargo build --profile dist --target $TARGET -p halo-gateway)"
t=$(date +%s)
cargo build --locked --profile dist --target "$TARGET" -p halo-gateway
BIN=$OUTDIR/$TARGET/dist/halo-gateway
say "    built in $(elapsed "$t"): $BIN"
say "    $(file -b "$BIN" | cut -d, -f1-2)"
size=$(stat -c %s "$BIN")
say "    size: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB, stripped)"
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
  say "error: the flight binary is over the 15 MiB budget"
  exit 1
fi
say "    $(qemu-aarch64 -L "$SYSROOT" "$BIN" --version) runs under qemu-aarch64"
if [ "$BINARY_ONLY" = 1 ]; then
  say "done in $(elapsed "$T0")"
  exit 0
fi

say "==> 2. unit tests and the core's conformance suites, for $TARGET, under qemu-aarch64"
t=$(date +%s)
OUT=target/aarch64-tests.txt
# Libraries' and binaries' own tests everywhere, and the core's conformance suites; the
# integration suites that spawn Python peers, simulators over sockets or a browser stay on the host.
cargo test --locked --release --target "$TARGET" \
  -p halo-core -p halo-linelog -p px4-bridge -p crazyflie-bridge -p sitl --lib \
  -- --nocapture 2>&1 | tee "$OUT"
cargo test --locked --release --target "$TARGET" -p halo-core --test core \
  -- --nocapture 2>&1 | tee -a "$OUT"
cargo test --locked --release --target "$TARGET" -p halo-gateway --lib --bins \
  -- --nocapture 2>&1 | tee -a "$OUT"
passed=$(grep -E '^test result: ok' "$OUT" | awk '{ s += $4 } END { print s + 0 }')
failed=$(grep -E '^test result:' "$OUT" | awk '{ s += $6 } END { print s + 0 }')
say "    ran in $(elapsed "$t"): $passed tests passed, $failed failed"
grep -E '^[a-z0-9-]+: [0-9]+/[0-9]+ matched' "$OUT" | sed 's/^/    /' | tee -a "$REPORT" || true
if [ "$failed" != 0 ] || grep -q '^test result: FAILED' "$OUT"; then
  say "error: tests failed under emulation (see $OUT)"
  exit 1
fi

say "==> 3. the demo on the embedded simulated vehicle, under qemu-aarch64"
t=$(date +%s)
cargo build --locked --release --target "$TARGET" -p halo-eval
DEMO_OUT=target/aarch64-demo.txt
/usr/bin/time -v qemu-aarch64 -L "$SYSROOT" "$OUTDIR/$TARGET/release/halo-eval" demo \
  > "$DEMO_OUT" 2> target/aarch64-demo-time.txt || {
  tail -20 "$DEMO_OUT" target/aarch64-demo-time.txt
  say "error: the demo failed under emulation (see $DEMO_OUT)"
  exit 1
}
tail -5 "$DEMO_OUT"
rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' target/aarch64-demo-time.txt)
say "    demo passed in $(elapsed "$t") (build included); peak RSS under qemu-aarch64: $((rss / 1024)) MiB (the emulator's own memory included)"
say "done in $(elapsed "$T0"); report in $REPORT"
