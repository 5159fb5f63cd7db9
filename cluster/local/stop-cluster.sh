#!/usr/bin/env bash
# Stop a cluster started by start-cluster.sh (or start-tls-cluster.sh).
#
# Usage:
#   cluster/local/stop-cluster.sh [RUN_DIR]
#
# RUN_DIR defaults to $DASKPD_RUN_DIR, else the same default start-cluster.sh
# uses: ${TMPDIR:-/tmp}/daskpd-cluster-$USER-${DASKPD_SCHEDULER_PORT:-8786}.
#
# Workers go first (SIGTERM lets each nanny close its worker cleanly), then the
# scheduler.  Each process was started in its own process group, so the signal
# goes to the whole group (nanny + worker + multiprocessing helpers).  Anything
# still alive after DASKPD_STOP_TIMEOUT seconds (default 15) gets SIGKILL.
# A pid is only signalled if it still looks like a dask process, so a stale
# pid file never kills an unrelated program.  Safe to run twice.
set -euo pipefail

PORT="${DASKPD_SCHEDULER_PORT:-8786}"
RUN_DIR="${1:-${DASKPD_RUN_DIR:-${TMPDIR:-/tmp}/daskpd-cluster-$(id -un)-$PORT}}"
TIMEOUT="${DASKPD_STOP_TIMEOUT:-15}"
log() { echo "stop-cluster: $*" >&2; }

if [[ ! -d "$RUN_DIR" ]]; then
    log "no run dir $RUN_DIR; nothing to stop"
    exit 0
fi

is_dask() {  # is_dask PID: alive and its command line mentions dask
    local args
    args="$(ps -o args= -p "$1" 2>/dev/null)" || return 1
    [[ "$args" == *dask* || "$args" == *distributed* ]]
}

group_alive() {  # group_alive PID: the process, or anything in its process group, is running
    # (zombies do not count: they are dead, only waiting for init to reap them)
    ps -e -o pid= -o pgid= -o stat= 2>/dev/null |
        awk -v p="$1" '($1 == p || $2 == p) && $3 !~ /^Z/ { found = 1 } END { exit !found }'
}

signal() {  # signal SIG PID: to the process group when PID leads one, else to PID
    local sig="$1" pid="$2" pgid
    pgid="$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" || pgid=""
    if [[ "$pgid" == "$pid" ]]; then
        kill "-$sig" -- "-$pid" 2>/dev/null || true
    else
        kill "-$sig" "$pid" 2>/dev/null || true
    fi
}

stop_group() {  # stop_group PIDFILE...
    local f pid pids=()
    for f in "$@"; do
        [[ -f "$f" ]] || continue
        pid="$(<"$f")"
        if [[ "$pid" =~ ^[0-9]+$ ]] && is_dask "$pid"; then
            pids+=("$pid")
            signal TERM "$pid"
        fi
    done
    (( ${#pids[@]} )) || return 0
    local deadline=$(( SECONDS + TIMEOUT )) left
    while :; do
        left=()
        for pid in "${pids[@]}"; do group_alive "$pid" && left+=("$pid"); done
        (( ${#left[@]} )) || break
        if (( SECONDS >= deadline )); then
            log "still alive after ${TIMEOUT}s, killing: ${left[*]}"
            for pid in "${left[@]}"; do
                kill -KILL -- "-$pid" 2>/dev/null || true
                kill -KILL "$pid" 2>/dev/null || true
            done
            break
        fi
        sleep 0.2
    done
    log "stopped ${pids[*]}"
}

shopt -s nullglob
stop_group "$RUN_DIR"/worker-*.pid
stop_group "$RUN_DIR"/scheduler.pid
rm -f "$RUN_DIR"/worker-*.pid "$RUN_DIR"/scheduler.pid "$RUN_DIR"/address
