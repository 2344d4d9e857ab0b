#!/usr/bin/env bash
# Meridian clusters vs Redis Cluster, side by side in one run, driven by `redis-benchmark --cluster`.
#
#   bash bench/redis-cluster-compare.sh [ROUNDS] [REQUESTS_P1] [REQUESTS_P16]
#   DECAY=1 bash bench/redis-cluster-compare.sh      # the 3-minute pipeline-1 stability run
#   OLD_BIN=/path/to/old/meridian TARGETS="redis up up-old" bash bench/redis-cluster-compare.sh 5
#                                                    # before/after a change, in one run
#
# Starts, on loopback:
#   redis         Redis Cluster, 3 masters + 3 replicas (Debian's redis-server, persistence off)
#   up            `meridian up`, 2 DCs x 3 nodes in one process, N=2, R=W=DW=1
#   processes     `meridian up --processes`, the same over TCP, one process per node
#   default       `meridian up` as it starts: the default bucket (timeline, N=3, masters in the inserting DC)
#   single        one `meridian node` (no cluster), for CPU per operation only
#   up-old        with OLD_BIN set: `up` run from that binary (a build of an older commit)
# TARGETS restricts the targets benchmarked (all of them are started).
# Every cluster runs with the default WAN emulation of `meridian up` (100 ms one-way between DCs).
# Every cluster is loaded first (1M pipelined SETs over its keyspace). Each round runs SET then
# GET (500-byte values, 50 clients, keys random in 100k) at pipelines 1 and 16 against every
# target, the target order rotating each round. It prints medians over
# rounds, the ratio to Redis Cluster, and the CPU time the servers used per operation (all
# their processes, from /proc). Then it writes 1M SETs into each cluster and prints resident
# memory per stored value byte (every replica's copy counted) beside Redis Cluster's
# `used_memory`.
#
# Ports: 21000-21099 (Redis), 22000-22999 (Meridian); below the ephemeral range.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n_p1=${2:-100000}
n_p16=${3:-400000}
bash scripts/ensure-redis-tools.sh --server
cargo build -q --release -p meridian
bin="$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/meridian"
out=bench/out/redis-cluster; rm -rf "$out"; mkdir -p "$out"
csv="$out/results.csv"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_for() { # wait_for FILE PATTERN
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}

# --- Redis Cluster: 3 masters + 3 replicas -------------------------------------------------
rbase=21000
raddrs=()
for i in 0 1 2 3 4 5; do
  port=$((rbase + i)); dir="$out/redis-$i"; mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
    --dir "$dir" --save "" --appendonly no --daemonize no >"$dir/log" 2>&1 &
  pids+=($!)
  raddrs+=("127.0.0.1:$port")
done
for i in 0 1 2 3 4 5; do
  for _ in $(seq 1 100); do redis-cli -p $((rbase + i)) PING >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create "${raddrs[@]}" --cluster-replicas 1 --cluster-yes >"$out/redis-create.log" 2>&1
for _ in $(seq 1 100); do
  redis-cli -p $rbase CLUSTER INFO | grep -q 'cluster_state:ok' && break; sleep 0.2
done
rpids=$(for i in 0 1 2 3 4 5; do redis-cli -p $((rbase + i)) INFO server | sed -n 's/^process_id:\([0-9]*\).*/\1/p'; done | tr -d '\r' | xargs)

# --- Meridian -------------------------------------------------------------------------------
set_bucket() { # set_bucket HOST:HTTP_PORT JSON
  curl -sf -X PUT "$1/buckets/default" -H 'content-type: application/json' -d "$2" >/dev/null
}
started=
start_up() { # start_up NAME BASE N [FLAGS...]: starts a cluster; its pid in $started
  local name=$1 base=$2 n=$3; shift 3
  "${up_bin:-$bin}" up --dcs 2 --nodes-per-dc 3 --n "$n" --base-port "$base" "$@" >"$out/$name.log" 2>&1 &
  started=$!
  pids+=("$started")
  wait_for "$out/$name.log" '^ready'
}
start_up up 22000 2; up_pid=$started
set_bucket 127.0.0.1:23000 '{"type":"eventual","n_val":2,"r":1,"w":1,"dw":1,"read_fanout":"quorum"}'
start_up processes 22100 2 --processes --config-dir "$out/processes"; proc_parent=$started
set_bucket 127.0.0.2:23100 '{"type":"eventual","n_val":2,"r":1,"w":1,"dw":1,"read_fanout":"quorum"}'
proc_pids=$(pgrep -P "$proc_parent" | xargs)
start_up default 22200 3; default_pid=$started
"$bin" node --resp 127.0.0.1:22300 --http 127.0.0.1:22301 >"$out/single.log" 2>&1 &
single_pid=$!; pids+=("$single_pid")
for _ in $(seq 1 100); do redis-cli -p 22300 PING >/dev/null 2>&1 && break; sleep 0.1; done
old_pid=
if [[ -n "${OLD_BIN:-}" ]]; then
  up_bin=$OLD_BIN start_up up-old 22400 2; old_pid=$started
  set_bucket 127.0.0.1:23400 '{"type":"eventual","n_val":2,"r":1,"w":1,"dw":1,"read_fanout":"quorum"}'
fi

# `up --processes` puts node i on 127.0.0.(i+2).
declare -A host=([redis]=127.0.0.1 [up]=127.0.0.1 [processes]=127.0.0.2 [default]=127.0.0.1 [single]=127.0.0.1
  [up-old]=127.0.0.1)
declare -A port=([redis]=$rbase [up]=22000 [processes]=22100 [default]=22200 [single]=22300 [up-old]=22400)
declare -A spids=([redis]="$rpids" [up]="$up_pid" [processes]="$proc_pids" [default]="$default_pid" [single]="$single_pid"
  [up-old]="$old_pid")
targets=(redis up processes default single)
[[ -n "${OLD_BIN:-}" ]] && targets+=(up-old)
# shellcheck disable=SC2206
[[ -n "${TARGETS:-}" ]] && targets=($TARGETS)

cpu_ticks() { # total user+system clock ticks of the given pids
  local t=0 p f
  for p in "$@"; do
    read -ra f <"/proc/$p/stat"
    t=$((t + f[13] + f[14]))
  done
  echo "$t"
}

bench() { # bench TARGET ROUND PIPELINE REQUESTS TEST
  local target=$1 cluster=(--cluster)
  [[ $target == single ]] && cluster=()
  local before after
  # shellcheck disable=SC2086
  before=$(cpu_ticks ${spids[$target]})
  local line
  line=$(redis-benchmark "${cluster[@]}" -h "${host[$target]}" -p "${port[$target]}" -t "$5" -n "$4" -c 50 -d 500 \
    -r 100000 -P "$3" --csv 2>"$out/last-bench.err" | tail -n 1 | tr -d '"')
  # shellcheck disable=SC2086
  after=$(cpu_ticks ${spids[$target]})
  [[ -n "$line" ]] || { echo "redis-benchmark failed against $target:" >&2; cat "$out/last-bench.err" >&2; exit 1; }
  echo "$target,$2,$3,$line,$((after - before)),$4" >>"$csv"
}

echo "target,round,pipeline,test,rps,avg_ms,min_ms,p50_ms,p95_ms,p99_ms,max_ms,cpu_ticks,requests" >"$csv"
if [[ -n "${DECAY:-}" ]]; then
  # The stability run: SET at pipeline 1 against `meridian up` for 3 minutes, in 10-second
  # windows (each window's request count from the first window's rate).
  echo "window,elapsed_s,rps" >"$out/decay.csv"
  n=$n_p1; start=$(date +%s)
  for w in $(seq 1 100); do
    line=$(redis-benchmark --cluster -h 127.0.0.1 -p 22000 -t set -n "$n" -c 50 -d 500 -r 100000 -P 1 --csv \
      2>/dev/null | tail -n 1 | tr -d '"')
    rps=$(echo "$line" | cut -d, -f2)
    [[ $w -eq 1 ]] && n=$(python3 -c "print(max(1000, int(float('$rps') * 10)))")
    el=$(($(date +%s) - start))
    echo "$w,$el,$rps" | tee -a "$out/decay.csv"
    ((el >= 180)) && break
  done
  python3 - "$out/decay.csv" <<'PY'
import csv, statistics, sys
rows = [(int(r["elapsed_s"]), float(r["rps"])) for r in csv.DictReader(open(sys.argv[1]))]
first = [v for t, v in rows if t <= 30]
last = [v for t, v in rows if t > rows[-1][0] - 30]
a, b = statistics.mean(first), statistics.mean(last)
print(f"first 30 s: {a:,.0f} ops/s, last 30 s: {b:,.0f} ops/s, change {100 * (b - a) / a:+.1f} %")
PY
  exit 0
fi

# Load: every key of the keyspace exists before the rounds, as YCSB loads before it runs:
# 1M pipelined SETs, then bench/fill_tags.py writes whatever key of each tag is still missing.
# The first write of a key on the default bucket goes to its partition's insert arbiter, in the
# other DC for about half the tags, so the closed-loop load leaves those mostly empty; the
# rounds measure reads and writes of existing keys, whose masters are in the writing DC.
for t in "${targets[@]}"; do
  [[ $t == single ]] && continue
  echo "load: $t" >&2
  redis-benchmark --cluster -h "${host[$t]}" -p "${port[$t]}" -t set -n 1000000 -c 100 -d 500 -r 100000 -P 64 -q \
    >/dev/null 2>&1
  [[ $t == redis ]] || python3 bench/fill_tags.py "${host[$t]}" "${port[$t]}" 100000 500
done

for round in $(seq 1 "$rounds"); do
  # Rotate the order so no target always runs first (on a cooler or warmer machine).
  order=("${targets[@]:$(((round - 1) % ${#targets[@]}))}" "${targets[@]:0:$(((round - 1) % ${#targets[@]}))}")
  for pipeline in 1 16; do
    n=$n_p1; [[ $pipeline -eq 16 ]] && n=$n_p16
    for t in "${order[@]}"; do
      echo "round $round, pipeline $pipeline: $t" >&2
      bench "$t" "$round" "$pipeline" "$n" set
      bench "$t" "$round" "$pipeline" "$n" get
    done
  done
done

# --- memory: what each cluster holds after 1M SETs over its keyspace ----------------------------
# `redis-benchmark --cluster` tags each key with its node's slot ({tag}:key), so the keyspace is
# 100k keys per tag: count what is actually stored (all replicas) rather than assume it.
rss_kb() { local t=0 p; for p in "$@"; do t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status"))); done; echo "$t"; }
redis_sum() { local t=0 i; for i in 0 1 2 3 4 5; do # redis_sum SECTION FIELD
  t=$((t + $(redis-cli -p $((rbase + i)) INFO "$1" | tr -d '\r' | sed -n "s/^$2:\([0-9]*\).*/\1/p")))
done; echo "$t"; }
redis_keys() { local t=0 i; for i in 0 1 2 3 4 5; do
  t=$((t + $(redis-cli -p $((rbase + i)) DBSIZE | tr -d '\r')))
done; echo "$t"; }
meridian_keys() { # meridian_keys TARGET: stored objects, every replica counted
  local t=0 i h
  for i in 0 1 2 3 4 5; do
    h=127.0.0.1; [[ $1 == processes ]] && h=127.0.0.$((i + 2))
    t=$((t + $(curl -sf "$h:$((${http[$1]} + i))/metrics" | sed -n 's/^meridian_engine_keys \([0-9]*\)/\1/p')))
  done
  echo "$t"
}
declare -A http=([up]=23000 [processes]=23100 [default]=23200 [up-old]=23400)
echo "target,stored_copies,rss_kb,redis_used_memory" >"$out/memory.csv"
for t in "${targets[@]}"; do
  [[ $t == single ]] && continue
  redis-benchmark --cluster -h "${host[$t]}" -p "${port[$t]}" -t set -n 1000000 -c 50 -d 500 -r 100000 -P 16 -q \
    >/dev/null 2>&1
  if [[ $t == redis ]]; then
    echo "$t,$(redis_keys),$(rss_kb $rpids),$(redis_sum memory used_memory)" >>"$out/memory.csv"
  else
    # shellcheck disable=SC2086
    echo "$t,$(meridian_keys "$t"),$(rss_kb ${spids[$t]}),0" >>"$out/memory.csv"
  fi
done

python3 - "$csv" "$out/memory.csv" "$(getconf CLK_TCK)" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tck = float(sys.argv[3])
med = statistics.median
def pick(t, test, p, k):
    return [float(r[k]) for r in rows if r["target"] == t and r["test"] == test and r["pipeline"] == p]
def cpu_us(t, test, p):
    return med([float(r["cpu_ticks"]) / tck * 1e6 / float(r["requests"])
                for r in rows if r["target"] == t and r["test"] == test and r["pipeline"] == p])
print("| target | test | pipeline | ops/s | ratio to Redis Cluster | p50 / p99 ms | CPU µs/op | CPU ratio to single node |")
print("|---|---|---|---|---|---|---|---|")
for t in ("redis", "up", "up-old", "processes", "default", "single"):
    for test in ("SET", "GET"):
        for p in ("1", "16"):
            v = pick(t, test, p, "rps")
            if not v:
                continue
            r = med(pick("redis", test, p, "rps"))
            ratio = "" if t == "single" else f"**{med(v) / r:.2f}**"
            single = f"{cpu_us(t, test, p) / cpu_us('single', test, p):.1f}×" if pick("single", test, p, "rps") else "–"
            print(f"| {t} | {test} | {p} | {med(v):,.0f} | {ratio} | "
                  f"{med(pick(t, test, p, 'p50_ms')):.3f} / {med(pick(t, test, p, 'p99_ms')):.3f} | "
                  f"{cpu_us(t, test, p):.1f} | {single} |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds; 500-byte values, 50 clients, keys random in 100k")
print("\n| target | stored copies (500-byte values) | resident MiB | resident bytes per stored value byte |")
print("|---|---|---|---|")
for r in csv.DictReader(open(sys.argv[2])):
    copies = int(r["stored_copies"])
    rss = int(r["rss_kb"]) * 1024
    extra = (f" (`used_memory`: {int(r['redis_used_memory']) / (copies * 500):.2f})"
             if r["target"] == "redis" else "")
    print(f"| {r['target']} | {copies:,} | {rss / 2**20:,.0f} | {rss / (copies * 500):.2f}{extra} |")
PY
echo "raw results: $csv, $out/memory.csv" >&2
