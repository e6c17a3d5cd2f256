#!/usr/bin/python3
"""Issue 5's target ratios from one Google Benchmark run (results/bench.json by default).

Every ratio is between medians of the same run (the machine is shared and drifts; ratios within one run
are what the targets read):
  - hla2 chunked useful GFLOP/s ÷ the roofline (Eigen's square GEMM) at the same scalar and thread count,
  - hla2 chunked 1-thread time ÷ 2-thread time (beside the roofline's own 2-thread ÷ 1-thread rate: what
    the machine's second core gives a large GEMM in the same run),
  - hla2 chunked time ÷ linear chunked time at the same scalar and thread count.
Usage: /usr/bin/python3 experiments/bench_targets.py [bench.json]   (exit 2: file missing or entries absent)
"""
import json
import sys

SHAPE = "n:65536/d:64/dv:64"


def medians(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        # "<op>/<form>/<scalar>/.../threads:<t>/min_time:...": drop the trailing Google Benchmark parts
        key = "/".join(p for p in b["run_name"].split("/") if not p.startswith(("min_time:", "real_time")))
        out[key] = b
    return data.get("context", {}), out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "results/bench.json"
    try:
        context, m = medians(path)
    except (OSError, ValueError, KeyError) as e:
        print(f"bench_targets: cannot read {path}: {e}", file=sys.stderr)
        return 2

    def entry(name):
        if name not in m:
            raise KeyError(name)
        return m[name]

    def gflops(name):
        return entry(name)["gflops"]

    def seconds(name):
        return entry(name)["real_time"]

    print(f"{path}: commit {context.get('hla_git_commit', '?')}, {context.get('date', '?')}")
    try:
        for scalar in ("float", "double"):
            h1 = f"hla2/chunked/{scalar}/{SHAPE}/threads:1"
            h2 = f"hla2/chunked/{scalar}/{SHAPE}/threads:2"
            roof = {t: gflops(f"roofline/gemm/{scalar}/threads:{t}") for t in (1, 2)}
            print(f"{scalar:6}  × roofline 1T {gflops(h1) / roof[1]:.2f} ({gflops(h1):.1f} of {roof[1]:.1f} GFLOP/s)"
                  f"  2T {gflops(h2) / roof[2]:.2f} ({gflops(h2):.1f} of {roof[2]:.1f})"
                  f"  |  2T speed-up {seconds(h1) / seconds(h2):.2f}× (roofline's own {roof[2] / roof[1]:.2f}×)"
                  f"  |  hla2 / linear time 1T {seconds(h1) / seconds(f'linear/chunked/{scalar}/{SHAPE}/threads:1'):.2f}"
                  f"  2T {seconds(h2) / seconds(f'linear/chunked/{scalar}/{SHAPE}/threads:2'):.2f}")
    except KeyError as e:
        print(f"bench_targets: {path} has no median for {e}; run `make bench` (the default subset)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
