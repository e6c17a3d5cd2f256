"""Asymmetric second-order HLA (SPEC's ahla) in PyTorch: Algorithm 2 of the paper with its §6.1 decay.

    P = Σ k vᵀ, m = Σ k, E = Σ_i k_i (q_iᵀ P_i), n = Σ_i k_i (q_iᵀ m_i);   o_t = q_tᵀ E_t  [÷ (q_tᵀ n_t + ε)]

    hla verify --op ahla --gamma 0.9 --normalized --eps 1e-3 --state --exec "python3 examples/torch_ahla.py"
"""
import torch


def ahla(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None):
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    n, d = q.shape
    dv = v.shape[1]
    dt = q.dtype
    if initial_state is None:
        P, m, E, nn = (torch.zeros(*s, dtype=dt) for s in ((d, dv), (d,), (d, dv), (d,)))
    else:
        P, m, E, nn = (torch.from_numpy(initial_state[p]).to(dt).reshape(s)
                       for p, s in zip(("P", "m", "E", "n"), ((d, dv), (d,), (d, dv), (d,))))
    out = torch.empty(n, dv, dtype=dt)
    for t in range(n):
        qt, kt, vt = q[t], k[t], v[t]
        P = gamma * P + torch.outer(kt, vt)
        m = gamma * m + kt
        E = gamma * E + torch.outer(kt, qt @ P)
        nn = gamma * nn + kt * (qt @ m)
        num = qt @ E
        out[t] = num / (qt @ nn + eps) if normalized else num
    return out.numpy(), {"P": P.numpy(), "m": m.numpy(), "E": E.numpy(), "n": nn.numpy()}


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from protocol import serve
    serve(ahla)
