#!/usr/bin/env python3
"""Compares hardware counters collected by rocprof-replay with Nsight Compute's.

    compare_counters.py --ours ours.json --ncu run1.csv [run2.csv] [--out table.md] [--first N]
                        [--kernels K]

`ours.json`: a `rocprof-replay run ... -o ours.json` report (its `dispatches` carry
`metrics`, with `gpu_value` on CUDA). `run*.csv`: `ncu --csv --print-units base
--print-kernel-base mangled --metrics <same> <program>` on the same program (stdout; lines
that are not CSV are skipped). Two ncu runs measure ncu's own run-to-run spread.

Dispatches are paired per kernel name in launch order (the k-th launch of a kernel with ncu's
k-th result of it); a kernel launched a different number of times in the two (a graph's
kernels, which ncu profiles one by one and rocprof-replay does not replay) is compared on its
mean. Prints one row per (kernel, metric): ours, ncu run 1, ncu run 2, |ours - ncu1| / ncu1,
and ncu's own spread |ncu2 - ncu1| / ncu1, then per metric the worst of each and a verdict
against the targets: deterministic metrics (instruction counts, `launch__*`) within 1% of
ncu, the others within ncu's own run-to-run spread (a verdict needs two ncu runs).
`--kernels K` keeps the first K distinct kernels (in our launch order). With `--out` the
rows go to the file and stdout gets the summary only. Exit status 0 whatever the figures.
`--self-test` checks the pairing and the verdicts on made-up data.
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
    first `first` dispatches that were not skipped only when given (to match
    `ncu --launch-skip S --launch-count N`)."""
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return {}, {}
    out = defaultdict(list)
    absent = defaultdict(int)
    dispatches = sorted(report.get("dispatches", []), key=lambda d: d.get("dispatch_id", 0))
    # Launches outside --launch-skip / --launch-count ran once, `skipped`: ncu's
    # --launch-skip leaves the same ones out.
    dispatches = [d for d in dispatches if d.get("outcome") != "skipped"]
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


def deterministic(metric):
    """Metrics whose value does not depend on timing or cache state: held to 1%."""
    return (metric.startswith("launch__")
            or metric in ("sm__inst_executed.sum", "smsp__inst_executed.sum")
            or metric.startswith("smsp__sass_thread_inst_executed_op_"))


def first_kernels(ours, k):
    """The first `k` distinct kernels of `ours` (insertion order: our launch order)."""
    return set(list(ours)[:k]) if k else set(ours)


def report(ours, absent, ncu1, ncu2, kernels=None):
    """(rows table, summary) as markdown lines."""
    keep = first_kernels(ours, kernels)
    ours = {k: v for k, v in ours.items() if k in keep}
    if kernels:
        ncu1 = {k: v for k, v in ncu1.items() if k in keep}
        ncu2 = {k: v for k, v in ncu2.items() if k in keep}
    rows = pairs(ours, ncu1, ncu2)
    table = ["| kernel | launch | metric | ours | ncu 1 | ncu 2 | ours vs ncu 1 | ncu spread |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    worst = defaultdict(lambda: [None, None])
    for kernel, m, o, n1, n2, how in rows:
        d, s = rel(o, n1), rel(n2, n1)
        short = kernel if len(kernel) <= 40 else kernel[:37] + "..."
        table.append(f"| `{short}` | {how} | {m} | {fmt(o)} | {fmt(n1)} | {fmt(n2)} | {pct(d)} | {pct(s)} |")
        w = worst[m]
        if d is not None:
            w[0] = d if w[0] is None else max(w[0], d)
        if s is not None:
            w[1] = s if w[1] is None else max(w[1], s)
    summary = [f"{len(ours)} kernels of ours, {sum(map(len, ours.values()))} launches with values"
               f" compared ({len(rows)} rows)", "",
               "| metric | worst ours vs ncu 1 | worst ncu run-to-run | target | met |",
               "|---|---:|---:|---|---|"]
    for m, (d, s) in sorted(worst.items()):
        if deterministic(m):
            target, met = "1%", ("-" if d is None else ("yes" if d <= 0.01 else "no"))
        else:
            target = "ncu spread"
            met = "-" if d is None or s is None else ("yes" if d <= s else "no")
        summary.append(f"| {m} | {pct(d)} | {pct(s)} | {target} | {met} |")
    if absent:
        summary += ["", "Dispatches without values (reason: count):"]
        summary += [f"- {r}: {n}" for r, n in sorted(absent.items())]
    if not ours:
        summary += ["", "rocprof-replay produced no counter values (see its stderr)."]
    if not ncu1:
        summary += ["", "Nsight Compute produced no values (see its log)."]
    return table, summary


def self_test():
    ours = {"a": [{"sm__inst_executed.sum": 100.0, "dram__bytes_read.sum": 10.0}],
            "b": [{"sm__inst_executed.sum": 7.0}, {"sm__inst_executed.sum": 7.0}],
            "c": [{"sm__inst_executed.sum": 1.0}]}
    ncu1 = {"a": [{"sm__inst_executed.sum": 100.5, "dram__bytes_read.sum": 11.0}],
            "b": [{"sm__inst_executed.sum": 7.0}], "c": [{"sm__inst_executed.sum": 2.0}]}
    ncu2 = {"a": [{"sm__inst_executed.sum": 100.5, "dram__bytes_read.sum": 12.0}],
            "b": [{"sm__inst_executed.sum": 7.0}], "c": [{"sm__inst_executed.sum": 2.0}]}
    table, summary = report(ours, {}, ncu1, ncu2, kernels=2)
    text = "\n".join(table + summary)
    assert "`c`" not in text, "only the first two kernels"
    assert "| `b` | mean 2/1 |" in text, "a kernel launched a different number of times: means"
    rows = {l.split("|")[1].strip(): l for l in summary if l.startswith("| ") and "__" in l}
    assert rows["sm__inst_executed.sum"].rstrip().endswith("| 1% | yes |"), rows
    assert rows["dram__bytes_read.sum"].rstrip().endswith("| ncu spread | yes |"), rows
    _, summary = report(ours, {}, ncu1, ncu2, kernels=3)
    rows = {l.split("|")[1].strip(): l for l in summary if l.startswith("| ") and "__" in l}
    assert rows["sm__inst_executed.sum"].rstrip().endswith("| 1% | no |"), rows
    _, summary = report(ours, {}, ncu1, {}, kernels=1)
    rows = {l.split("|")[1].strip(): l for l in summary if l.startswith("| ") and "__" in l}
    assert rows["dram__bytes_read.sum"].rstrip().endswith("| ncu spread | - |"), rows
    print("compare_counters self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ncu", nargs="+", required=True)
    ap.add_argument("--out")
    ap.add_argument("--first", type=int, help="only our first N dispatches (ncu --launch-count N)")
    ap.add_argument("--kernels", type=int, help="only the first K distinct kernels")
    a = ap.parse_args()
    ours, absent = read_ours(a.ours, a.first)
    ncu1 = read_ncu(a.ncu[0])
    ncu2 = read_ncu(a.ncu[1]) if len(a.ncu) > 1 else {}
    table, summary = report(ours, absent, ncu1, ncu2, a.kernels)
    if a.out:
        # The file first: stdout may be a pipe that closes early.
        open(a.out, "w").write("\n".join(table + [""] + summary) + "\n")
        print("\n".join(summary))
    else:
        print("\n".join(table + [""] + summary))


if __name__ == "__main__":
    main()
