#!/usr/bin/env bash
# Run one test (or any pytest selection) N times beside a CPU hog on every core, as a
# suspected flaky test must pass before it is called fixed. Each failing run's output is
# kept in $OUT/runK.log; the last line says how many passed.
#   tests/rerun.sh 30 'tests/worker/test_run_metrics_flush.py::test_the_hand_over_...'
#   COGWORKER_TEST_REDIS_SERVER=/path/to/valkey-server tests/rerun.sh 30 tests/redis/cluster/...
set -uo pipefail
count=${1:?usage: tests/rerun.sh COUNT SELECTION...}; shift
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d -t cogworker-rerun-XXXX)}
mkdir -p "$out"
hogs=()
for _ in $(seq "$(nproc)"); do yes > /dev/null & hogs+=($!); done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
passed=0
for run in $(seq "$count"); do
    if timeout 900 .venv/bin/python -m pytest -q -p no:cacheprovider "$@" > "$out/run$run.log" 2>&1; then
        passed=$((passed + 1)); rm "$out/run$run.log"
    fi
    echo "run $run: $passed passed"
done
echo "$passed of $count passed beside $(nproc) CPU hogs (failing runs' logs in $out)"
[ "$passed" -eq "$count" ]
