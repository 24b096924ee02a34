#!/usr/bin/env bash
# Installs the Debian packages tandem builds with (only those missing). Debian 12 or newer.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config clang-format libgtest-dev nlohmann-json3-dev libcli11-dev libfmt-dev
      libpcre2-dev libutf8proc-dev libicu-dev libcpp-httplib-dev)
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

# Python for the server's end-to-end tests and bench/canary.py (tests/server_e2e): Debian's
# python3 with venv, then a virtual environment in .venv/ (ignored by git) holding the official
# openai client and pytest, created and filled only when missing.
py=/usr/bin/python3
if ! dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "install ok installed"; then
  echo "installing: python3-venv"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
fi
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
if ! "$venv/bin/python" -c "import openai, pytest" 2>/dev/null; then
  echo "creating $venv with openai and pytest"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check openai==3.57.0 pytest==9.2.0
fi
