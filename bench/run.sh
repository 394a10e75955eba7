#!/usr/bin/env bash
# bench/run.sh - side-by-side benchmark of meshnode against direct TCP and mTLS tunnel peers
# (stunnel4, haproxy, haproxy plain TCP, Node http2 CONNECT -> nghttpx), in one run, on one
# simulated cluster (scripts/lib/cluster.sh: 2 node netns, pods with in-pod nft capture).
#
#   sudo bench/run.sh                 # full run (REPS=3), ~12 min -> bench/RESULTS.md + results-raw.tsv
#   QUICK=1 sudo bench/run.sh         # smoke run with tiny durations (< 90 s), writes to a temp dir
#   MESHNODE_PROXY_BIN=/path/meshnode-proxy CASES="direct meshnode-hbone stunnel" bench/run.sh
#   HOLD=/tmp/hold CASES=meshnode-hbone bench/run.sh   # cluster stays up for probing until /tmp/hold is deleted
#   MESHNODE_PROXY_ARGS="--worker-threads 1" bench/run.sh   # extra flags for both meshnode proxies
#
# Topology (all cases cross the same veth/bridge hops; see bench/README.md):
#   node1 netns (198.18.0.1)                       node2 netns (198.18.0.2)
#     pod n1-p0 198.19.1.10  enrolled (client)       pod n2-p0 198.19.2.10  enrolled, HBONE (server)
#     pod n1-p1 198.19.1.11  plain (peer client)     pod n2-p1 198.19.2.11  enrolled, protocol TCP
#     pods n1-p2..p4 enrolled, idle                  pod n2-p2 198.19.2.12  plain (direct/peer target)
#                                                    pods n2-p3..p4 enrolled, idle
#   direct          n1-p1 -> n2-p2:7000
#   meshnode-hbone  n1-p0 -> [nft] proxy A (in-pod 15001) -> HBONE mTLS -> n2-p0:15008 proxy B -> app
#   meshnode-tcp    n1-p0 -> [nft] proxy A -> plain TCP -> [nft] n2-p1:15006 proxy B -> app
#   peers           n1-p1 -> client proxy in node1 netns -> (m)TLS/TCP -> server proxy in node2 netns -> n2-p2
#   relay-inpod     n1-p5 -> [nft] C relay (in-pod 15001) -> plain TCP -> [nft] n2-p5:15006 C relay -> app
#   relay-tls       n1-p6 -> [nft] C TLS relay (in-pod 15001) -> mTLS -> n2-p6:15008 C TLS relay -> app
# Every figure is measured with the target (iperf3 / echo / HTTP / idle holder) on port 7000 of the
# server pod.  Cases are interleaved inside every repetition of every measurement.
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
# shellcheck source=../scripts/lib/common.sh
source "$REPO/scripts/lib/common.sh"
# shellcheck source=../scripts/lib/cluster.sh
source "$REPO/scripts/lib/cluster.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"

if [[ ${QUICK:-0} == 1 ]]; then
  : "${REPS:=1}" "${T_TPUT:=1}" "${T_RR:=0.5}" "${T_CPS:=0.5}" "${T_HTTP:=0.5}"
  : "${IDLE_N:=100}" "${IDLE_PEER_N:=100}" "${FOREIGN:=0}" "${PROFILE:=0}" "${OUT:=/tmp/mn-bench-quick-RESULTS.md}"
  : "${RAW_OUT:=/tmp/mn-bench-quick-raw.tsv}"
fi
: "${REPS:=3}" "${T_TPUT:=8}" "${T_RR:=2}" "${T_CPS:=2}" "${T_HTTP:=3}" "${CPS_THREADS:=4}"
: "${RR_SIZE:=64}" "${HTTP_RATE:=1000}" "${HTTP_CONNS:=10}" "${HTTP_SIZE:=1024}"
: "${IDLE_N:=10000}" "${IDLE_PEER_N:=4000}" "${TLS13_SUITE:=TLS_AES_128_GCM_SHA256}"
: "${OUT:=$BENCH/RESULTS.md}" "${RAW_OUT:=$BENCH/results-raw.tsv}" "${CASES:=}"
: "${PORT_BASE:=20000}" "${PROFILE:=1}" "${T_PROF:=4}" "${FOREIGN:=1}"
TPORT=7000
ALL_CASES=(direct meshnode-hbone meshnode-tcp relay-inpod relay-tls stunnel haproxy haproxy-tcp h2-nghttpx)
if [[ -n $CASES ]]; then read -r -a SEL <<<"$CASES"; else SEL=("${ALL_CASES[@]}"); fi
for c in "${SEL[@]}"; do
  [[ " ${ALL_CASES[*]} " == *" $c "* ]] || { echo "unknown case: $c (known: ${ALL_CASES[*]})" >&2; exit 2; }
done
[[ " ${SEL[*]} " == *" direct "* ]] || SEL=(direct "${SEL[@]}")   # ratios need the baseline

T_START=$SECONDS
log() { printf '[bench %s +%ds] %s\n' "$(date +%H:%M:%S)" $((SECONDS - T_START)) "$*" >&2; }

# ------------------------------------------------------------------------------------------
# Dependencies and the proxy binary.
# ------------------------------------------------------------------------------------------
bash "$REPO/scripts/install-deps.sh" || log "install-deps failed; cases whose tools are missing will fail"
for t in iperf3 openssl gcc python3 nft setsid timeout; do
  command -v "$t" >/dev/null || { echo "missing tool: $t" >&2; exit 2; }
done
PROXY_BIN=${MESHNODE_PROXY_BIN:-$REPO/build/release/src/app/meshnode-proxy}
if [[ " ${SEL[*]} " == *" meshnode-"* && ! -x $PROXY_BIN ]]; then
  log "building meshnode-proxy (release preset; set MESHNODE_PROXY_BIN to skip)"
  build_proxy "$REPO" >&2 || { echo "proxy build failed" >&2; exit 2; }
fi

# Which meshnode was measured: MESHNODE_COMMIT if given, else the checkout's HEAD (+ "-dirty" when
# src/ has local changes) when the binary was built here, else "given-binary".
if [[ -n ${MESHNODE_COMMIT:-} ]]; then MESH_COMMIT=$MESHNODE_COMMIT
elif [[ -z ${MESHNODE_PROXY_BIN:-} ]]; then
  MESH_COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  [[ -n $(git -C "$REPO" status --porcelain -- src 2>/dev/null) ]] && MESH_COMMIT+=-dirty
else MESH_COMMIT=given-binary; fi

# ------------------------------------------------------------------------------------------
# Scratch dir, process groups, cleanup.
# ------------------------------------------------------------------------------------------
RUN=$(mktemp -d /tmp/mn-bench.XXXXXX)
LOGDIR=$RUN
CERTS=$RUN/certs
BENCHNET=$RUN/benchnet
RAW=$RUN/raw.tsv
: >"$RAW"
PREFIX=$(cluster_new_prefix)
GROUPS_STARTED=()
TICK=$(getconf CLK_TCK)

group_pids() { # $1 = pgid -> member pids
  local pg=$1 f s
  [[ -z $pg ]] && return
  for f in /proc/[0-9]*/stat; do
    read -r s 2>/dev/null <"$f" || continue
    s=${s##*) }
    set -- $s
    [[ $3 == "$pg" ]] && { f=${f#/proc/}; echo "${f%/stat}"; }
  done
}
group_ticks() { # $1 = pgid -> utime+stime (+ reaped children's) of all members
  local pg=$1 f s t=0
  [[ -z $pg ]] && { echo 0; return; }
  for f in /proc/[0-9]*/stat; do
    read -r s 2>/dev/null <"$f" || continue
    s=${s##*) }
    set -- $s
    [[ $3 == "$pg" ]] && t=$((t + ${12} + ${13} + ${14} + ${15}))
  done
  echo "$t"
}
group_mem_kb() { # $1 = pgid, $2 = a /proc/<pid>/status field in kB (VmHWM, VmRSS, RssFile) -> sum over members
  local p k=0 v
  [[ -z $1 ]] && { echo 0; return; }
  for p in $(group_pids "$1"); do
    v=$(awk -v f="$2:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null)
    k=$((k + ${v:-0}))
  done
  echo "$k"
}
start_group() {  # $1 = label, $2 = netns, $3 = command (bash -c, foreground).  Sets LAST_PG.
  setsid ip netns exec "$2" bash -c "$3" >"$LOGDIR/$1.log" 2>&1 </dev/null &
  LAST_PG=$!
  GROUPS_STARTED+=("$LAST_PG")
}
stop_group() {
  local pg=$1 p i
  [[ -z $pg ]] && return
  for p in $(group_pids "$pg"); do kill -TERM "$p" 2>/dev/null; done
  for i in 1 2 3 4 5 6 7 8 9 10; do
    [[ -z $(group_pids "$pg") ]] && break
    sleep 0.2
  done
  for p in $(group_pids "$pg"); do kill -KILL "$p" 2>/dev/null; done
  wait "$pg" 2>/dev/null
}
cleanup() {
  local pg
  trap - EXIT INT TERM
  for pg in "${GROUPS_STARTED[@]}"; do stop_group "$pg"; done
  cluster_down "$PREFIX" >/dev/null 2>&1 || true
  rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cpu_busy() {     # machine busy ticks (user nice system irq softirq) and steal, from /proc/stat
  local _ u n s i io irq sirq st
  read -r _ u n s i io irq sirq st _ </proc/stat
  echo "$((u + n + s + irq + sirq)) $st"
}
OWN_NS=()
foreign_ticks() {  # user-space CPU ticks of processes outside this benchmark's namespaces and
  # process tree (other work on this shared machine); kernel threads are skipped.
  local f s t=0 p i
  [[ $FOREIGN == 1 ]] || { echo 0; return; }
  declare -A mine=()
  while read -r i p; do
    [[ " ${OWN_NS[*]} " == *" $i "* ]] && { p=${p#/proc/}; mine[${p%%/*}]=1; }
  done < <(stat -L -c '%i %n' /proc/[0-9]*/ns/net 2>/dev/null)
  mine[$$]=1; mine[$BASHPID]=1
  for f in /proc/[0-9]*/stat; do
    p=${f#/proc/}; p=${p%/stat}
    [[ -n ${mine[$p]:-} ]] && continue
    read -r s 2>/dev/null <"$f" || continue
    s=${s##*) }
    set -- $s
    (( ${7} & 0x200000 )) && continue
    [[ $2 == "$$" ]] && continue   # our own short-lived helpers
    t=$((t + ${12} + ${13}))
  done
  echo "$t"
}
emit() { printf '%s\n' "$*" >>"$RAW"; }
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------------------------------
# Helper binary, throwaway CA + SPIFFE-style P-256 certificates for the peers.
# ------------------------------------------------------------------------------------------
gcc -O2 -pthread -o "$BENCHNET" "$BENCH/benchnet.c" -lssl -lcrypto || exit 2
mkdir -p "$CERTS"
(
  cd "$CERTS" || exit 1
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null
  openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj "/O=mn-bench/CN=mn-bench-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  for n in client server; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $n.key 2>/dev/null
    openssl req -new -key $n.key -out $n.csr -subj "/O=mn-bench/CN=$n" 2>/dev/null
    printf 'subjectAltName=URI:spiffe://cluster.local/ns/default/sa/%s,DNS:%s.local,IP:198.18.0.1,IP:198.18.0.2\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' \
      $n $n >$n.ext
    openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 2 \
      -extfile $n.ext 2>/dev/null
    cat $n.crt $n.key >$n.pem
  done
) || { echo "certificate generation failed" >&2; exit 2; }

# ------------------------------------------------------------------------------------------
# Simulated cluster: 2 nodes x 7 pods; plain pods lose their nft capture. p0-p4 are meshnode's;
# n1-p5 and n2-p5 keep their capture for relay-inpod, the floor of meshnode's in-pod hops, and
# n1-p6 and n2-p6 for relay-tls, the floor of its TLS hops for bulk bytes.
# ------------------------------------------------------------------------------------------
log "cluster $PREFIX: 2 nodes x 7 pods"
cluster_up "$PREFIX" 2 7 "$RUN/cluster" || { echo "cluster_up failed" >&2; exit 2; }
ENVF=$RUN/cluster/cluster.env
get() { cluster_env_get "$ENVF" "$1"; }
N1=$(get MN_NODE1_NETNS) N2=$(get MN_NODE2_NETNS) N1_IP=$(get MN_NODE1_IP) N2_IP=$(get MN_NODE2_IP)
for ns in $(cluster_netns_of "$PREFIX"); do OWN_NS+=("$(stat -L -c %i "/var/run/netns/$ns")"); done
pod() { get "MN_POD_$1_$2_NETNS"; }
pip() { get "MN_POD_$1_$2_IP"; }
for p in "1 1" "2 2"; do   # plain pods (not enrolled): direct + peers
  ip netns exec "$(pod $p)" nft delete table inet meshnode
done
for ns in $(cluster_netns_of "$PREFIX"); do
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1 2>/dev/null
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_local_port_range="10000 60999" 2>/dev/null
done

# meshnode: every pod but n1-p1 / n2-p2 enrolled; n2-p1 is a protocol: TCP workload.
{
  echo "workloads:"
  for n in 1 2; do
    for i in 0 1 2 3 4; do
      [[ "$n $i" == "1 1" || "$n $i" == "2 2" ]] && continue
      proto=HBONE; sa="idle"
      [[ $n == 1 ]] && sa="app-$i"   # node 1's enrolled pods: four different apps (own identities)
      [[ "$n $i" == "1 0" ]] && sa=client
      [[ "$n $i" == "2 0" ]] && sa=server
      [[ "$n $i" == "2 1" ]] && { sa=server-tcp; proto=TCP; }
      echo "- {uid: pod-$n-$i, name: pod-$n-$i, namespace: default, serviceAccount: $sa, workloadIps: [\"$(pip $n $i)\"], protocol: $proto, node: node$n}"
    done
  done
} >"$RUN/mesh.yaml"
declare -A CPG SPG DST CLI STATUS IDLE_RSS
for c in "${SEL[@]}"; do CPG[$c]=; SPG[$c]=; STATUS[$c]=ok; done

MESH_A= MESH_B=
if [[ " ${SEL[*]} " == *" meshnode-"* ]]; then
  pods_a="" pods_b=""
  for i in 0 2 3 4; do pods_a+=" --pod pod-1-$i=/var/run/netns/$(pod 1 $i)"; done
  for i in 0 1 3 4; do pods_b+=" --pod pod-2-$i=/var/run/netns/$(pod 2 $i)"; done
  start_group meshnode-A "$N1" "exec '$PROXY_BIN' --config '$RUN/mesh.yaml' --ca-dir '$RUN/meshca' $pods_a --log-level warn ${MESHNODE_PROXY_ARGS:-}"
  MESH_A=$LAST_PG
  # both proxies share the CA dir: let A create the root first
  wait_until 15 "meshnode A ready" ip netns exec "$N1" curl -fsS "http://$N1_IP:15021/healthz/ready" ||
    log "meshnode A not ready: $(tail -c 400 "$LOGDIR/meshnode-A.log")"
  start_group meshnode-B "$N2" "exec '$PROXY_BIN' --config '$RUN/mesh.yaml' --ca-dir '$RUN/meshca' $pods_b --log-level warn ${MESHNODE_PROXY_ARGS:-}"
  MESH_B=$LAST_PG
  wait_until 15 "meshnode B ready" ip netns exec "$N2" curl -fsS "http://$N2_IP:15021/healthz/ready" ||
    log "meshnode B not ready: $(tail -c 400 "$LOGDIR/meshnode-B.log")"
fi

# ------------------------------------------------------------------------------------------
# Cases: where the load client runs, where it connects, which process groups are the proxies.
# Peers: client side in node1 netns on 198.18.0.1:PORT_BASE+10i+1, server side in node2 netns
# on 198.18.0.2:PORT_BASE+10i+2 (helpers on 127.0.0.1:+3).  Same suite, P-256 certs, mutual
# verification as bench/peers.sh of the shared harness.
# ------------------------------------------------------------------------------------------
CLIENT_SPIFFE=spiffe://cluster.local/ns/default/sa/client
SERVER_SPIFFE=spiffe://cluster.local/ns/default/sa/server
TGT=$(pip 2 2)
peer_cmds() {  # $1 = case, $2 = client port, $3 = server port, $4 = aux port -> sets CCMD SCMD
  local c=$1 cp=$2 sp=$3 ap=$4 d="$RUN/$1"
  mkdir -p "$d"
  case $c in
    stunnel)
      cat >"$d/client.conf" <<EOF
foreground = yes
pid =
debug = 3
[c]
client = yes
accept = $N1_IP:$cp
connect = $N2_IP:$sp
cert = $CERTS/client.crt
key = $CERTS/client.key
CAfile = $CERTS/ca.crt
verifyChain = yes
checkHost = server.local
sslVersionMin = TLSv1.3
ciphersuites = $TLS13_SUITE
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
EOF
      cat >"$d/server.conf" <<EOF
foreground = yes
pid =
debug = 3
[s]
accept = $N2_IP:$sp
connect = $TGT:$TPORT
cert = $CERTS/server.crt
key = $CERTS/server.key
CAfile = $CERTS/ca.crt
verifyChain = yes
sslVersionMin = TLSv1.3
ciphersuites = $TLS13_SUITE
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
EOF
      CCMD="exec stunnel '$d/client.conf'" SCMD="exec stunnel '$d/server.conf'" ;;
    haproxy|haproxy-tcp)
      local ssl_c="" ssl_s=""
      if [[ $c == haproxy ]]; then
        ssl_c="ssl crt $CERTS/client.pem ca-file $CERTS/ca.crt verify required verifyhost server.local sni str(server.local) ssl-min-ver TLSv1.3 ciphersuites $TLS13_SUITE"
        ssl_s="ssl crt $CERTS/server.pem ca-file $CERTS/ca.crt verify required ssl-min-ver TLSv1.3 ciphersuites $TLS13_SUITE"
      fi
      local g="global
  maxconn 9000
defaults
  mode tcp
  timeout connect 5s
  timeout client 300s
  timeout server 300s"
      printf '%s\nfrontend fe\n  bind %s:%s\n  default_backend be\nbackend be\n  server peer %s:%s %s\n' \
        "$g" "$N1_IP" "$cp" "$N2_IP" "$sp" "$ssl_c" >"$d/client.cfg"
      printf '%s\nfrontend fe\n  bind %s:%s %s\n  default_backend be\nbackend be\n  server target %s:%s\n' \
        "$g" "$N2_IP" "$sp" "$ssl_s" "$TGT" "$TPORT" >"$d/server.cfg"
      CCMD="exec haproxy -db -f '$d/client.cfg'" SCMD="exec haproxy -db -f '$d/server.cfg'" ;;
    h2-nghttpx)
      CCMD="exec node '$BENCH/h2connect-client.js' --listen $cp --listen-host $N1_IP --proxy $N2_IP:$sp \
        --target $TGT:$TPORT --ca '$CERTS/ca.crt' --cert '$CERTS/client.crt' --key '$CERTS/client.key' \
        --sni server.local --expect-san $SERVER_SPIFFE --ciphers $TLS13_SUITE"
      SCMD="BENCHNET_LISTEN=127.0.0.1 '$BENCHNET' connect-proxy $ap &
exec nghttpx --conf=/dev/null --http2-proxy -f'$N2_IP,$sp' -b'127.0.0.1,$ap' \
  --verify-client --verify-client-cacert='$CERTS/ca.crt' --tls-min-proto-version=TLSv1.3 \
  --tls13-ciphers=$TLS13_SUITE --no-ocsp --no-via --no-server-push -L WARN \
  --backend-connections-per-host=30000 --frontend-http2-max-concurrent-streams=20000 \
  --frontend-http2-window-size=4194304 \
  --frontend-http2-connection-window-size=16777216 '$CERTS/server.key' '$CERTS/server.crt'" ;;
  esac
}
declare -A DESC=(
  [direct]="no proxy: plain pod n1-p1 -> plain pod n2-p2 (veth, node1 routing, fabric bridge, node2 routing, veth)"
  [meshnode-hbone]="meshnode: client pod (nft capture) -> proxy A in-pod outbound -> HBONE (mTLS HTTP/2 CONNECT, pooled) -> proxy B in-pod 15008 -> server pod app"
  [meshnode-tcp]="meshnode: client pod (nft capture) -> proxy A -> plain TCP to a protocol: TCP workload -> its nft capture -> proxy B inbound 15006 -> app"
  [stunnel]="stunnel4 client (node1 netns, verifies chain + DNS SAN) -> stunnel4 server (node2 netns, client cert required); one TLS connection per TCP connection"
  [haproxy]="haproxy tcp mode TLS client (node1, verify required + verifyhost) -> haproxy TLS server (node2, verify required); one TLS connection per TCP connection"
  [haproxy-tcp]="haproxy tcp mode, no TLS: node1 haproxy -> node2 haproxy -> target (passthrough path)"
  [relay-inpod]="the floor of meshnode's plain-TCP hops: client pod n1-p5 (nft capture, as meshnode's) -> benchnet inpod-relay on 15001 in that pod (SO_ORIGINAL_DST, dials with SO_MARK 0x539) -> n2-p5's nft capture -> benchnet inpod-relay on 15006 in that pod -> app; a minimal C relay (one thread, edge-triggered epoll, read/write, no TLS, no HTTP/2, no routing, metrics or log)"
  [relay-tls]="the floor of meshnode's HBONE hops for bulk bytes: client pod n1-p6 (nft capture, as meshnode's) -> benchnet inpod-tls-relay client on 15001 in that pod (SO_ORIGINAL_DST; dials the destination's port 15008 with SO_MARK 0x539) -> mutual TLS 1.3 (OpenSSL, AES-128-GCM, P-256; the original port as 2 bytes) -> benchnet inpod-tls-relay server on 15008 in n2-p6 -> app; a minimal C relay (a thread per connection, one TLS connection per TCP connection, OpenSSL on a BIO pair, the buffering of meshnode's own BIOs, so the sockets see reads and writes of up to 256 KiB; no HTTP/2, no pooling, routing, metrics or log). Measured in throughput, request/response latency and HTTP (its 10 keep-alive connections' handshakes included; not conn/s: a handshake per connection); its '4 client pods' run is 4 iperf3 clients in its one client pod (a thread per connection either way)"
  [h2-nghttpx]="Node.js http2 client (one shared mTLS h2 session, one CONNECT stream per TCP connection; node1) -> nghttpx --http2-proxy (verify-client; node2) -> benchnet connect-proxy (splice) -> target"
)
idx=0
for c in "${SEL[@]}"; do
  idx=$((idx + 1))
  case $c in
    direct) CLI[$c]=$(pod 1 1); DST[$c]=$TGT ;;
    meshnode-hbone) CLI[$c]=$(pod 1 0); DST[$c]=$(pip 2 0); CPG[$c]=$MESH_A; SPG[$c]=$MESH_B ;;
    meshnode-tcp) CLI[$c]=$(pod 1 0); DST[$c]=$(pip 2 1); CPG[$c]=$MESH_A; SPG[$c]=$MESH_B ;;
    relay-inpod)
      CLI[$c]=$(pod 1 5); DST[$c]=$(pip 2 5)
      start_group relay-A "$(pod 1 5)" "ulimit -n 20000 2>/dev/null; exec '$BENCHNET' inpod-relay 15001"; CPG[$c]=$LAST_PG
      start_group relay-B "$(pod 2 5)" "ulimit -n 20000 2>/dev/null; exec '$BENCHNET' inpod-relay 15006"; SPG[$c]=$LAST_PG
      for side in "1 5 15001" "2 5 15006"; do
        set -- $side
        wait_until 10 "relay-inpod on :$3" ip netns exec "$(pod "$1" "$2")" sh -c "ss -ltnH 'sport = :$3' | grep -q ." ||
          STATUS[$c]="relay did not listen on :$3"
      done ;;
    relay-tls)
      CLI[$c]=$(pod 1 6); DST[$c]=$(pip 2 6)
      start_group relay-tls-A "$(pod 1 6)" "ulimit -n 20000 2>/dev/null; exec '$BENCHNET' inpod-tls-relay client 15001 '$CERTS/client.pem' '$CERTS/ca.crt'"; CPG[$c]=$LAST_PG
      start_group relay-tls-B "$(pod 2 6)" "ulimit -n 20000 2>/dev/null; exec '$BENCHNET' inpod-tls-relay server 15008 '$CERTS/server.pem' '$CERTS/ca.crt'"; SPG[$c]=$LAST_PG
      for side in "1 6 15001" "2 6 15008"; do
        set -- $side
        wait_until 10 "relay-tls on :$3" ip netns exec "$(pod "$1" "$2")" sh -c "ss -ltnH 'sport = :$3' | grep -q ." ||
          STATUS[$c]="relay did not listen on :$3"
      done ;;
    *)
      base=$((PORT_BASE + 10 * idx)); cp=$((base + 1)) sp=$((base + 2))
      CLI[$c]=$(pod 1 1); DST[$c]="$N1_IP:$cp"
      peer_cmds "$c" "$cp" "$sp" $((base + 3))
      start_group "$c-server" "$N2" "ulimit -n 20000 2>/dev/null; $SCMD"; SPG[$c]=$LAST_PG
      if ! wait_until 10 "$c server" ip netns exec "$N2" "$BENCHNET" waitport "$N2_IP" "$sp" 1; then
        STATUS[$c]="server side did not listen: $(tail -c 300 "$LOGDIR/$c-server.log" | tr '\n' ' ')"
        log "$c: ${STATUS[$c]}"; continue
      fi
      start_group "$c-client" "$N1" "ulimit -n 20000 2>/dev/null; $CCMD"; CPG[$c]=$LAST_PG
      if ! wait_until 10 "$c client" ip netns exec "$N1" "$BENCHNET" waitport "$N1_IP" "$cp" 1; then
        STATUS[$c]="client side did not listen: $(tail -c 300 "$LOGDIR/$c-client.log" | tr '\n' ' ')"
        log "$c: ${STATUS[$c]}"
      fi ;;
  esac
  [[ $c == meshnode-* && -z $MESH_A$MESH_B ]] && STATUS[$c]="proxy did not start"
done
# A destination "HOST" or "HOST:PORT" -> host port
dst_host() { echo "${1%%:*}"; }
dst_port() { [[ $1 == *:* ]] && echo "${1##*:}" || echo "$TPORT"; }

# Targets: one program on port 7000 of each server pod, swapped per measurement kind.
TARGET_PGS=()
start_targets() {  # $1 = echo|iperf3|http
  local pg ns
  for pg in "${TARGET_PGS[@]}"; do stop_group "$pg"; done
  TARGET_PGS=()
  for ns in "$(pod 2 0)" "$(pod 2 1)" "$(pod 2 2)" "$(pod 2 5)" "$(pod 2 6)"; do
    case $1 in
      echo) start_group "target-echo-$ns" "$ns" "exec '$BENCHNET' echo $TPORT" ;;
      http) start_group "target-http-$ns" "$ns" "exec '$BENCHNET' http-server $TPORT" ;;
      iperf3) start_group "target-iperf3-$ns" "$ns" "exec iperf3 -s -p $TPORT" ;;
    esac
    TARGET_PGS+=("$LAST_PG")
    if [[ $1 == iperf3 && ( $ns == "$(pod 2 0)" || $ns == "$(pod 2 6)" ) ]]; then   # one per client (4-pod runs)
      for port in $((TPORT + 1)) $((TPORT + 2)) $((TPORT + 3)); do
        start_group "target-iperf3-$ns-$port" "$ns" "exec iperf3 -s -p $port"; TARGET_PGS+=("$LAST_PG")
        wait_until 10 "target iperf3:$port" ip netns exec "$ns" sh -c "ss -ltnH 'sport = :$port' | grep -q ."
      done
    fi
    wait_until 10 "target $1 in $ns" ip netns exec "$ns" sh -c "ss -ltnH 'sport = :$TPORT' | grep -q ."
  done
}
start_targets echo
sleep 1
for c in "${SEL[@]}"; do
  [[ ${STATUS[$c]} == ok ]] || continue
  if ! out=$(timeout 15 ip netns exec "${CLI[$c]}" "$BENCHNET" rr "$(dst_host "${DST[$c]}")" \
      "$(dst_port "${DST[$c]}")" 0.3 "$RR_SIZE" 0.1 2>&1); then
    STATUS[$c]="tunnel check failed: $out"
    log "$c: ${STATUS[$c]}"
  fi
done
if [[ -n $MESH_A ]]; then   # the HBONE path must really be HBONE (a connection to n2-p0:15008)
  hb=$(ip netns exec "$(pod 1 0)" ss -tnH state established "dport = :15008" | wc -l)
  emit "check case=meshnode-hbone hbone_conns_from_client_pod=$hb"
fi
for c in "${SEL[@]}"; do
  [[ ${STATUS[$c]} == ok ]] || emit "failed case=$c reason=$(tr '\t\n' '  ' <<<"${STATUS[$c]}" | cut -c1-300)"
done
OK=()
for c in "${SEL[@]}"; do [[ ${STATUS[$c]} == ok ]] && OK+=("$c"); done
log "cases: ${OK[*]}"
sleep 1
for c in "${OK[@]}"; do
  emit "rss_idle case=$c client_kb=$(group_mem_kb "${CPG[$c]}" VmRSS) server_kb=$(group_mem_kb "${SPG[$c]}" VmRSS)" \
    "client_file_kb=$(group_mem_kb "${CPG[$c]}" RssFile) server_file_kb=$(group_mem_kb "${SPG[$c]}" RssFile)"
done
# HOLD=/path: keep the cluster up for probing by hand (perf, strace, ss) before any measurement;
# the file lists each case's client netns, target and proxy process groups; delete it to go on.
if [[ -n ${HOLD:-} ]]; then
  { for c in "${OK[@]}"; do
      printf '%s cli=%s dst=%s client_pg=%s server_pg=%s\n' "$c" "${CLI[$c]}" "${DST[$c]}" "${CPG[$c]}" "${SPG[$c]}"
    done
    echo "benchnet=$BENCHNET"; } >"$HOLD"
  log "HOLD: cluster is up, see $HOLD; delete it to continue"
  while [[ -e $HOLD ]]; do sleep 1; done
fi

# One bracketed measurement: CPU of both proxy groups and of the machine around a load command
# run in the case's client pod.  $1 = case, rest = command; sets M_OUT and M_FIELDS.
measure() {
  local c=$1 c0 s0 m0 st0 c1 s1 m1 st1 t0 t1 rc f0 f1
  shift
  f0=$(foreign_ticks)
  c0=$(group_ticks "${CPG[$c]}"); s0=$(group_ticks "${SPG[$c]}"); read -r m0 st0 <<<"$(cpu_busy)"
  t0=$(date +%s.%N)
  M_OUT=$(ip netns exec "${CLI[$c]}" "$@" 2>"$LOGDIR/load.err"); rc=$?
  t1=$(date +%s.%N)
  c1=$(group_ticks "${CPG[$c]}"); s1=$(group_ticks "${SPG[$c]}"); read -r m1 st1 <<<"$(cpu_busy)"
  f1=$(foreign_ticks)
  M_FIELDS=$(awk -v a="$c0" -v b="$c1" -v x="$s0" -v y="$s1" -v m="$m0" -v n="$m1" -v p="$st0" \
    -v q="$st1" -v t="$TICK" -v w0="$t0" -v w1="$t1" -v rc="$rc" -v f0="$f0" -v f1="$f1" 'BEGIN{
      printf "wall_s=%.3f cpu_client_s=%.2f cpu_server_s=%.2f cpu_machine_s=%.2f steal_s=%.2f foreign_s=%.2f rc=%d",
        w1-w0, (b-a)/t, (y-x)/t, (n-m)/t, (q-p)/t, (f1-f0)/t, rc}')
  M_FIELDS+=" rss_client_kb=$(group_mem_kb "${CPG[$c]}" VmRSS) rss_server_kb=$(group_mem_kb "${SPG[$c]}" VmRSS)"
  return $rc
}
run_case() {     # $1 = kind, $2 = case, $3 = extra fields, $4 = formatter, rest = command
  local kind=$1 c=$2 pre=$3 fmt=$4
  shift 4
  measure "$c" "$@"
  emit "$kind case=$c rep=$r${pre:+ $pre} $($fmt) $M_FIELDS"
}
plain() { printf '%s\n' "$M_OUT" | tail -n 1; }
iperf_fields() {
  python3 -c '
import json, sys
try:
    d = json.load(sys.stdin); e = d["end"]; r = e["sum_received"]; s = e.get("sum_sent", {})
    print("gbps=%.3f bytes=%d secs=%.3f retrans=%d" % (r["bits_per_second"] / 1e9, r["bytes"], r["seconds"],
                                                    s.get("retransmits", 0)))
except Exception as ex:
    print("gbps=0 bytes=0 secs=0 retrans=0 error=%s" % type(ex).__name__)' <<<"$M_OUT"
}
hp() { H=$(dst_host "${DST[$1]}") P=$(dst_port "${DST[$1]}"); }

# ------------------------------------------------------------------------------------------
# Measurements.  Every kind: for each repetition, every case once (interleaved).
# ------------------------------------------------------------------------------------------
# relay-tls is a floor of bulk figures, of request/response latency and of HTTP's CPU per request
# (what mutual TLS alone adds at meshnode's hops; HTTP's 10 keep-alive connections make its
# handshakes a small part), not of new connections: it does a TLS handshake per connection where
# HBONE pools.
log "request/response + conn/s: ${REPS} x ${#OK[@]} cases, conn/s without relay-tls (${T_RR}s + ${T_CPS}s)"
for r in $(seq 1 "$REPS"); do
  for c in "${OK[@]}"; do
    hp "$c"
    run_case rr "$c" "" plain timeout 30 "$BENCHNET" rr "$H" "$P" "$T_RR" "$RR_SIZE" 0.3
    [[ $c == relay-tls ]] && continue
    run_case cps "$c" "" plain timeout 30 "$BENCHNET" cps "$H" "$P" "$T_CPS" "$RR_SIZE" "$CPS_THREADS"
  done
done
start_targets http
log "HTTP at ${HTTP_RATE} req/s (${HTTP_SIZE} B bodies, ${HTTP_CONNS} keep-alive conns): ${REPS} x ${#OK[@]} x ${T_HTTP}s"
for r in $(seq 1 "$REPS"); do
  for c in "${OK[@]}"; do
    hp "$c"
    run_case http "$c" "rate=$HTTP_RATE" plain timeout 60 "$BENCHNET" http-load "$H" "$P" "$T_HTTP" \
      "$HTTP_RATE" "$HTTP_CONNS" "$HTTP_SIZE"
  done
done
start_targets iperf3
# relay-inpod is the floor of per-connection and per-message figures only (relay-tls is the one of
# bulk bytes), and leaving it out keeps the suite under 15 minutes.
TPUT_CASES=()
for c in "${OK[@]}"; do [[ $c != relay-inpod ]] && TPUT_CASES+=("$c"); done
log "throughput: ${REPS} x ${#TPUT_CASES[@]} cases x (1 and 4 streams) x ${T_TPUT}s"
for r in $(seq 1 "$REPS"); do
  for c in "${TPUT_CASES[@]}"; do
    hp "$c"
    for p in 1 4; do
      run_case tput "$c" "streams=$p" iperf_fields timeout $((${T_TPUT%.*} + 30)) iperf3 -c "$H" -p "$P" \
        -t "$T_TPUT" -P "$p" -J --connect-timeout 5000
      sleep 0.3
    done
  done
done
# 4 streams from 4 different client pods (node 1's enrolled pods, each its own identity, so each
# has its own HBONE connection) to the same server pod, at once: what a node with several busy
# apps gets, where "4 streams" above is one pod's 4 connections over one pooled HBONE connection.
# relay-tls, the floor of this figure, runs the same 4 iperf3 clients and servers from its one client
# pod: each connection is a thread and a TLS connection of its own either way.
FOURPODS=()
[[ " ${OK[*]} " == *" meshnode-hbone "* ]] && FOURPODS+=(meshnode-hbone)
[[ " ${OK[*]} " == *" relay-tls "* ]] && FOURPODS+=(relay-tls)
if ((${#FOURPODS[@]})); then
  log "throughput from 4 client pods at once (${FOURPODS[*]}): ${REPS} x ${T_TPUT}s"
  for r in $(seq 1 "$REPS"); do
    for c in "${FOURPODS[@]}"; do
      hp "$c"
      if [[ $c == meshnode-hbone ]]; then pods4="$(pod 1 0) $(pod 1 2) $(pod 1 3) $(pod 1 4)"
      else pods4="$(pod 1 6) $(pod 1 6) $(pod 1 6) $(pod 1 6)"; fi
      run_case tput "$c" "streams=4pods" plain timeout $((${T_TPUT%.*} + 30)) \
        bash "$BENCH/iperf_pods.sh" "$H" "$P" "$T_TPUT" $pods4
      sleep 0.3
    done
  done
fi
for c in "${OK[@]}"; do
  emit "rss_peak case=$c client_kb=$(group_mem_kb "${CPG[$c]}" VmHWM) server_kb=$(group_mem_kb "${SPG[$c]}" VmHWM)"
done
# What the proxies give back: RSS 30 s after the last load (issue 15: <= 1.25x the idle RSS).
log "RSS 30 s after the load"
sleep 30
for c in "${OK[@]}"; do
  emit "rss_after case=$c seconds=30 client_kb=$(group_mem_kb "${CPG[$c]}" VmRSS) server_kb=$(group_mem_kb "${SPG[$c]}" VmRSS)"
done
# The CPU floor of an encrypted path: AES-128-GCM of the same bytes on one core (16 KiB records,
# TLS's size), encrypt on one side and decrypt on the other, on top of meshnode's plain-TCP cost.
aes=$(openssl speed -evp aes-128-gcm -bytes 16384 -seconds 3 2>/dev/null | awk '$1 == "AES-128-GCM" {print $2}')
emit "aes case=- kbytes_per_s=${aes%k}"

if [[ $PROFILE == 1 ]] && command -v perf >/dev/null; then
  log "profile: meshnode-hbone, 1 stream, ${T_PROF}s under perf record"
  hp meshnode-hbone
  pids=$(group_pids "$MESH_A" | tr '\n' ,)$(group_pids "$MESH_B" | tr '\n' ,)
  timeout $((T_PROF + 30)) perf record -q -g -F 999 -p "${pids%,}" -o "$RUN/perf.data" -- sleep "$T_PROF" >/dev/null 2>&1 &
  ppid=$!
  ip netns exec "${CLI[meshnode-hbone]}" iperf3 -c "$H" -p "$P" -t "$T_PROF" -P 1 >/dev/null 2>&1
  wait "$ppid"
  { perf report -i "$RUN/perf.data" --stdio --no-children --sort comm,dso -g none --percent-limit 2 2>/dev/null |
      grep -E '^ +[0-9]' | head -12 | sed 's/^/by process and DSO: /'
    perf report -i "$RUN/perf.data" --stdio --no-children --sort dso,sym -g none --percent-limit 1 2>/dev/null |
      grep -E '^ +[0-9]' | head -25; } >"$RUN/perf.txt"
  while read -r line; do emit "profile case=meshnode-hbone line=$(tr '\t' ' ' <<<"$line" | tr -s ' ')"; done <"$RUN/perf.txt"
fi

# ------------------------------------------------------------------------------------------
# Idle tunnelled connections: RSS of both proxies before / with N idle connections.
# Client and server holders are separate processes (each < 20,000 fds).  Proxies that use two
# sockets per connection in one process (meshnode-tcp, every peer) get IDLE_PEER_N connections.
# ------------------------------------------------------------------------------------------
for pg in "${TARGET_PGS[@]}"; do stop_group "$pg"; done
TARGET_PGS=()
log "idle connections: meshnode-hbone $IDLE_N, others $IDLE_PEER_N"
IDLE_ORDER=()   # meshnode-tcp before meshnode-hbone: they share the proxies, and the 10,000-connection
for c in "${OK[@]}"; do [[ $c != meshnode-hbone && $c != relay-* ]] && IDLE_ORDER+=("$c"); done   # test's heap is not returned
[[ " ${OK[*]} " == *" meshnode-hbone "* ]] && IDLE_ORDER+=(meshnode-hbone)
for c in "${IDLE_ORDER[@]}"; do
  [[ $c == direct ]] && continue
  n=$IDLE_PEER_N; [[ $c == meshnode-hbone ]] && n=$IDLE_N
  hp "$c"
  case $c in meshnode-hbone) sns=$(pod 2 0) ;; meshnode-tcp) sns=$(pod 2 1) ;; *) sns=$(pod 2 2) ;; esac
  start_group "idle-serve-$c" "$sns" "ulimit -n 20000; sleep 900 | python3 -u '$BENCH/idle_conns.py' serve $TPORT $((n + 1))"
  spg=$LAST_PG
  wait_until 10 "idle server" grep -q ready "$LOGDIR/idle-serve-$c.log"
  # One warm-up connection (closed by the client, held by the server) before the "before" figure:
  # the code a connection runs is mapped once, not per connection, and a proxy that has just
  # unmapped its clean file pages (meshnode, every 30 s) would otherwise charge it to the N.
  # The client holds it until the server has it (a proxy may drop a connection closed at once).
  ip netns exec "${CLI[$c]}" python3 - "$H" "$P" "$LOGDIR/idle-serve-$c.log" <<'PY'
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
for _ in range(200):
    if "accepted 1\n" in open(sys.argv[3]).read():
        break
    time.sleep(0.05)
s.close()
PY
  if ! wait_until 10 "warm-up connection through $c" grep -qx "accepted 1" "$LOGDIR/idle-serve-$c.log"; then
    emit "idle case=$c conns=$n failed=the_warm-up_connection_did_not_reach_the_server_within_10s"
    stop_group "$spg"
    continue
  fi
  b_c=$(group_mem_kb "${CPG[$c]}" VmRSS) b_s=$(group_mem_kb "${SPG[$c]}" VmRSS)
  bf_c=$(group_mem_kb "${CPG[$c]}" RssFile) bf_s=$(group_mem_kb "${SPG[$c]}" RssFile)
  start_group "idle-open-$c" "${CLI[$c]}" "ulimit -n 20000; sleep 900 | python3 -u '$BENCH/idle_conns.py' open $H $P $n"
  opg=$LAST_PG
  if wait_until $((n / 100 + 10)) "$n idle connections through $c" grep -qx "accepted $((n + 1))" "$LOGDIR/idle-serve-$c.log"; then
    sleep 1
    a_c=$(group_mem_kb "${CPG[$c]}" VmRSS) a_s=$(group_mem_kb "${SPG[$c]}" VmRSS)
    af_c=$(group_mem_kb "${CPG[$c]}" RssFile) af_s=$(group_mem_kb "${SPG[$c]}" RssFile)
    emit "idle case=$c conns=$n before_client_kb=$b_c before_server_kb=$b_s after_client_kb=$a_c after_server_kb=$a_s" \
      "before_client_file_kb=$bf_c before_server_file_kb=$bf_s after_client_file_kb=$af_c after_server_file_kb=$af_s"
  else
    acc=$(ip netns exec "$sns" ss -tnH state established "sport = :$TPORT" | wc -l)
    emit "idle case=$c conns=$n failed=only_${acc}_of_${n}_reached_the_server_within_$((n / 100 + 10))s client:_$(tail -c 120 "$LOGDIR/idle-open-$c.log" | tr '\t\n ' '___')"
  fi
  stop_group "$opg"; stop_group "$spg"
done

# ------------------------------------------------------------------------------------------
# Environment line, report.
# ------------------------------------------------------------------------------------------
for c in "${SEL[@]}"; do emit "desc case=$c text=${DESC[$c]}"; done
emit "env case=- cpu=$(awk -F': ' '/model name/{gsub(/ /,"_",$2); print $2; exit}' /proc/cpuinfo)" \
  "ncpu=$(nproc) mem_mb=$(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) kernel=$(uname -r)" \
  "openssl=$(openssl version | awk '{print $2}') iperf3=$(iperf3 --version | awk 'NR==1{print $2}')" \
  "stunnel=$(stunnel -version 2>&1 | awk '/^stunnel/{print $2; exit}')" \
  "haproxy=$(haproxy -v 2>/dev/null | awk 'NR==1{print $3}')" \
  "nghttpx=$(nghttpx --version 2>/dev/null | awk '{print $2}' | cut -d/ -f2)" \
  "node=$(node --version 2>/dev/null) meshnode=$MESH_COMMIT foreign=$FOREIGN" \
  "reps=$REPS t_tput=$T_TPUT t_rr=$T_RR t_cps=$T_CPS t_http=$T_HTTP cps_threads=$CPS_THREADS rr_size=$RR_SIZE" \
  "http_rate=$HTTP_RATE http_conns=$HTTP_CONNS http_size=$HTTP_SIZE suite=$TLS13_SUITE" \
  "load_start=$(tr ' ' '/' <<<"$LOAD_START") load_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/')" \
  "quick=${QUICK:-0} duration_s=$((SECONDS - T_START)) date=$(date -u +%Y-%m-%dT%H:%MZ)"
cp "$RAW" "$RAW_OUT"
python3 "$BENCH/report.py" "$RAW" >"$OUT" || { echo "report failed" >&2; exit 1; }
log "wrote $OUT and $RAW_OUT"
sed -n '/^## Results/,/^## Targets/p' "$OUT" | sed '$d'
