#!/usr/bin/env python3
"""Figures of the harness's results, into the directory of the data, as PDF, SVG and PNG, each answering one
question in its title, with a one-line reading computed from the data in figures.json beside them.

  python3 experiments/plot.py results/<sweep> [...]   a sweep's points.csv (written by `hla sweep`):
        error_bound_vs_n, error_growth_vs_n, error_normalized_vs_n, paper_vs_corrected (errors),
        time_per_token_vs_n, time_vs_width, time_vs_chunk (cost),
        backward_time_vs_n, backward_memory_vs_n, gradient_error_vs_n, memory_vs_chunk (backward points),
        whichever the sweep has data for; and summary.txt (every fitted slope and error exponent)
  python3 experiments/plot.py results/claims.json      the ledger: claims.{pdf,svg,png}
  python3 experiments/plot.py results/bench.json       make bench: bench.{pdf,svg,png} (GFLOP/s vs rooflines)

The style (fonts, palette, sizes) is experiments/plots/hla.mplstyle and experiments/plots/style.py, shared by
every figure. Needs python3-matplotlib and python3-numpy (scripts/install-deps.sh installs them).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from plots import backward, bench, errors, ledger, style, summary, timing  # noqa: E402
from plots.data import is_backward, load  # noqa: E402


def plot_sweep(path):
    outdir = os.path.dirname(path)
    everything = load(path)
    style.reset_index(outdir)
    forward = [r for r in everything if not is_backward(r)]
    errors.draw(forward, outdir)
    timing.draw(forward, outdir)
    backward.draw(everything, outdir)
    text = summary.write(everything, path)
    with open(os.path.join(outdir, "summary.txt"), "w") as f:
        f.write(text)
    return outdir


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    for arg in argv[1:]:
        if os.path.isdir(arg):
            arg = os.path.join(arg, "points.csv")
        name = os.path.basename(arg)
        if name.endswith(".csv"):
            outdir = plot_sweep(arg)
        elif name.startswith("claims") and name.endswith(".json"):
            outdir = ledger.draw(arg)
        elif name.startswith("bench") and name.endswith(".json"):
            outdir = bench.draw(arg)
        else:
            print(f"plot.py: do not know how to plot {arg}", file=sys.stderr)
            return 2
        with open(os.path.join(outdir, "figures.json")) as f:
            import json
            for e in json.load(f):
                print(f"{os.path.join(outdir, e['stem'])}.png — {e['question']}\n    {e['reading']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
