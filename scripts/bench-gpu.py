#!/usr/bin/env python3
"""make bench-gpu (issue 52, docs/gpu.md): the GPU forms beside their peers on one card, in one run.

For each point (T tokens, K = V, H heads, B = 1, dtype bf16 or fp32, gates uniform in [0.9, 1]):
  ours   hla2 (and linear) through `hla gpu-bench`, the fused kernels (cuda-fused) and the cuBLAS form
         (cuda-chunked) (bf16: bf16 tensor-core products; fp32: IEEE fp32 products and TF32 ones), forward and
         forward + backward (dq, dk, dv, dgamma: the passes run forward and backward in time, pass.cu)
  fla    chunk_simple_gla (scalar gated decay, the closest first-order kernel) and chunk_linear_attn, forward and
         forward + backward, from a carried fla/ package (FLA_PATH, default .fla)
  peer   a PyTorch chunk-parallel gated hla2 (the u-form: two chained chunked gated linear-attention passes, every
         chunk at once, the cross-chunk carry as one matrix product with the chunks' decay matrix), forward and
         forward + backward (autograd)
Times are CUDA-event medians over reps after two warm-ups; memory is torch's peak allocation (ours: what the form
allocated on the device). Each point is written as soon as it is measured, with the card, driver, CUDA, torch, fla
and commit, to results/gpu/bench.json (--out); a point that runs out of memory is recorded as such.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cuda_ms(fn, reps):
    """Median and min milliseconds of fn() over reps after two warm-ups, and the peak memory of one call."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return {"ms": times, "ms_median": times[len(times) // 2], "ms_min": times[0],
            "peak_bytes": torch.cuda.max_memory_allocated() - base}


# The PyTorch peer: examples/torch_hla2_gpu.py (also verified through `hla verify --exec`).
sys.path.insert(0, os.path.join(ROOT, "examples"))
from torch_hla2_gpu import hla2_chunk_parallel as peer_hla2  # noqa: E402


# ---- one point -------------------------------------------------------------------------------------------------

def ours(hla, op, T, K, H, products, reps, fused, backward=False):
    cmd = [hla, "gpu-bench", "--op", op, "--products", products, "--T", str(T), "--d", str(K), "--dv", str(K),
           "--heads", str(H), "--gates-from", "0.9", "--reps", str(reps)] + (["--fused"] if fused else []) + \
        (["--backward"] if backward else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": (run.stderr or run.stdout).strip()[-400:]}
    j = json.loads(run.stdout)
    return {"ms": j["ms"], "ms_median": j["ms_median"], "ms_min": j["ms_min"], "peak_bytes": j["device_bytes"],
            "device": j["device"], "hla_commit": j["commit"]}


def guarded(fn):
    try:
        return fn()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"error": "out of memory"}
    except Exception as err:  # a peer that fails on this point is recorded, not fatal to the run
        torch.cuda.empty_cache()
        return {"error": f"{type(err).__name__}: {str(err)[:300]}"}


def point(args, fla, T, K, H, dtype_name):
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(T * 131 + K * 7 + H)
    shape = (1, T, H, K)
    q = (torch.rand(shape, device="cuda", generator=gen) * 2 - 1) * math.sqrt(3.0 / K)
    k = (torch.rand(shape, device="cuda", generator=gen) * 2 - 1) * math.sqrt(3.0 / K)
    v = (torch.rand(shape, device="cuda", generator=gen) * 2 - 1) * math.sqrt(3.0)
    logg = torch.log(0.9 + 0.1 * torch.rand((1, T, H), device="cuda", generator=gen))
    q, k, v = (x.to(dtype) for x in (q, k, v))
    do = torch.randn_like(v)
    res = {"T": T, "K": K, "V": K, "H": H, "B": 1, "dtype": dtype_name, "gates": "uniform [0.9, 1]"}
    reps = args.reps

    def fwd_bwd(f):
        def run():
            qq, kk, vv = (x.detach().requires_grad_(True) for x in (q, k, v))
            gg = logg.detach().requires_grad_(True)
            o = f(qq, kk, vv, gg)
            o.backward(do)
        return run

    prods = ["bf16"] if dtype_name == "bf16" else ["ieee", "tf32"]
    for p in prods:
        for fused, kind in ((True, "fused"), (False, "cublas")):
            for op in ("hla2", "linear"):
                res[f"ours_{kind}_{op}_{p}_fwd"] = ours(args.hla, op, T, K, H, p, reps, fused)
                res[f"ours_{kind}_{op}_{p}_fwdbwd"] = ours(args.hla, op, T, K, H, p, reps, fused, backward=True)
    with torch.no_grad():
        res["peer_hla2_fwd"] = guarded(lambda: cuda_ms(lambda: peer_hla2(q, k, v, logg), reps))
    res["peer_hla2_fwdbwd"] = guarded(lambda: cuda_ms(fwd_bwd(lambda a, b, c, g: peer_hla2(a, b, c, g)), reps))
    if fla is not None:
        sg, la = fla
        with torch.no_grad():
            res["fla_simple_gla_fwd"] = guarded(lambda: cuda_ms(lambda: sg(q, k, v, g=logg), reps))
            res["fla_linear_attn_fwd"] = guarded(lambda: cuda_ms(lambda: la(q, k, v, normalize=False), reps))
        res["fla_simple_gla_fwdbwd"] = guarded(lambda: cuda_ms(fwd_bwd(lambda a, b, c, g: sg(a, b, c, g=g)[0]), reps))
        if "#640" in str(res["fla_simple_gla_fwdbwd"].get("error", "")):
            # fla refuses its gated backward on Hopper with this Triton (its issue #640: wrong dq/dk/dg). Its time
            # is still the denominator of the forward+backward target, so it is measured with the check lifted and
            # recorded under its own key: a cost, never a result.
            import fla.ops.common.chunk_o as chunk_o
            saved, chunk_o.TRITON_ABOVE_3_7_1 = chunk_o.TRITON_ABOVE_3_7_1, True
            try:
                res["fla_simple_gla_fwdbwd_unchecked"] = {
                    **guarded(lambda: cuda_ms(fwd_bwd(lambda a, b, c, g: sg(a, b, c, g=g)[0]), reps)),
                    "note": "time only: fla's own check (issue #640) says this backward is wrong on this Triton"}
            finally:
                chunk_o.TRITON_ABOVE_3_7_1 = saved
        res["fla_linear_attn_fwdbwd"] = guarded(
            lambda: cuda_ms(fwd_bwd(lambda a, b, c, g: la(a, b, c, normalize=False)[0]), reps))
    torch.cuda.empty_cache()
    return res


def provenance(args, fla_version):
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {"card": torch.cuda.get_device_name(0), "capability": "sm_%d%d" % torch.cuda.get_device_capability(0),
            "nvidia_smi": smi.stdout.strip(), "cuda_runtime_torch": torch.version.cuda, "torch": torch.__version__,
            "fla": fla_version, "commit": args.commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "tf32_in_fp32_peers": torch.backends.cuda.matmul.allow_tf32}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hla", default=os.path.join(ROOT, "build", "bin", "hla"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "gpu", "bench.json"))
    ap.add_argument("--commit", default=os.environ.get("HLA_COMMIT", "unknown"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="T = 2^12, 2^16; K = 64; H = 1, 16")
    ap.add_argument("--T", type=int, nargs="*", help="token counts (default 2^10 .. 2^20 by 4x)")
    ap.add_argument("--K", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--H", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--dtype", nargs="*", default=["bf16", "fp32"])
    ap.add_argument("--budget-s", type=float, default=520, help="stop starting points after this many seconds")
    ap.add_argument("--max-elements", type=float, default=2**28, help="skip points with T·H·K above this")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench-gpu: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 peers multiply in fp32
    torch.backends.cudnn.allow_tf32 = False
    fla, fla_version = None, "not found"
    sys.path.insert(0, os.environ.get("FLA_PATH", os.path.join(ROOT, ".fla")))
    try:
        import fla as fla_pkg
        from fla.ops.linear_attn import chunk_linear_attn
        from fla.ops.simple_gla import chunk_simple_gla
        fla, fla_version = (chunk_simple_gla, chunk_linear_attn), getattr(fla_pkg, "__version__", "?")
    except Exception as err:
        fla_version = f"not importable: {type(err).__name__}: {err}"
    Ts = args.T or ([4096, 65536] if args.quick else [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20])
    Ks = [64] if args.quick else args.K
    doc = {"provenance": provenance(args, fla_version), "points": []}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    start = time.time()
    for dt in args.dtype:
        for H in args.H:
            for K in Ks:
                for T in Ts:
                    where = {"T": T, "K": K, "H": H, "dtype": dt}
                    if T * H * K > args.max_elements:
                        doc["points"].append({**where, "skipped": f"T*H*K above {args.max_elements:.0f}"})
                    elif time.time() - start > args.budget_s:
                        doc["points"].append({**where, "skipped": "time budget"})
                    else:
                        doc["points"].append(point(args, fla, T, K, H, dt))
                        print(json.dumps({k: (v.get("ms_median", v.get("error")) if isinstance(v, dict) else v)
                                          for k, v in doc["points"][-1].items()}), flush=True)
                    tmp = args.out + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump(doc, f, indent=1)
                    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
