"""Gated backward passes for `hla verify --gates --grad`, written as a PyTorch user would: the gated operator in
matrix form with Γ(t, s) = exp(Σ_{r=s+1..t} log γ_r) from cumulative log-gates, differentiated by autograd, which
also gives dgamma = ∂L/∂γ — and one wrong in the way gated backward passes go wrong: the gradient with respect to
the log-gates returned as dgamma (∂L/∂log γ_t = γ_t ∂L/∂γ_t). hla2-serial runs the gated serial recurrence token by
token from an initial state (also returning the final state and ∂L/∂state_in); hla2-serial-state-detached returns
∂L/∂state_in as zeros.

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
        if mistake == "dq-double-long" and q.shape[0] >= 257:  # wrong only on long inputs (the random cases)
            dq = 2 * dq
        return tuple(np.asarray(x, dtype=dtype) for x in (o.detach().numpy(), dq, dk, dv, dgamma))
    return fn


def hla2_serial(q, k, v, do, gamma, normalized, eps, ridge, initial_state=None):
    """SPEC's gated serial hla2 (G ← γ² G + γ k (kᵀ C), h likewise, then S, C, m ← γ · + ...) in torch, token by token
    from initial_state, differentiated by autograd: (o, dq, dk, dv, dgamma, final_state, dstate_in)."""
    dtype = q.dtype
    n, d = q.shape
    dv_ = v.shape[1]
    f64 = lambda x: torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)  # noqa: E731
    Q, K, V, g = f64(q), f64(k), f64(v), f64(gamma)
    shapes = {"S": (d, d), "C": (d, dv_), "m": (d,), "G": (d, dv_), "h": (d,)}
    init = {p: f64(np.zeros(s) if initial_state is None else np.reshape(initial_state[p], s))
            for p, s in shapes.items()}
    S, C, m, G, h = (init[p] for p in shapes)
    rows = []
    for t in range(n):
        qt, kt, vt, gt = Q[t], K[t], V[t], g[t]
        G = gt * gt * G + gt * torch.outer(kt, kt @ C)
        h = gt * gt * h + gt * kt * (kt @ m)
        S = gt * S + torch.outer(kt, kt)
        C = gt * C + torch.outer(qt, vt)
        m = gt * m + qt
        u = qt @ S + ridge * qt
        num = u @ C - qt @ G
        rows.append(num / (u @ m - qt @ h + eps) if normalized else num)
    o = torch.stack(rows)
    (o * torch.tensor(np.asarray(do, dtype=np.float64))).sum().backward()
    cast = lambda x: np.asarray(x.detach().numpy(), dtype=dtype)  # noqa: E731
    final = {p: cast(x) for p, x in zip(shapes, (S, C, m, G, h))}
    dstate = ({p: cast(x.grad if x.grad is not None else torch.zeros_like(x)) for p, x in init.items()}
              if initial_state is not None else None)
    return cast(o), cast(Q.grad), cast(K.grad), cast(V.grad), cast(g.grad), final, dstate


def without_dgamma(f):
    """The same backward returning (o, dq, dk, dv) only: dgamma is optional."""
    return lambda *a, **kw: f(*a, **kw)[:4]


def state_detached(r):
    """The result with ∂L/∂state_in zeroed: the state handed in treated as a constant."""
    return r[:6] + ({p: np.zeros_like(x) for p, x in r[6].items()} if r[6] is not None else None,)


IMPLS = {
    "hla2": gated_grad("hla2"),
    "ahla": gated_grad("ahla"),
    "linear": gated_grad("linear"),
    "hla2-no-dgamma": without_dgamma(gated_grad("hla2")),
    "hla2-dloggamma": gated_grad("hla2", "dloggamma"),
    "linear-dloggamma": gated_grad("linear", "dloggamma"),
    "hla2-dq-double-long": gated_grad("hla2", "dq-double-long"),
    "hla2-serial": hla2_serial,
    # the state handed in treated as a constant: dstate_in zeros (the forward and the other gradients right)
    "hla2-serial-state-detached": lambda *a, **kw: state_detached(hla2_serial(*a, **kw)),
}


if __name__ == "__main__":
    protocol.serve_grad(IMPLS[sys.argv[1]])  # DIR is the last argument; later rounds come on stdin
