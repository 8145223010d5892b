#!/usr/bin/env bash
# End-to-end benchmark: N sequential `sbatch --wrap true` jobs on a local Drover cluster of the
# shape bench/compare.sh uses (4 nodes x 2 CPUs, no GPUs), from the first submit until squeue
# shows none of them and sacct shows all COMPLETED. Prints the rate and, less noisy on a shared
# machine, the CPU time each component spent per job:
#
#   ctld        the controller process
#   noded       the four node daemons themselves (their own CPU and their reaped children's)
#   sup+job     everything else below the nodes: per-job supervisors and the jobs' processes
#   submit      the submitting shell loop (one sbatch process per job) and the squeue polls
#
# Each component runs in its own CPU-accounting cgroup (cgroup v1 `cpuacct` when mounted, else
# cgroup v2 `cpu.stat`), created for the run and removed after it, so supervisors (which leave
# noded's process tree) and jobs are counted too.
#
#   bench/e2e.sh [N]                     (default 1000)
#
# Knobs (environment): DROVER_BIN=/path/to/drover (else: cargo build --release),
# CPUS=2 (per node), E2E_TIMEOUT=600 (seconds), KEEP=1 (leave the scratch directory, with the
# daemons' logs, in /tmp). Must run as root (cgroups; noded creates job cgroups).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${1:-${N:-1000}}
CPUS=${CPUS:-2}
E2E_TIMEOUT=${E2E_TIMEOUT:-600}
KEEP=${KEEP:-0}
log() { printf '[e2e %s] %s\n' "$(date -u +%T)" "$*" >&2; }
die() { printf '[e2e] ERROR: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
case "$N" in ''|*[!0-9]*|0) die "N must be a positive integer" ;; esac

if [ -n "${DROVER_BIN:-}" ]; then
    DROVER=$DROVER_BIN
else
    log "building Drover (release)"
    (cd "$ROOT" && cargo build --release --quiet -p drover-cli -p drover-ctld -p drover-noded) || die "build failed"
    DROVER="${CARGO_TARGET_DIR:-$ROOT/target}/release/drover"
fi
BIN=$(dirname "$DROVER")
for b in drover drover-ctld drover-noded; do [ -x "$BIN/$b" ] || die "no $b in $BIN"; done

# ------------------------------------------------------------------ accounting cgroups
if [ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then
    CG=/sys/fs/cgroup/cpuacct/drover-e2e-$$
    usage_ns() { cat "$CG/$1/cpuacct.usage"; }
elif [ -f /sys/fs/cgroup/cgroup.controllers ] || [ -f /sys/fs/cgroup/unified/cgroup.controllers ]; then
    base=/sys/fs/cgroup
    [ -f $base/cgroup.controllers ] || base=/sys/fs/cgroup/unified
    CG=$base/drover-e2e-$$
    usage_ns() { awk '$1 == "usage_usec" { printf "%d\n", $2 * 1000 }' "$CG/$1/cpu.stat"; }
else
    die "no cgroup hierarchy to account CPU time in"
fi
mkdir "$CG"
# On v2, noded's job cgroups need the controllers enabled down to its own cgroup (best effort).
[ -f "$CG/cgroup.subtree_control" ] && for c in cpu cpuset memory pids; do echo "+$c" >"$CG/cgroup.subtree_control" 2>/dev/null || true; done
for part in ctld noded submit; do mkdir "$CG/$part"; done
join() { echo "$BASHPID" >"$CG/$1/cgroup.procs"; }

WORK=$(mktemp -d /tmp/drover-e2e-XXXXXX)
chmod 755 "$WORK"
DHOME=$WORK/home
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -d "$DHOME/run" ] && "$DROVER" down --home "$DHOME" >/dev/null 2>&1 || true
    # Move what is left (nothing, normally) out, then remove the accounting cgroups.
    for part in ctld noded submit; do
        [ -f "$CG/$part/cgroup.procs" ] || continue
        while read -r pid; do echo "$pid" >"$(dirname "$CG")/cgroup.procs" 2>/dev/null || true; done <"$CG/$part/cgroup.procs"
        rmdir "$CG/$part" 2>/dev/null || log "could not remove $CG/$part"
    done
    rmdir "$CG" 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ cluster (compare.sh's shape)
cat >"$WORK/source.toml" <<CONF
cluster_name = "e2e"
default_account = "teama"
[controller]
address = "127.0.0.1:1"
state_dir = "state"
min_job_age = 5
[[nodes]]
names = "n[1-4]"
cpus = $CPUS
real_memory = 4000
[[partitions]]
name = "main"
nodes = "n[1-4]"
default = true
default_mem_per_cpu = 100
[[accounts]]
name = "teama"
shares = 60
[[users]]
name = "root"
default_account = "teama"
CONF
log "starting Drover (4 nodes x $CPUS CPUs) in $DHOME"
# `drover up` starts ctld and every node's noded from the noded cgroup; ctld then moves to its own.
(join noded && exec env -u DROVER_CONF -u DROVER_SOCKET "$DROVER" up --home "$DHOME" --config "$WORK/source.toml") \
    >"$WORK/up.log" 2>&1 || die "drover up failed: $(tail -n 3 "$WORK/up.log")"
CTLD_PID=$(cat "$DHOME/run/ctld.pid")
echo "$CTLD_PID" >"$CG/ctld/cgroup.procs"
for n in n1 n2 n3 n4; do
    [ -e "$DHOME/run/noded-$n.pid" ] && continue
    mkdir -p "$DHOME/noded-$n"
    (join noded && exec setsid "$BIN/drover-noded" --config "$DHOME/cluster.toml" --name "$n" --state-dir "$DHOME/noded-$n") \
        </dev/null >>"$DHOME/log/noded-$n.log" 2>&1 &
    echo $! >"$DHOME/run/noded-$n.pid"
done
export DROVER_SOCKET=$DHOME/ctld/ctld.sock DROVER_CONF=$DHOME/cluster.toml
deadline=$((SECONDS + 30))
until [ "$("$DHOME/bin/sinfo" -h -N -o %t 2>/dev/null | grep -c '^idle')" = 4 ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the 4 nodes did not come up idle: $("$DHOME/bin/sinfo" -N 2>&1)"
    sleep 0.2
done
NODED_PIDS=$(cat "$DHOME"/run/noded-*.pid)
sleep 1

# ------------------------------------------------------------------ measurement
TICK=$(getconf CLK_TCK)
proc_ms() { # utime+stime+cutime+cstime of the given pids, in ms
    local total=0 pid t
    for pid in "$@"; do
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pid/stat")
        total=$((total + t))
    done
    echo $((total * 1000 / TICK))
}
snapshot() { # prints: ctld_ns noded_ns submit_ns ctld_proc_ms noded_proc_ms
    # shellcheck disable=SC2086
    echo "$(usage_ns ctld) $(usage_ns noded) $(usage_ns submit) $(proc_ms "$CTLD_PID") $(proc_ms $NODED_PIDS)"
}
name=e2e$$
start_iso=$(date +%FT%T)
sleep 1   # sacct -S has one-second resolution
read -r c0 n0 s0 cp0 np0 <<<"$(snapshot)"
t0=$(date +%s.%N)
log "submitting $N jobs"
(
    join submit
    fails=0
    for ((i = 0; i < N; i++)); do
        "$DHOME/bin/sbatch" -J "$name" -o /dev/null --wrap true >/dev/null 2>>"$WORK/sbatch-errors.txt" || fails=$((fails + 1))
    done
    echo "$fails" >"$WORK/fails"
    t1=$(date +%s.%N)
    echo "$t1" >"$WORK/t1"
    deadline=$((SECONDS + E2E_TIMEOUT))
    while [ "$("$DHOME/bin/squeue" -h -n "$name" -o %i | wc -l)" != 0 ]; do
        [ "$SECONDS" -lt "$deadline" ] || { echo "still queued after ${E2E_TIMEOUT}s" >&2; exit 1; }
        sleep 0.05
    done
) || die "jobs did not all end"
t2=$(date +%s.%N)
read -r c1 n1 s1 cp1 np1 <<<"$(snapshot)"
fails=$(cat "$WORK/fails")
t1=$(cat "$WORK/t1")
ok=$((N - fails))
done_n=0
for _ in $(seq 30); do
    done_n=$("$DHOME/bin/sacct" -X -n -P --name="$name" -S "$start_iso" -o JobID,State | grep -c '|COMPLETED$' || true)
    [ "$done_n" -ge "$ok" ] && break
    sleep 1
done
[ "$done_n" -ge "$ok" ] || die "sacct shows $done_n of $ok jobs COMPLETED"

awk -v n="$ok" -v fails="$fails" -v t0="$t0" -v t1="$t1" -v t2="$t2" \
    -v c="$((c1 - c0))" -v nd="$((n1 - n0))" -v s="$((s1 - s0))" -v cp="$((cp1 - cp0))" -v np="$((np1 - np0))" 'BEGIN {
    printf "jobs                %d completed (%d sbatch failures)\n", n, fails
    printf "submit phase        %.3f s  (%.1f jobs/s)\n", t1 - t0, n / (t1 - t0)
    printf "end to end          %.3f s  (%.1f jobs/s)\n", t2 - t0, n / (t2 - t0)
    printf "CPU ms per job      ctld %.3f | noded %.3f | sup+job %.3f | submit %.3f | total %.3f\n",
        c / 1e6 / n, np / n, (nd / 1e6 - np) / n, s / 1e6 / n, (c + nd + s) / 1e6 / n
    printf "  (ctld by /proc: %.3f ms/job; noded cgroup in all: %.3f ms/job)\n", cp / n, nd / 1e6 / n
}'
