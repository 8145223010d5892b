#!/usr/bin/env bash
# Scale benchmark: a real ctld against NODES simulated nodes (8 GPUs each, one process, real
# protocol) and JOBS one-GPU jobs submitted over the client socket.
#
#   bench/scale.sh [NODES] [JOBS]        (defaults 10000 100000)
#
# Prints: registration time, acknowledged submission rate (8 clients), time until every job that
# fits is running, and job-query latency with the queue full, alone and under 50 concurrent pollers.
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-10000}
JOBS=${2:-100000}
. bench/lib.sh
bench_bin
bench_work scale
WIDTH=${#NODES}
cat > "$WORK/cluster.toml" <<CONF
cluster_name = "scale"
default_account = "shared"
[controller]
address = "127.0.0.1:$PORT"
state_dir = "$WORK/state"
key_file = "$WORK/cluster.key"
node_timeout = 300
min_job_age = 30
[[nodes]]
names = "sim[$(printf "%0${WIDTH}d" 1)-$NODES]"
cpus = 64
real_memory = 512000
gpus = { h100 = 8 }
[[partitions]]
name = "main"
nodes = "sim[$(printf "%0${WIDTH}d" 1)-$NODES]"
default = true
default_mem_per_cpu = 1000
[[accounts]]
name = "shared"
CONF
bench_ctld
t0=$(date +%s.%N)
# Jobs run 3600 simulated seconds at warp 1: they stay running while we measure.
"$BIN/drover-simnode" nodes --config "$WORK/cluster.toml" --count "$NODES" --warp 1 --heartbeat 30 > "$WORK/nodes.log" 2>&1 &
PIDS+=($!)
export DROVER_SOCKET=$SOCK
until [ "$("$BIN/drover" sinfo -h -o '%D %t' 2>/dev/null | awk '$2=="idle"{print $1}')" = "$NODES" ]; do sleep 0.5; done
t1=$(date +%s.%N)
echo "nodes=$NODES registered_in_s=$(echo "$t1 - $t0" | bc)"
"$BIN/drover-simnode" submit --socket "$SOCK" --count "$JOBS" --clients 8 --gpus 1 --seconds 3600
t2=$(date +%s.%N)
FIT=$(( NODES * 8 < JOBS ? NODES * 8 : JOBS ))
started() { tail -n 1 "$WORK/nodes.log" | sed -n 's/.*started=\([0-9]*\).*/\1/p'; }
until [ "$(started)" -ge "$FIT" ] 2>/dev/null; do sleep 1; done
t3=$(date +%s.%N)
echo "running=$FIT all_started_s_after_last_submit=$(echo "$t3 - $t2" | bc)"
"$BIN/drover-simnode" query --socket "$SOCK" --repeat 10 --clients 1
"$BIN/drover-simnode" query --socket "$SOCK" --repeat 10 --clients 50
s0=$(date +%s.%N); "$BIN/drover" squeue > /dev/null; s1=$(date +%s.%N)
echo "squeue_cli_ms=$(echo "($s1 - $s0) * 1000" | bc)"
# Launches ctld gave up on because a node's report did not show them within the launch grace.
echo "launches_declared_lost=$(grep -c 'node no longer holds the job' "$WORK/ctld.log" || true)"
