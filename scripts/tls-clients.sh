#!/usr/bin/env bash
# TLS with real clients (issue 42), loopback only: a node serving RESP over TLS only
# (`--port 0 --tls-port`), HTTPS on its HTTP API and S3 endpoint, with certificates from
# `meridian tls gen`. Drives Debian's redis-cli and redis-benchmark (`--tls`), redis-py
# (`ssl=True`) and boto3 over HTTPS; checks that a client without a certificate and a
# plaintext client are refused while the node serves on, and that CONFIG SET tls-cert-file
# reloads the certificate for new connections. Then cluster clients over TLS against
# `meridian up --tls` (embedded, and `--processes`): redis-py's `RedisCluster(ssl=True)` sets
# and reads back keys of every slot range, and `redis-cli --tls -c` follows a `-MOVED`, both
# told the nodes' TLS ports by CLUSTER SLOTS and the redirects. Prints `N passed, M failed`;
# non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
bash scripts/ensure-redis-tools.sh
venv="$target/tls-clients-venv"
bash scripts/ensure-venv.sh "$venv" 'import redis, boto3' 'redis>=5' boto3

cargo build -q -p meridian
bin="$target/debug/meridian"
tmp=$(mktemp -d)
"$bin" tls gen --dir "$tmp/a" >/dev/null
"$bin" tls gen --dir "$tmp/b" >/dev/null
port=$((20000 + RANDOM % 10000))   # below the ephemeral range (32768+)
http=$((port + 1)) s3=$((port + 2))
"$bin" node --resp "127.0.0.1:$port" --port 0 --tls-port "$port" --http "127.0.0.1:$http" \
  --tls-cert-file "$tmp/a/node.crt" --tls-key-file "$tmp/a/node.key" \
  --tls-ca-cert-file "$tmp/a/ca.crt" --http-tls \
  --s3 "127.0.0.1:$s3" --s3-tls --s3-key tlskey:tlssecret12345 >"$tmp/node.log" 2>&1 &
pid=$!
up_pid=""
cleanup() {
  for p in $pid $up_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

tls=(--tls --cacert "$tmp/a/ca.crt" --cert "$tmp/a/client.crt" --key "$tmp/a/client.key")
cli() { redis-cli "${tls[@]}" -p "$port" "$@"; }
for _ in $(seq 1 100); do cli PING >/dev/null 2>&1 && break; sleep 0.1; done
if ! cli PING >/dev/null 2>&1; then
  echo "tls-clients: the node did not start; its log:" >&2; cat "$tmp/node.log" >&2; exit 1
fi
passed=0 failed=0
expect() { # expect NAME WANT GOT
  if [[ "$2" == "$3" ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL $1: want [$2] got [$3]" >&2; fi
}

expect cli-set OK "$(cli SET tls:k hello)"
expect cli-get hello "$(cli GET tls:k)"
expect config-port 0 "$(cli CONFIG GET port | tail -1)"
expect config-tls-port "$port" "$(cli CONFIG GET tls-port | tail -1)"
# No client certificate (tls-auth-clients yes, Redis's default), and plaintext: refused.
nocert=$(redis-cli --tls --cacert "$tmp/a/ca.crt" -p "$port" PING 2>&1 || true)
[[ "$nocert" != PONG ]] && expect no-client-cert refused refused || expect no-client-cert refused "$nocert"
plain=$(timeout 10 redis-cli -p "$port" PING 2>&1 || true)
[[ "$plain" != PONG ]] && expect plaintext refused refused || expect plaintext refused "$plain"
expect still-up PONG "$(cli PING)"
# A certificate issued later from the same CA (`tls gen --ca`) is trusted like the first.
"$bin" tls gen --dir "$tmp/c" --ca "$tmp/a" >/dev/null
expect reused-ca-file same "$(cmp -s "$tmp/a/ca.crt" "$tmp/c/ca.crt" && echo same)"
expect reused-ca-no-key absent "$([[ -e "$tmp/c/ca.key" ]] && echo present || echo absent)"
expect reused-ca-client PONG "$(redis-cli --tls --cacert "$tmp/c/ca.crt" --cert "$tmp/c/client.crt" \
  --key "$tmp/c/client.key" -p "$port" PING 2>&1)"
out=$(redis-benchmark "${tls[@]}" -p "$port" -t set,get -n 5000 -c 10 -P 16 -q 2>&1 | tr '\r' '\n' \
  | grep -a -c -E '^(SET|GET): .*requests per second' || true)
expect benchmark 2 "$out"

# redis-py with ssl=True; HTTPS on the HTTP API; boto3 over HTTPS.
py=$("$venv/bin/python" - "$tmp/a" "$port" "$http" "$s3" <<'PY'
import sys, ssl, urllib.request, redis, boto3
from botocore.config import Config
d, port, http, s3 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=f"{d}/ca.crt",
                ssl_certfile=f"{d}/client.crt", ssl_keyfile=f"{d}/client.key")
ok = []
ok.append(r.set("py:k", b"v" * 70000) and r.get("py:k") == b"v" * 70000)
p = r.pipeline(transaction=False)
for i in range(100):
    p.incr("py:n")
ok.append(p.execute()[-1] == 100)
ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
with urllib.request.urlopen(f"https://localhost:{http}/health", context=ctx) as resp:
    ok.append(resp.status == 200)
c = boto3.client("s3", endpoint_url=f"https://localhost:{s3}", aws_access_key_id="tlskey",
                 aws_secret_access_key="tlssecret12345", region_name="us-east-1",
                 verify=f"{d}/ca.crt", config=Config(s3={"addressing_style": "path"}))
c.create_bucket(Bucket="tlsbucket")
c.put_object(Bucket="tlsbucket", Key="o", Body=b"over https")
ok.append(c.get_object(Bucket="tlsbucket", Key="o")["Body"].read() == b"over https")
print(" ".join("ok" if x else "FAIL" for x in ok))
PY
)
expect python-clients "ok ok ok ok" "$py"

# CONFIG SET reloads the certificate: new connections present the other CA's certificate
# (and verify clients against it); this connection was made before.
expect reload OK "$(cli CONFIG SET tls-cert-file "$tmp/b/node.crt" tls-key-file "$tmp/b/node.key" \
  tls-ca-cert-file "$tmp/b/ca.crt")"
expect reload-new-ca PONG "$(redis-cli --tls --cacert "$tmp/b/ca.crt" --cert "$tmp/b/client.crt" \
  --key "$tmp/b/client.key" -p "$port" PING)"
old=$(cli PING 2>&1 || true)
[[ "$old" != PONG ]] && expect reload-old-ca refused refused || expect reload-old-ca refused "$old"

# Cluster clients over TLS: `meridian up --tls` (2 DCs x 2 nodes, -MOVED for misrouted keys);
# RESP base..base+3, TLS base+4000.., below the single node's ports and the ephemeral range.
cluster_over_tls() { # cluster_over_tls NAME BASE [up flags...]
  local name=$1 base=$2; shift 2
  local dir="$tmp/$name" log="$tmp/$name.log"
  "$bin" up --tls --tls-dir "$dir" --dcs 2 --nodes-per-dc 2 --base-port "$base" \
    --wan-latency 1ms "$@" >"$log" 2>&1 &
  up_pid=$!
  for _ in $(seq 1 600); do
    grep -q '^ready:' "$log" && break
    kill -0 "$up_pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q '^ready:' "$log"; then
    expect "$name-started" ready "not ready; log: $(tail -5 "$log")"; return
  fi
  # The first node's TLS address, from the line saying how to connect (--processes puts
  # each node on its own loopback address).
  local connect host tls0
  connect=$(grep -m1 'connect with: redis-cli' "$log")
  host=$(sed -nE 's/.* -h ([^ ]+) .*/\1/p' <<<"$connect")
  host=${host:-127.0.0.1}
  tls0=$(sed -nE 's/.* -p ([0-9]+).*/\1/p' <<<"$connect")
  local ctls=(--tls --cacert "$dir/ca.crt" --cert "$dir/client.crt" --key "$dir/client.key"
    -h "$host")
  # A key another node masters: the redirect names that node's TLS port; -c follows it.
  local key="" moved=""
  for i in $(seq 1 50); do
    moved=$(redis-cli "${ctls[@]}" -p "$tls0" GET "tlscli:$i" 2>&1 || true)
    if [[ "$moved" == MOVED* ]]; then key="tlscli:$i"; break; fi
  done
  local port=${moved##*:}
  [[ -n "$key" && $port -ge $tls0 && $port -le $((tls0 + 3)) ]] \
    && expect "$name-moved-tls-port" yes yes || expect "$name-moved-tls-port" "a TLS port" "$moved"
  expect "$name-cli-c-set" OK "$(redis-cli "${ctls[@]}" -c -p "$tls0" SET "$key" over-tls)"
  expect "$name-cli-c-get" over-tls "$(redis-cli "${ctls[@]}" -c -p "$tls0" GET "$key")"
  local py
  py=$("$venv/bin/python" - "$dir" "$host" "$tls0" <<'PY'
import sys
from redis.cluster import RedisCluster
d, host, tls0 = sys.argv[1], sys.argv[2], int(sys.argv[3])
rc = RedisCluster(host=host, port=tls0, ssl=True, ssl_ca_certs=f"{d}/ca.crt",
                  ssl_certfile=f"{d}/client.crt", ssl_keyfile=f"{d}/client.key")
# One key per slot range CLUSTER SLOTS names, so every master is written to and read from.
ranges = rc.cluster_slots(target_nodes=RedisCluster.RANDOM)
keys, i = {}, 0
while len(keys) < len(ranges):
    k = f"tlspy:{i}"
    keys.setdefault(next(r for r in ranges if r[0] <= rc.keyslot(k) <= r[1]), k)
    i += 1
for k in keys.values():
    rc.set(k, k)
ok = [all(rc.get(k) == k.encode() for k in keys.values())]
ports = {n.port for n in rc.get_nodes()}
ok.append(len(ports) >= 2 and all(tls0 <= p <= tls0 + 3 for p in ports))
print(" ".join("ok" if x else f"FAIL(ports {sorted(ports)})" for x in ok))
PY
  ) || true
  expect "$name-redis-py-cluster" "ok ok" "$py"
  kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; up_pid=""
}
base=$((10000 + RANDOM % 5000))
cluster_over_tls up-embedded "$base"
cluster_over_tls up-processes "$((base + 10))" --processes --config-dir "$tmp/up-configs"

echo "tls-clients: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
