#!/usr/bin/env bash
# go-ycsb's Redis binding with `redis.datatype=hash` against Meridian and Redis, side by side in
# one run (hash records: HSET of 10 fields on insert, HSET of one field on update, HMGET of the
# 10 fields on read).
#
#   GO_YCSB=/tmp/go-ycsb/go-ycsb bash bench/ycsb-hash.sh
#   GO_YCSB=... ROUNDS=5 RECORDS=100000 OPS=1000000 THREADS=50 bash bench/ycsb-hash.sh
#   GO_YCSB=... MERIDIAN=0 RECORDS=1000 OPS=20000 bash bench/ycsb-hash.sh   # Redis half only
#
# Part "single": one `redis-server` and one `meridian node` (in-memory engine), both on loopback
#   for the whole run. Per round, per workload in WORKLOADS (canonical YCSB A, B, C, D, F), per
#   target: FLUSHALL, `go-ycsb load` (RECORDS records), `go-ycsb run` (OPS operations). The
#   target that goes first alternates by workload and by round.
# Part "cluster": workload A with `redis.mode=cluster` (go-redis's ClusterClient, seeded with one
#   node's address) against a Redis Cluster of 3 masters (REDIS_CLUSTER_REPLICAS replicas each,
#   default 0; Debian's redis-server, `--cluster-enabled yes`, persistence off, created with
#   `redis-cli --cluster create`, as bench/txn-compare.sh and bench/redis-cluster-compare.sh do)
#   and `meridian up $UP_ARGS` (default `--dcs 2 --nodes-per-dc 3 --n 2`, 100 ms one-way between
#   the DCs, one process) with the default bucket set to UP_BUCKET (default N=2, R=W=DW=1,
#   read_fanout=quorum: the `up` target of bench/redis-cluster-compare.sh). Meridian's cluster
#   refuses FLUSHALL, so each round starts a fresh `meridian up`; Redis Cluster gets FLUSHALL on
#   every master. The order alternates by round.
#
# Throughput is go-ycsb's TOTAL line of the run phase: successful DB operations per second
# (a READ_MODIFY_WRITE of workload F counts as its READ plus its UPDATE). Errors are the counts
# of go-ycsb's *_ERROR lines (load + run). Every target is also checked apart from go-ycsb,
# because go-ycsb's hash Read drops HMGET's error (db/redis/db.go: `errI` is never returned), so a
# server without hashes shows READs as successes: before its first run each target gets an
# HSET/HMGET probe, and after every load phase RC_SAMPLE (default 16) loaded records are read
# back with HMGET of their 10 fields. A failed probe, an incomplete read-back, a go-ycsb that
# does not finish within YCSB_TIMEOUT seconds (default 900), or any *_ERROR is listed under the
# tables; the script then exits with status 3 (after printing everything).
#
# Environment:
#   GO_YCSB      path to a go-ycsb binary (required; see "Building go-ycsb" below)
#   ROUNDS       rounds (default 3); tables show medians over rounds
#   RECORDS      records loaded per workload (default 100000)
#   OPS          operations per run phase (default 500000)
#   THREADS      go-ycsb threadcount and redis.pool_size: one connection per thread (default 50)
#   WORKLOADS    workloads of part single (default "a b c d f")
#   PARTS        "single cluster" (default), or one of them
#   CLUSTER_RECORDS / CLUSTER_OPS   part cluster's records / operations (default RECORDS / OPS)
#   MERIDIAN=0   Redis only: nothing of Meridian is built or started
#   MERIDIAN_BIN a meridian binary to use instead of `cargo build --release -p meridian`
#   UP_ARGS, UP_BUCKET, REDIS_CLUSTER_REPLICAS   see part "cluster" above
# Ports: free loopback ports found at start (20000-29999 below Linux's ephemeral range; Redis
# Cluster's in 20000-22699 so that its bus ports, +10000, stay below it too); `meridian up`
# runs with `--base-port 0` (ports chosen by the OS, read from its table). Every process the
# script starts is stopped on exit (also on Ctrl-C). Raw results: bench/out/ycsb-hash/.
#
# Workloads (canonical YCSB, brianfrankcooper/YCSB workloads/workload[abcdf], passed inline
# with -p, so no workload file of go-ycsb is needed; go-ycsb's own copies say uniform where
# canonical YCSB says zipfian): 10 fields x 100 bytes, readallfields=true, writeallfields=false,
# insertorder=hashed, and
#   a  read 0.50  update 0.50                    zipfian
#   b  read 0.95  update 0.05                    zipfian
#   c  read 1.00                                 zipfian
#   d  read 0.95  insert 0.05                    latest
#   f  read 0.50  read-modify-write 0.50         zipfian
# (E, short scans, is left out: go-ycsb's Redis binding does not implement Scan.)
#
# Building go-ycsb (none of its code is in this repository). `go install
# github.com/pingcap/go-ycsb/cmd/go-ycsb@v1.0.3` fails: go-ycsb's go.mod has a replace
# directive, which `go install pkg@version` refuses; and building every binding pulls in
# TiKV, FoundationDB, RocksDB, ... So build it from source with only the basic and redis
# bindings (Go >= 1.21; dependencies come from the Go module proxy):
#
#   git clone https://github.com/pingcap/go-ycsb /tmp/go-ycsb-src
#   git -C /tmp/go-ycsb-src checkout d383d2bebe8d63ea3d0b1e2c7315cc6abd3dd3c5
#   # (or: go mod download -json github.com/pingcap/go-ycsb@v1.0.3 and copy its Dir;
#   #  v1.0.3's pkg/ and db/redis/ are identical to d383d2b's)
#   cd /tmp/go-ycsb-src
#   # in cmd/go-ycsb/main.go, delete every `_ "github.com/pingcap/go-ycsb/db/..."` import
#   # except db/basic and db/redis, e.g.:
#   sed -i -E '/_ "github.com\/pingcap\/go-ycsb\/db\/(basic|redis)"/b; /_ "github.com\/pingcap\/go-ycsb\/db\//d' \
#     cmd/go-ycsb/main.go
#   GOFLAGS=-mod=mod CGO_ENABLED=0 go build -o /tmp/go-ycsb/go-ycsb ./cmd/go-ycsb
set -euo pipefail
cd "$(dirname "$0")/.."

: "${GO_YCSB:?set GO_YCSB to a go-ycsb binary (how to build one: the header of this script)}"
[[ -x "$GO_YCSB" ]] || { echo "GO_YCSB=$GO_YCSB is not an executable" >&2; exit 1; }
GO_YCSB=$(realpath "$GO_YCSB")
rounds=${ROUNDS:-3}
records=${RECORDS:-100000}
ops=${OPS:-500000}
threads=${THREADS:-50}
workloads=${WORKLOADS:-"a b c d f"}
parts=${PARTS:-"single cluster"}
cluster_records=${CLUSTER_RECORDS:-$records}
cluster_ops=${CLUSTER_OPS:-$ops}
use_meridian=${MERIDIAN:-1}
ycsb_timeout=${YCSB_TIMEOUT:-900}
rc_sample=${RC_SAMPLE:-16}
up_args=${UP_ARGS:-"--dcs 2 --nodes-per-dc 3 --n 2"}
up_bucket=${UP_BUCKET:-'{"type":"eventual","n_val":2,"r":1,"w":1,"dw":1,"read_fanout":"quorum"}'}
redis_replicas=${REDIS_CLUSTER_REPLICAS:-0}
fieldcount=10
fieldlength=100
for w in $workloads; do
  [[ $w =~ ^[abcdf]$ ]] || { echo "WORKLOADS: unknown workload '$w' (a b c d f)" >&2; exit 1; }
done

bash scripts/ensure-redis-tools.sh --server
bin=""
if [[ $use_meridian != 0 ]]; then
  if [[ -n "${MERIDIAN_BIN:-}" ]]; then
    bin=$(realpath "$MERIDIAN_BIN")
  else
    if ! cargo build -q --release -p meridian; then
      echo "cargo build --release -p meridian failed; MERIDIAN=0 measures the Redis half only" >&2
      exit 1
    fi
    bin="$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/meridian"
  fi
fi

out=bench/out/ycsb-hash; rm -rf "$out"; mkdir -p "$out"
csv="$out/results.csv"
notes="$out/notes.txt"; : >"$notes"
echo "part,round,workload,target,phase,ops_per_s,count,errors,p50_us,p99_us,status,first_error" >"$csv"

# --- processes: every one started here is stopped on exit ---------------------------------------
declare -A procs=()   # name -> pid
cleanup() {
  local n
  for n in "${!procs[@]}"; do kill "${procs[$n]}" 2>/dev/null || true; done
  for n in "${!procs[@]}"; do wait "${procs[$n]}" 2>/dev/null || true; done
  procs=()
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM
stop() { # stop NAME
  local p=${procs[$1]:-}
  [[ -n "$p" ]] || return 0
  kill "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  unset "procs[$1]"
}

free_base() { # free_base COUNT LO HI [OFFSET...]: P in [LO,HI) with P..P+COUNT-1 (and +OFFSETs) free
  python3 - "$@" <<'PY'
import random, socket, sys
n, lo, hi = map(int, sys.argv[1:4])
offs = [0] + [int(x) for x in sys.argv[4:]]
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(1000):
    b = random.randrange(lo, hi - n)
    if all(free(b + i + o) for i in range(n) for o in offs):
        print(b)
        sys.exit(0)
sys.exit("no free loopback ports in [%d, %d)" % (lo, hi))
PY
}

wait_resp() { # wait_resp PORT PID LOG: until the server answers PING and is process PID (or its child)
  local i
  for i in $(seq 1 300); do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "the server meant for port $1 exited; its log ($3):" >&2; tail -n 20 "$3" >&2; exit 1
    fi
    redis-cli -p "$1" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  # The server answering must be ours (a taken port would have us measure, and flush, another).
  if ! redis-cli -p "$1" INFO server 2>/dev/null | tr -d '\r' | grep -q "^process_id:$2\$"; then
    echo "port $1 is not answered by the server we started (pid $2); see $3" >&2; exit 1
  fi
}

# --- go-ycsb ------------------------------------------------------------------------------------
workload_props() { # workload_props W
  case $1 in
    a) echo "readproportion=0.5 updateproportion=0.5 insertproportion=0 readmodifywriteproportion=0 requestdistribution=zipfian" ;;
    b) echo "readproportion=0.95 updateproportion=0.05 insertproportion=0 readmodifywriteproportion=0 requestdistribution=zipfian" ;;
    c) echo "readproportion=1 updateproportion=0 insertproportion=0 readmodifywriteproportion=0 requestdistribution=zipfian" ;;
    d) echo "readproportion=0.95 updateproportion=0 insertproportion=0.05 readmodifywriteproportion=0 requestdistribution=latest" ;;
    f) echo "readproportion=0.5 updateproportion=0 insertproportion=0 readmodifywriteproportion=0.5 requestdistribution=zipfian" ;;
    *) echo "unknown workload '$1' (a b c d f)" >&2; exit 1 ;;
  esac
}

# ycsb PART ROUND W TARGET PHASE ADDR MODE NRECORDS NOPS: one go-ycsb load or run, into the CSV.
ycsb() {
  local part=$1 round=$2 w=$3 target=$4 phase=$5 addr=$6 mode=$7 nrec=$8 nops=$9
  local log="$out/$part-r$round-$w-$target-$phase.log" p props=() rc=0
  for p in workload=core readallfields=true writeallfields=false fieldcount=$fieldcount \
    fieldlength=$fieldlength fieldlengthdistribution=constant scanproportion=0 insertorder=hashed \
    recordcount="$nrec" operationcount="$nops" threadcount="$threads" \
    redis.datatype=hash redis.mode="$mode" redis.addr="$addr" redis.pool_size="$threads" \
    silence=false debug.pprof=127.0.0.1:0 $(workload_props "$w"); do
    props+=(-p "$p")
  done
  # silence=false prints each failed operation: keep the first 5 in the log, count the rest.
  # Both run in the background (a signal to this script then stops them at once, see cleanup).
  rm -f "$out/fifo"; mkfifo "$out/fifo"
  awk '/^operation err/ { n++; if (n <= 5) print; next } { print }
       END { if (n > 5) print "... " n - 5 " more operation err lines" }' <"$out/fifo" >"$log" &
  procs[awk]=$!
  timeout -k 10 "$ycsb_timeout" "$GO_YCSB" "$phase" redis "${props[@]}" >"$out/fifo" 2>&1 &
  procs[ycsb]=$!
  wait "${procs[ycsb]}" || rc=$?
  unset "procs[ycsb]"
  wait "${procs[awk]}" || true
  unset "procs[awk]"
  python3 - "$log" "$rc" "$part" "$round" "$w" "$target" "$phase" >>"$csv" <<'PY'
import csv, re, sys
log, rc = sys.argv[1], int(sys.argv[2])
lines = open(log, errors="replace").read().splitlines()
# go-ycsb prints interim lines every 10 s; the summary follows "Run finished".
fin = [i for i, l in enumerate(lines) if l.startswith("Run finished")]
summary = lines[fin[-1] + 1:] if fin else lines
ops = {}
for l in summary:
    m = re.match(r"^([A-Z_]+)\s+- Takes\(s\): [0-9.]+, Count: (\d+), OPS: ([0-9.]+).*?50th\(us\): (\d+).*?99th\(us\): (\d+)", l)
    if m:
        ops[m.group(1)] = (int(m.group(2)), float(m.group(3)), m.group(4), m.group(5))
errors = sum(c for k, (c, _, _, _) in ops.items() if k.endswith("_ERROR"))
total = ops.get("TOTAL", (0, 0.0, "", ""))
if rc == 124 or rc == 137:
    status = "timeout"
elif not fin:
    status = f"no summary (exit {rc})"
elif rc != 0:
    status = f"exit {rc}"
else:
    status = "ok"
first = next((l[len("operation err: "):] for l in lines if l.startswith("operation err")), "")
if status == "timeout":
    first = "killed by timeout"
elif not first and status != "ok":
    first = next((l for l in reversed(lines) if l.strip()), "")
csv.writer(sys.stdout).writerow(sys.argv[3:8] + [f"{total[1]:.1f}", total[0], errors, total[2], total[3], status, first[:200]])
PY
}

# ycsb_key N: go-ycsb's key of record N (insertorder=hashed: FNV-64a of N's 8 big-endian bytes).
ycsb_keys() { # ycsb_keys NRECORDS SAMPLE: keys of SAMPLE records spread over 0..NRECORDS-1
  python3 - "$1" "$2" <<'PY'
import sys
n, s = int(sys.argv[1]), int(sys.argv[2])
def h(k):
    x = 0xcbf29ce484222325
    for b in k.to_bytes(8, "big"):
        x = ((x ^ b) * 0x100000001b3) & (2**64 - 1)
    if x >= 2**63:
        x -= 2**64
    return abs(x)
for i in sorted({j * n // s for j in range(min(s, n))}):
    print(f"usertable/user{h(i)}")
PY
}

# readback PART ROUND W TARGET PORT NRECORDS: HMGET the 10 fields of sampled records after a load.
readback() {
  local good=0 total=0 k got err=""
  for k in $(ycsb_keys "$6" "$rc_sample"); do
    total=$((total + 1))
    args=(); for f in $(seq 0 $((fieldcount - 1))); do args+=("field$f"); done
    got=$(redis-cli -c -p "$5" HMGET "$k" "${args[@]}" 2>&1 | tr -d '\r')
    if [[ $(grep -cE "^[A-Za-z]{$fieldlength}\$" <<<"$got") -eq $fieldcount ]]; then
      good=$((good + 1))
    elif [[ -z "$err" ]]; then
      err=$(head -n 1 <<<"$got")
    fi
  done
  echo "$1,$2,$3,$4,readback,,$good/$total,$((total - good)),,,$([[ $good -eq $total ]] && echo ok || echo incomplete),\"${err//\"/\'}\"" >>"$csv"
}

probe() { # probe LABEL PORT: HSET/HMGET/DEL on a probe key; failures go to the notes
  local a b
  a=$(redis-cli -c -p "$2" HSET ycsb-hash-probe f v 2>&1 | tr -d '\r')
  b=$(redis-cli -c -p "$2" HMGET ycsb-hash-probe f 2>&1 | tr -d '\r')
  redis-cli -c -p "$2" DEL ycsb-hash-probe >/dev/null 2>&1 || true
  if [[ $a != 1 || $b != v ]]; then
    a=${a%%, with args beginning with:*} b=${b%%, with args beginning with:*}
    echo "$1: hash probe failed: HSET -> '$a', HMGET -> '$b'" | tee -a "$notes" >&2
  fi
}

flushall() { # flushall PORT...: FLUSHALL on each (masters only: a replica refuses writes)
  local p r
  for p in "$@"; do
    r=$(redis-cli -p "$p" ROLE 2>/dev/null | head -n 1 | tr -d '\r')
    [[ $r == slave ]] && continue
    r=$(redis-cli -p "$p" FLUSHALL 2>&1 | tr -d '\r')
    [[ $r == OK ]] || { echo "FLUSHALL on port $p answered '$r'" >&2; exit 1; }
  done
}

# one PART ROUND W TARGET PORT ADDR MODE NRECORDS NOPS FLUSH_PORTS...: flush, load, check, run
one() {
  local part=$1 round=$2 w=$3 target=$4 port=$5 addr=$6 mode=$7 nrec=$8 nops=$9
  shift 9
  echo "$part round $round workload $w: $target" >&2
  [[ $# -gt 0 ]] && flushall "$@"
  ycsb "$part" "$round" "$w" "$target" load "$addr" "$mode" "$nrec" "$nops"
  readback "$part" "$round" "$w" "$target" "$port" "$nrec"
  ycsb "$part" "$round" "$w" "$target" run "$addr" "$mode" "$nrec" "$nops"
  tail -n 1 "$csv" | cut -d, -f6,8,11 | sed 's/^/  run ops\/s, errors, status: /' >&2
}

# --- part single ----------------------------------------------------------------------------------
if [[ " $parts " == *" single "* ]]; then
  rport=$(free_base 1 20000 30000)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$out/redis.log" 2>&1 &
  procs[redis]=$!
  wait_resp "$rport" "${procs[redis]}" "$out/redis.log"
  probe "redis" "$rport"
  targets=(redis)
  if [[ -n "$bin" ]]; then
    mport=$(free_base 2 20000 30000)
    "$bin" node --resp "127.0.0.1:$mport" --http "127.0.0.1:$((mport + 1))" >"$out/meridian.log" 2>&1 &
    procs[meridian]=$!
    wait_resp "$mport" "${procs[meridian]}" "$out/meridian.log"
    probe "meridian" "$mport"
    targets+=(meridian)
  fi
  declare -A sport=([redis]=$rport [meridian]=${mport:-0})
  for round in $(seq 1 "$rounds"); do
    i=0
    for w in $workloads; do
      order=("${targets[@]}")
      if (( (round + i) % 2 == 0 )) && [[ ${#targets[@]} -eq 2 ]]; then order=(meridian redis); fi
      for t in "${order[@]}"; do
        one single "$round" "$w" "$t" "${sport[$t]}" "127.0.0.1:${sport[$t]}" single "$records" "$ops" "${sport[$t]}"
      done
      i=$((i + 1))
    done
  done
  stop redis; stop meridian
fi

# --- part cluster: workload A ---------------------------------------------------------------------
if [[ " $parts " == *" cluster "* ]]; then
  nredis=$((3 * (1 + redis_replicas)))
  cbase=$(free_base "$nredis" 20000 22700 10000)
  raddrs=(); rports=()
  for i in $(seq 0 $((nredis - 1))); do
    port=$((cbase + i)); dir="$out/redis-cluster-$i"; mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file nodes.conf \
      --dir "$dir" --save '' --appendonly no --daemonize no >"$dir/log" 2>&1 &
    procs[rc$i]=$!
    raddrs+=("127.0.0.1:$port"); rports+=("$port")
  done
  for i in $(seq 0 $((nredis - 1))); do wait_resp "${rports[$i]}" "${procs[rc$i]}" "$out/redis-cluster-$i/log"; done
  redis-cli --cluster create "${raddrs[@]}" --cluster-replicas "$redis_replicas" --cluster-yes \
    >"$out/redis-cluster-create.log" 2>&1
  for _ in $(seq 1 100); do
    redis-cli -p "$cbase" CLUSTER INFO | grep -q 'cluster_state:ok' && break; sleep 0.2
  done
  redis-cli -p "$cbase" CLUSTER INFO | grep -q 'cluster_state:ok' \
    || { echo "Redis Cluster did not reach cluster_state:ok; see $out/redis-cluster-create.log" >&2; exit 1; }
  probe "redis-cluster" "$cbase"

  start_up() { # start_up ROUND: a fresh `meridian up`; its seed node's RESP port in $uport
    local log="$out/meridian-up-r$1.log" i line
    # shellcheck disable=SC2086
    "$bin" up $up_args --base-port 0 >"$log" 2>&1 &
    procs[up]=$!
    for i in $(seq 1 600); do
      grep -q '^ready' "$log" && break
      kill -0 "${procs[up]}" 2>/dev/null || { echo "meridian up exited; its log:" >&2; cat "$log" >&2; exit 1; }
      sleep 0.1
    done
    grep -q '^ready' "$log" || { echo "meridian up not ready after 60 s; see $log" >&2; exit 1; }
    line=$(grep -m1 '^dc0-n0 ' "$log")
    uport=$(awk '{print $3}' <<<"$line"); uport=${uport##*:}
    uhttp=$(awk '{print $4}' <<<"$line")
    curl -sf -X PUT "$uhttp/buckets/default" -H 'content-type: application/json' -d "$up_bucket" >/dev/null \
      || { echo "PUT $uhttp/buckets/default $up_bucket failed" >&2; exit 1; }
    wait_resp "$uport" "${procs[up]}" "$log"
  }

  for round in $(seq 1 "$rounds"); do
    order=(redis-cluster)
    if [[ -n "$bin" ]]; then
      order=(redis-cluster meridian-up)
      (( round % 2 == 0 )) && order=(meridian-up redis-cluster)
    fi
    for t in "${order[@]}"; do
      if [[ $t == redis-cluster ]]; then
        one cluster "$round" a "$t" "$cbase" "127.0.0.1:$cbase" cluster "$cluster_records" "$cluster_ops" "${rports[@]}"
      else
        start_up "$round"
        [[ $round -eq 1 ]] && probe "meridian-up" "$uport"
        one cluster "$round" a "$t" "$uport" "127.0.0.1:$uport" cluster "$cluster_records" "$cluster_ops"
        stop up
      fi
    done
  done
fi

# --- tables -----------------------------------------------------------------------------------------
echo
python3 - "$csv" "$notes" "$rounds" "$records" "$ops" "$threads" "$cluster_records" "$cluster_ops" "$up_args" "$redis_replicas" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
notes = [l.rstrip("\n") for l in open(sys.argv[2]) if l.strip()]
rounds, records, ops, threads, crec, cops, up_args, repl = sys.argv[3:11]
med = lambda xs: statistics.median(xs) if xs else None
fmt = lambda x: "–" if x is None else f"{x:,.0f}"
problems = list(notes)

def sel(part, w, t, phase):
    return [r for r in rows if r["part"] == part and r["workload"] == w and r["target"] == t and r["phase"] == phase]

def cell(part, w, t):
    run = sel(part, w, t, "run")
    if not run:
        return None
    ops_ = med([float(r["ops_per_s"]) for r in run])
    p50 = med([float(r["p50_us"]) for r in run if r["p50_us"]])
    p99 = med([float(r["p99_us"]) for r in run if r["p99_us"]])
    errs = sum(int(r["errors"]) for r in sel(part, w, t, "load") + run)
    return ops_, p50, p99, errs

def bad(part, w, t):
    """Whether any phase of (part, workload, target) had errors, a failed status or read-back."""
    rs = [r for r in rows if r["part"] == part and r["target"] == t and (w == "load" or r["workload"] == w)]
    if w == "load":
        rs = [r for r in rs if r["phase"] == "load"]
    return any(r["status"] != "ok" or r["errors"] not in ("", "0") for r in rs)

def table(part, title, pairs, workloads, base, other):
    print(f"### {title}\n")
    print(f"| workload | {pairs[0]} ops/s | {pairs[1]} ops/s | **{pairs[1]} / {pairs[0]}** | "
          f"{pairs[0]} p50 / p99 µs | {pairs[1]} p50 / p99 µs | {pairs[0]} errors | {pairs[1]} errors |")
    print("|---|---:|---:|---:|---|---|---:|---:|")
    for w in workloads + ["load"]:
        if w == "load":
            a = [float(r["ops_per_s"]) for r in rows if r["part"] == part and r["target"] == base and r["phase"] == "load"]
            b = [float(r["ops_per_s"]) for r in rows if r["part"] == part and r["target"] == other and r["phase"] == "load"]
            le = lambda t: sum(int(r["errors"] or 0) for r in rows if r["part"] == part and r["target"] == t and r["phase"] == "load")
            ca = (med(a), None, None, le(base)) if a else None
            cb = (med(b), None, None, le(other)) if b else None
            label = "load (inserts)"
        else:
            ca, cb = cell(part, w, base), cell(part, w, other)
            label = w.upper()
        if ca is None and cb is None:
            continue
        ratio = "–"
        if ca and cb and ca[0] and cb[0] is not None:
            dirty = [t for t in (base, other) if bad(part, w, t)]
            ratio = f"**{cb[0] / ca[0]:.2f}**" if not dirty else "– (errors: see below)"
        lat = lambda c: "–" if not c or c[1] is None else f"{c[1]:,.0f} / {c[2]:,.0f}"
        err = lambda c: "–" if not c or c[3] is None else str(c[3])
        print(f"| {label} | {fmt(ca and ca[0])} | {fmt(cb and cb[0])} | {ratio} | {lat(ca)} | {lat(cb)} | {err(ca)} | {err(cb)} |")
    print("\nops/s: go-ycsb's TOTAL of the run phase (successful operations; F counts a read-modify-write "
          "as its READ and its UPDATE), median over rounds; load: the load phases' median. errors: "
          "*_ERROR counts, load + run, summed over rounds.\n")

parts = sorted({r["part"] for r in rows}, key=["single", "cluster"].index)
for part in parts:
    ws = []
    for r in rows:
        if r["part"] == part and r["workload"] not in ws:
            ws.append(r["workload"])
    if part == "single":
        table(part, f"go-ycsb, redis.datatype=hash: one Meridian node vs one redis-server "
              f"({records} records, {ops} operations, {threads} threads; medians of {rounds} rounds)",
              ["Redis", "Meridian"], ws, "redis", "meridian")
    else:
        table(part, f"go-ycsb, redis.datatype=hash, redis.mode=cluster, workload A: `meridian up {up_args}` vs "
              f"Redis Cluster (3 masters, {repl} replicas each) ({crec} records, {cops} operations, "
              f"{threads} threads; medians of {rounds} rounds)",
              ["Redis Cluster", "meridian up"], ws, "redis-cluster", "meridian-up")

# One line per (part, target, phase) with trouble: runs affected, errors, statuses, an example.
import re
groups = {}
for r in rows:
    if r["status"] == "ok" and r["errors"] in ("", "0"):
        continue
    g = groups.setdefault((r["part"], r["target"], r["phase"]), {"runs": 0, "errors": 0, "status": set(), "rows": []})
    g["runs"] += 1
    g["errors"] += int(r["errors"] or 0)
    g["status"].add(r["status"])
    g["rows"].append(r)
short = lambda e: re.sub(r", with args beginning with:.*", ", with args beginning with: ...", e or "-")[:160]
for (part, target, phase), g in groups.items():
    r = g["rows"][0]
    if phase == "readback":
        problems.append(f"{part} {target}: after {g['runs']} of its loads, sampled records did not read back "
                        f"(e.g. {r['count']} in round {r['round']} workload {r['workload']}; first bad reply: "
                        f"{short(r['first_error'])}). go-ycsb's hash READ drops HMGET's errors: this target's "
                        f"READ counts are not real reads")
    else:
        problems.append(f"{part} {target} {phase}: {g['runs']} runs with trouble, {g['errors']} errors in all, "
                        f"status {'/'.join(sorted(g['status']))} (first: {short(r['first_error'])})")
if problems:
    print("**Problems** (raw results: bench/out/ycsb-hash/):\n")
    for p in problems:
        print(f"- {p}")
    sys.exit(3)
print("No errors; every probe and read-back passed.")
PY
