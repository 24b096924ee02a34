#!/usr/bin/env bash
# Installs the Debian packages tandem builds with (only those missing). Debian 12 or newer.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config clang-format libgtest-dev nlohmann-json3-dev libcli11-dev libfmt-dev
      libpcre2-dev libutf8proc-dev libicu-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
