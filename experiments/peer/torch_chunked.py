#!/usr/bin/python3
"""The PyTorch peer of `make bench` (issue 14): hla2 and linear attention in chunked matrix form, written the
way a strong PyTorch user writes them — every chunk-local product of all chunks in one batched matmul, the
carries as a cumulative sum over chunks (γ = 1) or a short loop over chunks (γ < 1) — with the same
factorization as the harness's chunked forms (hla2 as linear attention over the keys u_j = S_j q_j,
fast/chunked/hla2.hpp), timed on the harness's own benchmark inputs, its outputs checked against the
harness's.

    torch_chunked.py DIR --threads T --out peer.json [--reps 5] [--chunk 48]

DIR holds q.npy, k.npy, v.npy (n×d, n×d, n×dv, float64: the benchmark's inputs) and the harness's outputs
o_<op>_<scalar>.npy, written by `hla_bench --write-peer-inputs DIR`. Runs each (op, scalar) `--reps` times
after one warm-up call on T threads (torch.set_num_threads; run it with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS
= T so that the BLAS under torch uses the same count), and writes Google-Benchmark-style median entries
    peer/torch/<op>/chunked/<scalar>/n:<n>/d:<d>/dv:<dv>/threads:<T>
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


FORMS = {"hla2": hla2_chunked, "linear": linear_chunked}


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
    entries, failed = [], False
    for scalar, dtype in (("float", np.float32), ("double", np.float64)):
        q, k, v = (torch.from_numpy(np.ascontiguousarray(x.astype(dtype))) for x in (q64, k64, v64))
        for op, form in FORMS.items():
            ours = np.load(os.path.join(args.dir, f"o_{op}_{scalar}.npy")).astype(np.float64)
            with torch.inference_mode():
                got = form(q, k, v, chunk=args.chunk).numpy().astype(np.float64)  # warm-up, and the check
                times = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    form(q, k, v, chunk=args.chunk)
                    times.append(time.perf_counter() - t0)
            rows = np.linalg.norm(got - ours, axis=1) / np.maximum(np.linalg.norm(ours, axis=1), 1e-300)
            err = float(rows.max())
            med = statistics.median(times)
            name = f"peer/torch/{op}/chunked/{scalar}/n:{n}/d:{d}/dv:{dv}/threads:{args.threads}"
            entries.append({
                "name": name + "_median", "run_name": name, "run_type": "aggregate", "aggregate_name": "median",
                "repetitions": args.reps, "real_time": med * 1e3, "time_unit": "ms",
                "cv": statistics.pstdev(times) / statistics.mean(times),
                "gflops": n * useful_flops_per_token(op, d, dv) / med / 1e9, "tokens_per_s": n / med,
                "chunk": args.chunk, "max_rel_error": err, "torch": torch.__version__,
            })
            ok = err <= TOLERANCE[scalar]
            failed |= not ok
            print(f"{name}: median {med * 1e3:.1f} ms, worst row error vs the harness {err:.2e}"
                  + ("" if ok else f"  > {TOLERANCE[scalar]:.0e}: DIFFERS"))
    with open(args.out, "w") as f:
        json.dump({"benchmarks": entries}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
