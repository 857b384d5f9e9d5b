#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages sdp-pm builds and tests with, if missing.
# Usage: scripts/deps.sh [--test]   (--test adds what only the tests need)
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config
      libboost-dev libboost-program-options-dev libyaml-cpp-dev
      libsystemd-dev nlohmann-json3-dev libibverbs-dev librdmacm-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(libgtest-dev libgmock-dev libbenchmark-dev clang-format iproute2 procps nftables mandoc lintian tshark clang libclang-rt-14-dev)
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
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
