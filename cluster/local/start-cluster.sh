#!/usr/bin/env bash
# Start a real Dask cluster on this machine: one `dask scheduler` and N
# `dask worker` processes (each a nanny + worker), detached in the background.
#
# Usage:
#   cluster/local/start-cluster.sh [N_WORKERS]
#   ADDR=$(cluster/local/start-cluster.sh 4)         # stdout is just the address
#   daskpd run jobs/demo.toml --scheduler "$ADDR"     # e.g. tcp://127.0.0.1:8786
#   cluster/local/stop-cluster.sh
#
# Settings (environment variables, all optional):
#   DASKPD_HOST            interface to bind and advertise      127.0.0.1
#   DASKPD_SCHEDULER_PORT  scheduler port                       8786
#   DASKPD_DASHBOARD_PORT  dashboard port, or "none"            8787
#   DASKPD_HTTP_HOST       interface of every HTTP server       HOST; 127.0.0.1 with TLS
#                          (dashboard, worker /health)
#   DASKPD_N_WORKERS       worker processes (or the 1st arg)    2
#   DASKPD_NTHREADS        threads per worker                   cores / N_WORKERS (>= 1)
#   DASKPD_MEMORY_LIMIT    per worker: "4GiB", a fraction of    0.9 / N_WORKERS
#                          RAM like "0.25", or "auto"
#   DASKPD_RUN_DIR         pid files, logs, scheduler.json,     ${TMPDIR:-/tmp}/daskpd-cluster-$USER-$PORT
#                          address, worker spill directories
#   DASKPD_START_TIMEOUT   seconds to wait for all workers      60
#   DASKPD_DASK            the `dask` executable                `dask` on PATH
#   DASKPD_PYTHON          python with distributed, used for    python next to DASKPD_DASK, else python3
#                          the readiness check
#   DASKPD_TLS_DIR         if set: TLS only.  Directory made by cluster/tls/make-certs.sh
#                          (ca.pem, scheduler.pem/.key, worker.pem/.key, client.pem/.key);
#                          the address becomes tls://HOST:PORT.  See start-tls-cluster.sh.
#
# Every process runs in its own session/process group (setsid), so closing the
# terminal does not kill the cluster and stop-cluster.sh can stop each nanny
# together with its worker child.  The script waits until the scheduler reports
# all N workers, then prints the address on stdout (progress goes to stderr) and
# writes it to $DASKPD_RUN_DIR/address.  On failure it stops whatever it started
# and shows the end of the logs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "start-cluster: $*" >&2; }
die() { log "$*"; exit 1; }

HOST="${DASKPD_HOST:-127.0.0.1}"
PORT="${DASKPD_SCHEDULER_PORT:-8786}"
DASHBOARD_PORT="${DASKPD_DASHBOARD_PORT:-8787}"
N_WORKERS="${1:-${DASKPD_N_WORKERS:-2}}"
TIMEOUT="${DASKPD_START_TIMEOUT:-60}"
TLS_DIR="${DASKPD_TLS_DIR:-}"

[[ "$N_WORKERS" =~ ^[0-9]+$ ]] || die "N_WORKERS must be a non-negative integer, got '$N_WORKERS'"
[[ "$PORT" =~ ^[0-9]+$ && "$PORT" -gt 0 ]] || die "DASKPD_SCHEDULER_PORT must be a fixed port number, got '$PORT'"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "DASKPD_START_TIMEOUT must be whole seconds, got '$TIMEOUT'"

ncpu() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1; }
if [[ -n "${DASKPD_NTHREADS:-}" ]]; then
    NTHREADS="$DASKPD_NTHREADS"
else
    NTHREADS=$(( $(ncpu) / (N_WORKERS > 0 ? N_WORKERS : 1) ))
    (( NTHREADS >= 1 )) || NTHREADS=1
fi
if [[ -n "${DASKPD_MEMORY_LIMIT:-}" ]]; then
    MEMORY_LIMIT="$DASKPD_MEMORY_LIMIT"
else
    # separate `dask worker` processes each see the whole machine, so split it
    MEMORY_LIMIT=$(awk -v n="$N_WORKERS" 'BEGIN { if (n < 1) n = 1; printf "%.3f", 0.9 / n }')
fi

DASK="${DASKPD_DASK:-$(command -v dask || true)}"
[[ -n "$DASK" && -x "$DASK" ]] || die "cannot find the 'dask' executable (install distributed or set DASKPD_DASK)"
if [[ -n "${DASKPD_PYTHON:-}" ]]; then
    PYTHON="$DASKPD_PYTHON"
elif [[ -x "$(dirname "$DASK")/python" ]]; then
    PYTHON="$(dirname "$DASK")/python"
else
    PYTHON="$(command -v python3 || true)"
fi
[[ -n "$PYTHON" ]] || die "cannot find python (set DASKPD_PYTHON)"

RUN_DIR="${DASKPD_RUN_DIR:-${TMPDIR:-/tmp}/daskpd-cluster-$(id -un)-$PORT}"
mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"

# refuse to start twice on the same run dir
for f in "$RUN_DIR"/scheduler.pid "$RUN_DIR"/worker-*.pid; do
    [[ -f "$f" ]] || continue
    pid="$(<"$f")"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        die "a cluster from $RUN_DIR is still running (pid $pid); run stop-cluster.sh first"
    fi
    rm -f "$f"
done
rm -f "$RUN_DIR/address" "$RUN_DIR/scheduler.json"

SCHED_TLS=() WORKER_TLS=() CHECK_TLS=()
if [[ -n "$TLS_DIR" ]]; then
    TLS_DIR="$(cd "$TLS_DIR" && pwd)" || die "DASKPD_TLS_DIR '$DASKPD_TLS_DIR' is not a directory"
    for f in ca.pem scheduler.pem scheduler.key worker.pem worker.key client.pem client.key; do
        [[ -r "$TLS_DIR/$f" ]] || die "missing $TLS_DIR/$f (make it with cluster/tls/make-certs.sh $TLS_DIR)"
    done
    PROTOCOL=tls
    SCHED_TLS=(--protocol tls --tls-ca-file "$TLS_DIR/ca.pem"
               --tls-cert "$TLS_DIR/scheduler.pem" --tls-key "$TLS_DIR/scheduler.key")
    WORKER_TLS=(--protocol tls --tls-ca-file "$TLS_DIR/ca.pem"
                --tls-cert "$TLS_DIR/worker.pem" --tls-key "$TLS_DIR/worker.key")
    CHECK_TLS=("$TLS_DIR/ca.pem" "$TLS_DIR/client.pem" "$TLS_DIR/client.key")
else
    PROTOCOL=tcp
fi
ADDR="$PROTOCOL://$HOST:$PORT"

# Every scheduler and worker runs an HTTP server (the dashboard, and /health,
# /info, /json/... even with the dashboard off); left to dask, an off dashboard
# and every worker's server bind all interfaces.  Pin them: to HOST for plain
# TCP, and to loopback with TLS (the HTTP server would speak plain,
# unauthenticated HTTP beside a TLS-only cluster; reach the dashboard through
# an SSH tunnel, or set DASKPD_HTTP_HOST to accept the exposure).
if [[ -n "$TLS_DIR" ]]; then
    HTTP_HOST="${DASKPD_HTTP_HOST:-127.0.0.1}"
else
    HTTP_HOST="${DASKPD_HTTP_HOST:-$HOST}"
fi
if [[ "$DASHBOARD_PORT" == "none" ]]; then
    DASHBOARD=(--no-dashboard --dashboard-address "$HTTP_HOST:0")
else
    DASHBOARD=(--dashboard-address "$HTTP_HOST:$DASHBOARD_PORT")
fi

if command -v setsid >/dev/null 2>&1; then DETACH=(setsid); else DETACH=(nohup); fi

start_bg() {  # start_bg NAME CMD... : detached, logs to RUN_DIR/NAME.log, pid to NAME.pid
    local name="$1"; shift
    "${DETACH[@]}" "$@" > "$RUN_DIR/$name.log" 2>&1 < /dev/null &
    echo $! > "$RUN_DIR/$name.pid"
}

fail() {
    log "$*"
    for f in "$RUN_DIR"/scheduler.log "$RUN_DIR"/worker-*.log; do
        [[ -f "$f" ]] || continue
        echo "----- tail $f" >&2
        tail -n 15 "$f" >&2 || true
    done
    "$HERE/stop-cluster.sh" "$RUN_DIR" >&2 || true
    exit 1
}

log "scheduler $ADDR, $N_WORKERS worker(s) x $NTHREADS thread(s), memory-limit $MEMORY_LIMIT, run dir $RUN_DIR"
# (${a[@]+"${a[@]}"} keeps empty arrays legal under set -u on bash < 4.4)
start_bg scheduler "$DASK" scheduler --host "$HOST" --port "$PORT" "${DASHBOARD[@]}" \
    --scheduler-file "$RUN_DIR/scheduler.json" ${SCHED_TLS[@]+"${SCHED_TLS[@]}"}

for (( i = 0; i < N_WORKERS; i++ )); do
    start_bg "worker-$i" "$DASK" worker "$ADDR" --host "$HOST" --name "worker-$i" \
        --nthreads "$NTHREADS" --memory-limit "$MEMORY_LIMIT" --no-dashboard --dashboard-address "$HTTP_HOST:0" \
        --local-directory "$RUN_DIR/worker-$i" ${WORKER_TLS[@]+"${WORKER_TLS[@]}"}
done

PIDS=()
for f in "$RUN_DIR"/scheduler.pid "$RUN_DIR"/worker-*.pid; do PIDS+=("$(<"$f")"); done

# Wait until the scheduler answers and lists all workers; give up early if a
# process died (port taken, bad certificate, ...).
if ! "$PYTHON" - "$ADDR" "$N_WORKERS" "$TIMEOUT" "${PIDS[*]}" "$RUN_DIR/scheduler.json" \
        ${CHECK_TLS[@]+"${CHECK_TLS[@]}"} <<'PY' >&2
import os, sys, time

addr, n, timeout, pids = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split()
scheduler_file, tls = sys.argv[5], sys.argv[6:]
from distributed import Client
from distributed.security import Security

security = None
if tls:
    security = Security(tls_ca_file=tls[0], tls_client_cert=tls[1], tls_client_key=tls[2],
                        require_encryption=True)

def running(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child stays a zombie until this script's shell reaps it
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True

def dead():
    return [p for p in pids if not running(p)]

deadline = time.monotonic() + timeout
# The scheduler writes its scheduler file once it listens.  Wait for that
# rather than retrying Client(): failed Clients linger until garbage
# collection, and their finalizers can stall distributed's IO loop.
while not os.path.exists(scheduler_file):
    if dead():
        sys.exit(f"process(es) {' '.join(dead())} exited during start-up")
    if time.monotonic() > deadline:
        sys.exit(f"scheduler {addr} did not start within {timeout:.0f}s")
    time.sleep(0.2)

client = None
try:
    client = Client(addr, timeout=max(5.0, deadline - time.monotonic()), security=security,
                    set_as_default=False)
    while True:
        have = len(client.nthreads())  # {worker address: nthreads}, stable across versions
        if have >= n:
            print(f"start-cluster: {have} worker(s) connected", file=sys.stderr)
            break
        if dead():
            sys.exit(f"process(es) {' '.join(dead())} exited during start-up")
        if time.monotonic() > deadline:
            sys.exit(f"only {have} of {n} workers connected within {timeout:.0f}s")
        time.sleep(0.25)
finally:
    if client is not None:
        client.close()
PY
then
    fail "cluster did not come up"
fi

echo "$ADDR" > "$RUN_DIR/address"
log "ready; stop with: $HERE/stop-cluster.sh $RUN_DIR"
log "run a job with: daskpd run jobs/demo.toml --scheduler $ADDR"
echo "$ADDR"
