#!/usr/bin/env bash
# Side-by-side benchmark: Drover and the real Slurm 22.05 baseline cluster (../shared/baseline) on
# this machine, same cluster shape, same workloads, one command. Prints one markdown table
# (metric | Drover | Slurm | ratio, ratio > 1 meaning Drover is better) and writes it with the raw
# data under bench/results/<utc>/.
#
#   bench/compare.sh                 full run (N=1000, BIG=100000; tens of minutes per system)
#   QUICK=1 bench/compare.sh         harness check (N=100, BIG=2000; a few minutes)
#
# Knobs (environment):
#   N=1000           jobs per ingest / end-to-end workload        BIG=100000  deepest queue
#   SIZES="N BIG/10 BIG"  queue depths for squeue latency        CLIENTS="4 32"  ingest clients
#   SLOTS=8|32       cluster shape: 4 nodes x 2 or x 8 CPUs       PROFILE=fast|default  Slurm profile
#   POLLERS=50       concurrent squeue pollers                   FILL_CLIENTS=8  clients filling the queue
#   LAT_RUNS=200     sbatch latency samples at BIG               SQ_RUNS=20  squeue samples (alone)
#   LOAD_RUNS=10 LOAD_MAX=60   squeue samples / seconds bound under load
#   SACCT_RUNS=10 SACCT_WAIT=300  sacct samples / seconds to wait for accounting to hold all jobs
#   E2E_TIMEOUT=1800 CANCEL_TIMEOUT=900   bounds (seconds)
#   ONLY=both|drover|slurm      DROVER_BIN=/path/to/drover (else: cargo build --release)
#   BASELINE_SRC=/work/shared/baseline (copied to BASELINE=/tmp/baseline, which is replaced)
#   SLURM_EXTRA_CONF="Key=value ..."  lines appended to the copied Slurm profile (experiments,
#                    and the harness's own failure test)
#
# Safety: Slurm's daemons are always brought down again (`down.sh --purge`, in the EXIT trap), as
# are Drover's; the harness refuses to start when a slurmctld already runs (someone else's cluster).
# Every command is invoked by absolute path: Drover's applets through the links `drover up` makes
# in the scratch DROVER_HOME/bin, Slurm's as /usr/bin/<name>.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$ROOT/bench/compare_lib.py"
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    N=${N:-100}
    BIG=${BIG:-2000}
    LAT_RUNS=${LAT_RUNS:-50}
    SQ_RUNS=${SQ_RUNS:-10}
    LOAD_RUNS=${LOAD_RUNS:-5}
    LOAD_MAX=${LOAD_MAX:-20}
    SACCT_RUNS=${SACCT_RUNS:-5}
    SACCT_WAIT=${SACCT_WAIT:-60}
fi
N=${N:-1000}
BIG=${BIG:-100000}
SIZES=${SIZES:-"$N $((BIG / 10)) $BIG"}
CLIENTS=${CLIENTS:-"4 32"}
SLOTS=${SLOTS:-8}
PROFILE=${PROFILE:-fast}
POLLERS=${POLLERS:-50}
FILL_CLIENTS=${FILL_CLIENTS:-8}
LAT_RUNS=${LAT_RUNS:-200}
SQ_RUNS=${SQ_RUNS:-20}
LOAD_RUNS=${LOAD_RUNS:-10}
LOAD_MAX=${LOAD_MAX:-60}
SACCT_RUNS=${SACCT_RUNS:-10}
SACCT_WAIT=${SACCT_WAIT:-300}
E2E_TIMEOUT=${E2E_TIMEOUT:-1800}
CANCEL_TIMEOUT=${CANCEL_TIMEOUT:-900}
ONLY=${ONLY:-both}
BASELINE_SRC=${BASELINE_SRC:-/work/shared/baseline}
BASELINE=${BASELINE:-/tmp/baseline}
SLURM_EXTRA_CONF=${SLURM_EXTRA_CONF:-}

log() { printf '[compare %s] %s\n' "$(date -u +%T)" "$*" >&2; }
die() { printf '[compare] ERROR: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------------------- checks
case "$SLOTS" in 8) CPUS=2 ;; 32) CPUS=8 ;; *) die "SLOTS must be 8 (4 nodes x 2 CPUs) or 32 (4 x 8)" ;; esac
case "$PROFILE" in fast) MIN_JOB_AGE=5 ;; default) MIN_JOB_AGE=300 ;; *) die "PROFILE must be fast or default" ;; esac
case "$ONLY" in both|drover|slurm) ;; *) die "ONLY must be both, drover or slurm" ;; esac
for v in N BIG POLLERS FILL_CLIENTS LAT_RUNS SQ_RUNS LOAD_RUNS LOAD_MAX SACCT_RUNS SACCT_WAIT E2E_TIMEOUT CANCEL_TIMEOUT; do
    case "${!v}" in ''|*[!0-9]*|0) die "$v must be a positive integer (got '${!v}')" ;; esac
done
for s in $SIZES $CLIENTS; do case "$s" in ''|*[!0-9]*|0) die "SIZES and CLIENTS must hold positive integers" ;; esac; done
[ "$(id -u)" = 0 ] || die "must run as root (Slurm's scripts start daemons and write /etc/slurm)"
command -v python3 >/dev/null || die "python3 is needed"
HYPERFINE=$(command -v hyperfine || true)
want() { [ "$ONLY" = both ] || [ "$ONLY" = "$1" ]; }
# Checked here too, not only before Slurm's turn, so a full run does not fail after the Drover half.
if want slurm; then
    [ -x "$BASELINE_SRC/up.sh" ] && [ -x "$BASELINE_SRC/down.sh" ] || die "no Slurm baseline (up.sh, down.sh) in $BASELINE_SRC"
    if pgrep -a slurmctld >&2; then
        die "a slurmctld is already running (someone else's cluster?); not touching it. Stop it with its own down.sh first"
    fi
fi

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT="$ROOT/bench/results/$STAMP"
RAW="$OUT/raw"
mkdir -p "$RAW"
RESULTS="$OUT/results.tsv"
printf 'system\tmetric\tlabel\tbetter\ttarget\tvalue\tunit\tnote\n' >"$RESULTS"
WORK=$(mktemp -d /tmp/drover-compare-XXXXXX)
chmod 755 "$WORK"

# One run at a time on this machine: both clusters use fixed names and Slurm fixed ports. The
# daemons are started with fd 9 closed, so a leftover one cannot hold the lock.
exec 9>/tmp/drover-compare.lock
flock -n 9 || die "another bench/compare.sh is running (lock /tmp/drover-compare.lock)"

# ------------------------------------------------------------------------------- cleanup
BG=()               # background pids (ingest clients, pollers) to stop on the way out
DHOME=""            # Drover's scratch home once up
SLURM_TOUCHED=0     # set before up.sh runs: from then on down.sh must run
cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${BG[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${BG[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -n "$DHOME" ] && [ -d "$DHOME/run" ]; then
        "$DROVER" down --home "$DHOME" >>"$RAW/drover-down.log" 2>&1 || log "drover down failed (see $RAW/drover-down.log)"
        cp -r "$DHOME/log" "$RAW/drover-logs" 2>/dev/null || true
    fi
    if [ "$SLURM_TOUCHED" = 1 ]; then
        log "bringing Slurm down (down.sh --purge)"
        (cd "$BASELINE" && ./down.sh --purge) >>"$RAW/slurm-down.log" 2>&1 || log "down.sh failed (see $RAW/slurm-down.log)"
        cp /var/log/slurm/slurmctld.log "$RAW/slurmctld.log" 2>/dev/null || true
        if pgrep -a slurmctld >&2; then
            log "ERROR: a slurmctld is still running after down.sh"
            [ "$rc" != 0 ] || rc=1
        fi
    fi
    rm -rf "$WORK"
    if [ "$rc" != 0 ]; then log "failed (exit $rc); partial results and logs in $OUT"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------------------- helpers
now() { date +%s.%N; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
commas() { echo "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'; }
fdiv() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }
# put <metric> <label> <better: higher|lower|info> <target> <value> <unit> [note]
put() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$SYS" "$1" "$2" "$3" "$4" "$5" "$6" "${7:-}" >>"$RESULTS"
    log "$SYS: $2 = $5 $6${7:+ ($7)}"
}
# The system under test's commands, by absolute path.
use_drover() {
    SYS=drover
    SBATCH=$DHOME/bin/sbatch SQUEUE=$DHOME/bin/squeue SACCT=$DHOME/bin/sacct SCANCEL=$DHOME/bin/scancel
    export DROVER_SOCKET=$DHOME/ctld/ctld.sock DROVER_CONF=$DHOME/cluster.toml
}
use_slurm() {
    SYS=slurm
    SBATCH=/usr/bin/sbatch SQUEUE=/usr/bin/squeue SACCT=/usr/bin/sacct SCANCEL=/usr/bin/scancel
    unset DROVER_SOCKET DROVER_CONF
}
count() { "$SQUEUE" -h -n "$1" -o %i 2>/dev/null | wc -l; }    # queued (not ended) jobs named $1
records() { "$SQUEUE" -h -t all -o %i 2>/dev/null | wc -l; }   # every record the controller holds
submit_loop() { # submit_loop <count> <errfile> <sbatch args...>: one sbatch process per job; prints failures
    local n=$1 err=$2 fails=0 i
    shift 2
    for ((i = 0; i < n; i++)); do
        "$SBATCH" "$@" -o /dev/null --wrap true >/dev/null 2>>"$err" || fails=$((fails + 1))
    done
    echo "$fails"
}
parallel_submit() { # parallel_submit <clients> <per-client> <tag> <sbatch args...>: failures in PFAILS
    local clients=$1 per=$2 tag=$3 k pids=() f
    shift 3
    for ((k = 0; k < clients; k++)); do
        submit_loop "$per" "$RAW/$SYS-$tag-errors.txt" "$@" >"$WORK/$tag.$k.fails" &
        pids+=($!)
        BG+=($!)
    done
    for k in "${pids[@]}"; do wait "$k"; done
    BG=()
    PFAILS=0
    for ((k = 0; k < clients; k++)); do
        f=$(cat "$WORK/$tag.$k.fails")
        PFAILS=$((PFAILS + f))
    done
}
cancel_name() { # cancel_name <name>: cancel every job of that name, wait (bounded by CANCEL_TIMEOUT,
    # scancel itself included) until squeue shows none; seconds in CANCEL_S, and CANCEL_NOTE says
    # how many were left when the bound ran out (empty when all are gone)
    local t0 deadline again left
    t0=$(now)
    CANCEL_NOTE=
    deadline=$((SECONDS + CANCEL_TIMEOUT))
    timeout "$CANCEL_TIMEOUT" "$SCANCEL" -n "$1" >/dev/null 2>&1 || true
    again=$((SECONDS + 10))
    while left=$(count "$1"); [ "$left" != 0 ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            CANCEL_NOTE="not finished: $left still queued after ${CANCEL_TIMEOUT}s"
            log "$SYS: $CANCEL_NOTE"
            break
        fi
        sleep 0.5
        if [ "$SECONDS" -ge "$again" ]; then   # a job submitted while scancel ran, or an RPC that failed
            timeout $((deadline > SECONDS ? deadline - SECONDS : 1)) "$SCANCEL" -n "$1" >/dev/null 2>&1 || true
            again=$((SECONDS + 10))
        fi
    done
    CANCEL_S=$(fsub "$(now)" "$t0")
}
settle() { # wait (bounded) until the controller has purged ended job records
    local t0 limit=$((MIN_JOB_AGE + 90)) r
    t0=$SECONDS
    r=$(records)
    while [ "$r" -gt 20 ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 2; r=$(records); done
    log "$SYS: settled in $((SECONDS - t0)) s, $r job records left in the controller"
}
# latency <label> <runs> <max-seconds|unbounded> <command...>: sets MED P99 (ms), RUNS, BAD
latency() {
    measure "$@" >"$WORK/latency"
    read -r MED P99 RUNS BAD <"$WORK/latency" || die "$SYS: no latency figures for $1"
}
measure() {
    local label=$1 runs=$2 max=$3
    shift 3
    if [ -n "$HYPERFINE" ] && [ "$max" = unbounded ]; then
        "$HYPERFINE" -N --warmup 2 --runs "$runs" -i --export-json "$RAW/$SYS-$label.hf.json" "$*" \
            >"$RAW/$SYS-$label.hf.txt" 2>&1
        python3 "$LIB" hyperfine "$RAW/$SYS-$label.hf.json"
    else
        [ "$max" = unbounded ] && max=600
        python3 "$LIB" lat "$RAW/$SYS-$label.json" --runs "$runs" --warmup 1 --max-seconds "$max" -- "$@"
    fi
}
poll_start() { # starts POLLERS concurrent squeue loops; sets POLLER
    python3 "$LIB" poll "$RAW/$SYS-$1.poll.json" --clients "$POLLERS" -- "$SQUEUE" &
    POLLER=$!
    BG+=($POLLER)
    sleep 2
}
poll_stop() {
    kill -TERM "$POLLER"
    wait "$POLLER" || true
    BG=()
}
ms_target() { # the issue's squeue targets, by queue depth
    case "$1" in
        10000) echo "≤ 1/8 of Slurm (ratio ≥ 8×)" ;;
        100000) echo "< 50 ms (Drover)" ;;
        *) echo "" ;;
    esac
}

# ------------------------------------------------------------------------------- workloads
run_workloads() { # the same sequence on the system selected by use_drover/use_slurm
    local tag="cmp$$" name fails t0 t1 t2 per clients start_iso med p99 runs bad rows size filled label
    mkdir -p "$WORK/cwd" && cd "$WORK/cwd"
    local queued
    queued=$("$SQUEUE" -h -o %i | wc -l)
    [ "$queued" = 0 ] || die "$SYS: the queue is not empty ($queued jobs); refusing to measure"

    # 1. sequential sbatch, held jobs: pure ingest, one process per job
    name="${tag}_seqh"
    t0=$(now)
    fails=$(submit_loop "$N" "$RAW/$SYS-seqh-errors.txt" -H -J "$name")
    t1=$(now)
    [ "$(count "$name")" = $((N - fails)) ] || die "$SYS: submitted $((N - fails)) held jobs, squeue shows $(count "$name")"
    put seq_held "sequential sbatch, $N held jobs (jobs/s)" higher "≥ 5×" "$(fdiv $((N - fails)) "$(fsub "$t1" "$t0")")" jobs/s \
        "$([ "$fails" = 0 ] || echo "$fails failed")"
    cancel_name "$name"

    # 2. concurrent ingest: CLIENTS shell loops, one sbatch process per held job
    for clients in $CLIENTS; do
        per=$(((N + clients - 1) / clients))
        name="${tag}_in$clients"
        t0=$(now)
        parallel_submit "$clients" "$per" "in$clients" -H -J "$name"
        fails=$PFAILS
        t1=$(now)
        [ "$(count "$name")" = $((clients * per - fails)) ] || die "$SYS: $clients clients submitted $((clients * per - fails)) jobs, squeue shows $(count "$name")"
        put "ingest$clients" "concurrent sbatch, $clients clients, $((clients * per)) held jobs (jobs/s)" higher "≥ 10×" \
            "$(fdiv $((clients * per - fails)) "$(fsub "$t1" "$t0")")" jobs/s "$([ "$fails" = 0 ] || echo "$fails failed")"
        cancel_name "$name"
    done

    # 3. end to end: N sequential `true` jobs, first submit until none is queued, then sacct must say COMPLETED
    name="${tag}_e2e"
    start_iso=$(date +%FT%T)
    sleep 1   # sacct -S has one-second resolution
    t0=$(now)
    fails=$(submit_loop "$N" "$RAW/$SYS-e2e-errors.txt" -J "$name")
    t1=$(now)
    local deadline=$((SECONDS + E2E_TIMEOUT))
    while [ "$(count "$name")" != 0 ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "$SYS: end-to-end jobs still queued after ${E2E_TIMEOUT}s"
        sleep 0.25
    done
    t2=$(now)
    put seq_run "sequential sbatch, $N runnable jobs (jobs/s; jobs start meanwhile)" higher "≥ 5×" \
        "$(fdiv $((N - fails)) "$(fsub "$t1" "$t0")")" jobs/s "$([ "$fails" = 0 ] || echo "$fails failed")"
    put e2e "end to end, $N \`true\` jobs, first submit → all ended (jobs/s)" higher "≥ 10×" \
        "$(fdiv $((N - fails)) "$(fsub "$t2" "$t0")")" jobs/s "$(fsub "$t2" "$t0") s"
    # accounting must show every job COMPLETED (Slurm's slurmdbd commits with a delay: bounded wait)
    local acct0=$SECONDS done_n=0
    while :; do
        done_n=$("$SACCT" -X -n -P --name="$name" -S "$start_iso" -o JobID,State 2>/dev/null | grep -c '|COMPLETED$' || true)
        [ "$done_n" -ge $((N - fails)) ] && break
        [ $((SECONDS - acct0)) -lt "$SACCT_WAIT" ] || break
        sleep 1
    done
    [ "$done_n" -ge $((N - fails)) ] || die "$SYS: only $done_n of $((N - fails)) end-to-end jobs COMPLETED in sacct after ${SACCT_WAIT}s"
    log "$SYS: sacct shows all $done_n jobs COMPLETED $((SECONDS - acct0)) s after the queue drained"

    # 4. sacct over those N jobs
    latency sacct_small "$SQ_RUNS" unbounded \
        "$SACCT" -X -n -P "--name=$name" -S "$start_iso" -o JobID,JobName,State,ExitCode,Elapsed
    put sacct_small "\`sacct -X -P\` over the $N end-to-end jobs (ms, median)" lower "" "$MED" ms
    settle

    # 5. squeue with SIZES held jobs queued, alone and under POLLERS pollers; sbatch latency at the last
    name="${tag}_q"
    filled=0
    for size in $SIZES; do
        if [ "$size" -gt "$filled" ]; then
            per=$(((size - filled + FILL_CLIENTS - 1) / FILL_CLIENTS))
            t0=$(now)
            parallel_submit "$FILL_CLIENTS" "$per" "fill$size" -H -J "$name"
            fails=$PFAILS
            t1=$(now)
            log "$SYS: filled to $((filled + FILL_CLIENTS * per - fails)) held jobs at $(fdiv $((FILL_CLIENTS * per - fails)) "$(fsub "$t1" "$t0")") jobs/s ($fails failed)"
            filled=$(count "$name")
        fi
        label=$(commas "$filled")
        latency "squeue$size" "$SQ_RUNS" unbounded "$SQUEUE"
        put "squeue$size" "\`squeue\`, $label held jobs queued (ms, median)" lower "$(ms_target "$size")" "$MED" ms \
            "$([ "$filled" -ge "$size" ] || echo "only $filled queued")"
        poll_start "squeue$size"
        latency "squeue${size}_load" "$LOAD_RUNS" "$LOAD_MAX" "$SQUEUE"
        poll_stop
        put "squeue${size}_load" "\`squeue\`, $label held jobs queued, while $POLLERS clients poll it (ms, median)" lower "" "$MED" ms \
            "$([ "$RUNS" -ge "$LOAD_RUNS" ] || echo "$RUNS runs in ${LOAD_MAX}s")"
        python3 "$LIB" summary "$RAW/$SYS-squeue$size.poll.json" >"$WORK/poll"
        read -r rate med p99 runs bad <"$WORK/poll"
        put "poll$size" "\`squeue\` calls answered per second to $POLLERS pollers, $label queued" higher "" "$rate" calls/s \
            "$([ "$bad" = 0 ] || echo "$bad failed")"
    done
    label=$(commas "$filled")
    latency sbatch_lat "$LAT_RUNS" 600 "$SBATCH" -J "${tag}_lat" -o /dev/null --wrap true
    put sbatch_p50 "\`sbatch\` latency, $label jobs queued, p50 (ms)" lower "" "$MED" ms "$RUNS runs"
    put sbatch_p99 "\`sbatch\` latency, $label jobs queued, p99 (ms)" lower "" "$P99" ms "$([ "$BAD" = 0 ] || echo "$BAD failed")"
    cancel_name "${tag}_lat"
    cancel_name "$name"
    put cancel_big "\`scancel -n\` of $label held jobs until squeue shows none (s)" lower "" "$CANCEL_S" s "$CANCEL_NOTE"
    if [ -n "$CANCEL_NOTE" ]; then
        log "$SYS: sacct over the $label jobs skipped: they were not all cancelled"
        cd "$ROOT"
        return 0
    fi

    # 6. sacct over the BIG cancelled jobs (bounded wait for accounting to hold them all). Slurm's
    # sacct leaves jobs that were never eligible (held ones) out of a plain time window; with a state
    # (`-s CA`) and both ends of the window (`-S`, `-E now`; with `-S` alone it listed none of them
    # in our tries) it lists them. Drover answers the same command the same way.
    acct0=$SECONDS
    while :; do
        rows=$("$SACCT" -X -n -P --name="$name" -S "$start_iso" -E now -s CA -o JobID 2>/dev/null | wc -l)
        [ "$rows" -ge "$filled" ] && break
        [ $((SECONDS - acct0)) -lt "$SACCT_WAIT" ] || break
        sleep 2
    done
    latency sacct_big "$SACCT_RUNS" 300 \
        "$SACCT" -X -n -P "--name=$name" -S "$start_iso" -E now -s CA -o JobID,JobName,State,ExitCode,Elapsed
    put sacct_big "\`sacct -X -P\` over $label cancelled jobs (ms, median)" lower "" "$MED" ms \
        "$([ "$rows" -ge "$filled" ] && echo "$RUNS runs" || echo "accounting held $rows of $filled after ${SACCT_WAIT}s")"
    cd "$ROOT"
}

# ------------------------------------------------------------------------------- Drover
drover_up() {
    if [ -n "${DROVER_BIN:-}" ]; then
        DROVER=$DROVER_BIN
    else
        log "building Drover (release)"
        (cd "$ROOT" && cargo build --release --quiet -p drover-cli -p drover-ctld -p drover-noded) \
            || die "cargo build --release failed"
        DROVER="${CARGO_TARGET_DIR:-$ROOT/target}/release/drover"
    fi
    [ -x "$DROVER" ] || die "no Drover binary at $DROVER (set DROVER_BIN to the \`drover\` binary)"
    local dir
    dir=$(dirname "$DROVER")
    for b in drover-ctld drover-noded; do
        [ -x "$dir/$b" ] || die "$b is missing next to $DROVER"
    done
    DHOME="$WORK/drover"
    # The Slurm cluster's shape: n[1-4] x CPUS, 4000 MB, partitions main (default) / teamA / teamB,
    # accounts teama (60) / teamb (40); ended jobs stay as long as the Slurm profile's MinJobAge.
    # No GPUs: the Slurm side has fake ones, but no workload asks for them.
    cat >"$WORK/source.toml" <<CONF
cluster_name = "compare"
default_account = "teama"
[controller]
address = "127.0.0.1:1"
state_dir = "state"
min_job_age = $MIN_JOB_AGE
[[nodes]]
names = "n[1-4]"
cpus = $CPUS
real_memory = 4000
[[partitions]]
name = "main"
nodes = "n[1-4]"
default = true
default_mem_per_cpu = 100
[[partitions]]
name = "teamA"
nodes = "n[1-4]"
priority_job_factor = 10
default_mem_per_cpu = 100
[[partitions]]
name = "teamB"
nodes = "n[1-4]"
priority_job_factor = 5
default_mem_per_cpu = 100
[[accounts]]
name = "teama"
shares = 60
[[accounts]]
name = "teamb"
shares = 40
[[users]]
name = "root"
default_account = "teama"
accounts = ["teamb"]
CONF
    log "starting Drover (4 nodes x $CPUS CPUs) in $DHOME"
    env -u DROVER_CONF -u DROVER_SOCKET "$DROVER" up --home "$DHOME" --config "$WORK/source.toml" >"$RAW/drover-up.log" 2>&1 9>&- \
        || die "drover up failed: $(tail -n 3 "$RAW/drover-up.log")"
    # `drover up` starts every node's noded; any it missed would join the same way, with pid files where
    # `drover down` finds them.
    local n pid
    for n in n1 n2 n3 n4; do
        [ -e "$DHOME/run/noded-$n.pid" ] && continue
        mkdir -p "$DHOME/noded-$n"
        setsid "$dir/drover-noded" --config "$DHOME/cluster.toml" --name "$n" --state-dir "$DHOME/noded-$n" \
            </dev/null >>"$DHOME/log/noded-$n.log" 2>&1 9>&- &
        pid=$!
        echo "$pid" >"$DHOME/run/noded-$n.pid"
    done
    use_drover
    local deadline=$((SECONDS + 30))
    until [ "$("$DHOME/bin/sinfo" -h -N -p main -o %t 2>/dev/null | grep -c '^idle')" = 4 ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "Drover's 4 nodes did not all come up idle: $("$DHOME/bin/sinfo" -N 2>&1)"
        sleep 0.2
    done
    "$DHOME/bin/sinfo" >"$RAW/drover-sinfo.txt"
}

# ------------------------------------------------------------------------------- Slurm
slurm_up() {
    [ -x "$BASELINE_SRC/up.sh" ] || die "no Slurm baseline at $BASELINE_SRC"
    if pgrep -a slurmctld >&2; then
        die "a slurmctld is already running (someone else's cluster?); not touching it. Stop it with its own down.sh first"
    fi
    rm -rf "$BASELINE"
    cp -r "$BASELINE_SRC" "$BASELINE"
    chmod -R u+w "$BASELINE"
    # Slurm refuses submissions beyond MaxJobCount (50000 in the baseline): raise it to fit BIG.
    local max=$((BIG + 2 * N + LAT_RUNS + 10000))
    [ "$max" -gt 50000 ] || max=50000
    sed -i "s/^MaxJobCount=.*/MaxJobCount=$max/" "$BASELINE/conf/slurm.conf"
    if [ -n "$SLURM_EXTRA_CONF" ]; then
        printf '# added by bench/compare.sh (SLURM_EXTRA_CONF)\n' >>"$BASELINE/conf/profile-$PROFILE.conf"
        printf '%s\n' $SLURM_EXTRA_CONF >>"$BASELINE/conf/profile-$PROFILE.conf"
    fi
    log "starting Slurm 22.05 (PROFILE=$PROFILE, 4 nodes x $CPUS CPUs, MaxJobCount=$max)"
    SLURM_TOUCHED=1
    if ! (cd "$BASELINE" && NODES=multi PROFILE="$PROFILE" CPUS="$CPUS" CGROUP=0 ./up.sh) >"$RAW/slurm-up.log" 2>&1 9>&-; then
        die "Slurm did not come up: $(tail -n 3 "$RAW/slurm-up.log" | tr '\n' ' ') (full log: $RAW/slurm-up.log)"
    fi
    use_slurm
    /usr/bin/sinfo >"$RAW/slurm-sinfo.txt"
    /usr/bin/scontrol show config >"$RAW/slurm-config.txt" 2>&1 || true
}

{
    echo "date_utc: $STAMP"
    echo "host: $(nproc) cpus, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
    echo "shape: 4 nodes x $CPUS CPUs = $SLOTS slots; Slurm PROFILE=$PROFILE; Drover min_job_age=$MIN_JOB_AGE"
    echo "knobs: QUICK=$QUICK N=$N BIG=$BIG SIZES='$SIZES' CLIENTS='$CLIENTS' POLLERS=$POLLERS FILL_CLIENTS=$FILL_CLIENTS LAT_RUNS=$LAT_RUNS SQ_RUNS=$SQ_RUNS LOAD_RUNS=$LOAD_RUNS LOAD_MAX=$LOAD_MAX SACCT_RUNS=$SACCT_RUNS SACCT_WAIT=$SACCT_WAIT"
    echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "hyperfine: ${HYPERFINE:-absent (python timing loop)}"
} >"$OUT/env.txt"

if want drover; then
    drover_up
    run_workloads
    "$DROVER" down --home "$DHOME" >>"$RAW/drover-down.log" 2>&1
fi
if want slurm; then
    slurm_up
    run_workloads
fi

{
    echo "# Drover vs Slurm 22.05, $STAMP"
    echo
    sed 's/^/- /' "$OUT/env.txt"
    echo
    python3 "$LIB" table "$RESULTS"
} >"$OUT/table.md"
cat "$OUT/table.md"
log "results in $OUT"
