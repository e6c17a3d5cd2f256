"""`hla verify --gates` and hla_harness.verify(..., gates=True) on gated implementations that are right or wrong
in the ways gated kernels go wrong (tests/verify_impls/gated_impls.py).

Run by scripts/test.sh with HLA_BUILD (the build folder) and PYTHONPATH=<build>/python.
"""
import json
import os
import tempfile
import unittest

import numpy as np

from test_verify import HLA, PY, QUICK, ROOT, run_with_report  # the build, the interpreter, the quick battery

GATED = os.path.join(ROOT, "tests", "verify_impls", "gated_impls.py")

import gated_impls  # noqa: E402  (tests/verify_impls, on the path through test_verify)


def run(args, timeout=600):
    """(exit code, report or None, stdout + stderr) of `hla verify ARGS --json OUT`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        return run_with_report([HLA, "verify", *args, "--json", out], out, timeout)


def verify_gated(name, *args):
    return run(["--gates", "--exec", f"{PY} {GATED} {name}", *QUICK, *args])


class GatedExecVerdicts(unittest.TestCase):
    def assert_verdict(self, name, verdict, *args):
        code, report, out = verify_gated(name, *args)
        self.assertIsNotNone(report, out)
        self.assertEqual(report["verdict"], verdict, out)
        self.assertEqual(code, 0 if verdict == "computes" else 1, out)
        return report

    def test_right_gated_forms_compute(self):
        self.assert_verdict("hla2", "computes", "--op", "hla2")
        self.assert_verdict("hla2", "computes", "--op", "hla2", "--normalized", "--eps", "1/4", "--lambda", "1/2")
        self.assert_verdict("hla2", "computes", "--op", "hla2", "--dtype", "float32", "--gate-range", "0.5,1")
        self.assert_verdict("linear", "computes", "--op", "linear", "--normalized", "--eps", "1/4")
        self.assert_verdict("linear-chunked", "computes", "--op", "linear")
        self.assert_verdict("hla2-chunked", "computes", "--op", "hla2", "--normalized", "--lambda", "1/2")
        self.assert_verdict("ahla", "computes", "--op", "ahla")

    def test_wrong_gated_forms_differ(self):
        for name, op in [("hla2-algorithm1-rule", "hla2"), ("hla2-gates-shifted", "hla2"), ("hla2-mean-gate", "hla2"),
                         ("linear-gates-shifted", "linear"), ("linear-mean-gate", "linear"),
                         ("linear-chunked-carry-product", "linear"), ("hla2-chunked-carry-product", "hla2")]:
            with self.subTest(name=name):
                report = self.assert_verdict(name, "differs", "--op", op)
                # an exact case proves it: the counterexample carries its gates
                self.assertIsNotNone(report["counterexample"]["gamma"])

    def test_cases_carry_gates(self):
        with tempfile.TemporaryDirectory() as tmp:
            # a command that keeps one case directory, then fails: what the protocol wrote
            keep = os.path.join(tmp, "seen")
            code, _, out = run(["--gates", "--op", "linear", "--exec", f"sh -c 'cp -r \"$0\" {keep}; exit 1'", *QUICK])
            self.assertEqual(code, 2, out)
            cases = sorted(os.listdir(keep))
            self.assertTrue(cases)
            for case in cases:
                meta = json.load(open(os.path.join(keep, case, "case.json")))
                gamma = np.load(os.path.join(keep, case, "gamma.npy"))
                self.assertTrue(meta["gates"])
                self.assertEqual(gamma.shape, (meta["n"],))
                self.assertTrue(np.all((gamma > 0) & (gamma <= 1)))
                if meta["kind"] == "exact":
                    self.assertTrue(np.all(gamma != 1), case)  # ≠ 1 at every chunk boundary of every width
                    self.assertTrue(meta["n"] < 3 or len(set(gamma.tolist())) > 1, case)


class GatedRefusals(unittest.TestCase):
    def assert_refused(self, args, words):
        code, _, out = run(args)
        self.assertEqual(code, 2, out)
        self.assertIn(words, out)

    def test_refusals(self):
        ex = ["--exec", "true", *QUICK]
        self.assert_refused(["--gates", "--gamma", "0.9", *ex], "--gamma means nothing")
        self.assert_refused(["--gates", "--grad", *ex], "--gates with --grad is not supported yet")
        self.assert_refused(["--gates", "--state", *ex], "--gates with --state is not supported yet")
        self.assert_refused(["--gates", "--op", "hla3", *ex], "no gated definition")
        self.assert_refused(["--gates", "--gate-range", "0.9,0.5", *ex], "--gate-range")
        self.assert_refused(["--gates", "--gate-range", "0,1", *ex], "--gate-range")
        self.assert_refused(["--gates", "--gate-range", "0.5,1.5", *ex], "--gate-range")
        self.assert_refused(["--gate-range", "0.5,1", *ex], "--gate-range goes with --gates")
        self.assert_refused(["--gates", "--combine", *ex], "refused: --gates")


class GatedFileMode(unittest.TestCase):
    def test_file_mode(self):
        rng = np.random.default_rng(3)
        n, d, dv = 40, 4, 3
        q, k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, dv))
        gamma = rng.uniform(0.5, 1, n)
        with tempfile.TemporaryDirectory() as tmp:
            def files(o, g=gamma):
                paths = []
                for name, x in (("q", q), ("k", k), ("v", v), ("o", o), ("g", g)):
                    paths.append(os.path.join(tmp, name + ".npy"))
                    np.save(paths[-1], x)
                return ["--op", "hla2", "--gates", "--q", paths[0], "--k", paths[1], "--v", paths[2], "--o", paths[3],
                        "--gamma-npy", paths[4], "--quiet"]
            code, report, out = run(files(gated_impls.hla2(q, k, v, gamma, False, 0, 0)))
            self.assertEqual((code, report["verdict"]), (0, "computes"), out)
            code, report, out = run(files(gated_impls.IMPLS["hla2-algorithm1-rule"](q, k, v, gamma, False, 0, 0)))
            self.assertEqual((code, report["verdict"]), (1, "differs"), out)
            right = gated_impls.hla2(q, k, v, gamma, False, 0, 0)
            for bad, words in ((gamma[:-1], "gates for"), (np.where(np.arange(n) == 5, 1.5, gamma), "outside (0, 1]"),
                               (np.where(np.arange(n) == 5, np.nan, gamma), "outside (0, 1]"),
                               (gamma.reshape(n, 1), "shape (n,)")):
                code, _, out = run(files(right, bad))
                self.assertEqual(code, 2, out)
                self.assertIn(words, out)


class GatedModule(unittest.TestCase):
    def test_module(self):
        import hla_harness
        seen = []

        def fn(q, k, v, gamma, normalized, eps, ridge):
            seen.append(np.shape(gamma))
            return gated_impls.hla2(q, k, v, gamma, normalized, eps, ridge)

        r = hla_harness.verify(fn, "hla2", gates=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "computes")
        self.assertTrue(seen and all(len(s) == 1 for s in seen))
        r = hla_harness.verify(gated_impls.IMPLS["hla2-gates-shifted"], "hla2", gates=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "differs")
        for bad in (dict(gamma=0.9), dict(gate_range=(0.9, 0.5)), dict(gate_range=(0.0, 1.0)), dict(grad=True)):
            with self.subTest(**bad), self.assertRaises(ValueError):
                hla_harness.verify(fn, "hla2", gates=True, **bad)


if __name__ == "__main__":
    unittest.main()
