#!/usr/bin/env bash
# The test command: installs what a fresh machine lacks, then checks formatting, lints and runs
# every test and conformance suite in the workspace. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says how long the run has taken so far (minutes:seconds).
started=$SECONDS
step() { printf '==> [%d:%02d] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs" >&2
  exit 1
fi
# Python test peers (pymavlink, httpx for the example agent client) go into a virtual
# environment under target/: a system-wide pip install fails on current Debian and Ubuntu.
if ! command -v python3 >/dev/null 2>&1; then
  echo "error: python3 is needed for the peer tests (pymavlink, the example agent client)" >&2
  exit 1
fi
VENV=target/pyenv
if [ ! -x "$VENV/bin/python3" ] || ! cmp -s scripts/requirements.txt "$VENV/requirements.txt"; then
  step "python test dependencies into $VENV"
  mkdir -p target
  python3 -m venv "$VENV" || { echo "error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check -r scripts/requirements.txt
  cp scripts/requirements.txt "$VENV/requirements.txt"
fi
export PATH="$PWD/$VENV/bin:$PATH"
# Debian packages a suite needs: installed with apt when this runs as root, else a warning
# that says what to install. Usage: need_debian "WHICH SUITE" PACKAGE...
need_debian() {
  local why=$1
  shift
  step "$* for $why"
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null; } \
      || echo "warning: could not install $*; $why will not match" >&2
  else
    echo "warning: install Debian's $* (apt-get install $*); $why needs it" >&2
  fi
}
# The faults suite moves the gateway's wall clock with libfaketime (Debian's `faketime`) and
# mounts a small tmpfs for the full-disk cases (it needs root, as CI runs).
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need_debian "the faults suite's clock case" faketime
# The docs-examples suite runs docs/run.md's curl examples as written.
command -v curl >/dev/null 2>&1 || need_debian "the docs-examples suite" curl
command -v openssl >/dev/null 2>&1 || need_debian "the network suite's certificates and TLS client" openssl
# The console suite drives Debian's headless Chromium over WebDriver.
{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || need_debian "the console suite" chromium chromium-driver
# The network suite gives that browser the test CA through an NSS database (certutil).
command -v certutil >/dev/null 2>&1 || need_debian "the network suite's browser over HTTPS" libnss3-tools
# The deploy-install suite verifies the systemd unit with systemd-analyze.
command -v systemd-analyze >/dev/null 2>&1 || need_debian "the deploy-install suite" systemd

step "cargo fmt --check"
cargo fmt --all -- --check
# Lints and tests use the release profile, the one the demo builds: the tests share its
# dependencies and spawn the release binary a deployment runs (CARGO_BIN_EXE_halo-gateway),
# and the lints share its build scripts and proc macros.
step "cargo clippy --release (warnings are errors)"
cargo clippy --workspace --all-targets --release --locked -- -D warnings
# The sans-IO machines link no I/O runtime: the compiler keeps them pure only while no
# dependency brings one in.
step "the sans-IO crates link no I/O runtime"
for crate in halo-core halo-supervisor px4-offboard crazyflie-pacer; do
  if cargo tree --locked -p "$crate" -e normal --prefix none | grep -Eq '^(tokio|mio|tokio-serial) '; then
    echo "error: $crate depends on an I/O runtime:" >&2
    cargo tree --locked -p "$crate" -e normal -i tokio >&2 || true
    exit 1
  fi
done
# The flight binary's build has no evaluation hook: the core's mechanism variants, the late gate
# and the seeded defects are private features only halo-eval and the defect harness enable.
step "the flight binary's build enables no private feature"
if cargo tree --locked -p halo-gateway -e normal,features --prefix none | grep -E 'feature "__'; then
  echo "error: \`cargo build -p halo-gateway\` enables a private evaluation feature (above)" >&2
  exit 1
fi
step "cargo test --release"
mkdir -p target
cargo test --workspace --release --locked -- --nocapture 2>&1 | tee target/test-output.txt
# The seeded-defect harness (core/defect.rs): a second build of the core with single defects
# compiled in, each run through the schedules; counts pinned (docs/conformance.md).
step "seeded defects (cargo test -p halo-core --features __seeded-defects)"
scripts/seeded_defects.sh 2>&1 | tee -a target/test-output.txt
# The oracle that reads a real PX4's ULog (scripts/px4_ulog_check.py) shown to catch a planted
# target flown again; it needs no PX4 and no pyulog for this.
step "the ULog check's self-test"
python3 scripts/px4_ulog_check.py --self-test 2>&1 | tee -a target/test-output.txt
step "suite summaries"
grep -E '^[a-z0-9-]+: [0-9]+/[0-9]+ matched' target/test-output.txt || true
step "done"
