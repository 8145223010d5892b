#!/usr/bin/env bash
# Queue benchmark: a release ctld (no nodes, so every job stays pending) filled with held jobs
# over the client socket to 1,000, 10,000 and 100,000 jobs. At each size: `squeue` (the CLI,
# rendering included) alone, and the job query under 50 concurrent pollers; at 100,000: ctld's
# resident memory per pending job (measured before the queries at each size) and sequential
# `sbatch` latency (one process per job).
#
#   bench/queue.sh [SIZES...]        (default 1000 10000 100000)
#
# Environment:
#   SBATCH_LIKE=BYTES  submit jobs as `sbatch job.sh` sends them from a login shell: an
#                      environment of about BYTES bytes, a 400-byte script, command path, submit
#                      line (`drover-simnode submit --sbatch-like`); default: the bare simulator job
#   SBATCH_CLI=1       submit with `drover sbatch --hold` processes (8 at a time) instead, each
#                      capturing this script's environment (padded to SBATCH_LIKE bytes if set)
#   MEMORY_ONLY=1      measure resident memory per pending job only (no queries, no sbatch latency)
#   DROVER_BIN=DIR     use drover, drover-ctld and drover-simnode from DIR instead of building them
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("$@"); [ ${#SIZES[@]} -gt 0 ] || SIZES=(1000 10000 100000)
. bench/lib.sh
bench_bin
LIKE=(); [ -z "${SBATCH_LIKE:-}" ] || LIKE=(--sbatch-like "$SBATCH_LIKE")
if [ -n "${SBATCH_CLI:-}" ] && [ -n "${SBATCH_LIKE:-}" ]; then
    i=0
    while [ "$(env | wc -c)" -lt "$SBATCH_LIKE" ]; do
        export "BENCH_PAD_$i=$(printf '%064d' "$i")"
        i=$((i + 1))
    done
fi
[ -z "${SBATCH_CLI:-}" ] || echo "sbatch_environment_bytes=$(env | wc -c)"
# Held jobs from `drover sbatch` processes, 8 at a time (SBATCH_CLI).
submit_cli() {
    printf '#!/bin/bash\n#SBATCH --gres=gpu:1\n#SBATCH --time=04:00:00\nset -euo pipefail\nmodule load cuda\npython train.py\n' > "$WORK/cli.sh"
    seq "$1" | xargs -P 8 -n 50 sh -c 'f=$1; shift; for i; do "$0" sbatch --hold -J "cli$i" "$f" >/dev/null; done' \
        "$BIN/drover" "$WORK/cli.sh"
}
bench_work queue
cat > "$WORK/cluster.toml" <<CONF
cluster_name = "queue"
default_account = "shared"
[controller]
address = "127.0.0.1:$PORT"
state_dir = "$WORK/state"
key_file = "$WORK/cluster.key"
[[nodes]]
names = "sim[00001-10000]"
cpus = 64
real_memory = 512000
gpus = { h100 = 8 }
[[partitions]]
name = "main"
nodes = "sim[00001-10000]"
default = true
[[accounts]]
name = "shared"
CONF
bench_ctld
# The socket appears before ctld has built its node table: wait for an answer, then settle.
until "$BIN/drover" squeue >/dev/null 2>&1; do sleep 0.1; done
sleep 1
rss() { awk '/VmRSS/{print $2}' "/proc/$CTLD/status"; }
RSS0=$(rss)
echo "ctld_rss_empty_kib=$RSS0"
have=0
for size in "${SIZES[@]}"; do
    if [ -n "${SBATCH_CLI:-}" ]; then
        submit_cli $((size - have))
    else
        "$BIN/drover-simnode" submit --socket "$SOCK" --count $((size - have)) --clients 8 --hold --gpus 1 "${LIKE[@]}" >/dev/null
    fi
    have=$size
    sleep 1
    # Before any query at this size (a query's encode buffer stays in the allocator's heap).
    RSS1=$(rss)
    echo "jobs=$size ctld_rss_kib=$RSS1 bytes_per_pending_job=$(( (RSS1 - RSS0) * 1024 / size ))"
    [ -z "${MEMORY_ONLY:-}" ] || continue
    times=()
    for _ in 1 2 3 4 5; do
        s0=$(date +%s%N); "$BIN/drover" squeue > "$WORK/squeue.out"; s1=$(date +%s%N)
        times+=($(( (s1 - s0) / 1000000 )))
    done
    rows=$(($(wc -l < "$WORK/squeue.out") - 1))
    echo "jobs=$size squeue_rows=$rows squeue_cli_ms=$(printf '%s\n' "${times[@]}" | sort -n | tr '\n' ' ')"
    "$BIN/drover-simnode" query --socket "$SOCK" --repeat 10 --clients 1
    "$BIN/drover-simnode" query --socket "$SOCK" --repeat 10 --clients 50 &
    POLL=$!
    times=()
    for _ in 1 2 3 4 5; do
        s0=$(date +%s%N); "$BIN/drover" squeue > /dev/null; s1=$(date +%s%N)
        times+=($(( (s1 - s0) / 1000000 )))
    done
    wait $POLL
    echo "jobs=$size squeue_cli_ms_under_50_pollers=$(printf '%s\n' "${times[@]}" | sort -n | tr '\n' ' ')"
done
[ -z "${MEMORY_ONLY:-}" ] || exit 0
echo "ctld_rss_kib_after_queries=$(rss)"
printf '#!/bin/sh\n#SBATCH --hold\ntrue\n' > "$WORK/job.sh"
lat=()
for _ in $(seq 200); do
    s0=$(date +%s%N); "$BIN/drover" sbatch --hold "$WORK/job.sh" >/dev/null; s1=$(date +%s%N)
    lat+=($(( (s1 - s0) / 1000 )))
done
printf '%s\n' "${lat[@]}" | sort -n | awk -v q="$have" '{a[NR]=$1} END {printf "sbatch_latency_with_%d_queued p50_ms=%.1f p99_ms=%.1f n=%d\n", q, a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000, NR}'
