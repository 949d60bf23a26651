"""Summarises rocprof-replay outcome records (JSON Lines) as JSON: outcomes and reasons,
bytes captured and restored, pass times, per kernel name.

    python3 summarize.py records.jsonl [--top 10]
"""
import argparse
import collections
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.records) if l.strip()]
    outcomes = collections.Counter(
        r["outcome"] + (f" ({r['reason']})" if r.get("reason") else "") for r in rows
    )
    kernels = collections.Counter(r["kernel"] for r in rows)
    passes = collections.Counter(r["passes"] for r in rows)
    pass_ns = [t for r in rows for t in r["pass_ns"] if t is not None]
    restore_per_pass = [
        r["restore_ns"] / (r["passes"] - 1)
        for r in rows
        if r["outcome"] == "replayed" and r["passes"] > 1
    ]
    summary = {
        "records": len(rows),
        "outcomes": dict(outcomes.most_common()),
        "passes": {str(k): v for k, v in sorted(passes.items())},
        "distinct_kernels": len(kernels),
        "top_kernels": kernels.most_common(args.top),
        "snapshot_bytes": sum(r["snapshot_bytes"] for r in rows),
        "restored_bytes": sum(r["restored_bytes"] for r in rows),
        "snapshot_s": sum(r["snapshot_ns"] for r in rows) / 1e9,
        "restore_s": sum(r["restore_ns"] for r in rows) / 1e9,
        "timed_passes": len(pass_ns),
        "kernel_s": sum(pass_ns) / 1e9,
        "median_pass_us": statistics.median(pass_ns) / 1e3 if pass_ns else None,
        "median_restore_per_pass_us": statistics.median(restore_per_pass) / 1e3
        if restore_per_pass
        else None,
        "median_snapshot_bytes": statistics.median(r["snapshot_bytes"] for r in rows)
        if rows
        else None,
        "footprints": dict(collections.Counter(str(r.get("footprint")) for r in rows)),
        "watched_bytes": sum(r.get("watched_bytes", 0) for r in rows),
        "median_watched_bytes": statistics.median(r.get("watched_bytes", 0) for r in rows)
        if rows
        else None,
        "fingerprint_s": sum(r.get("fingerprint_ns", 0) for r in rows) / 1e9,
        "diff_s": sum(r.get("diff_ns", 0) for r in rows) / 1e9,
        "verified_bytes": sum(r.get("verified_bytes", 0) for r in rows),
        "window_s": sum(r.get("window_ns", 0) for r in rows) / 1e9,
        "median_window_us": statistics.median(r.get("window_ns", 0) for r in rows) / 1e3
        if rows
        else None,
        "snapshot_regions": sum(r.get("snapshot_regions", 0) for r in rows),
        "median_snapshot_regions": statistics.median(r.get("snapshot_regions", 0) for r in rows)
        if rows
        else None,
        "median_snapshot_us": statistics.median(r["snapshot_ns"] for r in rows) / 1e3
        if rows
        else None,
        "median_fingerprint_us": statistics.median(r.get("fingerprint_ns", 0) for r in rows) / 1e3
        if rows
        else None,
        "median_diff_us": statistics.median(r.get("diff_ns", 0) for r in rows) / 1e3
        if rows
        else None,
        "restore_modes": dict(collections.Counter(str(r.get("restore_mode")) for r in rows)),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
