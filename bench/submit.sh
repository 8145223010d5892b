#!/usr/bin/env bash
# Where one `sbatch` goes, and two builds side by side. For each build folder given (holding
# drover, drover-ctld and drover-noded), a `drover up` cluster of 4 nodes x 2 CPUs with ctld's
# /metrics; then ROUNDS rounds, each running N times, on every cluster in turn (interleaved, so a
# machine that slows down or speeds up during the run weighs on every build alike):
#   /bin/true                          the cost of starting any process from the shell loop
#   sbatch --version                   + starting Drover's binary, before any work
#   sbatch -H --wrap true -o /dev/null + the submission (config, connection, request, commit)
# and, from ctld's own histogram, the time from reading the request to writing its answer.
# Then, per build, what one submission costs in CPU and system calls: the client's task-clock
# (`perf stat`, where perf exists), ctld's user+system time, and ctld's fsync/pwrite64/openat
# counts (`strace -c`, where strace exists) over COUNT_RUNS submissions.
#
#   bench/submit.sh DIR [DIR...]    e.g. bench/submit.sh /tmp/before target/release
#
# Environment: ROUNDS (default 7), N (runs per round and command, default 200), COUNT_RUNS
# (default 200). Prints medians over the rounds (microseconds per run) and every round's figure.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/submit.sh DIR [DIR...]" >&2; exit 2; }
ROUNDS=${ROUNDS:-7}
N=${N:-200}
COUNT_RUNS=${COUNT_RUNS:-200}
for v in ROUNDS N COUNT_RUNS; do
    case "${!v}" in ''|*[!0-9]*|0) echo "submit.sh: $v must be a positive integer" >&2; exit 2 ;; esac
done
for dir in "$@"; do
    for b in drover drover-ctld drover-noded; do
        [ -x "$dir/$b" ] || { echo "submit.sh: no $b in $dir" >&2; exit 2; }
    done
done
WORK=$(mktemp -d /tmp/drover-submit-XXXXXX)
DIRS=("$@")
down_all() {
    local k
    for k in "${!DIRS[@]}"; do
        env -u DROVER_CONF -u DROVER_SOCKET "${DIRS[$k]}/drover" down --home "$WORK/$k" >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap down_all EXIT

for k in "${!DIRS[@]}"; do
    cat >"$WORK/source-$k.toml" <<CONF
cluster_name = "submit$k"
default_account = "teama"
[controller]
address = "127.0.0.1:1"
state_dir = "state"
min_job_age = 5
[metrics]
listen = "127.0.0.1:0"
[[nodes]]
names = "n[1-4]"
cpus = 2
real_memory = 4000
[[partitions]]
name = "main"
nodes = "n[1-4]"
default = true
default_mem_per_cpu = 100
[[accounts]]
name = "teama"
[[users]]
name = "$(id -un)"
default_account = "teama"
CONF
    env -u DROVER_CONF -u DROVER_SOCKET "${DIRS[$k]}/drover" up --home "$WORK/$k" --config "$WORK/source-$k.toml" \
        >"$WORK/up-$k.log" 2>&1 9>&- || { cat "$WORK/up-$k.log" >&2; exit 1; }
done

use() { # use K: this shell talks to cluster K
    export DROVER_SOCKET=$WORK/$1/ctld/ctld.sock DROVER_CONF=$WORK/$1/cluster.toml
    SBATCH=$WORK/$1/bin/sbatch
    METRICS=$(cat "$(find "$WORK/$1" -name metrics.addr | head -n 1)")
}
per_run() { # per_run CMD...: microseconds per run of CMD over N runs
    local s e i
    s=$(date +%s%N)
    for ((i = 0; i < N; i++)); do "$@" >/dev/null 2>&1; done
    e=$(date +%s%N)
    echo $(((e - s) / N / 1000))
}
served() { # ctld's summed seconds answering submissions
    curl -s "http://$METRICS/metrics" | awk '/^drover_rpc_request_duration_seconds_sum\{request="submit"\}/ {v = $2} END {print v + 0}'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

declare -A R
for ((r = 0; r < ROUNDS; r++)); do
    for k in "${!DIRS[@]}"; do
        use "$k"
        R[$k,true]+="$(per_run /bin/true) "
        R[$k,version]+="$(per_run "$SBATCH" --version) "
        m0=$(served)
        R[$k,held]+="$(per_run "$SBATCH" -H --wrap true -o /dev/null) "
        m1=$(served)
        R[$k,server]+="$(python3 -c "print(round(($m1 - $m0) * 1e6 / $N))") "
        "$WORK/$k/bin/scancel" -u "$(id -un)"
    done
done

echo "# bench/submit.sh: $(nproc) CPUs, kernel $(uname -r), $(date -u +%FT%TZ); ROUNDS=$ROUNDS N=$N"
echo "microseconds per run, median of $ROUNDS interleaved rounds (every round in brackets)"
printf '%-4s %-34s %8s %8s %8s %8s\n' "#" build true version held ctld
for k in "${!DIRS[@]}"; do
    printf '%-4s %-34s %8s %8s %8s %8s\n' "$k" "${DIRS[$k]}" "$(echo "${R[$k,true]}" | median)" \
        "$(echo "${R[$k,version]}" | median)" "$(echo "${R[$k,held]}" | median)" "$(echo "${R[$k,server]}" | median)"
done
for k in "${!DIRS[@]}"; do
    echo "  $k held: [${R[$k,held]% }]  ctld: [${R[$k,server]% }]"
done

echo "per submission, over $COUNT_RUNS held sbatch:"
for k in "${!DIRS[@]}"; do
    use "$k"
    pid=$(cat "$WORK/$k/run/ctld.pid")
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    for ((i = 0; i < COUNT_RUNS; i++)); do "$SBATCH" -H --wrap true -o /dev/null >/dev/null; done
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    line="  $k ctld CPU $(((c1 - c0) * 1000000 / $(getconf CLK_TCK) / COUNT_RUNS)) us"
    if command -v perf >/dev/null && perf stat -x, -e task-clock true >/dev/null 2>&1; then
        line+=", client task-clock $(perf stat -x, -e task-clock -r "$COUNT_RUNS" "$SBATCH" -H --wrap true -o /dev/null \
            2>&1 >/dev/null | awk -F, '/task-clock/ {printf "%d us", $1 * 1000}')"
    fi
    if command -v strace >/dev/null; then
        strace -c -f -p "$pid" -o "$WORK/strace-$k.txt" 2>/dev/null &
        sp=$!
        sleep 0.5
        for ((i = 0; i < COUNT_RUNS; i++)); do "$SBATCH" -H --wrap true -o /dev/null >/dev/null; done
        sleep 0.3
        kill -INT "$sp"
        wait "$sp" 2>/dev/null || true
        for call in fsync pwrite64 openat; do
            calls=$(awk -v c="$call" '$NF == c {print ($(NF - 1) ~ /^[0-9]+$/) ? $(NF - 1) : $(NF - 2)}' "$WORK/strace-$k.txt")
            line+=", ctld $call $(python3 -c "print(round(${calls:-0} / $COUNT_RUNS, 2))")"
        done
    fi
    echo "$line"
    "$WORK/$k/bin/scancel" -u "$(id -un)"
done
