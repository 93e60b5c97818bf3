#!/usr/bin/env bash
# A local Cairn cluster of N nodes (1 to 5) as background processes: `make cluster N=3`,
# `make cluster-stop`. See deploy/README.md.
#
#   scripts/cluster.sh start N [agent flags...]   start nodes n1..nN (those not running), wait for a leader, print where they are
#   scripts/cluster.sh stop                       SIGTERM every node, SIGKILL what is left after the grace period
#   scripts/cluster.sh status                     each node's pid, role, term and applied index
#   scripts/cluster.sh clean                      stop, then delete .cluster/ (every node's data)
#
# Node K listens on 127.0.0.1:75K0 (gRPC: Raft, forwarding, public API) and 127.0.0.1:75K1
# (HTTP): n1 7510/7511 ... n5 7550/7551, clear of a `make run` node on 7500/7501. Everything a
# node has lives under .cluster/ in the checkout: data in .cluster/nK/, output in
# .cluster/nK.log, its pid in .cluster/nK.pid, the cluster size in .cluster/size.
#
# TLS is always on (docs/security.md): the first start makes the cluster's PKI under
# .cluster/pki/ with `bin/cairn tls` (the CA, one node certificate per node, a client
# certificate `admin`), every node serves TLS with its own certificate, and every helper here
# (waiting for a leader, status) checks the nodes against that CA. A .cluster/ made before TLS
# gets a PKI on its next start; FRESH=1 deletes the PKI with the data.
#
# TLS turns access control on (default deny; docs/security.md "Tokens and roles"): the first
# start also makes a management token secret in .cluster/token (mode 0600) and gives it to every
# node with --acl-initial-management-token-file, so the leader creates that token; the start
# waits until every node accepts it. Clients send it: `export CAIRN_TOKEN=$(cat .cluster/token)`,
# curl -H "authorization: Bearer $CAIRN_TOKEN". (Agent flags given after N with --acl=false
# turn ACLs off: then no token file is passed.)
#
# Environment: CLUSTER_DIR (default .cluster), CLUSTER_HOST (default 127.0.0.1),
# LEADER_TIMEOUT (seconds to wait for a leader, default 60), STOP_GRACE (seconds between
# SIGTERM and SIGKILL, default 15), FRESH=1 (delete the old data first).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${CLUSTER_DIR:-.cluster}
HOST=${CLUSTER_HOST:-127.0.0.1}
LEADER_TIMEOUT=${LEADER_TIMEOUT:-60}
STOP_GRACE=${STOP_GRACE:-15}
MAX_NODES=5

die() {
  echo "cluster: $*" >&2
  exit 1
}

grpc_port() { echo "75${1}0"; }
http_port() { echo "75${1}1"; }

# The pid in .cluster/nK.pid if that process is still this node's agent, else nothing.
live_pid() {
  local id=$1 pid
  [ -f "$DIR/$id.pid" ] || return 0
  pid=$(cat "$DIR/$id.pid")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  # The pid may have been reused by another program since: check its command line.
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "agent --node-id $id "; then
    echo "$pid"
  fi
}

# Node ids with a pid file, in order.
known_nodes() {
  local f
  for f in "$DIR"/n*.pid; do
    [ -e "$f" ] || continue
    basename "$f" .pid
  done | sort -V
}

# The cluster's PKI (made by ensure_pki): the CA, node K's files, the client `admin`.
pki_dir() { echo "$DIR/pki"; }
ca_file() { echo "$(pki_dir)/cairn-ca.pem"; }
# The management token's secret (made by ensure_token).
token_file() { echo "$DIR/token"; }

# Makes the management token secret (cairn_ops_<64 hex>, 256 random bits) once, mode 0600:
# every start gives the same file to every node; the leader creates the token if it is absent.
ensure_token() {
  local f
  f=$(token_file)
  [ -f "$f" ] && return 0
  echo "making the cluster's management token in $f"
  (umask 077 && node --input-type=module -e "import { newSecret } from './dist/src/auth/index.js'; process.stdout.write(newSecret('ops') + '\n');" >"$f.tmp") || die "could not make the management token in $f"
  mv "$f.tmp" "$f"
}

# Makes what is missing of the PKI: the CA once, then a certificate for each of n1..nN that has
# none (naming CLUSTER_HOST besides the loopback names every node certificate carries), and the
# client certificate `admin`. Never replaces a file: the nodes of a cluster keep one CA.
ensure_pki() {
  local n=$1 k pki
  pki=$(pki_dir)
  if [ ! -f "$(ca_file)" ]; then
    echo "making the cluster's TLS material under $pki/ (bin/cairn tls)"
    node bin/cairn tls ca create --dir "$pki" --name "Cairn local cluster CA" >/dev/null || die "could not create the CA under $pki/"
  fi
  for k in $(seq 1 "$n"); do
    [ -f "$pki/node-n$k.pem" ] && continue
    node bin/cairn tls cert create --dir "$pki" --node "n$k" --host "$HOST" >/dev/null || die "could not create node n$k's certificate under $pki/"
  done
  if [ ! -f "$pki/client-admin.pem" ]; then
    node bin/cairn tls cert create --dir "$pki" --client admin >/dev/null || die "could not create the client certificate admin under $pki/"
  fi
}

port_in_use() {
  # Bash's /dev/tcp: a successful connect means something listens there.
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

cmd_start() {
  local n=${1:-}
  [ $# -gt 0 ] && shift
  [[ "$n" =~ ^[1-9][0-9]*$ ]] && [ "$n" -le "$MAX_NODES" ] || die "N must be a number from 1 to $MAX_NODES, got '${n}' (make cluster N=3)"
  command -v node >/dev/null || die "node (20 or newer) is required"
  [ -f dist/src/cli/main.js ] || die "not built; run make build first"

  local id running=()
  for id in $(known_nodes); do
    [ -n "$(live_pid "$id")" ] && running+=("$id")
  done
  if [ ${#running[@]} -gt 0 ]; then
    [ "${FRESH:-0}" != 1 ] || die "FRESH=1 but ${running[*]} still run; make cluster-stop first"
    # Some nodes run (one was killed, say): start only the missing ones, into the same cluster.
    [ "$(cat "$DIR/size" 2>/dev/null)" = "$n" ] || die "${running[*]} of a $(cat "$DIR/size" 2>/dev/null || echo '?')-node cluster are running; make cluster-stop first"
  fi

  if [ "${FRESH:-0}" = 1 ] && [ -d "$DIR" ]; then
    echo "FRESH=1: deleting $DIR"
    rm -rf "$DIR"
  fi
  if [ -f "$DIR/size" ] && [ "$(cat "$DIR/size")" != "$n" ]; then
    die "$DIR holds the data of a $(cat "$DIR/size")-node cluster; start it with N=$(cat "$DIR/size"), or start afresh with FRESH=1 (deletes that data)"
  fi
  mkdir -p "$DIR"
  # Keep the cluster's files out of git without touching the repository's .gitignore.
  [ -f "$DIR/.gitignore" ] || echo '*' >"$DIR/.gitignore"

  local k missing=()
  for k in $(seq 1 "$n"); do
    [[ " ${running[*]} " == *" n$k "* ]] && continue
    missing+=("$k")
    for port in "$(grpc_port "$k")" "$(http_port "$k")"; do
      port_in_use "$port" && die "port $HOST:$port (node n$k) is in use by another program; stop it first"
    done
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "all $n nodes are running already (scripts/cluster.sh status shows them; make cluster-stop stops them)"
    return 0
  fi

  local fresh=yes
  [ -f "$DIR/size" ] && fresh=no
  ensure_pki "$n"
  local acl=yes a
  for a in "$@"; do [ "$a" = "--acl=false" ] && acl=no; done
  [ "$acl" = yes ] && ensure_token
  echo "$n" >"$DIR/size"

  for k in "${missing[@]}"; do
    id="n$k"
    local join=() j
    for j in $(seq 1 "$n"); do
      [ "$j" = "$k" ] || join+=("$HOST:$(grpc_port "$j")")
    done
    local args=(agent --node-id "$id" --data-dir "$DIR/$id" --grpc-addr "$HOST:$(grpc_port "$k")" --http-addr "$HOST:$(http_port "$k")" --bootstrap-expect "$n" --demo-types --controllers
      --tls-ca-file "$(ca_file)" --tls-cert-file "$(pki_dir)/node-$id.pem" --tls-key-file "$(pki_dir)/node-$id-key.pem")
    [ "$acl" = yes ] && args+=(--acl-initial-management-token-file "$(token_file)")
    if [ ${#join[@]} -gt 0 ]; then
      args+=(--join "$(IFS=,; echo "${join[*]}")")
    fi
    args+=("$@")
    {
      echo "---- $(date -u +%Y-%m-%dT%H:%M:%SZ) starting: node bin/cairn ${args[*]}"
    } >>"$DIR/$id.log"
    # setsid + nohup: the node outlives this shell and make, and a Ctrl-C in the terminal that
    # ran `make cluster` does not reach it.
    setsid nohup node bin/cairn "${args[@]}" </dev/null >>"$DIR/$id.log" 2>&1 &
    echo $! >"$DIR/$id.pid"
  done
  if [ "$fresh" = yes ]; then
    echo "started $n new node(s) under $DIR/; forming a cluster"
  elif [ ${#running[@]} -gt 0 ]; then
    echo "started $(printf 'n%s ' "${missing[@]}")from their data under $DIR/ (already running: ${running[*]})"
  else
    echo "restarted $n node(s) from their data under $DIR/"
  fi

  # Wait for a leader: progress on one line per second, with each node's state.
  local urls=()
  for k in $(seq 1 "$n"); do urls+=("n$k=https://$HOST:$(http_port "$k")"); done
  local tokenargs=()
  [ "$acl" = yes ] && tokenargs=(--token-file "$(token_file)")
  if ! node scripts/cluster-wait.mjs --timeout "$LEADER_TIMEOUT" --dir "$DIR" --ca "$(ca_file)" "${tokenargs[@]}" "${urls[@]}"; then
    echo "cluster: no leader (or no working management token) within ${LEADER_TIMEOUT}s; the nodes are left running so you can look:" >&2
    for k in $(seq 1 "$n"); do echo "  tail $DIR/n$k.log" >&2; done
    echo "  make cluster-stop   # stops them" >&2
    exit 1
  fi

  echo
  printf '%-4s %-7s %-22s %-22s %s\n' node pid http grpc log
  for k in $(seq 1 "$n"); do
    id="n$k"
    printf '%-4s %-7s %-22s %-22s %s\n' "$id" "$(cat "$DIR/$id.pid")" "https://$HOST:$(http_port "$k")" "$HOST:$(grpc_port "$k")" "$DIR/$id.log"
  done
  local ca tf
  ca=$(ca_file)
  tf=$(token_file)
  if [ "$acl" != yes ]; then
    cat <<EOF

TLS is on, access control is OFF (--acl=false): every client that reaches a node may do everything.
  export CAIRN_TLS_CA_FILE=$ca CAIRN_HTTP_ADDR=https://$HOST:$(http_port 1)
  curl -s --cacert $ca https://$HOST:$(http_port 1)/v1/operator/raft/configuration
Status: scripts/cluster.sh status     Stop: make cluster-stop     Delete the data: scripts/cluster.sh clean
EOF
    return 0
  fi
  cat <<EOF

TLS is on: the nodes' certificates are signed by $ca (the CA key, the node keys and a
client certificate 'admin' are beside it, in $(pki_dir)/). Clients check the nodes against it.
Access control is on (default deny): requests need a token. The management token's secret is
in $tf (keep it private; make scoped tokens with it: docs/security.md):
  export CAIRN_TLS_CA_FILE=$ca CAIRN_HTTP_ADDR=https://$HOST:$(http_port 1)   # for bin/cairn (or --tls-ca-file on every command)
  export CAIRN_TOKEN=\$(cat $tf)                                      # for bin/cairn (or --token-file $tf)
  curl --cacert $ca -H "authorization: Bearer \$CAIRN_TOKEN" ...         # https:// URLs
  new CairnClient({ endpoints: ['$HOST:$(grpc_port 1)'], tls: { ca: readFileSync('$ca') }, token: process.env.CAIRN_TOKEN })

Try (after the two exports):
  curl -s --cacert $ca -H "authorization: Bearer \$CAIRN_TOKEN" -X PUT https://$HOST:$(http_port 1)/v1/resource/demo.v1.Artist/korn -H 'content-type: application/json' -d '{"data":{"name":"Korn","genre":"metal"}}'
  curl -s --cacert $ca -H "authorization: Bearer \$CAIRN_TOKEN" https://$HOST:$(http_port "$n")/v1/resource/demo.v1.Artist/korn
  curl -s --cacert $ca -H "authorization: Bearer \$CAIRN_TOKEN" https://$HOST:$(http_port 1)/v1/operator/raft/configuration
  curl -s --cacert $ca https://$HOST:$(http_port 1)/v1/resources/demo.v1.Artist      # no token: 401
  bin/cairn operator raft list-peers --tls-ca-file $ca --endpoint https://$HOST:$(http_port 1)
Status: scripts/cluster.sh status     Stop: make cluster-stop     Delete the data: scripts/cluster.sh clean
EOF
}

cmd_stop() {
  local ids=() pids=() id pid
  for id in $(known_nodes); do
    pid=$(live_pid "$id")
    if [ -n "$pid" ]; then
      ids+=("$id")
      pids+=("$pid")
    else
      rm -f "$DIR/$id.pid"
    fi
  done
  if [ ${#pids[@]} -eq 0 ]; then
    echo "no cluster nodes are running (nothing in $DIR/*.pid)"
    return 0
  fi
  echo "stopping ${ids[*]} (SIGTERM; SIGKILL after ${STOP_GRACE}s)"
  # All at once: a node that is asked to stop hands over leadership first, so stopping the
  # followers one by one before the leader would only cause elections.
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local waited=0 left
  while :; do
    left=()
    for i in "${!pids[@]}"; do
      kill -0 "${pids[$i]}" 2>/dev/null && left+=("${ids[$i]}")
    done
    [ ${#left[@]} -eq 0 ] && break
    if [ "$waited" -ge $((STOP_GRACE * 10)) ]; then
      echo "still running after ${STOP_GRACE}s: ${left[*]}; sending SIGKILL"
      for i in "${!pids[@]}"; do kill -KILL "${pids[$i]}" 2>/dev/null || true; done
      sleep 0.2
      break
    fi
    if [ $((waited % 10)) -eq 0 ] && [ "$waited" -gt 0 ]; then echo "  waiting for ${left[*]} ($((waited / 10))s)"; fi
    sleep 0.1
    waited=$((waited + 1))
  done
  for id in "${ids[@]}"; do rm -f "$DIR/$id.pid"; done
  if [ "${1:-}" != quiet ]; then
    echo "stopped; the data stays in $DIR/ (make cluster N=$(cat "$DIR/size" 2>/dev/null || echo 3) restarts it, scripts/cluster.sh clean deletes it)"
  fi
}

cmd_status() {
  local n k id pid
  [ -f "$DIR/size" ] || die "no cluster in $DIR/ (make cluster N=3 starts one)"
  n=$(cat "$DIR/size")
  local urls=() tokenargs=()
  [ -f "$(token_file)" ] && tokenargs=(--token-file "$(token_file)")
  printf '%-4s %-7s %s\n' node pid state
  for k in $(seq 1 "$n"); do
    id="n$k"
    pid=$(live_pid "$id")
    printf '%-4s %-7s %s\n' "$id" "${pid:--}" "$(node scripts/cluster-wait.mjs --ca "$(ca_file)" "${tokenargs[@]}" --describe "$id=https://$HOST:$(http_port "$k")")"
  done
}

cmd_clean() {
  cmd_stop quiet
  rm -rf "$DIR"
  echo "deleted $DIR/"
}

case "${1:-}" in
  start)
    shift
    cmd_start "$@"
    ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  clean) cmd_clean ;;
  *) die "usage: scripts/cluster.sh start N [agent flags...] | stop | status | clean" ;;
esac
