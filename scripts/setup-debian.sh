#!/usr/bin/env bash
# Installs what building, testing (the fuzzing run needs clang's runtime, libclang-rt-dev) and plotting need
# on Debian 12 (as root, or with sudo).
set -euo pipefail
packages=(meson ninja-build pkg-config cmake g++ clang libclang-rt-dev libeigen3-dev libboost-test-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev libbenchmark-dev python3 python3-dev python3-pip python3-venv python3-matplotlib make)
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "setup-debian.sh: run as root, or install sudo; missing packages: ${missing[*]}" >&2
    exit 1
  fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
