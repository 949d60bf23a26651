"""What the operation checks of tests/cuda share (libs_step.py, models_step.py): one SHA-256
over tensors' bytes, dtype included, whatever their layout — complex tensors as their real
view, booleans as bytes, sparse tensors as their coalesced indices and values."""
import hashlib

import torch


def sha(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach()
        if t.is_sparse:
            t = t.coalesce()
            h.update(sha(t.indices(), t.values()).encode())
            continue
        if t.is_complex():
            t = torch.view_as_real(t)
        t = t.contiguous().reshape(-1)
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()
