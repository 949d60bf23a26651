"""Model workloads nobody here wrote, for replay checks, each picked for a path the GPT-2 and
library checks do not take: a cuDNN LSTM's training step (its RNN kernels and workspaces), a
Transformer encoder under bf16 autocast with the fused AdamW optimizer (device-side step counts
and learning rates, multi-tensor kernels), work on side streams ordered by events and
`wait_stream` (several streams of one thread, the application's own cross-stream order), a data
loader's pattern (page-locked host buffers, non-blocking copies both ways, events the host
waits for before it reuses a buffer), a CUDA graph captured and replayed (launches into a
capturing stream, graph launches), an `EmbeddingBag` with a sparse gradient, transposed and
grouped convolutions, and a single-rank NCCL all-reduce and broadcast when NCCL is present.

Every operation's result is hashed (SHA-256 of its bytes) and written to --out as JSON, with
the time the whole run took. Run it plainly (twice: operations whose hashes differ between two
plain runs are not deterministic and are not compared) and under a replay tool: every
deterministic operation must hash the same.

    python3 models_step.py --out plain.json
    CUDA_INJECTION64_PATH=libpass_timer.so ROCPROF_REPLAY_PASSES=3 \
        ROCPROF_REPLAY_OUTPUT=records.jsonl python3 models_step.py --out replayed.json
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import json
import time

import torch

from op_hash import sha


def lstm(dev, g, out):
    torch.manual_seed(1)
    net = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True).to(dev)
    head = torch.nn.Linear(128, 8).to(dev)
    opt = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=1e-3)
    x = torch.randn(16, 32, 64, device=dev, generator=g)
    y = torch.randint(0, 8, (16,), device=dev, generator=g)
    losses = []
    for _ in range(2):
        seq, _ = net(x)
        loss = torch.nn.functional.cross_entropy(head(seq[:, -1]), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    out["lstm_losses"] = sha(torch.stack(losses))
    out["lstm_params"] = sha(*net.parameters(), *head.parameters())


def transformer_bf16(dev, g, out):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0, batch_first=True
    )
    net = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    x = torch.randn(8, 64, 256, device=dev, generator=g)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(64, device=dev)
    losses = []
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = net(x, mask=mask, is_causal=True)
            loss = y.float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    out["transformer_bf16_losses"] = sha(torch.stack(losses))
    out["transformer_bf16_params"] = sha(*net.parameters())
    out["fused_adamw_state"] = sha(
        *[s for st in opt.state.values() for s in st.values() if torch.is_tensor(s)]
    )


def side_streams(dev, g, out):
    a = torch.randn(512, 512, device=dev, generator=g)
    b = torch.randn(512, 512, device=dev, generator=g)
    main = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    results = []
    for i in range(4):
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            p = a @ b + i
        with torch.cuda.stream(s2):
            q = torch.tanh(b @ a) * (i + 1)
        done = torch.cuda.Event()
        done.record(s2)
        main.wait_stream(s1)
        main.wait_event(done)
        # The side streams' results are used on the main stream: their allocator blocks must
        # not be reused before that work ran.
        p.record_stream(main)
        q.record_stream(main)
        a = torch.relu(p - q) / 512
        results.append(a.sum())
    out["side_streams"] = sha(a, torch.stack(results))


def data_loader(dev, g, out):
    n = 1 << 20
    src = torch.empty(n, pin_memory=True)
    back = torch.empty(n, pin_memory=True)
    acc = torch.zeros(n, device=dev)
    sums = []
    copied = torch.cuda.Event()
    for i in range(6):
        # The host refills the page-locked buffer only after the previous copy from it ran.
        copied.synchronize()
        src.copy_(torch.arange(n, dtype=torch.float32).mul_(0.5 + i))
        d = src.to(dev, non_blocking=True)
        copied.record()
        acc.mul_(0.5).add_(torch.sin(d))
        back.copy_(acc, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        ready.synchronize()
        # What the host reads once the event says the copy ran.
        sums.append(float(back[:: n // 8].sum()))
    out["data_loader_device"] = sha(acc)
    out["data_loader_host"] = sha(torch.tensor(sums, dtype=torch.float64), back)


def cuda_graph(dev, g, out):
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128)
    ).to(dev)
    static_in = torch.randn(64, 128, device=dev, generator=g)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside the capture, as the documentation asks
            net(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = net(static_in)
    outs = []
    for i in range(3):
        static_in.copy_(torch.randn(64, 128, device=dev, generator=g) + i)
        graph.replay()
        outs.append(static_out.clone())
    # Eager work after the graph on the same tensors.
    eager = net(static_out)
    out["cuda_graph"] = sha(torch.stack(outs), eager)


def sparse_embedding(dev, g, out):
    torch.manual_seed(4)
    bag = torch.nn.EmbeddingBag(5000, 32, mode="sum", sparse=True).to(dev)
    opt = torch.optim.SGD(bag.parameters(), lr=0.1)
    ids = torch.randint(0, 5000, (2048,), device=dev, generator=g)
    offsets = torch.arange(0, 2048, 16, device=dev)
    loss = bag(ids, offsets).pow(2).mean()
    loss.backward()
    out["embedding_bag_sparse_grad"] = sha(bag.weight.grad)
    opt.step()
    out["embedding_bag_weight"] = sha(bag.weight)


def convolutions(dev, g, out):
    torch.manual_seed(5)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(8, 32, 3, padding=1, groups=4),
        torch.nn.GroupNorm(8, 32),
        torch.nn.SiLU(),
        torch.nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1),
        torch.nn.Upsample(scale_factor=0.5, mode="bilinear"),
        torch.nn.Conv2d(16, 4, 1),
    ).to(dev)
    x = torch.randn(4, 8, 32, 32, device=dev, generator=g)
    y = net(x)
    y.square().mean().backward()
    out["conv_transpose_groupnorm"] = sha(y, *[p.grad for p in net.parameters()])


def nccl(dev, g, out):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        out["nccl"] = "unavailable"
        return
    port = int(os.environ.get("MODELS_STEP_PORT", "29517"))
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
        device_id=torch.device("cuda", torch.cuda.current_device()),
    )
    try:
        x = torch.randn(1 << 16, device=dev, generator=g)
        y = x.clone()
        dist.all_reduce(y)
        z = torch.arange(1024, device=dev, dtype=torch.float32)
        dist.broadcast(z, src=0)
        torch.cuda.synchronize()
        out["nccl_all_reduce"] = sha(y, y - x)
        out["nccl_broadcast"] = sha(z)
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    out = {}
    times = {}
    start = time.perf_counter()
    for part in (lstm, transformer_bf16, side_streams, data_loader, cuda_graph,
                 sparse_embedding, convolutions, nccl):
        g = torch.Generator(device=dev).manual_seed(1234)
        t = time.perf_counter()
        part(dev, g, out)
        torch.cuda.synchronize()
        times[part.__name__] = time.perf_counter() - t
    total = time.perf_counter() - start
    json.dump({"ops": out, "total_s": total, "part_s": times, "torch": torch.__version__},
              open(args.out, "w"), indent=1)
    print(f"models_step: {len(out)} operations in {total:.2f} s")


if __name__ == "__main__":
    main()
