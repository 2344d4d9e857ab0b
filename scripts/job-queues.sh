#!/usr/bin/env bash
# Job-queue libraries from their registries running real rounds of jobs against a Meridian
# node (loopback only): huey from PyPI with its own consumer process (plain, scheduled,
# retried and prioritised tasks; its scheduler moves due tasks with a Lua script) and
# redis-py's Lock (Lua release and extend), then bee-queue from npm (every queue operation a
# Lua script, job events over pub/sub; delayed and retried jobs) and BullMQ from npm (Lua
# scripts over lists, sorted sets and hashes, job events on a stream read with XREAD BLOCK;
# delayed, retried and parent/child jobs). Against a standalone node: these libraries name
# keys of many hash slots in one script, which Redis Cluster refuses too (CROSSSLOT).
# Prints `N passed, M failed`; non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
dir=scripts/job-queues
bash scripts/ensure-redis-tools.sh   # redis-cli, to wait for the node

# huey and redis-py in a venv under the target directory (python3-venv from Debian when
# missing); bee-queue at the version package-lock.json pins (when Node.js and npm are present).
venv="$target/job-queues-venv"
bash scripts/ensure-venv.sh "$venv" 'import huey, redis' 'huey==3.5.4' 'redis>=5'
have_node=0
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  have_node=1
  [[ -d $dir/node_modules/bee-queue && -d $dir/node_modules/bullmq ]] \
    || (cd "$dir" && npm ci --no-audit --no-fund --silent)
fi

cargo build -q -p meridian
bin="$target/debug/meridian"
pids=()
log=$(mktemp)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "$log" "$log.consumer"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 10000))
"$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$((port + 1))" >"$log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  sleep 0.1
done
if ! redis-cli -p "$port" PING >/dev/null 2>&1; then
  echo "job-queues: the node did not start on port $port; its log:" >&2
  cat "$log" >&2
  exit 1
fi

passed=0 failed=0
record() { # record NAME STATUS
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); echo "ok   $1"; else
    failed=$((failed + 1)); echo "FAIL $1" >&2; fi
}

# huey: the consumer (2 worker threads, polling every 0.1 s) in its own process, as deployed.
export MERIDIAN_PORT=$port
(cd "$dir" && exec "../../$venv/bin/huey_consumer" huey_tasks.huey -w 2 -k thread -d 0.1 -m 0.1) \
  >"$log.consumer" 2>&1 &
pids+=($!)
status=0
(cd "$dir" && timeout 120 "../../$venv/bin/python" huey_round.py "$port") || status=$?
[[ $status -eq 0 ]] || { echo "huey consumer log:" >&2; tail -n 30 "$log.consumer" >&2; }
record "huey + redis-py Lock" "$status"

if [[ $have_node -eq 1 ]]; then
  status=0
  timeout 120 node "$dir/bee.js" "$port" || status=$?
  [[ $status -eq 0 ]] || { echo "node log (last 30 lines):" >&2; tail -n 30 "$log" >&2; }
  record "bee-queue" "$status"
  status=0
  timeout 120 node "$dir/bull.js" "$port" || status=$?
  [[ $status -eq 0 ]] || { echo "node log (last 30 lines):" >&2; tail -n 30 "$log" >&2; }
  record "bullmq" "$status"
else
  echo "skip bee-queue and bullmq: no Node.js/npm on this machine" >&2
fi

echo "job-queues: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
