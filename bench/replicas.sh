#!/usr/bin/env bash
# Replicated controllers (three replicas on loopback, docs/admin/ha.md) against one controller:
# the submission latency of one client (sequential `sbatch -H`, p50 and p90 of each process
# from start to exit) and the rate of 4 clients, each measured on the same machine in the same
# run. Jobs are held so that scheduling does not mix in; no nodes run.
#
#   bench/replicas.sh [jobs]          (default 200 per measurement)
#
# DROVER_BIN=<dir> uses the binaries there (e.g. target/debug) instead of a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${1:-200}
if [ -n "${DROVER_BIN:-}" ]; then
    BIN=$DROVER_BIN
else
    cargo build --release --quiet -p drover-ctld -p drover-cli
    BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
WORK=$(mktemp -d /tmp/drover-replicas-XXXXXX)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# config <dir> <replicas: 0 or 3>
config() {
    local dir=$1 replicas=$2
    mkdir -p "$dir"
    {
        printf 'cluster_name = "bench"\ndefault_account = "shared"\n[controller]\naddress = "127.0.0.1:%s"\nstate_dir = "state"\n' "$(port)"
        for id in $(seq "$replicas"); do
            printf '[[controller.replicas]]\nid = %s\naddress = "127.0.0.1:%s"\nraft_address = "127.0.0.1:%s"\nstate_dir = "r%s"\n' \
                "$id" "$(port)" "$(port)" "$id"
        done
        printf '[[nodes]]\nnames = "n1"\ncpus = 4\nreal_memory = 8000\n[[partitions]]\nname = "main"\nnodes = "n1"\ndefault = true\n'
        printf '[[accounts]]\nname = "shared"\n[[users]]\nname = "%s"\ndefault_account = "shared"\n' "$(id -un)"
    } > "$dir/cluster.toml"
    "$BIN/drover" keygen "$dir/cluster.key" >/dev/null
    mkdir -p "$dir/bin"
    ln -sf "$BIN/drover" "$dir/bin/sbatch"
    ln -sf "$BIN/drover" "$dir/bin/scontrol"
}

# start <dir> <replicas>: starts the controller(s), returns once a submission goes through
start() {
    local dir=$1 replicas=$2
    if [ "$replicas" -eq 0 ]; then
        RUST_LOG=warn "$BIN/drover-ctld" --config "$dir/cluster.toml" > "$dir/ctld.log" 2>&1 &
        PIDS+=($!)
    else
        for id in $(seq "$replicas"); do
            RUST_LOG=warn "$BIN/drover-ctld" --config "$dir/cluster.toml" --replica "$id" > "$dir/ctld-$id.log" 2>&1 &
            PIDS+=($!)
        done
    fi
    for _ in $(seq 300); do
        DROVER_CONF="$dir/cluster.toml" "$dir/bin/sbatch" -Q -H --wrap true >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "the controller in $dir did not come up" >&2
    exit 1
}

# latency <dir>: p50 and p90 (ms) of N sequential submissions
latency() {
    local dir=$1 times=()
    for _ in $(seq "$N"); do
        local t0 t1
        t0=$(date +%s%N)
        DROVER_CONF="$dir/cluster.toml" "$dir/bin/sbatch" -Q -H --wrap true
        t1=$(date +%s%N)
        times+=($(((t1 - t0) / 1000)))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f %.1f\n", a[int(NR*0.5)]/1000, a[int(NR*0.9)]/1000}'
}

# rate <dir>: submissions per second of 4 clients, N in all
rate() {
    local dir=$1 start end
    start=$(date +%s.%N)
    for _ in 1 2 3 4; do
        ( for _ in $(seq $((N / 4))); do DROVER_CONF="$dir/cluster.toml" "$dir/bin/sbatch" -Q -H --wrap true; done ) &
    done
    wait
    end=$(date +%s.%N)
    echo "scale=1; $N / ($end - $start)" | bc
}

printf '| controller | sequential sbatch p50 (ms) | p90 (ms) | 4 clients (jobs/s) |\n|---|---|---|---|\n'
for replicas in 0 3; do
    dir="$WORK/r$replicas"
    config "$dir" "$replicas"
    start "$dir" "$replicas"
    read -r p50 p90 < <(latency "$dir")
    jobs=$(rate "$dir")
    name=$([ "$replicas" -eq 0 ] && echo "one (embedded)" || echo "three replicas")
    printf '| %s | %s | %s | %s |\n' "$name" "$p50" "$p90" "$jobs"
    kill "${PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    PIDS=()
done
