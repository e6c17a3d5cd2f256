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
GATED_GRAD = os.path.join(ROOT, "tests", "verify_impls", "gated_grad_impls.py")

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
        self.assert_verdict("hla2", "computes", "--op", "hla2", "--normalized", "--eps", "1/4", "--ridge", "1/2")
        self.assert_verdict("hla2", "computes", "--op", "hla2", "--dtype", "float32", "--gate-range", "0.5,1")
        self.assert_verdict("linear", "computes", "--op", "linear", "--normalized", "--eps", "1/4")
        self.assert_verdict("linear-chunked", "computes", "--op", "linear")
        self.assert_verdict("hla2-chunked", "computes", "--op", "hla2", "--normalized", "--ridge", "1/2")
        self.assert_verdict("ahla", "computes", "--op", "ahla")

    def test_wrong_gated_forms_differ(self):
        for name, op in [("hla2-algorithm1-rule", "hla2"), ("hla2-gates-shifted", "hla2"), ("hla2-mean-gate", "hla2"),
                         ("linear-gates-shifted", "linear"), ("linear-mean-gate", "linear"),
                         ("linear-chunked-carry-product", "linear"), ("hla2-chunked-carry-product", "hla2")]:
            with self.subTest(name=name):
                report = self.assert_verdict(name, "differs", "--op", op)
                # an exact case proves it: the counterexample carries its gates
                self.assertIsNotNone(report["counterexample"]["gamma"])

    def test_one_process_serves_every_round(self):
        """protocol.serve answers on fd 3, so one process serves the whole battery (rounds of the counterexample
        search included); --fresh-process starts one per round. The verdict and the counterexample are the same."""
        with tempfile.TemporaryDirectory() as tmp:
            reports = {}
            for mode in ("kept", "fresh"):
                starts = os.path.join(tmp, mode)
                command = f"echo start >> {starts}; exec {PY} {GATED} hla2-gates-shifted"
                args = ["--op", "hla2"] + (["--fresh-process"] if mode == "fresh" else [])
                code, report, out = run(["--gates", "--exec", command, *QUICK, *args])
                self.assertEqual(code, 1, out)
                with open(starts) as f:
                    reports[mode] = (report, sum(1 for _ in f))
            (kept, kept_starts), (fresh, fresh_starts) = reports["kept"], reports["fresh"]
            self.assertGreater(len(kept["rounds"]), 2)
            self.assertEqual(kept_starts, 1)
            self.assertEqual(fresh_starts, len(fresh["rounds"]))
            for key in ("verdict", "outputs", "counterexample", "localization", "matches"):
                self.assertEqual(kept[key], fresh[key], key)

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
                weak = meta["kind"] == "exact" and set(gamma.tolist()).isdisjoint({0.25, 0.5625, 0.765625, 1.0})
                if weak:
                    # the weak exact gates (issue 47): dyadics 1 - 2^-e, 2 <= e <= 10, varying, never 1
                    e = -np.log2(1 - gamma)
                    self.assertTrue(np.all((e == np.round(e)) & (e >= 2) & (e <= 10)), case)
                    self.assertGreater(len(set(gamma.tolist())), 1, case)
                elif meta["kind"] == "exact":
                    # ≠ 1 on the first tokens and at every chunk boundary of every even width (t a multiple of 2)
                    t = np.arange(meta["n"])
                    self.assertTrue(np.all(gamma[(t % 2 == 0) | (t < 3)] != 1), case)
                    self.assertTrue(meta["n"] < 3 or len(set(gamma.tolist())) > 1, case)
                    # dyadic squares (the proposal's a_t = √γ_t is exact): 1/4, 9/16, 49/64, and 1 amid them
                    self.assertTrue(set(gamma.tolist()) <= {0.25, 0.5625, 0.765625, 1.0}, case)
                    if meta["n"] >= 8:
                        self.assertIn(1.0, gamma.tolist()) if meta["n"] <= 16 else self.assertNotIn(1.0, gamma.tolist())


class GatedState(unittest.TestCase):
    """--gates --state: state_in/state_out with gates (the parts of fast/serial/gated.hpp), carry and split cases."""

    def test_right_serial_forms_compute_with_state(self):
        for name, op, more in [("hla2", "hla2", ["--normalized", "--eps", "1/4", "--ridge", "1/2"]), ("linear",
                                                                                                      "linear", []),
                               ("ahla", "ahla", ["--normalized", "--eps", "1/4"])]:
            with self.subTest(name=name):
                code, report, out = verify_gated(name, "--op", op, "--state", *more)
                self.assertEqual((code, report["verdict"]), (0, "computes"), out)
                kinds = {c["kind"] for c in report["carry"]}
                self.assertTrue({"carry", "whole", "split-a", "split-b"} <= kinds, kinds)
                self.assertTrue(all(c["result"] == "ok" for c in report["carry"]), report["carry"])
                self.assertFalse([m for m in report["matches"] if m["key"].startswith("mistake:")], out)

    def test_carry_cases_hold_gates(self):
        with tempfile.TemporaryDirectory() as tmp:
            keep = os.path.join(tmp, "seen")
            code, _, out = run(["--gates", "--state", "--op", "hla2", "--exec", f"sh -c 'cp -r \"$0\" {keep}; exit 1'",
                                *QUICK])
            self.assertEqual(code, 2, out)
            carried = 0
            for case in sorted(os.listdir(keep)):
                meta = json.load(open(os.path.join(keep, case, "case.json")))
                gamma = np.load(os.path.join(keep, case, "gamma.npy"))
                self.assertEqual(gamma.shape, (meta["n"],))
                if meta["state_in"]:
                    carried += 1
                    self.assertEqual(sorted(meta["state_in"]), ["C", "G", "S", "h", "m"])
                    self.assertNotEqual(gamma[0], 1, case)  # the state handed in is decayed by the first gate
            self.assertGreater(carried, 0)

    def test_state_mistakes_differ(self):
        # the state handed in enters without the first token's gate: right from the zero state, wrong on a carry
        for name, op in [("hla2-undecayed-carry", "hla2"), ("linear-undecayed-carry", "linear")]:
            with self.subTest(name=name):
                code, report, out = verify_gated(name, "--op", op, "--state")
                self.assertEqual((code, report["verdict"]), (1, "differs"), out)
                self.assertEqual(report["exact"]["failed"], 0, out)
                self.assertTrue(any(c["result"] == "differs" and c["kind"] == "carry" for c in report["carry"]),
                                report["carry"])
                self.assertIn("mistake:state-in-undecayed", [m["key"] for m in report["matches"]], out)
        # without --state the same implementation computes the operator
        code, report, out = verify_gated("linear-undecayed-carry", "--op", "linear")
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)

    def test_module_state(self):
        import hla_harness
        seen = []

        def fn(q, k, v, gamma, normalized, eps, ridge, initial_state=None):
            seen.append(initial_state is not None)
            return gated_impls.with_state("hla2")(q, k, v, gamma, normalized, eps, ridge, initial_state=initial_state)

        r = hla_harness.verify(fn, "hla2", gates=True, state=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        self.assertTrue(any(seen) and not all(seen))
        r = hla_harness.verify(gated_impls.with_state("hla2-undecayed-carry"), "hla2", gates=True, state=True,
                               max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "differs", r["summary"])


# The gated catalogue: each wrong implementation, the key (up to its widths) the diagnosis must name.
NAMED = [("hla2-algorithm1-rule", "hla2", "gated:hla2/serial/algorithm1-rule"),
         ("hla2-proposal", "hla2", "gated:hla2/serial/proposal"),
         ("hla2-gates-shifted", "hla2", "mistake:gates-late"),
         ("linear-gates-shifted", "linear", "mistake:gates-late"),
         ("linear-gates-early", "linear", "mistake:gates-early"),
         ("linear-chunked-carry-product", "linear", "mistake:carry-without-first-gate@w=16"),
         ("hla2-chunked-carry-product", "hla2", "mistake:carry-without-first-gate@w=16"),
         ("linear-chunked-carry-extra-gate", "linear", "mistake:carry-extra-gate@w=16"),
         ("hla2-chunked-carry-extra-gate", "hla2", "mistake:carry-extra-gate@w=16"),
         ("linear-chunked-carry-first-gate-power", "linear", "mistake:carry-first-gate-power@w=16"),
         ("hla2-chunked-carry-first-gate-power", "hla2", "mistake:carry-first-gate-power@w=16")]


def named(report, key):
    """Does the report's diagnosis name key (a chunk key: at that width among others)?"""
    base, _, width = key.partition("@w=")
    for m in report["matches"]:
        if width:
            if m["key"].startswith(base + "@w=") and int(width) in m.get("widths", []):
                return True
        elif m["key"] == key:
            return True
    return False


class GatedDiagnosis(unittest.TestCase):
    def test_cli_names_the_mistake(self):
        for name, op, key in NAMED:
            with self.subTest(name=name):
                code, report, out = verify_gated(name, "--op", op)
                self.assertEqual((code, report["verdict"]), (1, "differs"), out)
                self.assertTrue(named(report, key), (key, [m["key"] for m in report["matches"]], out))
                self.assertIn(key.split("@")[0], out)  # the summary names it too

    def test_long_and_wide_cases_are_diagnosed_in_float64(self):
        # The cases too long or wide for rationals (n = 150 and 300 at d = 4, every case at d = 16): the wrong-gate
        # mistakes are evaluated there in float64, so a carry bug at width 64 (shows only past token 64) and a
        # gate shift under --fixed-d are named (unnamed before: the audit of 2026-12-04).
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-64-carry-extra-gate", "--op",
                                 "linear"])
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertTrue(named(report, "mistake:carry-extra-gate@w=64"), [m["key"] for m in report["matches"]])
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} hla2-gates-shifted", "--op", "hla2",
                                 "--fixed-d", "--d", "16", "--dv", "16", "--n-multiple", "64", "--max-n", "128"])
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertTrue(named(report, "mistake:gates-late"), [m["key"] for m in report["matches"]])
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} hla2", "--op", "hla2", "--fixed-d", "--d", "16",
                                 "--dv", "16", "--n-multiple", "64", "--max-n", "128"])
        self.assertEqual(report["verdict"], "computes", out)
        self.assertFalse([m for m in report["matches"] if m["key"].startswith(("mistake:", "gated:"))], out)

    def test_right_implementations_match_nothing_wrong(self):
        code, report, out = verify_gated("hla2-chunked", "--op", "hla2")
        self.assertEqual(report["verdict"], "computes", out)
        self.assertFalse([m for m in report["matches"] if m["key"].startswith(("mistake:", "gated:"))], out)
        # the stable formulations in float32 at strong gates, where P_t underflows: nothing to name
        for name, op in [("linear", "linear"), ("linear-chunked", "linear"), ("hla2-chunked", "hla2")]:
            with self.subTest(name=name):
                code, report, out = run(["--gates", "--exec", f"{PY} {GATED} {name}", "--op", op, "--dtype",
                                         "float32", "--gate-range", "0.5,1"])
                self.assertEqual(report["verdict"], "computes", out)
                self.assertFalse([m for m in report["matches"] if m["key"].startswith("formulation:")], out)

    def test_naive_cumulative_products_are_named(self):
        # Decays as quotients P_t / P_j of cumulative products over the call: exact in exact arithmetic, so no exact
        # candidate can name them; their signature is outputs right up to the token where P underflows and wrong from
        # there (float32: log mass ~87.3, on the long exact cases too; float64: ~708, on the random cases only).
        for dtype, gate_range in [("float32", "0.8,1"), ("float32", "0.5,1"), ("float64", "0.1,0.3")]:
            with self.subTest(dtype=dtype, gate_range=gate_range):
                code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-naive-cumprod", "--op", "linear",
                                         "--dtype", dtype, "--gate-range", gate_range])
                self.assertEqual((code, report["verdict"]), (1, "differs"), out)
                self.assertTrue(named(report, "formulation:naive-cumprod"), [m["key"] for m in report["matches"]])
                self.assertIn(f"in {dtype}, leaves its normal range", out)
        # a mistake that is wrong before any underflow is not this formulation
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-64-carry-extra-gate", "--op",
                                 "linear", "--dtype", "float32", "--gate-range", "0.5,1"])
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertFalse(named(report, "formulation:naive-cumprod"), [m["key"] for m in report["matches"]])

    def test_fixed_gamma_mistakes_named_with_gates(self):
        # Issue 47: the fixed-gamma catalogue's mistakes that do not depend on how the decay is written were unnamed
        # under --gates ("differs", nothing matched): each planted in the gated serial hla2, each named.
        import hla_harness
        for mistake, key in [("read-before-update", "mistake:output-before-update"), ("swap-qk", "mistake:swap-qk"),
                             ("normalization-flipped", "mistake:normalization-flipped"),
                             ("ridge-missing", "mistake:ridge-missing"),
                             ("ridge-numerator-only", "mistake:ridge-numerator-only"),
                             ("ridge-undecayed", "mistake:ridge-undecayed")]:
            with self.subTest(mistake=mistake):
                with np.errstate(all="ignore"):  # a flipped normalization divides 0 by 0 on the unnormalized cases
                    r = hla_harness.verify(gated_impls.IMPLS["hla2-" + mistake], "hla2", gates=True, max_n=16, d=3,
                                           dv=2, normalized=True, eps=0.25, ridge=0.5)
                self.assertEqual(r["verdict"], "differs", r["summary"])
                self.assertEqual([m["key"] for m in r["matches"] if m["key"].startswith("mistake:")], [key],
                                 r["summary"])
                self.assertIn(key, r["summary"])

    def test_module_names_the_mistake(self):
        import hla_harness
        for name, op, key in [NAMED[0], NAMED[1], NAMED[4], NAMED[6], NAMED[10]]:
            with self.subTest(name=name):
                r = hla_harness.verify(gated_impls.IMPLS[name], op, gates=True, max_n=64, d=4, dv=3)
                self.assertEqual(r["verdict"], "differs", r["summary"])
                self.assertTrue(named(r, key), [m["key"] for m in r["matches"]])


TORCH_GATED = os.path.join(ROOT, "tests", "verify_impls", "torch_gated_chunked.py")


class ChunkedCarries(unittest.TestCase):
    """Issue 47: a researcher's chunked gated hla2 in PyTorch (float32, w = 16, tests/verify_impls/
    torch_gated_chunked.py) with carry bugs that the strong exact gates (1/4 .. 49/64, ~1e-5 across 16 tokens) let
    pass as rounding: the weak exact gates (1 - 2^-k) make every carry O(1) of the output."""

    F32 = ["--op", "hla2", "--dtype", "float32", "--normalized", "--eps", "1e-3"]

    def verify(self, name, *args):
        return run(["--gates", "--exec", f"{PY} {TORCH_GATED} {name}", *QUICK, *self.F32, *args])

    def assert_named(self, name, key, *args):
        code, report, out = self.verify(name, *args)
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertIsNone(report["precision_diagnosis"], out)  # not taken for a lower precision
        self.assertTrue(named(report, key), (key, [m["key"] for m in report["matches"]], out))
        return report, out

    def test_right_one_computes(self):
        code, report, out = self.verify("right")
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        self.assertFalse([m for m in report["matches"] if m["key"].startswith(("mistake:", "gated:", "convention:"))],
                         out)

    def test_wrong_carries_differ_with_an_o1_counterexample(self):
        for name, key in [("tail-carry", "mistake:tail-carry-decayed-twice@w=16"),
                          ("carry-twice", "mistake:carry-decayed-twice@w=16"),
                          ("carry-kept", "mistake:carry-not-decayed@w=16")]:
            with self.subTest(name=name):
                report, out = self.assert_named(name, key)
                c = report["counterexample"]
                expected, got = np.array(c["expected"], float), np.array(c["got"], float)
                # an O(1) difference, not one that looks like rounding (was 8e-5 relative for carry-twice)
                self.assertGreater(np.abs(got - expected).max(), 0.05 * np.abs(expected).max(), out)
                # the chunk hint names the widths that reproduce the evidence: 16 (was 32 or 64, the largest power
                # of two dividing the first wrong row)
                self.assertEqual(c["chunk_hint"], {"widths": [16], "source": "diagnosis"}, out)
                self.assertIn("if chunks are 16 wide", out)

    def test_conventions_are_named(self):
        # ε after the division under --gates (named without gates only, before), fla's signed clamp, and fla's
        # default scale q * d^-1/2: outputs 1/d x SPEC's
        self.assert_named("eps-after", "mistake:eps-after-division")
        self.assert_named("signed-clamp", "convention:signed-clamp")
        report, out = self.assert_named("scale", "convention:output-factor")
        factor = [m for m in report["matches"] if m["key"] == "convention:output-factor"][0]
        self.assertEqual(factor["factor"], "d^-1", out)
        self.assertIn("queries scaled by d^-1/2", out)


class GatedGrad(unittest.TestCase):
    """--gates --grad: dq, dk, dv as without gates, dgamma (∂L/∂γ) judged when returned; a torch implementation
    differentiated by autograd (tests/verify_impls/gated_grad_impls.py)."""

    def grad(self, name, *args):
        return run(["--gates", "--grad", "--exec", f"{PY} {GATED_GRAD} {name}", *QUICK, *args])

    def test_autograd_computes_with_dgamma(self):
        for name, op, more in [("hla2", "hla2", ["--normalized", "--eps", "1/4", "--ridge", "1/2"]), ("linear",
                                                                                                      "linear", []),
                               ("ahla", "ahla", [])]:
            with self.subTest(name=name):
                code, report, out = self.grad(name, "--op", op, *more)
                self.assertEqual((code, report["verdict"]), (0, "computes"), out)
                self.assertEqual(report["outputs"].get("dgamma"), "computes", report["outputs"])
        # dgamma is optional: not written, not judged
        code, report, out = self.grad("hla2-no-dgamma", "--op", "hla2")
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        self.assertNotIn("dgamma", report["outputs"])

    def test_wrong_dgamma_differs(self):
        # ∂L/∂log γ returned as dgamma: the forward and dq, dk, dv right, dgamma wrong on an exact case
        for name, op in [("hla2-dloggamma", "hla2"), ("linear-dloggamma", "linear")]:
            with self.subTest(name=name):
                code, report, out = self.grad(name, "--op", op)
                self.assertEqual((code, report["verdict"]), (1, "differs"), out)
                self.assertEqual(report["outputs"]["dgamma"], "differs", report["outputs"])
                for part in ("o", "dq", "dk", "dv"):
                    self.assertEqual(report["outputs"][part], "computes", report["outputs"])
                self.assertEqual(report["counterexample"]["gradient"]["output"], "dgamma", out)

    def test_fp32_normalized_long_cases(self):
        # fp32, normalized, the random cases up to n = 512 (not QUICK). Each gradient entry has a finite bound (the
        # abs operator at the case's own gates; queries and keys non-negative for normalized gradients), and exact
        # gradients in float32's subnormal range are judged with the format's underflow floor: right
        # implementations compute, and a dq off by 2x on the long random cases only is not accepted (all three
        # were wrong: the audit of 2026-12-04).
        fp32 = ["--dtype", "float32", "--normalized", "--eps", "1e-3"]
        for name in ("linear", "hla2"):
            with self.subTest(name=name):
                code, report, out = run(["--gates", "--grad", "--exec", f"{PY} {GATED_GRAD} {name}", "--op", name,
                                         *fp32])
                self.assertEqual((code, report["verdict"]), (0, "computes"), out)
                self.assertGreater(report["bounds"]["entries"], 0, report["bounds"])
                self.assertEqual(report["bounds"]["unbounded"], 0, report["bounds"])  # every entry was judged
                self.assertNotIn("unchecked", report["summary"])
        code, report, out = run(["--gates", "--grad", "--exec", f"{PY} {GATED_GRAD} hla2-dq-double-long", "--op",
                                 "hla2", *fp32])
        # 100% off normwise: beyond any format's rounding even where the bf16-level bound is vacuous (kNoDigit)
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertEqual(report["outputs"]["dq"], "differs", report["outputs"])
        for part in ("o", "dk", "dv"):
            self.assertEqual(report["outputs"][part], "computes", report["outputs"])

    def test_unbounded_entries_are_reported(self):
        # At bf16's u a gradient's depth makes γ_h = ∞ for most entries: no rounding argument can judge them, so the
        # report counts them and the summary says so, instead of passing them silently (they still count as within
        # the bound: a correct kernel may err that much).
        code, report, out = self.grad("hla2", "--op", "hla2", "--dtype", "float32", "--precision", "bf16")
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        self.assertGreater(report["bounds"]["unbounded"], 0, report["bounds"])
        self.assertLessEqual(report["bounds"]["unbounded"], report["bounds"]["entries"], report["bounds"])
        self.assertIn(f"unchecked: {report['bounds']['unbounded']} of the {report['bounds']['entries']}",
                      report["summary"])

    def test_state(self):
        # from a state handed in: dstate_in with gates, from a torch loop over tokens
        more = ["--op", "hla2", "--state", "--normalized", "--eps", "1/4", "--ridge", "1/2"]
        code, report, out = self.grad("hla2-serial", *more)
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        for part in ("dgamma", "dstate_in.S", "dstate_in.G"):
            self.assertEqual(report["outputs"].get(part), "computes", report["outputs"])
        code, report, out = self.grad("hla2-serial-state-detached", *more)
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)
        self.assertEqual(report["outputs"]["dstate_in.C"], "differs", report["outputs"])
        self.assertEqual(report["outputs"]["dgamma"], "computes", report["outputs"])

    def test_module(self):
        import gated_grad_impls
        import hla_harness
        r = hla_harness.verify(gated_grad_impls.IMPLS["hla2"], "hla2", gates=True, grad=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        self.assertEqual(r["outputs"]["dgamma"], "computes")
        r = hla_harness.verify(gated_grad_impls.IMPLS["hla2-dloggamma"], "hla2", gates=True, grad=True, max_n=33, d=3,
                               dv=2)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        self.assertEqual(r["outputs"]["dgamma"], "differs")


class GatedPrecision(unittest.TestCase):
    """--gates with a narrow --precision: the bounds calibrated on the emulated gated kernels (precision.hpp)."""

    def test_bf16_kernel(self):
        f32 = ["--op", "hla2", "--dtype", "float32"]
        code, report, out = verify_gated("hla2-bf16", *f32, "--precision", "bf16")
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        self.assertTrue(any(r["bound"] == "calibrated" for r in report["random"]), report["random"])
        # declared fp32, the same kernel is a lower precision, and the format that explains it is named
        code, report, out = verify_gated("hla2-bf16", *f32)
        self.assertEqual((code, report["verdict"]), (1, "lower-precision"), out)
        self.assertIn("bf16", report["precision_diagnosis"]["format"], out)
        # every case was answered: the base group computes within the lower precision (was "unknown (cases
        # unanswered)", issue 47)
        self.assertNotIn("unknown (cases unanswered)", out)
        self.assertIn("without ridge: yes, within the rounding of a lower precision", out)
        # a wrong rule stays wrong in the format
        code, report, out = verify_gated("hla2-algorithm1-rule-bf16", *f32, "--precision", "bf16")
        self.assertEqual((code, report["verdict"]), (1, "differs"), out)

    def test_bf16_chunked_kernel_rounding_its_gate_weighted_operands(self):
        # A GLA-style chunked bf16 kernel (float32 state): its gate products are not bf16 numbers, where the emulated
        # kernel's are exact on the exact cases; the exact carry cases' state bound is never below the proven one.
        # Was lower-precision ("a bf16 state") with --state (audit, 2026-12-04).
        f32 = ["--op", "linear", "--dtype", "float32"]
        for more in ([], ["--state"]):
            with self.subTest(more=more):
                code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-bf16-operands", *f32,
                                         "--precision", "bf16", *more])
                self.assertEqual((code, report["verdict"]), (0, "computes"), out)
        # declared fp32 it is still a lower precision, and bf16 is named
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-bf16-operands", *f32])
        self.assertEqual((code, report["verdict"]), (1, "lower-precision"), out)
        self.assertIn("bf16", report["precision_diagnosis"]["format"], out)

    def test_bf16_cumulative_log_gates_are_not_bf16_products(self):
        # Issue 47, point 9, decided: --precision bf16 means bf16 operands with fp32 accumulation; log-gates cumulated
        # in bf16 are an accumulation in the format, so such a kernel is a lower precision than declared (not
        # another function: within every format bound), while the same kernel cumulating in fp32 computes.
        f32 = ["--op", "linear", "--dtype", "float32", "--precision", "bf16"]
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-bf16-log-gates", *f32, *QUICK])
        self.assertEqual((code, report["verdict"]), (1, "lower-precision"), out)
        self.assertEqual(report["exact"]["failed"], 0, out)
        code, report, out = run(["--gates", "--exec", f"{PY} {GATED} linear-chunked-bf16-operands", *f32, *QUICK])
        self.assertEqual((code, report["verdict"]), (0, "computes"), out)


class GatedRefusals(unittest.TestCase):
    def assert_refused(self, args, words):
        code, _, out = run(args)
        self.assertEqual(code, 2, out)
        self.assertIn(words, out)

    def test_refusals(self):
        ex = ["--exec", "true", *QUICK]
        self.assert_refused(["--gates", "--gamma", "0.9", *ex], "--gamma means nothing")
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
            self.assertIn("gated:hla2/serial/algorithm1-rule", [m["key"] for m in report["matches"]],
                          out)  # named here too
            code, report, out = run(files(gated_impls.IMPLS["hla2-gates-shifted"](q, k, v, gamma, False, 0, 0)))
            self.assertEqual((code, report["verdict"]), (1, "differs"), out)
            self.assertIn("mistake:gates-late", [m["key"] for m in report["matches"]], out)
            right = gated_impls.hla2(q, k, v, gamma, False, 0, 0)
            for bad, words in ((gamma[:-1], "gates for"), (np.where(np.arange(n) == 5, 1.5, gamma), "outside (0, 1]"),
                               (np.where(np.arange(n) == 5, np.nan, gamma), "outside (0, 1]"),
                               (gamma.reshape(n, 1), "shape (n,)"),
                               (gamma.astype(np.float32), "gamma is float32")):  # one dtype for every array
                code, _, out = run(files(right, bad))
                self.assertEqual(code, 2, out)
                self.assertIn(words, out)
            code, _, out = run(files(right.astype(np.float32)))  # o float32 among float64 inputs
            self.assertEqual(code, 2, out)
            self.assertIn("share one dtype", out)


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
        for bad in (dict(gamma=0.9), dict(gate_range=(0.9, 0.5)), dict(gate_range=(0.0, 1.0))):
            with self.subTest(**bad), self.assertRaises(ValueError):
                hla_harness.verify(fn, "hla2", gates=True, **bad)


if __name__ == "__main__":
    unittest.main()
