#!/usr/bin/env bash
# Installs every Debian 12 package meshnode needs to build, test and run the demo.
# Idempotent: packages already present are skipped, and nothing runs apt when all are present.
set -euo pipefail

packages=(
  # build
  g++ cmake ninja-build ccache pkg-config
  libasio-dev libssl-dev libnghttp2-dev libyaml-cpp-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libnftables-dev libcurl4-openssl-dev libjemalloc-dev
  # fuzz preset: clang 19 (clang 14's libstdc++ mode has no std::expected) and its libFuzzer runtime
  clang-19 libclang-rt-19-dev
  # tests and demo: real peers and real network plumbing
  iproute2 nftables iptables curl socat python3 openssl iperf3 procps
  containernetworking-plugins
  stunnel4 haproxy nghttp2-proxy nodejs
  podman runc busybox-static
  # deploy: the image's base (mmdebstrap); kubectl (the render test) is installed best effort below
  mmdebstrap
)

# kubectl checks the fake Kubernetes API server (tests/unit/kube/kubectl_test.cpp). The machine
# image ships the `kubectl` package (1.32); elsewhere Debian's own `kubernetes-client` is the
# fallback. Best effort: without it that test skips, or fails when CI=true.
install_kubectl() {
  command -v kubectl >/dev/null 2>&1 && return 0
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: kubectl missing; run as root to install it" >&2; return 0; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends kubectl >/dev/null 2>&1 ||
    apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null 2>&1 ||
    echo "install-deps: could not install kubectl (packages kubectl, kubernetes-client)" >&2
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  install_kubectl
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_kubectl
