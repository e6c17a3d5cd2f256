#!/usr/bin/python3
"""The PyTorch peer of `make bench` (issues 14, 28): hla2 and linear attention in chunked matrix form, with the
same factorization as the harness's chunked forms (hla2 as linear attention over the keys u_j = S_j q_j,
fast/chunked/hla2.hpp), in the ways a strong PyTorch user writes them, each timed on the harness's own
benchmark inputs and its outputs checked against the harness's:
  chunked     every chunk-local product of all chunks in one batched matmul, the carries as a cumulative sum
              over chunks (γ = 1) or a short loop over chunks (γ < 1);
  loop-w<W>   a Python loop over chunks of width W = 32, 48, 64, one torch.mm per product, the states carried
              in place (the harness's fused form's schedule);
  compiled    the loop at the bench's width through torch.compile, where this torch can compile it (the run
              says why not otherwise).
The peer is the fastest of them (experiments/bench_targets.py); the entries say each one's time. Also
  roofline/torch/<scalar>/threads:<T>   torch.mm's 1024² product (the BLAS under torch), and the OpenBLAS core
              torch's BLAS chose (openblas_get_corename, when that BLAS is OpenBLAS) in every entry.

    torch_chunked.py DIR --threads T --out peer.json [--reps 5] [--chunk 48]

DIR holds q.npy, k.npy, v.npy (n×d, n×d, n×dv, float64: the benchmark's inputs) and the harness's outputs
o_<op>_<scalar>.npy, written by `hla_bench --write-peer-inputs DIR`. Runs each (op, scalar) `--reps` times
after one warm-up call on T threads (torch.set_num_threads; run it with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS
= T so that the BLAS under torch uses the same count), and writes Google-Benchmark-style median entries
    peer/torch/<op>/<formulation>/<scalar>/n:<n>/d:<d>/dv:<dv>/threads:<T>
with real_time (ms), cv, gflops (the same useful-flop count as experiments/bench/bench_main.cpp), tokens_per_s,
and max_rel_error against the harness's output (normwise per row, worst row). Exit 1 when an output differs
from the harness's beyond the precision's tolerance (the timing of a wrong result is not a result), 2 on bad
input.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

TOLERANCE = {"float": 1e-3, "double": 1e-9}  # worst-row relative error allowed against the harness's output


def chunks(x, w):
    """(n, c) → (M, w, c), zero-padded at the end (zero rows add nothing to any sum)."""
    n = x.shape[0]
    M = (n + w - 1) // w
    if M * w != n:
        x = torch.cat([x, x.new_zeros(M * w - n, x.shape[1])])
    return x.view(M, w, x.shape[1])


def decay_masks(w, gamma, dtype):
    a = torch.arange(w, dtype=dtype)
    diff = a[:, None] - a[None, :]
    lower = diff >= 0
    D = torch.where(lower, torch.tensor(gamma, dtype=dtype) ** diff.clamp(min=0), torch.zeros((), dtype=dtype))
    return D, a


def carry(blocks, g):
    """States entering each chunk: x_k = g x_{k−1} + b_{k−1}, x_0 = 0; blocks (M, ...)."""
    if g == 1.0:
        return torch.cumsum(blocks, 0) - blocks
    out = torch.empty_like(blocks)
    x = torch.zeros_like(blocks[0])
    for k in range(blocks.shape[0]):
        out[k] = x
        x = g * x + blocks[k]
    return out


def linear_chunked(q, k, v, gamma=1.0, chunk=48):
    """o_t = Σ_{j≤t} γ^{t−j} (q_t·k_j) v_j."""
    n = q.shape[0]
    Q, K, V = chunks(q, chunk), chunks(k, chunk), chunks(v, chunk)
    D, a = decay_masks(chunk, gamma, q.dtype)
    g = torch.tensor(gamma, dtype=q.dtype)
    tail = (g ** (chunk - 1 - a))[None, :, None]
    S0 = carry(K.transpose(1, 2) @ (tail * V), gamma ** chunk)        # (M, d, dv) entering each chunk
    O = (D * (Q @ K.transpose(1, 2))) @ V + (g ** (a + 1))[None, :, None] * (Q @ S0)
    return O.reshape(-1, v.shape[1])[:n]


def hla2_chunked(q, k, v, gamma=1.0, chunk=48):
    """o_t = Σ_{j≤t} γ^{2(t−j)} (q_t·u_j) v_j with u_j = S_j q_j, S_j = Σ_{i≤j} γ^{j−i} k_i k_iᵀ (SPEC's hla2)."""
    n = q.shape[0]
    Q, K, V = chunks(q, chunk), chunks(k, chunk), chunks(v, chunk)
    D1, a = decay_masks(chunk, gamma, q.dtype)
    D2 = D1 * D1
    g = torch.tensor(gamma, dtype=q.dtype)
    up = (g ** (a + 1))[None, :, None]
    tail = (g ** (chunk - 1 - a))[None, :, None]
    S0 = carry(K.transpose(1, 2) @ (tail * K), gamma ** chunk)        # (M, d, d) entering each chunk
    U = up * (Q @ S0) + (D1 * (Q @ K.transpose(1, 2))) @ K             # rows u_t
    Cu0 = carry(U.transpose(1, 2) @ (tail * tail * V), gamma ** (2 * chunk))
    O = (up * up) * (Q @ Cu0) + (D2 * (Q @ U.transpose(1, 2))) @ V
    return O.reshape(-1, v.shape[1])[:n]


def loop_form(op):
    """The per-chunk loop of `op`: one torch.mm per product, states carried from chunk to chunk."""

    def run(q, k, v, gamma=1.0, chunk=48):
        n, d = q.shape
        dv = v.shape[1]
        D1, a = decay_masks(chunk, gamma, q.dtype)
        D2 = D1 * D1
        g = torch.tensor(gamma, dtype=q.dtype)
        up = (g ** (a + 1))[:, None]
        S = q.new_zeros(d, d) if op == "hla2" else q.new_zeros(d, dv)
        Cu = q.new_zeros(d, dv)  # hla2's C' = Σ γ^{2(t−j)} u_j v_jᵀ
        O = q.new_empty(n, dv)
        for c in range(0, n, chunk):
            L = min(chunk, n - c)
            Qc, Kc, Vc = q[c:c + L], k[c:c + L], v[c:c + L]
            tail = (g ** (L - 1 - a[:L]))[:, None]
            W = torch.mm(Qc, Kc.t()) * D1[:L, :L]
            if op == "linear":
                O[c:c + L] = torch.addmm(torch.mm(W, Vc), up[:L] * Qc, S)
                S = torch.addmm(g ** L * S, Kc.t(), tail * Vc)
                continue
            U = torch.addmm(torch.mm(W, Kc), up[:L] * Qc, S)
            P = torch.mm(Qc, U.t()) * D2[:L, :L]
            O[c:c + L] = torch.addmm(torch.mm(P, Vc), (up[:L] ** 2) * Qc, Cu)
            S = torch.addmm(g ** L * S, Kc.t(), tail * Kc)
            Cu = torch.addmm(g ** (2 * L) * Cu, U.t(), (tail * tail) * Vc)
        return O

    return run


FORMULATIONS = {"chunked": {"hla2": hla2_chunked, "linear": linear_chunked},
                **{f"loop-w{w}": {op: loop_form(op) for op in ("hla2", "linear")} for w in (32, 48, 64)}}
WIDTH = {f"loop-w{w}": w for w in (32, 48, 64)}


def compiled_forms(chunk):
    """torch.compile of the loop at the bench's width, or the reason it cannot run here."""
    if not hasattr(torch, "compile"):
        return None, f"torch {torch.__version__} has no torch.compile (it came with 2.0)"
    try:
        forms = {op: torch.compile(loop_form(op)) for op in ("hla2", "linear")}
        x = torch.zeros(2 * chunk, 4)
        forms["linear"](x, x, x, chunk=chunk)
        return forms, None
    except Exception as e:  # a compiler missing on this machine, an unsupported backend: say so, time the rest
        return None, f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def openblas_core():
    """The core OpenBLAS chose for torch's BLAS (None when that BLAS is not OpenBLAS)."""
    import ctypes
    for lib in ("libopenblas.so.0", "libopenblas.so", "libblas.so.3"):
        try:
            f = ctypes.CDLL(lib).openblas_get_corename
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_char_p
        return f().decode()
    return None


def torch_roofline(dtype, reps):
    """Median seconds of torch.mm on 1024² operands."""
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    torch.mm(a, b)
    times = []
    for _ in range(max(reps, 5)):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return times


def useful_flops_per_token(op, d, dv):
    return 4 * d * d + 10 * d * dv if op == "hla2" else 4 * d * dv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=48)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.threads < 1 or args.reps < 1 or args.chunk < 1:
        print("torch_chunked: --threads, --reps and --chunk must be ≥ 1", file=sys.stderr)
        return 2
    try:
        q64, k64, v64 = (np.load(os.path.join(args.dir, f"{x}.npy")) for x in "qkv")
    except OSError as e:
        print(f"torch_chunked: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    n, d = q64.shape
    dv = v64.shape[1]
    core = openblas_core()
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"torch {torch.__version__}, OpenBLAS core {core}, environment {env}")
    formulations = dict(FORMULATIONS)
    compiled, why_not = compiled_forms(args.chunk)
    if compiled:
        formulations["compiled"] = compiled
    else:
        print(f"peer/torch compiled: not run — {why_not}")
    entries, failed = [], False

    def add_entry(name, times, gflops, extra):
        med = statistics.median(times)
        entries.append({
            "name": name + "_median", "run_name": name, "run_type": "aggregate", "aggregate_name": "median",
            "repetitions": len(times), "real_time": med * 1e3, "time_unit": "ms",
            "cv": statistics.pstdev(times) / statistics.mean(times), "gflops": gflops(med),
            "torch": torch.__version__, "openblas_core": core, "openblas_env": env,
            "compile": why_not or "ran", **extra})
        return med

    for scalar, dtype in (("float", np.float32), ("double", np.float64)):
        tdtype = torch.float32 if scalar == "float" else torch.float64
        med = add_entry(f"roofline/torch/{scalar}/threads:{args.threads}", torch_roofline(tdtype, args.reps),
                        lambda t: 2 * 1024**3 / t / 1e9, {})
        print(f"roofline/torch/{scalar}/threads:{args.threads}: torch.mm 1024² {2 * 1024**3 / med / 1e9:.1f} GFLOP/s")
        q, k, v = (torch.from_numpy(np.ascontiguousarray(x.astype(dtype))) for x in (q64, k64, v64))
        for formulation, forms in formulations.items():
            w = WIDTH.get(formulation, args.chunk)
            for op, form in forms.items():
                ours = np.load(os.path.join(args.dir, f"o_{op}_{scalar}.npy")).astype(np.float64)
                with torch.inference_mode():
                    got = form(q, k, v, chunk=w).numpy().astype(np.float64)  # warm-up, and the check
                    times = []
                    for _ in range(args.reps):
                        t0 = time.perf_counter()
                        form(q, k, v, chunk=w)
                        times.append(time.perf_counter() - t0)
                rows = np.linalg.norm(got - ours, axis=1) / np.maximum(np.linalg.norm(ours, axis=1), 1e-300)
                err = float(rows.max())
                name = f"peer/torch/{op}/{formulation}/{scalar}/n:{n}/d:{d}/dv:{dv}/threads:{args.threads}"
                med = add_entry(name, times, lambda t: n * useful_flops_per_token(op, d, dv) / t / 1e9,
                                {"tokens_per_s": n / statistics.median(times), "chunk": w, "max_rel_error": err})
                ok = err <= TOLERANCE[scalar]
                failed |= not ok
                print(f"{name}: median {med * 1e3:.1f} ms, worst row error vs the harness {err:.2e}"
                      + ("" if ok else f"  > {TOLERANCE[scalar]:.0e}: DIFFERS"))
    with open(args.out, "w") as f:
        json.dump({"benchmarks": entries}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
