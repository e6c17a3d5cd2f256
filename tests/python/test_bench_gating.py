"""make bench's gated entries, read by experiments/bench_targets.py (the cost of gating), experiments/plots/bench.py
(their bars) and experiments/model/workspan.py (the grouped schedule's f carried to them), on made-up medians
whose ratios are known, so a wrong name or a swapped ratio shows. No build needed.

1. The gating rows: gated ÷ fixed γ = 0.9, γ = 0.9 ÷ γ = 1 and, at one thread, naive ÷ gated, per (op, scalar,
   threads); a run without gated entries has no gating rows, a run with a gated entry but not its siblings is an
   error (KeyError, which the script turns into exit 2); `--only gating` reads a run of just these entries.
2. The figure's labels keep a gated or fixed-γ entry apart from its plain sibling (not drawn over it).
3. The model's grouped rows: f from the plain entry's P = 2, the siblings' P = 2 from their own P = 1; its blocked
   rows charge (A) and (C) their measured phase/... times when the run has them.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "model"))

import bench_targets  # noqa: E402
import workspan  # noqa: E402
from plots import bench as bench_plot  # noqa: E402

SHAPE = "n:65536/d:64/dv:64"


def median(name, ms):
    return {"name": f"{name}/min_time:0.200/real_time_median", "run_name": f"{name}/min_time:0.200/real_time",
            "run_type": "aggregate", "aggregate_name": "median", "real_time": ms, "time_unit": "ms",
            "gflops": 1000.0 / ms}


def model_report(entries):
    """experiments/model/workspan.py bench on a run of these entries (written to a bench.json of its own): its report,
    and the medians it read."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        with open(path, "w") as f:
            json.dump({"benchmarks": entries}, f)
        times, _ = workspan.load(path)
        return workspan.bench(type("Args", (), {"bench": path})()), times


def gated_entries():
    """plain 10·k ms, γ = 0.9 12·k, gated 15·k (k = threads' factor), naive 30 ms:
    ratios 1.25, 1.2, 2 (naive ÷ gated at k=1)."""
    out = []
    for op, form in bench_targets.GATED_FORMS:
        for s in bench_targets.SCALARS:
            for th, k in ((1, 1.0), (2, 0.6)):
                base = f"{op}/{form}/{s}/{SHAPE}/threads:{th}"
                out += [median(base, 10 * k), median(f"{base}/{bench_targets.FIXED_GAMMA}", 12 * k),
                        median(f"{base}/{bench_targets.GATES}", 15 * k)]
            if form == "chunked":
                out.append(median(f"{op}/chunked-naive-cumprod/{s}/{SHAPE}/threads:1/{bench_targets.GATES}", 30))
    return out


class Gating(unittest.TestCase):
    def medians(self, entries):
        return bench_targets.medians({"benchmarks": entries})

    def test_ratios(self):
        m = self.medians(gated_entries())
        rows = bench_targets.compute_gating(m.__getitem__)
        self.assertEqual(set(rows), {"hla2", "ahla", "linear", "hla2/chunked-fused"})
        self.assertNotIn("naive_over_gated", rows["hla2/chunked-fused"]["float"][1])  # no naive fused form
        for op in bench_targets.GATED_OPS:
            for s in bench_targets.SCALARS:
                g = bench_targets.gating(m.__getitem__, op, s)
                for th in (1, 2):
                    self.assertAlmostEqual(g[th]["gated_over_fixed"], 1.25)
                    self.assertAlmostEqual(g[th]["fixed_over_plain"], 1.2)
                    self.assertAlmostEqual(g[th]["gated_over_plain"], 1.5)
                self.assertAlmostEqual(g[1]["gated_ms"], 15.0)
                self.assertAlmostEqual(g[2]["fixed_ms"], 12 * 0.6)
                self.assertAlmostEqual(g[1]["naive_over_gated"], 2.0)
                self.assertNotIn("naive_over_gated", g[2])

    def test_missing_sibling_is_an_error(self):
        entries = [e for e in gated_entries() if f"/threads:2/{bench_targets.FIXED_GAMMA}" not in e["run_name"]
                   or not e["run_name"].startswith("ahla/chunked/double/")]
        m = self.medians(entries)
        bench_targets.gating(m.__getitem__, "ahla", "float")  # its own siblings are all there
        with self.assertRaises(KeyError):
            bench_targets.gating(m.__getitem__, "ahla", "double")

    def test_only_gating_command(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gating.json")
            with open(path, "w") as f:
                json.dump({"benchmarks": gated_entries()}, f)
            run = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "bench_targets.py"), path,
                                  "--only", "gating"],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertEqual(run.stdout.count("gated ÷ fixed γ=0.9 time: 1T 1.25"), len(bench_targets.GATED_FORMS) * 2)
            with open(path, "w") as f:
                json.dump({"benchmarks": gated_entries()[1:]}, f)  # hla2 float's plain 1T entry gone
            run = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "bench_targets.py"), path,
                                  "--only", "gating"],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)
            self.assertIn(f"hla2/chunked/float/{SHAPE}/threads:1", run.stderr)


class Figure(unittest.TestCase):
    def test_labels_keep_siblings_apart(self):
        labels = set()
        for e in gated_entries():
            kind, f = bench_plot.parse(e["run_name"])
            self.assertEqual(kind, "entry")
            labels.add((f["op"], f["form"], f["decay"], f["threads"]))
        # per form and scalar: plain, γ = 0.9 and gated at two thread counts (the chunked forms: the naive one at
        # one), none merged
        self.assertEqual(len(labels), len(bench_targets.GATED_FORMS) * 3 * 2 + len(bench_targets.GATED_OPS))

        def decay(suffix):
            return bench_plot.parse(f"hla2/chunked/float/{SHAPE}/threads:2/{suffix}")[1]["decay"]

        self.assertEqual(decay(bench_targets.GATES), " gated")
        self.assertEqual(decay(bench_targets.FIXED_GAMMA), " γ=0.9")


class ChunkWidths(unittest.TestCase):
    """The threaded chunked forms at other chunk widths (.../threads:1/w:<w>): bench_targets reads the fastest width
    beside the plain entry (at its `chunk` counter), and the figure draws each width as its own bar."""

    def test_fastest_width_and_bars(self):
        base = f"hla2/chunked-fused/float/{SHAPE}/threads:1"
        plain = dict(median(base, 40.0), chunk=48)
        m = bench_targets.medians({"benchmarks": [plain, median(f"{base}/w:16", 42.0), median(f"{base}/w:32", 38.0),
                                                  median(f"{base}/w:64", 45.0)]})
        by_width = bench_targets.widths(m, "hla2", "chunked-fused", "float")
        self.assertEqual(by_width, {16: 0.042, 32: 0.038, 48: 0.040, 64: 0.045})
        self.assertEqual(min(by_width, key=by_width.get), 32)
        labels = {bench_plot.parse(f"{base}{suffix}")[1]["decay"] for suffix in ("", "/w:16", "/w:32")}
        self.assertEqual(labels, {"", " w=16", " w=32"})


class ProductsAlone(unittest.TestCase):
    """hla2/chunked-fused's products alone (phase/.../products/.../w:<w>): bench_targets reads them per width and
    bounds the peer ratio by the fastest of them; a run without them (before 13) has no bound."""

    def test_products_bound(self):
        base = f"phase/hla2/chunked-fused/products/double/{SHAPE}/threads:1"
        m = bench_targets.medians({"benchmarks": [median(f"{base}/w:16", 50.0), median(f"{base}/w:32", 57.0),
                                                  median(f"hla2/chunked-fused/float/{SHAPE}/threads:1/w:16", 9.0)]})
        self.assertEqual(bench_targets.products(m, "double"), {16: 0.050, 32: 0.057})
        self.assertEqual(bench_targets.products(m, "float"), {})
        ratio, w = bench_targets.products_bound(0.155, bench_targets.products(m, "double"))
        self.assertAlmostEqual(ratio, 3.1)
        self.assertEqual(w, 16)
        self.assertIsNone(bench_targets.products_bound(0.155, {}))


class Model(unittest.TestCase):
    def test_grouped_rows(self):
        report, times = model_report(gated_entries())
        rows = {(r["form"], r["scalar"]): r for r in report["rows"] if r.get("schedule") == "grouped"}
        self.assertEqual(len(rows), len(bench_targets.GATED_OPS) * len(bench_targets.SCALARS) * 2)
        # no peak/ entries: phi = 1, so f from the plain entry's 10 → 6 ms is (2/(10/6) − 1)/(2 − 1) = 0.2, and the
        # gated entry's P = 2 is 15 (0.2 + 0.8/2) = 9 ms (its measured 9 ms: the same speed-up by construction)
        r = rows[(f"linear/chunked/{bench_targets.GATES}", "double")]
        self.assertAlmostEqual(r["f"], 0.2)
        self.assertAlmostEqual(r["predicted"][2], 9.0)
        self.assertAlmostEqual(r["measured"][2], 9.0)
        self.assertAlmostEqual(times[f"hla2/chunked/float/{SHAPE}/threads:1/{bench_targets.GATES}"], 15.0)

    def test_blocked_rows_charge_the_measured_phases(self):
        """With phase/... entries the blocked row charges (A) and (C) their measured per-token times: made-up
        T1 = 40 ms, (A) 6.5536 ms and (C) 13.1072 ms over n = 65536 rows (1e-4 and 2e-4 ms per token). At P = 2 with
        phi = 1: ((n0 a + n1 c) / 2 + max n_t l) + 2 barriers, n_t = 32784 / 32752 (1366 chunks of 48, 683 each)."""
        entries = [median(f"hla2/chunked-fused/float/{SHAPE}/threads:1", 40.0),
                   median(f"hla2/chunked-fused/float/{SHAPE}/threads:2", 25.0),
                   median("roofline/eigen/float/threads:1", 20.0),
                   median(f"phase/hla2/chunked-fused/summary/float/{SHAPE}/threads:1", 6.5536),
                   median(f"phase/hla2/chunked-fused/carry/float/{SHAPE}/threads:1", 13.1072)]
        report, _ = model_report(entries)
        row = next(r for r in report["rows"] if r.get("schedule") == "blocked" and r["scalar"] == "float")
        self.assertEqual(row["phases"], "(A), (C) measured")
        n0, n1 = 683 * 48, 65536 - 683 * 48
        rate = 2 * 1024**3 / 20.0
        barriers = 2 * (5e-3 + 2 * (64 * 64 + 2 * 64 * 64) / rate)
        expected = (n0 * 1e-4 + n1 * 2e-4) / 2 + n0 * 40.0 / 65536 + barriers
        self.assertAlmostEqual(row["predicted"][2], expected, places=9)
        without = workspan.blocked(40.0, 65536, 64, 64, rate, 2, 1.0)  # (A), (C) at the GEMM's rate instead
        self.assertNotAlmostEqual(row["predicted"][2], without, places=3)


if __name__ == "__main__":
    unittest.main()
