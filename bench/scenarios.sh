#!/usr/bin/env bash
# The multi-tenant scenario harness (tests/tests/scenarios.rs) in its long version: a real ctld
# with 16 simulated 8-GPU nodes per scenario, every time of the plan (submissions, run times,
# grace, preempt_exempt_time) stretched SCALE times (default 4; the test suite runs scale 1).
# One scenario at a time, so they do not share the CPUs. Prints the figures table that
# docs/admin/scheduling.md shows, and each broken invariant.
#
#   bench/scenarios.sh [SCALE]                     (default 4: about 3 + 2 + 2 minutes)
#   DROVER_SIM_CTLD=/path/to/drover-ctld bench/scenarios.sh    (another build of ctld)
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-4}
REPORT=$(mktemp /tmp/drover-scenarios.XXXXXX)
trap 'rm -f "$REPORT"' EXIT
status=0
DROVER_SCENARIO_SCALE=$SCALE DROVER_SCENARIO_REPORT=$REPORT \
    cargo test --quiet -p drover-e2e --test scenarios -- --include-ignored --test-threads=1 >"$REPORT.log" 2>&1 || status=$?
echo "| scenario | scale | jobs | share error, max (per team: delivered / configured %) | GPU utilization while jobs wait | reclaim time incl. grace, mean / max (s) | longest time below guarantee with fitting work waiting (s) | preempted runs | preempted GPU-hours | wide job wait (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
cat "$REPORT"
grep -E "^test result|panicked" "$REPORT.log" || true
rm -f "$REPORT.log"
exit $status
