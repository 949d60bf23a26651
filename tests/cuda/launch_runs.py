"""How long are the runs of kernel launches a window over several dispatches could cover?

A replay window over a run of K consecutive launches of one stream (one read of the watched
memory for the run, pass i of every launch between one CUPTI Start and Stop) can only span
launches with nothing else in between that enqueues work or waits for it: a copy, a fill, an
event, a stream wait or a synchronisation ends the run. This script profiles one GPT-2 training
step (gpt2_step.py's model, after a warm-up step) with torch.profiler, without any replay tool,
and splits the application thread's CUDA runtime calls into such runs:

    python3 launch_runs.py [--size small|medium] [--json out.json]
    python3 launch_runs.py --models [--json out.json]   (the parts of models_step.py)

It prints how many launches lie in runs of at least K launches on one stream, what ended the
runs, and the histogram of run lengths.
"""
import argparse
import collections
import json
import os
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

import gpt2_step

# Runtime calls that enqueue nothing and wait for nothing: they never end a run.
BENIGN = (
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaGetLastError",
    "cudaGetErrorString",
    "cudaGetErrorName",
    "cudaPeekAtLastError",
    "cudaDeviceGetAttribute",
    "cudaFuncGetAttributes",
    "cudaFuncSetAttribute",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo",
    "cudaPointerGetAttributes",
    "cudaGetDriverEntryPoint",
    "cudaGetFuncBySymbol",
    "cuGetProcAddress",
    "cuModuleGetFunction",
    "cuKernelGetFunction",
    "cuLibraryGetKernel",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
    "cuCtxGetCurrent",
)


def is_launch(name):
    return "LaunchKernel" in name or name.startswith("cuLaunchKernel")


def runs(events):
    """Splits the runtime calls of one thread (sorted by time) into runs of launches of one
    stream; returns (lengths, what ended each run)."""
    lengths, enders = [], collections.Counter()
    current, stream = 0, None
    for name, s in events:
        if is_launch(name):
            if current and s != stream:
                lengths.append(current)
                enders["a launch on another stream"] += 1
                current = 0
            current += 1
            stream = s
        elif name.startswith(BENIGN):
            continue
        else:
            if current:
                lengths.append(current)
                enders[name] += 1
            current, stream = 0, None
    if current:
        lengths.append(current)
        enders["end of the step"] += 1
    return lengths, enders


def analyse(trace):
    """The runs of launches in a chrome trace of torch.profiler, as a summary."""
    # The stream of each launch, through its kernel's correlation id.
    stream_of = {}
    for e in trace:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            stream_of[a.get("correlation")] = a.get("stream")
    calls = collections.defaultdict(list)
    seen = set()
    for e in trace:
        if e.get("cat") == "cuda_runtime" or e.get("cat") == "cuda_driver":
            a = e.get("args", {})
            seen.add(a.get("correlation"))
            calls[e.get("tid")].append(
                (a.get("correlation", 0), e["name"], stream_of.get(a.get("correlation")))
            )
    # Kernels launched through the driver API (libraries such as cuDNN) have no runtime call
    # in the trace: each goes in as a launch of its stream, in correlation-id order, on the
    # thread whose calls surround it.
    orphans = sorted(c for c in stream_of if c not in seen)
    for c in orphans:
        if not calls:
            calls[0] = []
        tid = min(
            calls,
            key=lambda t: min((abs(x - c) for x, _, _ in calls[t]), default=1 << 62),
        )
        calls[tid].append((c, "cuLaunchKernel (driver API, no runtime call)", stream_of[c]))
    # Each thread that launches (the forward's and the autograd engine's) on its own.
    lengths, enders, events = [], collections.Counter(), []
    threads = {}
    for tid, c in calls.items():
        mine = [(n, s) for _, n, s in sorted(c)]
        if not any(is_launch(n) for n, _ in mine):
            continue
        l, e = runs(mine)
        threads[str(tid)] = sum(l)
        lengths += l
        enders += e
        events += mine
    launches = sum(lengths)
    return {
        "launches": launches,
        "launches_per_thread": threads,
        "kernels": len(stream_of),
        "driver_api_launches": len(orphans),
        "runs": len(lengths),
        "mean_run": launches / max(1, len(lengths)),
        "launches_in_runs_of_at_least": {
            k: sum(n for n in lengths if n >= k) for k in (1, 2, 4, 8, 16, 32, 64)
        },
        "histogram": dict(sorted(collections.Counter(lengths).items())),
        "ended_by": dict(enders.most_common(15)),
        "other_calls": dict(
            collections.Counter(n for n, _ in events if not is_launch(n)).most_common(15)
        ),
    }


def profiled(work):
    """Runs `work` once to warm up, then once under torch.profiler; the second run's runs."""
    work()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))["traceEvents"]
    return analyse(trace)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default=os.environ.get("GPT2_SIZE", "small"),
                    choices=["small", "medium"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--models", action="store_true",
                    help="the parts of models_step.py instead of a GPT-2 step")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.models:
        import models_step

        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        dev = torch.device("cuda")
        out = {}
        for part in (models_step.lstm, models_step.transformer_bf16, models_step.side_streams,
                     models_step.data_loader, models_step.cuda_graph,
                     models_step.sparse_embedding, models_step.convolutions):
            def work(part=part):
                g = torch.Generator(device=dev).manual_seed(1234)
                part(dev, g, {})
            out[part.__name__] = profiled(work)
    else:
        torch.use_deterministic_algorithms(True)
        model, opt, ids = gpt2_step.build(args, "sdpa")
        out = {"size": args.size, **profiled(lambda: gpt2_step.step(model, opt, ids))}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
