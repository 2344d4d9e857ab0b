#!/usr/bin/env bash
# Installs Debian's redis-tools (redis-cli, redis-benchmark) and, with --server, redis-server,
# when they are missing. Tests and benchmarks call this; nothing is installed by hand.
set -euo pipefail
pkgs=()
command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 || pkgs+=(redis-tools)
if [[ "${1:-}" == "--server" ]] && ! command -v redis-server >/dev/null 2>&1; then
  pkgs+=(redis-server)
fi
[[ ${#pkgs[@]} -eq 0 ]] && exit 0
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "installing ${pkgs[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
# The redis-server package starts a system service on 6379; the project starts its own.
if [[ " ${pkgs[*]} " == *" redis-server "* ]]; then
  $sudo service redis-server stop >/dev/null 2>&1 || true
  pkill -x redis-server 2>/dev/null || true
fi
