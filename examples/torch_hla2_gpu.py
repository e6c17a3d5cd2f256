"""Gated second-order HLA (SPEC's hla2 with per-token gates) in PyTorch, every chunk at once — the chunk-parallel form
a GPU runs, and the PyTorch peer of `make bench-gpu` (scripts/bench-gpu.py imports it). The u-form of
fast/chunked/hla2.hpp as two chained chunked gated linear-attention passes:

    u_j = S_j q_j = Σ_{i≤j} Γ(j,i) (q_j·k_i) k_i           the pass (q, k, k) with Γ
    o_t = Σ_{j≤t} Γ(t,j)² (q_t·u_j) v_j  [+ λ Σ_{j≤t} Γ(t,j) (q_t·q_j) v_j]    the pass (q, u, [v 1]) with Γ²

Each pass: within-chunk cumulative log-gates, the masked decayed product inside every chunk, each chunk's own state,
and the state entering every chunk as one product with the chunks' M × M decay matrix (no loop over chunks).

    hla verify --op hla2 --gates --normalized --eps 1e-3 --exec "python3 examples/torch_hla2_gpu.py"

runs on the GPU where torch sees one (HLA_TORCH_DEVICE overrides), on the CPU otherwise.
"""
import math
import os

import torch
import torch.nn.functional as F


def gla_pass(q, k, v, lcum, p):
    """out_t = Σ_{j≤t} Γ(t,j)^p (q_t·k_j) v_j: q, k [S, M, w, d], v [S, M, w, e], lcum [S, M, w] the within-chunk
    cumulative log-gates (float32, or float64 for float64 inputs)."""
    S, M, w, _ = q.shape
    a = p * lcum
    last = a[..., -1]                                                   # [S, M]
    mask = torch.tril(torch.ones(w, w, dtype=torch.bool, device=q.device))
    dec = torch.exp((a[..., :, None] - a[..., None, :]).masked_fill(~mask, -math.inf)).to(q.dtype)
    out = ((q @ k.transpose(-1, -2)) * dec) @ v                         # within each chunk
    kx = k * torch.exp(last[..., None] - a)[..., None].to(k.dtype)
    ds = kx.transpose(-1, -2) @ v                                       # [S, M, d, e]: each chunk's own state
    cum = torch.cumsum(last, dim=1)                                     # [S, M]
    diff = (cum - last)[:, :, None] - cum[:, None, :]                   # log Γ from the end of chunk j to chunk m
    strict = torch.tril(torch.ones(M, M, dtype=torch.bool, device=q.device), -1)
    D = torch.exp(diff.masked_fill(~strict, -math.inf)).to(q.dtype)     # [S, M, M]
    h = (D @ ds.reshape(S, M, -1)).reshape(ds.shape)                    # the state entering each chunk
    return out + (q * torch.exp(a)[..., None].to(q.dtype)) @ h


def hla2_chunk_parallel(q, k, v, logg, w=64, ridge=0.0):
    """Gated hla2 on [B, T, H, ·] tensors with log-gates logg [B, T, H]; the outputs [B, T, H, e] for v's width e."""
    B, T, H, _ = q.shape
    e = v.shape[-1]
    M = (T + w - 1) // w
    pad = M * w - T

    def chunks(x):
        x = x.permute(0, 2, 1, 3) if x.dim() == 4 else x.permute(0, 2, 1)[..., None]
        return F.pad(x, (0, 0, 0, pad)).reshape(B * H, M, w, -1)
    qc, kc, vc = chunks(q), chunks(k), chunks(v)
    lcum = torch.cumsum(chunks(logg.to(torch.promote_types(q.dtype, torch.float32)))[..., 0], dim=-1)
    u = gla_pass(qc, kc, kc, lcum, 1)
    o = gla_pass(qc, u, vc, lcum, 2)
    if ridge != 0.0:
        o = o + ridge * gla_pass(qc, qc, vc, lcum, 1)
    return o.reshape(B, H, M * w, e)[:, :, :T].permute(0, 2, 1, 3)


def hla2(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None):
    """The `hla verify --exec` entry: one sequence of NumPy arrays; gamma a number or the per-token gates."""
    if initial_state is not None:
        raise NotImplementedError("this chunk-parallel example starts from the zero state")
    dev = os.environ.get("HLA_TORCH_DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
    q, k, v = (torch.from_numpy(x).to(dev) for x in (q, k, v))
    n = q.shape[0]
    g = torch.as_tensor(gamma, dtype=torch.float64, device=dev).expand(n)
    if normalized:
        v = torch.cat([v, torch.ones(n, 1, dtype=v.dtype, device=dev)], dim=1)
    o = hla2_chunk_parallel(q[None, :, None], k[None, :, None], v[None, :, None], torch.log(g)[None, :, None],
                            ridge=ridge)[0, :, 0]
    if normalized:
        o = o[:, :-1] / (o[:, -1:] + eps)
    return o.cpu().numpy()


if __name__ == "__main__":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from protocol import serve
    serve(hla2)
