"""Builds the table of docs/performance.md from the figures bench.sh leaves in a directory."""
import json
import statistics
import sys
from pathlib import Path


def engine(out, w, f):
    rows = [json.loads(l) for l in open(out / f"engine-{w}-{f}.jsonl") if l.strip()]
    rows = [r for r in rows if r["outcome"] == "replayed" and r["passes"] > 1]
    if not rows:
        return None, None, None
    per_pass = [r["restore_ns"] / (r["passes"] - 1) / 1e3 for r in rows]
    capture = [r["snapshot_ns"] / 1e6 for r in rows]
    return statistics.median(per_pass), statistics.median(capture), rows[0]["restored_bytes"] / (rows[0]["passes"] - 1)


def ms(us):
    return "-" if us is None else (f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} µs")


def main():
    out = Path(sys.argv[1])
    print("| case | kernel | D2D copy of write set | D2D copy of footprint | CUPTI restore OPT_NONE | CUPTI restore OPT_TRANSFER | rocprof-replay restore (per pass) | bytes restored per pass | rocprof-replay capture |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in open(out / "cupti.jsonl"):
        c = json.loads(line)
        w, f = c["write_mib"], c["footprint_mib"]
        e, cap, restored = engine(out, w, f)
        case = f"{w if w < 1024 else w // 1024} {'MiB' if w < 1024 else 'GiB'} written, {f // 1024 if f >= 1024 else f} {'GiB' if f >= 1024 else 'MiB'} footprint"
        print(
            f"| {case} | {ms(c['kernel_us'])} | {ms(c['copy_write_us'])} | {ms(c['copy_footprint_us'])} "
            f"| {ms(c['restore_none_us'])} | {ms(c['restore_transfer_us'])} | {ms(e)} "
            f"| {'-' if restored is None else f'{restored / 2**30:.2f} GiB'} | {ms(None if cap is None else cap * 1e3)} |"
        )
    walls = [l.split("\t") for l in open(out / "walls.tsv") if l.strip()]
    print()
    print("| program (5 launches, 4 MiB written) | plain | Nsight Compute `--replay-mode kernel --set full` | rocprof-replay, 38 passes |")
    print("|---|---|---|---|")
    for f in sorted({int(x[1]) for x in walls}):
        get = lambda who: next((float(x[2]) for x in walls if x[0] == who and int(x[1]) == f), None)
        fmt = lambda s: "-" if s is None else f"{s:.2f} s"
        print(f"| footprint {f // 1024 if f >= 1024 else f} {'GiB' if f >= 1024 else 'MiB'} | {fmt(get('plain'))} | {fmt(get('ncu'))} | {fmt(get('rocprof-replay'))} |")


if __name__ == "__main__":
    main()
