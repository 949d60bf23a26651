"""Library kernels nobody here wrote, for replay checks: cuBLAS (batched GEMMs, a batched LU
through device arrays of pointers), cuSOLVER (Cholesky, QR, eigh, SVD, solve), cuFFT, cuDNN
(a small conv net's forward and backward with batch norm, fp16 under GradScaler), CUB (sort,
unique, cumsum, top-k, nonzero), gathers and scatters, and the Philox RNG.

Every operation's result is hashed (SHA-256 of its bytes) and written to --out as JSON, with
the time the whole run took. Run it plainly (twice: operations whose hashes differ between
two plain runs are not deterministic and are not compared) and under a replay tool: every
deterministic operation must hash the same.

    python3 libs_step.py --out plain.json
    CUDA_INJECTION64_PATH=libpass_timer.so ROCPROF_REPLAY_PASSES=3 \
        ROCPROF_REPLAY_OUTPUT=records.jsonl python3 libs_step.py --out replayed.json
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import json
import time

import torch

from op_hash import sha


def linalg(dev, g, out):
    a = torch.randn(64, 48, 48, device=dev, generator=g, dtype=torch.float64)
    spd = a @ a.transpose(-1, -2) + 48 * torch.eye(48, device=dev, dtype=torch.float64)
    b = torch.randn(64, 48, 4, device=dev, generator=g, dtype=torch.float64)
    # Batched LU: cuBLAS/cuSOLVER's batched factorizations take device arrays of pointers.
    lu, piv = torch.linalg.lu_factor(a)
    out["lu_factor_batched"] = sha(lu, piv)
    out["lu_solve_batched"] = sha(torch.linalg.lu_solve(lu, piv, b))
    out["solve"] = sha(torch.linalg.solve(a[0], b[0]))
    out["cholesky_batched"] = sha(torch.linalg.cholesky(spd))
    q, r = torch.linalg.qr(a[:8])
    out["qr"] = sha(q, r)
    w, v = torch.linalg.eigh(spd[:4])
    out["eigh"] = sha(w, v)
    s = torch.linalg.svdvals(a[:4])
    out["svdvals"] = sha(s)
    out["inv_batched"] = sha(torch.linalg.inv(spd[:16]))
    x = torch.randn(32, 256, 128, device=dev, generator=g)
    y = torch.randn(32, 128, 64, device=dev, generator=g)
    out["bmm"] = sha(torch.bmm(x, y))
    out["baddbmm"] = sha(torch.baddbmm(torch.ones(32, 256, 64, device=dev), x, y, alpha=0.5))


def fft(dev, g, out):
    x = torch.randn(16, 4096, device=dev, generator=g)
    out["rfft"] = sha(torch.fft.rfft(x))
    img = torch.randn(8, 128, 128, device=dev, generator=g, dtype=torch.float64)
    out["fft2_ifft2"] = sha(torch.fft.ifft2(torch.fft.fft2(img)))


def cub(dev, g, out):
    x = torch.randint(0, 1000, (1 << 20,), device=dev, generator=g)
    vals, idx = torch.sort(x, stable=True)
    out["sort_stable"] = sha(vals, idx)
    u, inv, counts = torch.unique(x, return_inverse=True, return_counts=True)
    out["unique"] = sha(u, inv, counts)
    out["cumsum"] = sha(torch.cumsum(x, 0))
    f = torch.randn(1 << 18, device=dev, generator=g)
    tv, ti = torch.topk(f, 100)
    out["topk"] = sha(tv, ti)
    out["nonzero"] = sha(torch.nonzero(f > 1.5))
    out["masked_select"] = sha(torch.masked_select(f, f < -2.0))


def gathers(dev, g, out):
    table = torch.randn(10000, 64, device=dev, generator=g)
    ids = torch.randint(0, 10000, (4096,), device=dev, generator=g)
    out["index_select"] = sha(table.index_select(0, ids))
    emb = torch.nn.functional.embedding(ids.view(64, 64), table)
    out["embedding"] = sha(emb)
    # Deterministic scatter: each destination written once.
    dst = torch.zeros(10000, 64, device=dev)
    perm = torch.randperm(10000, device=dev, generator=g)[:4096]
    dst.index_copy_(0, perm, table[:4096])
    out["index_copy"] = sha(dst)
    out["gather"] = sha(torch.gather(table, 1, ids.view(64, 64) % 64))
    out["philox_rand"] = sha(torch.rand(1 << 16, device=dev, generator=g))
    out["multinomial"] = sha(torch.multinomial(torch.softmax(table[0], 0), 32, replacement=True, generator=g))


def convnet(dev, g, out):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1, groups=1),
        torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1, groups=64),  # depthwise
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(32, 3, 64, 64, device=dev, generator=g)
    y = torch.randint(0, 10, (32,), device=dev, generator=g)
    losses = []
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    out["convnet_losses"] = sha(torch.stack(losses))
    out["convnet_params"] = sha(*[p for p in net.parameters()], *[b for b in net.buffers()])
    out["grad_scaler_scale"] = sha(scaler._scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    out = {}
    start = time.perf_counter()
    for part in (linalg, fft, cub, gathers, convnet):
        g = torch.Generator(device=dev).manual_seed(1234)
        part(dev, g, out)
    torch.cuda.synchronize()
    total = time.perf_counter() - start
    json.dump({"ops": out, "total_s": total, "torch": torch.__version__}, open(args.out, "w"), indent=1)
    print(f"libs_step: {len(out)} operations in {total:.2f} s")


if __name__ == "__main__":
    main()
