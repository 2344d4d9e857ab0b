#!/bin/sh
# Reproduces the GridFS study's shapes E1–E7 and the BENCHMARKS figures on Meridian (spec
# large-objects.md, "Numbers to reproduce"); see README.md in this directory.
#
#   experiments/large-objects/run.sh            # every experiment, default sizes (~10 min)
#   experiments/large-objects/run.sh --quick    # a smoke run (~3 min)
#   experiments/large-objects/run.sh --full     # longer runs, the study's full sizes
#   STUDY=e2,e5 experiments/large-objects/run.sh --quick
#
# Writes experiments/large-objects/results (OUT=... to change): summary.md, CSV, JSON, plots.
set -eu
cd "$(dirname "$0")/../.."
exec cargo run --release -q -p meridian -- bench blob \
    --study "${STUDY:-all}" \
    --out "${OUT:-experiments/large-objects/results}" \
    "$@"
