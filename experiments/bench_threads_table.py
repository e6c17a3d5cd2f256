"""Thread-scaling tables from one hla_bench JSON (e.g. results/cpu16/bench.json, `scripts/device-gpu.sh cpu-bench`):
per scalar and chunked form, the median time of the plain entry, of the fixed γ = 0.9 sibling and of the gated entry
(gates in 0.8..1) at each thread count, with gated ÷ fixed; then hla2/chunked-fused's GFLOP/s against the best 1024²
roofline at the same thread count. Prints markdown.

    python3 experiments/bench_threads_table.py results/cpu16/bench.json
"""
import json
import re
import sys

SHAPE = "n:65536/d:64/dv:64"
FORMS = ("hla2/chunked-fused", "hla2/chunked", "linear/chunked", "ahla/chunked")
GATES, GAMMA = "/gates:range:0.8,1", "/gamma:0.9"


def medians(doc):
    """run name without its min_time/real_time suffixes -> the median entry."""
    out = {}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[re.sub(r"/min_time:[0-9.]+|/real_time", "", b["run_name"])] = b
    return out


def main(path):
    with open(path) as f:
        doc = json.load(f)
    med = medians(doc)
    threads = [int(t) for t in doc["context"].get("hla_bench_threads", "1 2").split()]
    ctx = doc["context"]
    print(f"{ctx.get('host_name')}: {ctx.get('num_cpus')} CPUs, {ctx.get('hla_simd', '')[:40]}, "
          f"{ctx.get('hla_compiler')}, commit {ctx.get('hla_git_commit')}, {ctx.get('date')}\n")
    for s in ("float", "double"):
        print(f"| {s}: ms (gated ÷ fixed) | " + " | ".join(f"{t}T" for t in threads) + " |")
        print("|---|" + "---|" * len(threads))
        for form in FORMS:
            cells = []
            for t in threads:
                base = f"{form}/{s}/{SHAPE}/threads:{t}"
                if base + GATES not in med or base + GAMMA not in med:
                    cells.append("–")
                    continue
                g, f_ = med[base + GATES]["real_time"], med[base + GAMMA]["real_time"]
                cells.append(f"{med[base]['real_time']:.1f} / {f_:.1f} / {g:.1f} ({g / f_:.2f})")
            print(f"| {form} plain / γ = 0.9 / gated | " + " | ".join(cells) + " |")
        print()
        print(f"| {s}: hla2/chunked-fused vs best roofline | " + " | ".join(f"{t}T" for t in threads) + " |")
        print("|---|" + "---|" * len(threads))
        cells = []
        for t in threads:
            roofs = [(b["gflops"], k.split("/")[1]) for k, b in med.items()
                     if k.startswith("roofline/") and k.endswith(f"/{s}/threads:{t}")]
            fused = med.get(f"hla2/chunked-fused/{s}/{SHAPE}/threads:{t}")
            if not roofs or not fused:
                cells.append("–")
                continue
            best, lib = max(roofs)
            cells.append(f"{fused['gflops']:.0f} / {best:.0f} {lib} = {fused['gflops'] / best:.2f}")
        print("| GFLOP/s: form / best GEMM | " + " | ".join(cells) + " |\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench_threads_table.py BENCH_JSON")
    main(sys.argv[1])
