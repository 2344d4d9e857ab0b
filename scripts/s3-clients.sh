#!/usr/bin/env bash
# Real S3 clients against Meridian's S3-compatible endpoint (loopback only): boto3 and the AWS
# CLI from PyPI in a venv (scripts/s3_clients.py: buckets, objects with metadata, a 64 MiB
# multipart upload with Range reads, low-level multipart and its errors, ListObjectsV2,
# CopyObject, DeleteObjects, presigned URLs, SigV4 failures, Content-MD5 and flexible
# checksums, `aws s3` mb/cp/ls/rm/rb), run twice: against a standalone `meridian node --s3`
# and against `meridian up` (2 DCs x 2 nodes), where an object written through a node of one
# DC is read back through a node of the other. A fresh access key per run.
# Prints `N passed, M failed`; non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

# A venv with boto3 and the AWS CLI, under the target directory (python3-venv from Debian
# when missing; openssl too, for the throwaway certificate of the TLS relay that makes boto3
# send aws-chunked bodies with checksum trailers).
venv="$target/s3-clients-venv"
need=()
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [[ ${#need[@]} -gt 0 ]]; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing ${need[*]} from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! "$venv/bin/python" -c 'import boto3' >/dev/null 2>&1 || [[ ! -x "$venv/bin/aws" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check boto3 awscli
fi

cargo build -q -p meridian
bin="$target/debug/meridian"

# A fresh access key for this run.
rand() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
key_id="S3C$(rand 8 | tr 'a-f' 'A-F')"
key_secret="$(rand 20)"

pids=()
logs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "${logs[@]}"
}
trap cleanup EXIT

passed=0 failed=0
expect() { # expect NAME WANT GOT
  if [[ "$2" == "$3" ]]; then passed=$((passed + 1)); echo "ok   $1"; else
    failed=$((failed + 1)); echo "FAIL $1: want [$2] got [$3]" >&2; fi
}

# run_clients LABEL ARGS...: scripts/s3_clients.py, its counts added to ours.
run_clients() {
  local label=$1 out rc summary py_passed py_fail
  shift
  echo "== s3-clients against $label"
  if out=$("$venv/bin/python" scripts/s3_clients.py "$@" 2>&1); then rc=0; else rc=1; fi
  echo "$out"
  summary=$(echo "$out" | tail -n 1)
  py_passed=$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed$/\1/p')
  py_fail=$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed$/\2/p')
  passed=$((passed + ${py_passed:-0}))
  failed=$((failed + ${py_fail:-1}))
  if [[ $rc -eq 1 && ${py_fail:-1} -eq 0 ]]; then failed=$((failed + 1)); fi
  return 0
}

# 1. A standalone node: RESP, HTTP and S3 on random loopback ports in 20000..32000 (another
# pick when one is taken).
node_log=$(mktemp); logs+=("$node_log")
node_pid="" up=0
for _ in 1 2 3; do
  port=$((20000 + RANDOM % 11997))
  "$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$((port + 1))" \
    --s3 "127.0.0.1:$((port + 2))" --s3-key "$key_id:$key_secret" >"$node_log" 2>&1 &
  node_pid=$!; pids+=("$node_pid")
  for _ in $(seq 1 300); do
    kill -0 "$node_pid" 2>/dev/null || break
    if (exec 3<>"/dev/tcp/127.0.0.1/$((port + 2))") 2>/dev/null; then up=1; break; fi
    sleep 0.1
  done
  [[ $up -eq 1 ]] && break
  grep -q 'already in use' "$node_log" || break
  wait "$node_pid" 2>/dev/null || true
done
if [[ $up -eq 1 ]]; then
  run_clients "meridian node (S3 on 127.0.0.1:$((port + 2)))" \
    "http://127.0.0.1:$((port + 2))" "$key_id" "$key_secret"
  expect node-still-up 0 "$(kill -0 "$node_pid" 2>/dev/null; echo $?)"
else
  echo "s3-clients: the node did not start on ports $port..; its log:" >&2
  cat "$node_log" >&2
  failed=$((failed + 1))
fi
kill "$node_pid" 2>/dev/null || true
wait "$node_pid" 2>/dev/null || true

# 2. `meridian up`: 2 DCs x 2 nodes, S3 on BASE+3000+i (below 32768).
up_log=$(mktemp); logs+=("$up_log")
for _ in 1 2 3; do
  base=$((20000 + RANDOM % 9000))
  "$bin" up --dcs 2 --nodes-per-dc 2 --base-port "$base" --wan-latency 2ms \
    --s3-key "$key_id:$key_secret" >"$up_log" 2>&1 &
  up_pid=$!; pids+=("$up_pid")
  for _ in $(seq 1 300); do
    grep -q '^ready:' "$up_log" && break
    kill -0 "$up_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^ready:' "$up_log" && break
  grep -q 'already in use' "$up_log" || break
  wait "$up_pid" 2>/dev/null || true
done
if grep -q '^ready:' "$up_log"; then
  # The table: NAME DC RESP HTTP S3. A node of the first DC, and one of another DC.
  read -r first_dc first_s3 < <(awk '$1 != "NAME" && $5 ~ /:[0-9]+$/ {print $2, $5; exit}' "$up_log")
  other_s3=$(awk -v dc="$first_dc" '$1 != "NAME" && $5 ~ /:[0-9]+$/ && $2 != dc {print $5; exit}' "$up_log")
  if [[ -n "${first_s3:-}" && -n "$other_s3" ]]; then
    run_clients "meridian up (S3 on $first_s3, other DC $other_s3)" \
      "http://$first_s3" "$key_id" "$key_secret" --cluster "http://$other_s3"
  else
    echo "s3-clients: no S3 endpoints of two DCs in the table of meridian up:" >&2
    cat "$up_log" >&2
    failed=$((failed + 1))
  fi
  expect cluster-still-up 0 "$(kill -0 "$up_pid" 2>/dev/null; echo $?)"
else
  echo "s3-clients: the cluster did not start on ports $base..; its log:" >&2
  cat "$up_log" >&2
  failed=$((failed + 1))
fi

echo "s3-clients: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
