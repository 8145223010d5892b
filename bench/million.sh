#!/usr/bin/env bash
# The scale figures of issue 33 through the real daemon: a release ctld with NODES simulated nodes
# (one `drover-simnode` process, real protocol; 64 CPUs and 8 H100s each), two teams' guaranteed
# quotas (half the GPUs each) and backfill on (its default). The cluster is filled with one
# whole-node job per node, then PENDING one-GPU jobs are queued behind them (8 in-process clients).
#
#   bench/million.sh [NODES] [PENDING]        (defaults 50000 1000000)
#
# Prints, each as name=value:
#   sbatch_p50_empty_ms / sbatch_p50_full_ms / ratio   `drover sbatch -H` (one process each, LAT_RUNS
#                                                      runs) on the empty cluster and with the queue
#   ingest_jobs_per_s          the pending jobs' acknowledged submissions
#   pass_last_s / pass_max_s   the scheduling pass with the queue (`sdiag`'s main cycle), after
#                              PASS_WAIT seconds of passes
#   ctld_rss_mib               ctld's resident memory with the queue
#   squeue_user_ms             `squeue -u <user>` (the CLI, median of 10) for a user with 5 jobs in the
#                              queue (USER_NAME, default alice; skipped where no such user exists)
#   restart_answer_s           SIGTERM to ctld, a new ctld on the same state, until `squeue -u` answers
#
# Environment: LAT_RUNS (default 50), PASS_WAIT (default 30), USER_NAME (default alice),
# DROVER_BIN (a folder with drover, drover-ctld and drover-simnode, else they are built).
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-50000}
PENDING=${2:-1000000}
LAT_RUNS=${LAT_RUNS:-50}
PASS_WAIT=${PASS_WAIT:-30}
USER_NAME=${USER_NAME:-alice}
for v in NODES PENDING LAT_RUNS PASS_WAIT; do
    case "${!v}" in ''|*[!0-9]*|0) echo "million.sh: $v must be a positive integer" >&2; exit 2 ;; esac
done
# One connection per simulated node, in drover-simnode and in ctld.
# Where the hard limit is lower (a container without CAP_SYS_RESOURCE), at most what it allows.
ulimit -n $((NODES * 2 + 40000)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((NODES + 4096 + 1000)) ]; then
    echo "million.sh: the open-file limit here ($(ulimit -n), hard $(ulimit -Hn)) is too low for $NODES simulated nodes (ctld keeps 4096 descriptors for clients); at most $(($(ulimit -n) - 5096))" >&2
    exit 2
fi
. bench/lib.sh
bench_bin
bench_work million
WIDTH=${#NODES}
RANGE="sim[$(printf "%0${WIDTH}d" 1)-$NODES]"
HALF=$((NODES * 4))
cat > "$WORK/cluster.toml" <<CONF
cluster_name = "million"
default_account = "teama"
[controller]
address = "127.0.0.1:$PORT"
state_dir = "$WORK/state"
key_file = "$WORK/cluster.key"
node_timeout = 600
min_job_age = 30
[[nodes]]
names = "$RANGE"
cpus = 64
real_memory = 512000
gpus = { h100 = 8 }
[[partitions]]
name = "main"
nodes = "$RANGE"
default = true
default_mem_per_cpu = 1000
[[accounts]]
name = "teama"
[[accounts]]
name = "teamb"
[[quotas]]
account = "teama"
partition = "main"
guarantee = "gres/gpu:h100=$HALF"
[[quotas]]
account = "teamb"
partition = "main"
guarantee = "gres/gpu:h100=$HALF"
CONF
bench_ctld
until "$BIN/drover" squeue >/dev/null 2>&1; do sleep 0.2; done
"$BIN/drover-simnode" nodes --config "$WORK/cluster.toml" --count "$NODES" --warp 1 --heartbeat 60 > "$WORK/nodes.log" 2>&1 &
SIM=$!
PIDS+=($SIM)
t0=$(date +%s.%N)
until [ "$("$BIN/drover" sinfo -h -o '%D %t' 2>/dev/null | awk '$2=="idle"{print $1}')" = "$NODES" ]; do
    kill -0 "$SIM" 2>/dev/null || { echo "million.sh: drover-simnode exited: $(tail -n 3 "$WORK/nodes.log")" >&2; exit 1; }
    sleep 1
done
echo "nodes=$NODES registered_s=$(echo "$(date +%s.%N) - $t0" | bc)"

printf '#!/bin/sh\ntrue\n' > "$WORK/job.sh"
p50() { # p50 <runs>: median wall ms of `drover sbatch -H`, one process per run
    local i s e
    for ((i = 0; i < $1; i++)); do
        s=$(date +%s%N)
        "$BIN/drover" sbatch -H -o /dev/null "$WORK/job.sh" >/dev/null
        e=$(date +%s%N)
        echo $(((e - s) / 1000))
    done | sort -n | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] / 1000}'
}
EMPTY=$(p50 "$LAT_RUNS")
echo "sbatch_p50_empty_ms=$EMPTY"
"$BIN/drover" scancel -u "$(id -un)" -t PENDING

# One whole-node job per node (they run ten simulated hours), then the queue behind them.
"$BIN/drover-simnode" submit --socket "$SOCK" --count "$NODES" --clients 8 --gpus 8 --seconds 36000 >/dev/null
started() { tail -n 1 "$WORK/nodes.log" | sed -n 's/.*started=\([0-9]*\).*/\1/p'; }
until [ "$(started)" -ge "$NODES" ] 2>/dev/null; do sleep 1; done
t1=$(date +%s.%N)
"$BIN/drover-simnode" submit --socket "$SOCK" --count "$PENDING" --clients 8 --gpus 1 --seconds 3600 >/dev/null
t2=$(date +%s.%N)
echo "pending=$PENDING ingest_s=$(echo "$t2 - $t1" | bc) ingest_jobs_per_s=$(echo "$PENDING / ($t2 - $t1)" | bc)"

sleep "$PASS_WAIT"
"$BIN/drover" sdiag > "$WORK/sdiag.txt"
last=$(awk '/^Main schedule statistics/ {m = 1} m && /Last cycle:/ {print $3; exit}' "$WORK/sdiag.txt")
max=$(awk '/^Main schedule statistics/ {m = 1} m && /Max cycle:/ {print $3; exit}' "$WORK/sdiag.txt")
echo "pass_last_s=$(echo "scale=3; ${last:-0} / 1000000" | bc) pass_max_s=$(echo "scale=3; ${max:-0} / 1000000" | bc)"
echo "ctld_rss_mib=$(($(awk '/VmRSS/ {print $2}' "/proc/$CTLD/status") / 1024))"

FULL=$(p50 "$LAT_RUNS")
echo "sbatch_p50_full_ms=$FULL sbatch_p50_ratio=$(echo "scale=2; $FULL / $EMPTY" | bc)"

if id "$USER_NAME" >/dev/null 2>&1; then
    chmod 755 "$WORK" "$WORK/state" && chmod 644 "$WORK/job.sh"
    for i in 1 2 3 4 5; do
        runuser -u "$USER_NAME" -- env DROVER_SOCKET="$SOCK" "$BIN/drover" sbatch -H -o /dev/null "$WORK/job.sh" >/dev/null
    done
    for i in $(seq 10); do
        s=$(date +%s%N)
        "$BIN/drover" squeue -u "$USER_NAME" > "$WORK/squeue-user.txt"
        e=$(date +%s%N)
        echo $(((e - s) / 1000))
    done | sort -n | awk '{a[NR] = $1} END {printf "squeue_user_ms=%.2f", a[int((NR + 1) / 2)] / 1000}'
    echo " lines=$(($(wc -l < "$WORK/squeue-user.txt") - 1))"
else
    echo "squeue_user_ms=skipped (no user $USER_NAME)"
fi

# A restart with the queue: ctld stops on SIGTERM, a new one loads the same state.
kill -TERM "$CTLD"
wait "$CTLD" 2>/dev/null || true
t3=$(date +%s.%N)
RUST_LOG=${RUST_LOG:-warn} "$BIN/drover-ctld" --config "$WORK/cluster.toml" >> "$WORK/ctld.log" 2>&1 &
CTLD=$!
PIDS+=($CTLD)
# The user's jobs where there is such a user (else one job by id: `-u` of an unknown user never answers).
if id "$USER_NAME" >/dev/null 2>&1; then PROBE=(-u "$USER_NAME"); else PROBE=(-j 1); fi
until "$BIN/drover" squeue -h "${PROBE[@]}" >/dev/null 2>&1; do sleep 0.1; done
t4=$(date +%s.%N)
echo "restart_answer_s=$(echo "$t4 - $t3" | bc) ctld_rss_mib_after_restart=$(($(awk '/VmRSS/ {print $2}' "/proc/$CTLD/status") / 1024))"
