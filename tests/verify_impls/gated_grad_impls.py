"""Gated backward passes for `hla verify --gates --grad`, written as a PyTorch user would: the gated operator in
matrix form with Γ(t, s) = exp(Σ_{r=s+1..t} log γ_r) from cumulative log-gates, differentiated by autograd, which
also gives dgamma = ∂L/∂γ — and one wrong in the way gated backward passes go wrong: the gradient with respect to
the log-gates returned as dgamma (∂L/∂log γ_t = γ_t ∂L/∂γ_t).

As a command (the black-box protocol):   python3 gated_grad_impls.py <name> DIR
As callables (hla_harness.verify):       gated_grad_impls.IMPLS[<name>]   fn(q, k, v, do, gamma, **options)
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import protocol  # noqa: E402

torch.set_num_threads(1)


def gate_products(gamma):
    """Γ(t, s) = Π_{r=s+1..t} γ_r for s ≤ t, 0 above the diagonal: exp of differences of cumulative log-gates (the
    masked entries never reach exp, so neither they nor their gradients overflow)."""
    L = torch.cumsum(torch.log(gamma), 0)
    n = gamma.shape[0]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.exp(torch.where(mask, L[:, None] - L[None, :], torch.tensor(-float("inf"), dtype=gamma.dtype)))


def forward(op, q, k, v, gamma, normalized, eps, ridge):
    """SPEC's gated operators in matrix form: linear ((QKᵀ)⊙Γ) V; hla2 in its u-form, U = ((QKᵀ)⊙Γ) K, then
    ((QUᵀ)⊙Γ²) V + λ ((QQᵀ)⊙Γ) V; ahla ((QKᵀ)⊙Γ) ((QKᵀ)⊙Γ) V (Γ(t, j) = Γ(t, i) Γ(i, j))."""
    G = gate_products(gamma)
    if normalized:
        v = torch.cat([v, torch.ones(v.shape[0], 1, dtype=v.dtype)], 1)
    if op == "linear":
        out = ((q @ k.T) * G) @ v
    elif op == "hla2":
        U = ((q @ k.T) * G) @ k
        out = ((q @ U.T) * G * G) @ v + ridge * ((q @ q.T) * G) @ v
    else:
        A = (q @ k.T) * G
        out = A @ (A @ v)
    if normalized:
        out = out[:, :-1] / (out[:, -1:] + eps)
    return out


def gated_grad(op, mistake=""):
    def fn(q, k, v, do, gamma, normalized, eps, ridge, initial_state=None):
        if initial_state is not None:
            raise ValueError("these backward passes start from the zero state")
        dtype = q.dtype
        t = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in (q, k, v, gamma)]
        o = forward(op, *t, normalized, eps, ridge)
        (o * torch.tensor(np.asarray(do, dtype=np.float64))).sum().backward()
        dq, dk, dv, dgamma = (x.grad.numpy() for x in t)
        if mistake == "dloggamma":  # ∂L/∂log γ in place of ∂L/∂γ
            dgamma = dgamma * np.asarray(gamma, dtype=np.float64)
        return tuple(np.asarray(x, dtype=dtype) for x in (o.detach().numpy(), dq, dk, dv, dgamma))
    return fn


def without_dgamma(f):
    """The same backward returning (o, dq, dk, dv) only: dgamma is optional."""
    return lambda *a, **kw: f(*a, **kw)[:4]


IMPLS = {
    "hla2": gated_grad("hla2"),
    "ahla": gated_grad("ahla"),
    "linear": gated_grad("linear"),
    "hla2-no-dgamma": without_dgamma(gated_grad("hla2")),
    "hla2-dloggamma": gated_grad("hla2", "dloggamma"),
    "linear-dloggamma": gated_grad("linear", "dloggamma"),
}


if __name__ == "__main__":
    protocol.serve_grad(IMPLS[sys.argv[1]], sys.argv[2])
