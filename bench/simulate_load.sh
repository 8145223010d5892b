#!/usr/bin/env bash
# Other users while an admin runs `drover simulate`: a release ctld whose accounting database
# holds the synthetic week of bench/simulate.sh (written by drover-simbench), then a plain user's
# `sbatch -H` and `squeue` latency (p50 and p99 of LAT_RUNS sequential processes each) measured
# first with nothing else running, then while root replays that week through `drover simulate`
# (both runs at once, on two threads at nice 10). Both measurements come from the same run
# against the same daemon; the ratio of the p50s is what to read.
#
#   bench/simulate_load.sh [NODES] [JOBS] [DAYS]       (defaults 1000 100000 7)
#   SIM_USER=alice LAT_RUNS=100 bench/simulate_load.sh
#
# Needs root (the plain user runs through runuser) and the user SIM_USER (default alice).
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000} JOBS=${2:-100000} DAYS=${3:-7}
LAT_RUNS=${LAT_RUNS:-100}
SIM_USER=${SIM_USER:-alice}
id "$SIM_USER" >/dev/null 2>&1 || { echo "simulate_load.sh: no user $SIM_USER" >&2; exit 2; }
. bench/lib.sh
bench_bin
bench_work simload
# The plain user reads the config and reaches ctld's socket in here.
chmod 755 "$WORK"
DB=/tmp/drover-simbench-$NODES-$JOBS-$DAYS.db
CONFIGS=$WORK "$BIN/drover-simbench" "$DB" "$NODES" "$JOBS" "$DAYS" >/dev/null
mkdir -p "$WORK/state"
cp "$DB" "$WORK/state/drover.db"
# The benchmark's config, served: its own address, state directory and key, and the plain user.
sed -i -e "s|127.0.0.1:6817|127.0.0.1:$PORT|" -e "s|state_dir = \"state\"|state_dir = \"$WORK/state\"\nkey_file = \"$WORK/cluster.key\"|" "$WORK/cluster.toml"
printf '[[users]]\nname = "%s"\ndefault_account = "team7"\n' "$SIM_USER" >> "$WORK/cluster.toml"
chmod 644 "$WORK/cluster.toml" "$WORK/candidate.toml"
bench_ctld
export DROVER_CONF=$WORK/cluster.toml
as_user() { runuser -u "$SIM_USER" -- env DROVER_CONF="$DROVER_CONF" "$@"; }
# lat <label> <command...>: LAT_RUNS sequential runs as the plain user; prints p50 and p99 in ms.
lat() {
    local label=$1 s0 s1 lat=()
    shift
    as_user "$@" >/dev/null
    for _ in $(seq "$LAT_RUNS"); do
        s0=$(date +%s%N)
        as_user "$@" >/dev/null
        s1=$(date +%s%N)
        lat+=($(( (s1 - s0) / 1000 )))
    done
    printf '%s\n' "${lat[@]}" | sort -n | awk -v label="$label" -v n="$LAT_RUNS" \
        '{v[NR]=$1} END {printf "%s p50_ms=%.2f p99_ms=%.2f\n", label, v[int((n+1)/2)]/1000, v[int(n*0.99)]/1000}'
}
measure() {
    lat "$1 sbatch -H" "$BIN/drover" sbatch -H -Q --wrap true
    lat "$1 squeue" "$BIN/drover" squeue -h
}
measure idle
FROM=$(date -u -d "@$(( 1767225600 ))" +%Y-%m-%dT%H:%M:%S)
TO=$(date -u -d "@$(( 1767225600 + DAYS * 86400 ))" +%Y-%m-%dT%H:%M:%S)
start=$(date +%s.%N)
"$BIN/drover" simulate --config "$WORK/candidate.toml" --from "$FROM" --to "$TO" --max-jobs 250000 > "$WORK/simulate.out" 2>&1 &
SIM=$!
sleep 2
measure simulating
still=$(kill -0 "$SIM" 2>/dev/null && echo yes || echo no)
wait "$SIM" || { echo "drover simulate failed:" >&2; cat "$WORK/simulate.out" >&2; exit 1; }
end=$(date +%s.%N)
echo "simulate wall_s=$(echo "$end - $start" | bc) (still running when the measurement ended: $still)"
head -3 "$WORK/simulate.out"
