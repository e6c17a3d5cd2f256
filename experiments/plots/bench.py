"""make bench's figure: useful GFLOP/s of every benchmark entry against the rooflines (a large matrix product at
the same scalar and thread count, measured in the same run), one and two threads side by side.

Entries are Google Benchmark names `<op>/<form>/<scalar>/n:../d:../dv:../threads:<t>[/heads:<h>]/...`, a fixed decay
`/gamma:<γ>`, per-token gates `/gates:<spec>` or another chunk width `/w:<w>` after the threads (bars of their own,
"γ=0.9" / "gated" / "w=16"); rooflines
`roofline/<library>/<scalar>/threads:<t>` (eigen, openblas, blis, libxsmm: the best of them is drawn);
the PyTorch peer's entries `peer/torch/<op>/<form>/...` are bars like ours; gemm/, peak/, bandwidth/ and phase/
entries (the block schedule's two products alone, read by the work/span model) are skipped.
Writes bench.{pdf,svg,png} beside the JSON (results/bench.json → results/bench.png).
"""
import json
import os
from collections import defaultdict

import numpy as np
from matplotlib.lines import Line2D

from . import style

SCALARS = ("float", "double")
ROOF_LS = ["--", (0, (4, 1.5, 1, 1.5)), ":", (0, (6, 2))]


def parse(name):
    """(kind, fields): kind 'roofline' or 'entry';
    fields: op, form, scalar, threads, heads, library, n, d, dv, decay."""
    parts = name.split("/")
    f = {"threads": 1, "heads": 1, "decay": ""}
    for p in parts:
        if ":" in p:
            k, v = p.split(":", 1)
            if k in ("threads", "heads", "n", "d", "dv"):
                f[k] = int(v)
            elif k == "gamma":
                f["decay"] = f" γ={v}"
            elif k == "gates":
                f["decay"] = " gated"
            elif k == "w":  # another chunk width than the bench's (.../threads:1/w:<w>): a bar of its own
                f["decay"] = f" w={v}"
        elif p in SCALARS:
            f["scalar"] = p
    if parts[0] in ("gemm", "peak", "bandwidth", "phase"):
        return "limit", f
    if parts[0] == "peer":  # peer/<framework>/<op>/<form>/...
        f["op"], f["form"] = parts[2], f"{parts[1]} peer"
        return "entry", f
    if parts[0] == "ceiling":  # ceiling/<op>/<form>/...: the form's two halves at once (a two-core limit)
        f["op"], f["form"] = parts[1], f"{parts[2]} 2-core ceiling"
        return "entry", f
    if parts[0] == "roofline":
        f["library"] = parts[1] if len(parts) > 1 and parts[1] not in SCALARS and ":" not in parts[1] else "gemm"
        return "roofline", f
    f["op"], f["form"] = parts[0], parts[1] if len(parts) > 1 else ""
    return "entry", f


def load(path):
    with open(path) as f:
        data = json.load(f)
    medians = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if "gflops" not in b:
            continue
        name = b.get("run_name", b["name"])
        medians.setdefault(name, b["gflops"])
    return data.get("context", {}), medians


def draw(path):
    outdir = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    ctx, medians = load(path)
    entries = defaultdict(dict)   # (scalar, label) -> threads -> gflops
    roofs = defaultdict(dict)     # (scalar, library) -> threads -> gflops
    for name, g in medians.items():
        kind, f = parse(name)
        if "scalar" not in f:
            continue
        if kind == "roofline":
            roofs[(f["scalar"], f["library"])][f["threads"]] = g
        elif kind == "entry":
            form = {"chunked-multihead": "multi-head", "chunked-fused-multihead": "fused multi-head",
                    "chunked-multiquery": "multi-query", "chunked-naive-cumprod": "naive cumprod"
                    }.get(f["form"], f["form"])
            label = f"{f['op']} {form}{f['decay']}" + (f" ×{f['heads']}" if f["heads"] > 1 else "")
            entries[(f["scalar"], label)][f["threads"]] = g
    scalars = [s for s in SCALARS if any(k[0] == s for k in entries)]
    if not scalars:
        return outdir
    threads = sorted({t for v in list(entries.values()) + list(roofs.values()) for t in v})[:4]
    shades = [style.FAMILY_COLOR["chunked"], "#7FCFB9", "#BFE7DC", "#DFF3ED"]
    libraries = sorted({k[1] for k in roofs})
    fig, axes = style.figure(len(scalars), height=3.0, sharey=True)
    readings = []
    for ax, scalar in zip(axes, scalars):
        labels = sorted({k[1] for k in entries if k[0] == scalar}, key=lambda s: (s.split()[0] != "hla2", s))
        x = np.arange(len(labels))
        width = 0.8 / len(threads)
        for i, t in enumerate(threads):
            ys = [entries[(scalar, lab)].get(t, np.nan) for lab in labels]
            ax.bar(x - 0.4 + width * (i + 0.5), ys, width, color=shades[i], edgecolor="#333333", lw=0.4)
        # The best roofline at each thread count (the fastest library's 1024² product in this run).
        roof = {t: max((roofs[(scalar, lib)][t], lib) for lib in libraries if t in roofs.get((scalar, lib), {}))
                for t in threads if any(t in roofs.get((scalar, lib), {}) for lib in libraries)}
        for i, t in enumerate(threads):
            if t in roof:
                g, lib = roof[t]
                ax.axhline(g, color="#000000" if i == 0 else "#777777", ls=ROOF_LS[i % len(ROOF_LS)], lw=0.9)
                ax.text(len(labels) - 0.45, g, f"{lib} {t} thr", fontsize=6.5, va="bottom", ha="right",
                        color="#000000" if i == 0 else "#777777")
        ax.set_xticks(x)
        # Beyond about 14 bars (make bench with its gated entries draws 24 a panel) slanted labels run into each other.
        crowded = len(labels) > 14
        ax.set_xticklabels(labels, rotation=90 if crowded else 30, ha="center" if crowded else "right",
                           fontsize=6 if crowded else None)
        ax.set_title(scalar)
        ax.grid(axis="x", visible=False)
        for label in ("hla2 chunked", "hla2 chunked-fused"):
            main = entries.get((scalar, label), {})
            cells = [f"{main[t]:.1f} GFLOP/s at {t} thread{'s' if t > 1 else ''}"
                     + (f" ({main[t] / roof[t][0]:.2f} of {roof[t][1]}'s)" if t in roof else "")
                     for t in threads if t in main]
            if cells:
                readings.append(f"{label} {scalar}: " + ", ".join(cells))
    style.ylabel(axes, "useful GFLOP/s (median)")
    handles = [Line2D([], [], color=shades[i], marker="s", ms=7, ls="none", mec="#333333", mew=0.4,
                      label=f"{t} thread{'s' if t > 1 else ''}") for i, t in enumerate(threads)]
    handles += [Line2D([], [], color="#000000" if i == 0 else "#777777", ls=ROOF_LS[i % len(ROOF_LS)],
                       label=f"best 1024² GEMM, {t} thread{'s' if t > 1 else ''}") for i, t in enumerate(threads)]
    style.legend_below(fig, handles, ncol=4)
    commit = ctx.get("hla_git_commit", "")
    reading = "; ".join(readings) + (f" (commit {commit})." if commit else ".")
    style.save(fig, outdir, stem, "How close to the matrix-multiply roofline do the chunked kernels run?", reading,
               key=True)
    return outdir
