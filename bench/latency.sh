#!/usr/bin/env bash
# Submission latency against queue depth: a release ctld with NODES simulated nodes (one
# `drover-simnode` process, real protocol), then sequential runnable `sbatch` processes (each job
# runs 0 simulated seconds on a node, so nothing accumulates), timed from process start to exit:
# first on an empty queue, then with HELD held jobs queued (submitted over the client socket).
# Prints both p50s and their ratio, measured in the same run against the same daemon, and the
# CPU time ctld spent per sbatch in each (user + system, from /proc: steadier than wall time on a
# shared machine).
#
#   bench/latency.sh                 (HELD=100000 LAT_RUNS=200 NODES=4)
#   QUEUE=dependent HELD=50000 bench/latency.sh   (the queue waits on a running job instead)
#
# Environment:
#   HELD=N        held jobs queued for the second measurement
#   QUEUE=held|dependent   what the queued jobs are: held (default), or runnable but waiting on a
#                 job that runs all along (`--dependency=afterok:<it>`, submitted before both
#                 measurements)
#   LAT_RUNS=N    sbatch samples per measurement (one warm-up run first, not counted)
#   NODES=N       simulated nodes (64 CPUs, 8 GPUs each)
#   DROVER_BIN=DIR  use drover, drover-ctld and drover-simnode from DIR instead of building them
#   RUST_LOG=F    ctld's log filter (default warn)
set -euo pipefail
cd "$(dirname "$0")/.."
HELD=${HELD:-100000}
LAT_RUNS=${LAT_RUNS:-200}
NODES=${NODES:-4}
QUEUE=${QUEUE:-held}
case "$QUEUE" in held|dependent) ;; *) echo "latency.sh: QUEUE must be held or dependent" >&2; exit 2 ;; esac
for v in HELD LAT_RUNS NODES; do
    case "${!v}" in ''|*[!0-9]*|0) echo "latency.sh: $v must be a positive integer" >&2; exit 2 ;; esac
done
. bench/lib.sh
bench_bin
bench_work latency
cat > "$WORK/cluster.toml" <<CONF
cluster_name = "latency"
default_account = "shared"
[controller]
address = "127.0.0.1:$PORT"
state_dir = "$WORK/state"
key_file = "$WORK/cluster.key"
node_timeout = 300
min_job_age = 5
[[nodes]]
names = "sim[1-$NODES]"
cpus = 64
real_memory = 512000
gpus = { h100 = 8 }
[[partitions]]
name = "main"
nodes = "sim[1-$NODES]"
default = true
default_mem_per_cpu = 1000
[[accounts]]
name = "shared"
CONF
bench_ctld
export DROVER_CONF=$WORK/cluster.toml
"$BIN/drover-simnode" nodes --config "$WORK/cluster.toml" --count "$NODES" --warp 1 --heartbeat 30 > "$WORK/nodes.log" 2>&1 &
PIDS+=($!)
until [ "$("$BIN/drover" sinfo -h -o '%D %t' 2>/dev/null | awk '$2=="idle"{print $1}')" = "$NODES" ]; do sleep 0.2; done
printf '#!/bin/sh\ntrue\n' > "$WORK/job.sh"

# ctld's CPU time so far (user + system), in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$CTLD/stat"; }
# p50 <label>: LAT_RUNS sequential runnable sbatch processes; prints "<p50_ms> <p99_ms> <ctld
# CPU ms per sbatch>".
p50() {
    local lat=() s0 s1 fails=0 c0 c1
    "$BIN/drover" sbatch --comment sim:0 -o /dev/null "$WORK/job.sh" >/dev/null
    c0=$(ticks)
    for _ in $(seq "$LAT_RUNS"); do
        s0=$(date +%s%N)
        "$BIN/drover" sbatch --comment sim:0 -o /dev/null "$WORK/job.sh" >/dev/null || fails=$((fails + 1))
        s1=$(date +%s%N)
        lat+=($(( (s1 - s0) / 1000 )))
    done
    c1=$(ticks)
    [ "$fails" = 0 ] || echo "latency.sh: $fails sbatch runs failed ($1)" >&2
    printf '%s\n' "${lat[@]}" | sort -n | awk -v cpu=$(( (c1 - c0) * 1000 / $(getconf CLK_TCK) )) -v n="$LAT_RUNS" \
        '{a[NR]=$1} END {printf "%.2f %.2f %.2f\n", a[int((NR+1)/2)]/1000, a[int(NR*0.99)]/1000, cpu/n}'
}

QUEUED_AS=(--hold)
if [ "$QUEUE" = dependent ]; then
    LONG=$("$BIN/drover" sbatch --parsable --comment sim:1000000 -o /dev/null "$WORK/job.sh")
    QUEUED_AS=(--dependency "afterok:$LONG")
fi

read -r EMPTY EMPTY99 EMPTYCPU < <(p50 empty)
echo "sbatch_runnable queued=0 p50_ms=$EMPTY p99_ms=$EMPTY99 ctld_cpu_ms_per_sbatch=$EMPTYCPU runs=$LAT_RUNS"
t0=$(date +%s.%N)
"$BIN/drover-simnode" submit --socket "$SOCK" --count "$HELD" --clients 8 "${QUEUED_AS[@]}" --gpus 1 >/dev/null
t1=$(date +%s.%N)
held=$("$BIN/drover" squeue -h -t PD -o %i | wc -l)
echo "filled $QUEUE=$held in_s=$(echo "$t1 - $t0" | bc)"
sleep 2
read -r FULL FULL99 FULLCPU < <(p50 full)
echo "sbatch_runnable queued=$held p50_ms=$FULL p99_ms=$FULL99 ctld_cpu_ms_per_sbatch=$FULLCPU runs=$LAT_RUNS"
echo "ratio_p50=$(awk -v a="$FULL" -v b="$EMPTY" 'BEGIN { printf "%.2f", a / b }') (goal: <= 1.5)"
