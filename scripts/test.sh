#!/usr/bin/env bash
# The whole test suite, on a fresh machine: Rust tests of every crate, then the compatibility
# check with real Redis clients (installing Debian's redis-tools when missing), then real
# cluster-aware clients (redis-py's RedisCluster from PyPI in a venv) against `meridian up`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
bash scripts/redis-compat.sh
bash scripts/cluster-clients.sh
