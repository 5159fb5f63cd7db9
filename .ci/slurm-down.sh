#!/usr/bin/env bash
# Stop the single-node SLURM started by .ci/slurm-up.sh: slurmd, then slurmctld (by
# their pid files under SLURM_UP_DIR).  munged is left running unless --munge is given
# (other software may use it).  Safe to run twice.  Leaves slurm.conf and the state in
# place; `rm -rf /var/lib/daskpd-slurm /etc/slurm/slurm.conf` removes them.
set -euo pipefail
BASE="${SLURM_UP_DIR:-/var/lib/daskpd-slurm}"

running() {   # pid: alive and not a zombie (an init that does not reap leaves those)
    kill -0 "$1" 2>/dev/null && [[ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}
stop() {   # pidfile expected-command
    local pidfile=$1 name=$2 pid
    [[ -s "$pidfile" ]] || return 0
    pid="$(cat "$pidfile")"
    running "$pid" || return 0
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name"* ]] || return 0
    echo "slurm-down: stopping $name ($pid)" >&2
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < 40; i++ )); do running "$pid" || return 0; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
}

stop "$BASE/run/slurmd.pid" slurmd
stop "$BASE/run/slurmctld.pid" slurmctld
if [[ "${1:-}" == --munge ]]; then
    stop /run/munge/munged.pid munged
fi
