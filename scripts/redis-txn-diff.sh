#!/usr/bin/env bash
# Transactions, byte for byte: runs a list of MULTI/EXEC/DISCARD/WATCH scenarios against a
# real redis-server and a Meridian node, and fails on the first reply that differs in any
# byte. Each scenario starts from an empty keyspace and may use a second connection ("B ...")
# and pauses ("SLEEP seconds"); HELLO replies (which name the server) are not compared.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis-tools.sh --server

cargo build -q -p meridian
bin="${CARGO_TARGET_DIR:-target}/debug/meridian"
port=$((20000 + RANDOM % 10000))   # below the ephemeral range (32768+)
rport=$((port + 2))
log=$(mktemp)
"$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$((port + 1))" >"$log" 2>&1 &
pid=$!
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >>"$log" 2>&1 &
rpid=$!
cleanup() {
  kill "$pid" "$rpid" 2>/dev/null || true
  wait "$pid" "$rpid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT
for p in "$port" "$rport"; do
  for _ in $(seq 1 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
done

python3 - "$rport" "$port" <<'PY'
import socket, sys, time

SCENARIOS = [
    ["EXEC"],
    ["DISCARD"],
    ["EXEC extra"],
    ["MULTI", "MULTI", "EXEC"],
    ["MULTI", "WATCH k", "SET k 1", "EXEC", "GET k"],
    ["MULTI", "EXEC"],
    ["MULTI", "SET a 1", "INCR a", "GET a", "EXEC"],
    ["SET s text", "MULTI", "INCR s", "SET b 1", "SET c 1 BADOPT", "EXEC", "MGET b c"],
    ["MULTI", "SET a 1", "NOPE x y", "EXEC", "GET a"],
    ["MULTI", "SET a 1", "GET", "EXEC", "EXISTS a"],
    ["MULTI", "SET a 1", "EXEC x", "EXEC", "EXISTS a"],
    ["MULTI", "SET a 1", "DISCARD", "GET a", "DISCARD"],
    ["MULTI", "DISCARD x", "EXEC"],
    ["MULTI", "UNWATCH x", "EXEC"],
    ["MULTI", "WATCH", "EXEC"],
    ["WATCH"],
    ["MULTI extra"],
    ["WATCH k", "SET k 1", "MULTI", "SET k 2", "EXEC", "GET k"],
    ["WATCH k", "B SET k 1", "MULTI", "SET k 2", "EXEC", "GET k"],
    ["WATCH k", "B SET k 1", "B DEL k", "MULTI", "SET k 2", "EXEC", "GET k"],
    ["SET k 1", "WATCH k", "B SET k 1 NX", "MULTI", "INCR k", "EXEC"],
    ["WATCH k", "B SET other 1", "MULTI", "INCR k", "EXEC"],
    ["SET t 1 PX 50", "WATCH t", "SLEEP 0.15", "MULTI", "PING", "EXEC"],
    ["SET t 1 PX 20", "SLEEP 0.1", "WATCH t", "MULTI", "PING", "EXEC"],
    ["SET f 1", "WATCH f", "B FLUSHALL", "MULTI", "PING", "EXEC"],
    ["WATCH nope", "B FLUSHALL", "MULTI", "PING", "EXEC"],
    ["WATCH k", "UNWATCH", "B SET k 1", "MULTI", "GET k", "EXEC"],
    ["WATCH k", "MULTI", "DISCARD", "B SET k 1", "MULTI", "GET k", "EXEC"],
    ["WATCH k", "B SET k 1", "MULTI", "EXEC", "MULTI", "GET k", "EXEC"],
    ["WATCH k j k", "B SET j 1", "MULTI", "PING", "EXEC"],
    ["WATCH k", "MULTI", "GET k", "RESET", "EXEC", "MULTI", "EXEC"],
    ["HELLO 3", "WATCH k", "B SET k 1", "MULTI", "SET k 2", "EXEC"],
    ["HELLO 3", "MULTI", "GET nope", "SET a 1", "EXEC"],
    ["MULTI", "PING", "ECHO hi", "UNWATCH", "SET a 1", "KEYS *", "DBSIZE", "FLUSHALL",
     "DBSIZE", "EXEC"],
    ["MSET a 1 b 2", "MULTI", "MGET a b", "DEL a b c", "MSETNX a 1 c 3", "EXISTS a b c",
     "EXPIRE c 100", "TTL c", "PERSIST c", "GETDEL c", "APPEND d xy", "SETRANGE d 5 z",
     "GETRANGE d 0 -1", "INCRBYFLOAT f 1.5", "DECRBY f 1", "GETSET g 1", "SETNX g 2",
     "STRLEN g", "TYPE g", "GETEX g PX 100000", "EXEC"],
    ["MULTI", "SET a 1", "QUIT"],
]
# One more scenario from the environment, e.g. to see a difference reported:
# TXN_DIFF_EXTRA="CONFIG GET port" scripts/redis-txn-diff.sh
import os
if os.environ.get("TXN_DIFF_EXTRA"):
    SCENARIOS.append(os.environ["TXN_DIFF_EXTRA"].split("|"))

def read_reply(f):
    """Reads one RESP2/RESP3 reply; returns its raw bytes."""
    line = f.readline()
    if not line:
        raise EOFError
    out = line
    t, rest = line[:1], line[1:-2]
    if t in b"$=!":
        n = int(rest)
        if n >= 0:
            out += f.read(n + 2)
    elif t in b"*~>%|":
        n = int(rest)
        if t in b"%|":
            n *= 2
        for _ in range(max(n, 0)):
            out += read_reply(f)
    return out

def run(port, scenario):
    admin = socket.create_connection(("127.0.0.1", port))
    admin.sendall(b"FLUSHALL\r\n")
    admin.recv(64)
    admin.close()
    conns = {}
    def conn(name):
        if name not in conns:
            s = socket.create_connection(("127.0.0.1", port))
            conns[name] = (s, s.makefile("rb"))
        return conns[name]
    replies = []
    for step in scenario:
        if step.startswith("SLEEP "):
            time.sleep(float(step.split()[1]))
            continue
        name, cmd = ("B", step[2:]) if step.startswith("B ") else ("A", step)
        s, f = conn(name)
        parts = [p.encode() for p in cmd.split(" ")]
        s.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        try:
            r = read_reply(f)
        except EOFError:
            r = b"<closed>"
        replies.append((step, None if cmd.startswith("HELLO") else r))
    if "QUIT" in scenario[-1]:
        s, f = conn("A")
        replies.append(("(after QUIT)", f.read() or b"<closed>"))
    for s, f in conns.values():
        s.close()
    return replies

failed = 0
compared = 0
for sc in SCENARIOS:
    want, got = run(int(sys.argv[1]), sc), run(int(sys.argv[2]), sc)
    compared += sum(len(w or b"") for _, w in want)
    for (step, w), (_, g) in zip(want, got):
        if w != g:
            failed += 1
            print(f"DIFF in {sc}\n  at {step!r}: redis {w!r}\n           meridian {g!r}", file=sys.stderr)
            break
print(f"redis-txn-diff: {len(SCENARIOS) - failed} scenarios identical ({compared} bytes of "
      f"Redis replies), {failed} differ")
sys.exit(1 if failed else 0)
PY
