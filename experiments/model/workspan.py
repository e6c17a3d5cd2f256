#!/usr/bin/env python3
"""Work/span model of the threaded chunked forms and of the sequence-parallel (MPI) form.

Each schedule's time at P threads is predicted from its dependency structure and from quantities measured on
one machine at one thread (or calibrated where a term cannot be measured at one thread):

  per-core rate     phi(P) = peak/fma(P) / (P * peak/fma(1)): what one core keeps of its one-thread FMA rate
                    when P cores run (all-core clock, shared power budget). Measured by `make bench`'s peak/
                    entries; P beyond the measured ones keeps the largest measured P's value (an assumption).
  pipelined         the chunk-to-chunk hand-off schedule (chunked-fused before issue 28): every chunk's
                    state update waits for the previous chunk's, so the span is M hand-offs of h each:
                        T(P) = max(T1 / (P phi(P)), M h)
                    h (one hand-off: the state crossing cores plus the chain's additions) is not visible at
                    P <= 2; it is calibrated where the chain binds (the 16-core runs at n = 65536) and checked
                    at n = 2^20 and at the other P.
  grouped           groups of 32 P chunks, three barrier-separated phases per group and a carry over the state
                    entries (hla2/chunked, linear/chunked): an Amdahl fraction f (barriers, carry, imbalance),
                        T(P) = T1 (f + (1 - f) / (P phi(P)))
                    f calibrated on the 16-thread run at n = 65536, checked at the other P and at n = 2^20.
  blocked           the two-level block schedule (issue 28; chunked-fused now): P contiguous blocks, (A) each
                    block's S summary — one product of 2 d^2 flops per token — for all blocks but the last,
                    one scan, (B) the fused chunk loop over the block, one scan, (C) each block but the first
                    adds its carry — one product of 2 d (dv+1) flops per token (normalized; dv unnormalized).
                    Threads share (A) and (C) by rows (since 2026-12-04):
                        T(P) = ((Σ_t<P-1 n_t a + Σ_t>0 n_t c) / P + max_t n_t l) / phi(P) + 2 b(P)
                    MPI ranks hold only their rows, so each does its own block's (as threads did before):
                        T(P) = (max_t<P-1 n_t a + max_t n_t l + max_t>0 n_t c) / phi(P) + 2 b(P)
                    (the phases are separated by barriers, so the span is the sum of each phase's slowest part)
                    l = T1 / n (the loop's per-token time at one thread), a and c the one-thread per-token
                    times of (A) and (C) as the form runs them (make bench's phase/... entries, since 2026-12-05;
                    before, and for the Xeon's runs, which have none: their flops at Eigen's 1024^2 rate, what
                    (A) and (C) called then), b(P) a barrier (+ scan of P states),
                    taken as 5 us + P x (one state addition) — small beside the rest at these n.

Usage:
  workspan.py xeon DIR                the three schedules against the 16-core measurements in DIR
                                      (omp65536.json, omp1m.json, roofline.json): calibrated, checked, and
                                      the blocked schedule's prediction at P = 2..64
  workspan.py bench BENCH.json [--old OLD.json]
                                      P = 1, 2 (and every other P the run timed: make bench THREADS=...) on this
                                      machine: the blocked model from this run's one-thread time against its
                                      measured times at P > 1 (and the pipelined model against an older run's, if
                                      given); predictions at P = 4..64. And the grouped schedule's f, calibrated
                                      on each <op>/chunked entry's P = 2 here, carried to its fixed-γ (/gamma:)
                                      and gated (/gates:) siblings: their P = 2 and every other P they were timed
                                      at from their own P = 1 (does the plain form's f hold for them?)
  workspan.py mpi DIR                 hla2 mpi-chunked (d = 64) against DIR/mpi.jsonl: today's two passes and
                                      gather, modelled and measured, and the one-pass schedule's prediction
  workspan.py mpi-here RUNS BENCH     hla2 mpi-chunked at P = 1, 2 here (make bench-distributed's runs.json),
                                      P = 2 predicted from P = 1 and BENCH's GEMM rate
All print a table and, with --out FILE, write it as JSON.
"""
import argparse
import json
import os
import re
import sys

PS = [1, 2, 4, 8, 16, 64]


def load(path):
    """name (without /min_time.../real_time) -> median ms, and the run's context."""
    with open(path) as f:
        d = json.load(f)
    out, means = {}, {}
    for b in d["benchmarks"]:
        name = re.sub(r"/min_time:[0-9.]+", "", b.get("run_name", b["name"])).replace("/real_time", "")
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        if b.get("aggregate_name") == "median":
            out[name] = ms
        elif b.get("aggregate_name") == "mean":
            means[name] = ms
        elif "aggregate_name" not in b:
            out.setdefault(name, ms)
    for k, v in means.items():
        out.setdefault(k, v)
    return out, d.get("context", {})


def phi(times, scalar, P):
    """Per-core share of the one-thread FMA rate at P threads (peak/fma entries time a fixed work per thread)."""
    measured = sorted(int(m.group(1)) for k in times for m in [re.match(rf"peak/fma/{scalar}/threads:(\d+)$", k)] if m)
    if not measured or 1 not in measured:
        return 1.0
    q = max([m for m in measured if m <= P] or [1])
    return times[f"peak/fma/{scalar}/threads:1"] / times[f"peak/fma/{scalar}/threads:{q}"]


def phase_costs(times, scalar, n=65536, d=64, dv=64):
    """(a, c): ms per token of the block schedule's (A) and (C) at one thread, from make bench's phase/... entries
    (the products as the form runs them), or None when the run has none (runs before 2026-12-05)."""
    keys = [f"phase/hla2/chunked-fused/{p}/{scalar}/n:{n}/d:{d}/dv:{dv}/threads:1" for p in ("summary", "carry")]
    if not all(k in times for k in keys):
        return None
    return tuple(times[k] / n for k in keys)


def gemm_rate(times, scalar, library="eigen"):
    """Flop/ms of the one-thread 1024^2 product of `library`."""
    t = times.get(f"roofline/{library}/{scalar}/threads:1")
    return 2 * 1024**3 / t if t else None


def form_times(times, op, form, scalar, n, d=64, dv=64, decay=""):
    """P -> ms of one entry at every thread count; decay: "" (the plain entry) or a /gamma:... or /gates:... suffix."""
    pre = f"{op}/{form}/{scalar}/n:{n}/d:{d}/dv:{dv}/threads:"
    return {int(k[len(pre):-len(decay) or None]): v for k, v in times.items()
            if k.startswith(pre) and k.endswith(decay) and k[len(pre):len(k) - len(decay)].isdigit()}


def pipelined(T1, M, h, P, ph):
    return max(T1 / (P * ph), M * h)


def grouped(T1, f, P, ph):
    return T1 * (f + (1 - f) / (P * ph))


def blocked(T1, n, d, va, rate, P, ph, chunk=48, barrier_ms=5e-3, state_add_ms=None, shared=True, phase_ms=None):
    """Span of the two-level block schedule: the slowest block plus two barriers and two scans. shared: (A) and
    (C) split over all P workers by rows (threads, since 2026-12-04); else each block's own worker does them
    (MPI ranks, which hold only their own rows; the thread schedule before). phase_ms: (a, c), the measured
    one-thread ms per token of (A) and (C) (phase_costs), in place of their flops at the GEMM rate."""
    M = -(-n // chunk)
    first = [M * t // P for t in range(P + 1)]
    rows = [min(n, f * chunk) for f in first]
    l, a, c = T1 / n, 2 * d * d / rate, 2 * d * va / rate
    if phase_ms is not None:
        a, c = phase_ms
    n_t = [rows[t + 1] - rows[t] for t in range(P)]
    if shared:
        span = (sum(n_t[:-1]) * a + sum(n_t[1:]) * c) / P + max(n_t) * l
    else:
        span = max(n_t[:-1], default=0) * a + max(n_t) * l + max(n_t[1:], default=0) * c
    if state_add_ms is None:
        state_add_ms = (d * d + 2 * va * d) / rate  # one addition per entry, at the GEMM's flop rate (generous)
    return span / ph + 2 * (barrier_ms + P * state_add_ms)


def fmt_row(label, meas, pred, ps=PS):
    cells = []
    for P in ps:
        m, p = meas.get(P), pred.get(P)
        if m is None and p is None:
            cells.append("—")
        elif m is None:
            cells.append(f"({p:.1f})")
        elif p is None:
            cells.append(f"{m:.1f}")
        else:
            cells.append(f"{m:.1f} / {p:.1f} ({(p / m - 1) * 100:+.0f}%)")
    return f"| {label} | " + " | ".join(cells) + " |"


def header(what, ps=PS):
    return f"| {what} | " + " | ".join(f"P = {P}" for P in ps) + " |\n|---|" + "---|" * len(ps)


def xeon(args):
    d65, _ = load(os.path.join(args.dir, "omp65536.json"))
    d1m, _ = load(os.path.join(args.dir, "omp1m.json"))
    roof, _ = load(os.path.join(args.dir, "roofline.json"))
    report = {"machine": args.dir, "rows": []}
    print("Measured / modelled time in ms (model error in brackets; a bare (x) is a prediction only).")
    print("Calibrated: pipelined h on n = 65536 at P >= 8; grouped f on n = 65536 at P = 16."
          " Everything else is a check.\n")
    print(header("form, n, schedule"))
    for scalar in ["float", "double"]:
        rate = gemm_rate(roof, scalar)
        ph = {P: phi(roof, scalar, P) for P in PS}
        # pipelined: chunked-fused today
        m65 = form_times(d65, "hla2", "chunked-fused", scalar, 65536)
        M65 = -(-65536 // 48)
        h = min(m65[P] for P in m65 if P >= 8) / M65
        for n, meas in [(65536, m65), (1048576, form_times(d1m, "hla2", "chunked-fused", scalar, 1048576))]:
            M = -(-n // 48)
            pred = {P: pipelined(meas[1], M, h, P, ph[P]) for P in PS}
            print(fmt_row(f"hla2/chunked-fused {scalar} n={n} pipelined (h = {h * 1e3:.1f} us)", meas, pred))
            report["rows"].append({"form": "hla2/chunked-fused", "scalar": scalar, "n": n, "schedule": "pipelined",
                                   "h_ms": h, "measured": meas, "predicted": pred})
            predb = {P: blocked(meas[1], n, 64, 65, rate, P, ph[P]) for P in PS}
            print(fmt_row(f"hla2/chunked-fused {scalar} n={n} blocked (new)", {1: meas[1]}, predb))
            report["rows"].append({"form": "hla2/chunked-fused", "scalar": scalar, "n": n, "schedule": "blocked",
                                   "measured": {1: meas[1]}, "predicted": predb})
        for op in ["hla2", "linear"]:
            m65 = form_times(d65, op, "chunked", scalar, 65536)
            f = grouped_fraction(m65[1] / m65[16], ph[16], P=16)
            for n, meas in [(65536, m65), (1048576, form_times(d1m, op, "chunked", scalar, 1048576))]:
                pred = {P: grouped(meas[1], f, P, ph[P]) for P in PS}
                print(fmt_row(f"{op}/chunked {scalar} n={n} grouped (f = {f:.3f})", meas, pred))
                report["rows"].append({"form": f"{op}/chunked", "scalar": scalar, "n": n, "schedule": "grouped", "f": f,
                                       "measured": meas, "predicted": pred})
        print(f"| phi(P) {scalar} (peak/fma) | " + " | ".join(f"{ph[P]:.2f}" for P in PS) + " |")
        report["rows"].append({"phi": scalar, "values": ph})
    return report


def run_threads(times):
    """The thread counts a bench run timed hla2/chunked-fused at (1 and 2 by default; make bench THREADS=...)."""
    return sorted({P for scalar in ["float", "double"]
                   for P in form_times(times, "hla2", "chunked-fused", scalar, 65536)})


def bench(args):
    times, ctx = load(args.bench)
    measured = run_threads(times)
    ps = sorted(set(PS) | set(measured))  # the predictions' columns, and every measured P among them
    report = {"machine": "this one", "load_avg": ctx.get("load_avg"), "rows": []}
    at = ", ".join(map(str, measured or [1, 2]))
    print(f"Model at P = {at} on this machine (load {ctx.get('load_avg')}): measured / modelled ms.\n")
    print(header("form, schedule", ps))
    for scalar in ["float", "double"]:
        rate = gemm_rate(times, scalar)
        ph = {P: phi(times, scalar, P) for P in ps}
        for op, form in [("hla2", "chunked-fused")]:
            meas = form_times(times, op, form, scalar, 65536)
            if 1 not in meas or rate is None:
                continue
            costs = phase_costs(times, scalar)
            pred = {P: blocked(meas[1], 65536, 64, 64, rate, P, ph[P], phase_ms=costs) for P in ps}
            source = "(A), (C) measured" if costs else "(A), (C) at eigen's 1024^2 rate"
            print(fmt_row(f"{op}/{form} {scalar} blocked, {source}", meas, pred, ps))
            report["rows"].append({"form": f"{op}/{form}", "scalar": scalar, "schedule": "blocked", "measured": meas,
                                   "predicted": pred, "phases": source})
        for op in ["hla2", "ahla", "linear"]:
            plain = form_times(times, op, "chunked", scalar, 65536)
            if 1 not in plain or 2 not in plain:
                continue
            f = grouped_fraction(plain[1] / plain[2], ph[2])
            pre = f"{op}/chunked/{scalar}/n:65536/d:64/dv:64/threads:"
            decays = {k[k.index("/", len(pre)):] for k in times if k.startswith(pre) and "/" in k[len(pre):]}
            for decay in sorted(decays):
                meas = form_times(times, op, "chunked", scalar, 65536, decay=decay)
                if 1 not in meas:
                    continue
                pred = {P: grouped(meas[1], f, P, ph[P]) for P in sorted({1, 2} | set(meas))}
                print(fmt_row(f"{op}/chunked{decay} {scalar} grouped (f = {f:.3f}: the plain entry's at P = 2)", meas,
                              pred, ps))
                report["rows"].append({"form": f"{op}/chunked{decay}", "scalar": scalar, "schedule": "grouped", "f": f,
                                       "f_from": f"{op}/chunked at P = 2", "measured": meas, "predicted": pred})
        top = max([P for P in ps if f"peak/fma/{scalar}/threads:{P}" in times] or [2])
        print(f"| phi(P) {scalar} (peak/fma; P > {top} assumed = P {top}) | " + " | ".join(f"{ph[P]:.2f}" for P in ps)
              + " |")
    return report


def grouped_fraction(speedup, ph, P=2):
    """The grouped schedule's f from a measured P-thread speed-up: T1 (f + (1 - f) / (P phi)) = T1 / speedup."""
    return (P * ph / speedup - 1) / (P * ph - 1)


def mpi(args):
    """hla2 mpi-chunked at d = dv = 64, double: today's two-pass schedule with the gather, and the one-pass one."""
    runs = [json.loads(line) for line in open(os.path.join(args.dir, "mpi.jsonl")) if line.strip()]
    d65, _ = load(os.path.join(args.dir, "omp65536.json"))
    roof, _ = load(os.path.join(args.dir, "roofline.json"))
    rate = gemm_rate(roof, "double")
    report = {"machine": args.dir, "rows": []}
    print("hla2 mpi-chunked, d = dv = 64, double, strong scaling: measured / modelled ms (model error).")
    print("Two-pass (today): local + finish = 2 l n / (P phi) (l: the chunked form's per-token time, from P = 1),")
    print("gather = every rank receives the n x dv outputs at bandwidth B (calibrated on n = 65536, P = 2).")
    print("One pass (issue 28): (l_f + a + c) n / (P phi) + two gathers of P states, no output gather in the time.\n")
    print(header("case"))
    ph = {P: phi(roof, "double", P) for P in PS}
    sel = [r for r in runs
           if r["op"] == "hla2" and r["form"] == "mpi-chunked" and r["d"] == 64 and r["scaling"] == "strong"]
    l_fused = form_times(d65, "hla2", "chunked-fused", "double", 65536)[1] / 65536
    cal = next(r for r in sel if r["n"] == 65536 and r["P"] == 2)
    bw = cal["n"] * cal["dv"] * 8 / (cal["gather_s"] * 1e3)  # bytes per ms
    for n in sorted({r["n"] for r in sel}):
        meas = {r["P"]: r["time_s"] * 1e3 for r in sel if r["n"] == n}
        per_token = next(r["finish_s"] for r in sel if r["n"] == n and r["P"] == 1) * 1e3 / n
        old = {P: meas[1] if P == 1 else 2 * per_token * n / (P * ph[P]) + n * 64 * 8 / bw for P in PS}
        new = {P: blocked(l_fused * n, n, 64, 65, rate, P, ph[P], chunk=64, shared=False) for P in PS}
        print(fmt_row(f"n={n} two-pass + gather (B = {bw / 1e6:.1f} GB/s)", meas, old))
        print(fmt_row(f"n={n} one pass, rows kept (new)", {}, new))
        report["rows"].append({"n": n, "measured": meas, "two_pass": old, "one_pass": new, "gather_bytes_per_ms": bw})
    return report


def mpi_here(args):
    """hla2 mpi-chunked (one pass, rows kept) at P = 1, 2 on this machine: P = 2 predicted from P = 1."""
    runs = json.load(open(args.runs))["runs"]
    times, ctx = load(args.bench)
    rate = gemm_rate(times, "double")
    report = {"machine": "this one", "rows": []}
    print("hla2 mpi-chunked here (double, rows kept, gather apart): measured / modelled ms;"
          f" GEMM rate from {args.bench}.\n")
    print(header("case"))
    for r1 in [r for r in runs if r["op"] == "hla2" and r["P"] == 1 and r["scaling"] == "strong"]:
        only = r1.get("outputs_only", False)  # runs before 2026-12-06 have no such field: they timed the state
        same = [r for r in runs if r["op"] == "hla2" and r["scaling"] == "strong" and r["n"] == r1["n"]
                and r["d"] == r1["d"] and r["form"] == r1["form"] and r.get("outputs_only", False) == only]
        meas = {r["P"]: r["time_s"] * 1e3 for r in same}
        T1 = r1["time_s"] * 1e3
        pred = {P: blocked(T1, r1["n"], r1["d"], r1["dv"] + 1, rate, P, phi(times, "double", P), chunk=r1["chunk"],
                           shared=False)
                for P in PS}
        label = f"{r1['form']} n={r1['n']} d={r1['d']}" + (" outputs only" if only else "")
        print(fmt_row(label, meas, pred))
        gathers = {r["P"]: r.get("gather_s", 0) * 1e3 for r in same}
        print(f"| {label}: gather of the whole output (not in the time) | " + " | ".join(
            f"{gathers[P]:.1f}" if P in gathers else "—" for P in PS) + " |")
        report["rows"].append({"case": label, "measured": meas, "predicted": pred, "gather_ms": gathers})
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    x = sub.add_parser("xeon")
    x.add_argument("dir")
    b = sub.add_parser("bench")
    b.add_argument("bench")
    mp = sub.add_parser("mpi")
    mp.add_argument("dir")
    mh = sub.add_parser("mpi-here")
    mh.add_argument("runs")
    mh.add_argument("bench")
    for p in (x, b, mp, mh):
        p.add_argument("--out")
    args = ap.parse_args()
    try:
        report = {"xeon": xeon, "bench": bench, "mpi": mpi, "mpi-here": mpi_here}[args.cmd](args)
    except (OSError, KeyError, ValueError) as e:
        print(f"workspan: {e}", file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
