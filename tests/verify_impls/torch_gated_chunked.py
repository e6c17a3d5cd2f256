"""A researcher's chunked, gated hla2 in PyTorch, written from docs/operators.md as kernels are (issue 47): SPEC's
u-form o_t = Σ_j Γ(t,j)² (q_t·u_j) v_j + λ Σ_j Γ(t,j) (q_t·q_j) v_j, u_j = S_j q_j, as two gated linear-attention
passes (u over (q, k, k) at the gates γ_t, o over (q, u, v) at γ_t²), each chunk by chunk (w = 16) with the log-gates
cumulated within the chunk, exp of their differences (masked before exp), and a carried state. The same with one
bug planted:

    tail-carry     the tail chunk (n not a multiple of w) computed from the wrong carry: the carry into it decayed
                   twice by the last full chunk's total gate (a tail written apart from the loop)
    carry-twice    every carry handed on decayed twice by its chunk's total gate
    carry-kept     the carry handed on without its chunk's decay
    eps-after      ε added after the division
    signed-clamp   divided by sign(den) · max(|den|, ε) (fla's normalized form)
    scale          queries scaled by d^-1/2 (fla's default scale), so outputs are 1/d × SPEC's

As a command:                        python3 torch_gated_chunked.py <name> DIR
As callables (hla_harness.verify):   torch_gated_chunked.IMPLS[<name>]
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import protocol  # noqa: E402


def gated_linear(q, k, v, log_g, chunk, bug):
    """o_t = Σ_{j≤t} Γ(t,j) (q_t·k_j) v_j, chunk by chunk from a carried state S = Σ_j Γ(end, j) k_j v_jᵀ."""
    n = q.shape[0]
    S = q.new_zeros(k.shape[1], v.shape[1])
    out = q.new_empty(n, v.shape[1])
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        L = torch.cumsum(log_g[s:e], 0)                      # log Π_{r=s..s+a} γ_r
        a = torch.arange(e - s)
        causal = a[:, None] >= a[None, :]
        F = torch.exp(torch.where(causal, L[:, None] - L[None, :], torch.full_like(L[:, None] - L[None, :], -1e30)))
        out[s:e] = torch.exp(L)[:, None] * (q[s:e] @ S) + (F * (q[s:e] @ k[s:e].T)) @ v[s:e]
        total = torch.exp(L[-1])
        keep = total
        tail_next = e < n and n - e < chunk
        if bug == "carry-twice" or (bug == "tail-carry" and tail_next):
            keep = total * total
        elif bug == "carry-kept":
            keep = torch.ones_like(total)
        S = keep * S + (torch.exp(L[-1] - L)[:, None] * k[s:e]).T @ v[s:e]
    return out


def hla2(q, k, v, gamma, normalized=False, eps=0.0, ridge=0.0, initial_state=None, chunk=16, bug=""):
    if initial_state is not None:
        raise NotImplementedError("carries its own (S, u) state, not SPEC's parts")
    q, k, v = (torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v))
    dt = q.dtype
    n, d = q.shape
    if bug == "scale":
        q = q * d ** -0.5
    log_g = torch.log(torch.as_tensor(np.asarray(gamma), dtype=dt))
    v1 = torch.cat([v, torch.ones(n, 1, dtype=dt)], dim=1) if normalized else v
    u = gated_linear(q, k, k, log_g, chunk, bug)
    o = gated_linear(q, u, v1, 2 * log_g, chunk, bug)
    if ridge != 0:
        o = o + ridge * gated_linear(q, q, v1, log_g, chunk, bug)
    if normalized:
        num, den = o[:, :-1], o[:, -1:]
        if bug == "eps-after":
            o = num / den + eps
        elif bug == "signed-clamp":
            o = num / torch.where(den >= 0, den.clamp(min=eps), den.clamp(max=-eps))
        else:
            o = num / (den + eps)
    return o.numpy()


IMPLS = {name or "right": (lambda bug: lambda *a, **kw: hla2(*a, **kw, bug=bug))(name)
         for name in ("", "tail-carry", "carry-twice", "carry-kept", "eps-after", "signed-clamp", "scale")}

if __name__ == "__main__":
    protocol.serve(IMPLS[sys.argv[1]])
