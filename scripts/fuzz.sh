#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for a set number of executions (default 10,000,000
# each) on the nightly toolchain, seeded from the repository's test data, and writes a report
# (executions, coverage, findings) to target/fuzz-report.txt. Needs `rustup toolchain install
# nightly`; installs cargo-fuzz when missing. CI does not run this: it runs the stable smoke
# test (halo-eval/tests/eval/fuzz_smoke.rs) over the same entry points.
#
#   scripts/fuzz.sh [EXECUTIONS] [TARGET...]
#
# FUZZ_MAX_SECONDS caps each target's time (libFuzzer -max_total_time; the report then shows
# the executions reached). FUZZ_SANITIZER picks cargo-fuzz's sanitizer: `none` (default; the
# code under test forbids `unsafe`, and overflow checks are on) or `address`.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10000000}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(envelope state_file catalog contract_domain receipt_lines offboard contract_workflow service_bodies last_event_id gateway_config tls_pem client_identity)
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup run nightly rustc --version >/dev/null

# Seeds from the test data: every admission case's response and state, the catalogs, the
# contract domain, and a signed contract receipt log.
seeds=target/fuzz-seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{envelope,state_file,catalog,contract_domain,receipt_lines,offboard,contract_workflow,service_bodies,last_event_id,gateway_config,tls_pem,client_identity}
python3 - "$seeds" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
n = 0
for f in ["structure", "local", "closure"]:
    for c in json.load(open(f"halo-core/tests/data/admission/{f}.json"))["cases"]:
        text = c["response_text"] if "response_text" in c else json.dumps(c["response"])
        (out / "envelope" / f"{n}.json").write_text(text)
        (out / "state_file" / f"{n}.json").write_text(json.dumps(c["state"]))
        n += 1
# Offboard scripts, two bytes a step (see halo_gateway::fuzzing::offboard).
scripts = [
    [0, 0x85, 1, 10, 3, 100, 2, 40, 0, 0x84, 2, 100, 2, 100, 2, 200, 4, 0, 2, 100],
    [0, 0x85, 3, 30, 2, 255, 2, 255, 0, 0x86, 2, 100, 3, 50, 2, 100],
    [0, 0x85, 3, 200, 2, 20, 8, 5, 7, 0, 5, 0, 2, 50, 9, 0, 3, 50, 2, 255, 6, 3, 0xFD, 9, 0, 0, 0, 1, 1, 0],
]
for i, sc in enumerate(scripts):
    (out / "offboard" / f"{i}.bin").write_bytes(bytes(sc))
# The service's bodies: provider updates, certificates, contract operations.
bodies = [
    {"value": [{"north_m": 300.0, "east_m": -200.0, "down_m": -40.0}], "epoch": 41, "provenance": "utm-feed-a", "generated_at_unix_ms": 1000},
    {"value": None, "epoch": 7, "provenance": "map-service", "generated_at_unix_ms": 1000},
    {"value": {"north_min": -50.0, "north_max": 100.0, "east_min": -50.0, "east_max": 100.0, "down_min": -60.0, "down_max": 0.5}, "epoch": 3, "provenance": "corridor-12", "generated_at_unix_ms": 1000},
    {"value": True, "epoch": 1, "provenance": "operator", "generated_at_unix_ms": 1000},
    {"value": 4.0, "epoch": 1, "provenance": "weather", "generated_at_unix_ms": 1000},
    {"id": "cert-1", "covers": "ab" * 32, "valid_for_ms": 30000, "issuer": "geo"},
    {"id": "cert-2", "covers": "0" * 64, "valid_until_unix_ms": 99, "issuer": "geo"},
    {"op": "reauthorize", "goal": "g1"},
    {"op": "change_version", "policy": [{"rule": "forbid", "when": ["zone == nofly"]}]},
]
w = json.load(open("docs/examples/contract-workflow.json"))
bodies.append({"op": "register_root", "approved_by": w["approved_by"], "contract": w["contract"]})
for i, b in enumerate(bodies):
    (out / "service_bodies" / f"{i}.json").write_text(json.dumps(b))
for i, e in enumerate(["3.5", "3.0", "3.10", "2.99", "4.1", "18446744073709551615", " 3.7 "]):
    (out / "last_event_id" / f"{i}.txt").write_text(e)
PY
cp docs/examples/response.json "$seeds/envelope/"
cp docs/examples/state.json "$seeds/state_file/"
cp catalogs/uav-px4.toml halo-core/tests/data/catalogs/*.toml "$seeds/catalog/"
cp catalogs/contract-uav.toml "$seeds/contract_domain/"
cp docs/examples/contract-workflow*.json "$seeds/contract_workflow/"
cargo run --release -q -p halo-gateway -- contract run --signing-key "$seeds/key" \
    --receipts "$seeds/receipt_lines/log.jsonl" docs/examples/contract-workflow.json >/dev/null
head -1 "$seeds/receipt_lines/log.jsonl" > "$seeds/receipt_lines/one.jsonl"
rm -f "$seeds/key" "$seeds/key.pub"
# The network face: the shipped configurations, a certificate and key (chain NUL key NUL
# client CA), a client certificate's DER and a revocation list.
cp configs/*.toml "$seeds/gateway_config/"
pki=$(mktemp -d)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
    -keyout "$pki/a.key" -out "$pki/a.crt" 2>/dev/null
{ cat "$pki/a.crt"; printf '\0'; cat "$pki/a.key"; printf '\0'; cat "$pki/a.crt"; } > "$seeds/tls_pem/pair-and-ca.bin"
openssl x509 -outform DER -in "$pki/a.crt" -out "$seeds/client_identity/cert.der"
printf '# leaked\nplanner-1\nserial=00A1:B2\n' > "$seeds/client_identity/revoked.txt"
rm -rf "$pki"

report=target/fuzz-report.txt
echo "fuzz run $(date -u +%FT%TZ), $runs executions per target (at most ${FUZZ_MAX_SECONDS:-unlimited} s each), sanitizer ${FUZZ_SANITIZER:-none}, $(nproc) cores, $(git rev-parse --short HEAD)" > "$report"
for t in "${targets[@]}"; do
    echo "==> $t ($runs executions)"
    mkdir -p "fuzz/corpus/$t"
    start=$(date +%s)
    log="target/fuzz-$t.log"
    if (cd fuzz && cargo +nightly fuzz run --sanitizer "${FUZZ_SANITIZER:-none}" "$t" \
        "corpus/$t" "../$seeds/$t" -- -runs="$runs" -max_total_time="${FUZZ_MAX_SECONDS:-0}" \
        -max_len=65536 -print_final_stats=1) >"$log" 2>&1; then
        verdict="no finding"
    else
        verdict="FINDING (see $log and fuzz/artifacts/$t/)"
    fi
    secs=$(( $(date +%s) - start ))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
    line="$t: ${execs:-?} executions in ${secs} s, coverage ${cov:-?} edges, $verdict"
    echo "$line" | tee -a "$report"
done
echo "report: $report"
