"""Prints a pair bench's CSV (bench/start-pair.sh's `bench_row` rows) as the Markdown table
BENCHMARKS.md keeps: per test and pipeline, the medians over rounds of Meridian's and Redis's
rates, their ratio, and p50/p99 latencies.

    python3 bench/pair_table.py CSV [--unit calls] [--pair A+B ...] [--note TEXT]

`--pair A+B` adds a row for one A followed by one B: 1 / (1/rate(A) + 1/rate(B)).
"""
import argparse
import csv
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--unit", default="calls")
ap.add_argument("--pair", action="append", default=[])
ap.add_argument("--note", default="")
a = ap.parse_args()
rows = list(csv.DictReader(open(a.csv)))
tests = list(dict.fromkeys(r["test"] for r in rows))
pipelines = list(dict.fromkeys(r["pipeline"] for r in rows))


def med(server, pipeline, test, key):
    return statistics.median(
        float(r[key]) for r in rows
        if (r["server"], r["pipeline"], r["test"]) == (server, pipeline, test))


print(f"| test | pipeline | Meridian {a.unit}/s | Redis {a.unit}/s | ratio "
      "| Meridian p50/p99 ms | Redis p50/p99 ms |")
print("|---|---|---|---|---|---|---|")
for p in pipelines:
    for t in tests:
        m, r = med("meridian", p, t, "rps"), med("redis", p, t, "rps")
        lat = {s: f"{med(s, p, t, 'p50_ms'):.3f} / {med(s, p, t, 'p99_ms'):.3f}"
               for s in ("meridian", "redis")}
        print(f"| {t} | {p} | {m:,.0f} | {r:,.0f} | **{m / r:.2f}** | {lat['meridian']} "
              f"| {lat['redis']} |")
    for pair in a.pair:
        first, second = pair.split("+")
        both = {s: 1 / (1 / med(s, p, first, "rps") + 1 / med(s, p, second, "rps"))
                for s in ("meridian", "redis")}
        m, r = both["meridian"], both["redis"]
        print(f"| {pair} | {p} | {m:,.0f} | {r:,.0f} | **{m / r:.2f}** | - | - |")
print(f"\nmedians of {len(set(r['round'] for r in rows))} rounds{a.note}")
