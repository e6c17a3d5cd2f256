"""Reading a sweep's points.csv and the small statistics every figure uses (fits, options labels)."""
import csv
import functools
import math
from collections import Counter
from fractions import Fraction

import numpy as np


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


def uses_chunk(form):
    return form.startswith(("chunked", "scan-twolevel", "scan-blelloch"))


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
