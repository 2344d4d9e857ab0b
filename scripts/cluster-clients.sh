#!/usr/bin/env bash
# Cluster-aware Redis clients against `meridian up` (2 DCs x 2 nodes, loopback only):
# redis-py's RedisCluster from PyPI (scripts/cluster_clients.py: SET/GET, MGET with hash tags,
# pipelines, every single-key command sent to the seed node's DC, topology refreshes from every
# node of a DC naming that DC's nodes only, expiry on every bucket type and
# INCR from both DCs (eventual counter, timeline master), SCAN with COUNT over 20k keys while
# inserting with KEYS and DBSIZE, hashes on every bucket type from both DCs, SELECT, a
# WATCH/MULTI/EXEC bank on a transactional bucket, keys the placement planner moves under a
# RedisCluster client, FLUSHALL emptying every bucket type cluster-wide),
# failover while a node process of a second cluster is killed and restarted
# (scripts/cluster_failover.py), go-redis's Watch bank and ClusterClient map refreshes
# (scripts/go-bank), ioredis and node-redis (scripts/js-cluster), Jedis and Lettuce
# (scripts/java-cluster), `redis-cli -c`, and `redis-benchmark --cluster` when installed.
# Prints `N passed, M failed`; non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

# A venv with redis-py, under the target directory (python3-venv from Debian when missing).
venv="$target/cluster-clients-venv"
bash scripts/ensure-venv.sh "$venv" 'import redis' 'redis>=5'

# ioredis and node-redis from the npm registry, at the versions scripts/js-cluster's
# package-lock.json pins (when Node.js and npm are present).
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
   && [[ ! -d scripts/js-cluster/node_modules/ioredis || ! -d scripts/js-cluster/node_modules/redis ]]; then
  (cd scripts/js-cluster && npm ci --no-audit --no-fund --silent)
fi

# Jedis and Lettuce from Maven Central, at the versions scripts/java-cluster/pom.xml pins, as
# jars under the target directory (when a JDK 17+ and Maven are present). Exported for
# scripts/cluster_failover.py's Java probes.
java_deps=""
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
  java_version=$(java -XshowSettings:properties -version 2>&1 \
    | sed -nE 's/^ *java\.specification\.version = ([0-9]+).*/\1/p')
  if [[ ${java_version:-0} -ge 17 ]]; then
    mkdir -p "$target/java-cluster-deps"
    java_deps=$(cd "$target/java-cluster-deps" && pwd)
    if [[ ! -f "$java_deps/.fetched" || scripts/java-cluster/pom.xml -nt "$java_deps/.fetched" ]]; then
      rm -f "$java_deps"/*.jar "$java_deps/.fetched"
      # (Maven prints a few bare colour resets even with -q: its output shows on failure only.)
      if ! mvn_out=$(mvn -q -B -f scripts/java-cluster/pom.xml dependency:copy-dependencies \
          -DoutputDirectory="$java_deps" 2>&1); then
        echo "cluster-clients: fetching Jedis and Lettuce with mvn failed:" >&2
        echo "$mvn_out" >&2
        exit 1
      fi
      touch "$java_deps/.fetched"
    fi
    export JAVA_CLUSTER_DEPS="$java_deps"
  else
    echo "skip Jedis and Lettuce: java is version ${java_version:-unknown}, the checks need 17+" >&2
  fi
else
  echo "skip Jedis and Lettuce: no java or no mvn on this machine" >&2
fi

# MERIDIAN_BIN runs a binary already built (a release build, say) instead of building one.
bin="${MERIDIAN_BIN:-}"
if [[ -z "$bin" ]]; then
  cargo build -q -p meridian
  bin="$target/debug/meridian"
fi
base=$((20000 + RANDOM % 9000))   # RESP base..base+3, HTTP base+1000..: below 32768
log=$(mktemp)
# The placement planner runs every second (scripts/cluster_clients.py moves keys under a
# RedisCluster client with it; the other cases see it too, harmlessly). `--misrouted serve`:
# besides the cluster clients, these checks drive plain per-node clients (redis-py `Redis`,
# go-redis `Client`) at chosen nodes; the failover cluster (scripts/cluster_failover.py) keeps
# the default, `-MOVED`, which its cluster clients follow.
"$bin" up --dcs 2 --nodes-per-dc 2 --base-port "$base" --wan-latency 2ms \
  --txn-planner --txn-plan-interval 1s --misrouted serve >"$log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
for _ in $(seq 1 300); do
  grep -q '^ready:' "$log" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q '^ready:' "$log"; then
  echo "cluster-clients: the cluster did not start on ports $base..; its log:" >&2
  cat "$log" >&2
  exit 1
fi

passed=0 failed=0
expect() { # expect NAME WANT GOT
  if [[ "$2" == "$3" ]]; then passed=$((passed + 1)); echo "ok   $1"; else
    failed=$((failed + 1)); echo "FAIL $1: want [$2] got [$3]" >&2; fi
}

# tally OUT RC: prints a check script's output and adds its last line's `N passed, M failed` to
# the totals (a script that exits non-zero without saying so counts as one failure).
tally() {
  local summary n_pass n_fail
  echo "$1"
  summary=$(echo "$1" | tail -n 1)
  n_pass=$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed$/\1/p')
  n_fail=$(echo "$summary" | sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed$/\2/p')
  passed=$((passed + ${n_pass:-0}))
  failed=$((failed + ${n_fail:-1}))
  if [[ $2 -ne 0 && ${n_fail:-1} -eq 0 ]]; then failed=$((failed + 1)); fi
}

# run_py SCRIPT ARGS...: a Python check script in the venv, tallied.
run_py() {
  local out rc=0
  out=$("$venv/bin/python" "$@" 2>&1) || rc=1
  tally "$out" "$rc"
}

# redis-py's RedisCluster.
run_py scripts/cluster_clients.py "http://127.0.0.1:$((base + 1000))"

# Failover (scripts/cluster_failover.py): redis-py keeps writing to its own `meridian up
# --processes` cluster while a node process is killed with SIGKILL and restarted; then
# go-redis and ioredis each write through one more kill of it.
run_py scripts/cluster_failover.py "$bin"

# go-redis v9 (scripts/go-bank, modules from the Go proxy): a bank moved by Watch/TxPipelined
# from a node of each DC, audited inside MULTI/EXEC. Needs a Go toolchain (the machine's).
if command -v go >/dev/null 2>&1; then
  if out=$(cd scripts/go-bank && go run . "http://127.0.0.1:$((base + 1000))" "127.0.0.1:$base" \
      "127.0.0.1:$((base + 2))" 2>&1); then
    passed=$((passed + 1)); echo "$out"
  else
    failed=$((failed + 1)); echo "$out" >&2
  fi
  # go-redis's ClusterClient: map refreshes from random known nodes never leave the seed's DC.
  if out=$(cd scripts/go-bank && go run . cluster "http://127.0.0.1:$((base + 1000))" 2>&1); then
    passed=$((passed + 1)); echo "$out"
  else
    failed=$((failed + 1)); echo "$out" >&2
  fi
else
  echo "skip go-redis bank and ClusterClient: no Go toolchain on this machine" >&2
fi

# ioredis and node-redis (scripts/js-cluster, from the npm registry at the versions its
# package-lock.json pins): map refreshes stay in the seed's DC; strings, counters, hashes,
# pipelines over one master's slots, SCAN. Needs Node.js and npm (the machine's).
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  rc=0
  out=$(cd scripts/js-cluster && node check.mjs "http://127.0.0.1:$((base + 1000))" 2>&1) || rc=1
  tally "$out" "$rc"
else
  echo "skip ioredis and node-redis: no Node.js on this machine" >&2
fi

# Jedis and Lettuce (scripts/java-cluster, from Maven Central at the versions its pom.xml pins,
# run by the JDK's source launcher): per DC, JedisCluster and RedisClusterClient seeded there
# keep maps of that DC's nodes through refreshes; strings, counters, a SET NX lock, SET XX,
# GETSET/GETDEL, EXPIRE/TTL, hashes, MULTI/EXEC and a WATCH retry loop on a slot's master,
# SCAN over every master, pipelines of keys of different slots. Needs java 17+ and mvn.
if [[ -n "$java_deps" ]]; then
  rc=0
  out=$(java -cp "$java_deps/*" scripts/java-cluster/Check.java \
    "http://127.0.0.1:$((base + 1000))" 2>&1) || rc=1
  tally "$out" "$rc"
fi

# redis-cli in cluster mode (the README's example) sees 64 ranges.
if command -v redis-cli >/dev/null 2>&1; then
  expect cli-slots cluster_slots_ok:16384 "$(redis-cli -c -p "$base" CLUSTER INFO | tr -d '\r' | grep '^cluster_slots_ok:')"
  expect cli-enabled cluster_enabled:1 "$(redis-cli -p "$base" INFO cluster | tr -d '\r' | grep '^cluster_enabled:')"
  expect cli-redirect-free OK "$(redis-cli -c -p "$((base + 2))" SET '{user1}.name' ada)"
  expect cli-get ada "$(redis-cli -c -p "$base" GET '{user1}.name')"
fi

# redis-benchmark --cluster reads CLUSTER NODES and sends each command to its slot's master.
if command -v redis-benchmark >/dev/null 2>&1; then
  out=$(redis-benchmark --cluster -p "$base" -t set,get -n 2000 -q 2>&1 | tr '\r' '\n' || true)
  if echo "$out" | grep -qa '^SET: .*requests per second' && echo "$out" | grep -qa '^GET: .*requests per second' \
     && ! echo "$out" | grep -qai 'error'; then
    expect benchmark-cluster ok ok
  else
    expect benchmark-cluster ok "$out"
  fi
fi

expect still-up 0 "$(kill -0 "$pid" 2>/dev/null; echo $?)"
echo "cluster-clients: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
