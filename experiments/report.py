#!/usr/bin/env python3
"""One static report page from a results directory: the ledger's summary and failing claims with their
counterexamples, every figure with its question, what it shows and the reading computed from the data (figures.json,
written by experiments/plot.py), and the machine, compiler and commit each result was made with.

  python3 experiments/report.py [--results DIR] [--out DIR/report.html]

DIR is the published run (results/, the default: the project's machines, committed), a `make run` directory
(runs/<host>-<commit>/: this machine's own measurements) or any directory of sweeps (a sweep's own directory, or one
holding several); the page says which, with the machine, commit and date.

The page has no external CSS, JS or fonts; images are linked by relative path, so it reads offline as long
as it stays beside results/ (or is written elsewhere with --out: the paths are made relative to it).
"""
import argparse
import csv
import datetime
import html
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_report  # noqa: E402  (experiments/gpu_report.py: the GPU results' section)

SWEEPS = [
    ("stability", "Numerical stability (float/double against MPFR-256)"),
    ("complexity", "Complexity: time and state against n, d, dv"),
    ("chunked", "Chunked, decoding and serial forms at d = dv = 64"),
    ("backward", "Backward passes"),
    ("gated", "Per-token gates: the gated forms against MPFR-256 as the gates get stronger (make run)"),
    ("default", "The default sweep (make run)"),
]

CSS = """
*{box-sizing:border-box}
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI","DejaVu Sans",sans-serif;
     color:#1b1b1b;margin:0;background:#fafafa}
main{max-width:60rem;margin:0 auto;padding:1rem 1.2rem 3rem;background:#fff}
h1{font-size:1.6rem;margin:.4rem 0}
h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
h3{font-size:1.05rem;margin:1.4rem 0 .3rem}
figure{margin:1.2rem 0 1.8rem}
figure img{display:block;max-width:100%;height:auto;border:1px solid #eee}
figure img.one{max-width:min(100%,30rem)}
figcaption{margin-top:.35rem;font-size:.93rem}
figcaption .q{font-weight:600}
figcaption .shows{color:#444;font-style:italic}
.run{background:#f6f4fb;border-left:4px solid #CC79A7;padding:.5rem .8rem}
figcaption .files{color:#666;font-size:.85rem}
table{border-collapse:collapse;width:100%;font-size:.88rem;table-layout:fixed}
th,td{border:1px solid #ddd;padding:.3rem .45rem;vertical-align:top;text-align:left;overflow-wrap:anywhere}
th{background:#f3f3f3}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:.85em;overflow-wrap:anywhere}
.holds{color:#007a5a;font-weight:600}.fails{color:#b34700;font-weight:600}
.summary{font-size:1.05rem;background:#f4f8f6;border-left:4px solid #009E73;padding:.5rem .8rem}
nav a{margin-right:.8rem}
.small{color:#555;font-size:.88rem}
.alarm{color:#b34700;font-weight:600}
"""


def esc(x):
    return html.escape(str(x))


def load_json(path):
    with open(path) as f:
        return json.load(f)


def figures_of(directory):
    path = os.path.join(directory, "figures.json")
    return load_json(path) if os.path.exists(path) else []


def figure_html(directory, entry, out_dir):
    png = os.path.relpath(os.path.join(directory, entry["files"][0]), out_dir)
    links = " · ".join(f'<a href="{esc(os.path.relpath(os.path.join(directory, f), out_dir))}">'
                       f'{esc(f.rsplit(".", 1)[1].upper())}</a>' for f in entry["files"])
    one = ' class="one"' if entry["stem"] in ONE_COLUMN else ""
    return (f'<figure id="{esc(os.path.basename(directory))}-{esc(entry["stem"])}"><img{one} src="{esc(png)}" '
            f'alt="{esc(entry["question"])}" loading="eager">'
            f'<figcaption><span class="q">{esc(entry["question"])}</span> '
            + (f'<span class="shows">{esc(entry["shows"])}.</span> ' if entry.get("shows") else "")
            + f'{esc(entry["reading"])} '
            f'<span class="files">({links})</span></figcaption></figure>')


# Figures drawn one column wide (3.5 in): shown at most ~30rem wide so their text stays print-sized.
ONE_COLUMN = {"time_vs_chunk", "memory_vs_chunk"}


def matrix(m):
    """A small exact matrix as text: rows separated by '; '."""
    return "; ".join(", ".join(str(x) for x in row) for row in m)


def counterexample_html(ce):
    if not ce:
        return "—"
    parts = [f"n = {ce.get('n')}, d = {ce.get('d')}, dv = {ce.get('dv')}"]
    if ce.get("options"):
        parts.append(f"options: {ce['options']}")
    for k in ("Q", "K", "V"):
        if k in ce:
            parts.append(f"{k} = [{matrix(ce[k])}]")
    fd = ce.get("first_difference")
    if fd and "lhs" in ce and "rhs" in ce:
        r, c = fd["row"], fd["col"]
        try:
            parts.append(f"first difference at entry ({r}, {c}): {ce.get('lhs_name', 'lhs')} gives "
                         f"{ce['lhs'][r][c]}, {ce.get('rhs_name', 'rhs')} gives {ce['rhs'][r][c]}")
        except (IndexError, KeyError, TypeError):
            pass
    return "<br>".join(f'<span class="mono">{esc(p)}</span>' for p in parts)


def ledger_html(results, out_dir):
    path = os.path.join(results, "claims.json")
    if not os.path.exists(path):
        return "<p>No ledger (results/claims.json) yet: run <code>make run</code>.</p>", None
    data = load_json(path)
    claims = data["claims"]
    by_id = {c["id"]: c for c in claims}
    counts = {}
    for c in claims:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    out = [f'<p class="summary"><b>{len(claims)} claims: {counts.get("holds", 0)} hold, {counts.get("fails", 0)} fail'
           f'{", " + str(counts["inconclusive"]) + " inconclusive" if counts.get("inconclusive") else ""}.</b> '
           'Every verdict is computed (randomized identity tests in the prime field 2<sup>61</sup>−1, '
           'counterexample search, fitted exponents); none is written by hand. Full ledger: '
           f'<a href="{esc(os.path.relpath(os.path.join(results, "claims.md"), out_dir))}">claims.md</a>.</p>']
    for e in figures_of(results):
        if e["stem"] == "claims":
            out.append(figure_html(results, e, out_dir))
    fails = [c for c in claims if c["verdict"] != "holds"]
    if fails:
        out.append("<h3>Failing claims, with the smallest counterexample found</h3>")
        out.append('<table><colgroup><col style="width:24%"><col style="width:46%"><col style="width:30%">'
                   '</colgroup><tr><th>claim (paper)</th><th>counterexample (exact)</th><th>corrected</th></tr>')
        for c in fails:
            fix = by_id.get(c["id"] + ".corrected")
            fix_html = (f'<span class="{esc(fix["verdict"])}">{esc(fix["verdict"])}</span>: {esc(fix["statement"])}'
                        if fix else "no corrected claim")
            out.append(f'<tr><td><code>{esc(c["id"])}</code> <span class="fails">{esc(c["verdict"])}</span><br>'
                       f'{esc(c["paper"])}: {esc(c["statement"])}</td>'
                       f'<td>{counterexample_html(c.get("counterexample"))}'
                       f'</td><td>{fix_html}</td></tr>')
        out.append("</table>")
    return "\n".join(out), data.get("meta", {})


def sweep_meta(directory):
    path = os.path.join(directory, "points.csv")
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None

    def values(k):
        return sorted({r.get(k, "") for r in rows if r.get(k, "")})
    dates = values("date")
    return {"points": len(rows), "commit": ", ".join(values("commit")), "compiler": ", ".join(values("compiler")),
            "flags": ", ".join(v.strip() for v in values("flags")), "cpu": ", ".join(values("cpu")),
            "date": f"{dates[0]} … {dates[-1]}" if len(dates) > 1 else (dates[0] if dates else "")}


def provenance_html(results, ledger_meta):
    rows = []
    if ledger_meta:
        rows.append(("ledger (claims.json)", "", ledger_meta.get("commit", ""), ledger_meta.get("compiler", ""),
                     (ledger_meta.get("flags") or "").strip(), ledger_meta.get("cpu", ""), ledger_meta.get("date", "")))
    bench = os.path.join(results, "bench.json")
    if os.path.exists(bench):
        ctx = load_json(bench).get("context", {})
        cpu = f"{ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz; {ctx.get('hla_simd', '')}"
        rows.append(("benchmarks (bench.json)", "", ctx.get("hla_git_commit", ""), ctx.get("hla_compiler", ""),
                     (ctx.get("hla_cxx_flags") or "").strip() + f"; Eigen {ctx.get('hla_eigen', '?')}", cpu,
                     ctx.get("date", "")))
    for directory, _ in sweep_dirs(results):
        m = sweep_meta(directory)
        if m:
            rows.append((f"sweep {os.path.basename(directory)}", m["points"], m["commit"], m["compiler"], m["flags"],
                         m["cpu"], m["date"]))
    out = ['<table><colgroup><col style="width:16%"><col style="width:7%"><col style="width:19%">'
           '<col style="width:11%"><col style="width:15%"><col style="width:16%"><col style="width:16%"></colgroup>'
           "<tr><th>result</th><th>points</th><th>commit</th><th>compiler</th><th>flags</th><th>machine</th>"
           "<th>date</th></tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in r) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sweep_dirs(results):
    """The sweeps of a results directory: the known ones in their order, then any other subdirectory with figures (a
    user's own sweep), or the directory itself when it is one sweep."""
    if os.path.exists(os.path.join(results, "points.csv")):
        return [(results, f"The sweep {os.path.basename(results)}")]
    known = [(os.path.join(results, name), title) for name, title in SWEEPS]
    names = {name for name, _ in SWEEPS}
    others = sorted(d for d in os.listdir(results)
                    if d not in names and os.path.exists(os.path.join(results, d, "points.csv")))
    return known + [(os.path.join(results, d), f"The sweep {d}") for d in others]


def run_label(results, ledger_meta):
    """Whose measurements these are: the published run (committed results/) or a run of this machine."""
    metas = [m for m in (sweep_meta(d) for d, _ in sweep_dirs(results)) if m]
    meta = ledger_meta or {}
    cpu = meta.get("cpu") or (metas[0]["cpu"] if metas else "an unknown machine")
    commit = meta.get("commit") or (metas[0]["commit"] if metas else "unknown")
    date = meta.get("date") or (metas[0]["date"] if metas else "")
    load = meta.get("load_1min")
    where = f"{cpu}, commit <code>{esc(commit)}</code>, {esc(date)}" + (
        f", load {load:.1f} on {meta.get('cores', '?')} cores" if isinstance(load, (int, float)) else "")
    if os.path.realpath(results) == os.path.realpath(os.path.join(ROOT, "results")):
        return ('<p class="run"><b>The published run</b>: the project\'s own measurements, committed in '
                f"<code>results/</code> — measured on {where} (each result's machine and commit below). They are not "
                "this machine's: <code>make run</code> measures yours into a run directory of its own "
                "(<code>runs/&lt;host&gt;-&lt;commit&gt;/</code>) and shows its own page.</p>")
    run_json = os.path.join(results, "run.json")
    host = load_json(run_json).get("host", "") if os.path.exists(run_json) else ""
    return (f'<p class="run"><b>Your run</b> <code>{esc(os.path.relpath(results, ROOT))}</code>: measured on '
            + (f"host <code>{esc(host)}</code>, " if host else "") + where
            + ". Every point here was measured by this build on this machine (<code>hla sweep --same-build</code>); "
            "the published run is <code>results/report.html</code>.</p>")


def build(results, out):
    results = os.path.abspath(results)
    out = os.path.abspath(out)
    out_dir = os.path.dirname(out)
    os.makedirs(out_dir, exist_ok=True)
    ledger, meta = ledger_html(results, out_dir)
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = ["<h1>HLA harness: results report</h1>", run_label(results, meta),
            f'<p class="small">Generated {esc(generated)} '
            "by <code>experiments/report.py</code>. Each figure's caption says what it shows, and its reading is "
            "computed from the data by <code>experiments/plot.py</code> (figures.json beside the figure). Vector "
            "versions: PDF and SVG links under each figure.</p>"]
    nav = ['<a href="#ledger">Ledger</a>']
    sections = ['<h2 id="ledger">Do the paper\'s claims hold?</h2>', ledger]
    bench_figs = [e for e in figures_of(results) if e["stem"].startswith("bench")]
    if bench_figs:
        nav.append('<a href="#bench">Benchmarks</a>')
        sections.append('<h2 id="bench">Benchmarks (make bench)</h2>')
        sections.extend(figure_html(results, e, out_dir) for e in bench_figs)
    gpu = gpu_report.html_section(results)
    if gpu:
        nav.append(gpu[0])
        sections.append(gpu[1])
    for directory, title in sweep_dirs(results):
        figs = figures_of(directory)
        if not figs:
            continue
        name = os.path.basename(directory)
        nav.append(f'<a href="#{esc(name)}">{esc(name)}</a>')
        m = sweep_meta(directory)
        sections.append(f'<h2 id="{esc(name)}">{esc(title)}</h2>')
        summary = esc(os.path.relpath(os.path.join(directory, "summary.txt"), out_dir))
        sections.append(f'<p class="small"><code>{esc(os.path.relpath(directory, ROOT))}/</code>: '
                        f'{m["points"] if m else "?"} points; '
                        f'every fitted slope and error exponent in <a href="{summary}">'
                        "summary.txt</a>.</p>")
        sections.extend(figure_html(directory, e, out_dir) for e in sorted(figs, key=lambda e: not e["key"]))
    nav.append('<a href="#provenance">Machine, compiler, commit</a>')
    sections.append('<h2 id="provenance">Machine, compiler, commit</h2>')
    sections.append(provenance_html(results, meta))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>HLA harness: results report</title><style>{CSS}</style></head>\n<body><main>\n"
            + "\n".join(body) + "\n<nav>" + " ".join(nav) + "</nav>\n" + "\n".join(sections)
            + "\n</main></body></html>\n")
    with open(out, "w") as f:
        f.write(page)
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv[1:])
    if not os.path.isdir(a.results):
        print(f"report.py: error: {a.results} is not a directory (a make run directory, results/ or a sweep's)",
              file=sys.stderr)
        return 2
    out = build(a.results, a.out or os.path.join(a.results, "report.html"))
    print(f"report: {os.path.relpath(out)}  (file://{out})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
