#!/usr/bin/env bash
# The test command: installs what a fresh machine lacks, then checks formatting, lints and runs
# every test and conformance suite in the workspace. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs" >&2
  exit 1
fi
if [ -f scripts/requirements.txt ]; then
  python3 -m pip install --quiet --disable-pip-version-check -r scripts/requirements.txt
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cargo test"
mkdir -p target
cargo test --workspace --locked -- --nocapture 2>&1 | tee target/test-output.txt
echo "==> suite summaries"
grep -E '^[a-z-]+: [0-9]+/[0-9]+ matched' target/test-output.txt || true
