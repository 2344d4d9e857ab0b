#!/usr/bin/env bash
# The in-node repartitioning study (spec `repartitioning.md` §5, "Numbers to reproduce"),
# at a reduced scale, in one command:
#
#   experiments/repartitioning/run.sh            # build, generate, the whole grid, plots
#   ONLY=e experiments/repartitioning/run.sh     # one workload
#   RUNS="rr ns-1000" experiments/repartitioning/run.sh   # some runs only (slugs below)
#   SKIP="base-10000" experiments/repartitioning/run.sh    # leave runs out (the committed results lack base-10000)
#   PLOT_ONLY=1 experiments/repartitioning/run.sh          # redo summary.md and plots
#   ONLY=affinity experiments/repartitioning/run.sh        # the second experiment only
#
# The second experiment (spec §6, issue 17): the cross-node planner on a transactional workload
# with hidden affinity groups, on the simulated cluster in virtual time (`meridian bench
# affinity`): results/affinity/ with the planner, results/affinity-control/ without it. Its
# figures are virtual-time figures, so the run is reproduced exactly from SEED.
#
# Scale (environment): RECORDS (n_records, default 10^6 as the paper), D_OPS (default
# 5*10^6, the paper 5*10^7), E_OPS (default 5*10^5, the paper 5*10^6): both 1/10. The unwindowed Base
# intervals Δp ∈ {10^5, 10^6, 10^7} are scaled by the same factor as the op count (/10:
# 10^4, 10^5, 10^6) so that each run makes as many stop-the-world repartitions as in the paper; the
# windowed Base runs keep Δp = W (the window is what bounds the graph, and it is not scaled).
# Request files go to $WORK (default /tmp/meridian-repart, ≈ 60 MB); results to
# experiments/repartitioning/results/<d|e>/<run>/{result.json,bins.csv}.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=experiments/repartitioning
RESULTS=${RESULTS:-$HERE/results}
WORK=${WORK:-/tmp/meridian-repart}
RECORDS=${RECORDS:-1000000}
D_OPS=${D_OPS:-5000000}
E_OPS=${E_OPS:-500000}
SEED=${SEED:-1}
ONLY=${ONLY:-"d e affinity"}
RUNS=${RUNS:-}
SKIP=${SKIP:-}                   # run slugs to leave out, e.g. SKIP="base-10000"
TIMEOUT=${TIMEOUT:-900}          # seconds per run: a hung run is killed and reported
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

cargo build --release -p meridian
BIN=$CARGO_TARGET_DIR/release/meridian
mkdir -p "$WORK" "$RESULTS"

# The paper's Base intervals, scaled with the op count.
scaled() { # paper_ops ops interval
  python3 -c "import sys; p,o,i=map(int,sys.argv[1:]); print(max(1, round(i*o/p)))" "$@"
}

run_grid() { # workload ops paper_ops
  local w=$1 ops=$2 paper=$3
  local file=$WORK/ycsb_${w}_${RECORDS}_${ops}_s${SEED}.txt
  if [[ ! -s $file ]]; then
    "$BIN" bench kvpaxos-gen --workload "$w" --records "$RECORDS" --ops "$ops" --seed "$SEED" --out "$file"
  fi
  local b5 b6 b7
  b5=$(scaled "$paper" "$ops" 100000); b6=$(scaled "$paper" "$ops" 1000000); b7=$(scaled "$paper" "$ops" 10000000)
  # slug | mode | window | shards | label
  local grid=(
    "sw|single|0|1|SW"
    "rr|round_robin|0|8|RR"
    "ns-0|non_stop|0|8|NS W=0"
    "ns-1000|non_stop|1000|8|NS W=1000"
    "ns-10000|non_stop|10000|8|NS W=10000"
    "ns-100000|non_stop|100000|8|NS W=100000"
    "base-$b5|base:$b5|0|8|Base Δp=$b5"
    "base-$b6|base:$b6|0|8|Base Δp=$b6"
    "base-$b7|base:$b7|0|8|Base Δp=$b7"
    "base-1000-w1000|base:1000|1000|8|Base Δp=1000 W=1000"
    "base-10000-w10000|base:10000|10000|8|Base Δp=10000 W=10000"
    "base-100000-w100000|base:100000|100000|8|Base Δp=100000 W=100000"
  )
  for row in "${grid[@]}"; do
    IFS='|' read -r slug mode window shards label <<<"$row"
    if [[ -n $RUNS && " $RUNS " != *" $slug "* ]]; then continue; fi
    if [[ " $SKIP " == *" $slug "* ]]; then continue; fi
    local out=$RESULTS/$w/$slug
    echo "== $w $label ($mode, W=$window, P=$shards)"
    if ! timeout --signal=KILL "$TIMEOUT" "$BIN" bench replay --format kvpaxos "$file" \
        --mode "$mode" --window "$window" --shards "$shards" --records "$RECORDS" \
        --label "$label" --out "$out" --quiet; then
      echo "!! $w $label failed or timed out after ${TIMEOUT}s" | tee -a "$RESULTS/failures.txt"
    fi
  done
}

if [[ -z ${PLOT_ONLY:-} ]]; then
  for w in $ONLY; do
    case $w in
      d) run_grid d "$D_OPS" 50000000 ;;
      e) run_grid e "$E_OPS" 5000000 ;;
      affinity)
        echo "== affinity groups: the cross-node planner (virtual time)"
        "$BIN" bench affinity --seed "$SEED" --out "$RESULTS/affinity" >/dev/null
        "$BIN" bench affinity --seed "$SEED" --no-planner --out "$RESULTS/affinity-control" >/dev/null
        ;;
      *) echo "unknown workload $w" >&2; exit 2 ;;
    esac
  done
fi
"$BIN" bench repart-plot --results "$RESULTS" --out "$RESULTS" >/dev/null
echo "summary: $RESULTS/summary.md"
