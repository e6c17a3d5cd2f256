"""Outside implementations for the `hla verify` tests: right ones, wrong ones in known ways, and ones that
break the protocol. NumPy only (imports fast), each a plain function fn(q, k, v, gamma, normalized, eps,
ridge, initial_state=None) -> (o, final_state).

As a command (the black-box protocol):   python3 impls.py <name> DIR   (one round per process: it does not answer
                                         on HLA_VERIFY_REPLY_FD, so hla starts it afresh every round)
As callables (hla_harness.verify):       impls.callable_for(<name>, state=False)
"""
import json
import os
import sys
import time

import numpy as np


# ---- second order, masked (hla2): the serial recurrence with the decay that matches SPEC ---------------------
def hla2(q, k, v, gamma, normalized, eps, ridge, initial_state=None, decay_rule="spec", f32_inside=False,
         reset_every=0, skip_eps=False, output_first=False, break_state=False, eps_after=False, pad_to=0):
    dt = q.dtype
    if f32_inside:
        q, k, v = q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)
    n, d = q.shape
    dv = v.shape[1]

    def z(*s):
        return np.zeros(s, dtype=q.dtype)

    S, C, m, G, h = z(d, d), z(d, dv), z(d), z(d, dv), z(d)
    if initial_state is not None:
        S, C, m, G, h = (np.array(initial_state[x], dtype=q.dtype).reshape(y.shape) for x, y in
                         zip("SCmGh", (S, C, m, G, h)))
    o = np.empty((n, dv), dtype=q.dtype)
    g = q.dtype.type(gamma)
    for t in range(n):
        if reset_every and t % reset_every == 0:
            S, C, m, G, h = z(d, d), z(d, dv), z(d), z(d, dv), z(d)
        qt, kt, vt = q[t], k[t], v[t]
        if output_first:
            u = qt @ S + ridge * qt
            o[t] = u @ C - qt @ G
        # the cross-summaries read C_{t-1}, m_{t-1}
        keep, carry = (g * g, g) if decay_rule == "spec" else (g, 1)
        G = keep * G + carry * np.outer(kt, kt @ C)
        h = keep * h + carry * kt * (kt @ m)
        S = g * S + np.outer(kt, kt)
        C = g * C + np.outer(qt, vt)
        m = g * m + qt
        if output_first:
            continue
        u = qt @ S + q.dtype.type(ridge) * qt
        num = u @ C - qt @ G
        if normalized:
            den = u @ m - qt @ h
            num = num / den + q.dtype.type(eps) if eps_after else num / (den if skip_eps else den + q.dtype.type(eps))
        o[t] = num
    # a chunked kernel's zero padding to a multiple of pad_to tokens, which still decays the state it returns
    for _ in range(-n % pad_to if pad_to else 0):
        S, C, m, G, h = g * S, g * C, g * m, g * g * G, g * g * h
    state = dict(S=S, C=C, m=m, G=G, h=h)
    if break_state:
        state["G"] = state["G"] * 2
    return o.astype(dt), {x: y.astype(dt) for x, y in state.items()}


# ---- reduced precisions: bfloat16 emulated in NumPy (round to nearest even on float32's upper 16 bits) ------
def bf16(x):
    x = np.array(x, dtype=np.float32, ndmin=1)
    b = x.view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return b.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def round_significand(x, bits):
    """x rounded to nearest (ties away; enough for a test kernel) with a significand of `bits` bits: tf32 and fp16
    have 11, bf16 8. Exponent range is not emulated (the battery's inputs are far from fp16's limits)."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.round(m * 2.0 ** bits) / 2.0 ** bits, e).astype(np.float32)


SIGNIFICAND_BITS = {"tf32": 11, "fp16": 11, "bf16": 8}


def hla2_format_kernel(fmt):
    """A tensor-core kernel for `fmt`: inputs and outputs in the format, arithmetic and state in fp32."""
    def kernel(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
        dt, r = q.dtype, (lambda x: round_significand(x, SIGNIFICAND_BITS[fmt]))
        o, state = hla2(r(q), r(k), r(v), gamma, normalized, eps, ridge, initial_state=initial_state)
        return r(o).astype(dt), {x: y.astype(dt) for x, y in state.items()}
    return kernel


def hla2_bf16_kernel(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    """A bf16 tensor-core kernel as it should be: inputs and outputs in bf16, arithmetic and state in fp32."""
    dt = q.dtype
    o, state = hla2(bf16(q), bf16(k), bf16(v), gamma, normalized, eps, ridge, initial_state=initial_state)
    return bf16(o).astype(dt), {x: y.astype(dt) for x, y in state.items()}


def hla2_bf16_accumulate(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    """The same recurrence with every state update and read-out rounded to bf16: bf16 accumulation."""
    dt = q.dtype
    q, k, v = bf16(q), bf16(k), bf16(v)
    n, d = q.shape
    dv = v.shape[1]
    S, C, m, G, h = (np.zeros(s, np.float32) for s in ((d, d), (d, dv), (d,), (d, dv), (d,)))
    g = np.float32(gamma)
    o = np.empty((n, dv), np.float32)
    for t in range(n):
        qt, kt, vt = q[t], k[t], v[t]
        G = bf16(g * g * G + g * np.outer(kt, bf16(kt @ C)))
        h = bf16(g * g * h + g * kt * bf16(kt @ m))
        S, C, m = bf16(g * S + np.outer(kt, kt)), bf16(g * C + np.outer(qt, vt)), bf16(g * m + qt)
        u = bf16(qt @ S + np.float32(ridge) * qt)
        num = bf16(bf16(u @ C) - bf16(qt @ G))
        if normalized:
            num = bf16(num / (bf16(bf16(u @ m) - bf16(qt @ h)) + np.float32(eps)))
        o[t] = num
    return o.astype(dt), dict(S=S, C=C, m=m, G=G, h=h)


# ---- second order, chunk by chunk with matrix products (examples/torch_hla2_chunked.py in NumPy, float32) -------
def hla2_chunked(q, k, v, gamma, normalized, eps, ridge, initial_state=None, chunk=16, products=None, mistake=""):
    """The u-form chunk algorithm: per chunk U = carry + masked (Q Kᵀ) K, then a decayed linear-attention chunk
    over (Q, U, V). products="tf32" | "bf16" | "fp16" rounds both operands of every matrix product to the format
    and accumulates in float32: what Triton's tl.dot does by default for float32 inputs (tf32), or a bf16 tensor
    core. mistake: "mask-diagonal" (the intra-chunk mask diff > 0), "carry-exponent" (the carry decayed γ^a for
    γ^(a+1))."""
    if initial_state is not None:
        raise NotImplementedError("this chunked kernel carries (S, Cu, Cq), not SPEC's state parts")
    dt, f32 = q.dtype, np.float32
    r = (lambda x: x) if products is None else (lambda x: round_significand(x, SIGNIFICAND_BITS[products]))
    mm = lambda a, b: (r(a) @ r(b)).astype(f32)  # noqa: E731
    q, k, v = (x.astype(f32) for x in (q, k, v))
    n, d = q.shape
    if normalized:  # a column of ones gives the denominators from the same products
        v = np.concatenate([v, np.ones((n, 1), f32)], axis=1)
    dv = v.shape[1]
    g = f32(gamma)
    S, Cu, Cq = np.zeros((d, d), f32), np.zeros((d, dv), f32), np.zeros((d, dv), f32)
    out = np.empty((n, dv), f32)
    for s in range(0, n, chunk):
        Qc, Kc, Vc = q[s:s + chunk], k[s:s + chunk], v[s:s + chunk]
        L = Qc.shape[0]
        a = np.arange(L)
        diff = a[:, None] - a[None, :]
        mask = diff > 0 if mistake == "mask-diagonal" else diff >= 0
        D1 = np.where(mask, g ** np.maximum(diff, 0).astype(f32), f32(0)).astype(f32)  # γ^(a−b), b ≤ a
        D2 = D1 * D1
        up = (g ** (a + (0 if mistake == "carry-exponent" else 1)).astype(f32)).astype(f32)  # γ^(a+1)
        U = up[:, None] * mm(Qc, S) + mm(D1 * mm(Qc, Kc.T), Kc)  # u_t = S_t q_t
        O = (up * up)[:, None] * mm(Qc, Cu) + mm(D2 * mm(Qc, U.T), Vc)
        if ridge != 0.0:
            O = O + f32(ridge) * (up[:, None] * mm(Qc, Cq) + mm(D1 * mm(Qc, Qc.T), Vc))
        out[s:s + L] = O
        tail = (g ** (L - 1 - a).astype(f32)).astype(f32)  # γ^(L−1−b)
        S = g ** L * S + mm(Kc.T, tail[:, None] * Kc)
        Cu = g ** (2 * L) * Cu + mm(U.T, (tail * tail)[:, None] * Vc)
        Cq = g ** L * Cq + mm(Qc.T, tail[:, None] * Vc)
    if normalized:
        out = out[:, :-1] / (out[:, -1:] + f32(eps))
    return out.astype(dt), None


def ahla(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    n, d = q.shape
    dv = v.shape[1]
    P, m, E, nn = (np.zeros(s, dtype=q.dtype) for s in ((d, dv), (d,), (d, dv), (d,)))
    if initial_state is not None:
        P, m, E, nn = (np.array(initial_state[x], dtype=q.dtype) for x in ("P", "m", "E", "n"))
    g = q.dtype.type(gamma)
    o = np.empty((n, dv), dtype=q.dtype)
    for t in range(n):
        qt, kt, vt = q[t], k[t], v[t]
        P = g * P + np.outer(kt, vt)
        m = g * m + kt
        E = g * E + np.outer(kt, qt @ P)
        nn = g * nn + kt * (qt @ m)
        num = qt @ E
        if normalized:
            num = num / (qt @ nn + q.dtype.type(eps))
        o[t] = num
    return o, dict(P=P, m=m, E=E, n=nn)


def linear(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
    n, d = q.shape
    S, z = np.zeros((d, v.shape[1]), dtype=q.dtype), np.zeros(d, dtype=q.dtype)
    if initial_state is not None:
        S, z = np.array(initial_state["S"], dtype=q.dtype), np.array(initial_state["z"], dtype=q.dtype)
    g = q.dtype.type(gamma)
    o = np.empty((n, v.shape[1]), dtype=q.dtype)
    for t in range(n):
        S = g * S + np.outer(k[t], v[t])
        z = g * z + k[t]
        num = q[t] @ S
        o[t] = num / (q[t] @ z + q.dtype.type(eps)) if normalized else num
    return o, dict(S=S, z=z)


def state_v_first(impl, kv_parts):
    """impl with its state's [K, V] parts kept as [V, K], handed back and read in that layout (fla's ops with
    state_v_first=True, fla/ops/common/chunk_h.py): `hla verify` names it convention:transposed-state."""
    def run(q, k, v, *a, initial_state=None, **kw):
        d, dv = q.shape[1], v.shape[1]
        if initial_state is not None:  # read as a kernel reads the memory it is given: [V, K]
            initial_state = {p: np.asarray(x).reshape(dv, d).T if p in kv_parts else x
                             for p, x in initial_state.items()}
        o, state = impl(q, k, v, *a, initial_state=initial_state, **kw)
        return o, {p: np.ascontiguousarray(x.T) if p in kv_parts else x for p, x in state.items()}
    return run


IMPLS = {
    "hla2": hla2,
    "hla2-paper-decay": lambda *a, **kw: hla2(*a, **kw, decay_rule="paper"),
    "hla2-float32-inside": lambda *a, **kw: hla2(*a, **kw, f32_inside=True),
    "hla2-chunk-reset-64": lambda *a, **kw: hla2(*a, **kw, reset_every=64),
    "hla2-eps-missing": lambda *a, **kw: hla2(*a, **kw, skip_eps=True),
    "hla2-output-first": lambda *a, **kw: hla2(*a, **kw, output_first=True),
    "hla2-broken-state": lambda *a, **kw: hla2(*a, **kw, break_state=True),
    # a kernel that tiles the head dimension by 8 and forgets the tiles after the first: right for d <= 8
    "hla2-first8-features": lambda q, k, v, *a, **kw: hla2(q[:, :8].copy(), k[:, :8].copy(), v, *a, **kw),
    "hla2-bf16-kernel": hla2_bf16_kernel,
    "hla2-bf16-accumulate": hla2_bf16_accumulate,
    **{f"hla2-{fmt}-kernel-rounded": hla2_format_kernel(fmt) for fmt in SIGNIFICAND_BITS},
    "hla2-eps-after": lambda *a, **kw: hla2(*a, **kw, eps_after=True),
    "hla2-padded-state-16": lambda *a, **kw: hla2(*a, **kw, pad_to=16),
    "hla2-chunked": hla2_chunked,
    **{f"hla2-chunked-{fmt}": (lambda fmt: lambda *a, **kw: hla2_chunked(*a, **kw, products=fmt))(fmt)
       for fmt in SIGNIFICAND_BITS},
    "hla2-chunked-mask-diagonal": lambda *a, **kw: hla2_chunked(*a, **kw, mistake="mask-diagonal"),
    "hla2-chunked-carry-exponent": lambda *a, **kw: hla2_chunked(*a, **kw, mistake="carry-exponent"),
    "ahla": ahla,
    "linear": linear,
    "hla2-state-v-first": state_v_first(hla2, ("C", "G")),
    "linear-state-v-first": state_v_first(linear, ("S",)),
}


def callable_for(name, state=False):
    """The implementation as hla_harness.verify calls it."""
    impl = IMPLS[name]
    if state:
        return lambda q, k, v, initial_state=None, **o: impl(q, k, v, initial_state=initial_state, **o)
    return lambda q, k, v, **o: impl(q, k, v, **o)[0]


# ---- the black-box protocol, with ways of breaking it ------------------------------------------------------
def main(name, root):
    misbehave = name.split(":", 1)[1] if ":" in name else ""
    impl = IMPLS[name.split(":", 1)[0]]
    if misbehave == "crash":
        print("Traceback (most recent call last):\nRuntimeError: CUDA out of memory (simulated)", file=sys.stderr)
        sys.exit(1)
    if misbehave == "hang":
        time.sleep(3600)
    for case in sorted(os.listdir(root)):
        cdir = os.path.join(root, case)
        meta = json.load(open(os.path.join(cdir, "case.json")))
        q, k, v = (np.load(os.path.join(cdir, f + ".npy")) for f in "qkv")
        init = None
        if meta["state_in"]:
            init = {p: np.load(os.path.join(cdir, "state_in", p + ".npy")) for p in meta["state_in"]}
        if misbehave == "strict-state-shapes":
            # takes the state parts only in the README's shapes: the vectors (m, h, z, n, eta) 1-D, every other
            # part 2-D even when one of its sides is 1, and as case.json declares them
            for p, x in (init or {}).items():
                assert x.ndim == (1 if p in ("m", "h", "z", "n", "eta") else 2), (p, x.shape)
                assert list(x.shape) == meta["state_parts"][p], (p, x.shape, meta["state_parts"][p])
        if misbehave == "skip-short" and meta["n"] == 1:
            continue
        if misbehave == "block16-d8" and (meta["n"] % 16 or meta["d"] != 8 or meta["dv"] != 8):
            # a kernel built for head size 8 and whole blocks of 16 tokens
            print(f"AssertionError: n={meta['n']} d={meta['d']} dv={meta['dv']}: need n % 16 == 0, d == dv == 8",
                  file=sys.stderr)
            sys.exit(1)
        o, state = impl(q, k, v, meta["gamma"], meta["normalized"], meta["eps"], meta["ridge"], initial_state=init)
        if misbehave == "transpose":
            o = o.T.copy()
        if misbehave == "nan" and meta["n"] > 3:
            o[2, 0] = np.nan
        if misbehave == "float32-out":
            o = o.astype(np.float32)
        if misbehave == "truncated":
            with open(os.path.join(cdir, "o.npy"), "wb") as f:
                f.write(b"\x93NUMPY\x01\x00")
            continue
        np.save(os.path.join(cdir, "o.npy"), o)
        if meta["state"]:
            os.makedirs(os.path.join(cdir, "state_out"), exist_ok=True)
            for p, x in state.items():
                np.save(os.path.join(cdir, "state_out", p + ".npy"), x)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
