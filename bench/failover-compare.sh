#!/usr/bin/env bash
# Failover as a client sees it, Meridian beside Redis Cluster in one run.
#
#   bash bench/failover-compare.sh [ROUNDS]
#
# Each round starts, fresh and in alternating order:
#   redis     Redis Cluster 3 masters + 3 replicas (Debian's redis-server, persistence off,
#             cluster-node-timeout 5000 — Redis's default, set explicitly);
#   meridian  `meridian up --processes --dcs 2 --nodes-per-dc 3` (default settings).
# then kills one master with SIGKILL under a redis-py RedisCluster client seeded at another node
# (bench/failover_time.py) and records the seconds from the kill to the client's first
# acknowledged write to the dead master's keys. Prints each round and the medians.
#
# Ports: 21100-21105 (Redis), 22500-25599 (Meridian); below the ephemeral range.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
bash scripts/ensure-redis-tools.sh --server
cargo build -q --release -p meridian
bin="$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/meridian"
venv="$(realpath -m "${CARGO_TARGET_DIR:-target}")/bench-venv"
if ! "$venv/bin/python" -c 'import redis' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'redis>=5'
fi
out=bench/out/failover; rm -rf "$out"; mkdir -p "$out"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap cleanup EXIT

redis_round() {
  local base=21100 addrs=() i port dir
  for i in 0 1 2 3 4 5; do
    port=$((base + i)); dir="$out/redis-$i"; rm -rf "$dir"; mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 5000 --dir "$dir" --save "" \
      --appendonly no --daemonize no >"$dir/log" 2>&1 &
    pids+=($!)
    addrs+=("127.0.0.1:$port")
  done
  for i in 0 1 2 3 4 5; do
    for _ in $(seq 1 100); do redis-cli -p $((base + i)) PING >/dev/null 2>&1 && break; sleep 0.1; done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$out/create.log" 2>&1
  for _ in $(seq 1 100); do
    redis-cli -p "$base" CLUSTER INFO | grep -q 'cluster_state:ok' && break; sleep 0.1
  done
  # Every replica must have finished its first sync, or it may not fail over (Redis refuses a
  # replica disconnected longer than cluster-replica-validity-factor allows).
  for i in 0 1 2 3 4 5; do
    for _ in $(seq 1 300); do
      info=$(redis-cli -p $((base + i)) INFO replication | tr -d '\r')
      grep -q '^role:master' <<<"$info" && break
      grep -q '^master_link_status:up' <<<"$info" && break
      sleep 0.1
    done
  done
  # The victim: the master of slot 0's range; the seed: another master.
  local victim seed vpid
  victim=$(redis-cli -p "$base" CLUSTER SLOTS | awk 'NR==4{print; exit}')
  seed=$(redis-cli -p "$base" CLUSTER NODES | awk -v v=":$victim@" '$3 ~ /master/ && index($2, v) == 0 {split($2, a, "[:@]"); print a[2]; exit}')
  vpid=${pids[$((victim - base))]}
  "$venv/bin/python" bench/failover_time.py 127.0.0.1 "$seed" "$victim" "$vpid" || echo failed
  cleanup
}

meridian_round() {
  local dir="$out/meridian" log
  rm -rf "$dir"; mkdir -p "$dir"; log="$dir/up.log"
  "$bin" up --processes --dcs 2 --nodes-per-dc 3 --base-port 22500 --config-dir "$dir" \
    >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 1200); do grep -q '^ready:' "$log" && break; sleep 0.1; done
  grep -q '^ready:' "$log" || { cat "$log" >&2; exit 1; }
  # The table: name, DC, RESP, HTTP, S3, pid. Seed dc0-n0; victim dc0-n1.
  local seed victim vpid
  seed=$(awk '$1=="dc0-n0"{split($3, a, ":"); print a[2]}' "$log")
  victim=$(awk '$1=="dc0-n1"{split($3, a, ":"); print a[2]}' "$log")
  vpid=$(awk '$1=="dc0-n1"{print $6}' "$log")
  local host
  host=$(awk '$1=="dc0-n0"{split($3, a, ":"); print a[1]}' "$log")
  "$venv/bin/python" bench/failover_time.py "$host" "$seed" "$victim" "$vpid" || echo failed
  cleanup
}

printf 'round,target,seconds\n' >"$out/results.csv"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then order=(redis meridian); else order=(meridian redis); fi
  for t in "${order[@]}"; do
    s=$("${t}_round" | tail -n 1)
    echo "round $r $t: $s s"
    echo "$r,$t,$s" >>"$out/results.csv"
  done
done
python3 - "$out/results.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for t in ["redis", "meridian"]:
    v = [float(r["seconds"]) for r in rows if r["target"] == t and r["seconds"] not in ("timeout", "failed")]
    n = sum(1 for r in rows if r["target"] == t)
    med = f"{statistics.median(v):.2f}" if v else "-"
    print(f"{t:9} median {med} s over {len(v)}/{n} rounds, range {min(v, default=0):.2f}-{max(v, default=0):.2f}")
PY
