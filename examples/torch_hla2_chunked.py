"""Second-order HLA (masked, SPEC's hla2) in PyTorch, chunk by chunk with matrix products — the form a GPU
kernel takes. The masked sum regroups as first-order linear attention over keys u_j = S_j q_j:

    o_t = Σ_{j≤t} γ^{2(t−j)} (q_t·u_j) v_j  +  λ Σ_{j≤t} γ^{t−j} (q_t·q_j) v_j,      S_j = Σ_{i≤j} γ^{j−i} k_i k_iᵀ

so per chunk of w tokens: U = carry + masked (Q Kᵀ) K, then a decayed linear-attention chunk over (Q, U, V).
The carries between chunks are S (d×d), Cu = Σ γ^{2(·)} u vᵀ, Cq = Σ γ^{(·)} q vᵀ and their normalizer sums.

    hla verify --op hla2 --gamma 0.99 --normalized --eps 1e-6 --exec "python3 examples/torch_hla2_chunked.py"
"""
import torch


def hla2_chunked(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0, initial_state=None, chunk=64):
    if initial_state is not None:
        raise NotImplementedError("this chunked example carries (S, Cu, Cq), not SPEC's state parts")
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    n, d = q.shape
    dt = q.dtype
    if normalized:  # a column of ones gives the denominators from the same products
        v = torch.cat([v, torch.ones(n, 1, dtype=dt)], dim=1)
    dv = v.shape[1]
    g = torch.tensor(gamma, dtype=dt)
    S = torch.zeros(d, d, dtype=dt)
    Cu = torch.zeros(d, dv, dtype=dt)
    Cq = torch.zeros(d, dv, dtype=dt)
    out = torch.empty(n, dv, dtype=dt)
    for s in range(0, n, chunk):
        Qc, Kc, Vc = q[s:s + chunk], k[s:s + chunk], v[s:s + chunk]
        L = Qc.shape[0]
        a = torch.arange(L, dtype=dt)
        diff = a[:, None] - a[None, :]
        mask = diff >= 0
        D1 = torch.where(mask, g ** diff.clamp(min=0), torch.zeros((), dtype=dt))  # γ^(a−b), b ≤ a
        D2 = D1 * D1
        up = g ** (a + 1)                                                          # γ^(a+1)
        U = up[:, None] * (Qc @ S) + (D1 * (Qc @ Kc.T)) @ Kc                       # u_t = S_t q_t
        O = (up * up)[:, None] * (Qc @ Cu) + (D2 * (Qc @ U.T)) @ Vc
        if ridge != 0.0:
            O = O + ridge * (up[:, None] * (Qc @ Cq) + (D1 * (Qc @ Qc.T)) @ Vc)
        out[s:s + L] = O
        tail = g ** (L - 1 - a)                                                    # γ^(L−1−b)
        S = g ** L * S + Kc.T @ (tail[:, None] * Kc)
        Cu = g ** (2 * L) * Cu + U.T @ ((tail * tail)[:, None] * Vc)
        Cq = g ** L * Cq + Qc.T @ (tail[:, None] * Vc)
    if normalized:
        out = out[:, :-1] / (out[:, -1:] + eps)
    return out.numpy()


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from protocol import serve
    serve(hla2_chunked)
