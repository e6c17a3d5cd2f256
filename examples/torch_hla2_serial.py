"""Second-order HLA (masked, SPEC's hla2) in PyTorch, one token at a time — the streaming recurrence a user
writes first (paper §3.1, Algorithm 1), with decay, ridge, normalization and a carried state.

    state (d = head width, dv = value width):  S = Σ k kᵀ (d×d), C = Σ q vᵀ (d×dv), m = Σ q (d),
                                               G = Σ k kᵀ C_prev (d×dv), h = Σ k kᵀ m_prev (d)
    o_t = q_tᵀ (S_t + λI) C_t − q_tᵀ G_t   [÷ (q_tᵀ (S_t + λI) m_t − q_tᵀ h_t + ε)]

With decay γ every pair (i ≤ j ≤ t) carries γ^((t−i)+(t−j)); so G and h advance by γ² and take the new
cross term with one γ (the harness's ledger shows that the paper's printed G_t = γG_{t−1} + k kᵀ C_{t−1}
is not this operator).

    hla verify --op hla2 --gamma 0.99 --normalized --eps 1e-6 --state --exec "python3 examples/torch_hla2_serial.py"
"""
import torch


def hla2_serial(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None):
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    n, d = q.shape
    dv = v.shape[1]
    dt = q.dtype
    if initial_state is None:
        S, C, m = torch.zeros(d, d, dtype=dt), torch.zeros(d, dv, dtype=dt), torch.zeros(d, dtype=dt)
        G, h = torch.zeros(d, dv, dtype=dt), torch.zeros(d, dtype=dt)
    else:
        S, C, m, G, h = (torch.from_numpy(initial_state[p]).to(dt).reshape(s)
                         for p, s in zip("SCmGh", ((d, d), (d, dv), (d,), (d, dv), (d,))))
    out = torch.empty(n, dv, dtype=dt)
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
        out[t] = num
    state = {"S": S, "C": C, "m": m, "G": G, "h": h}
    return out.numpy(), {p: x.numpy() for p, x in state.items()}


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from protocol import serve
    serve(hla2_serial)
