"""summary.txt of a sweep: every fitted runtime slope, error growth exponent and worst err/bound, one line per
series (the tables behind the figures; what does not fit in a figure is here)."""
import math
from collections import defaultdict

import numpy as np

from .data import fit_slope, fitted, is_backward, num, options_label


def _runtime(rows, out, column):
    cpu = column == "cpu_time_median_s"
    ok = [r for r in rows if num(r.get(column)) > 0]
    if not ok:
        return
    min_thr = min(int(r["threads"]) for r in ok)
    ok = [r for r in ok if int(r["threads"]) == min_thr]
    out.append(f"\n## {'CPU' if cpu else 'Wall'} time vs n (threads={min_thr}; slope = fitted exponent of the median "
               "in n, over n >= 256 when there are 3 such points, else all n)")
    series = defaultdict(lambda: defaultdict(list))
    for r in ok:
        label = f"{r['form']}/{r['variant']} {r['scalar']} d={r['d']} dv={r['dv']}"
        if r["form"].startswith(("chunked", "scan-twolevel", "scan-blelloch")):
            label += f" w={r['chunk']}"
        if options_label(r) != "plain":
            label += f" [{options_label(r)}]"
        series[(r["operator"], label)][int(r["n"])].append(num(r[column]))
    for (op, label) in sorted(series):
        s = series[(op, label)]
        ns = sorted(s)
        med = [float(np.median(s[n])) for n in ns]
        slope = fitted(ns, med)
        out.append(f"- {op} {label}: slope {slope:.3f}" if slope is not None else f"- {op} {label}: (too few n)")


def _errors(rows, out):
    ok = [r for r in rows if num(r["err_normwise_rel"]) >= 0]
    if not ok:
        return
    out.append("\n## Error vs n (normwise relative error, worst seed; exponent = fitted slope in n; "
               "err/bound = worst componentwise observed/bound)")
    series = defaultdict(lambda: defaultdict(list))
    for r in ok:
        label = f"{r['form']}/{r['variant']} {r['scalar']}"
        if r["form"].startswith(("chunked", "scan-twolevel")):
            label += f" w={r['chunk']}"
        series[(r["operator"], options_label(r), label)][int(r["n"])].append(r)
    for (op, opts, label) in sorted(series):
        s = series[(op, opts, label)]
        ns = sorted(s)
        err = [max(num(r["err_normwise_rel"]) for r in s[n]) for n in ns]
        ratio = max(num(r["err_over_bound"]) for n in ns for r in s[n])
        statuses = sorted({r["status"] for n in ns for r in s[n]})
        slope = fit_slope(ns, err)
        out.append(f"- {op} [{opts}] {label}: err {min(err):.3g}..{max(err):.3g}, exponent "
                   f"{'%.2f' % slope if slope is not None else '-'}, worst err/bound {ratio:.3g}, "
                   f"status {', '.join(statuses)}")


def _threads(rows, out):
    groups = defaultdict(dict)
    for r in rows:
        if num(r["time_median_s"]) > 0:
            key = (r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r["d"], r["dv"], r["chunk"],
                   options_label(r))
            groups[key].setdefault(int(r["threads"]), []).append(num(r["time_median_s"]))
    groups = {k: v for k, v in groups.items() if len(v) > 1 and 1 in v}
    if not groups:
        return
    out.append("\n## Speedup vs threads")
    for key, v in sorted(groups.items()):
        base = np.median(v[1])
        out.append(f"- {key[0]} {key[1]}/{key[2]} {key[3]} n={key[4]} w={key[7]}: "
                   + ", ".join(f"{p} thr {base / np.median(v[p]):.2f}x" for p in sorted(v)))


def _widths(rows, out):
    ok = [r for r in rows if num(r["time_median_s"]) > 0]
    lines = []
    for axis, fixed in (("d", "dv"), ("dv", "d")):
        groups = defaultdict(dict)
        for r in ok:
            key = (r["operator"], r["form"], r["variant"], r["scalar"], r["n"], r[fixed], r["chunk"], r["threads"],
                   options_label(r))
            groups[key].setdefault(int(r[axis]), []).append(num(r["time_median_s"]))
        for key, v in sorted(groups.items()):
            if len(v) < 3:
                continue
            ws = sorted(v)
            t = [np.median(v[w]) for w in ws]
            lines.append(f"- vs {axis}: {key[0]} {key[1]}/{key[2]} {key[3]} n={key[4]} {fixed}={key[5]}: slope "
                         f"{fit_slope(ws, t):.3f}; " + ", ".join(f"{axis}={w}: {x:.3g} s" for w, x in zip(ws, t)))
    if lines:
        out.append("\n## Runtime vs width (slope = fitted exponent of time in the width)")
        out.extend(lines)


def _memory(rows, out):
    ok = [r for r in rows if r["state_bytes"] != ""]
    if not ok:
        return
    out.append("\n## Memory (state bytes the form returns; peak-RSS delta of one call)")
    series = defaultdict(lambda: defaultdict(list))
    for r in ok:
        name = f"{r['operator']} {r['form']}/{r['variant']} {r['scalar']} d={r['d']} dv={r['dv']}"
        series[name][int(r["n"])].append(r)
    for label in sorted(series):
        ns = sorted(series[label])
        st = [max(num(r["state_bytes"]) for r in series[label][n]) for n in ns]
        rss = [max(num(r["peak_rss_delta_bytes"]) for r in series[label][n]) for n in ns]
        out.append(f"- {label}: state {st[0]:.0f}..{st[-1]:.0f} B; peak RSS delta {min(rss):.0f}..{max(rss):.0f} B "
                   f"(slope {fit_slope(ns, rss) or float('nan'):.2f})")


def _backward(rows, out):
    bw = [r for r in rows if is_backward(r)]
    if not bw:
        return
    out.append("\n## Backward (CPU time per call incl. its forward; stored = states the pass keeps at its peak; "
               "slopes over n >= 1024; gradient error normwise relative over dQ, dK, dV, dX0 vs MPFR-256)")
    series = defaultdict(lambda: defaultdict(list))
    for r in rows:
        p = r["backward"] if is_backward(r) else "forward"
        label = f"{p}{'' if p in ('forward', 'serial') else ' w=' + r['chunk']} {r['form']}/{r['variant']} " \
                f"{r['scalar']} [{options_label(r)}]"
        series[(r["operator"], label)][int(r["n"])].append(r)
    for (op, label) in sorted(series):
        s = series[(op, label)]
        ns = sorted(s)
        cpu = [float(np.median([num(r["cpu_time_median_s"]) for r in s[n]])) for n in ns]
        line = f"- {op} {label}: n={ns[0]}..{ns[-1]}"
        if all(c > 0 for c in cpu):
            line += f", CPU {cpu[-1]:.3g} s at n={ns[-1]} (slope {fitted(ns, cpu, 1024) or math.nan:.2f})"
        st = [max(num(r["stored_bytes"]) for r in s[n]) for n in ns]
        if all(x > 0 for x in st):
            line += f", stored {st[-1] / 2**20:.2f} MiB (slope {fitted(ns, st, 1024) or math.nan:.2f})"
        e = [r for n in ns for r in s[n] if num(r["err_normwise_rel"]) >= 0]
        if e:
            line += (f", gradient error {min(num(r['err_normwise_rel']) for r in e):.3g}.."
                     f"{max(num(r['err_normwise_rel']) for r in e):.3g}, worst err/bound "
                     f"{max(num(r['err_over_bound']) for r in e):.3g}, "
                     f"status {', '.join(sorted({r['status'] for r in e}))}")
        out.append(line)


def write(everything, path):
    out = [f"# {path}: {len(everything)} points", ""]
    statuses = defaultdict(int)
    for r in everything:
        statuses[r["status"]] += 1
    out.append("status counts: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())) + "\n")
    rows = [r for r in everything if not is_backward(r)]
    _runtime(rows, out, "time_median_s")
    if rows and "cpu_time_median_s" in rows[0]:
        _runtime(rows, out, "cpu_time_median_s")
    _errors(rows, out)
    _threads(rows, out)
    _widths(rows, out)
    _memory(rows, out)
    _backward(everything, out)
    return "\n".join(out) + "\n"
