"""Reading a sweep's points.csv and the small statistics every figure uses (fits, options labels)."""
import csv
import functools
import json
import math
import os
from collections import Counter
from fractions import Fraction

import numpy as np


# The operator table (core/operators.hpp) as `hla list --operators --json` prints it, committed beside the results so
# that plotting needs no build; tests/python/test_docs.py keeps it equal to the binary's table.
OPERATORS_JSON = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              "results", "operators.json")


@functools.lru_cache(maxsize=None)
def operator_table():
    with open(OPERATORS_JSON, encoding="utf-8") as f:
        return {row["id"]: row for row in json.load(f)}


def operator_row(op):
    row = operator_table().get(op)
    if row is None:
        raise KeyError(f"operator '{op}' is not in {OPERATORS_JSON}: regenerate it with "
                       "`build/bin/hla list --operators --json > results/operators.json`")
    return row


def operators_in_order(ops):
    """The given operators in the table's order (the order of docs/operators.md); an unknown one is an error."""
    for op in ops:
        operator_row(op)
    return [o for o in operator_table() if o in ops]


def width_exponent(op, axis):
    """How the per-token cost of op's streaming forms grows with d or dv, from the table's useful flops per token
    (flops_d2·d² + flops_d_dv·d·dv): 2 in d when there is a d² term, else 1; 1 in dv. The softmax baseline has no
    streaming cost (its per-token cost is n·(d + dv)): 1 in each."""
    flops = operator_row(op)["flops_per_token"]
    return 2 if axis == "d" and flops["d2"] > 0 else 1


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fit_slope(xs, ys):
    """Least-squares slope of log y vs log x over the points with x, y > 0 (None if fewer than 3)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y)]
    if len(pts) < 3:
        return None
    a = np.array(pts)
    return float(np.polyfit(a[:, 0], a[:, 1], 1)[0])


def fitted(xs, ys, min_x=256):
    """Slope over x >= min_x when there are 3 such points, else over all."""
    big = [(x, y) for x, y in zip(xs, ys) if x >= min_x and y > 0]
    return fit_slope(*zip(*big)) if len(big) >= 3 else fit_slope(xs, ys)


@functools.lru_cache(maxsize=None)
def frac(s):
    return Fraction(s)


def gamma(r):
    return frac(r["gamma"])


def gates(r):
    """The point's gate spec ("none" for points of sweeps from before gates)."""
    return r.get("gates") or "none"


def gate_strength(r):
    """S of a "strength:S" gate spec (−log γ_t around S per token), else None."""
    g = gates(r)
    return float(frac(g.split(":", 1)[1])) if g.startswith("strength:") else None


def plain(r):
    """γ = 1, no gates, unnormalized, no ridge."""
    return gamma(r) == 1 and gates(r) == "none" and r["normalized"] != "1" and frac(r["ridge"]) == 0


def options_label(r):
    parts = []
    if gamma(r) != 1:
        parts.append(f"γ={float(gamma(r)):g}")
    if gates(r) != "none":
        parts.append(f"gates {gates(r)}")
    if r["normalized"] == "1":
        parts.append(f"normalized ε={float(frac(r['eps'])):g}")
    if frac(r["ridge"]) != 0:
        parts.append(f"λ={float(frac(r['ridge'])):g}")
    return ", ".join(parts) or "plain"


def is_backward(r):
    return r.get("backward", "none") not in ("", "none")


def mode(values):
    return Counter(values).most_common(1)[0][0] if values else None


def base_dims(rows):
    """The (d, dv) most points share: the n-sweep's widths."""
    return mode([(r["d"], r["dv"]) for r in rows])


def main_chunk(rows, form):
    """The chunk width most of a form's points use (the one the n-sweep runs at)."""
    return mode([r["chunk"] for r in rows if r["form"] == form])


def fmt(x, digits=2):
    """A number for a reading: 3 significant digits, no exponent noise for ordinary sizes."""
    if x is None or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    text = f"{x:.{digits + 1}g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.{digits}e}"
    return text.replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


def pow2(n):
    n = int(n)
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 and n >= 1024 else str(n)


def _span(values):
    vs = sorted(set(values))
    return pow2(vs[0]) if len(vs) == 1 else f"{pow2(vs[0])}…{pow2(vs[-1])}"


def scope(rows):
    """What a figure draws, in one line computed from its rows (the caption beside its question): the sweep, the
    operators, forms, n, widths, precisions and options. Two figures that ask the same question over different data
    (the cost of the complexity sweep's fast forms, of the default sweep's serial ones) read apart by it."""
    if not rows:
        return ""
    configs = sorted({r.get("config", "") for r in rows} - {""})
    ops = operators_in_order({r["operator"] for r in rows})
    forms = sorted({r["form"] for r in rows})
    ns = [int(r["n"]) for r in rows]
    widths = sorted({(int(r["d"]), int(r["dv"])) for r in rows})
    dims = (f"d = dv = {widths[0][0]}" if len(widths) == 1 and widths[0][0] == widths[0][1]
            else f"d = {_span(w[0] for w in widths)}, dv = {_span(w[1] for w in widths)}")
    scalars = [s for s in ("double", "float", "mpfr256") if any(r["scalar"] == s for r in rows)]
    options = sorted({options_label(r) for r in rows})
    opts = options[0] if len(options) == 1 else f"{len(options)} option sets"
    parts = [f"{', '.join(configs)} sweep" if configs else "", ", ".join(ops),
             ", ".join(forms) if len(forms) <= 4 else f"{len(forms)} forms", f"n = {_span(ns)}", dims,
             " and ".join(scalars), opts]
    return "; ".join(p for p in parts if p)
