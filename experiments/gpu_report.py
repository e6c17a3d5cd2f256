"""The GPU results (results/gpu/bench.json, written by `make bench-gpu` on a GPU machine; docs/gpu.md) as a table for
the report page and for docs: our forms beside fla and the PyTorch peer, the ratios the issue's targets read, and where
the numbers come from. A result is flagged stale when the GPU sources (fast/cuda/) changed after the commit it was
measured at."""
import html
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_SOURCES = ["fast/cuda", "scripts/bench-gpu.py", "cli/cmd_gpu_bench.cpp"]


def load(results):
    path = os.path.join(results, "gpu", "bench.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def median(entry):
    return entry.get("ms_median") if isinstance(entry, dict) else None


def rows(doc):
    """One row per measured point: ours (fused, cuBLAS), fla, the peer; ratios where both sides ran."""
    out = []
    for p in doc.get("points", []):
        if "skipped" in p:
            continue
        prod = "bf16" if p["dtype"] == "bf16" else "ieee"
        r = {"T": p["T"], "H": p["H"], "K": p["K"], "dtype": p["dtype"],
             "ours_fused": median(p.get(f"ours_fused_hla2_{prod}_fwd")),
             "ours_cublas": median(p.get(f"ours_cublas_hla2_{prod}_fwd")),
             "fla_fwd": median(p.get("fla_simple_gla_fwd")),
             "fla_fwdbwd": median(p.get("fla_simple_gla_fwdbwd")),
             "peer_fwd": median(p.get("peer_hla2_fwd"))}
        best = min((x for x in (r["ours_fused"], r["ours_cublas"]) if x), default=None)
        r["ours_best"] = best
        r["ours_over_fla"] = best / r["fla_fwd"] if best and r["fla_fwd"] else None
        r["peer_over_ours"] = r["peer_fwd"] / best if best and r["peer_fwd"] else None
        out.append(r)
    return out


def stale(commit):
    """Whether the GPU sources changed after `commit` (None: unknown, e.g. no git or an unknown commit)."""
    if not commit or commit in ("unknown",) or commit.endswith("-wip"):
        return None
    run = subprocess.run(["git", "log", "--format=%h", f"{commit}..HEAD", "--", *GPU_SOURCES], cwd=ROOT,
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None
    return bool(run.stdout.strip())


def fmt(x, digits=3):
    return "–" if x is None else f"{x:.{digits}g}"


def html_section(results):
    """(nav link, section HTML) or None when there is no GPU result."""
    doc = load(results)
    if doc is None:
        return None
    prov = doc.get("provenance", {})
    flag = stale(prov.get("commit"))
    note = {True: '<p class="alarm">Stale: the GPU sources changed after this run\'s commit; run '
                  "<code>make bench-gpu</code> again on a GPU machine.</p>",
            None: '<p class="small">Whether the GPU sources changed since this run is unknown (no git, or the run '
                  "names no commit).</p>",
            False: ""}[flag]
    head = ("<tr><th>dtype</th><th>T</th><th>H</th><th>K=V</th><th>ours fused (ms)</th><th>ours cuBLAS (ms)</th>"
            "<th>fla simple_gla fwd</th><th>fla fwd+bwd</th><th>PyTorch peer fwd</th><th>ours ÷ fla</th>"
            "<th>peer ÷ ours</th></tr>")
    body = "".join(
        f"<tr><td>{r['dtype']}</td><td>{r['T']}</td><td>{r['H']}</td><td>{r['K']}</td><td>{fmt(r['ours_fused'])}</td>"
        f"<td>{fmt(r['ours_cublas'])}</td><td>{fmt(r['fla_fwd'])}</td><td>{fmt(r['fla_fwdbwd'])}</td>"
        f"<td>{fmt(r['peer_fwd'])}</td><td>{fmt(r['ours_over_fla'])}</td><td>{fmt(r['peer_over_ours'])}</td></tr>"
        for r in rows(doc))
    where = html.escape(f"{prov.get('card', '?')} ({prov.get('capability', '?')}; nvidia-smi: "
                        f"{prov.get('nvidia_smi', '?')}), torch {prov.get('torch', '?')} with CUDA "
                        f"{prov.get('cuda_runtime_torch', '?')}, fla {prov.get('fla', '?')}, commit "
                        f"{prov.get('commit', '?')}, {prov.get('date', '?')}")
    section = ('<h2 id="gpu">GPU forms (make bench-gpu)</h2>'
               f'<p class="small">Gated hla2 forward (gates uniform in [0.9, 1]), B = 1, medians of CUDA-event times; '
               f"measured on {where}. <code>results/gpu/bench.json</code> has every rep, the linear forms, TF32 and "
               "fla's linear attention; docs/gpu.md says how each number is made.</p>"
               + note + f"<table>{head}{body}</table>")
    return '<a href="#gpu">GPU</a>', section
