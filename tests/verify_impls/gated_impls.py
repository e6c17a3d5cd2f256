"""Gated implementations (per-token gates γ_t, `hla verify --gates`) for the tests: right ones, and ones wrong in
the ways gated kernels go wrong. NumPy only; each fn(q, k, v, gamma, normalized, eps, ridge, initial_state=None)
-> o, with gamma the gates, an array of shape (n,); the serial ones (hla2, linear, ahla and their mistakes) start
from initial_state ({part: array}, SPEC's parts) and, with return_state=True, return (o, final_state). They speak
the protocol through examples/protocol.py (as commands, the serial ones always return their state).

As a command:                        python3 gated_impls.py <name> DIR
As callables (hla_harness.verify):   gated_impls.IMPLS[<name>]
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import protocol  # noqa: E402


def gates_as_used(gamma, mistake):
    """The gate each token's step uses: γ_t, or a mistake's: "shift" (γ_{t−1}, misaligned by one token, γ_0 for
    the first), "early" (γ_{t+1}, misaligned the other way, the last token's own for the last), "mean" (one fixed
    γ, the mean of the gates: right only when the gates are constant)."""
    gamma = np.asarray(gamma)
    if mistake == "shift":
        return np.concatenate([gamma[:1], gamma[:-1]])
    if mistake == "early":
        return np.concatenate([gamma[1:], gamma[-1:]])
    if mistake == "mean":
        return np.full_like(gamma, gamma.mean())
    return gamma


def initial(parts, shapes, initial_state, dtype):
    """The state's parts from initial_state (vectors as 1-D), or zeros."""
    if initial_state is None:
        return [np.zeros(s, dtype=dtype) for s in shapes]
    return [np.asarray(initial_state[p], dtype=dtype).reshape(s).copy() for p, s in zip(parts, shapes)]


def first_gate_dropped(g, mistake, t):
    """mistake "undecayed-carry": the state handed in enters without the first token's gate (γ_0 taken as 1
    when there is an initial state): right from the zero state, and whenever γ_0 = 1."""
    return g.dtype.type(1) if mistake == "undecayed-carry" and t == 0 else g


def hla2(q, k, v, gamma, normalized, eps, ridge, initial_state=None, mistake="", return_state=False):
    """SPEC's gated serial hla2: G_t = γ_t² G_{t−1} + γ_t k_t (k_tᵀ C_{t−1}), S, C, m decayed by γ_t. mistake
    "algorithm1" keeps Algorithm 1's rule G_t = γ_t G_{t−1} + k_t k_tᵀ C_{t−1} with gates; "proposal" the gated-HLA
    proposal's G_t = √γ_t G_{t−1} + γ_t k_t (k_tᵀ C_{t−1}). The fixed-γ catalogue's mistakes with gates:
    "read-before-update" (o_t read from the state before token t's update and gate), "swap-qk", "normalization-flipped",
    "ridge-missing", "ridge-numerator-only" (the denominator without λ), "ridge-undecayed" (λ Σ_j (q_t·q_j) v_j from
    sums the gates never decay)."""
    dt = q.dtype.type
    n, d = q.shape
    dv = v.shape[1]
    if mistake == "swap-qk":
        q, k = k, q
    normalized = not normalized if mistake == "normalization-flipped" else normalized
    ridge = 0 if mistake == "ridge-missing" else ridge
    parts = ("S", "C", "m", "G", "h")
    S, C, m, G, h = initial(parts, ((d, d), (d, dv), (d,), (d, dv), (d,)), initial_state, q.dtype)
    R, r = np.zeros((d, dv), dtype=q.dtype), np.zeros(d, dtype=q.dtype)  # Σ q_j v_jᵀ, Σ q_j, undecayed
    o = np.empty((n, dv), dtype=q.dtype)

    def read(qt, lam, with_ridge_den=True):
        u = qt @ S + dt(lam) * qt
        num, den = u @ C - qt @ G, (u if with_ridge_den else qt @ S) @ m - qt @ h
        if mistake == "ridge-undecayed":
            num, den = num + dt(ridge) * (qt @ R), den + dt(ridge) * (qt @ r)
        return num / (den + dt(eps)) if normalized else num

    for t, g in enumerate(gates_as_used(gamma, mistake).astype(q.dtype)):
        g = first_gate_dropped(g, mistake, t) if initial_state is not None else g
        qt, kt, vt = q[t], k[t], v[t]
        if mistake == "read-before-update":
            o[t] = read(qt, ridge)
        keep, carry = (g, dt(1)) if mistake == "algorithm1" else (g * g, g)
        if mistake == "proposal":  # the gated-HLA proposal: G <- a_t G + k kᵀ (γ_t C), a_t = √γ_t
            keep, carry = np.sqrt(g), g
        G = keep * G + carry * np.outer(kt, kt @ C)
        h = keep * h + carry * kt * (kt @ m)
        S = g * S + np.outer(kt, kt)
        C = g * C + np.outer(qt, vt)
        m = g * m + qt
        R, r = R + np.outer(qt, vt), r + qt
        if mistake != "read-before-update":
            o[t] = read(qt, 0 if mistake == "ridge-undecayed" else ridge, mistake != "ridge-numerator-only")
    return (o, dict(zip(parts, (S, C, m, G, h)))) if return_state else o


def linear(q, k, v, gamma, normalized, eps, ridge, initial_state=None, mistake="", return_state=False):
    """Gated linear attention, serial: S_t = γ_t S_{t−1} + k_t v_tᵀ, z likewise."""
    dt = q.dtype.type
    n, d = q.shape
    S, z = initial(("S", "z"), ((d, v.shape[1]), (d,)), initial_state, q.dtype)
    o = np.empty((n, v.shape[1]), dtype=q.dtype)
    for t, g in enumerate(gates_as_used(gamma, mistake).astype(q.dtype)):
        g = first_gate_dropped(g, mistake, t) if initial_state is not None else g
        S = g * S + np.outer(k[t], v[t])
        z = g * z + k[t]
        o[t] = q[t] @ S / (q[t] @ z + dt(eps)) if normalized else q[t] @ S
    return (o, {"S": S, "z": z}) if return_state else o


def ahla(q, k, v, gamma, normalized, eps, ridge, initial_state=None, return_state=False):
    """Gated ahla (Algorithm 2 with γ_t): P_t = γ_t P_{t−1} + k_t v_tᵀ, E_t = γ_t E_{t−1} + k_t (q_tᵀ P_t)."""
    dt = q.dtype.type
    n, d = q.shape
    dv = v.shape[1]
    P, m, E, nn = initial(("P", "m", "E", "n"), ((d, dv), (d,), (d, dv), (d,)), initial_state, q.dtype)
    o = np.empty((n, dv), dtype=q.dtype)
    for t, g in enumerate(np.asarray(gamma, dtype=q.dtype)):
        qt, kt, vt = q[t], k[t], v[t]
        P = g * P + np.outer(kt, vt)
        m = g * m + kt
        E = g * E + np.outer(kt, qt @ P)
        nn = g * nn + kt * (qt @ m)
        o[t] = qt @ E / (qt @ nn + dt(eps)) if normalized else qt @ E
    return (o, {"P": P, "m": m, "E": E, "n": nn}) if return_state else o


def linear_chunked(q, k, v, gamma, normalized, eps, ridge, initial_state=None, chunk=16, mistake=""):
    """Gated linear attention chunk by chunk: within a chunk starting at s, c_a = Π_{r=s..s+a} γ_r; the carried
    state enters row a decayed by c_a and leaves decayed by c_{L−1}. The carry decayed by the wrong product: mistake
    "carry-product" without the chunk's first gate (c_a / γ_s: right whenever that gate is 1), "carry-extra-gate" with
    the previous chunk's last gate too (c_a γ_{s−1}), "carry-first-gate-power" by the chunk's first gate alone
    (γ_s^(a+1): right whenever the gates are constant)."""
    n = q.shape[0]
    if normalized:  # a column of ones gives the denominators from the same products
        v = np.concatenate([v, np.ones((n, 1), v.dtype)], axis=1)
    S = np.zeros((q.shape[1], v.shape[1]), dtype=q.dtype)
    out = np.empty((n, v.shape[1]), dtype=q.dtype)
    for s in range(0, n, chunk):
        Qc, Kc, Vc, gc = q[s:s + chunk], k[s:s + chunk], v[s:s + chunk], np.asarray(gamma[s:s + chunk], q.dtype)
        c = np.cumprod(gc)
        a = np.arange(len(gc))
        D = np.where(a[:, None] >= a[None, :], c[:, None] / c[None, :], 0).astype(q.dtype)  # Γ(s+a, s+b)
        carry = c
        if mistake == "carry-product":
            carry = c / gc[0]
        elif mistake == "carry-extra-gate" and s > 0:
            carry = c * q.dtype.type(gamma[s - 1])
        elif mistake == "carry-first-gate-power":
            carry = gc[0] ** (a + 1).astype(q.dtype)
        out[s:s + chunk] = carry[:, None] * (Qc @ S) + (D * (Qc @ Kc.T)) @ Vc
        S = carry[-1] * S + Kc.T @ ((c[-1] / c)[:, None] * Vc)
    if normalized:
        out = out[:, :-1] / (out[:, -1:] + q.dtype.type(eps))
    return out


def hla2_chunked(q, k, v, gamma, normalized, eps, ridge, initial_state=None, mistake=""):
    """Gated hla2 in SPEC's u-form, chunk by chunk: o_t = Σ_j Γ(t,j)² (q_t·u_j) v_j with u_j = S_j q_j, i.e. two
    gated linear attentions (u with gates γ_t over (q, k, k), then o with gates γ_t² over (q, u, v)), plus ridge
    λ Σ_j Γ(t,j) (q_t·q_j) v_j. The carry mistakes as in linear_chunked, in every pass."""
    g = np.asarray(gamma, dtype=q.dtype)
    if normalized:
        v = np.concatenate([v, np.ones((q.shape[0], 1), v.dtype)], axis=1)
    u = linear_chunked(q, k, k, g, False, 0, 0, mistake=mistake)
    out = linear_chunked(q, u, v, g * g, False, 0, 0, mistake=mistake)
    if ridge != 0:
        out = out + q.dtype.type(ridge) * linear_chunked(q, q, v, g, False, 0, 0, mistake=mistake)
    if normalized:
        out = out[:, :-1] / (out[:, -1:] + q.dtype.type(eps))
    return out


def bf16(x):
    """x rounded to bfloat16 (to nearest, ties to even), as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    b = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return b.view(np.float32)


def in_bf16(f):
    """A kernel whose inputs are bfloat16 (the gates stay float32) and which computes in float32, outputs rounded to
    bfloat16: `--precision bf16`'s model."""
    def fn(q, k, v, gamma, normalized, eps, ridge, initial_state=None, **kw):
        out = f(bf16(q), bf16(k), bf16(v), np.asarray(gamma, np.float32), normalized, eps, ridge, initial_state, **kw)
        o, st = out if isinstance(out, tuple) else (out, None)
        o = bf16(o).astype(q.dtype)
        return (o, st) if st is not None else o
    return fn


def bf16_cumsum(x):
    """The running sum of x with every partial sum rounded to bfloat16 (a cumulative sum accumulated in bf16)."""
    out, acc = np.empty_like(x), np.float32(0)
    for i, xi in enumerate(x):
        acc = bf16(acc + xi)
        out[i] = acc
    return out


def linear_chunked_bf16_operands(q, k, v, gamma, normalized, eps, ridge, initial_state=None, return_state=False,
                                 chunk=32, log_gates_in_bf16=False):
    """Gated linear attention as chunked bf16 kernels are written (GLA / fla style): log-gates cumulated within each
    chunk in float32, every matmul operand rounded to bfloat16 — the gate-weighted ones too (Q Kᵀ ⊙ F, Q weighted
    from the chunk's start, K weighted to its end) — with float32 accumulation and a float32 carried state (S, z);
    outputs rounded to bfloat16. A correct kernel of `--precision bf16`, whose gate products (e.g. 441/1024) are not
    bfloat16 numbers where the emulated kernel's are exact. log_gates_in_bf16: the within-chunk cumulative log-gates
    summed in bfloat16 too (an accumulation in the format, not an operand rounding)."""
    f32 = np.float32
    n, dv = q.shape[0], v.shape[1]
    Sz = np.zeros((q.shape[1], dv + 1), f32)
    if initial_state is not None:
        Sz = np.concatenate([np.asarray(initial_state["S"], f32), np.asarray(initial_state["z"], f32)[:, None]], 1)
    Q, K = bf16(q), bf16(k)
    V1 = np.concatenate([bf16(v), np.ones((n, 1), f32)], axis=1)
    out = np.empty((n, dv + 1), f32)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        L = (bf16_cumsum if log_gates_in_bf16 else np.cumsum)(np.log(np.asarray(gamma[s:e], f32)))
        a = np.arange(e - s)
        F = np.where(a[:, None] >= a[None, :], np.exp(np.minimum(L[:, None] - L[None, :], 0)), 0).astype(f32)
        out[s:e] = bf16((Q[s:e] @ K[s:e].T) * F) @ V1[s:e] + bf16(Q[s:e] * np.exp(L)[:, None]) @ Sz
        Sz = np.exp(L[-1]) * Sz + bf16(K[s:e] * np.exp(L[-1] - L)[:, None]).T @ V1[s:e]
    o = out[:, :dv] / (out[:, dv:] + f32(eps)) if normalized else out[:, :dv]
    o = bf16(o).astype(q.dtype)
    return (o, {"S": Sz[:, :dv].astype(q.dtype), "z": Sz[:, dv].astype(q.dtype)}) if return_state else o


def linear_naive_cumprod(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    """Gated linear attention with every decay a quotient of cumulative products over the whole sequence:
    o_t = Σ_{j≤t} (P_t / P_j) (q_t·k_j) v_j, P_t = Π_{r≤t} γ_r — the formulation many kernels start from. Exact in
    exact arithmetic; in floating point P leaves the normal range at long gate spans (0/0 then), and before that each
    quotient carries P's accumulated rounding."""
    dt = q.dtype.type
    P = np.cumprod(np.asarray(gamma, dtype=q.dtype))
    D = np.tril(P[:, None] / P[None, :])
    W = (q @ k.T) * D
    o = W @ v
    if normalized:
        o = o / (W.sum(axis=1, keepdims=True) + dt(eps))
    return o.astype(q.dtype)


IMPLS = {
    "hla2": hla2,
    "hla2-algorithm1-rule": lambda *a, **kw: hla2(*a, **kw, mistake="algorithm1"),
    "hla2-gates-shifted": lambda *a, **kw: hla2(*a, **kw, mistake="shift"),
    "hla2-mean-gate": lambda *a, **kw: hla2(*a, **kw, mistake="mean"),
    "linear": linear,
    "linear-gates-shifted": lambda *a, **kw: linear(*a, **kw, mistake="shift"),
    "linear-mean-gate": lambda *a, **kw: linear(*a, **kw, mistake="mean"),
    "linear-chunked": linear_chunked,
    "linear-chunked-carry-product": lambda *a, **kw: linear_chunked(*a, **kw, mistake="carry-product"),
    "hla2-chunked": hla2_chunked,
    "hla2-chunked-carry-product": lambda *a, **kw: hla2_chunked(*a, **kw, mistake="carry-product"),
    "ahla": ahla,
    "hla2-proposal": lambda *a, **kw: hla2(*a, **kw, mistake="proposal"),
    "linear-gates-early": lambda *a, **kw: linear(*a, **kw, mistake="early"),
    "linear-chunked-carry-extra-gate": lambda *a, **kw: linear_chunked(*a, **kw, mistake="carry-extra-gate"),
    "linear-chunked-64-carry-extra-gate":
        lambda *a, **kw: linear_chunked(*a, **kw, chunk=64, mistake="carry-extra-gate"),
    "linear-chunked-carry-first-gate-power": lambda *a, **kw: linear_chunked(*a, **kw,
                                                                             mistake="carry-first-gate-power"),
    "hla2-chunked-carry-extra-gate": lambda *a, **kw: hla2_chunked(*a, **kw, mistake="carry-extra-gate"),
    "hla2-chunked-carry-first-gate-power": lambda *a, **kw: hla2_chunked(*a, **kw, mistake="carry-first-gate-power"),
    "hla2-undecayed-carry": lambda *a, **kw: hla2(*a, **kw, mistake="undecayed-carry"),
    **{f"hla2-{m}": (lambda m: lambda *a, **kw: hla2(*a, **kw, mistake=m))(m)
       for m in ("read-before-update", "swap-qk", "normalization-flipped", "ridge-missing", "ridge-numerator-only",
                 "ridge-undecayed")},
    "hla2-bf16": in_bf16(hla2),
    "linear-chunked-bf16-operands": linear_chunked_bf16_operands,
    "hla2-algorithm1-rule-bf16": in_bf16(lambda *a, **kw: hla2(*a, **kw, mistake="algorithm1")),
    "linear-undecayed-carry": lambda *a, **kw: linear(*a, **kw, mistake="undecayed-carry"),
    "linear-naive-cumprod": linear_naive_cumprod,
    "linear-chunked-bf16-log-gates": lambda *a, **kw: linear_chunked_bf16_operands(*a, **kw, log_gates_in_bf16=True),
}
# The serial ones, which take an initial state and can return their final state.
STATEFUL = {"hla2", "hla2-algorithm1-rule", "hla2-gates-shifted", "hla2-mean-gate", "linear", "linear-gates-shifted",
            "linear-mean-gate", "ahla", "hla2-undecayed-carry", "linear-undecayed-carry", "hla2-proposal",
            "linear-gates-early", "linear-chunked-bf16-operands", "linear-chunked-bf16-log-gates"}


def with_state(name):
    """IMPLS[name] returning (o, final_state) (hla_harness.verify(..., state=True) and the command)."""
    return lambda *a, **kw: IMPLS[name](*a, **kw, return_state=True)


if __name__ == "__main__":
    name = sys.argv[1]
    protocol.serve(with_state(name) if name in STATEFUL else IMPLS[name])  # every round, one process
