#!/usr/bin/env bash
# Scheduling-pass benchmark, in process (no daemons): the real pass over NODES made-up nodes
# (64 CPUs, 8 GPUs each; half H100, half A100), 8 teams, a queue of PENDING jobs of mixed GPU
# types and sizes (1/2/4/8 GPUs on one node, or two whole nodes), with the cluster full.
#
#   bench/pass.sh [NODES] [PENDING] [PASSES]            (defaults 10000 100000 3)
#   QUOTAS=1 bench/pass.sh 1000 6000                    (eight teams' guaranteed quotas in the pool)
#   CALLGRIND=1 bench/pass.sh 10000 100000 0           (instruction counts of the same run)
#
# Prints the fill pass, the passes with the queue full (total and its backfill part) and the
# resident memory the pending jobs added.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p drover-ctld --bin drover-passbench
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/drover-passbench
if [ -n "${CALLGRIND:-}" ]; then
    OUT=${CALLGRIND_OUT:-/tmp/callgrind.passbench}
    valgrind --tool=callgrind --callgrind-out-file="$OUT" "$BIN" "${1:-10000}" "${2:-100000}" "${3:-0}" ${QUOTAS:+quotas}
    callgrind_annotate --inclusive=yes "$OUT" | head -60
else
    "$BIN" "${1:-10000}" "${2:-100000}" "${3:-3}" ${QUOTAS:+quotas}
fi
