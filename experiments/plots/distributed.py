"""make bench-distributed's model: the cross-rank exclusive scan of the mpi-* forms against a ring (LASP) and an
all-gather of the summaries (LASP-2), fitted from this machine's measurements and extrapolated to P = 1024.

Inputs (results/distributed/): runs.json (hla mpi-bench at P = 1, 2), calibration.json (ping-pong, one combine).
Model of one state of S bytes crossing ranks (α latency, β seconds per byte, c one combine of two segments):
  exscan (recursive doubling, this harness)  ⌈log2 P⌉ (α + β S + c)         — one state per step, P summaries
  ring (LASP)                                (P − 1) (α + β S + c)           — each rank waits for its left
  all-gather (LASP-2)                        ⌈log2 P⌉ α + (P − 1) β S + (P − 1) c — every summary to every rank,
                                                                              then up to P − 1 local combines
plus the local work per token w (chunked summary + finish, measured at P = 2) times n/P.
Writes model.json and model.{png,pdf,svg}.

usage: python3 experiments/plots/distributed.py results/distributed
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments.plots import style  # noqa: E402


def fit_latency_bandwidth(ping):
    """One-way time = α + β·bytes: α from the smallest message (half its round trip), β the median slope of
    the messages of 16 KiB and more (a least-squares line is dominated by the largest and misses α)."""
    ping = sorted(ping, key=lambda p: p["bytes"])
    alpha = ping[0]["round_trip_s"] / 2
    slopes = [(p["round_trip_s"] / 2 - alpha) / p["bytes"] for p in ping if p["bytes"] >= 16384]
    return alpha, max(float(np.median(slopes)), 0.0)


def scan_models(P, alpha, beta, S, c):
    P = np.asarray(P, float)
    steps = np.ceil(np.log2(np.maximum(P, 1)))
    return {
        "exscan (this harness)": steps * (alpha + beta * S + c),
        "ring (LASP)": (P - 1) * (alpha + beta * S + c),
        "all-gather (LASP-2)": steps * alpha + (P - 1) * beta * S + (P - 1) * c,
    }


def main(outdir):
    runs = json.load(open(os.path.join(outdir, "runs.json")))["runs"]
    cal = json.load(open(os.path.join(outdir, "calibration.json")))["calibration"]
    ping = next(c["ping_pong"] for c in cal if "ping_pong" in c)
    alpha, beta = fit_latency_bandwidth(ping)
    model = {"alpha_s": alpha, "beta_s_per_byte": beta, "bandwidth_bytes_per_s": 1 / beta if beta > 0 else None,
             "operators": {}}
    Ps = 2 ** np.arange(0, 11)
    fig, axes = style.figure(2)
    colors = {"exscan (this harness)": style.FAMILY_COLOR["chunked"], "ring (LASP)": style.FAMILY_COLOR["serial"],
              "all-gather (LASP-2)": style.PAPER_COLOR}
    for c in cal:
        op = c["op"]
        S, comb = c["state_bytes"], c["combine_s"]
        strong = [r for r in runs if r["op"] == op and r["scaling"] == "strong" and r["form"] == "mpi-chunked"
                  and r["d"] == c["d"]]
        entry = {"state_bytes": S, "combine_s": comb}
        two = [r for r in strong if r["P"] == 2]
        if two:
            r2 = two[0]
            w = (r2["local_s"] + r2["finish_s"]) / (r2["n"] / 2)  # seconds per token of local work at P = 2
            entry.update({"n": r2["n"], "work_s_per_token": w})
            n = r2["n"]
        models = scan_models(Ps, alpha, beta, S, comb)
        entry["scan_s_at_P"] = {name: {int(p): float(v) for p, v in zip(Ps, vals)} for name, vals in models.items()}
        model["operators"][op] = entry
        if op not in ("hla2", "linear"):
            continue
        ax = axes[0] if op == "hla2" else axes[1]
        for name, vals in models.items():
            ax.plot(Ps, vals, label=name, color=colors[name], marker="o", ms=2.5)
        if two:
            total = {name: n / Ps * w + vals for name, vals in models.items()}
            entry["strong_total_s_at_P"] = {name: {int(p): float(v) for p, v in zip(Ps, vals)}
                                            for name, vals in total.items()}
            ax.plot(Ps, n / Ps * w, color=style.GUIDE["color"], ls=style.GUIDE["ls"], lw=style.GUIDE["lw"])
            ax.text(Ps[-1], n / Ps[-1] * w, f" local work, n={n}", fontsize=6, va="center")
        # The scan alone (after a barrier, no rank's lateness in it), both algorithms, at P = 2.
        ax.plot([2], [c["scan_mpi_exscan_s"]], marker="x", color="black", ls="none")
        ax.plot([2], [c["scan_recursive_doubling_s"]], marker="+", color="black", ls="none")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks P")
        ax.set_title(f"{op}, d = dv = {r2['d'] if two else '?'}: state {S} B, combine {comb * 1e6:.1f} µs")
    style.ylabel(axes, "cross-rank scan time (s)")
    handles = [style.Line2D([], [], color=colors[k], marker="o", label=k) for k in colors]
    handles.append(style.Line2D([], [], color="black", marker="x", ls="none", label="MPI_Exscan, measured"))
    handles.append(style.Line2D([], [], color="black", marker="+", ls="none", label="rec. doubling, measured"))
    style.legend_below(fig, handles)
    json.dump(model, open(os.path.join(outdir, "model.json"), "w"), indent=1)
    steps = "⌈log₂P⌉"
    gbs = 1 / beta / 1e9 if beta > 0 else float('nan')
    style.save(fig, outdir, "model",
               "How does the cross-rank scan grow with the number of ranks?",
               f"Fitted α = {alpha * 1e6:.2f} µs, 1/β = {gbs:.2f} GB/s between two "
               f"ranks of this host; the exscan takes {steps} steps of one state, the ring P − 1, the all-gather moves "
               "P − 1 states to every rank and combines them locally.")
    print(f"alpha = {alpha * 1e6:.2f} us, bandwidth = {gbs:.2f} GB/s -> {outdir}/model.json")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/distributed")
