#!/usr/bin/env bash
# Prerequisites of the fault harness (README.md): root, iproute2 (ip, tc), nftables, and a
# kernel and container that allow network namespaces, veth pairs and nftables inside a
# namespace. Installs nftables with apt when `nft` is absent (apt-get update first if the
# install fails), then proves the rest with a throwaway namespace. Exits non-zero with the
# reason when anything is missing.
set -euo pipefail
fail() { echo "cluster-test: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "the fault harness needs root (network namespaces, nftables, tc); you are uid $(id -u)"
for tool in ip tc; do
  command -v "$tool" >/dev/null || fail "'$tool' (iproute2) is required: apt-get install iproute2"
done
if ! command -v nft >/dev/null; then
  command -v apt-get >/dev/null || fail "nft (nftables) is missing and there is no apt-get to install it"
  echo "cluster-test: installing nftables" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y nftables >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y nftables >/dev/null; } || fail "apt-get install nftables failed"
fi
command -v nft >/dev/null || fail "nft still missing after installing nftables"

# A throwaway namespace with a veth end and an nftables table in it: what every run does. The
# names do not match the harness's (cairn-j*, cj<hex4>*), so a concurrent cleanup leaves them be.
probe="cairnprobe$$"
cleanup() { ip netns del "$probe" 2>/dev/null || true; ip link del "cpv$$" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$probe" 2>/dev/null || fail "cannot create a network namespace (ip netns add failed): the harness needs CAP_SYS_ADMIN and CAP_NET_ADMIN (run as root on a VM or in a privileged container)"
ip link add "cpv$$" type veth peer name "cpp$$" 2>/dev/null || fail "cannot create a veth pair (ip link add type veth failed): the kernel lacks veth or the container lacks CAP_NET_ADMIN"
ip link set "cpp$$" netns "$probe" || fail "cannot move a veth end into a namespace"
ip netns exec "$probe" nft add table inet cairn_probe 2>/dev/null || fail "nftables does not work inside a network namespace (nft add table failed): the kernel lacks nf_tables"
