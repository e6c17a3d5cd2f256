"""The shared look of every HLA figure: the style file, the form-family palette, precision line styles, sizes,
and `save`, which writes PDF + SVG + PNG and records the figure's question and reading in figures.json.

Every figure module draws through this one: no figure sets fonts, colours or sizes of its own.
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

STYLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hla.mplstyle")
plt.style.use(STYLE)

ONE_COL = 3.5  # inches: one column of a two-column paper
TWO_COL = 7.0  # inches: the full text width
PNG_DPI = 220

# Okabe-Ito, one colour per form family, the same in every figure.
FAMILY_COLOR = {
    "reference": "#000000",
    "serial": "#0072B2",
    "scan": "#E69F00",
    "chunked": "#009E73",
    "decode": "#D55E00",
    "forward": "#7F7F7F",
}
FAMILY_ORDER = ["reference", "serial", "scan", "chunked", "decode", "forward"]
# The paper's formula (variant "paper" where it is not SPEC's operator) against the corrected one.
PAPER_COLOR = "#CC79A7"
ACCENT = "#56B4E9"
GUIDE = dict(color="#555555", lw=0.8, ls=(0, (1, 2)))  # guide lines: O(1), O(d^2), bound = 1

# Precision as line style (and marker fill): double solid, float dashed.
PRECISION_LS = {"double": "-", "float": "--"}
PRECISION_MARKER = {"double": "o", "float": "s"}

# Backward passes drawn in the colour of the form family they resemble.
PASS_FAMILY = {"forward": "forward", "serial": "serial", "checkpointed": "chunked", "scan": "scan"}
PASS_NAME = {"forward": "forward only", "serial": "serial backward", "checkpointed": "checkpointed backward",
             "scan": "⊕* reverse-scan backward"}


def family(form):
    """The form family of a registered form name: reference, serial, scan, chunked or decode."""
    if form == "reference":
        return "reference"
    if form.startswith("scan"):
        return "scan"
    if form.startswith("chunk") or form.startswith("mpi-"):
        return "chunked"  # mpi-*: blocks per rank, each finished by the chunked form
    if form.startswith("decode"):
        return "decode"
    return "serial"


def line_kw(fam, scalar=None, **extra):
    kw = dict(color=FAMILY_COLOR[fam], marker=PRECISION_MARKER.get(scalar, "o"))
    if scalar:
        kw["ls"] = PRECISION_LS[scalar]
        if scalar == "float":
            kw["mfc"] = "white"
    kw.update(extra)
    return kw


def family_handles(families):
    return [Line2D([], [], color=FAMILY_COLOR[f], marker="o", ls="-", label=f) for f in FAMILY_ORDER if f in families]


def precision_handles(scalars=("double", "float")):
    return [Line2D([], [], color="#444444", ls=PRECISION_LS[s], marker=PRECISION_MARKER[s],
                   mfc="white" if s == "float" else "#444444", label=s) for s in scalars]


def figure(panels=1, width=None, height=None, sharey=False, sharex=False):
    """A figure of at most 2×2 panels: 1 panel → one column wide, 2 → two columns side by side,
    3–4 → 2×2 at two columns. Returns (fig, flat list of axes)."""
    if panels > 4:
        raise ValueError("at most four panels per figure")
    rows, cols = (1, 1) if panels == 1 else (1, 2) if panels == 2 else (2, 2)
    width = width or (ONE_COL if panels == 1 else TWO_COL)
    height = height or (2.6 if rows == 1 else 4.9)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, sharey=sharey, sharex=sharex)
    flat = [ax for row in axes for ax in row]
    for ax in flat[panels:]:
        ax.set_visible(False)
    return fig, flat[:panels]


def legend_below(fig, handles, ncol=None):
    """One legend for the whole figure, under the panels (at most about six entries)."""
    if not handles:
        return
    if len(handles) > 8:
        raise ValueError(f"legend of {len(handles)} entries: split the figure")
    # Anchored just below the canvas; savefig's tight bounding box takes it in (constrained layout in
    # matplotlib 3.6 does not reserve room for figure legends).
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol or min(len(handles), 4))


def save(fig, outdir, stem, question, reading, key=False, shows=""):
    """Writes stem.{pdf,svg,png} into outdir and records {question, shows, reading} in outdir/figures.json; `shows`
    says what this figure draws (data.scope of its rows), so figures asking one question over different data have
    captions of their own."""
    fig.suptitle(question)
    for ext in ("pdf", "svg", "png"):
        kw = {"dpi": PNG_DPI} if ext == "png" else {}
        if ext == "svg":
            kw["metadata"] = {"Date": None}
        elif ext == "pdf":
            kw["metadata"] = {"CreationDate": None}
        fig.savefig(os.path.join(outdir, f"{stem}.{ext}"), **kw)
    plt.close(fig)
    record(outdir, stem, question, reading, key, shows)


def record(outdir, stem, question, reading, key=False, shows=""):
    path = os.path.join(outdir, "figures.json")
    entries = []
    if os.path.exists(path):
        with open(path) as f:
            entries = [e for e in json.load(f) if e["stem"] != stem]
    entries.append({"stem": stem, "question": question, "shows": shows, "reading": reading, "key": bool(key),
                    "files": [f"{stem}.{ext}" for ext in ("png", "pdf", "svg")]})
    with open(path, "w") as f:
        json.dump(entries, f, indent=1, ensure_ascii=False)
        f.write("\n")


def reset_index(outdir):
    """Forget the figures recorded in outdir (a sweep's plots are all redrawn together)."""
    path = os.path.join(outdir, "figures.json")
    if os.path.exists(path):
        os.remove(path)


def ylabel(axes, text, cols=2):
    """The y label on the left column only (panels share their y axis)."""
    for i, ax in enumerate(axes):
        if len(axes) == 1 or i % cols == 0:
            ax.set_ylabel(text)


def end_labels(ax, items, min_gap_pt=7.5):
    """Labels at the right end of lines, [(x, y, text, color)], pushed apart vertically so none overlap.
    Call after the axes' scales and data are final."""
    items = [it for it in items if it[1] is not None and it[1] > 0]
    if not items:
        return
    ax.autoscale_view()
    fig = ax.figure
    px_per_pt = fig.dpi / 72.0
    disp = [ax.transData.transform((x, y))[1] for x, y, _, _ in items]
    order = sorted(range(len(items)), key=lambda i: disp[i])
    placed = {}
    last = -1e9
    for i in order:
        y = max(disp[i], last + min_gap_pt * px_per_pt)
        placed[i] = y
        last = y
    for i, (x, y, text, color) in enumerate(items):
        ax.annotate(text, (x, y), xytext=(4, (placed[i] - disp[i]) / px_per_pt), textcoords="offset points",
                    fontsize=6.5, color=color, va="center", ha="left")
