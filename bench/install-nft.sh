#!/usr/bin/env bash
# Installs nftables (`nft`) from Debian's package when it is absent: the failover trial that
# drops the leader's traffic (bench/netcut.ts) needs it. `make bench` runs this after
# install-etcd.sh. Without root or apt-get it says so and exits 0: that one row is then skipped
# with the reason, the rest of the benchmark runs.
set -euo pipefail

if command -v nft >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "bench: nft (nftables) is not installed and cannot be installed here (needs root and apt-get); the 'leader's traffic dropped' failover row will be skipped" >&2
  exit 0
fi
echo "bench: installing Debian's nftables"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends nftables >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends nftables >/dev/null; }
command -v nft >/dev/null 2>&1 || { echo "bench: nftables installed but 'nft' is not on the PATH" >&2; exit 2; }
nft --version
