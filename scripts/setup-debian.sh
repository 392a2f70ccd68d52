#!/usr/bin/env bash
# Installs what building, testing and plotting need on Debian 12 (as root, or with sudo).
set -euo pipefail
packages=(meson ninja-build pkg-config cmake g++ clang libeigen3-dev libboost-test-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev libbenchmark-dev python3 python3-pip python3-venv python3-matplotlib)
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
