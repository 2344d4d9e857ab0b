#!/usr/bin/env bash
# TLS with real clients (issue 42), loopback only: a node serving RESP over TLS only
# (`--port 0 --tls-port`), HTTPS on its HTTP API and S3 endpoint, with certificates from
# `meridian tls gen`. Drives Debian's redis-cli and redis-benchmark (`--tls`), redis-py
# (`ssl=True`) and boto3 over HTTPS; checks that a client without a certificate and a
# plaintext client are refused while the node serves on, and that CONFIG SET tls-cert-file
# reloads the certificate for new connections. Prints `N passed, M failed`; non-zero on failure.
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
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
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

echo "tls-clients: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
