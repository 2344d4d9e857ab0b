#!/usr/bin/env bash
# The whole test suite, on a fresh machine: Rust tests of every crate, then the compatibility
# check with real Redis clients (installing Debian's redis-tools when missing), then real
# cluster-aware clients (redis-py's RedisCluster from PyPI in a venv) against `meridian up`, then
# job-queue libraries (huey from PyPI, bee-queue from npm) against a node, then real S3 clients
# (boto3 and the AWS CLI from PyPI in a venv) against `meridian node --s3` and `meridian up`,
# then TLS with real clients (redis-cli/redis-benchmark --tls, redis-py ssl=True, boto3 over
# HTTPS) against a node serving TLS only.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
bash scripts/redis-compat.sh
bash scripts/cluster-clients.sh
bash scripts/job-queues.sh
bash scripts/s3-clients.sh
bash scripts/tls-clients.sh
