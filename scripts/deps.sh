#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages sdp-pm builds and tests with, if missing.
# Usage: scripts/deps.sh [--test]   (--test adds what only the tests need)
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config
      libboost-dev libboost-program-options-dev libyaml-cpp-dev
      libsystemd-dev nlohmann-json3-dev libibverbs-dev librdmacm-dev libssl-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(libgtest-dev libgmock-dev libbenchmark-dev clang-format iproute2 procps nftables mandoc lintian tshark clang libclang-rt-14-dev
        etcd-server etcd-client)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
$SUDO apt-get update -qq
# The tests start their own etcd members on loopback: keep the package's
# system service from being started (or enabled) by the installation.
etcd_new=0
for p in "${missing[@]}"; do [[ "$p" == etcd-server ]] && etcd_new=1; done
policy_rc=""
if [[ $etcd_new -eq 1 && ! -e /usr/sbin/policy-rc.d ]]; then
  policy_rc=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy_rc" >/dev/null
  $SUDO chmod 755 "$policy_rc"
fi
rc=0
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
if [[ -n "$policy_rc" ]]; then $SUDO rm -f "$policy_rc"; fi
if [[ $etcd_new -eq 1 ]] && command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  $SUDO systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
exit $rc
