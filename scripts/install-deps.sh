#!/usr/bin/env bash
# Installs every Debian 12 package meshnode needs to build, test and run the demo.
# Idempotent: packages already present are skipped, and nothing runs apt when all are present.
set -euo pipefail

packages=(
  # build
  g++ cmake ninja-build ccache pkg-config
  libasio-dev libssl-dev libnghttp2-dev libyaml-cpp-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libnftables-dev
  # tests and demo: real peers and real network plumbing
  iproute2 nftables iptables curl socat python3 openssl iperf3 procps
  containernetworking-plugins
  stunnel4 haproxy nghttp2-proxy nodejs
  podman runc busybox-static
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
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
