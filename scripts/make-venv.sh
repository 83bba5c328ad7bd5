#!/usr/bin/env bash
# Create the project's virtualenv (default .venv) with the system's python3.
# Debian and Ubuntu ship `python3 -m venv` separately, in python3-venv: as root (CI on a fresh
# machine) it is installed with apt-get, saying so first; otherwise this says what to run.
set -euo pipefail
venv=${1:-.venv}
python=${SYSTEM_PYTHON:-python3}
if "$python" -m venv "$venv"; then exit 0; fi
rm -rf "$venv"  # a failed venv is half made (no pip): never leave it to be mistaken for one
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's python3-venv with apt-get (\`$python -m venv\` needs it)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  exec "$python" -m venv "$venv"
fi
echo "Cannot create $venv with \`$python -m venv\`." \
     "On Debian or Ubuntu: sudo apt-get install python3-venv, then run make again." >&2
exit 1
