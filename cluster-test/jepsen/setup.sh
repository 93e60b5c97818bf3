#!/usr/bin/env bash
# Prerequisites of the fault harness (README.md): root, iproute2 (ip, tc) and nftables.
# Installs nftables with apt when `nft` is absent (apt-get update first if the install fails).
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "cluster-test: the fault harness needs root (network namespaces, nftables, tc)" >&2; exit 1; }
for tool in ip tc; do
  command -v "$tool" >/dev/null || { echo "cluster-test: '$tool' (iproute2) is required" >&2; exit 1; }
done
if ! command -v nft >/dev/null; then
  echo "cluster-test: installing nftables" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y nftables >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y nftables >/dev/null; }
fi
command -v nft >/dev/null || { echo "cluster-test: nft still missing after installing nftables" >&2; exit 1; }
