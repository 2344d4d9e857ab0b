#!/usr/bin/env bash
# How long a PUBLISH takes to reach a subscriber in the other DC of `meridian up`.
#
#   bash bench/pubsub-wan.sh [ONE_WAY_MS] [MESSAGES]
#
# Starts a release-built `meridian up --dcs 2 --nodes-per-dc 2 --wan-latency ONE_WAY_MS`
# (default 50) on loopback. A redis-py subscriber on a DC-1 node and a publisher on a DC-0
# node (same machine, same clock) exchange MESSAGES (default 500) messages 5 ms apart, each
# carrying its send time; prints the delivery delay's p50/p99 beside the one-way delay (the
# issue's target: one-way + 2 ms at p50), and the same from a subscriber on the publisher's
# own node. redis-py comes from PyPI in the venv scripts/cluster-clients.sh uses.
# NO_BUILD=1 uses the release binary already built.
set -euo pipefail
cd "$(dirname "$0")/.."
one_way=${1:-50}
messages=${2:-500}
target="${CARGO_TARGET_DIR:-target}"
venv="$target/cluster-clients-venv"
if ! "$venv/bin/python" -c 'import redis' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'redis>=5'
fi
[[ -n "${NO_BUILD:-}" ]] || cargo build -q --release -p meridian

out=bench/out; mkdir -p "$out"
base=$((20000 + RANDOM % 9000))
"$target/release/meridian" up --dcs 2 --nodes-per-dc 2 --base-port "$base" \
  --wan-latency "${one_way}ms" >"$out/pubsub-wan.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do grep -q '^ready:' "$out/pubsub-wan.log" && break; sleep 0.1; done
grep -q '^ready:' "$out/pubsub-wan.log" || { echo "the cluster did not start; see $out/pubsub-wan.log" >&2; exit 1; }

"$venv/bin/python" - "$base" "$messages" "$one_way" <<'PY'
import json, statistics, sys, threading, time, urllib.request
import redis

base, n, one_way = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
with urllib.request.urlopen(f"http://127.0.0.1:{base + 1000}/cluster", timeout=10) as r:
    members = json.load(r)["members"]
by_dc = {}
for m in members:
    host, port = m["resp"].rsplit(":", 1)
    by_dc.setdefault(m["dc"], []).append((host, int(port)))
dcs = sorted(by_dc)
publisher_addr = by_dc[dcs[0]][0]

def listen(addr, delays, ready):
    p = redis.Redis(host=addr[0], port=addr[1]).pubsub()
    p.subscribe("lat")
    while p.get_message(timeout=5) is None:
        pass
    ready.set()
    while len(delays) < n:
        m = p.get_message(timeout=10)
        if m is None:
            break
        if m["type"] == "message":
            delays.append((time.perf_counter_ns() - int(m["data"])) / 1e6)

results = {}
threads = []
for name, addr in [("other DC", by_dc[dcs[-1]][0]), ("same node", publisher_addr)]:
    delays, ready = [], threading.Event()
    t = threading.Thread(target=listen, args=(addr, delays, ready), daemon=True)
    t.start()
    ready.wait(10)
    results[name] = delays
    threads.append(t)
pub = redis.Redis(host=publisher_addr[0], port=publisher_addr[1])
for _ in range(n):
    pub.publish("lat", str(time.perf_counter_ns()))
    time.sleep(0.005)
for t in threads:
    t.join(30)
print(f"| subscriber | messages | p50 ms | p99 ms | target p50 ms |")
print("|---|---|---|---|---|")
for name, d in results.items():
    d = sorted(d)
    p50, p99 = statistics.median(d), d[int(len(d) * 0.99) - 1]
    target = f"{one_way + 2:.0f}" if name == "other DC" else "-"
    print(f"| {name} | {len(d)} | {p50:.2f} | {p99:.2f} | {target} |")
print(f"\none-way WAN delay {one_way:.0f} ms; {n} messages 5 ms apart")
PY
