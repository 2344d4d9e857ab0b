#!/usr/bin/env bash
# The whole test suite, on a fresh machine: Rust tests of every crate, then the compatibility
# check with real Redis clients (installing Debian's redis-tools when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
bash scripts/redis-compat.sh
