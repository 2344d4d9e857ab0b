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
    # Hashes. Meridian lists a hash's fields sorted by field, Redis a small hash's in
    # insertion order: every scenario inserts fields in sorted order so both agree (HGETALL,
    # HKEYS, HVALS, HSCAN, HRANDFIELD with a count not below the size). Random replies
    # (HRANDFIELD below the size), HSCAN NOVALUES (Redis 7.4; this is redis-server 7.0) and
    # HINCRBYFLOAT's long-double digits of extreme values are left out.
    ["HSET h a 1 b 2", "HSET h b 3 c 4", "HMSET h d 5", "HSETNX h a x", "HSETNX h e 6",
     "HGET h a", "HGET h zz", "HGET nokey a", "HMGET h a zz e", "HMGET nokey a b", "HLEN h",
     "HLEN nokey", "HGETALL h", "HKEYS h", "HVALS h", "HGETALL nokey", "HEXISTS h a",
     "HEXISTS h zz", "HSTRLEN h a", "HSTRLEN h zz", "TYPE h", "HDEL h a a zz", "HDEL nokey a",
     "HDEL h b c d e", "EXISTS h", "TYPE h"],
    ["HSET h", "HSET h a", "HSET h a 1 b", "HMSET h a 1 b", "HGET h", "HDEL h", "HSETNX h a",
     "HINCRBY h a", "HSCAN h", "HRANDFIELD", "HGETALL", "HGETALL h x"],
    ["HSET h a 1 s abc", "HINCRBY h a 9", "HINCRBY h t -5", "HINCRBY h a x",
     "HINCRBY h a 1.5", "HINCRBY h a 99999999999999999999", "HINCRBY h s 1",
     "HINCRBY h a 9223372036854775797", "HINCRBY h a 1", "HINCRBY h a -9223372036854775808",
     "HINCRBYFLOAT h u 10.5", "HINCRBYFLOAT h u 0.1", "HINCRBYFLOAT h s 1",
     "HINCRBYFLOAT h u x", "HINCRBYFLOAT h u inf", "HINCRBYFLOAT h u -inf",
     "HINCRBYFLOAT h u nan", "HINCRBYFLOAT h u -10.6", "HSET h z 1e308",
     "HINCRBYFLOAT h z -1e308", "HGETALL h"],
    ["HSET h a 1 ab 2 b 3", "HSCAN h 0", "HSCAN h 7 COUNT 1", "HSCAN h 0 MATCH a*",
     "HSCAN h 0 match a* COUNT 100", "HSCAN h 18446744073709551615", "HSCAN h x",
     "HSCAN h 18446744073709551616", "HSCAN h 0 COUNT 0", "HSCAN h 0 COUNT -1",
     "HSCAN h 0 COUNT x", "HSCAN h 0 MATCH", "HSCAN h 0 COUNT", "HSCAN h 0 TYPE hash",
     "HSCAN h 0 BADOPT", "HSCAN nokey 0 BADOPT", "HSCAN nokey x"],
    ["HSET h a 1 b 2", "HRANDFIELD nokey", "HRANDFIELD nokey 5", "HRANDFIELD h 0",
     "HRANDFIELD h 2", "HRANDFIELD h 9223372036854775807", "HRANDFIELD h 5 WITHVALUES",
     "HRANDFIELD h x", "HRANDFIELD h -9223372036854775808",
     "HRANDFIELD h 4611686018427387904 WITHVALUES",
     "HRANDFIELD h -4611686018427387904 WITHVALUES", "HRANDFIELD h 5 WITHVALUE",
     "HRANDFIELD h 5 WITHVALUES x", "HELLO 3", "HRANDFIELD h 5 WITHVALUES", "HGETALL h",
     "HGETALL nokey", "HRANDFIELD nokey 1"],
    ["SET s v", "HSET h f 1", "HSET s f 1", "HSETNX s f 1", "HMSET s f 1", "HGET s f",
     "HMGET s f", "HGETALL s", "HDEL s f", "HEXISTS s f", "HLEN s", "HSTRLEN s f",
     "HINCRBY s f 1", "HINCRBY s f x", "HINCRBYFLOAT s f 1", "HINCRBYFLOAT s f x",
     "HKEYS s", "HVALS s", "HSCAN s 0", "HSCAN s 0 BADOPT", "HSCAN s x", "HRANDFIELD s",
     "HRANDFIELD s 2", "GET h", "SET h v GET", "SET h v NX GET", "GETSET h v", "GETDEL h",
     "GETEX h", "GETEX h PERSIST", "GETEX h EX x", "GETEX nokey EX x", "INCR h", "DECR h",
     "INCRBY h 1", "INCRBY h x", "DECRBY h -9223372036854775808", "INCRBYFLOAT h 1",
     "INCRBYFLOAT h x", "APPEND h x", "STRLEN h", "GETRANGE h 0 -1", "GETRANGE h x 1",
     "SUBSTR h 0 1", "SETRANGE h 0 x", "SETRANGE h -1 x", "MGET h s nokey", "SETNX h x",
     "MSETNX h x", "GET s", "HGETALL h", "TYPE h", "TYPE s", "EXISTS h s nokey"],
    ["HSET h f 1", "EXPIRE h 100", "HSET h g 2", "TTL h", "HINCRBY h f 1", "TTL h",
     "HDEL h f", "TTL h", "PERSIST h", "TTL h", "TYPE h", "PEXPIRE h 100000", "TTL h",
     "EXPIRE h 50 GT", "EXPIRETIME nokey", "SCAN 0 TYPE hash", "SCAN 0 TYPE string",
     "SET s v", "SCAN 0 TYPE string", "SET h v XX KEEPTTL", "TYPE h", "TTL h", "HSET h2 a 1",
     "SET h2 v", "TYPE h2", "HSET x f 1", "PEXPIRE x 20", "SLEEP 0.1", "HGET x f",
     "EXISTS x", "DEL h h2 s", "DBSIZE"],
    ["SET s v", "MULTI", "HSET h a 1 b 2", "HINCRBY h a 5", "HSET s f 1", "HSET h odd 1 x",
     "HGETALL h", "HDEL h a b", "EXISTS h", "HSET h z 1", "TYPE h", "SCAN 0 TYPE hash",
     "GET h", "EXEC", "HGETALL h"],
    ["MULTI", "HSET h a 1", "HSET h a", "EXEC", "EXISTS h"],
    ["HSET h a 1", "WATCH h", "B HSET h a 2", "MULTI", "HSET h b 1", "EXEC", "HGETALL h"],
    ["HSET h a 1", "WATCH h", "B HGET h a", "B HDEL h nope", "B GET h", "MULTI",
     "HSET h b 1", "EXEC", "HGETALL h"],
    ["HSET h a 1", "WATCH h", "B HDEL h a", "MULTI", "HLEN h", "EXEC", "EXISTS h"],
    ["WATCH h", "B HSET h a 1", "MULTI", "PING", "EXEC"],
    ["HSET h a 1", "WATCH h", "B EXPIRE h 100", "MULTI", "PING", "EXEC"],
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
