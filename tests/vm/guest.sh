#!/bin/bash
# Runs inside the VM that tests/vm/run.sh boots (as root, the host's filesystem shared read-only
# over 9p, no systemd): checks the cgroup layout the guest was booted with, then runs the listed
# test binaries from the host's target/ with their root-only tests included, and writes the
# summary and the exit status into the shared output folder. Usage: guest.sh OUT LAYOUT LIST
# where LAYOUT is v2 (booted with cgroup_no_v1=all) or v1 (v1 controllers only, no cgroup2)
# and LIST has one `name|binary|test names…` line per check.
set -u
out=$1 layout=$2 list=$3
exec >"$out/guest.log" 2>&1
fail() { echo "guest: FAILED: $*"; echo "1" >"$out/status"; exit 1; }
started=$(date +%s)
echo "guest: kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) CPUs, layout $layout"
echo "guest: kernel command line: $(cat /proc/cmdline)"

# Unix sockets cannot be made on the 9p share and the host's /tmp is only an overlay here: the
# clusters' homes and scratch files go to a fresh tmpfs. A checkout under /tmp (a CI clone) would
# be hidden by it, with the test binaries in its target/: the host's /tmp stays reachable at /mnt
# and the checkout is bound back at its own path on the new tmpfs.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case "$repo/" in
    /tmp/*)
        mount --bind /tmp /mnt || fail "cannot keep the host's /tmp reachable at /mnt"
        mount -t tmpfs -o mode=1777 tmpfs /tmp
        mkdir -p "$repo"
        mount --bind "/mnt/${repo#/tmp/}" "$repo" || fail "cannot bind the checkout $repo back"
        echo "guest: the checkout $repo is under /tmp: bound back onto the guest's tmpfs"
        ;;
    *)
        mount -t tmpfs -o mode=1777 tmpfs /tmp
        ;;
esac
ip link set lo up 2>/dev/null || true


case "$layout" in
v2)
    # cgroup_no_v1=all: no v1 hierarchy may exist, and /sys/fs/cgroup itself is cgroup2.
    grep -q '^[^ ]* /sys/fs/cgroup cgroup2 ' /proc/self/mounts || fail "/sys/fs/cgroup is not cgroup2"
    echo "guest: cgroup mounts:"
    grep cgroup /proc/self/mountinfo | sed 's/^/  /'
    echo "guest: /proc/cgroups (hierarchy 0: not bound to a v1 hierarchy):"
    sed 's/^/  /' /proc/cgroups
    # Every controller must be unbound from v1 (hierarchy id 0) and no v1 file system mounted.
    awk 'NR > 1 && $2 != 0 { bad = 1 } END { exit bad }' /proc/cgroups || fail "a v1 hierarchy exists"
    ! grep -q ' - cgroup ' /proc/self/mountinfo || fail "a cgroup v1 file system is mounted"
    echo "guest: cgroup v1 is absent; v2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

    # Where a distribution's systemd puts a root login shell: a session scope below user.slice, with
    # every controller enabled at the root but only memory and pids down the slices, and other
    # processes (this shell) beside whatever the checks start. Never the root cgroup.
    cg=/sys/fs/cgroup session=/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope
    mkdir -p "$session"
    echo "+cpuset +cpu +io +memory +pids" >$cg/cgroup.subtree_control || fail "enabling the root's controllers"
    for slice in $cg/user.slice $cg/user.slice/user-0.slice; do
        echo "+memory +pids" >"$slice/cgroup.subtree_control" || fail "enabling $slice's controllers"
    done
    echo $$ >"$session/cgroup.procs" || fail "entering $session"
    echo "guest: the checks run in $(cat /proc/self/cgroup) (like a login shell); subtree_control of /: $(cat $cg/cgroup.subtree_control), of user-0.slice: $(cat $cg/user.slice/user-0.slice/cgroup.subtree_control)"
    ;;
v1)
    # v1 only, as on hosts that boot systemd's legacy layout: the guest's init mounted cgroup2
    # with every controller still free, so it goes, and each controller gets its v1 hierarchy.
    umount /sys/fs/cgroup || fail "could not unmount the guest's cgroup2"
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
    for controller in cpuset cpu,cpuacct memory devices freezer pids; do
        mkdir -p "/sys/fs/cgroup/$controller"
        mount -t cgroup -o "$controller" cgroup "/sys/fs/cgroup/$controller" || fail "mounting v1 $controller"
    done
    echo "guest: cgroup mounts:"
    grep cgroup /proc/self/mountinfo | sed 's/^/  /'
    ! grep -q ' - cgroup2 ' /proc/self/mountinfo || fail "a cgroup2 hierarchy is still mounted"
    echo "guest: no cgroup2 hierarchy is mounted"
    ;;
*) fail "unknown layout $layout" ;;
esac
id alice >/dev/null && id bob >/dev/null || fail "the test users alice and bob are missing"

# The e2e harness builds the binaries with cargo before its first cluster: they are built on
# the host already, and target/ is read-only here.
export CARGO=/bin/true RUST_BACKTRACE=1
passed=0 failed=0 failures=""
while IFS='|' read -r name binary filters; do
    [ -n "$name" ] || continue
    t0=$(date +%s)
    # shellcheck disable=SC2086 # the filters are words
    "$binary" --include-ignored --test-threads=1 --exact $filters >"$out/$name.log" 2>&1
    rc=$?
    summary=$(grep -E '^test result:' "$out/$name.log" | tail -1)
    echo "guest: $name: rc=$rc in $(($(date +%s) - t0)) s: ${summary:-no test result line}"
    grep -E '^test .* \.\.\. ' "$out/$name.log" | sed 's/^/  /'
    ok=$(grep -cE '^test .* \.\.\. ok$' "$out/$name.log")
    bad=$(grep -cE '^test .* \.\.\. (FAILED|ignored)$' "$out/$name.log")
    passed=$((passed + ok))
    # A binary that failed without naming a test, or ran none, is one failure more.
    if [ "$bad" = 0 ] && { [ "$rc" != 0 ] || [ "$ok" = 0 ]; }; then bad=1; fi
    if [ "$bad" != 0 ]; then
        failed=$((failed + bad))
        failures="$failures $name"
        echo "guest: --- $name output (last 60 lines) ---"
        tail -60 "$out/$name.log" | sed 's/^/  | /'
    fi
done <"$list"
echo "guest: checks took $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed" >"$out/summary"
if [ "$failed" = 0 ]; then echo 0 >"$out/status"; else echo "guest: failed:$failures"; echo 1 >"$out/status"; fi
