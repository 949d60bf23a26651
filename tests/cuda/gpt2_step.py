"""GPT-2 training steps on one GPU (small, or --size medium / GPT2_SIZE=medium), deterministic,
for replay checks.

A model built from GPT2Config (no weights downloaded), forward and backward under bf16
autocast, fused AdamW; torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG
=:4096:8 and fixed seeds. Writes the loss of every step and a SHA-256 of every parameter
tensor to --out as JSON, with timings. Run it plainly and under a replay tool: everything but
the timings must be identical.

    python3 gpt2_step.py --out plain.json
    CUDA_INJECTION64_PATH=libpass_timer.so ROCPROF_REPLAY_PASSES=3 \
        ROCPROF_REPLAY_OUTPUT=records.jsonl python3 gpt2_step.py --out replayed.json
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import hashlib
import json
import struct
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config


def build(args, attn):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    # GPT-2 small (124M) or medium (355M: 24 layers, 1024 wide, 16 heads).
    size = {"small": {}, "medium": {"n_layer": 24, "n_embd": 1024, "n_head": 16}}[args.size]
    cfg = GPT2Config(n_positions=max(1024, args.seq), **size)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=g).cuda()
    return model, opt, ids


def step(model, opt, ids):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out.loss.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument(
        "--size", default=os.environ.get("GPT2_SIZE", "small"), choices=["small", "medium"]
    )
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    attn = args.attn
    t_start = time.perf_counter()
    model, opt, ids = build(args, attn)
    losses, step_s = [], []
    for k in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            loss = step(model, opt, ids)
        except RuntimeError as e:
            if k != 0 or attn == "eager" or "determinis" not in str(e):
                raise
            # No deterministic kernel for this attention backend: eager attention instead.
            attn = "eager"
            model, opt, ids = build(args, attn)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = step(model, opt, ids)
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        losses.append(float(loss.float().item()))
    params = {}
    whole = hashlib.sha256()
    for name, p in model.named_parameters():
        data = p.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()
        params[name] = hashlib.sha256(data).hexdigest()
        whole.update(name.encode())
        whole.update(data)
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(),
        "attn": attn,
        "batch": args.batch,
        "size": args.size,
        "seq": args.seq,
        "steps": args.steps,
        "loss": losses,
        "loss_hex": [struct.pack("<f", v).hex() for v in losses],
        "params_sha256": whole.hexdigest(),
        "param_tensors": len(params),
        "params": params,
        "step_s": step_s,
        "total_s": time.perf_counter() - t_start,
        "max_allocated_bytes": torch.cuda.max_memory_allocated(),
        "max_reserved_bytes": torch.cuda.max_memory_reserved(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(json.dumps({k: result[k] for k in ("attn", "loss", "params_sha256", "step_s")}))


if __name__ == "__main__":
    main()
