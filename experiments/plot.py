#!/usr/bin/env python3
"""Plots of a sweep's points.csv (written by `hla sweep`), into the same directory, PNG and SVG:

  runtime_vs_n     runtime (median over repeats, bars min..max) vs n, log-log, per operator; one line per
                   form/variant/scalar/d/dv with the fitted slope of log time vs log n in the legend
  error_vs_n       normwise relative error vs n per operator and option set; one line per form × precision,
                   its rounding-error bound dashed in the same colour
  speedup_vs_threads   time(1 thread) / time(p threads), when the config sweeps threads
  runtime_cpu_vs_n the same with process CPU time (robust when the machine is shared)
  runtime_vs_width runtime vs d and vs dv at fixed n, when the config sweeps them
  memory_vs_n      bytes of state the form returns and peak-RSS delta of the work vs n

Backward points (column `backward` ≠ none; configs/backward.toml) get their own plots, the forward
points of the same config drawn beside them as the yardstick:

  backward_time_vs_n      CPU and wall time per call vs n, one panel per operator, fitted slopes
  backward_memory_vs_n    peak-RSS delta and stored-state bytes (what the pass keeps) vs n, fitted slopes
  gradient_error_vs_n     normwise relative error of the gradients vs the MPFR-256 reference gradient,
                          the gradient bound dashed (unnormalized points)
  memory_vs_chunk         stored bytes and peak RSS vs the checkpoint width w at fixed n, when swept

Also writes summary.txt: the fitted runtime slopes, error growth exponents and worst err/bound ratios.

Usage: python3 experiments/plot.py results/<config> [more dirs...]
Needs python3-matplotlib and python3-numpy (scripts/install-deps.sh installs them).
"""
import csv
import math
import os
import sys
from collections import defaultdict
from fractions import Fraction

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fit_slope(xs, ys):
    """Least-squares slope of log y vs log x over the points with y > 0 (None if fewer than 3)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y)]
    if len(pts) < 3:
        return None
    a = np.array(pts)
    return float(np.polyfit(a[:, 0], a[:, 1], 1)[0])


def options_label(r):
    parts = []
    if Fraction(r["gamma"]) != 1:
        parts.append(f"γ={float(Fraction(r['gamma'])):g}")
    if r["normalized"] == "1":
        parts.append(f"normalized ε={float(Fraction(r['eps'])):g}")
    if Fraction(r["lambda"]) != 0:
        parts.append(f"λ={float(Fraction(r['lambda'])):g}")
    return ", ".join(parts) or "plain"


def loglog(ax, xlabel, ylabel, title=None, base=2):
    """The axes style of every plot here: log-log (x in powers of `base`), grid, small legend."""
    ax.set_xscale("log", base=base)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)


def save(fig, outdir, stem):
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(outdir, f"{stem}.{ext}"), dpi=110)
    plt.close(fig)


def runtime_plot(rows, outdir, summary, column="time_median_s"):
    cpu = column == "cpu_time_median_s"
    ok = [r for r in rows if num(r.get(column)) > 0]
    if not ok:
        return
    min_thr = min(int(r["threads"]) for r in ok)
    ok = [r for r in ok if int(r["threads"]) == min_thr]
    ops = sorted({r["operator"] for r in ok})
    fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 5), squeeze=False)
    summary.append(f"\n## {'CPU' if cpu else 'Wall'} time vs n (threads={min_thr}; slope = fitted exponent of the median "
                   "in n, over n >= 256 when there are 3 such points, else all n)")
    for ax, op in zip(axes[0], ops):
        series = defaultdict(lambda: defaultdict(list))
        for r in ok:
            if r["operator"] != op:
                continue
            label = f"{r['form']}/{r['variant']} {r['scalar']} d={r['d']} dv={r['dv']}"
            if r["form"].startswith(("chunked", "scan-twolevel", "scan-blelloch")):
                label += f" w={r['chunk']}"
            if options_label(r) != "plain":
                label += f" [{options_label(r)}]"
            series[label][int(r["n"])].append(r)
        for label in sorted(series):
            ns = sorted(series[label])
            med = [np.median([num(r[column]) for r in series[label][n]]) for n in ns]
            lo = [min(num(r[column if cpu else "time_min_s"]) for r in series[label][n]) for n in ns]
            hi = [max(num(r[column if cpu else "time_max_s"]) for r in series[label][n]) for n in ns]
            big = [(n, t) for n, t in zip(ns, med) if n >= 256]
            slope = fit_slope(*zip(*big)) if len(big) >= 3 else fit_slope(ns, med)
            tag = f" (slope {slope:.2f})" if slope is not None else ""
            ax.errorbar(ns, med, yerr=[np.subtract(med, lo), np.subtract(hi, med)], marker="o", ms=3, capsize=2,
                        label=label + tag)
            summary.append(f"- {op} {label}: slope {slope:.3f}" if slope is not None else f"- {op} {label}: (too few n)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (tokens)")
        ax.set_ylabel("CPU time per call, s (median)" if cpu else "wall time per call, s (median; bars min..max)")
        ax.set_title(f"{op}: {'CPU' if cpu else 'wall'} time vs n")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    save(fig, outdir, "runtime_cpu_vs_n" if cpu else "runtime_vs_n")


def error_plot(rows, outdir, summary):
    ok = [r for r in rows if num(r["err_normwise_rel"]) >= 0]
    if not ok:
        return
    panels = sorted({(r["operator"], options_label(r)) for r in ok})
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.2 * cols, 4.6 * nrows), squeeze=False)
    summary.append("\n## Error vs n (normwise relative error, worst seed; exponent = fitted slope in n; "
                   "err/bound = worst componentwise observed/bound)")
    for idx, (op, opts) in enumerate(panels):
        ax = axes[idx // cols][idx % cols]
        series = defaultdict(lambda: defaultdict(list))
        for r in ok:
            if r["operator"] == op and options_label(r) == opts:
                label = f"{r['form']}/{r['variant']} {r['scalar']}"
                if r["form"].startswith(("chunked", "scan-twolevel")):
                    label += f" w={r['chunk']}"
                series[label][int(r["n"])].append(r)
        for k, label in enumerate(sorted(series)):
            ns = sorted(series[label])
            err = [max(num(r["err_normwise_rel"]) for r in series[label][n]) for n in ns]
            bnd = [max(num(r["bound_normwise_rel"]) for r in series[label][n]) for n in ns]
            ratio = max((num(r["err_over_bound"]) for n in ns for r in series[label][n]), default=math.nan)
            statuses = sorted({r["status"] for n in ns for r in series[label][n]})
            color = f"C{k % 10}"
            plot_err = [e if e > 0 else np.nan for e in err]
            slope = fit_slope(ns, err)
            tag = f" (exp {slope:.2f})" if slope is not None else ""
            differs = "differs in exact arithmetic" in statuses
            if differs:
                tag += " — differs in exact arithmetic"
            ax.plot(ns, plot_err, marker="x" if differs else "o", ms=3, color=color, ls=":" if differs else "-",
                    label=label + tag)
            if any(math.isfinite(b) and b > 0 for b in bnd):
                ax.plot(ns, [b if math.isfinite(b) and b > 0 else np.nan for b in bnd], ls="--", color=color, lw=0.8)
            summary.append(f"- {op} [{opts}] {label}: err {min(err):.3g}..{max(err):.3g}, exponent "
                           f"{'%.2f' % slope if slope is not None else '-'}, worst err/bound {ratio:.3g}, "
                           f"status {', '.join(statuses)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (tokens)")
        ax.set_ylabel("normwise relative error (dashed: bound)")
        ax.set_title(f"{op} [{opts}]", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for idx in range(len(panels), nrows * cols):
        axes[idx // cols][idx % cols].axis("off")
    save(fig, outdir, "error_vs_n")


def speedup_plot(rows, outdir, summary):
    ok = [r for r in rows if num(r["time_median_s"]) > 0]
    groups = defaultdict(dict)
    for r in ok:
        key = (r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r["d"], r["dv"], r["chunk"],
               options_label(r))
        groups[key].setdefault(int(r["threads"]), []).append(num(r["time_median_s"]))
    groups = {k: v for k, v in groups.items() if len(v) > 1 and 1 in v}
    if not groups:
        return
    fig, ax = plt.subplots(figsize=(6.5, 5))
    summary.append("\n## Speedup vs threads")
    maxp = 1
    for key, v in sorted(groups.items()):
        ps = sorted(v)
        base = np.median(v[1])
        sp = [base / np.median(v[p]) for p in ps]
        maxp = max(maxp, ps[-1])
        label = f"{key[0]} {key[1]}/{key[2]} {key[3]} n={key[4]} w={key[7]}"
        ax.plot(ps, sp, marker="o", label=label)
        summary.append(f"- {label}: " + ", ".join(f"{p} thr {s:.2f}x" for p, s in zip(ps, sp)))
    ax.plot([1, maxp], [1, maxp], "k:", lw=0.8, label="ideal")
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup over 1 thread")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    save(fig, outdir, "speedup_vs_threads")


def width_plot(rows, outdir, summary):
    """Runtime vs d (fixed n, dv) and vs dv (fixed n, d), when a config sweeps them."""
    ok = [r for r in rows if num(r["time_median_s"]) > 0]
    panels = []
    for axis, fixed in (("d", "dv"), ("dv", "d")):
        groups = defaultdict(dict)
        for r in ok:
            key = (r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r[fixed], r["chunk"], r["threads"],
                   options_label(r))
            groups[key].setdefault(int(r[axis]), []).append(num(r["time_median_s"]))
        groups = {k: v for k, v in groups.items() if len(v) >= 3}
        if groups:
            panels.append((axis, fixed, groups))
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5), squeeze=False)
    summary.append("\n## Runtime vs width (slope = fitted exponent of time in the width)")
    for ax, (axis, fixed, groups) in zip(axes[0], panels):
        for key, v in sorted(groups.items()):
            ws = sorted(v)
            t = [np.median(v[w]) for w in ws]
            slope = fit_slope(ws, t)
            label = f"{key[0]} {key[1]}/{key[2]} {key[3]} n={key[4]} {fixed}={key[5]}"
            ax.plot(ws, t, marker="o", label=f"{label} (slope {slope:.2f})")
            summary.append(f"- vs {axis}: {label}: slope {slope:.3f}; " +
                           ", ".join(f"{axis}={w}: {x:.3g} s" for w, x in zip(ws, t)))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel("time per call, s (median)")
        ax.set_title(f"runtime vs {axis}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    save(fig, outdir, "runtime_vs_width")


def memory_plot(rows, outdir, summary):
    ok = [r for r in rows if r["state_bytes"] != ""]
    if not ok:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    series = defaultdict(lambda: defaultdict(list))
    for r in ok:
        series[f"{r['operator']} {r['form']}/{r['variant']} {r['scalar']} d={r['d']} dv={r['dv']}"][int(r["n"])].append(r)
    summary.append("\n## Memory (state bytes the form returns; peak-RSS delta of one call)")
    for label in sorted(series):
        ns = sorted(series[label])
        st = [max(num(r["state_bytes"]) for r in series[label][n]) for n in ns]
        rss = [max(num(r["peak_rss_delta_bytes"]) for r in series[label][n]) for n in ns]
        axes[0].plot(ns, [s if s > 0 else np.nan for s in st], marker="o", ms=3, label=label)
        axes[1].plot(ns, [m if m > 0 else np.nan for m in rss], marker="o", ms=3, label=label)
        summary.append(f"- {label}: state {st[0]:.0f}..{st[-1]:.0f} B; peak RSS delta {min(rss):.0f}..{max(rss):.0f} B "
                       f"(slope {fit_slope(ns, rss) or float('nan'):.2f})")
    for ax, what in zip(axes, ("state bytes (Run.state.numbers() × sizeof)", "peak RSS delta of one call, bytes")):
        loglog(ax, "n (tokens)", what)
    save(fig, outdir, "memory_vs_n")


def is_backward(r):
    return r.get("backward", "none") not in ("", "none")


def pass_label(r):
    """The pass and its parameters: 'forward', 'serial', 'checkpointed w=64', 'scan w=64'."""
    if not is_backward(r):
        return "forward"
    return r["backward"] + ("" if r["backward"] == "serial" else f" w={r['chunk']}")


def series_by_pass(rows, op, fixed_chunk=True):
    """label → n → rows for one operator: every pass, option set and scalar as its own line. With
    fixed_chunk, each pass keeps only its most common w (a w sweep at one n is memory_vs_chunk's)."""
    mine = [r for r in rows if r["operator"] == op]
    if fixed_chunk:
        common = {}
        for b in {r.get("backward", "none") for r in mine}:
            ws = [r["chunk"] for r in mine if r.get("backward", "none") == b]
            common[b] = max(set(ws), key=ws.count)
        mine = [r for r in mine if not is_backward(r) or r["backward"] == "serial" or r["chunk"] == common[r["backward"]]]
    series = defaultdict(lambda: defaultdict(list))
    for r in mine:
        label = f"{pass_label(r)} {r['form']}/{r['variant']} {r['scalar']} d={r['d']} dv={r['dv']}"
        if options_label(r) != "plain":
            label += f" [{options_label(r)}]"
        series[label][int(r["n"])].append(r)
    return series


def fitted(ns, ys, min_n=1024):
    """Slope over n >= min_n when there are 3 such points, else over all."""
    big = [(n, y) for n, y in zip(ns, ys) if n >= min_n and y > 0]
    return fit_slope(*zip(*big)) if len(big) >= 3 else fit_slope(ns, ys)


def backward_plots(rows, outdir, summary):
    bw = [r for r in rows if is_backward(r)]
    if not bw:
        return
    ops = sorted({r["operator"] for r in bw})
    timed = [r for r in rows if r["operator"] in ops and num(r["cpu_time_median_s"]) > 0]
    # Time vs n.
    fig, axes = plt.subplots(2, len(ops), figsize=(6.5 * len(ops), 9.5), squeeze=False)
    summary.append("\n## Backward: time vs n (median per call; a backward call includes its forward; "
                   "slope = fitted exponent over n >= 1024)")
    for j, op in enumerate(ops):
        series = series_by_pass(timed, op)
        for i, (column, what) in enumerate((("cpu_time_median_s", "CPU"), ("time_median_s", "wall"))):
            ax = axes[i][j]
            for k, label in enumerate(sorted(series)):
                ns = sorted(series[label])
                t = [np.median([num(r[column]) for r in series[label][n]]) for n in ns]
                slope = fitted(ns, t)
                ax.plot(ns, t, marker="o", ms=3, color=f"C{k % 10}", ls="--" if label.startswith("forward") else "-",
                        label=f"{label} (slope {slope:.2f})" if slope is not None else label)
                if i == 0:
                    rate = ns[-1] / t[-1]
                    summary.append(f"- {op} {label}: CPU slope {slope:.3f}; n={ns[-1]}: {t[-1]:.3g} s "
                                   f"({rate:.3g} tokens/s)" if slope is not None else f"- {op} {label}: (too few n)")
            loglog(ax, "n (tokens)", f"{what} time per call, s (median)", f"{op}: {what} time vs n (dashed: forward)")
    save(fig, outdir, "backward_time_vs_n")
    # Memory vs n.
    fig, axes = plt.subplots(2, len(ops), figsize=(6.5 * len(ops), 9.5), squeeze=False)
    summary.append("\n## Backward: memory vs n (stored = states the pass keeps at its peak × numbers × bytes; "
                   "peak RSS delta of one call, which also holds the gradients dQ, dK, dV; slope over n >= 1024)")
    for j, op in enumerate(ops):
        series = series_by_pass([r for r in rows if r["operator"] in ops and is_backward(r)], op)
        for i, (column, what) in enumerate((("peak_rss_delta_bytes", "peak RSS delta of one call"),
                                            ("stored_bytes", "stored states (bytes)"))):
            ax = axes[i][j]
            for k, label in enumerate(sorted(series)):
                ns = sorted(series[label])
                m = [max(num(r[column]) for r in series[label][n]) for n in ns]
                slope = fitted(ns, m)
                ax.plot(ns, [x if x > 0 else np.nan for x in m], marker="o", ms=3, color=f"C{k % 10}",
                        label=f"{label} (slope {slope:.2f})" if slope is not None else label)
                if i == 0:
                    st = [max(num(r["stored_bytes"]) for r in series[label][n]) for n in ns]
                    cp = series[label][ns[-1]][0]
                    summary.append(f"- {op} {label}: n={ns[-1]}: peak RSS {m[-1] / 2**20:.1f} MiB, stored "
                                   f"{st[-1] / 2**20:.2f} MiB ({cp['stored_states']} states, {cp['checkpoints']} "
                                   f"checkpoints); slopes RSS {slope if slope is not None else math.nan:.2f}, "
                                   f"stored {fitted(ns, st) or math.nan:.2f}")
            loglog(ax, "n (tokens)", what, f"{op}: {what}")
    save(fig, outdir, "backward_memory_vs_n")
    # Gradient error vs n.
    err = [r for r in bw if num(r["err_normwise_rel"]) >= 0]
    if err:
        fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 5), squeeze=False)
        summary.append("\n## Backward: gradient error vs the MPFR-256 reference gradient (normwise relative, all of "
                       "dQ, dK, dV, dX0; err/bound = worst entry's observed / γ_K·M)")
        for ax, op in zip(axes[0], ops):
            series = series_by_pass(err, op, fixed_chunk=False)
            for k, label in enumerate(sorted(series)):
                ns = sorted(series[label])
                e = [max(num(r["err_normwise_rel"]) for r in series[label][n]) for n in ns]
                b = [max(num(r["bound_normwise_rel"]) for r in series[label][n]) for n in ns]
                ratio = max((num(r["err_over_bound"]) for n in ns for r in series[label][n]), default=math.nan)
                statuses = sorted({r["status"] for n in ns for r in series[label][n]})
                differs = "differs in exact arithmetic" in statuses
                color = f"C{k % 10}"
                slope = fit_slope(ns, e)
                tag = f" (exp {slope:.2f})" if slope is not None else ""
                ax.plot(ns, [x if x > 0 else np.nan for x in e], marker="x" if differs else "o", ms=3, color=color,
                        ls=":" if differs else "-", label=label + tag + (" — differs in exact arithmetic" if differs else ""))
                if any(math.isfinite(x) and x > 0 for x in b):
                    ax.plot(ns, [x if math.isfinite(x) and x > 0 else np.nan for x in b], ls="--", color=color, lw=0.8)
                eu = [max(num(r["err_units_u"]) for r in series[label][n]) for n in ns]
                summary.append(f"- {op} {label}: err {min(e):.3g}..{max(e):.3g} ({min(eu):.3g}..{max(eu):.3g} u), "
                               f"growth exponent {'%.2f' % slope if slope is not None else '-'}, worst err/bound {ratio:.3g}, status {', '.join(statuses)}")
            loglog(ax, "n (tokens)", "gradient normwise relative error (dashed: bound)", f"{op}: gradient error")
        save(fig, outdir, "gradient_error_vs_n")
    # Memory vs the checkpoint width, at each n where w is swept.
    groups = defaultdict(lambda: defaultdict(list))
    for r in bw:
        if r["backward"] != "serial":
            groups[(r["operator"], r["backward"], r["scalar"], r["n"], r["d"], r["dv"], options_label(r))][int(r["chunk"])].append(r)
    groups = {k: v for k, v in groups.items() if len(v) >= 3}
    if groups:
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        summary.append("\n## Backward: memory vs checkpoint width w")
        for k, (key, v) in enumerate(sorted(groups.items())):
            ws = sorted(v)
            label = f"{key[0]} {key[1]} {key[2]} n={key[3]} d={key[4]} dv={key[5]} [{key[6]}]"
            for ax, column in zip(axes, ("stored_bytes", "peak_rss_delta_bytes")):
                ax.plot(ws, [max(num(r[column]) for r in v[w]) for w in ws], marker="o", color=f"C{k % 10}", label=label)
            summary.append(f"- {label}: " + ", ".join(
                f"w={w}: stored {max(num(r['stored_bytes']) for r in v[w]) / 2**20:.2f} MiB, RSS "
                f"{max(num(r['peak_rss_delta_bytes']) for r in v[w]) / 2**20:.1f} MiB, CPU "
                f"{np.median([num(r['cpu_time_median_s']) for r in v[w]]):.3g} s" for w in ws))
        for ax, what in zip(axes, ("stored states, bytes", "peak RSS delta of one call, bytes")):
            loglog(ax, "checkpoint width w", what)
        save(fig, outdir, "memory_vs_chunk")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    for outdir in argv[1:]:
        path = os.path.join(outdir, "points.csv") if os.path.isdir(outdir) else outdir
        outdir = os.path.dirname(path)
        everything = load(path)
        summary = [f"# {path}: {len(everything)} points", ""]
        statuses = defaultdict(int)
        for r in everything:
            statuses[r["status"]] += 1
        summary.append("status counts: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())) + "\n")
        rows = [r for r in everything if not is_backward(r)]  # the forward plots below; backward_plots: all
        runtime_plot(rows, outdir, summary)
        if rows and "cpu_time_median_s" in rows[0]:
            runtime_plot(rows, outdir, summary, "cpu_time_median_s")
        error_plot(rows, outdir, summary)
        speedup_plot(rows, outdir, summary)
        width_plot(rows, outdir, summary)
        memory_plot(rows, outdir, summary)
        backward_plots(everything, outdir, summary)
        with open(os.path.join(outdir, "summary.txt"), "w") as f:
            f.write("\n".join(summary) + "\n")
        print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
