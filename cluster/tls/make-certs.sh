#!/usr/bin/env bash
# Make a private CA plus scheduler / worker / client certificates for Dask TLS.
#
# Usage:
#   cluster/tls/make-certs.sh DIR [--days N] [--force]
#
# Writes into DIR (created if missing):
#   ca.pem  ca.key                      the cluster's own CA (keep ca.key offline)
#   scheduler.pem  scheduler.key        for `dask scheduler`
#   worker.pem     worker.key           for `dask worker` (and nannies)
#   client.pem     client.key           for Client / `daskpd run`
#   dask-tls.yaml                       cluster/tls/dask-tls.yaml with its
#                                       placeholder directory (/etc/daskpd/tls)
#                                       replaced by DIR, ready for DASK_CONFIG
#
# Every leaf certificate carries subjectAltName DNS:localhost, IP:127.0.0.1 plus
# whatever is in DASKPD_TLS_SANS (comma separated, openssl syntax), e.g.
#   DASKPD_TLS_SANS="DNS:dask-scheduler.example.org,IP:10.0.0.5" make-certs.sh /etc/daskpd/tls
# (Dask itself turns hostname checking off and relies on mutual authentication
# against this dedicated CA, but the SANs keep the certificates valid for other
# TLS clients such as curl against a TLS dashboard.)
#
# Keys are EC P-256, private keys are mode 0600.  Refuses to overwrite an
# existing CA unless --force is given.
set -euo pipefail

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

DIR=""
DAYS=825
FORCE=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --days) DAYS="${2:?--days needs a value}"; shift 2 ;;
        --days=*) DAYS="${1#--days=}"; shift ;;
        --force) FORCE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "make-certs.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *)
            if [[ -n "$DIR" ]]; then echo "make-certs.sh: only one DIR please" >&2; exit 2; fi
            DIR="$1"; shift ;;
    esac
done
if [[ -z "$DIR" ]]; then usage >&2; exit 2; fi
if ! [[ "$DAYS" =~ ^[0-9]+$ ]]; then echo "make-certs.sh: --days must be an integer" >&2; exit 2; fi
command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh: openssl not found on PATH" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"   # absolute, so the rendered YAML works from anywhere

if [[ -e "$DIR/ca.key" && "$FORCE" -ne 1 ]]; then
    echo "make-certs.sh: $DIR/ca.key already exists; use --force to replace the whole set" >&2
    exit 1
fi

umask 077
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

SANS="DNS:localhost,IP:127.0.0.1"
if [[ -n "${DASKPD_TLS_SANS:-}" ]]; then SANS="$SANS,$DASKPD_TLS_SANS"; fi

newkey() {  # newkey OUT.key
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
    chmod 600 "$1"
}

# --- CA ---------------------------------------------------------------------
newkey "$DIR/ca.key"
cat > "$TMP/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = daskpd cluster CA
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
openssl req -x509 -new -key "$DIR/ca.key" -days "$DAYS" -sha256 \
    -config "$TMP/ca.cnf" -out "$DIR/ca.pem"

# --- leaves -------------------------------------------------------------------
leaf() {  # leaf ROLE EXTENDED_KEY_USAGE
    local role="$1" eku="$2"
    newkey "$DIR/$role.key"
    openssl req -new -key "$DIR/$role.key" -subj "/CN=daskpd-$role" -out "$TMP/$role.csr"
    cat > "$TMP/$role.ext" <<EOF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment, keyAgreement
extendedKeyUsage = $eku
subjectAltName = $SANS
authorityKeyIdentifier = keyid
subjectKeyIdentifier = hash
EOF
    openssl x509 -req -in "$TMP/$role.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 \
        -extfile "$TMP/$role.ext" -out "$DIR/$role.pem" 2>/dev/null
    chmod 644 "$DIR/$role.pem"
}
# scheduler and workers both listen (server) and dial each other (client)
leaf scheduler "serverAuth, clientAuth"
leaf worker "serverAuth, clientAuth"
leaf client "clientAuth"
chmod 644 "$DIR/ca.pem"

for role in scheduler worker client; do
    openssl verify -CAfile "$DIR/ca.pem" "$DIR/$role.pem" >/dev/null
done

# --- Dask config with the real directory --------------------------------------
TEMPLATE="$HERE/dask-tls.yaml"
if [[ -f "$TEMPLATE" ]]; then
    content="$(<"$TEMPLATE")"
    printf '%s\n' "${content//\/etc\/daskpd\/tls/$DIR}" > "$DIR/dask-tls.yaml"
    chmod 644 "$DIR/dask-tls.yaml"
fi

echo "certificates written to $DIR" >&2
echo "  use them with: DASK_CONFIG=$DIR/dask-tls.yaml daskpd run JOB.toml --scheduler tls://HOST:PORT" >&2
