"""Outside backward passes for `hla verify --grad`, written as a PyTorch user would: the operator's quadratic
(masked matrix) form, differentiated by autograd — and wrong in the ways backward kernels go wrong: the
gradients of another forward (the paper's decay rule, no decay, the unmasked operator, a chunk form without
its carry), a normalizer detached from the graph, dq and dk swapped, float32 arithmetic behind float64.

As a command (the black-box protocol):   python3 grad_impls.py <name> DIR
As callables (hla_harness.verify):       grad_impls.callable_for(<name>)   fn(q, k, v, do, **options)
"""
import json
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)


def decay_matrix(n, gamma, dtype):
    t = torch.arange(n, dtype=dtype)
    e = t[:, None] - t[None, :]
    return torch.where(e >= 0, torch.tensor(gamma, dtype=dtype) ** e.clamp(min=0), torch.zeros((), dtype=dtype))


def hla2(q, k, v, gamma, normalized, eps, ridge, masked=True, detach_den=False):
    """SPEC's hla2: o = ((M N^T) ⊙ Γ) V with M = (Q K^T) ⊙ Γ, N = (Q K^T) ⊙ L, plus λ ((Q Q^T) ⊙ Γ) V."""
    n = q.shape[0]
    G = decay_matrix(n, gamma, q.dtype)
    L = (G != 0).to(q.dtype)
    M = (q @ k.T) * G
    N = (q @ k.T) * L if masked else q @ k.T  # unmasked: every i ≤ t pairs with every j ≤ t
    W = (M @ N.T) * G + ridge * (q @ q.T) * G
    num = W @ v
    if not normalized:
        return num
    den = W.sum(dim=1, keepdim=True) + eps
    return num / (den.detach() if detach_den else den)


def hla2_paper(q, k, v, gamma, normalized, eps, ridge):
    """Algorithm 1's decayed serial recurrence as printed (G_t = γ G + k kᵀ C_{t−1})."""
    n, d = q.shape
    dv = v.shape[1]
    S = torch.zeros(d, d, dtype=q.dtype)
    C = torch.zeros(d, dv, dtype=q.dtype)
    m = torch.zeros(d, dtype=q.dtype)
    G = torch.zeros(d, dv, dtype=q.dtype)
    h = torch.zeros(d, dtype=q.dtype)
    out = []
    for t in range(n):
        qt, kt, vt = q[t], k[t], v[t]
        G = gamma * G + torch.outer(kt, kt @ C)
        h = gamma * h + kt * (kt @ m)
        S = gamma * S + torch.outer(kt, kt)
        C = gamma * C + torch.outer(qt, vt)
        m = gamma * m + qt
        u = qt @ S + ridge * qt
        num = u @ C - qt @ G
        if normalized:
            num = num / (u @ m - qt @ h + eps)
        out.append(num)
    return torch.stack(out)


def ahla(q, k, v, gamma, normalized, eps, ridge):
    n = q.shape[0]
    G = decay_matrix(n, gamma, q.dtype)
    W = (q @ k.T) * G  # (q_t·k_i) γ^{t−i}, i ≤ t
    A = W @ W          # Σ_i (q_t·k_i) γ^{t−i} (q_i·k_j) γ^{i−j}
    num = A @ v
    if not normalized:
        return num
    return num / (A.sum(dim=1, keepdim=True) + eps)


def linear(q, k, v, gamma, normalized, eps, ridge):
    n = q.shape[0]
    W = (q @ k.T) * decay_matrix(n, gamma, q.dtype)
    num = W @ v
    if not normalized:
        return num
    return num / (W.sum(dim=1, keepdim=True) + eps)


def hla2_serial(q, k, v, gamma, normalized, eps, ridge, state=None):
    """The corrected serial recurrence (README's state table), from a state and returning the final one."""
    n, d = q.shape
    dv = v.shape[1]
    z = lambda *s: torch.zeros(*s, dtype=q.dtype)  # noqa: E731
    S, C, m, G, h = (state[x] for x in "SCmGh") if state else (z(d, d), z(d, dv), z(d), z(d, dv), z(d))
    out = []
    for t in range(n):
        qt, kt, vt = q[t], k[t], v[t]
        G = gamma * gamma * G + gamma * torch.outer(kt, kt @ C)
        h = gamma * gamma * h + gamma * kt * (kt @ m)
        S = gamma * S + torch.outer(kt, kt)
        C = gamma * C + torch.outer(qt, vt)
        m = gamma * m + qt
        u = qt @ S + ridge * qt
        num = u @ C - qt @ G
        if normalized:
            num = num / (u @ m - qt @ h + eps)
        out.append(num)
    return torch.stack(out), dict(S=S, C=C, m=m, G=G, h=h)


FORWARD = {"hla2": hla2, "ahla": ahla, "linear": linear}


def run(op, mistake, q, k, v, do, gamma, normalized, eps, ridge):
    """(o, dq, dk, dv) as NumPy arrays of q's dtype."""
    dt = q.dtype
    work = torch.float32 if mistake == "float32" else torch.float64
    Q, K, V, dO = (torch.tensor(np.asarray(x), dtype=work) for x in (q, k, v, do))
    f = FORWARD[op]
    with torch.no_grad():
        o = f(Q, K, V, gamma, normalized, eps, ridge)
    # the backward pass: the gradient of `g`, which is f unless the mistake says otherwise
    g = f
    if mistake == "paper-backward":
        g = hla2_paper
    elif mistake == "no-decay-backward":
        g = lambda *a: f(*a[:3], 1.0, *a[4:])  # noqa: E731
    elif mistake == "unmasked-backward":
        g = lambda *a: hla2(*a, masked=False)  # noqa: E731
    elif mistake == "detach-den":
        g = lambda *a: hla2(*a, detach_den=True)  # noqa: E731
    elif mistake.startswith("no-carry-backward@"):
        w = int(mistake.split("@")[1])

        def g(q_, k_, v_, *a):
            return torch.cat([f(q_[s:s + w], k_[s:s + w], v_[s:s + w], *a) for s in range(0, q_.shape[0], w)])
    elif mistake.startswith("carry-detached-backward@") and op == "hla2":
        w = int(mistake.split("@")[1])

        def g(q_, k_, v_, *a):  # chunks of w carrying the state forward, detached: no gradient through the carry
            parts, st = [], None
            for s in range(0, q_.shape[0], w):
                y_, st = hla2_serial(q_[s:s + w], k_[s:s + w], v_[s:s + w], *a, state=st)
                st = {x: t.detach() for x, t in st.items()}
                parts.append(y_)
            return torch.cat(parts)
    Qg, Kg, Vg = (x.clone().requires_grad_(True) for x in (Q, K, V))
    y = g(Qg, Kg, Vg, gamma, normalized, eps, ridge)
    (y * dO).sum().backward()
    dq, dk, dv = Qg.grad, Kg.grad, Vg.grad
    if mistake == "swap-dq-dk":
        dq, dk = dk, dq
    if mistake == "dv-late":  # dV read one token late (a shifted index in a hand-written kernel)
        dv = torch.cat([dv[1:], torch.zeros_like(dv[:1])])
    as_np = lambda x: x.detach().numpy().astype(dt)  # noqa: E731
    return as_np(o), as_np(dq), as_np(dk), as_np(dv)


def run_with_state(mistake, q, k, v, do, gamma, normalized, eps, ridge, state_in):
    """hla2 from a state: (o, dq, dk, dv, final state, ∂L/∂state_in or None), NumPy of q's dtype."""
    dt = q.dtype
    Q, K, V, dO = (torch.tensor(np.asarray(x), dtype=torch.float64) for x in (q, k, v, do))
    Qg, Kg, Vg = (x.clone().requires_grad_(True) for x in (Q, K, V))
    st = None
    if state_in:
        st = {p: torch.tensor(np.asarray(x), dtype=torch.float64).reshape(-1) if p in "mh" else
              torch.tensor(np.asarray(x), dtype=torch.float64).requires_grad_(True) for p, x in state_in.items()}
        for p in "mh":
            st[p].requires_grad_(True)
    # the backward from the zero state: the carried state forgotten in the backward pass
    y, final = hla2_serial(Qg, Kg, Vg, gamma, normalized, eps, ridge, None if mistake == "grad-ignores-state" else st)
    if mistake == "grad-ignores-state":
        with torch.no_grad():
            y_true, final = hla2_serial(Q, K, V, gamma, normalized, eps, ridge, st)
    (y * dO).sum().backward()
    if mistake == "grad-ignores-state":
        y = y_true
    as_np = lambda x: x.detach().numpy().astype(dt)  # noqa: E731
    dstate = None
    if st and mistake != "no-dstate":
        dstate = {p: as_np(x.grad if x.grad is not None else torch.zeros_like(x)) for p, x in st.items()}
        if mistake == "dstate-wrong":
            dstate["S"] = dstate["S"] * 2
        if mistake == "dstate-partial":  # the parts without a gradient (m, h when unnormalized) left unwritten
            dstate = {p: x for p, x in dstate.items() if normalized or p not in "mh"}
    return as_np(y), as_np(Qg.grad), as_np(Kg.grad), as_np(Vg.grad), {p: as_np(x) for p, x in final.items()}, dstate


def callable_for(name):
    op, mistake = (name.split(":", 1) + [""])[:2]

    def fn(q, k, v, do, gamma=1.0, normalized=False, eps=0.0, ridge=0.0):
        return run(op, mistake, q, k, v, do, gamma, normalized, eps, ridge)
    return fn


def main(name, root):
    op, mistake = (name.split(":", 1) + [""])[:2]
    for case in sorted(os.listdir(root)):
        cdir = os.path.join(root, case)
        meta = json.load(open(os.path.join(cdir, "case.json")))
        q, k, v, do = (np.load(os.path.join(cdir, f + ".npy")) for f in ("q", "k", "v", "do"))
        opts = (meta["gamma"], meta["normalized"], meta["eps"], meta["ridge"])
        if op == "hla2-serial":
            init = {p: np.load(os.path.join(cdir, "state_in", p + ".npy")) for p in meta["state_in"]}
            o, dq, dk, dv, final, dstate = run_with_state(mistake, q, k, v, do, *opts, init)
            if meta["state"]:
                os.makedirs(os.path.join(cdir, "state_out"), exist_ok=True)
                for p, x in final.items():
                    np.save(os.path.join(cdir, "state_out", p + ".npy"), x)
            if dstate:
                os.makedirs(os.path.join(cdir, "dstate_in"), exist_ok=True)
                for p, x in dstate.items():
                    np.save(os.path.join(cdir, "dstate_in", p + ".npy"), x)
        else:
            o, dq, dk, dv = run(op, mistake, q, k, v, do, *opts)
        np.save(os.path.join(cdir, "o.npy"), o)
        if mistake != "missing-dk":
            np.save(os.path.join(cdir, "dk.npy"), dk)
        np.save(os.path.join(cdir, "dq.npy"), dq)
        np.save(os.path.join(cdir, "dv.npy"), dv)


if __name__ == "__main__":
    # one process for every round of the battery (examples/protocol.py's rounds): torch is imported once
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "examples"))
    import protocol
    for root in protocol.rounds():
        main(sys.argv[1], root)
