#!/usr/bin/env bash
# Installs etcd (server and etcdctl) from Debian's packages when `etcd` or `etcdctl` is not on the PATH:
# `make bench` runs this first, so a fresh machine needs nothing by hand. Needs root (or sudo)
# and apt-get; says what to do otherwise.
set -euo pipefail

# Both: `make bench-scale` also runs etcdctl (snapshot save, member add).
if command -v etcd >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bench: etcd is not installed and apt-get is not available; install etcd 3.4 or newer and put it on the PATH" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "bench: etcd is not installed; run as root (or install Debian's etcd-server and etcd-client)" >&2
    exit 2
  fi
fi
echo "bench: installing Debian's etcd-server and etcd-client"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null
# The package starts a single-node etcd service on the default ports (2379/2380) where an init
# system runs it; the benchmark starts its own nodes on free ports, so stop that one if it runs.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  $SUDO systemctl stop etcd || true
  $SUDO systemctl disable etcd >/dev/null 2>&1 || true
fi
command -v etcd >/dev/null 2>&1 || { echo "bench: etcd-server installed but 'etcd' is not on the PATH" >&2; exit 2; }
command -v etcdctl >/dev/null 2>&1 || { echo "bench: etcd-client installed but 'etcdctl' is not on the PATH" >&2; exit 2; }
etcd --version | head -1
