"""Backward-pass figures (points with column `backward` ≠ none; configs/backward.toml). Each pass is drawn in
the colour of the form family it resembles (serial backward: serial; checkpointed: chunked; ⊕* reverse scan:
scan; the forward alone, the yardstick: grey).

  backward_time_vs_n    What does a backward pass cost against the forward?
  backward_memory_vs_n  How much does each backward pass store?
  gradient_error_vs_n   Are the gradients within their rounding bound?
  memory_vs_chunk       Which checkpoint width?
"""
from collections import defaultdict

import numpy as np
from matplotlib.lines import Line2D

from . import style
from .data import fitted, fmt, is_backward, mode, num, options_label, pow2, scope
from .errors import _ops

PASSES = ["forward", "serial", "checkpointed", "scan"]


def _pass(r):
    return r["backward"] if is_backward(r) else "forward"


def _handles(passes):
    return [Line2D([], [], color=style.FAMILY_COLOR[style.PASS_FAMILY[p]], marker="o",
                   ls="--" if p == "forward" else "-", label=style.PASS_NAME[p]) for p in PASSES if p in passes]


def _series(rows, op, column, agg=max):
    """pass -> n -> value for one operator at its most common option set and each pass's most common w."""
    mine = [r for r in rows if r["operator"] == op and num(r[column]) > 0]
    if not mine:
        return {}, ""
    opts = mode([options_label(r) for r in mine if is_backward(r)] or [options_label(r) for r in mine])
    mine = [r for r in mine if options_label(r) == opts]
    out = defaultdict(lambda: defaultdict(list))
    for p in PASSES:
        rs = [r for r in mine if _pass(r) == p]
        if p in ("checkpointed", "scan") and rs:
            w = mode([r["chunk"] for r in rs])
            rs = [r for r in rs if r["chunk"] == w]
        for r in rs:
            out[p][int(r["n"])].append(num(r[column]))
    return {p: {n: agg(v) for n, v in s.items()} for p, s in out.items()}, opts


def _panels(rows, outdir, column, ylabel, stem, question, agg, reading_fn, bound=False):
    ops = _ops([r for r in rows if is_backward(r) and num(r[column]) > 0])[:4]
    if not ops:
        return
    fig, axes = style.figure(len(ops), sharey=True)
    passes, notes = set(), {}
    for ax, op in zip(axes, ops):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        series, opts = _series(rows, op, column, agg)
        ends = []
        for p in PASSES:
            if p not in series or len(series[p]) < 2:
                continue
            passes.add(p)
            ns = sorted(series[p])
            y = [series[p][n] for n in ns]
            color = style.FAMILY_COLOR[style.PASS_FAMILY[p]]
            ax.plot(ns, y, color=color, marker="o", ls="--" if p == "forward" else "-")
            slope = fitted(ns, y, 1024)
            if slope is not None and not bound:
                ends.append((ns[-1], y[-1], f"{slope:.2f}", color))
            notes[(op, p)] = (ns, y, slope)
        if bound:
            ax.axhline(1.0, **style.GUIDE)
            ax.text(0.02, 1.0, "bound", transform=ax.get_yaxis_transform(), va="bottom", fontsize=7, color="#555555")
            ax.set_ylim(top=3)
        else:
            ax.set_xlim(right=max(n for s in series.values() for n in s) * 2.2)
        style.end_labels(ax, ends)
        ax.set_title(f"{op}" + ("" if opts == "plain" else f", {opts}"))
        ax.set_xlabel("n (tokens)")
    style.ylabel(axes, ylabel)
    style.legend_below(fig, _handles(passes), ncol=2)
    style.save(fig, outdir, stem, question, reading_fn(notes), key=stem == "backward_time_vs_n",
               shows=scope([r for r in rows if r["operator"] in ops and num(r[column]) > 0]))


def _time_reading(notes):
    parts = []
    for op in sorted({k[0] for k in notes}):
        f = notes.get((op, "forward"))
        cells = []
        for p in ("serial", "checkpointed", "scan"):
            if (op, p) in notes:
                ns, y, _ = notes[(op, p)]
                cell = f"{p} {y[-1]:.3g} s"
                if f and ns[-1] in f[0]:
                    cell += f" ({y[-1] / f[1][f[0].index(ns[-1])]:.1f}× forward)"
                cells.append(cell)
        if cells:
            n = notes[(op, "serial")][0][-1] if (op, "serial") in notes else ""
            parts.append(f"{op} at n={pow2(n)}: " + ", ".join(cells))
    slopes = [v[2] for k, v in notes.items() if v[2] is not None and k[1] != "forward"]
    return (f"Every pass is linear in n (fitted exponents {min(slopes):.2f}–{max(slopes):.2f}); "
            + "; ".join(parts) + ".")


def _memory_reading(notes):
    parts = []
    for op in sorted({k[0] for k in notes}):
        cells = [f"{p} {notes[(op, p)][1][-1] / 2**20:.3g} MiB" for p in ("serial", "checkpointed", "scan")
                 if (op, p) in notes]
        n = max(notes[(op, p)][0][-1] for p in ("serial", "checkpointed", "scan") if (op, p) in notes)
        parts.append(f"{op} at n={pow2(n)}: " + ", ".join(cells))
    return "Stored states at the largest n — " + "; ".join(parts) + "."


def _error_reading(notes):
    worst = max(((k, max(v[1])) for k, v in notes.items()), key=lambda kv: kv[1])
    per_op = []
    for op in sorted({k[0] for k in notes}):
        per_op.append(f"{op} {fmt(max(max(v[1]) for k, v in notes.items() if k[0] == op))}")
    above = worst[1] > 1
    return (("Some gradients EXCEED their bound" if above
             else "Every gradient that computes SPEC's operator is within its bound")
            + "; worst error/bound per operator: "
            + ", ".join(per_op) + f" (worst: {worst[0][0]} {worst[0][1]}).")


def memory_vs_chunk(rows, outdir):
    bw = [r for r in rows if is_backward(r) and r["backward"] != "serial" and num(r["stored_bytes"]) > 0]
    groups = defaultdict(lambda: defaultdict(list))
    for r in bw:
        groups[(r["operator"], r["backward"], r["n"], options_label(r))][int(r["chunk"])].append(r)
    groups = {k: v for k, v in groups.items() if len(v) >= 3}
    if not groups:
        return
    fig, axes = style.figure(1)
    ax = axes[0]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    passes, parts = set(), []
    for key, v in sorted(groups.items()):
        ws = sorted(v)
        st = [max(num(r["stored_bytes"]) for r in v[w]) / 2**20 for w in ws]
        color = style.FAMILY_COLOR[style.PASS_FAMILY[key[1]]]
        passes.add(key[1])
        ax.plot(ws, st, color=color, marker="o")
        i = int(np.argmin(st))
        ax.plot([ws[i]], [st[i]], marker="*", ms=8, color="#000000", ls="none", zorder=5)
        parts.append(f"{key[1]} stores least at w={ws[i]} ({st[i]:.3g} MiB; "
                     + ", ".join(f"{s:.3g} at w={w}" for w, s in zip(ws, st) if w != ws[i]) + ")")
    k0 = sorted(groups)[0]
    n = int(k0[2])
    ax.axvline(n ** 0.5, **style.GUIDE)
    ax.text(n ** 0.5, 0.97, " w = √n", transform=ax.get_xaxis_transform(), fontsize=7, color="#555555", va="top")
    ax.set_title(f"{k0[0]}, n = {pow2(n)}, {k0[3]}")
    ax.set_xlabel("checkpoint width w")
    ax.set_ylabel("stored states, MiB")
    handles = _handles(passes) + [Line2D([], [], marker="*", ms=8, color="#000000", ls="none", label="least")]
    style.legend_below(fig, handles, ncol=2)
    drawn = [r for v in groups.values() for rs in v.values() for r in rs]
    style.save(fig, outdir, "memory_vs_chunk", "Which checkpoint width?",
               "(n/w + w) states: " + "; ".join(parts) + ".", shows=scope(drawn))


def draw(rows, outdir):
    if not any(is_backward(r) for r in rows):
        return
    _panels(rows, outdir, "cpu_time_median_s", "CPU time per call, s\n(numbers: fitted exponent in n)",
            "backward_time_vs_n", "What does a backward pass cost against the forward?", np.median, _time_reading)
    _panels([r for r in rows if is_backward(r)], outdir, "stored_bytes",
            "stored states, bytes\n(numbers: fitted exponent in n)",
            "backward_memory_vs_n", "How much does each backward pass store?", max, _memory_reading)
    err = [r for r in rows if is_backward(r) and r["status"] == "ok" and num(r["err_over_bound"]) >= 0]
    if err:
        _panels(err, outdir, "err_over_bound", "worst gradient error ÷ bound", "gradient_error_vs_n",
                "Are the gradients within their rounding bound?", max, _error_reading, bound=True)
    memory_vs_chunk(rows, outdir)
