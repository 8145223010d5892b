#!/usr/bin/env bash
# Slurm's own test suite (testsuite/python of Slurm 22.05.8, pytest + its `atf` library) run as an
# oracle against a real Drover cluster in the suite's local-config mode.
#
# What it does, in order:
#   1. Obtains Slurm 22.05.8's source through Debian's source package (`apt-get source slurm-wlm`,
#      adding a deb-src line for the mirror the machine already uses), into a cache outside what
#      git tracks ($SLURM_SUITE_CACHE, default .slurm-suite/ at the repository root, git-ignored).
#      Nothing of Slurm's is committed to this repository: it is GPL. Refuses any other version.
#   2. Makes a Python venv in the cache with pytest (7.1, which still ships `py.io`, which the
#      suite's conftest imports) and pexpect, from PyPI.
#   3. Builds the workspace's binaries and starts a Drover cluster of four nodes (--nodes N: N) with `drover up`
#      in a scratch directory under /tmp.
#   4. Writes what local-config mode reads, for the suite only: a `slurm.conf` describing that
#      cluster, a `testsuite.conf`, and a `sudo` (tests call `sudo -nu USER`; this one runs the
#      command as USER with runuser, keeping PATH, so the other users reach the same cluster).
#   5. Runs the suite's test files one at a time (a timeout per file), emptying the queue between
#      files, and prints a tally: passed / failed / errored / skipped, the reasons for the skips,
#      and one line per failure or error.
#
# Usage: tests/slurm-suite/run.sh [--groups sbatch,squeue,...] [--min-pass N | --min-pass-file F]
#                                 [--file-timeout SECONDS] [--budget SECONDS] [--results DIR] [--nodes N] [FILE...]
#   --groups       run only tests/commands/<group>/ of these groups (default: every test file)
#   --min-pass     exit 1 when fewer than N tests pass (CI's regression check)
#   --budget       start no test file after this many seconds; the files left count as errors
#   --nodes        the cluster's node count (default 4; 9 lets the tests that need 5, 6 or 9 run)
#   FILE...        run only these test files (paths relative to testsuite/python)
# Exit status: 0 when the suite ran (and met --min-pass); 1 on a regression; 2 when the suite
# could not run at all (no source, no venv, no cluster): it never passes silently.
# Needs root (apt, users, runuser). Idempotent: the download and the venv are reused.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${SLURM_SUITE_CACHE:-$REPO/.slurm-suite}
SLURM_VERSION=22.05.8
GROUPS_ARG=""
MIN_PASS=""
FILE_TIMEOUT=${SLURM_SUITE_FILE_TIMEOUT:-120}
BUDGET=${SLURM_SUITE_BUDGET:-}
RESULTS=""
FILES=()

die() { echo "slurm-suite: error: $*" >&2; exit 2; }
log() { echo "slurm-suite: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --groups) GROUPS_ARG=$2; shift 2 ;;
        --groups=*) GROUPS_ARG=${1#*=}; shift ;;
        --min-pass) MIN_PASS=$2; shift 2 ;;
        --min-pass-file) MIN_PASS=$(grep -o '^[0-9]\+' "$2" | head -n1) || die "no count in $2"; shift 2 ;;
        --file-timeout) FILE_TIMEOUT=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --results) RESULTS=$2; shift 2 ;;
        --nodes) NODE_COUNT=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) FILES+=("$1"); shift ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (apt-get, runuser, users alice and bob)"

# ----------------------------------------------------------------------------- 1. Slurm's source
fetch_source() {
    local dir=$CACHE/src orig
    SUITE=$(ls -d "$dir"/slurm-*/testsuite/python 2>/dev/null | head -n1 || true)
    if [ -n "$SUITE" ] && [ -f "$SUITE/lib/atf.py" ]; then return; fi
    # shellcheck source=tests/slurm-suite/source.sh
    . "$REPO/tests/slurm-suite/source.sh"
    orig=$(slurm_orig_tarball "$dir" "$SLURM_VERSION") || die "no Slurm $SLURM_VERSION source (see above)"
    # Only testsuite/python is unpacked (dpkg-source -x would unpack and patch all of it, and
    # Debian's patches do not touch the test suite). The tarball stays for openapi-schema.sh.
    tar -xf "$orig" -C "$dir" --wildcards '*/testsuite/python/*' || die "unpacking $orig"
    SUITE=$(ls -d "$dir"/slurm-*/testsuite/python | head -n1)
    [ -f "$SUITE/lib/atf.py" ] || die "no testsuite/python in $orig"
    log "Slurm $SLURM_VERSION's testsuite/python in $SUITE"
}

# ----------------------------------------------------------------------------- 2. Python venv
make_venv() {
    VENV=$CACHE/venv
    if [ -x "$VENV/bin/pytest" ] && "$VENV/bin/python" -c 'import py.io, pexpect' 2>/dev/null; then return; fi
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check 'pytest==7.1.3' 'pexpect==4.9.0' \
        || die "pip install pytest pexpect failed"
}

fetch_source
make_venv

# ----------------------------------------------------------------------------- 3. the cluster
log "building drover"
(cd "$REPO" && cargo build --quiet --locked -p drover-cli -p drover-ctld -p drover-noded) || die "cargo build failed"
WORK=$(mktemp -d /tmp/drover-slurm-suite.XXXXXX)
chmod 755 "$WORK"
# A copy of the binaries, so a rebuild while the suite runs does not change what it tests.
mkdir -p "$WORK/sbin"
cp "$REPO"/target/debug/{drover,drover-ctld,drover-noded} "$WORK/sbin/"
DROVER=$WORK/sbin/drover
HOME_DIR=$WORK/drover
cleanup() {
    "$DROVER" down --home "$HOME_DIR" >/dev/null 2>&1 || true
    # Tests run from pytest's tmp dirs in $WORK; the logs of the last run stay in $RESULTS.
    rm -rf "$WORK"
}
trap cleanup EXIT

NODE_COUNT=${NODE_COUNT:-4}
[[ "$NODE_COUNT" =~ ^[1-9][0-9]?$ ]] || die "--nodes takes 1 to 99"
NODES="node[1-$NODE_COUNT]" NODE_CPUS=4 NODE_MEM=4000
cat >"$WORK/cluster.toml" <<EOF
# The cluster Slurm's suite runs against (written by tests/slurm-suite/run.sh).
cluster_name = "suite"
default_account = "suite"
[controller]
address = "127.0.0.1:1"
state_dir = "$HOME_DIR/ctld"
key_file = "cluster.key"
min_job_age = 300
admins = ["root"]
[[nodes]]
names = "$NODES"
cpus = $NODE_CPUS
real_memory = $NODE_MEM
[[partitions]]
name = "debug"
nodes = "$NODES"
default = true
max_time = "1-00:00:00"
[[accounts]]
name = "suite"
shares = 1
EOF
log "starting Drover ($NODE_COUNT nodes) in $HOME_DIR"
env -u DROVER_CONF -u DROVER_SOCKET "$DROVER" up --home "$HOME_DIR" --config "$WORK/cluster.toml" >"$WORK/up.log" 2>&1 \
    || die "drover up failed: $(tail -n 5 "$WORK/up.log")"
# shellcheck disable=SC1091
source "$HOME_DIR/env"
up=$(sinfo -h -N -o '%N %t' | grep -c ' idle$' || true)
[ "$up" = "$NODE_COUNT" ] || die "expected $NODE_COUNT idle nodes after drover up, got: $(sinfo -N 2>&1)"

# ----------------------------------------------------------------------------- 4. local config
ETC=$WORK/etc BIN=$WORK/bin
mkdir -p "$ETC" "$BIN"
# What local-config mode reads of slurm.conf (atf reads SlurmUser, NodeName lines and
# AccountingStorageType from the file, the rest from `scontrol show config|nodes`). Only the suite
# reads this file; Drover reads its own cluster.toml.
# The plugin parameters the suite's tests require (read from this file in local-config mode) are
# copied from what Drover's `scontrol show config` reports, never written here by hand: a test
# runs only where Drover says it has that behaviour.
PLUGINS=""
for name in SelectType PriorityType SchedulerType SwitchType OverTimeLimit; do
    value=$(scontrol show config | awk -v n="$name" '$1 == n { sub(/^[^=]*= */, ""); sub(/ min$/, ""); print }')
    if [ -n "$value" ]; then PLUGINS="$PLUGINS$name=$value"$'\n'; fi
done
cat >"$ETC/slurm.conf" <<EOF
# For Slurm's test suite only (tests/slurm-suite/run.sh): describes the Drover cluster in $HOME_DIR.
ClusterName=suite
SlurmUser=root
AccountingStorageType=accounting_storage/slurmdbd
${PLUGINS}NodeName=$NODES CPUs=$NODE_CPUS RealMemory=$NODE_MEM State=UNKNOWN
PartitionName=debug Nodes=$NODES Default=YES MaxTime=1-00:00:00 State=UP
EOF
cat >"$ETC/testsuite.conf" <<EOF
# For Slurm's test suite only (tests/slurm-suite/run.sh).
SlurmSourceDir=$(dirname "$(dirname "$SUITE")")
SlurmBuildDir=$(dirname "$(dirname "$SUITE")")
SlurmInstallDir=$HOME_DIR
SlurmConfigDir=$ETC
EOF
# atf checks `sudo -ln` for "(ALL...) NOPASSWD: ALL" and runs other users' commands with
# `sudo -nu USER /bin/bash -lc CMD` (some tests `sudo -u USER bash -lc CMD`). A login shell would
# reset PATH to the system's, where no Slurm commands are, so this sudo runs `bash -c` with the
# caller's environment.
cat >"$BIN/sudo" <<'EOF'
#!/usr/bin/env bash
# sudo for Slurm's test suite (written by tests/slurm-suite/run.sh): root may do anything.
user=root
while [ $# -gt 0 ]; do
    case "$1" in
        -ln|-l) echo "User root may run the following commands:"; echo "    (ALL : ALL) NOPASSWD: ALL"; exit 0 ;;
        -nu|-un) user=$2; shift 2 ;;
        -u) user=$2; shift 2 ;;
        -n|-E) shift ;;
        *) break ;;
    esac
done
case "${1:-}" in /bin/bash|bash) [ "${2:-}" = -lc ] && set -- /bin/bash -c "${@:3}" ;; esac
if [ "$user" = root ]; then exec "$@"; fi
exec runuser -u "$user" -- env HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" "$@"
EOF
chmod 755 "$BIN/sudo"
export PATH="$BIN:$VENV/bin:$PATH"
export SLURM_TESTSUITE_CONF=$ETC/testsuite.conf SLURM_CONF=$ETC/slurm.conf

# ----------------------------------------------------------------------------- 5. the files
cd "$SUITE"
if [ ${#FILES[@]} = 0 ]; then
    if [ -n "$GROUPS_ARG" ]; then
        for g in ${GROUPS_ARG//,/ }; do
            [ -d "tests/commands/$g" ] || die "no group $g (tests/commands/$g)"
            while IFS= read -r f; do FILES+=("$f"); done < <(find "tests/commands/$g" -name 'test_*.py' | sort)
        done
    else
        while IFS= read -r f; do FILES+=("$f"); done < <(find tests -name 'test_*.py' | sort)
    fi
fi
[ ${#FILES[@]} -gt 0 ] || die "no test files selected"
RESULTS=${RESULTS:-$CACHE/results}
rm -rf "$RESULTS"
mkdir -p "$RESULTS/junit" "$RESULTS/log"

empty_queue() {
    squeue -h -o %i 2>/dev/null | xargs -r scancel >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 60))
    while [ -n "$(squeue -h -o %i 2>/dev/null)" ]; do
        [ $SECONDS -lt $deadline ] || { log "queue not empty after 60 s: $(squeue 2>&1 | head -n 5)"; return; }
        sleep 0.5
    done
}

mkdir -p "$WORK/pytest"
start=$SECONDS
n=0
for f in "${FILES[@]}"; do
    n=$((n + 1))
    if [ -n "$BUDGET" ] && [ $((SECONDS - start)) -ge "$BUDGET" ]; then
        # Out of time: the files left count as errors (tally.py), never as passes.
        echo "$f" >>"$RESULTS/not-run"
        continue
    fi
    name=$(echo "${f#tests/}" | tr '/' '_')
    name=${name%.py}
    empty_queue
    t0=$SECONDS
    # basetemp under $WORK (0755) so tests that run as other users can reach their files.
    rc=0
    timeout -k 10 "$FILE_TIMEOUT" pytest -p no:cacheprovider -q -rN --local-config \
        --basetemp="$WORK/pytest/$name" --junitxml="$RESULTS/junit/$name.xml" -o junit_logging=no \
        "$f" >"$RESULTS/log/$name.log" 2>&1 </dev/null || rc=$?
    truncate -s '<400000' "$RESULTS/log/$name.log"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "$f" >>"$RESULTS/timed-out"; fi
    printf 'slurm-suite: [%d/%d] %-60s %3ds\n' "$n" "${#FILES[@]}" "$f" $((SECONDS - t0)) >&2
    chmod -R u+rwX "$WORK/pytest/$name" 2>/dev/null || true
    rm -rf "$WORK/pytest/$name"
done
empty_queue
log "ran ${#FILES[@]} files in $((SECONDS - start)) s; logs in $RESULTS/log"

"$VENV/bin/python" "$REPO/tests/slurm-suite/tally.py" "$RESULTS" "${FILES[@]}" | tee "$RESULTS/tally.txt"
passed=$(awk '/^passed/ {print $2}' "$RESULTS/tally.txt")
ran=$(awk '/^total/ {print $2}' "$RESULTS/tally.txt")
[ "${ran:-0}" -gt 0 ] || die "no test ran"
if [ -n "$MIN_PASS" ] && [ "${passed:-0}" -lt "$MIN_PASS" ]; then
    echo "slurm-suite: REGRESSION: $passed tests passed, fewer than the recorded $MIN_PASS" >&2
    exit 1
fi
exit 0
