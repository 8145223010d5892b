#!/usr/bin/env bash
# `drover simulate` benchmark, in process (no daemons): writes a synthetic accounting database
# (JOBS jobs from eight teams over DAYS days on NODES nodes of 8 GPUs, about 85 % of the
# GPU-hours, stored as ctld stores them), then times the whole path ctld serves — the database
# read and the replay under the cluster's config and under a candidate (team0's shares and
# guarantee doubled) — and prints both runs' figures per team.
#
#   bench/simulate.sh [NODES] [JOBS] [DAYS]             (defaults 1000 100000 7)
#   PROFILE=debug bench/simulate.sh 100 10000           (a debug build)
#   RESOLUTION=60 bench/simulate.sh                     (one pass per 60 simulated seconds)
#
# The database is kept in /tmp/drover-simbench-NODES-JOBS-DAYS.db for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000} JOBS=${2:-100000} DAYS=${3:-7}
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
    cargo build --release --quiet -p drover-ctld --bin drover-simbench
else
    cargo build --quiet -p drover-ctld --bin drover-simbench
fi
BIN=${CARGO_TARGET_DIR:-$PWD/target}/$PROFILE/drover-simbench
DB=/tmp/drover-simbench-$NODES-$JOBS-$DAYS.db
RESOLUTION=${RESOLUTION:-} "$BIN" "$DB" "$NODES" "$JOBS" "$DAYS"
