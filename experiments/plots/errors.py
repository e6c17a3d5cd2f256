"""Forward-error figures of a sweep (any sweep whose points have errors against the MPFR reference):

  error_bound_vs_n      Is every form within its rounding bound as n grows?  (error ÷ bound, one panel per
                        operator, one line per form family × precision, the bound at 1)
  error_growth_vs_n     How fast does the rounding error grow with n?  (hla2, γ = 1: error in units of u)
  error_normalized_vs_n What does normalization with a small ε cost?  (hla2 normalized, per ε)
  error_vs_gate_strength  Which formulations stay accurate as per-token gates get stronger?  (gated points with
                        gates "strength:S": error against MPFR vs S, one line per form × precision; non-finite
                        outputs marked where they happened)
  paper_vs_corrected    Where does the paper's formula leave the operator?  (variant paper vs corrected where
                        fp61 says the paper's differs; the gap in exact arithmetic marked)
"""
import math
from collections import defaultdict

import numpy as np
from matplotlib.lines import Line2D

from . import style
from .data import (frac, fit_slope, fmt, gamma, gate_strength, gates, is_backward, num, operator_row,
                   operator_table, operators_in_order, options_label, plain, scope)

DIFFERS = "differs in exact arithmetic"


def _ops(rows):
    return operators_in_order({r["operator"] for r in rows})


def _with_error(rows):
    return [r for r in rows if not is_backward(r) and num(r["err_normwise_rel"]) >= 0]


def _where(r):
    return f"{r['operator']} {r['form']} {r['scalar']}, n={r['n']}" + (
        f", {options_label(r)}" if options_label(r) != "plain" else "")


# Variants that name a formulation of the harness's own beside the forms (not the paper's or a correction): drawn and
# counted as formulations under test, which are expected to leave their bound where they break, not as alarms.
FORMULATION_NAME = {"naive": "naive cumulative products"}
FORMULATION_LABEL = {k: v + " (under test)" for k, v in FORMULATION_NAME.items()}


def _named_variant(r):
    return "" if r["variant"] in ("spec", "paper", "corrected") else r["variant"]


def error_bound_vs_n(rows, outdir):
    ok = [r for r in _with_error(rows) if r["status"] != DIFFERS and num(r["err_over_bound"]) >= 0]
    if not ok:
        return
    ops = _ops(ok)
    for part in range(0, len(ops), 4):
        chunk = ops[part:part + 4]
        fig, axes = style.figure(len(chunk), sharey=True)
        families, formulations = set(), set()
        for ax, op in zip(axes, chunk):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            series = defaultdict(lambda: defaultdict(float))
            for r in ok:
                if r["operator"] == op:
                    # a named formulation beside the forms (the naive cumulative products) is its own line, not
                    # folded into its family's worst
                    key = (style.family(r["form"]), r["scalar"], _named_variant(r))
                    series[key][int(r["n"])] = max(series[key][int(r["n"])], num(r["err_over_bound"]))
            for fam in style.FAMILY_ORDER:
                for scalar in ("double", "float"):
                    for named in sorted({k[2] for k in series if k[:2] == (fam, scalar)}):
                        families.add(fam)
                        s = series[(fam, scalar, named)]
                        ns = sorted(s)
                        kw = style.line_kw(fam, scalar)
                        if named:
                            kw["color"] = style.PAPER_COLOR
                            formulations.add(named)
                        ax.plot(ns, [s[n] if s[n] > 0 else np.nan for n in ns], **kw)
            ax.axhline(1.0, **style.GUIDE)
            ax.text(0.02, 1.0, "bound", transform=ax.get_yaxis_transform(), va="bottom", fontsize=7, color="#555555")
            ax.set_title(op)
            ax.set_xlabel("n (tokens)")
            ax.set_ylim(top=3)
        style.ylabel(axes, "worst error ÷ rounding bound")
        extra = [Line2D([], [], color=style.PAPER_COLOR, marker="o", label=FORMULATION_LABEL.get(v, v))
                 for v in sorted(formulations)]
        style.legend_below(fig, style.family_handles(families) + style.precision_handles() + extra, ncol=4)
        drawn = [r for r in ok if r["operator"] in chunk]
        forms = [r for r in drawn if not _named_variant(r)]
        under_test = [r for r in drawn if _named_variant(r)]
        reading = f"{len(forms)} points of forms that compute SPEC's operator: "
        if forms:
            worst = max(forms, key=lambda r: num(r["err_over_bound"]))
            above = sum(1 for r in forms if num(r["err_over_bound"]) > 1)
            reading += (("none above its bound" if not above else f"{above} ABOVE their bound (a bug)")
                        + f"; worst error/bound {fmt(num(worst['err_over_bound']))} ({_where(worst)})")
        if under_test:
            above = sum(1 for r in under_test if num(r["err_over_bound"]) > 1)
            names = ", ".join(FORMULATION_NAME.get(v, v) for v in sorted({_named_variant(r) for r in under_test}))
            reading += (f". Formulations under test, in pink ({names}): {above} of {len(under_test)} points beyond "
                        "the bound, where they break down as expected")
        stem = "error_bound_vs_n" if part == 0 else f"error_bound_vs_n_{part // 4 + 1}"
        style.save(fig, outdir, stem, "Is every form within its rounding bound as n grows?", reading + ".", key=True,
                   shows=scope(drawn))


def _pick_chunk(rows, form):
    ws = [int(r["chunk"]) for r in rows if r["form"] == form]
    if not ws:
        return None
    counts = {w: ws.count(w) for w in set(ws)}
    return str(max(counts, key=lambda w: (counts[w], w)))


# The lines of the error-growth figure: (label, family, which forms, dashed?).
GROWTH_LINES = [
    ("serial", "serial", lambda f: f in ("serial",), False),
    ("scan, fold", "scan", lambda f: f == "scan-fold", True),
    ("scan, tree (Blelloch, two-level)", "scan", lambda f: f in ("scan-blelloch", "scan-twolevel"), False),
    ("chunked", "chunked", lambda f: f == "chunked", False),
    ("decode", "decode", lambda f: f == "decode", False),
]


def _u_series(rows, pick):
    s = defaultdict(float)
    for r in rows:
        if pick(r["form"]) and num(r["err_units_u"]) > 0:
            s[int(r["n"])] = max(s[int(r["n"])], num(r["err_units_u"]))
    return s


def error_growth_vs_n(rows, outdir):
    err = [r for r in _with_error(rows) if r["status"] != DIFFERS and r["operator"] == "hla2" and plain(r)]
    err = [r for r in err if not r["form"].startswith("chunked") or r["chunk"] == _pick_chunk(err, r["form"])]
    scalars = [s for s in ("double", "float") if any(r["scalar"] == s for r in err)]
    if not scalars or len({r["n"] for r in err}) < 3:
        return
    fig, axes = style.figure(len(scalars), sharey=True)
    handles, notes = {}, {}
    for ax, scalar in zip(axes, scalars):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ends = []
        mine = [r for r in err if r["scalar"] == scalar]
        for label, fam, pick, dashed in GROWTH_LINES:
            s = _u_series(mine, pick)
            if len(s) < 2:
                continue
            ns = sorted(s)
            slope = fit_slope(ns, [s[n] for n in ns])
            kw = style.line_kw(fam, ls="--" if dashed else "-", marker="^" if dashed else "o")
            ax.plot(ns, [s[n] for n in ns], **kw)
            handles[label] = Line2D([], [], **kw, label=label)
            if slope is not None:
                ends.append((ns[-1], s[ns[-1]], f"{slope:.2f}", kw["color"]))
                notes[(label, scalar)] = (slope, s[ns[-1]], ns[-1])
        ns_all = sorted({int(r["n"]) for r in mine})
        if ns_all:
            base = min((v for k, v in _u_series(mine, lambda f: f == "serial").items() if k == ns_all[0]), default=None)
            if base:
                ax.plot(ns_all, [base * math.sqrt(n / ns_all[0]) for n in ns_all], **style.GUIDE)
                ends.append((ns_all[-1], base * math.sqrt(ns_all[-1] / ns_all[0]), "√n", "#555555"))
        ax.set_xlim(right=ns_all[-1] * 2)
        style.end_labels(ax, ends)
        ax.set_title(f"hla2, γ = 1, {scalar}")
        ax.set_xlabel("n (tokens)")
    style.ylabel(axes, "normwise error in units of u\n(numbers: fitted exponent in n)")
    style.legend_below(fig, [handles[label] for label, *_ in GROWTH_LINES if label in handles], ncol=3)
    parts = []
    for scalar in scalars:
        ser = notes.get(("serial", scalar))
        tree = notes.get(("scan, tree (Blelloch, two-level)", scalar)) or notes.get(("chunked", scalar))
        if ser:
            parts.append(f"{scalar}: serial grows like n^{ser[0]:.2f} ({fmt(ser[1])} u at n={ser[2]})"
                         + (f", tree-shaped forms like n^{tree[0]:.2f} ({fmt(tree[1])} u)" if tree else ""))
    reading = "; ".join(parts) + "."
    style.save(fig, outdir, "error_growth_vs_n", "How fast does the rounding error grow with n?", reading,
               shows=scope([r for r in err if any(pick(r["form"]) for _, _, pick, _ in GROWTH_LINES)]))


def error_normalized_vs_n(rows, outdir):
    norm = [r for r in _with_error(rows) if r["status"] != DIFFERS and r["operator"] == "hla2"
            and r["normalized"] == "1" and gamma(r) == 1 and num(r["ridge"]) == 0]
    norm = [r for r in norm if not r["form"].startswith("chunked") or r["chunk"] == _pick_chunk(norm, r["form"])]
    norm = [r for r in norm if style.family(r["form"]) in ("serial", "chunked", "decode")]
    scalars = [s for s in ("double", "float") if any(r["scalar"] == s for r in norm)]
    epss = sorted({r["eps"] for r in norm}, key=num, reverse=True)
    if not scalars or len({r["n"] for r in norm}) < 3:
        return
    eps_ls = ["-", (0, (4, 1.5, 1, 1.5)), ":"]
    eps_marker = ["o", "^", "v"]
    fig, axes = style.figure(len(scalars))
    families = set()
    worst = None
    for ax, scalar in zip(axes, scalars):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        for i, eps in enumerate(epss[:3]):
            for fam in ("serial", "chunked", "decode"):
                s = defaultdict(float)
                for r in norm:
                    if r["scalar"] == scalar and r["eps"] == eps and style.family(r["form"]) == fam:
                        s[int(r["n"])] = max(s[int(r["n"])], num(r["err_normwise_rel"]))
                        if worst is None or num(r["err_over_bound"]) > num(worst["err_over_bound"]):
                            worst = r
                if len(s) < 2:
                    continue
                families.add(fam)
                ns = sorted(s)
                ax.plot(ns, [s[n] for n in ns], **style.line_kw(fam, ls=eps_ls[i], marker=eps_marker[i]))
        ax.set_title(f"hla2 normalized, γ = 1, {scalar}")
        ax.set_xlabel("n (tokens)")
    style.ylabel(axes, "normwise relative error")
    eps_handles = [Line2D([], [], color="#444444", ls=eps_ls[i], marker=eps_marker[i],
                          label=f"ε = {float(frac(eps)):g}")
                   for i, eps in enumerate(epss[:3])]
    style.legend_below(fig, style.family_handles(families) + eps_handles, ncol=5)
    big = max((r for r in norm if r["scalar"] == scalars[-1]), key=lambda r: num(r["err_normwise_rel"]))
    reading = (f"Small ε makes the normalizer ill-conditioned: worst {big['scalar']} error "
               f"{fmt(num(big['err_normwise_rel']))} ({big['form']}, ε = {float(frac(big['eps'])):g}, "
               f"n={big['n']}), yet every point stays within its bound (worst error/bound "
               f"{fmt(num(worst['err_over_bound']))}): conditioning, not instability.")
    style.save(fig, outdir, "error_normalized_vs_n", "What does normalization with a small ε cost?", reading,
               shows=scope(norm))


def paper_vs_corrected(rows, outdir):
    err = _with_error(rows)
    differs = [r for r in err if r["status"] == DIFFERS]
    if not differs:
        return
    # Panels: (operator, γ) where the paper's variant differs; unnormalized, no ridge where possible.
    combos = sorted({(r["operator"], r["gamma"]) for r in differs},
                    key=lambda c: (list(operator_table()).index(operator_row(c[0])["id"]), -float(frac(c[1]))))
    combos = combos[:4]
    fig, axes = style.figure(len(combos), sharey=True)
    families = set()
    readings = []
    for ax, (op, g) in zip(axes, combos):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        mine = [r for r in err if r["operator"] == op and r["gamma"] == g]
        simple = [r for r in mine if r["normalized"] != "1" and num(frac(r["ridge"])) == 0]
        mine = simple or mine
        forms = {r["form"] for r in mine if r["status"] == DIFFERS}
        mine = [r for r in mine if r["form"] in forms and r["variant"] in ("paper", "corrected")]
        hi_corr, lo_paper, n_last = 0.0, math.inf, 0
        for fam in style.FAMILY_ORDER:
            for variant in ("paper", "corrected"):
                for scalar in ("double", "float"):
                    s = defaultdict(float)
                    for r in mine:
                        if (style.family(r["form"]) == fam and r["scalar"] == scalar
                                and (r["variant"] == variant) and (r["status"] == DIFFERS) == (variant == "paper")):
                            s[int(r["n"])] = max(s[int(r["n"])], num(r["err_normwise_rel"]))
                    if not s:
                        continue
                    families.add(fam)
                    ns = sorted(s)
                    kw = style.line_kw(fam, scalar,
                                       marker="x" if variant == "paper" else style.PRECISION_MARKER[scalar])
                    ax.plot(ns, [s[n] if s[n] > 0 else np.nan for n in ns], **kw)
                    n_last = max(n_last, ns[-1])
                    if variant == "corrected":
                        hi_corr = max(hi_corr, max(s.values()))
                    else:
                        lo_paper = min(lo_paper, min(s.values()))
        if hi_corr > 0 and math.isfinite(lo_paper):
            ax.annotate("", xy=(n_last * 1.35, lo_paper), xytext=(n_last * 1.35, hi_corr),
                        arrowprops=dict(arrowstyle="<->", color=style.PAPER_COLOR, lw=1.0))
            ax.text(n_last * 1.5, math.sqrt(lo_paper * hi_corr),
                    "gap in exact\narithmetic:\n≥ " + fmt(lo_paper / hi_corr, 0) + "×",
                    fontsize=6.5, color=style.PAPER_COLOR, va="center", ha="left")
            ax.set_xlim(right=n_last * 8)
        ax.set_title(f"{op}, γ = {float(frac(g)):g}" + (", normalized" if not simple else ""))
        ax.set_xlabel("n (tokens)")

        pe = [num(r["err_normwise_rel"]) for r in mine if r["status"] == DIFFERS]
        ce = [num(r["err_normwise_rel"]) for r in mine if r["variant"] == "corrected" and r["status"] != DIFFERS]
        readings.append(f"{op} γ={float(frac(g)):g}: paper {fmt(min(pe))}–{fmt(max(pe))}"
                        + (f", corrected ≤ {fmt(max(ce))}" if ce else ""))
    style.ylabel(axes, "normwise relative error vs MPFR")
    variant_handles = [Line2D([], [], color="#444444", marker="x", ls="-", label="paper's formula (under test)"),
                       Line2D([], [], color="#444444", marker="o", ls="-", label="corrected")]
    style.legend_below(fig, style.family_handles(families) + variant_handles + style.precision_handles(), ncol=4)
    reading = ("The paper's formulas, run as printed to test them, leave the operator by far more than rounding "
               "(decided in fp61, float and double alike: the ledger's failing claims, not a fault of the harness) — "
               + "; ".join(readings) + ".")
    style.save(fig, outdir, "paper_vs_corrected", "Where does the paper's formula leave the operator?", reading,
               key=True, shows=scope([r for r in err if (r["operator"], r["gamma"]) in set(combos)]))


def error_vs_gate_strength(rows, outdir):
    # Forms that compute the operator in exact arithmetic (Alg. 1's rule with gates does not: paper_vs_corrected).
    gated = [r for r in rows if not is_backward(r) and gate_strength(r) is not None and r["status"] != DIFFERS]
    if not gated:
        return
    ops = _ops(gated)
    fig, axes = style.figure(len(ops), sharey=True)
    families, broken = set(), []
    for ax, op in zip(axes, ops):
        mine = [r for r in gated if r["operator"] == op]
        n_max = max(int(r["n"]) for r in mine)  # the longest sequence: where strong gates span the most
        ax.set_xscale("log")
        ax.set_yscale("log")
        series = defaultdict(dict)
        for r in mine:
            if int(r["n"]) != n_max:
                continue
            key = (r["form"] + ("" if r["variant"] in ("spec", "paper", "corrected") else "/" + r["variant"]),
                   r["scalar"])
            s = gate_strength(r)
            if r["status"] == "non-finite":
                series[key][s] = math.inf
            elif num(r["err_normwise_rel"]) >= 0:
                series[key][s] = max(series[key].get(s, 0.0), num(r["err_normwise_rel"]))
        finite = [v for s in series.values() for v in s.values() if math.isfinite(v) and v > 0]
        top = max(finite) * 10 if finite else 1.0
        for (form, scalar), s in sorted(series.items()):
            fam = style.family(form.split("/")[0])
            families.add(fam)
            xs = sorted(s)
            kw = style.line_kw(fam, scalar)
            if "/" in form:  # a named formulation beside the form (e.g. a naive one): its own colour
                kw["color"] = style.PAPER_COLOR
            ax.plot(xs, [s[x] if math.isfinite(s[x]) and s[x] > 0 else np.nan for x in xs], **kw)
            bad = [x for x in xs if not math.isfinite(s[x])]
            if bad:
                ax.plot(bad, [top] * len(bad), ls="none", marker="x", color=kw.get("color", "k"), ms=6)
                broken.append(f"{op} {form} {scalar} from S={min(bad):g}")
        ax.set_title(f"{op}, n={n_max}")
        ax.set_xlabel("gate strength S (−log γ_t per token)")
    style.ylabel(axes, "normwise relative error vs MPFR")
    extra = [Line2D([], [], color=style.PAPER_COLOR, marker="o", label=FORMULATION_LABEL["naive"]),
             Line2D([], [], color=style.PAPER_COLOR, marker="x", ls="none", label="non-finite output")]
    style.legend_below(fig, style.family_handles(families) + style.precision_handles() + extra, ncol=4)
    reading = (f"{len(gated)} gated points of forms exact in exact arithmetic; "
               + ("non-finite outputs (x, at the top): " + "; ".join(broken) if broken else "every output finite")
               + ".")
    style.save(fig, outdir, "error_vs_gate_strength", "Which formulations stay accurate as the gates get stronger?",
               reading, key=True, shows=scope(gated))


def gated_error_vs_n(rows, outdir):
    """How the gated forms' error grows with n at one gate draw (the spec with the most n values), one panel per
    operator, one line per form × precision: the gated counterpart of error_growth_vs_n."""
    gated = [r for r in _with_error(rows) if gates(r) != "none" and r["status"] != DIFFERS and r["normalized"] != "1"]
    spans = {g: len({r["n"] for r in gated if gates(r) == g}) for g in {gates(r) for r in gated}}
    if not spans or max(spans.values()) < 3:
        return
    spec = max(spans, key=lambda g: (spans[g], g))
    gated = [r for r in gated if gates(r) == spec and not _named_variant(r)]
    ops = _ops(gated)[:4]
    fig, axes = style.figure(len(ops), sharey=True)
    families, parts = set(), []
    for ax, op in zip(axes, ops):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ends = []
        mine = [r for r in gated if r["operator"] == op]
        for form in sorted({r["form"] for r in mine}, key=lambda f: (style.FAMILY_ORDER.index(style.family(f)), f)):
            fam = style.family(form)
            for scalar in ("double", "float"):
                s = defaultdict(float)
                for r in mine:
                    if r["form"] == form and r["scalar"] == scalar and num(r["err_units_u"]) > 0:
                        s[int(r["n"])] = max(s[int(r["n"])], num(r["err_units_u"]))
                if len(s) < 3:
                    continue
                families.add(fam)
                ns = sorted(s)
                kw = style.line_kw(fam, scalar, **({"marker": "^"} if form.endswith("fused") else {}))
                ax.plot(ns, [s[n] for n in ns], **kw)
                slope = fit_slope(ns, [s[n] for n in ns])
                if slope is not None:
                    ends.append((ns[-1], s[ns[-1]], f"{slope:.2f}", kw["color"]))
                    parts.append(f"{op} {form} {scalar} n^{slope:.2f} ({fmt(s[ns[-1]])} u at n={ns[-1]})")
        ns_all = sorted({int(r["n"]) for r in mine})
        ax.set_xlim(right=ns_all[-1] * 2.2)
        style.end_labels(ax, ends)
        ax.set_title(op)
        ax.set_xlabel("n (tokens)")
    style.ylabel(axes, "normwise error in units of u\n(numbers: fitted exponent in n)")
    fused = [Line2D([], [], color=style.FAMILY_COLOR["chunked"], marker="^", label="chunked-fused")
             if any(r["form"].endswith("fused") for r in gated) else None]
    style.legend_below(fig, style.family_handles(families) + style.precision_handles() + [h for h in fused if h],
                       ncol=4)
    reading = f"Gates {spec}: " + "; ".join(parts) + "."
    style.save(fig, outdir, "gated_error_vs_n", "How fast does the gated forms' rounding error grow with n?", reading,
               key=True, shows=scope(gated))


def draw(rows, outdir):
    error_bound_vs_n(rows, outdir)
    gated_error_vs_n(rows, outdir)
    error_growth_vs_n(rows, outdir)
    error_normalized_vs_n(rows, outdir)
    error_vs_gate_strength(rows, outdir)
    paper_vs_corrected(rows, outdir)
