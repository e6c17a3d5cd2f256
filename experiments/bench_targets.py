#!/usr/bin/python3
"""The target ratios of issues 14 and 28 from one `make bench` run (results/bench.json by default).

Every ratio is between medians of the same run (the machine is shared and drifts; ratios within one run
are what the targets read):
  - the machine: each GEMM library's 1024² product (roofline/<library>/...) against the best, the peak FMA
    rate (peak/fma/...) and the clock (peak/clock), and how far the best GEMM is from the peak;
  - the chunk form's ceiling per library: the fused form's eight products at width w (outputs only; the state
    adds a ninth) (gemm/<library>/.../w:<w>/...) as one flop-weighted rate;
  - hla2 chunked (each registered chunked form) useful GFLOP/s ÷ the best roofline at the same scalar and
    thread count (target ≥ 0.75 at one thread: issue 28; issue 14 asked 0.70), and its 2-thread speed-up
    (target ≥ 1.85×), beside the best roofline's own 2-thread ÷ 1-thread rate and the form's two-core ceiling
    (ceiling/...: its two halves at once on two threads, nothing shared): the ceiling's speed-up over one
    thread is what two cores of this machine give that work at all, and 2T ÷ ceiling how much of it the
    form's own two threads reach;
  - the PyTorch peer's time ÷ ours (target ≥ 3×), both precisions: the peer is the fastest of its
    formulations (batched, per-chunk loops at w = 32, 48, 64, torch.compile where it runs), each listed; beside
    it the most a form doing the serial recurrence's useful flops could reach against it, were it to run at the
    best 1024² roofline (the peer's time ÷ those flops at that rate), and at one thread the most chunked-fused
    could reach with everything but its products free (the peer's time ÷ its products alone at their fastest
    width, phase/hla2/chunked-fused/products/...; each width's products are also read against the loop's time);
  - torch.mm's 1024² product (roofline/torch/..., from the peer's run) among the rooflines when present;
  - the decoding kernel's time per token ÷ its bandwidth bound: the state it reads and writes per token
    (S, [C m]ᵀ, [G h]ᵀ: d² + 2d(dv + 1) numbers) at the measured read+write rate of a buffer that size;
  - hla2 chunked ÷ linear chunked time (issue 5's target ≤ 2.5);
  - every other thread count of the run (make bench THREADS="1 2 4 ...", docs/benchmarks.md): each hla2 chunked
    form's useful GFLOP/s ÷ the best roofline at that thread count (each count has its own), its speed-up over one
    thread beside the best roofline's own; the rooflines, peaks, peer and ratios below at every count too;
  - the cost of gating (no target; docs/benchmarks.md "Gated forms"): per (op, scalar, threads), the gated chunked
    form's time (.../gates:range:0.8,1) ÷ its fixed-γ sibling's at γ = 0.9 (.../gamma:0.9: decay weights applied in
    both), beside the sibling's own γ = 0.9 ÷ γ = 1 (the plain entry, which skips every decay weight), and at one
    thread the naive cumulative-product formulation's time ÷ the stable gated form's. A run from before these
    entries has none of them and no gating rows; a run with some of them but not all is an error like any other.
Usage: bench_targets.py [bench.json] [--add-entries peer.json ...] [--write] [--only gating]
  --add-entries  merge the benchmark entries of these JSON files (the PyTorch peer's) into bench.json first
  --write        store the ratios under "targets" in bench.json
  --only gating  the cost of gating alone, from a run of just those entries (hla_bench --benchmark_filter=...:
                 docs/benchmarks.md "Gated forms"); it needs them all
Exit 2: file missing or an entry absent.
"""
import argparse
import json
import re
import sys

SHAPE = "n:65536/d:64/dv:64"
SCALARS = ("float", "double")
LIBRARIES = ("eigen", "openblas", "blis", "libxsmm")
WIDTHS = (32, 48, 64, 96, 128)
D = 64
GATED_OPS = ("hla2", "ahla", "linear")
# The gating rows: each operator's chunked form (row key: the operator), and hla2's one-pass form (key op/form).
GATED_FORMS = tuple((op, "chunked") for op in GATED_OPS) + (("hla2", "chunked-fused"),)
GATES = "gates:range:0.8,1"  # experiments/bench/bench_main.cpp register_gated: kGates, kGamma
FIXED_GAMMA = "gamma:0.9"


def key_of(run_name):
    # "<name>/min_time:.../real_time": drop Google Benchmark's trailing parts
    return "/".join(p for p in run_name.split("/") if not p.startswith(("min_time:", "real_time")))


def medians(data):
    out = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[key_of(b["run_name"])] = b
    return out


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def thread_counts(m):
    """The thread counts of a run: 1 and 2, which the targets read, and every other count its hla2/chunked-fused
    entries were timed at (make bench THREADS=...: scripts/bench.sh)."""
    pattern = re.compile(rf"hla2/chunked-fused/({'|'.join(SCALARS)})/{SHAPE}/threads:(\d+)$")
    return tuple(sorted({1, 2} | {int(found[2]) for k in m if (found := pattern.match(k))}))


def widths(m, op, form, s):
    """{w: seconds} of a form at one thread: its plain entry (at the bench's chunk, its `chunk` counter) and its
    .../threads:1/w:<w> entries (none in runs before 12)."""
    base = f"{op}/{form}/{s}/{SHAPE}/threads:1"
    plain = m[base]
    out = {int(plain["chunk"]): seconds(plain)}
    out.update({int(k.rsplit(":", 1)[1]): seconds(b) for k, b in m.items() if k.startswith(base + "/w:")})
    return dict(sorted(out.items()))


def products(m, s):
    """{w: seconds} of hla2/chunked-fused's chunk loop with its products alone, one thread
    (phase/hla2/chunked-fused/products/.../w:<w>; none in runs before 13)."""
    base = f"phase/hla2/chunked-fused/products/{s}/{SHAPE}/threads:1/w:"
    return dict(sorted((int(k[len(base):]), seconds(b)) for k, b in m.items() if k.startswith(base)))


def products_bound(peer_seconds, prods):
    """(the peer's time ÷ the fastest products-alone time, its width): the most chunked-fused could reach against the
    peer with these kernels were everything but its products free; None without products entries."""
    if not prods:
        return None
    w = min(prods, key=prods.get)
    return peer_seconds / prods[w], w


def compute(m):
    """The targets' numbers, as a dict (raises KeyError naming a missing entry)."""

    def entry(name):
        if name not in m:
            raise KeyError(name)
        return m[name]

    t = {"machine": {}, "ceiling": {}, "hla2": {}, "peer": {}, "decode": {}, "linear_ratio": {}}
    threads = thread_counts(m)
    more = [th for th in threads if th not in (1, 2)]  # beyond the targets' two: read, no target
    clock = entry("peak/clock/threads:1")["ghz"]
    for s in SCALARS:
        # torch.mm's 1024² product (the PyTorch peer's run, OpenBLAS unhandicapped) is a roofline when present
        roof = {th: {lib: entry(f"roofline/{lib}/{s}/threads:{th}")["gflops"]
                     for lib in LIBRARIES + ("torch",) if lib in LIBRARIES or f"roofline/{lib}/{s}/threads:{th}" in m}
                for th in threads}
        best = {th: max(roof[th], key=roof[th].get) for th in threads}
        peak = {th: entry(f"peak/fma/{s}/threads:{th}")["gflops"] for th in threads}
        lanes = entry(f"peak/fma/{s}/threads:1")["lanes"]
        t["machine"][s] = {
            "roofline": roof, "best": best, "best_gflops": {th: roof[th][best[th]] for th in threads},
            "peak_gflops": peak, "lanes": lanes, "clock_ghz": clock,
            "fma_per_cycle": peak[1] / (2 * lanes * clock),
            "best_over_peak": {th: roof[th][best[th]] / peak[th] for th in threads},
        }
        ceil = {}
        for lib in LIBRARIES:
            ceil[lib] = {}
            for w in WIDTHS:
                # the fused form's eight products per chunk when it times outputs only (since run 11; the state
                # adds C's, a third d×d×w): two of each shape, the d×d ones the S and C' updates
                shapes = [(w, w, D, "/nt", 2), (w, D, w, "", 2), (w, D, D, "", 2), (D, D, w, "", 2)]
                flops = secs = 0.0
                for mm, nn, kk, nt, count in shapes:
                    f = 2.0 * mm * nn * kk * count
                    flops += f
                    secs += f / (entry(f"gemm/{lib}/{s}/w:{w}/m:{mm}/n:{nn}/k:{kk}{nt}/threads:1")["gflops"] * 1e9)
                ceil[lib][w] = flops / secs / 1e9
        t["ceiling"][s] = ceil
        best1 = roof[1][best[1]]
        for form in ("chunked", "chunked-fused"):
            h = {th: entry(f"hla2/{form}/{s}/{SHAPE}/threads:{th}") for th in threads}
            ceiling2 = entry(f"ceiling/hla2/{form}/{s}/{SHAPE}/threads:2")
            by_width = widths(m, "hla2", form, s)
            fastest_w = min(by_width, key=by_width.get)
            useful1 = h[1]["gflops"] * seconds(h[1])  # GFLOP per call: the same at every width
            t["hla2"].setdefault(form, {})[s] = {
                "widths_ms_1t": {w: sec * 1e3 for w, sec in by_width.items()}, "fastest_width_1t": fastest_w,
                "x_best_roofline_fastest_width_1t": useful1 / by_width[fastest_w] / best1,
                "gflops": {th: h[th]["gflops"] for th in threads},
                "x_best_roofline": {th: h[th]["gflops"] / roof[th][best[th]] for th in threads},
                "x_ceiling_w48": h[1]["gflops"] / max(ceil[lib][48] for lib in LIBRARIES),
                "speedup_2t": seconds(h[1]) / seconds(h[2]),
                "roofline_speedup_2t": roof[2][best[2]] / best1,
                "ceiling_speedup_2t": seconds(h[1]) / seconds(ceiling2),
                "x_two_core_ceiling": seconds(ceiling2) / seconds(h[2]),
            }
            if more:  # each further thread count against one thread, the form's and the best roofline's own
                t["hla2"][form][s].update({
                    "ms": {th: seconds(h[th]) * 1e3 for th in threads},
                    "speedup_over_1t": {th: seconds(h[1]) / seconds(h[th]) for th in more},
                    "roofline_speedup_over_1t": {th: roof[th][best[th]] / best1 for th in more}})
            prods = products(m, s) if form == "chunked-fused" else {}
            if prods:  # each width's products alone, and their share of the loop at that width
                t["hla2"][form][s].update({
                    "products_ms_1t": {w: sec * 1e3 for w, sec in prods.items()},
                    "products_share_1t": {w: sec / by_width[w] for w, sec in prods.items() if w in by_width}})
        for op in ("hla2", "linear"):
            for th in threads:
                # the peer: the fastest of its formulations (peer/torch/<op>/<formulation>/...), each reported
                prefix, suffix = f"peer/torch/{op}/", f"/{s}/{SHAPE}/threads:{th}"
                peers = {k[len(prefix):-len(suffix)]: b
                         for k, b in m.items() if k.startswith(prefix) and k.endswith(suffix)}
                if not peers:
                    raise KeyError(prefix + "<formulation>" + suffix)
                best_peer = min(peers, key=lambda f: seconds(peers[f]))
                peer = peers[best_peer]
                ours = {}  # each of our chunked forms, and at one thread each of its widths
                for form in ("chunked", "chunked-fused") if op == "hla2" else ("chunked",):
                    ours[form] = seconds(entry(f"{op}/{form}/{s}/{SHAPE}/threads:{th}"))
                    if th == 1:
                        ours.update({f"{form} w={w}": sec for w, sec in widths(m, op, form, s).items()})
                fastest = min(ours, key=ours.get)
                plain = entry(f"{op}/chunked/{s}/{SHAPE}/threads:{th}")
                useful = plain["gflops"] * 1e9 * seconds(plain)  # flops per call, the same for every form and width
                t["peer"].setdefault(op, {}).setdefault(s, {})[th] = {
                    "peer_ms": seconds(peer) * 1e3, "peer_formulation": best_peer,
                    "formulations_ms": {f: seconds(b) * 1e3 for f, b in peers.items()},
                    "formulations_over_fastest": {f: seconds(b) / seconds(peer) for f, b in peers.items()},
                    "ours_ms": ours[fastest] * 1e3, "ours_form": fastest,
                    "peer_over_ours": seconds(peer) / ours[fastest], "peer_max_rel_error": peer["max_rel_error"],
                    "peer_over_useful_at_roofline": seconds(peer) / (useful / (roof[th][best[th]] * 1e9))}
                bound = products_bound(seconds(peer), products(m, s)) if op == "hla2" and th == 1 else None
                if bound:
                    t["peer"][op][s][th].update({"peer_over_products": bound[0], "products_width": bound[1]})
        dec = entry(f"hla2/decode/{s}/{SHAPE}/threads:1")
        bws = [b for k, b in m.items() if k.startswith(f"bandwidth/{s}/")]
        if not bws:
            raise KeyError(f"bandwidth/{s}/...")
        bw_name, bw = next((k, b) for k, b in m.items() if k.startswith(f"bandwidth/{s}/"))
        per_token = seconds(dec) / 65536
        # the decoding state (the buffer: whole blocks of it)
        state_bytes = int(bw_name.split("bytes:")[1].split("/")[0])
        bound = 2 * state_bytes / bw["bytes_per_s"]
        t["decode"][s] = {"us_per_token": per_token * 1e6, "bound_us_per_token": bound * 1e6,
                          "state_bytes": state_bytes, "bandwidth_gbs": bw["bytes_per_s"] / 1e9,
                          "bound_over_time": bound / per_token}
        t["linear_ratio"][s] = {th: seconds(entry(f"hla2/chunked/{s}/{SHAPE}/threads:{th}"))
                                / seconds(entry(f"linear/chunked/{s}/{SHAPE}/threads:{th}")) for th in threads}
    if any(k.endswith("/" + GATES) for k in m):
        t["gating"] = compute_gating(entry, threads)
    return t


def compute_gating(entry, threads=(1, 2)):
    return {(op if form == "chunked" else f"{op}/{form}"): {s: gating(entry, op, s, form, threads) for s in SCALARS}
            for op, form in GATED_FORMS}


def gating(entry, op, s, form="chunked", threads=(1, 2)):
    """The cost of gating for one form and scalar: times in ms and their ratios, at each of the run's thread counts
    (thread_counts; the naive cumulative-product formulation beside the chunked form at one thread)."""
    out = {}
    for th in threads:
        base = f"{op}/{form}/{s}/{SHAPE}/threads:{th}"
        plain, fixed, gated = (seconds(entry(name)) for name in (base, f"{base}/{FIXED_GAMMA}", f"{base}/{GATES}"))
        c = {"gated_ms": gated * 1e3, "fixed_ms": fixed * 1e3, "plain_ms": plain * 1e3,
             "gated_over_fixed": gated / fixed, "fixed_over_plain": fixed / plain, "gated_over_plain": gated / plain}
        if th == 1 and form == "chunked":
            naive = seconds(entry(f"{op}/chunked-naive-cumprod/{s}/{SHAPE}/threads:1/{GATES}"))
            c.update({"naive_ms": naive * 1e3, "naive_over_gated": naive / gated})
        out[th] = c
    return out


def report(t, context, path):
    print(f"{path}: commit {context.get('hla_git_commit', '?')}, {context.get('date', '?')}")
    for s in SCALARS:
        mc = t["machine"][s]
        print(f"{s}: peak {mc['peak_gflops'][1]:.1f} GFLOP/s on 1 core = {mc['fma_per_cycle']:.2f} FMA/cycle"
              f" × {mc['lanes']} lanes"
              f" × 2 × {mc['clock_ghz']:.2f} GHz ("
              + "; ".join(f"{th} cores: {g:.1f}" for th, g in mc["peak_gflops"].items() if th > 1) + ")")
        for th in mc["roofline"]:
            libs = ", ".join(f"{lib} {g:.1f}" for lib, g in mc["roofline"][th].items())
            print(f"  roofline {th}T (1024²): {libs} → best {mc['best'][th]}, {mc['best_over_peak'][th]:.2f} of peak")
        ceil = t["ceiling"][s]
        cells = "; ".join(f"w={w}: " + " ".join(f"{lib} {ceil[lib][w]:.0f}" for lib in LIBRARIES) for w in WIDTHS)
        print(f"  chunk-form ceiling (its 8 products, GFLOP/s): {cells}")
        for form, per in t["hla2"].items():
            h = per[s]
            print(f"  hla2 {form:13} × best roofline 1T {h['x_best_roofline'][1]:.2f}"
                  f" ({h['gflops'][1]:.1f} GFLOP/s, target ≥ 0.75)"
                  f"  2T {h['x_best_roofline'][2]:.2f}  | 2T speed-up {h['speedup_2t']:.2f}×"
                  f" (target ≥ 1.85; best roofline's own"
                  f" {h['roofline_speedup_2t']:.2f}×; two-core ceiling {h['ceiling_speedup_2t']:.2f}×, reached"
                  f" {h['x_two_core_ceiling']:.2f})  | × ceiling(w=48) {h['x_ceiling_w48']:.2f}")
            for th, speedup in h.get("speedup_over_1t", {}).items():
                print(f"    {th}T: {h['ms'][th]:.1f} ms, × best roofline {h['x_best_roofline'][th]:.2f}"
                      f" ({h['gflops'][th]:.1f} GFLOP/s, best {mc['best'][th]} {mc['best_gflops'][th]:.1f})"
                      f"  | speed-up over 1T {speedup:.2f}× (best roofline's own"
                      f" {h['roofline_speedup_over_1t'][th]:.2f}×)")
            if len(h["widths_ms_1t"]) > 1:
                cells = ", ".join(f"w={w} {ms:.1f}" for w, ms in h["widths_ms_1t"].items())
                print(f"    1T by chunk width (ms): {cells} → fastest w={h['fastest_width_1t']}:"
                      f" {h['x_best_roofline_fastest_width_1t']:.2f} × best roofline (target ≥ 0.75)")
            if "products_ms_1t" in h:
                cells = ", ".join(f"w={w} {ms:.1f}" + (f" ({h['products_share_1t'][w]:.2f} of the loop)"
                                                       if w in h["products_share_1t"] else "")
                                  for w, ms in h["products_ms_1t"].items())
                print(f"    1T its products alone (ms): {cells}")
        for op, per in t["peer"].items():
            cells = "  ".join(f"{th}T {c['peer_over_ours']:.2f}× ({c['peer_ms']:.0f} ms {c['peer_formulation']} vs"
                              f" {c['ours_ms']:.0f} ms {c['ours_form']})" for th, c in per[s].items())
            print(f"  PyTorch peer {op:6} (its fastest formulation) time ÷ ours: {cells}  (target ≥ 3)")
            most = "  ".join(f"{th}T {c['peer_over_useful_at_roofline']:.2f}×" for th, c in per[s].items())
            print(f"    the most a form doing the useful flops at the best roofline could reach: {most}")
            if "peer_over_products" in per[s][1]:
                c = per[s][1]
                print(f"    the most chunked-fused could reach with everything but its products free: 1T"
                      f" {c['peer_over_products']:.2f}× (its products alone at w={c['products_width']})")
            for th, c in per[s].items():
                each = ", ".join(f"{f} {ms:.0f} ms ({c['formulations_over_fastest'][f]:.2f}×)"
                                 for f, ms in c["formulations_ms"].items())
                print(f"    {th}T formulations: {each}")
        dc = t["decode"][s]
        print(f"  hla2 decode: {dc['us_per_token']:.2f} µs/token; bound {dc['bound_us_per_token']:.2f} µs"
              f" ({2 * dc['state_bytes'] / 1024:.0f} KiB"
              f" read+written at {dc['bandwidth_gbs']:.0f} GB/s) → {dc['bound_over_time']:.2f} of the bound")
        lr = t["linear_ratio"][s]
        print("  hla2 / linear chunked time: " + "  ".join(f"{th}T {r:.2f}" for th, r in lr.items()) + "  (≤ 2.5)")
        report_gating(t.get("gating") or {}, s)


def report_gating(gating_rows, s):
    for op, per in gating_rows.items():
        g = per[s]
        cells = "  ".join(f"{th}T {c['gated_over_fixed']:.2f} ({c['gated_ms']:.0f} / {c['fixed_ms']:.0f} ms;"
                          f" gated ÷ γ=1 {c['gated_over_plain']:.2f}, γ=0.9 ÷ γ=1 {c['fixed_over_plain']:.2f})"
                          for th, c in g.items())
        naive = f"  | naive cumprod ÷ gated 1T {g[1]['naive_over_gated']:.2f}" if "naive_over_gated" in g[1] else ""
        print(f"  gating {op:6} gated ÷ fixed γ=0.9 time: {cells}{naive}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="results/bench.json")
    ap.add_argument("--add-entries", nargs="*", default=[])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only", choices=["gating"])
    args = ap.parse_args()
    try:
        with open(args.path) as f:
            data = json.load(f)
        for extra in args.add_entries:
            with open(extra) as f:
                add = json.load(f)["benchmarks"]
            names = {b["name"] for b in add}
            data["benchmarks"] = [b for b in data["benchmarks"] if b["name"] not in names] + add
    except (OSError, ValueError, KeyError) as e:
        print(f"bench_targets: cannot read {args.path} or an added file: {e}", file=sys.stderr)
        return 2
    try:
        m = medians(data)
        t = {"gating": compute_gating(m.__getitem__, thread_counts(m))} if args.only else compute(m)
    except KeyError as e:
        print(f"bench_targets: {args.path} has no median for {e}; run `make bench` (the default subset)",
              file=sys.stderr)
        return 2
    if args.only:
        ctx = data.get("context", {})
        print(f"{args.path}: commit {ctx.get('hla_git_commit', '?')}, {ctx.get('date', '?')}")
        for s in SCALARS:
            print(f"{s}:")
            report_gating(t["gating"], s)
    else:
        report(t, data.get("context", {}), args.path)
    if args.write or args.add_entries:
        if args.write:
            data["targets"] = t
        with open(args.path, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
