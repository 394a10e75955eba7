# The demo's Kubernetes API (issue 13): tests/fakes/kube_api_server.py in node 1's netns, reachable
# from both nodes over the fabric, driven with the real kubectl. Sourced by scripts/demo.sh.
#
#   kube_start <workdir> <netns> <ip>   starts the fake on <ip> (random port) in <netns>; sets
#                                       kube_pid, kube_url and writes <workdir>/kubeconfig
#   kc <kubectl args...>                kubectl against it (from <netns>)
#   kube_namespace <name> [label=value...]            creates a namespace
#   kube_pod <ns> <name> <node> <sa> [label=value...] creates a pod bound to <node>; prints its uid
#   kube_pod_running <ns> <name> <ip>   what a kubelet writes once the sandbox is up (pods/status)
#   kube_annotation <ns> <name>         the pod's ambient.istio.io/redirection annotation ("" if none)

kube_start() {
  local workdir=$1 netns=$2 ip=$3 deadline=$((SECONDS + 15))
  kube_netns=$netns kube_workdir=$workdir
  ip netns exec "$netns" python3 "$repo/tests/fakes/kube_api_server.py" --host "$ip" --port 0 \
    >"$workdir/kube-api.out" 2>"$workdir/kube-api.log" &
  kube_pid=$!
  until kube_url=$(grep -oE 'https?://[^ ]+' "$workdir/kube-api.out" 2>/dev/null); do
    kill -0 "$kube_pid" 2>/dev/null || { cat "$workdir/kube-api.log" >&2; return 1; }
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
  printf '%s\n' "apiVersion: v1" "kind: Config" "clusters:" "- name: demo" "  cluster: {server: \"$kube_url\"}" \
    "users:" "- name: meshnode-agent" "  user: {token: demo}" "contexts:" "- name: demo" \
    "  context: {cluster: demo, user: meshnode-agent}" "current-context: demo" >"$workdir/kubeconfig"
}

kc() { ip netns exec "$kube_netns" kubectl --kubeconfig "$kube_workdir/kubeconfig" --request-timeout=5s "$@"; }

kube_labels_json() { # key=value... -> {"key":"value",...}
  local out="" kv
  for kv; do out+="${out:+,}\"${kv%%=*}\":\"${kv#*=}\""; done
  printf '{%s}' "$out"
}

kube_namespace() {
  local name=$1
  shift
  printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s","labels":%s}}' "$name" "$(kube_labels_json "$@")" |
    kc create --validate=false -f - >/dev/null
}

kube_pod() {
  local ns=$1 name=$2 node=$3 sa=$4
  shift 4
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","namespace":"%s","labels":%s},"spec":{"nodeName":"%s","serviceAccountName":"%s","containers":[{"name":"app","image":"python"}]}}' \
    "$name" "$ns" "$(kube_labels_json "$@")" "$node" "$sa" | kc create --validate=false -f - >/dev/null
  kc get pod "$name" -n "$ns" -o 'jsonpath={.metadata.uid}'
}

kube_pod_running() {
  kc patch pod "$2" -n "$1" --subresource=status --type=merge \
    -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}]}}" >/dev/null
}

kube_annotation() {
  kc get pod "$2" -n "$1" -o 'jsonpath={.metadata.annotations.ambient\.istio\.io/redirection}'
}
