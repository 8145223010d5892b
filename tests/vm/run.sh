#!/bin/bash
# The isolation checks on the cgroup layouts CI's hybrid host does not have: boots the Debian
# kernel under QEMU with virtme-ng (software emulation, no KVM needed; the host's filesystem is
# the guest's root, read-only over 9p) with `cgroup_no_v1=all` (pure cgroup v2, as current
# distributions boot), or with `--layout v1` with v1 controllers only; runs the already built
# test binaries of the checks below inside as root (on v2 from a login-session-like cgroup;
# tests/vm/guest.sh), and fails when any check fails or did not run. Needs root,
# qemu-system-x86, linux-image-amd64, busybox-static and virtme-ng (.ci/run installs them).
# Usage: tests/vm/run.sh [--layout v2|v1] [--timeout SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."

layout=v2 timeout=420
while [ $# -gt 0 ]; do
    case "$1" in
    --layout) layout=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    *) echo "usage: $0 [--layout v2|v1] [--timeout SECONDS]" >&2; exit 2 ;;
    esac
done
# name | package | test target | exact test names (all of the target's tests when empty).
case "$layout" in
v2)
    append="cgroup_no_v1=all"
    checks="
noded-isolation|drover-noded|isolation|
e2e-every-limit|drover-e2e|isolation|an_unprivileged_users_jobs_get_every_limit
"
    ;;
v1)
    # No device filter on v1 (docs/admin/cgroups.md): the checks without GPUs.
    append=""
    checks="
noded-isolation|drover-noded|isolation|memory_over_the_limit_is_oom_killed_and_reported a_fork_bomb_is_contained_by_pids_max signal_option_warns_before_the_time_limit
e2e-oom|drover-e2e|isolation|a_job_over_its_memory_ends_out_of_memory_and_the_node_stays_up
"
    ;;
*) echo "$0: --layout is v2 or v1" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "$0: needs root (the guest runs the root-only tests)" >&2; exit 2; }
command -v vng >/dev/null || { echo "$0: vng (virtme-ng, from PyPI) is missing" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || { echo "$0: qemu-system-x86 is missing" >&2; exit 2; }
# The newest installed kernel whose modules are there too (9p and virtio come as modules).
kernel=""
for image in $(ls -v /boot/vmlinuz-* 2>/dev/null); do
    [ -d "/lib/modules/${image#/boot/vmlinuz-}" ] && kernel=$image
done
[ -n "$kernel" ] || { echo "$0: no kernel in /boot (install linux-image-amd64)" >&2; exit 2; }

# Not under /tmp: the guest mounts a fresh tmpfs there.
out=$(mktemp -d /var/tmp/drover-vm-XXXXXX)
trap 'rm -rf "$out"' EXIT
chmod 755 "$out"
# Build on the host, with the commands .ci/run and the e2e harness use (nothing to do after
# them: a narrower `-p` selection could unify other features and rebuild); the guest only runs.
cargo build --quiet --locked -p drover-cli -p drover-ctld -p drover-noded
cargo test --quiet --locked --workspace --no-run --message-format=json 2>"$out/build.err" >"$out/build.json" \
    || { cat "$out/build.err" >&2; exit 1; }
python3 - "$out/build.json" >"$out/checks" <<PY
import json, sys
built = {}
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        package = m["package_id"].split("#")[-1].split("@")[0]
        built[(package, m["target"]["name"])] = m["executable"]
for line in """$checks""".strip().splitlines():
    name, package, target, filters = line.split("|")
    print("|".join([name, built[(package, target)], filters]))
PY
echo "vm: booting $kernel (${append:-no cgroup option}; layout $layout; at most $timeout s)"
t0=$(date +%s)
rc=0
timeout -k 10 "$timeout" vng --disable-kvm --force-9p --cpus 2 --memory 2G --rwdir "$out" \
    --run "$kernel" ${append:+--append "$append"} \
    -- "$PWD/tests/vm/guest.sh" "$out" "$layout" "$out/checks" </dev/null >"$out/console.log" 2>&1 || rc=$?
elapsed=$(($(date +%s) - t0))
cat "$out/guest.log" 2>/dev/null || { echo "vm: the guest wrote no log; its console:"; tail -40 "$out/console.log"; }
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "vm: the VM ran past $timeout s and was stopped"
fi
status=$(cat "$out/status" 2>/dev/null || echo missing)
summary=$(cat "$out/summary" 2>/dev/null || echo "no summary")
echo "vm-$layout: $summary"
echo "vm: $elapsed s in all (boot, checks and shutdown), vng exit $rc, guest status $status"
[ "$status" = 0 ] && [ "$rc" = 0 ]
