"""make bench's thread counts (issue 50: `make bench THREADS="1 2 4 8 16"`, HLA_BENCH_THREADS), on made-up medians
whose ratios are known, so a count read at the wrong place or a wrong ratio shows. No build needed for 1 and 2.

1. experiments/bench_targets.py reads every thread count of a run: beside the targets at 1 and 2 (unchanged), a run
   with 4-thread entries gets 4-thread rows — hla2's chunked forms against the best 4-thread roofline and their
   speed-up over one thread, the rooflines, peer and gating ratios at 4 — and a run at 1 and 2 gets none.
2. experiments/model/workspan.py sets its predictions beside each measured thread count.
3. hla_bench reads HLA_BENCH_THREADS strictly (exit 2 and why on a bad list; the 4-thread entries when asked), and
   scripts/bench.sh refuses a list without 1 and 2 before it times anything — when the build has hla_bench (make
   bench builds it, make test does not).
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_targets  # noqa: E402
from test_bench_gating import median, model_report  # noqa: E402  (the same made-up medians and model runs)
from test_verify import BUILD  # noqa: E402  (the same build)

HLA_BENCH = os.path.join(BUILD, "bin", "hla_bench")
SHAPE = bench_targets.SHAPE
THREADS = (1, 2, 4)
# made-up medians: hla2/chunked-fused 40 / 24 / 16 ms at 1 / 2 / 4 threads (speed-up 2.5 at 4), its useful rate
# 100 / 160 / 250 GFLOP/s; the best roofline blis at 125 / 200 / 500 (the others at 0.8 of it): 2.0 of the form's
# 4-thread rate, its own speed-up 4 at 4 threads
FUSED_MS = {1: 40.0, 2: 24.0, 4: 16.0}
BLIS = {1: 125.0, 2: 200.0, 4: 500.0}


def entry(name, ms, **counters):
    """A median with these counters (test_bench_gating's, whose gflops they replace)."""
    return dict(median(name, ms), **counters)


def run_entries(threads=THREADS):
    """Every median bench_targets.compute reads, at these thread counts (gated entries included)."""
    out = [entry("peak/clock/threads:1", 1.0, ghz=3.0)]
    for s in bench_targets.SCALARS:
        for th in threads:
            out += [entry(f"roofline/{lib}/{s}/threads:{th}", 10.0, gflops=BLIS[th] * (1.0 if lib == "blis" else 0.8))
                    for lib in bench_targets.LIBRARIES]
            out.append(entry(f"peak/fma/{s}/threads:{th}", 1.0, gflops=150.0 * th, lanes=8))
            for form in ("chunked", "chunked-fused"):
                base = f"hla2/{form}/{s}/{SHAPE}/threads:{th}"
                out.append(entry(base, FUSED_MS[th], gflops=4000.0 / FUSED_MS[th], chunk=48))
                out += [entry(f"{base}/{bench_targets.FIXED_GAMMA}", 1.2 * FUSED_MS[th]),
                        entry(f"{base}/{bench_targets.GATES}", 1.5 * FUSED_MS[th])]
            for op in ("ahla", "linear"):
                base = f"{op}/chunked/{s}/{SHAPE}/threads:{th}"
                out += [entry(base, FUSED_MS[th] / 2, gflops=1000.0 / FUSED_MS[th], chunk=48),
                        entry(f"{base}/{bench_targets.FIXED_GAMMA}", 0.6 * FUSED_MS[th]),
                        entry(f"{base}/{bench_targets.GATES}", 0.75 * FUSED_MS[th])]
            for op in ("hla2", "linear"):
                out.append(entry(f"peer/torch/{op}/batched/{s}/{SHAPE}/threads:{th}", 3 * FUSED_MS[th],
                                 max_rel_error=1e-7))
        out.append(entry(f"ceiling/hla2/chunked/{s}/{SHAPE}/threads:2", 22.0))
        out.append(entry(f"ceiling/hla2/chunked-fused/{s}/{SHAPE}/threads:2", 22.0))
        for op in bench_targets.GATED_OPS:
            out.append(entry(f"{op}/chunked-naive-cumprod/{s}/{SHAPE}/threads:1/{bench_targets.GATES}", 100.0))
        for lib in bench_targets.LIBRARIES:
            for w in bench_targets.WIDTHS:
                for mm, nn, kk, nt in ((w, w, 64, "/nt"), (w, 64, w, ""), (w, 64, 64, ""), (64, 64, w, "")):
                    out.append(entry(f"gemm/{lib}/{s}/w:{w}/m:{mm}/n:{nn}/k:{kk}{nt}/threads:1", 0.01, gflops=90.0))
        out.append(entry(f"hla2/decode/{s}/{SHAPE}/threads:1", 200.0))
        out.append(entry(f"bandwidth/{s}/bytes:65536/threads:1", 0.001, bytes_per_s=1e11))
    return out


class Targets(unittest.TestCase):
    def run_targets(self, entries):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            with open(path, "w") as f:
                json.dump({"benchmarks": entries}, f)
            script = os.path.join(ROOT, "experiments", "bench_targets.py")
            run = subprocess.run([sys.executable, script, path, "--write"], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(path) as f:
                return run.stdout, json.load(f)["targets"]

    def test_four_threads_get_their_rows(self):
        out, t = self.run_targets(run_entries())
        fused = t["hla2"]["chunked-fused"]["float"]
        self.assertAlmostEqual(fused["speedup_over_1t"]["4"], 2.5)
        self.assertAlmostEqual(fused["x_best_roofline"]["4"], 0.5)  # 250 GFLOP/s against blis's 500
        self.assertAlmostEqual(fused["roofline_speedup_over_1t"]["4"], 4.0)
        self.assertNotIn("2", fused["speedup_over_1t"])  # 2 threads: the target's own speedup_2t
        self.assertAlmostEqual(fused["speedup_2t"], 40 / 24)
        self.assertEqual(t["machine"]["double"]["best"]["4"], "blis")
        self.assertAlmostEqual(t["peer"]["hla2"]["float"]["4"]["peer_over_ours"], 3.0)
        self.assertAlmostEqual(t["gating"]["linear"]["double"]["4"]["gated_over_fixed"], 1.25)
        self.assertAlmostEqual(t["gating"]["hla2/chunked-fused"]["float"]["4"]["gated_over_fixed"], 1.25)
        self.assertIn("4T: 16.0 ms, × best roofline 0.50", out)
        self.assertIn("speed-up over 1T 2.50× (best roofline's own 4.00×)", out)
        self.assertIn("roofline 4T (1024²)", out)
        self.assertIn("gated ÷ fixed γ=0.9 time: 1T 1.25", out)
        self.assertIn("  4T 1.25 (", out)  # the gating row at 4 threads

    def test_one_and_two_threads_only_get_no_more_rows(self):
        out, t = self.run_targets(run_entries(threads=(1, 2)))
        self.assertNotIn("speedup_over_1t", t["hla2"]["chunked-fused"]["float"])
        self.assertEqual(set(t["machine"]["float"]["roofline"]), {"1", "2"})
        self.assertEqual(set(t["gating"]["ahla"]["float"]), {"1", "2"})
        self.assertNotIn("4T", out)

    def test_thread_counts(self):
        m = bench_targets.medians({"benchmarks": run_entries()})
        self.assertEqual(bench_targets.thread_counts(m), (1, 2, 4))
        self.assertEqual(bench_targets.thread_counts({}), (1, 2))  # the targets' two, which then name what is missing


class Model(unittest.TestCase):
    def test_predictions_beside_each_measured_count(self):
        entries = run_entries() + [entry(f"hla2/chunked-fused/float/{SHAPE}/threads:3", 20.0)]
        report, _ = model_report(entries)
        blocked = next(r for r in report["rows"] if r.get("schedule") == "blocked" and r["scalar"] == "float")
        self.assertEqual(sorted(blocked["measured"]), [1, 2, 3, 4])
        self.assertTrue({1, 2, 3, 4, 16, 64} <= set(blocked["predicted"]))  # P = 3: a column of its own
        grouped = next(r for r in report["rows"] if r.get("schedule") == "grouped"
                       and r["form"] == f"linear/chunked/{bench_targets.GATES}" and r["scalar"] == "double")
        self.assertEqual(sorted(grouped["predicted"]), [1, 2, 4])


@unittest.skipUnless(os.access(HLA_BENCH, os.X_OK), "no hla_bench in the build (make bench builds it)")
class HlaBench(unittest.TestCase):
    def hla_bench(self, threads, *args):
        env = dict(os.environ)
        env.pop("HLA_BENCH_THREADS", None)
        if threads is not None:
            env["HLA_BENCH_THREADS"] = threads
        return subprocess.run([HLA_BENCH, *args], env=env, capture_output=True, text=True, timeout=120)

    def test_bad_lists_exit_2_saying_why(self):
        for bad, why in (("0", "'0' is not one"), ("a", "'a' is not one"), ("", "no thread count"),
                         ("1 2 1", "1 is listed twice"), ("1,2", "'1,2' is not one"), ("-4", "'-4' is not one")):
            run = self.hla_bench(bad, "--benchmark_list_tests")
            self.assertEqual(run.returncode, 2, (bad, run.stdout))
            self.assertIn("HLA_BENCH_THREADS must be thread counts", run.stderr)
            self.assertIn(why, run.stderr)

    def test_the_list_and_its_entries(self):
        self.assertEqual(self.hla_bench(None, "--print-threads").stdout, "1 2\n")
        self.assertEqual(self.hla_bench(" 4 1  2 ", "--print-threads").stdout, "1 2 4\n")
        four = self.hla_bench("1 2 4", "--benchmark_list_tests", "--benchmark_filter=threads:4/")
        self.assertEqual(four.returncode, 0, four.stderr)
        for name in (f"hla2/chunked-fused/float/{SHAPE}/threads:4/", "roofline/blis/double/threads:4/",
                     "peak/fma/float/threads:4/", f"linear/chunked/double/{SHAPE}/threads:4/gates:range:0.8,1/",
                     "hla2/chunked-multiquery/float/n:65536/d:64/dv:64/threads:4/heads:4/"):
            self.assertIn(name, four.stdout)
        self.assertNotIn("ceiling/", four.stdout)  # the two-core ceilings stay at two threads
        default = self.hla_bench(None, "--benchmark_list_tests", "--benchmark_filter=threads:4/")
        self.assertNotIn("threads:4/", default.stdout)


class BenchScript(unittest.TestCase):
    def test_a_list_without_1_and_2_is_refused_first(self):
        """scripts/bench.sh with a stand-in hla_bench that reads the list as "2 4" and fails any other call (so a
        refusal that came too late shows as exit 1, not as a benchmark run)."""
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "bin"))
            stub = os.path.join(build, "bin", "hla_bench")
            with open(stub, "w") as f:
                f.write('#!/bin/sh\n[ "$1" = --print-threads ] && { echo "2 4"; exit 0; }\nexit 1\n')
            os.chmod(stub, stat.S_IRWXU)
            env = {k: v for k, v in os.environ.items() if k != "HLA_BENCH_FULL"}  # the default subset
            run = subprocess.run(["bash", os.path.join(ROOT, "scripts", "bench.sh"), build], capture_output=True,
                                 text=True, timeout=60, env=env)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("HLA_BENCH_THREADS='2 4' must list 1 and 2", run.stderr)


if __name__ == "__main__":
    unittest.main()
