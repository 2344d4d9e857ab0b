#!/usr/bin/env bash
# Compatibility check with real third-party clients: Debian's redis-cli and redis-benchmark
# against a running Meridian node. Exits non-zero on the first reply that differs from Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis-tools.sh

cargo build -q -p meridian
bin="${CARGO_TARGET_DIR:-target}/debug/meridian"
port=$((20000 + RANDOM % 10000))   # below the ephemeral range (32768+)
http=$((port + 1))
log=$(mktemp)
"$bin" node --resp "127.0.0.1:$port" --http "127.0.0.1:$http" >"$log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  sleep 0.1
done
if ! redis-cli -p "$port" PING >/dev/null 2>&1; then
  echo "redis-compat: the node did not start on port $port; its log:" >&2
  cat "$log" >&2
  exit 1
fi

cli() { redis-cli -p "$port" "$@"; }
passed=0 failed=0
expect() { # expect NAME WANT GOT
  if [[ "$2" == "$3" ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL $1: want [$2] got [$3]" >&2; fi
}

expect ping PONG "$(cli PING)"
expect set OK "$(cli SET greeting hello)"
expect get hello "$(cli GET greeting)"
expect incr 11 "$(cli INCRBY counter 11)"
expect append 10 "$(cli APPEND greeting world)"
expect strlen 10 "$(cli STRLEN greeting)"
# A missing key prints as an empty line when stdout is not a terminal, as with Redis.
expect mget "helloworld|11|" "$(cli MGET greeting counter missing | paste -sd '|')"
expect expire 1 "$(cli EXPIRE greeting 100)"
ttl=$(cli TTL greeting); [[ $ttl -ge 99 && $ttl -le 100 ]] && expect ttl ok ok || expect ttl 100 "$ttl"
expect persist 1 "$(cli PERSIST greeting)"
expect unknown "ERR unknown command 'FOO', with args beginning with: 'bar' " "$(cli FOO bar)"
expect wrongarity "ERR wrong number of arguments for 'get' command" "$(cli GET)"
expect notint "ERR value is not an integer or out of range" "$(cli INCR greeting)"

# Pipelining: 1000 SETs in raw protocol through --pipe, then SCAN finds them all.
for i in $(seq 1 1000); do printf '*3\r\n$3\r\nSET\r\n$%d\r\npipe:%d\r\n$1\r\nv\r\n' "$(( ${#i} + 5 ))" "$i"; done \
  | cli --pipe >/dev/null
expect pipe-scan 1000 "$(cli --scan --pattern 'pipe:*' | wc -l | tr -d ' ')"
expect dbsize 1002 "$(cli DBSIZE)"
expect keys-pattern 1 "$(cli KEYS 'pipe:100?' | wc -l | tr -d ' ')"

# Real expiry.
cli SET short v PX 200 >/dev/null
sleep 0.4
expect expired "" "$(cli GET short)"

# RESP3 after HELLO 3.
expect resp3 5 "$(redis-cli -3 -p "$port" INCRBY r3 5)"
expect resp3-null "" "$(redis-cli -3 -p "$port" GET missing)"
expect info-keyspace 1 "$(cli INFO keyspace | grep -c '^db0:keys=')"

# Transactions: commands piped into one redis-cli share its connection (expected lines are
# redis-server 7.0's; an error line is followed by an empty one).
txn() { printf '%s\n' "$@" | cli | paste -sd '|'; }
expect multi-exec "OK|QUEUED|QUEUED|OK|2" "$(txn MULTI 'SET tx 1' 'INCR tx' EXEC)"
expect multi-discard "OK|QUEUED|OK|2" "$(txn MULTI 'SET tx 5' DISCARD 'GET tx')"
expect multi-execabort \
  "OK|ERR unknown command 'NOPE', with args beginning with: ||EXECABORT Transaction discarded because of previous errors.|" \
  "$(txn MULTI NOPE EXEC)"
expect multi-without "ERR EXEC without MULTI||ERR DISCARD without MULTI|" "$(txn EXEC DISCARD)"
expect multi-nested "OK|ERR MULTI calls can not be nested||ERR WATCH inside MULTI is not allowed||OK" \
  "$(txn MULTI MULTI 'WATCH tx' DISCARD)"
expect watch-nil "OK|OK|OK|QUEUED||9" "$(txn 'WATCH tx' 'SET tx 9' MULTI 'INCR tx' EXEC 'GET tx')"
expect multi-no-rollback "OK|QUEUED|QUEUED|QUEUED|1|OK|ERR value is not an integer or out of range|" \
  "$(txn MULTI 'INCR txs' 'SET txs x' 'INCR txs' EXEC)"

# ACL users, as redis-cli and redis-benchmark log in with --user/--pass (Redis 6 AUTH).
expect acl-setuser OK "$(cli ACL SETUSER app on '>apppass' '~app:*' '+@read' '+@write' '+@connection')"
ucli() { redis-cli -p "$port" --user app --pass apppass --no-auth-warning "$@"; }
expect acl-whoami-perm "NOPERM this user has no permissions to run the 'acl|whoami' command" \
  "$(ucli ACL WHOAMI 2>&1)"
expect acl-allowed OK "$(ucli SET app:1 v)"
expect acl-whoami app "$(cli ACL SETUSER app +acl|whoami >/dev/null; ucli ACL WHOAMI)"
expect acl-key "NOPERM this user has no permissions to access one of the keys used as arguments" \
  "$(ucli SET other v 2>&1)"
expect acl-wrongpass "AUTH failed: WRONGPASS invalid username-password pair or user is disabled." \
  "$(redis-cli -p "$port" --user app --pass nope --no-auth-warning PING 2>&1 | head -1)"
# redis-benchmark's keys (key:__rand_int__) and its startup CONFIG GET, for a user of its own.
cli ACL SETUSER bench on '>benchpass' '~key:*' '+@read' '+@write' '+@connection' '+config|get' >/dev/null
out=$(redis-benchmark -p "$port" --user bench -a benchpass -t set,get -n 2000 -c 10 -q 2>&1 | tr '\r' '\n' |
  grep -a -E '^(SET|GET): .*requests per second' || true)
echo "$out" | grep -q '^GET: ' && expect acl-bench ok ok || expect acl-bench ok "$out"

# redis-benchmark runs its standard SET/GET load, pipelined and not, without errors
# (-q still draws progress with carriage returns: keep only the final lines).
bench() { redis-benchmark -p "$port" "$@" -q 2>&1 | tr '\r' '\n' | grep -a -E '^(SET|GET): .*requests per second'; }
out=$(bench -t set,get -n 20000 -c 20 -P 16 -d 500)
echo "$out" | grep -q '^SET: ' && echo "$out" | grep -q '^GET: ' && expect bench-p16 ok ok || expect bench-p16 ok "$out"
out=$(bench -t set,get -n 2000 -c 10)
echo "$out" | grep -q '^GET: ' && expect bench-p1 ok ok || expect bench-p1 ok "$out"

expect still-up PONG "$(cli PING)"
echo "redis-compat: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
