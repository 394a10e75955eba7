#!/usr/bin/env bash
# Makes the root of meshnode's built-in CA for the standalone overlay: DIR/root-cert.pem and
# DIR/root-key.pem (ECDSA P-256, CA:TRUE, keyCertSign+cRLSign, 10 years, key mode 0600), the files
# meshnode-proxy's --ca-dir / MESHNODE_CA_DIR loads. Every node's proxy must load the same root, so
# it goes into one Secret (the command is printed at the end). Refuses to overwrite an existing root.
#
#   scripts/make-ca.sh DIR [TRUST_DOMAIN]
set -euo pipefail

dir=${1:?usage: scripts/make-ca.sh DIR [TRUST_DOMAIN]}
trust_domain=${2:-cluster.local}
if [[ -e $dir/root-cert.pem || -e $dir/root-key.pem ]]; then
  echo "make-ca.sh: $dir already holds a root; remove it first to make a new one" >&2
  exit 1
fi
mkdir -p "$dir"
(
  umask 077
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/O=$trust_domain/CN=meshnode root CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$dir/root-key.pem" -out "$dir/root-cert.pem" 2>/dev/null
)
chmod 0644 "$dir/root-cert.pem"
echo "make-ca.sh: wrote $dir/root-cert.pem and $dir/root-key.pem; store them for the standalone overlay with:"
echo "  kubectl -n meshnode-system create secret generic meshnode-ca \\"
echo "    --from-file=$dir/root-cert.pem --from-file=$dir/root-key.pem"
