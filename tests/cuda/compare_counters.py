#!/usr/bin/env python3
"""Compares hardware counters collected by rocprof-replay with Nsight Compute's.

    compare_counters.py --ours ours.json --ncu run1.csv [run2.csv] [--out table.md] [--first N]

`ours.json`: a `rocprof-replay run ... -o ours.json` report (its `dispatches` carry
`metrics`, with `gpu_value` on CUDA). `run*.csv`: `ncu --csv --print-units base
--print-kernel-base mangled --metrics <same> <program>` on the same program (stdout; lines
that are not CSV are skipped). Two ncu runs measure ncu's own run-to-run spread.

Dispatches are paired per kernel name in launch order (the k-th launch of a kernel with ncu's
k-th result of it); a kernel launched a different number of times in the two (a graph's
kernels, which ncu profiles one by one and rocprof-replay does not replay) is compared on its
mean. Prints one row per (kernel, metric): ours, ncu run 1, ncu run 2, |ours - ncu1| / ncu1,
and ncu's own spread |ncu2 - ncu1| / ncu1. Exit status 0 whatever the figures.
"""
import argparse
import csv
import io
import json
import statistics
import sys
from collections import defaultdict


def number(text):
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def read_ncu(path):
    """{kernel: [ {metric: value}, ... ]} in launch order."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return {}
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(f"{path}: no ncu CSV header", file=sys.stderr)
        return {}
    body = [lines[start]] + [l for l in lines[start + 1:] if l.startswith('"')]
    results = {}
    order = []
    for row in csv.DictReader(io.StringIO("\n".join(body))):
        rid = row.get("ID")
        name = row.get("Kernel Name") or row.get("Function Name") or "?"
        if rid not in results:
            results[rid] = (name, {})
            order.append(rid)
        v = number(row.get("Metric Value"))
        if v is not None:
            results[rid][1][row.get("Metric Name")] = v
    out = defaultdict(list)
    for rid in order:
        name, metrics = results[rid]
        out[name].append(metrics)
    return out


def read_ours(path, first=None):
    """{kernel: [ {metric: value}, ... ]} in dispatch order (dispatches with values), of the
    first `first` dispatches only when given (to match `ncu --launch-count`)."""
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return {}, {}
    out = defaultdict(list)
    absent = defaultdict(int)
    dispatches = sorted(report.get("dispatches", []), key=lambda d: d.get("dispatch_id", 0))
    if first is not None:
        dispatches = dispatches[:first]
    for d in dispatches:
        m = d.get("metrics")
        if not m:
            if d.get("metrics_reason"):
                absent[d["metrics_reason"][:120]] += 1
            continue
        out[d.get("kernel", "?")].append(
            {k: v.get("gpu_value", v.get("value")) for k, v in m.items()}
        )
    return out, absent


def rel(a, b):
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return abs(a - b) / abs(b)


def pct(x):
    return "-" if x is None else ("inf" if x == float("inf") else f"{100 * x:.2f}%")


def fmt(x):
    return "-" if x is None else f"{x:.6g}"


def pairs(ours, ncu1, ncu2):
    """(kernel, metric, ours, ncu1, ncu2, how) rows."""
    rows = []
    for kernel in sorted(set(ours) | set(ncu1)):
        o, n1, n2 = ours.get(kernel, []), ncu1.get(kernel, []), ncu2.get(kernel, [])
        metrics = sorted({k for d in o + n1 for k in d})
        same = len(o) == len(n1) and len(o) > 0
        for m in metrics:
            if same:
                for i in range(len(o)):
                    rows.append((kernel, m, o[i].get(m), n1[i].get(m),
                                 n2[i].get(m) if i < len(n2) else None, f"#{i}"))
            else:
                mean = lambda ds: (statistics.fmean([d[m] for d in ds if m in d])
                                   if any(m in d for d in ds) else None)
                rows.append((kernel, m, mean(o), mean(n1), mean(n2),
                             f"mean {len(o)}/{len(n1)}"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ncu", nargs="+", required=True)
    ap.add_argument("--out")
    ap.add_argument("--first", type=int, help="only our first N dispatches (ncu --launch-count N)")
    a = ap.parse_args()
    ours, absent = read_ours(a.ours, a.first)
    ncu1 = read_ncu(a.ncu[0])
    ncu2 = read_ncu(a.ncu[1]) if len(a.ncu) > 1 else {}
    rows = pairs(ours, ncu1, ncu2)
    lines = ["| kernel | launch | metric | ours | ncu 1 | ncu 2 | ours vs ncu 1 | ncu spread |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    worst = defaultdict(lambda: [0.0, 0.0])
    for kernel, m, o, n1, n2, how in rows:
        d, s = rel(o, n1), rel(n2, n1)
        short = kernel if len(kernel) <= 40 else kernel[:37] + "..."
        lines.append(f"| `{short}` | {how} | {m} | {fmt(o)} | {fmt(n1)} | {fmt(n2)} | {pct(d)} | {pct(s)} |")
        if d is not None:
            worst[m][0] = max(worst[m][0], d)
        if s is not None:
            worst[m][1] = max(worst[m][1], s)
    lines += ["", "| metric | worst ours vs ncu 1 | worst ncu run-to-run |", "|---|---:|---:|"]
    for m, (d, s) in sorted(worst.items()):
        lines.append(f"| {m} | {pct(d)} | {pct(s)} |")
    if absent:
        lines += ["", "Dispatches without values (reason: count):"]
        lines += [f"- {r}: {n}" for r, n in sorted(absent.items())]
    if not ours:
        lines += ["", "rocprof-replay produced no counter values (see its stderr)."]
    if not ncu1:
        lines += ["", "Nsight Compute produced no values (see its log)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
