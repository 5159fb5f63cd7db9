#!/usr/bin/env bash
# Start a TLS-only Dask cluster on 127.0.0.1: `dask scheduler --protocol tls`
# and N `dask worker` processes, each given --tls-ca-file / --tls-cert / --tls-key.
#
# Usage:
#   cluster/tls/make-certs.sh ./certs                    # once
#   ADDR=$(cluster/tls/start-tls-cluster.sh ./certs [N_WORKERS])   # tls://127.0.0.1:8786
#   DASK_CONFIG=./certs/dask-tls.yaml daskpd run jobs/demo.toml --scheduler "$ADDR"
#   cluster/local/stop-cluster.sh                        # same run dir rules
#
# CERT_DIR (first argument, or $DASKPD_TLS_DIR) must hold the files make-certs.sh
# writes.  Everything else (DASKPD_SCHEDULER_PORT, DASKPD_N_WORKERS,
# DASKPD_NTHREADS, DASKPD_MEMORY_LIMIT, DASKPD_RUN_DIR, ...) is exactly as in
# cluster/local/start-cluster.sh, which does the work; what it runs is
#   dask scheduler --host 127.0.0.1 --port PORT --protocol tls \
#       --tls-ca-file CERT_DIR/ca.pem --tls-cert CERT_DIR/scheduler.pem --tls-key CERT_DIR/scheduler.key
#   dask worker tls://127.0.0.1:PORT --protocol tls \
#       --tls-ca-file CERT_DIR/ca.pem --tls-cert CERT_DIR/worker.pem --tls-key CERT_DIR/worker.key
# The scheduler then accepts only TLS connections from holders of a certificate
# signed by CERT_DIR/ca.pem (mutual TLS); plain tcp:// clients are refused.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CERT_DIR="${1:-${DASKPD_TLS_DIR:-}}"
if [[ -z "$CERT_DIR" ]]; then
    echo "usage: start-tls-cluster.sh CERT_DIR [N_WORKERS]   (or set DASKPD_TLS_DIR)" >&2
    exit 2
fi
[[ -d "$CERT_DIR" ]] || { echo "start-tls-cluster: $CERT_DIR is not a directory" >&2; exit 1; }
shift || true

export DASKPD_TLS_DIR="$CERT_DIR"
export DASKPD_HOST="${DASKPD_HOST:-127.0.0.1}"
exec "$HERE/../local/start-cluster.sh" "$@"
