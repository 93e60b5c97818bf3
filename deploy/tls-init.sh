#!/bin/sh
# The compose file's one-shot `tls-init` service (docker-compose.yml; deploy/README.md): makes
# the cluster's TLS material with `cairn tls` once, into named volumes, and never replaces it;
# and the management token's secret (TLS turns access control on: docs/security.md), once too.
#
#   /etc/cairn/ca     (volume tls-ca)  the CA certificate and key, the management token; no node mounts it
#   /etc/cairn/nK     (volume nK-tls)  node nK's certificate and key, the CA certificate and the
#                                      management token (CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE);
#                                      mounted read-only at /etc/cairn/tls in node nK only
#
# Each node certificate names the node's service name (--host nK: its peers dial nK:7500) and,
# as every node certificate does, localhost, 127.0.0.1 and ::1 (the health check, and the
# published ports reached from the host). Runs as root so it can write into fresh volumes;
# everything it writes is handed to the image's unprivileged `node` user, files mode 0600.
#
# Environment: CAIRN_TLS_NODES (default "n1 n2 n3 n4 n5").
set -eu
cd /opt/cairn
NODES=${CAIRN_TLS_NODES:-n1 n2 n3 n4 n5}
CA=/etc/cairn/ca
if [ ! -f "$CA/cairn-ca.pem" ]; then
  node bin/cairn tls ca create --dir "$CA" --name "Cairn compose CA"
else
  echo "tls-init: $CA/cairn-ca.pem exists; keeping it"
fi
# The management token: cairn_ops_<64 hex> (256 random bits), made with Cairn's own newSecret.
if [ ! -f "$CA/management-token" ]; then
  (umask 077 && node --input-type=module -e "import { newSecret } from '/opt/cairn/dist/src/auth/index.js'; process.stdout.write(newSecret('ops') + '\n');" >"$CA/management-token.tmp")
  mv "$CA/management-token.tmp" "$CA/management-token"
  echo "tls-init: made the management token ($CA/management-token)"
else
  echo "tls-init: $CA/management-token exists; keeping it"
fi
for id in $NODES; do
  dir=/etc/cairn/$id
  if [ ! -f "$dir/node-$id.pem" ]; then
    node bin/cairn tls cert create --dir "$dir" --ca "$CA/cairn-ca.pem" --ca-key "$CA/cairn-ca-key.pem" --node "$id" --host "$id"
  else
    echo "tls-init: $dir/node-$id.pem exists; keeping it"
  fi
  # The CA certificate beside the node's own files (a node mounts only its own volume).
  cmp -s "$CA/cairn-ca.pem" "$dir/cairn-ca.pem" 2>/dev/null || cp "$CA/cairn-ca.pem" "$dir/cairn-ca.pem"
  cmp -s "$CA/management-token" "$dir/management-token" 2>/dev/null || cp "$CA/management-token" "$dir/management-token"
  chmod 0600 "$dir"/*.pem "$dir/management-token"
  chown -R node:node "$dir"
done
chown -R node:node "$CA"
chmod 0700 "$CA"
echo "tls-init: TLS material and the management token ready for $NODES"
