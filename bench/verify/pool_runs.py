#!/usr/bin/env python3
"""Pools several `prediction_accuracy --json` runs: for the layouts predicted best, how far
apart they measure and are predicted over all the runs together, with a 95 % confidence
interval over the runs.

    bench/verify/pool_runs.py [--top 3] run1.json run2.json ...

One run of prediction_accuracy cannot order layouts closer than the host's A/A gap
(bench/verify/host_noise). Pooling runs narrows the interval with the square root of their
count, if the runs' differences scatter around one value. Each run contributes, for a pair
of layouts (a, b), log(a / b) of its measured and of its predicted trimmed means; the
pooled ratio is exp(mean), and its interval uses Student's t over the runs. Layouts are
matched by their name; a pair is pooled over the runs that have both. The top layouts are
those with the lowest geometric-mean prediction relative to each run's fastest prediction.

bench/verify/runs/ keeps the layout rows of 13 ten-round runs on the 2-core build host
(2core-01 ... 2core-13, in the order they ran). Runs 01-08 predate the memory model's
accounting of tied embeddings and learned position tables, so their memory figures differ
from the current model's; the time model and the composition are the same in all of them,
and only time figures are pooled.
"""
import argparse
import json
import math
import sys

# Two-sided 97.5 % quantiles of Student's t by degrees of freedom (1-30); 1.96 beyond.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df):
    return T975[df - 1] if 1 <= df <= len(T975) else 1.96


def load(path):
    with open(path) as f:
        j = json.load(f)
    try:
        return {l["layout"]: (l["predicted_iteration_s"], l["measured_iteration_s"])
                for l in j["layouts"]}
    except (KeyError, TypeError) as e:
        sys.exit(f"{path}: not a prediction_accuracy --json output (missing {e})")


def pooled(logs):
    """(ratio, low, high) in %, from per-run log ratios; low/high are None for one run."""
    n = len(logs)
    m = sum(logs) / n
    pct = lambda x: 100.0 * (math.exp(x) - 1.0)
    if n < 2:
        return pct(m), None, None
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return pct(m), pct(m - half), pct(m + half)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=3, help="layouts to compare, best predicted first")
    ap.add_argument("runs", nargs="+", help="prediction_accuracy --json outputs")
    a = ap.parse_args()
    if a.top < 2:
        sys.exit("--top must be at least 2")
    runs = [load(p) for p in a.runs]
    # Geometric mean of each layout's prediction over its run's fastest prediction.
    rel = {}
    for r in runs:
        fastest = min(p for p, _ in r.values())
        for name, (p, _) in r.items():
            rel.setdefault(name, []).append(math.log(p / fastest))
    order = sorted(rel, key=lambda n: sum(rel[n]) / len(rel[n]))[:a.top]
    print(f"# pool_runs: {len(runs)} runs; top {len(order)} layouts by pooled prediction")
    print(f"{'a':<36} {'b':<36} {'runs':>4}  {'measured a/b − 1 (95 % CI)':<30} "
          f"{'predicted a/b − 1 (95 % CI)':<30}")
    for i, x in enumerate(order):
        for y in order[i + 1:]:
            both = [r for r in runs if x in r and y in r]
            meas = pooled([math.log(r[x][1] / r[y][1]) for r in both])
            pred = pooled([math.log(r[x][0] / r[y][0]) for r in both])
            fmt = lambda v: (f"{v[0]:+.2f} %" if v[1] is None
                             else f"{v[0]:+.2f} % ({v[1]:+.2f} … {v[2]:+.2f})")
            print(f"{x:<36} {y:<36} {len(both):>4}  {fmt(meas):<30} {fmt(pred):<30}")


if __name__ == "__main__":
    main()
