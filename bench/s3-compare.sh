#!/usr/bin/env bash
# Meridian's S3 endpoint vs a plain file server (nginx from Debian, WebDAV PUT), side by side:
# the same curl uploads and downloads one object, in alternation, then random 64 KiB range reads.
#
#   bash bench/s3-compare.sh [ROUNDS] [SIZE_MIB] [RANGE_READS]
#
# Starts a release-built Meridian node (durable engine, chunks as files under a fresh directory,
# fsync everysec, so neither server forces the disk) with an S3 key, and nginx serving a fresh
# directory with `dav_methods PUT`. Each round uploads the same SIZE_MIB file with `curl -T`
# (to Meridian signed with `--aws-sigv4`) and downloads it to /dev/null, nginx and Meridian in
# an order that alternates per round; prints each figure, medians and the Meridian/nginx
# ratios, and checks the downloaded bytes' MD5 against the file once per server
# (MD5_ETAG=false runs the node with `[blob] md5_etag = false`). Then
# RANGE_READS reads of 64 KiB at seeded random offsets over one keep-alive connection per
# server (Python's http.client; Meridian's requests presigned once with SigV4), p50/p99 each.
# Installs nginx-core and curl from Debian when missing; results go to bench/out.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
size_mib=${2:-1024}
range_reads=${3:-2000}

need=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx-core)
command -v curl >/dev/null 2>&1 || need+=(curl)
if ((${#need[@]})); then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing ${need[*]} from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
cargo build -q --release -p meridian
bin="${CARGO_TARGET_DIR:-target}/release/meridian"

out=bench/out; mkdir -p "$out"
work=$(mktemp -d "$PWD/$out/s3cmp.XXXXXX")
csv="$out/s3-compare-$(date +%Y%m%d-%H%M%S).csv"
port=$((20000 + RANDOM % 9000)); nport=$((port + 1))
key=benchkey secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')

mkdir -p "$work/nginx/www" "$work/nginx/tmp" "$work/meridian"

cat >"$work/nginx/nginx.conf" <<EOF
$( [[ $(id -u) -eq 0 ]] && echo "user root;" )
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_max_body_size 0;
  client_body_temp_path $work/nginx/tmp;
  server {
    listen 127.0.0.1:$nport;
    root $work/nginx/www;
    location / { dav_methods PUT; create_full_put_path on; }
  }
}
EOF
"$nginx_bin" -c "$work/nginx/nginx.conf" -p "$work/nginx" -g 'daemon off;' &
npid=$!
# MD5_ETAG=false: ETags are BLAKE3s, so uploads skip MD5 (`[blob] md5_etag`).
printf '[blob]\nmd5_etag = %s\n' "${MD5_ETAG:-true}" >"$work/meridian.toml"
"$bin" node --config "$work/meridian.toml" --resp "127.0.0.1:$((port + 2))" --http "127.0.0.1:$((port + 3))" \
  --s3 "127.0.0.1:$port" --s3-key "$key:$secret" \
  --engine fjall --data-dir "$work/meridian" --fsync everysec >"$out/s3-meridian.log" 2>&1 &
mpid=$!
trap 'kill $mpid $npid 2>/dev/null || true; wait 2>/dev/null || true; [[ -n "${KEEP:-}" ]] || rm -rf "$work"' EXIT
for p in "$port" "$nport"; do
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
done

# curl signs with SigV4 but sends no x-amz-content-sha256, which S3 requires: the body is sent
# unsigned, as most S3 clients send large bodies.
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
curl -sf "${sig[@]}" -X PUT "http://127.0.0.1:$port/bench" >/dev/null
file="$work/object.bin"
head -c "$((size_mib << 20))" /dev/urandom >"$file"
want=$(md5sum "$file" | cut -d' ' -f1)

echo "server,round,op,seconds,mib_per_s" >"$csv"
timed() { # timed SERVER ROUND OP curl-args...: appends one row, prints the seconds
  local s=$1 r=$2 op=$3; shift 3
  local t
  t=$(curl -sf -o /dev/null -w '%{time_total}' "$@")
  echo "$s,$r,$op,$t,$(awk -v s="$size_mib" -v t="$t" 'BEGIN { printf "%.1f", s / t }')" >>"$csv"
}
for round in $(seq 1 "$rounds"); do
  if (( round % 2 )); then order="meridian nginx"; else order="nginx meridian"; fi
  for s in $order; do
    echo "round $round: $s" >&2
    if [[ $s == nginx ]]; then
      timed nginx "$round" upload -T "$file" "http://127.0.0.1:$nport/object.bin"
      timed nginx "$round" download "http://127.0.0.1:$nport/object.bin"
    else
      timed meridian "$round" upload "${sig[@]}" -T "$file" "http://127.0.0.1:$port/bench/object.bin"
      timed meridian "$round" download "${sig[@]}" "http://127.0.0.1:$port/bench/object.bin"
    fi
  done
done
got_n=$(curl -sf "http://127.0.0.1:$nport/object.bin" | md5sum | cut -d' ' -f1)
got_m=$(curl -sf "${sig[@]}" "http://127.0.0.1:$port/bench/object.bin" | md5sum | cut -d' ' -f1)
[[ $got_n == "$want" && $got_m == "$want" ]] || { echo "a download differs from the file" >&2; exit 1; }

python3 - "$csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for s in ("meridian", "nginx"):
    for op in ("upload", "download"):
        v = [float(r["mib_per_s"]) for r in rows if r["server"] == s and r["op"] == op]
        med[s, op] = statistics.median(v)
        print(f"{s:9} {op:8} MiB/s per round: {', '.join(f'{x:.0f}' for x in v)}; median {med[s, op]:.0f}")
for op in ("upload", "download"):
    print(f"ratio meridian/nginx {op}: {med['meridian', op] / med['nginx', op]:.2f}")
EOF

# Random 64 KiB range reads, one keep-alive connection per server.
python3 - "$port" "$nport" "$key" "$secret" "$size_mib" "$range_reads" <<'EOF'
import datetime, hashlib, hmac, http.client, random, statistics, sys, time
port, nport, key, secret, size_mib, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
size = size_mib << 20

def presign(path):
    now = datetime.datetime.now(datetime.timezone.utc)
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/us-east-1/s3/aws4_request"
    q = (f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={key}%2F{scope.replace('/', '%2F')}"
         f"&X-Amz-Date={amz}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host")
    creq = f"GET\n{path}\n{q}\nhost:127.0.0.1:{port}\n\nhost\nUNSIGNED-PAYLOAD"
    sts = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
    k = ("AWS4" + secret).encode()
    for part in (day, "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return f"{path}?{q}&X-Amz-Signature={hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()}"

def run(p, path):
    rng = random.Random(7)
    conn = http.client.HTTPConnection("127.0.0.1", int(p))
    lat = []
    for _ in range(n):
        a = rng.randrange(0, size - 65536)
        t = time.perf_counter()
        conn.request("GET", path, headers={"Range": f"bytes={a}-{a + 65535}"})
        r = conn.getresponse()
        body = r.read()
        lat.append((time.perf_counter() - t) * 1000)
        assert r.status == 206 and len(body) == 65536, (r.status, len(body))
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99)]

m = run(port, presign("/bench/object.bin"))
g = run(nport, "/object.bin")
print(f"range 64 KiB x {n}: meridian p50 {m[0]:.2f} ms p99 {m[1]:.2f} ms; nginx p50 {g[0]:.2f} ms p99 {g[1]:.2f} ms")
EOF
echo "rows: $csv" >&2
