#!/usr/bin/env bash
# Memory of large collections: a list, a set, a sorted set and a hash of N small members each
# (default 1,000,000; members `m:<i>`, hash values and list elements `v:<i>`, scores i), loaded
# into a release-built Meridian node and into redis-server (persistence off), one type at a
# time into a freshly started pair of servers.
#
#   bash bench/collection-memory.sh [N]
#   TYPES="hash zset" bash bench/collection-memory.sh   # some of the types only
#
# Prints, per type, each server's resident-set growth (RSS after loading minus RSS of the empty
# server, from /proc) and Redis's own `used_memory` growth, and Meridian's RSS over each. RSS
# is what the machine pays for either; Redis's used_memory is its allocator's count (without
# fragmentation), the figure the issue names.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
bash scripts/ensure-redis-tools.sh --server
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian
bin="${CARGO_TARGET_DIR:-target}/release/meridian"
out=bench/out; mkdir -p "$out"

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
used_memory() { redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1=="used_memory" {print $2}'; }

# The RESP commands that build one collection, 1000 members per command.
commands() { # commands TYPE
  python3 - "$1" "$n" <<'EOF'
import sys
kind, n = sys.argv[1], int(sys.argv[2])
def cmd(*words):
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w.encode() if isinstance(w, str) else w
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)
w = sys.stdout.buffer
for start in range(0, n, 1000):
    ids = range(start, min(n, start + 1000))
    if kind == "list":
        w.write(cmd("RPUSH", "big", *[f"v:{i}" for i in ids]))
    elif kind == "set":
        w.write(cmd("SADD", "big", *[f"m:{i}" for i in ids]))
    elif kind == "zset":
        w.write(cmd("ZADD", "big", *[x for i in ids for x in (str(i), f"m:{i}")]))
    else:
        w.write(cmd("HSET", "big", *[x for i in ids for x in (f"m:{i}", f"v:{i}")]))
EOF
}

echo "type,server,rss_growth_bytes,used_memory_growth_bytes"
for kind in ${TYPES:-list set zset hash}; do
  port=$((20000 + RANDOM % 10000)); rport=$((port + 1)); hport=$((port + 2))
  "$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$hport" >"$out/mem-meridian.log" 2>&1 &
  mpid=$!
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    >"$out/mem-redis.log" 2>&1 &
  rpid=$!
  trap 'kill $mpid $rpid 2>/dev/null || true' EXIT
  for p in "$port" "$rport"; do
    for _ in $(seq 1 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
  done
  for s in meridian redis; do
    p=$port pid=$mpid; [[ $s == redis ]] && p=$rport pid=$rpid
    rss0=$(rss_kb "$pid"); used0=$(used_memory "$p")
    commands "$kind" | redis-cli -p "$p" --pipe >/dev/null
    len=$(case $kind in list) redis-cli -p "$p" LLEN big ;; set) redis-cli -p "$p" SCARD big ;;
      zset) redis-cli -p "$p" ZCARD big ;; hash) redis-cli -p "$p" HLEN big ;; esac)
    [[ $len == "$n" ]] || { echo "$s holds $len members of $kind, not $n" >&2; exit 1; }
    rss1=$(rss_kb "$pid"); used1=$(used_memory "$p")
    echo "$kind,$s,$(( (rss1 - rss0) * 1024 )),$(( used1 - used0 ))"
  done
  kill $mpid $rpid; wait $mpid $rpid 2>/dev/null || true
done | tee "$out/collection-memory.csv"
