#!/usr/bin/env bash
# Redis's own test suite (redis 7.0.15, tests/unit/...) run against a Meridian node, beside
# Debian's redis-server 7.0.15 running the same files with the same flags in the same run:
#
#   bash scripts/redis-suite.sh [--min PERCENT] [FILE ...]     (default: the FILES below)
#
# Each file runs in external-server mode (`--singledb --ignore-encoding --ignore-digest`, the
# tests tagged `needs:*` or `external:skip` left out, as the issue tracker measures). Prints, per
# file, the tests Redis passes and how many of those Meridian passes; a file that stops on an
# exception counts every test it did not reach as failed. With `--min P`, exits non-zero when
# Meridian passes fewer than P % of Redis's count over all the files.
#
# The suite comes from Debian's source archive of the redis package (the upstream 7.0.15
# tarball, checked against its SHA-256), unpacked under target/redis-suite; tclsh from Debian's
# tcl package. Logs of every run: target/redis-suite/logs.
set -euo pipefail
cd "$(dirname "$0")/.."

FILES_DEFAULT=(unit/type/string unit/type/incr unit/type/hash unit/type/list unit/type/list-2
  unit/type/list-3 unit/type/set unit/type/zset unit/bitops unit/bitfield unit/hyperloglog
  unit/geo unit/sort unit/dump unit/expire unit/keyspace unit/multi unit/pubsub unit/scripting
  unit/functions unit/type/stream unit/type/stream-cgroups)
min=""
files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --min) min="$2"; shift 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ ${#files[@]} -eq 0 ]] && files=("${FILES_DEFAULT[@]}")

VERSION=7.0.15
SHA256=4b1dc4ee6d622a09fff9c6777191209750fb5e5a725ef78ea012d6eef4c22982
URL="http://deb.debian.org/debian/pool/main/r/redis/redis_${VERSION}.orig.tar.gz"
work="$PWD/target/redis-suite"
src="$work/redis-$VERSION"
mkdir -p "$work/logs"

bash scripts/ensure-redis-tools.sh --server
if ! command -v tclsh >/dev/null; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get install -y -qq tcl >/dev/null
fi
if [[ ! -x "$src/runtest" ]]; then
  tarball="$work/redis-$VERSION.tar.gz"
  curl -fsS --retry 3 -o "$tarball" "$URL"
  echo "$SHA256  $tarball" | sha256sum -c --quiet -
  tar xzf "$tarball" -C "$work"
fi

# MERIDIAN_BIN: an already-built binary (a debug build while developing).
bin="${MERIDIAN_BIN:-}"
if [[ -z $bin ]]; then
  cargo build -q --release -p meridian
  bin="${CARGO_TARGET_DIR:-target}/release/meridian"
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_up() { # wait_up PORT
  for _ in $(seq 1 150); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-suite: nothing answers on port $1" >&2
  return 1
}

# A fresh server per file, so one file's leftovers (or a crash) cannot fail the next.
start_server() { # start_server redis|meridian PORT LOG
  if [[ $1 == redis ]]; then
    redis-server --port "$2" --save '' --appendonly no --enable-debug-command yes >"$3" 2>&1 &
  else
    "$bin" node --resp "127.0.0.1:$2" --http "127.0.0.1:$(($2 + 1))" >"$3" 2>&1 &
  fi
  pids+=($!)
  wait_up "$2"
}

# run_file SERVER FILE: prints "passed failed" for one file.
run_file() {
  local server=$1 file=$2 port=$((21000 + RANDOM % 9000))
  local name=${file//\//_}
  local log="$work/logs/$server-$name.log" srvlog="$work/logs/$server-$name.server.log"
  start_server "$server" "$port" "$srvlog"
  local pid=${pids[-1]}
  (cd "$src" && timeout 900 tclsh tests/test_helper.tcl --host 127.0.0.1 --port "$port" \
    --single "$file" --singledb --ignore-encoding --ignore-digest --clients 1 \
    --tags "-needs:debug -needs:repl -needs:config-maxmemory -needs:config-resetstat -needs:latency -needs:local-process -needs:pfdebug -needs:reset -needs:save -external:skip" \
    --timeout 120) >"$log" 2>&1 || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local ok err plain
  plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
  ok=$(grep -c '^\[ok\]' <<<"$plain" || true)
  err=$(grep -cE '^\[(err|exception)\]' <<<"$plain" || true)
  echo "$ok $err"
}

printf '%-22s %8s %10s %8s\n' file redis meridian percent
total_redis=0 total_meridian=0
for f in "${files[@]}"; do
  read -r r_ok _ < <(run_file redis "$f")
  read -r m_ok _ < <(run_file meridian "$f")
  pct=$(( r_ok > 0 ? 100 * m_ok / r_ok : 0 ))
  printf '%-22s %8d %10d %7d%%\n' "$f" "$r_ok" "$m_ok" "$pct"
  total_redis=$((total_redis + r_ok))
  total_meridian=$((total_meridian + m_ok))
done
pct=$(( total_redis > 0 ? 100 * total_meridian / total_redis : 0 ))
printf '%-22s %8d %10d %7d%%\n' total "$total_redis" "$total_meridian" "$pct"
echo "logs: $work/logs"
if [[ -n $min && $pct -lt $min ]]; then
  echo "redis-suite: Meridian passes $pct % of Redis's tests, below --min $min" >&2
  exit 1
fi
