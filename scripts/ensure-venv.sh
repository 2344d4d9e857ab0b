#!/usr/bin/env bash
# A Python venv with the packages a test script needs, made once and kept under the target
# directory (python3-venv from Debian's packages when the machine lacks it):
#
#   bash scripts/ensure-venv.sh VENV 'import mod1, mod2' PIP_REQUIREMENT...
#
# Does nothing when VENV's python already imports the modules.
set -euo pipefail
venv=$1 check=$2
shift 2
if "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing python3-venv from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$@"
