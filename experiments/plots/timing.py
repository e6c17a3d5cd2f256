"""Cost figures of a sweep (CPU time of one call, median over repeats):

  time_per_token_vs_n  Is per-token cost flat in n?  (one panel per operator, one line per form family ×
                       precision, the fitted exponent of time in n at each line's end, an O(1) guide)
  time_vs_width        How does cost grow with d (and dv)?  (at fixed n, with the expected exponent's guide)
  time_vs_chunk        Which chunk width?  (chunked forms' time vs w at fixed n)
"""
from collections import defaultdict

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from . import style
from .data import (base_dims, fit_slope, fitted, fmt, gates, is_backward, main_chunk, mode, num, options_label, pow2,
                   scope, width_exponent)
from .errors import _ops

CPU = "cpu_time_median_s"


def shared_host_note(rows):
    """What a reading says when the timings came from a host shared by several ranks of an MPI sweep
    (column ranks_on_host, docs/distributed.md); empty for one-process sweeps."""
    counts = [num(r.get("ranks_on_host")) for r in rows]
    shared = int(max((c for c in counts if c == c), default=1))  # NaN (no such column): one process
    return f" Timed on a host shared by up to {shared} ranks of an MPI job." if shared > 1 else ""


def threads_note(rows):
    """What a reading says when a point ran on more threads than it asked for (column threads_used, the threads whose
    CPU time advanced during its first call): its CPU time then counts other threads' work or spinning."""
    over = [r for r in rows if num(r.get("threads_used")) > num(r["threads"])]
    if not over:
        return ""
    worst = max(over, key=lambda r: num(r["threads_used"]))
    most = int(num(worst["threads_used"]))
    return (f" {len(over)} of {len(rows)} points ran on more threads than asked (up to {most} for {worst['threads']}: "
            f"{worst['operator']} {worst['form']}, n={worst['n']}).")


def _timed(rows, column=CPU):
    ok = [r for r in rows if not is_backward(r) and num(r.get(column)) > 0]
    if not ok:
        return []
    thr = min(int(r["threads"]) for r in ok)
    return [r for r in ok if int(r["threads"]) == thr]


def _representative(rows, fam):
    """The form drawn for a family: SPEC-exact variants first, then the form with the most points."""
    mine = [r for r in rows if style.family(r["form"]) == fam and r["status"] != "differs in exact arithmetic"]
    if not mine:
        return None, []
    form = mode([r["form"] for r in mine])
    mine = [r for r in mine if r["form"] == form]
    variant = "corrected" if any(r["variant"] == "corrected" for r in mine) else mode([r["variant"] for r in mine])
    return f"{form}/{variant}", [r for r in mine if r["variant"] == variant]


def time_per_token_vs_n(rows, outdir):
    """The forms without gates; the gated ones have their own figure (gated_time_per_token_vs_n)."""
    _per_token(_timed([r for r in rows if gates(r) == "none"]), rows, outdir, "time_per_token_vs_n",
               "Is per-token cost flat in n?")


def gated_time_per_token_vs_n(rows, outdir):
    """The gated forms at one gate draw (the spec with the most n values)."""
    ok = _timed([r for r in rows if gates(r) != "none"])
    spans = {g: len({r["n"] for r in ok if gates(r) == g}) for g in {gates(r) for r in ok}}
    if not spans or max(spans.values()) < 3:
        return
    spec = max(spans, key=lambda g: (spans[g], g))
    _per_token([r for r in ok if gates(r) == spec], rows, outdir, "gated_time_per_token_vs_n",
               "Is the gated forms' per-token cost flat in n?")


def _per_token(ok, rows, outdir, stem, question):
    if not ok:
        return
    d, dv = base_dims(ok)
    opts = mode([options_label(r) for r in ok])
    ok = [r for r in ok if (r["d"], r["dv"]) == (d, dv) and options_label(r) == opts]
    ok = [r for r in ok if not r["form"].startswith(("chunked", "scan-twolevel"))
          or r["chunk"] == main_chunk(ok, r["form"])]
    ops = [op for op in _ops(ok) if len({r["n"] for r in ok if r["operator"] == op}) >= 3][:4]
    if not ops:
        return
    fig, axes = style.figure(len(ops), sharey=True)
    families, slopes, drawn = set(), [], {}
    for ax, op in zip(axes, ops):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ends = []
        mine = [r for r in ok if r["operator"] == op]
        flat_level = None
        for fam in style.FAMILY_ORDER:
            name, rs = _representative(mine, fam)
            for scalar in ("double", "float"):
                s = defaultdict(list)
                for r in rs:
                    if r["scalar"] == scalar:
                        s[int(r["n"])].append(num(r[CPU]))
                if len(s) < 3:
                    continue
                families.add(fam)
                ns = sorted(s)
                t = [float(np.median(s[n])) for n in ns]
                per_tok = [x / n * 1e6 for x, n in zip(t, ns)]
                kw = style.line_kw(fam, scalar)
                ax.plot(ns, per_tok, **kw)
                slope = fitted(ns, t)
                if slope is not None:
                    ends.append((ns[-1], per_tok[-1], f"{slope:.2f}", kw["color"]))
                    if fam != "reference":
                        slopes.append((slope, op, name, scalar))
                drawn[(op, fam, scalar)] = (name, dict(zip(ns, per_tok)))
                if fam == "serial" and scalar == "double":
                    flat_level = per_tok[0]
        ns_all = sorted({int(r["n"]) for r in mine})
        if flat_level:
            ax.plot([ns_all[0], ns_all[-1]], [flat_level, flat_level], **style.GUIDE)
            ax.annotate("O(1)", (ns_all[0], flat_level), xytext=(0, 3), textcoords="offset points", fontsize=7,
                        color="#555555")
        ax.set_xlim(right=ns_all[-1] * 2.2)
        style.end_labels(ax, ends)
        ax.set_title(op + (f" (d = dv = {d})" if d == dv else f" (d = {d}, dv = {dv})"))
        ax.set_xlabel("n (tokens)")
    style.ylabel(axes, "CPU µs per token\n(numbers: fitted exponent of time in n)")
    style.legend_below(fig, style.family_handles(families) + style.precision_handles(), ncol=4)
    parts = []
    if slopes:
        lo, hi = min(slopes), max(slopes)
        parts.append(f"fitted exponents of time in n {lo[0]:.2f}–{hi[0]:.2f} for every streaming form "
                     f"(1 = flat per token; lowest {lo[1]} {lo[2]} {lo[3]}, highest {hi[1]} {hi[2]} {hi[3]})")
    op0 = ops[0]
    mine = {k: v for k, v in drawn.items() if k[0] == op0 and k[1] != "reference"}
    common = set.intersection(*(set(v[1]) for v in mine.values())) if mine else set()
    if common:
        at = max(common)
        for sc in ("float", "double"):
            cells = [f"{fam} {mine[(op0, fam, sc)][1][at]:.2f}" for fam in style.FAMILY_ORDER if (op0, fam, sc) in mine]
            if cells:
                parts.append(f"{op0} at n={pow2(at)}, {sc}, µs per token: " + ", ".join(cells))
    refs = [(k, v) for k, v in drawn.items() if k[1] == "reference"]
    reading = "; ".join(parts) + "." + (" The literal references grow like n² per token." if refs else "")
    style.save(fig, outdir, stem, question, reading + threads_note(ok) + shared_host_note(rows), key=True,
               shows=scope([r for r in ok if r["operator"] in ops]))


def time_vs_width(rows, outdir):
    ok = _timed(rows)
    panels = []
    for axis, fixed in (("d", "dv"), ("dv", "d")):
        groups = defaultdict(lambda: defaultdict(list))
        for r in ok:
            key = (r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r[fixed], options_label(r))
            groups[key][int(r[axis])].append(num(r[CPU]))
        groups = {k: v for k, v in groups.items() if len(v) >= 3}
        if groups:
            panels.append((axis, fixed, groups))
    if not panels:
        return
    fig, axes = style.figure(len(panels), sharey=True)
    families, readings = set(), []
    for ax, (axis, fixed, groups) in zip(axes, panels):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ends = []
        ops = {k[0] for k in groups}
        guide_at = None
        for key, v in sorted(groups.items()):
            op, form, variant, scalar, n = key[:5]
            fam = style.family(form)
            families.add(fam)
            ws = sorted(v)
            t = [float(np.median(v[w])) / int(n) * 1e6 for w in ws]
            kw = style.line_kw(fam, scalar)
            ax.plot(ws, t, **kw)
            top = [(w, x) for w, x in zip(ws, t) if w >= ws[-1] // 4]
            slope = fit_slope(*zip(*top)) if len(top) >= 3 else fit_slope(ws, t)
            ends.append((ws[-1], t[-1], f"{slope:.2f}", kw["color"]))
            if guide_at is None or t[-1] > guide_at[1]:
                guide_at = (ws[-1], t[-1], ws[0])
            readings.append((axis, op, form, scalar, slope, ws, t))
        op = sorted(ops)[0]
        p = width_exponent(op, axis)  # the d² term of hla2/hla3, d·dv for the others (the operator table)
        if guide_at:
            w1, t1, w0 = guide_at
            w0 = max(w0, w1 // 8)
            ax.plot([w0, w1], [t1 * (w0 / w1) ** p, t1], **style.GUIDE)
            ax.annotate(f"∝ {axis}{'²' if p == 2 else ''}", (w0, t1 * (w0 / w1) ** p), xytext=(-2, 2),
                        textcoords="offset points", fontsize=7, color="#555555", ha="right")
        n_fixed = mode([k[4] for k in groups])
        fixed_val = mode([k[5] for k in groups])
        ax.set_xlim(right=max(max(v) for v in groups.values()) * 1.8)
        style.end_labels(ax, ends)
        ax.set_title(f"{', '.join(sorted(ops))}: vs {axis} (n = {n_fixed}, {fixed} = {fixed_val})")
        ax.set_xlabel(axis)
    style.ylabel(axes, "CPU µs per token\n(numbers: fitted exponent, upper range)")
    style.legend_below(fig, style.family_handles(families) + style.precision_handles(
        sorted({r[3] for r in readings}, key=["double", "float"].index)), ncol=5)
    parts = []
    for axis, op, form, scalar, slope, ws, t in readings:
        parts.append(f"{op} {form} vs {axis}: exponent {slope:.2f} over {axis} ≥ {ws[-1] // 4} "
                     f"({fmt(t[0])} → {fmt(t[-1])} µs/token)")
    reading = ("Small widths are overhead-bound; towards the top of the range the cost approaches the expected "
               "power — " + "; ".join(parts) + ".")
    style.save(fig, outdir, "time_vs_width", "How does cost grow with d?", reading + shared_host_note(rows), key=True,
               shows=scope([r for r in ok if (r["operator"], r["form"], r["variant"], r["scalar"], r["n"])
                            in {k[:5] for _, _, groups in panels for k in groups}]))


def time_vs_chunk(rows, outdir):
    ok = _timed(rows, "time_median_s")
    groups = defaultdict(lambda: defaultdict(list))
    for r in ok:
        if r["form"].startswith("chunked"):
            groups[(r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r["d"], r["dv"],
                    options_label(r))][int(r["chunk"])].append(num(r["time_median_s"]))
    groups = {k: v for k, v in groups.items() if len(v) >= 3}
    if not groups:
        return
    fig, axes = style.figure(1)
    ax = axes[0]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    forms = sorted({k[1] for k in groups})
    markers = dict(zip(forms, ["o", "D", "^", "v"]))
    best = {}
    for key, v in sorted(groups.items()):
        ws = sorted(v)
        t = [float(np.median(v[w])) for w in ws]
        kw = style.line_kw("chunked", key[3], marker=markers[key[1]])
        ax.plot(ws, t, **kw)
        i = int(np.argmin(t))
        ax.plot([ws[i]], [t[i]], marker="*", ms=8, color="#000000", ls="none", zorder=5)
        best[key] = (ws, t)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ws_all = sorted({w for v in groups.values() for w in v})
    ax.set_xticks(ws_all)
    ax.set_xticklabels([str(w) for w in ws_all])
    plain_numbers = FuncFormatter(lambda y, _: f"{y:g}")
    ax.yaxis.set_major_formatter(plain_numbers)
    ax.yaxis.set_minor_formatter(plain_numbers)
    k0 = next(iter(groups))
    ax.set_title(f"{k0[0]}, n = {k0[4]}, d = {k0[5]}, dv = {k0[6]}")
    ax.set_xlabel("chunk width w")
    ax.set_ylabel("wall time per call, s (median)")
    names = {"chunked": "u-form (chunked)", "chunked-monoid": "(S, C, G) carry"}
    handles = [Line2D([], [], color=style.FAMILY_COLOR["chunked"], marker=markers[f], ls="-", label=names.get(f, f))
               for f in forms]
    handles += style.precision_handles(sorted({k[3] for k in groups}, key=["double", "float"].index))
    handles.append(Line2D([], [], marker="*", ms=8, color="#000000", ls="none", label="fastest"))
    style.legend_below(fig, handles, ncol=3)
    parts = []
    for key, (ws, t) in sorted(best.items()):
        i = int(np.argmin(t))
        others = [x for j, x in enumerate(t) if j != i]
        parts.append(f"{names.get(key[1], key[1])} {key[3]}: fastest at w={ws[i]} ({t[i]:.3g} s; "
                     f"{min(others):.3g}–{max(others):.3g} s elsewhere)")
    u = {k[3]: dict(zip(*best[k])) for k in best if k[1] == "chunked"}
    m = {k[3]: dict(zip(*best[k])) for k in best if k[1] == "chunked-monoid"}
    for sc in m:
        if sc in u:
            ratios = [m[sc][w] / u[sc][w] for w in m[sc] if w in u[sc]]
            parts.append(f"the carry is {min(ratios):.2f}–{max(ratios):.2f}× the u-form's time ({sc})")
    style.save(fig, outdir, "time_vs_chunk", "Which chunk width?", "; ".join(parts) + "." + shared_host_note(rows),
               shows=scope([r for r in ok if r["form"].startswith("chunked")]))


def draw(rows, outdir):
    time_per_token_vs_n(rows, outdir)
    gated_time_per_token_vs_n(rows, outdir)
    time_vs_width(rows, outdir)
    time_vs_chunk(rows, outdir)
