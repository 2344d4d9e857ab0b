# Sourced by the bench scripts that compare one release node with redis-server on loopback.
# `start_pair OUT` starts both on random ports (Redis with persistence off), logging into
# OUT; sets mport, rport, mpid and rpid; stops both on exit (a caller that needs more on exit
# sets its own trap after this); and waits until both answer PING, or exits.
start_pair() {
  local out=$1 p
  mport=$((20000 + RANDOM % 10000)); rport=$((mport + 1))
  "${CARGO_TARGET_DIR:-target}/release/meridian" node --resp "127.0.0.1:$mport" \
    --http "127.0.0.1:$((mport + 2))" >"$out/meridian.log" 2>&1 &
  mpid=$!
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    >"$out/redis.log" 2>&1 &
  rpid=$!
  trap 'kill $mpid $rpid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
  for p in "$mport" "$rport"; do
    for _ in $(seq 1 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$p" PING >/dev/null 2>&1 \
      || { echo "server on port $p did not start; see $out/*.log" >&2; exit 1; }
  done
}

# `bench_row CSV SERVER ROUND PIPELINE TEST CLIENTS PORT ARGS...`: one redis-benchmark run (of
# the caller's `requests` requests) of
# ARGS (a command, or options then a command) from CLIENTS clients at PIPELINE against PORT,
# appended to CSV as `server,round,pipeline,test,rps,p50_ms,p99_ms` (write the header with
# `pair_header CSV`). `bench/pair_table.py CSV` prints the medians side by side.
pair_header() { echo "server,round,pipeline,test,rps,p50_ms,p99_ms" >"$1"; }
bench_row() {
  local csv=$1 s=$2 round=$3 p=$4 test=$5 clients=$6 port=$7; shift 7
  redis-benchmark -p "$port" -n "$requests" -c "$clients" -P "$p" --csv "$@" 2>/dev/null \
    | tail -n +2 | tr -d '"' \
    | awk -F, -v s="$s" -v r="$round" -v p="$p" -v t="$test" \
      '{print s","r","p","t","$2","$5","$7}' >>"$csv"
}
