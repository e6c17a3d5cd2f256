"""The GPU backward's algebra (fast/cuda/pass.cu, `Backward`), checked where every machine can: a NumPy model of the
same chain of first-order passes — each pass's gradients as passes forward and backward in time, the reversed
sequence's gates shifted by one token, ∂L/∂log γ_t = p (g_t·out_t − b_t·∂L/∂b_t) summed from the end, the normalized
upstream, hla2's ridge pass, AHLA's two passes, and pass.cu's padding of a sequence to whole chunks — against central
differences of the forward it differentiates. This checks the derivation the CUDA code implements, not the CUDA code
itself: that is the `[gpu]` case "hla verify through exec-form" on the device (docs/gpu.md).
"""
import unittest

import numpy as np


def gam(g, t, j):
    """Γ(t, j) = Π_{r=j+1..t} γ_r."""
    return np.prod(g[j + 1:t + 1])


def gated_pass(p, a, b, c, g):
    """out_t = Σ_{j≤t} Γ(t,j)^p (a_t·b_j) c_j, from the zero state."""
    out = np.zeros((a.shape[0], c.shape[1]))
    for t in range(a.shape[0]):
        for j in range(t + 1):
            out[t] += gam(g, t, j) ** p * (a[t] @ b[j]) * c[j]
    return out


def reversed_gates(g, t_len, tp):
    """pass.cu's reversed_gates: γ'_r = γ_{Tp − r}, 1 at r = 0 and past the last real token."""
    return np.array([1.0 if (r == 0 or tp - r >= t_len) else g[tp - r] for r in range(tp)])


def pass_backward(p, a, b, c, gup, out, g):
    rev, rg = (lambda x: x[::-1]), reversed_gates(g, len(g), len(g))
    da = gated_pass(p, gup, c, b, g)
    db = rev(gated_pass(p, rev(c), rev(gup), rev(a), rg))
    dc = rev(gated_pass(p, rev(b), rev(a), rev(gup), rg))
    return da, db, dc, p * ((gup * out).sum(1) - (b * db).sum(1))


def forward(op, q, k, v, g, normalized, eps, lam):
    va = np.hstack([v, np.ones((len(q), 1))])
    u = r = None
    if op == "linear":
        num = gated_pass(1, q, k, va, g)
    elif op == "hla2":
        u = gated_pass(1, q, k, k, g)
        num = gated_pass(2, q, u, va, g)
        r = gated_pass(1, q, q, va, g) if lam else None
    else:
        u = gated_pass(1, q, k, va, g)
        num = gated_pass(1, q, k, u, g)
    n_all = num + (lam * r if r is not None else 0)
    dv = v.shape[1]
    o = n_all[:, :dv] / (n_all[:, dv:] + eps) if normalized else n_all[:, :dv]
    return o, num, u, r, va, n_all


def backward(op, q, k, v, g, d_o, normalized, eps, lam):
    o, num, u, r, va, n_all = forward(op, q, k, v, g, normalized, eps, lam)
    dv = v.shape[1]
    up = np.zeros_like(va)
    if normalized:
        den = n_all[:, dv] + eps
        up[:, :dv] = d_o / den[:, None]
        up[:, dv] = -(d_o * o).sum(1) / den
    else:
        up[:, :dv] = d_o
    dq, dk, dva, dl = np.zeros_like(q), np.zeros_like(k), np.zeros_like(va), np.zeros(len(q))

    def add(res, targets):
        nonlocal dl
        for x, t in zip(res[:3], targets):
            t += x
        dl = dl + res[3]

    if op == "linear":
        add(pass_backward(1, q, k, va, up, num, g), (dq, dk, dva))
    elif op == "hla2":
        du = np.zeros_like(u)
        add(pass_backward(2, q, u, va, up, num, g), (dq, du, dva))
        if r is not None:
            add(pass_backward(1, q, q, va, lam * up, r, g), (dq, dq, dva))
        add(pass_backward(1, q, k, k, du, u, g), (dq, dk, dk))
    else:
        du = np.zeros_like(u)
        add(pass_backward(1, q, k, u, up, num, g), (dq, dk, du))
        add(pass_backward(1, q, k, va, du, u, g), (dq, dk, dva))
    return dq, dk, dva[:, :dv], np.cumsum(dl[::-1])[::-1] / g


def central(f, x, h=1e-6):
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        out[i] = (f(xp) - f(xm)) / (2 * h)
    return out


class GpuBackwardAlgebra(unittest.TestCase):
    def test_every_operator_and_option_against_central_differences(self):
        rng = np.random.default_rng(52)
        n, d, dv = 7, 3, 2
        for op, normalized, eps, lam in [("linear", False, 0, 0), ("linear", True, 0.5, 0), ("hla2", False, 0, 0),
                                         ("hla2", True, 0.5, 0), ("hla2", True, 0.5, 0.7), ("hla2", False, 0, 0.3),
                                         ("ahla", False, 0, 0), ("ahla", True, 0.5, 0)]:
            q, k, v = rng.normal(size=(n, d)), rng.normal(size=(n, d)), rng.normal(size=(n, dv))
            if normalized:  # denominators well away from 0
                q, k = np.abs(q), np.abs(k)
            g, d_o = rng.uniform(0.5, 1, size=n), rng.normal(size=(n, dv))

            def loss(q_, k_, v_, g_):
                return (forward(op, q_, k_, v_, g_, normalized, eps, lam)[0] * d_o).sum()

            got = backward(op, q, k, v, g, d_o, normalized, eps, lam)
            want = (central(lambda x: loss(x, k, v, g), q), central(lambda x: loss(q, x, v, g), k),
                    central(lambda x: loss(q, k, x, g), v), central(lambda x: loss(q, k, v, x), g))
            for name, a, b in zip(("dq", "dk", "dv", "dgamma"), got, want):
                scale = max(1.0, np.abs(b).max())
                self.assertLess(np.abs(a - b).max() / scale, 1e-6, f"{op} normalized={normalized} ridge={lam} {name}")

    def test_a_padded_sequence_reverses_exactly(self):
        # pass.cu pads each sequence to whole chunks (zero rows, gate 1) and reverses the padded rows: the reversed
        # pass then starts with the padding, and its gates are pass.cu's reversed_gates over the padded length
        rng = np.random.default_rng(7)
        t_len, tp = 7, 12
        a, c, gup = rng.normal(size=(t_len, 3)), rng.normal(size=(t_len, 2)), rng.normal(size=(t_len, 2))
        g = rng.uniform(0.5, 1, size=t_len)

        def pad(x):
            return np.vstack([x, np.zeros((tp - t_len, x.shape[1]))])

        rev = (lambda x: x[::-1])
        db_padded = rev(gated_pass(1, rev(pad(c)), rev(pad(gup)), rev(pad(a)), reversed_gates(g, t_len, tp)))[:t_len]
        db = pass_backward(1, a, a, c, gup, gated_pass(1, a, a, c, g), g)[1]
        self.assertEqual(np.abs(db_padded - db).max(), 0.0)


if __name__ == "__main__":
    unittest.main()
