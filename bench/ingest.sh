#!/usr/bin/env bash
# Ingest benchmark: how many `sbatch` submissions per second ctld acknowledges (each answered only
# after its commit), with commits batched (the default) against one commit per change
# (DROVER_COMMIT_BATCH=1), measured in the same run on the same machine.
#
#   bench/ingest.sh [jobs-per-run]      (default 1000)
#
# Jobs are submitted held (-H) so scheduling does not mix into the figure. Each client is a shell
# loop running one sbatch process per job, as scripts and workflow tools do.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
cargo build --release --workspace --quiet
BIN=$PWD/target/release
WORK=$(mktemp -d /tmp/drover-bench-XXXXXX)
trap 'for h in "$WORK"/home-*; do "$BIN/drover" down --home "$h" >/dev/null 2>&1 || true; done; rm -rf "$WORK"' EXIT

rate() { # batch clients -> jobs/s
    local batch=$1 clients=$2 home="$WORK/home-$1-$2"
    DROVER_COMMIT_BATCH=$batch "$BIN/drover" up --home "$home" --config etc/cluster.toml >/dev/null
    local per=$((N / clients)) start end
    start=$(date +%s.%N)
    for _ in $(seq "$clients"); do
        ( for _ in $(seq "$per"); do DROVER_SOCKET="$home/ctld/ctld.sock" "$home/bin/sbatch" -Q -H --wrap true; done ) &
    done
    wait
    end=$(date +%s.%N)
    local stored
    stored=$(DROVER_SOCKET="$home/ctld/ctld.sock" "$home/bin/squeue" -h -t PD | wc -l)
    [ "$stored" -eq $((per * clients)) ] || { echo "expected $((per * clients)) jobs, ctld has $stored" >&2; exit 1; }
    "$BIN/drover" down --home "$home" >/dev/null
    echo "scale=1; $((per * clients)) / ($end - $start)" | bc
}

printf '| clients | jobs | one commit per job (jobs/s) | batched commits (jobs/s) | ratio |\n|---|---|---|---|---|\n'
for clients in 1 4 32; do
    single=$(rate 1 "$clients")
    batched=$(rate 4096 "$clients")
    ratio=$(echo "scale=2; $batched / $single" | bc)
    printf '| %s | %s | %s | %s | %s |\n' "$clients" "$N" "$single" "$batched" "$ratio"
done
