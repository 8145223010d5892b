# Shared by the single-daemon benchmarks (queue.sh, scale.sh, latency.sh, simulate_load.sh); sourced, not run, from
# the repository root.

# bench_bin: sets BIN to DROVER_BIN, or builds drover, drover-ctld and drover-simnode (release)
# and sets BIN to their folder.
bench_bin() {
    if [ -n "${DROVER_BIN:-}" ]; then
        BIN=$DROVER_BIN
    else
        cargo build --release --quiet -p drover-ctld -p drover-cli -p drover-sim
        BIN=${CARGO_TARGET_DIR:-$PWD/target}/release
    fi
}

# bench_work <name>: sets WORK to a scratch folder and PORT to a free TCP port; on exit the
# processes listed in PIDS are killed and WORK is removed.
bench_work() {
    WORK=$(mktemp -d "/tmp/drover-$1-XXXXXX")
    PIDS=()
    trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
}

# bench_ctld: starts drover-ctld on WORK/cluster.toml (its key made here, its log in
# WORK/ctld.log at RUST_LOG, default warn); sets CTLD (its pid, also in PIDS) and SOCK, exports
# DROVER_SOCKET, and returns once the socket exists.
bench_ctld() {
    "$BIN/drover" keygen "$WORK/cluster.key" >/dev/null
    mkdir -p "$WORK/state"
    RUST_LOG=${RUST_LOG:-warn} "$BIN/drover-ctld" --config "$WORK/cluster.toml" 2> "$WORK/ctld.log" &
    CTLD=$!
    PIDS+=($CTLD)
    SOCK=$WORK/state/ctld.sock
    export DROVER_SOCKET=$SOCK
    until [ -S "$SOCK" ]; do sleep 0.1; done
}
