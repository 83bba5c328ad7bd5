#!/usr/bin/env bash
# Debian's chromium for the browser tests (Playwright drives it through executable_path).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [[ $(id -u) -ne 0 ]] && ! command -v sudo >/dev/null; then
  echo "chromium missing and not root: the browser tests will fail" >&2; exit 0
fi
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
echo "Installing Debian's chromium with apt-get${SUDO:+ (sudo)}, for the browser tests"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
