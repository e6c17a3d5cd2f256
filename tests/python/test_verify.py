"""`hla verify` and hla_harness.verify on implementations that are right, wrong in known ways, of lower
precision, or that break the protocol (tests/verify_impls/impls.py), and on the PyTorch examples.

Run by scripts/test.sh with HLA_BUILD (the build folder) and PYTHONPATH=<build>/python.
"""
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HLA_BUILD", os.path.join(ROOT, "build"))
HLA = os.path.join(BUILD, "bin", "hla")
PY = "/usr/bin/python3"
IMPLS = os.path.join(ROOT, "tests", "verify_impls", "impls.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "verify_impls"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import impls  # noqa: E402

# Small batteries keep the suite fast; the default reach (max-n 512, d = dv = 16) is timed in README.
QUICK = ["--max-n", "64", "--d", "4", "--dv", "3", "--quiet"]


def quick_except(args):
    """QUICK without the options that args give themselves."""
    out = []
    for i in range(0, len(QUICK) - 1, 2):
        if QUICK[i] not in args:
            out += QUICK[i:i + 2]
    return out + ["--quiet"]


def verify(name, *args, timeout=600):
    """Runs `hla verify --exec impls.py NAME` and returns (exit code, report dict, stdout)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [HLA, "verify", "--exec", f"{PY} {IMPLS} {name}", "--json", out, *quick_except(args), *args]
        return run_with_report(cmd, out, timeout)


def run_with_report(cmd, out, timeout):
    """Runs an `hla verify ... --json OUT` command: (exit code, the report or None, stdout + stderr)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    report = None
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    return p.returncode, report, p.stdout + p.stderr


def keys(report):
    return [m["key"] for m in report["matches"]]


class ExecVerdicts(unittest.TestCase):
    def test_right_hla2_computes_with_every_option(self):
        code, r, out = verify("hla2", "--op", "hla2", "--gamma", "0.99", "--normalized", "--eps", "1e-6",
                              "--ridge", "0.25")
        self.assertEqual(code, 0, out)
        self.assertEqual(r["verdict"], "computes")
        self.assertEqual(r["exact"]["failed"], 0)
        self.assertGreater(r["exact"]["cases"], 40)
        self.assertIn("hla2/reference/spec", keys(r))
        self.assertIn("hla2/serial/corrected", keys(r))
        self.assertNotIn("hla2/serial/paper", keys(r))
        self.assertTrue(all(x["worst_ratio"] <= 1 for x in r["random"]))

    def test_right_hla2_in_float32(self):
        code, r, out = verify("hla2", "--op", "hla2", "--gamma", "0.9", "--dtype", "float32")
        self.assertEqual(code, 0, out)
        self.assertEqual(r["dtype"], "float32")

    def test_paper_decay_rule_differs_and_is_named(self):
        code, r, out = verify("hla2-paper-decay", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "differs")
        self.assertIn("hla2/serial/paper", keys(r))
        paper = next(m for m in r["matches"] if m["key"] == "hla2/serial/paper")
        self.assertEqual(paper["claim"], "hla2.serial.masked-decay")
        self.assertEqual(r["localization"]["base"], "computes")
        self.assertEqual(r["localization"]["decay"], "differs")
        c = r["counterexample"]
        self.assertLessEqual(c["n"], 3)
        self.assertEqual(c["d"], 1)
        self.assertEqual(c["dv"], 1)
        self.assertNotEqual(c["expected"], c["got"])
        self.assertIn("counterexample", out)

    def test_float32_arithmetic_behind_float64_is_lower_precision(self):
        code, r, out = verify("hla2-float32-inside", "--op", "hla2", "--gamma", "0.99")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "lower-precision")
        self.assertEqual(r["exact"]["failed"], 0)
        self.assertGreater(max(x["worst_ratio"] for x in r["random"]), 1)

    def test_chunk_form_without_carry(self):
        code, r, out = verify("hla2-chunk-reset-64", "--op", "hla2")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "differs")
        self.assertIn("mistake:chunk-reset@w=64", keys(r))

    def test_eps_missing(self):
        code, r, out = verify("hla2-eps-missing", "--op", "hla2", "--normalized", "--eps", "0.5")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertIn("mistake:eps-missing", keys(r))
        self.assertIn("NaN", out)  # 0/0 where the operator's ε keeps the denominator positive
        self.assertEqual(r["localization"]["base"], "computes")
        self.assertEqual(r["localization"]["normalized"], "differs")

    def test_nan_is_a_wrong_value_not_a_protocol_error(self):
        code, r, out = verify("hla2:nan", "--op", "hla2")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "differs")
        self.assertEqual(r["findings"], [])
        self.assertEqual(r["counterexample"]["first_difference"]["got"], "NaN")
        self.assertIn("NaN", out)

    def test_output_before_update(self):
        code, r, out = verify("hla2-output-first", "--op", "hla2", "--gamma", "0.5")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertIn("mistake:output-before-update", keys(r))

    def test_other_operator_is_recognized(self):
        code, r, out = verify("ahla", "--op", "hla2")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertIn("operator:ahla", keys(r))

    def test_ahla_and_linear_compute(self):
        for name, extra in (("ahla", ["--gamma", "0.9", "--normalized", "--eps", "0.001"]),
                            ("linear", ["--gamma", "0.5", "--normalized", "--eps", "0.25"])):
            code, r, out = verify(name, "--op", name, *extra)
            self.assertEqual(code, 0, out)

    def test_shape_constraints_of_a_blocked_kernel(self):
        # Without the constraints a kernel for one head size and whole blocks fails the protocol ...
        code, r, out = verify("hla2:block16-d8", "--op", "hla2", "--gamma", "0.5")
        self.assertEqual(code, 2, out)
        self.assertIn("need n % 16 == 0", json.dumps(r["findings"]))
        # ... with them every case fits it, exact cases and carry halves included.
        shape = ["--fixed-d", "--d", "8", "--dv", "8", "--n-multiple", "16"]
        code, r, out = verify("hla2:block16-d8", "--op", "hla2", "--gamma", "0.5", "--state", *shape)
        self.assertEqual(code, 0, out)
        self.assertEqual(r["constraints"], {"fixed_d": True, "n_multiple": 16})
        self.assertGreater(r["exact"]["cases"], 0)
        # A wrong kernel under the same constraints: the counterexample keeps them, the diagnosis still names it.
        code, r, out = verify("hla2-paper-decay:block16-d8", "--op", "hla2", "--gamma", "0.5", *shape)
        self.assertEqual(code, 1, out)
        c = r["counterexample"]
        self.assertEqual((c["n"], c["d"], c["dv"]), (16, 8, 8))
        self.assertIn("hla2/serial/paper", keys(r))

    def test_state_carry_right_and_broken(self):
        code, r, out = verify("hla2", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(code, 0, out)
        self.assertGreater(len(r["carry"]), 4)
        self.assertTrue(all(x["result"] == "ok" for x in r["carry"]))
        self.assertTrue(any(x["kind"] == "split-b" for x in r["carry"]))
        code, r, out = verify("hla2-broken-state", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "differs")
        self.assertTrue(any("'G'" in x["detail"] for x in r["carry"]), out)
        # Every output is right, so nothing is matched against the outputs; the counterexample names the state
        # entry and carries the state handed in, so it can be re-run by hand.
        self.assertEqual(r["matches"], [])
        self.assertIn("state-carry", r["diagnosis_note"])
        c = r["counterexample"]
        self.assertEqual(c["first_difference"]["state_part"], "G")
        self.assertTrue(c["state_in"] == "none" or set(c["state_in"]) == {"S", "C", "m", "G", "h"}, c["state_in"])

    def test_lower_precision_state_is_lower_precision_not_differs(self):
        # float32 arithmetic behind float64, state too: beyond the float64 bound on the random-input carry cases,
        # but within rounding of a lower precision there: not another function.
        code, r, out = verify("hla2-float32-inside", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "lower-precision", out)
        self.assertTrue(any(x["result"] == "over-bound" for x in r["carry"]), out)
        self.assertFalse(any(x["result"] == "differs" for x in r["carry"]), out)

    def test_declared_precisions(self):
        # A bf16 kernel (bf16 inputs and outputs, fp32 arithmetic) is lower precision as an fp32 kernel and
        # computes as a bf16 one; one that also accumulates in bf16 loses more than bf16 explains; a wrong
        # decay is still a different function, found on the exact cases.
        reach = ["--dtype", "float32", "--max-n", "512", "--d", "16", "--dv", "16"]
        code, r, out = verify("hla2-bf16-kernel", "--op", "hla2", *reach)
        self.assertEqual(r["verdict"], "lower-precision", out)
        for extra in ([], ["--gamma", "0.9", "--normalized", "--eps", "1e-3", "--state"]):
            code, r, out = verify("hla2-bf16-kernel", "--op", "hla2", "--precision", "bf16", *reach, *extra)
            self.assertEqual((code, r["verdict"]), (0, "computes"), out)
            self.assertEqual(r["precision"], "bf16")
            # errors are reported in bf16's roundoff: a few units, not tens of thousands of fp32's
            self.assertLess(max(x["error_in_u"] for x in r["random"]), 100, out)
        code, r, out = verify("hla2-bf16-accumulate", "--op", "hla2", "--precision", "bf16", *reach)
        self.assertEqual((code, r["verdict"]), (1, "lower-precision"), out)
        self.assertEqual(r["exact"]["failed"], 0, out)
        code, r, out = verify("hla2-paper-decay", "--op", "hla2", "--gamma", "0.9", "--precision", "bf16", *reach)
        self.assertEqual(r["verdict"], "differs", out)
        self.assertGreater(r["exact"]["failed"], 0, out)
        self.assertIn("hla2/serial/paper", keys(r))
        # a declared precision finer than the arrays is refused
        code, r, out = verify("hla2", "--op", "hla2", "--precision", "fp64", "--dtype", "float32")
        self.assertEqual(code, 2, out)
        code, r, out = verify("hla2", "--op", "hla2", "--precision", "fp8")
        self.assertEqual(code, 2, out)

    def test_fp16_kernel_in_both_directions(self):
        # fp16 through the CLI (issue 26: every precision both ways): a kernel whose inputs and outputs are rounded to
        # fp16's significand (fp32 arithmetic) computes when declared fp16, and is lower-precision declared fp32 (fp16
        # and TF32 share an 11-bit significand, and the emulation models significands only: either may be named).
        reach = ["--dtype", "float32", "--max-n", "512", "--d", "16", "--dv", "16"]
        code, r, out = verify("hla2-fp16-kernel-rounded", "--op", "hla2", "--precision", "fp16", *reach)
        self.assertEqual((code, r["verdict"]), (0, "computes"), out)
        self.assertEqual(r["precision"], "fp16")
        code, r, out = verify("hla2-fp16-kernel-rounded", "--op", "hla2", *reach)
        self.assertEqual((code, r["verdict"]), (1, "lower-precision"), out)

    def test_each_precision_through_the_module(self):
        # Every declared precision from Python: a kernel that computes in it (tensor-core formats: inputs and outputs
        # rounded to the format's significand, fp32 arithmetic; fp32: float32 arithmetic behind float64 arrays) is
        # judged by that precision's bound and computes, with its error reported in that format's roundoff.
        import hla_harness
        opts = dict(max_n=256, d=8, dv=8, gamma=0.9, normalized=True, eps=1e-3)
        cases = [("hla2", "float64", "fp64"), ("hla2-float32-inside", "float64", "fp32")] + \
            [(f"hla2-{fmt}-kernel-rounded", "float32", fmt) for fmt in ("tf32", "bf16", "fp16")]
        for name, dtype, precision in cases:
            with self.subTest(precision=precision):
                r = hla_harness.verify(impls.callable_for(name), "hla2", dtype=dtype, precision=precision, **opts)
                self.assertEqual(r["verdict"], "computes", r["summary"])
                self.assertEqual(r["precision"], precision)
                # in the format's own units: a bf16 error counted in fp32's u would be ~2^16 times larger
                self.assertLess(max(x["error_in_u"] for x in r["random"]), 1000, r["summary"])
        # the same bf16 kernel declared as fp32 loses more than fp32 explains
        r = hla_harness.verify(impls.callable_for("hla2-bf16-kernel-rounded"), "hla2", dtype="float32",
                               precision="fp32",
                               **dict(opts, max_n=512, d=16, dv=16, gamma=1.0, normalized=False, eps=0.0))
        self.assertEqual(r["verdict"], "lower-precision", r["summary"])

    def test_calibration(self):
        p = subprocess.run([HLA, "verify", "--op", "linear", "--calibrate", "--max-n", "512", "--quiet", "--json",
                            os.path.join(tempfile.gettempdir(), "hla-calibration.json")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(tempfile.gettempdir(), "hla-calibration.json")) as f:
            c = json.load(f)
        rows = {(x["precision"], x["kernel"].split()[0]): x for x in c["rows"]}
        for fmt in ("tf32", "bf16", "fp16"):
            self.assertEqual(rows[(fmt, "correct")]["verdict"], "computes")
            self.assertEqual(rows[(fmt, "accumulates")]["exact_failed"], 0)
        self.assertEqual(rows[("bf16", "accumulates")]["verdict"], "lower-precision", p.stdout)

    def test_state_parts_travel_in_their_declared_shapes(self):
        # dv = 1: C and G are still (d, 1) matrices, m and h vectors.
        code, r, out = verify("hla2:strict-state-shapes", "--op", "hla2", "--gamma", "0.5", "--state",
                              "--fixed-d", "--d", "3", "--dv", "1")
        self.assertEqual(code, 0, out)

    def test_fault_of_wide_heads_is_caught_exactly_and_shrunk(self):
        # Only the first 8 features are used: invisible at the small exact widths, caught by the exact cases
        # at the random cases' own width, and shrunk to one token.
        code, r, out = verify("hla2-first8-features", "--op", "hla2", "--d", "12", "--dv", "6")
        self.assertEqual(code, 1, out)
        self.assertEqual(r["verdict"], "differs")
        self.assertGreater(r["exact"]["failed"], 0, out)
        c = r["counterexample"]
        self.assertEqual(c["n"], 1, out)
        self.assertGreater(c["d"], 8)
        self.assertLessEqual(c["dv"], 6)


GRAD_IMPLS = os.path.join(ROOT, "tests", "verify_impls", "grad_impls.py")


def verify_grad(name, *args, timeout=900):
    """`hla verify --grad --exec grad_impls.py NAME` (PyTorch autograd implementations)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [HLA, "verify", "--grad", "--exec", f"{PY} {GRAD_IMPLS} {name}", "--json", out, *quick_except(args),
               *args]
        return run_with_report(cmd, out, timeout)


def gradient_keys(report, output):
    return [m["key"] for m in report["gradient_matches"].get(output, [])]


class ReducedPrecisionBothWays(unittest.TestCase):
    """Kernels whose matrix products round their operands to TF32 or bf16 (fp32 accumulation), in the u-form chunk
    algorithm: declared fp32 they are lower precision with their format named (not 'differs': the decayed exact
    cases are explained by the format; not 'computes': the random cases err far above what fp32 kernels err);
    declared in their own format they compute; the same kernel in fp32 computes, and a wrong one still differs."""

    def assert_named(self, r, out, fmt):
        self.assertEqual(r["verdict"], "lower-precision", out)
        self.assertEqual(r["precision_diagnosis"]["format"], fmt, out)

    def test_through_the_command_line(self):
        for name, gamma, fmt in [("hla2-chunked-tf32", "0.99", "tf32"), ("hla2-chunked-bf16", "0.9", "bf16"),
                                 ("hla2-chunked-tf32", "1", "tf32")]:
            with self.subTest(name=name, gamma=gamma):
                code, r, out = verify(name, "--op", "hla2", "--gamma", gamma, "--dtype", "float32")
                self.assertEqual(code, 1, out)
                self.assert_named(r, out, fmt)
                self.assertIn("consistent with", out)
                code, r, out = verify(name, "--op", "hla2", "--gamma", gamma, "--dtype", "float32", "--precision", fmt)
                self.assertEqual((code, r["verdict"]), (0, "computes"), out)
        code, r, out = verify("hla2-chunked", "--op", "hla2", "--gamma", "0.99", "--dtype", "float32")
        self.assertEqual((code, r["verdict"]), (0, "computes"), out)
        code, r, out = verify("hla2-chunked-mask-diagonal", "--op", "hla2", "--gamma", "0.99", "--dtype", "float32")
        self.assertEqual((code, r["verdict"]), (1, "differs"), out)

    def test_file_mode(self):
        # one long random case, where the proven bound alone (0.29 x of it) lets TF32 products pass as fp32
        rng = np.random.default_rng(5)
        q, k, v = (rng.standard_normal((512, 32)).astype(np.float32) for _ in range(3))
        with tempfile.TemporaryDirectory() as tmp:
            for name, x in (("q", q), ("k", k), ("v", v)):
                np.save(os.path.join(tmp, name + ".npy"), x)
            args = [HLA, "verify", "--op", "hla2", "--gamma", "0.99", "--dtype", "float32"] + \
                [f"--{n}={os.path.join(tmp, n + '.npy')}" for n in "qkv"] + ["--o", os.path.join(tmp, "o.npy")]
            report = os.path.join(tmp, "r.json")
            for name, precision, want in [("hla2-chunked", "fp32", "computes"), ("hla2-chunked-tf32", "fp32", "tf32"),
                                          ("hla2-chunked-tf32", "tf32", "computes"),
                                          ("hla2-chunked-bf16", "fp32", "bf16"),
                                          ("hla2-chunked-bf16", "bf16", "computes")]:
                with self.subTest(name=name, precision=precision):
                    np.save(os.path.join(tmp, "o.npy"), impls.IMPLS[name](q, k, v, 0.99, False, 0.0, 0.0)[0])
                    code, r, out = run_with_report(args + ["--precision", precision, "--json", report], report, 600)
                    if want == "computes":
                        self.assertEqual((code, r["verdict"]), (0, "computes"), out)
                    else:
                        self.assert_named(r, out, want)

    def test_through_the_module(self):
        import hla_harness
        opts = dict(max_n=64, d=4, dv=3, gamma=0.99, dtype="float32")
        r = hla_harness.verify(impls.callable_for("hla2-chunked-tf32"), "hla2", **opts)
        self.assert_named(r, r["summary"], "tf32")
        r = hla_harness.verify(impls.callable_for("hla2-chunked-tf32"), "hla2", precision="tf32", **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(impls.callable_for("hla2-chunked"), "hla2", **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(impls.callable_for("hla2-chunked-carry-exponent"), "hla2", **opts)
        self.assertEqual(r["verdict"], "differs", r["summary"])


class NamedChunkMistakes(unittest.TestCase):
    """The common mistakes of a chunked implementation, each caught and named."""

    def test_named(self):
        for name, extra, key in [
                ("hla2-chunked-mask-diagonal", [], "mistake:mask-diagonal-dropped"),
                ("hla2-chunked-carry-exponent", ["--gamma", "0.9"], "mistake:carry-decay-off-by-one@w=16"),
                ("hla2-eps-after", ["--normalized", "--eps", "0.5"], "mistake:eps-after-division")]:
            with self.subTest(name=name):
                code, r, out = verify(name, "--op", "hla2", *extra)
                self.assertEqual((code, r["verdict"]), (1, "differs"), out)
                self.assertIn(key, keys(r), out)
                # the counterexample line says every option, the unnormalized one too
                self.assertRegex(out, r"counterexample \(n=\d+, d=\d+, dv=\d+, gamma=[^,]+, "
                                      r"(unnormalized|normalized eps=[^,]+), ridge=")

    def test_counterexample_from_the_simplest_group_at_a_chunk_boundary(self):
        # the mask bug fails every group: the counterexample comes from gamma = 1, unnormalized
        code, r, out = verify("hla2-chunked-mask-diagonal", "--op", "hla2", "--gamma", "0.9", "--normalized", "--eps",
                              "0.5")
        self.assertEqual(r["counterexample"]["options"]["gamma"], "1", out)
        self.assertFalse(r["counterexample"]["options"]["normalized"], out)
        # the carry bug first shows on the first row of the second chunk, and small inputs are printed inline
        code, r, out = verify("hla2-chunked-carry-exponent", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual(r["counterexample"]["first_wrong_row"], 16, out)
        # the chunk hint: the widths at which the matched chunk mistake reproduces the evidence (issue 47)
        self.assertEqual(r["counterexample"]["chunk_hint"], {"widths": [16], "source": "diagnosis"}, out)
        self.assertIn("first wrong row 16\n    chunk hint: the matches above reproduce every exact case if chunks "
                      "are 16 wide", out)
        self.assertIn("    q = [[", out)

    def test_zero_padding_that_decays_the_state(self):
        code, r, out = verify("hla2-padded-state-16", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual((code, r["verdict"]), (1, "differs"), out)
        self.assertIn("mistake:padding-decays-state@w=16", keys(r), out)
        self.assertIn("first difference at state part", out)


class ConventionsInPublicCode(unittest.TestCase):
    """Conventions of public fla-style code named (docs/verify.md "Conventions in public code")."""

    def test_transposed_state(self):
        """A state kept as [V, K] where SPEC's is [K, V] (fla's state_v_first=True, fla/ops/common/chunk_h.py): named
        by value at d = dv, by shape otherwise; the same recurrence with SPEC's layout computes."""
        square = ["--state", "--fixed-d", "--d", "3", "--dv", "3", "--max-n", "24"]
        for op, name, more in (("hla2", "hla2-state-v-first", ["--gamma", "0.9"]),
                               ("linear", "linear-state-v-first", ["--gamma", "0.5", "--normalized", "--eps", "0.25"])):
            with self.subTest(op=op):
                code, r, out = verify(name, "--op", op, *more, *square)
                self.assertEqual((code, r["verdict"]), (1, "differs"), out)
                self.assertEqual(keys(r), ["convention:transposed-state"], out)
                code, r, out = verify(name.replace("-state-v-first", ""), "--op", op, *more, *square)
                self.assertEqual((code, r["verdict"]), (0, "computes"), out)
        code, r, out = verify("linear-state-v-first", "--op", "linear", "--state", "--max-n", "24")
        self.assertEqual((code, r["verdict"]), (2, "error"), out)
        self.assertIn("transposed (convention:transposed-state", out)

    @unittest.skipUnless(importlib.util.find_spec("torch"), "needs torch")
    def test_transposed_state_through_the_adapter(self):
        """layout= with state_v_first=True: an op whose state tuple keeps C and G as [V, K] computes; undeclared, it is
        refused by shape (d != dv) or named (d = dv)."""
        import fla_style_hla2
        import hla_harness

        def v_first(st):
            return None if st is None else tuple(x.transpose(-1, -2) if i in (1, 3) else x for i, x in enumerate(st))

        def op(q, k, v, initial_state=None, output_final_state=False, **kw):
            o, st = fla_style_hla2.hla2_bthk(q, k, v, initial_state=v_first(initial_state),
                                             output_final_state=output_final_state, **kw)
            return o, v_first(st)

        r = hla_harness.verify(op, "hla2", layout="bthk", state=True, state_v_first=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(op, "hla2", layout="bthk", state=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "error", r["summary"])
        self.assertIn("convention:transposed-state", r["summary"])
        r = hla_harness.verify(op, "hla2", layout="bthk", state=True, max_n=24, d=3, dv=3, fixed_d=True)
        self.assertEqual(keys(r), ["convention:transposed-state"], r["summary"])
        with self.assertRaises(ValueError):
            hla_harness.verify(op, "hla2", state_v_first=True)  # goes with layout=


class ProtocolHelpers(unittest.TestCase):
    """examples/protocol.py carries every mode's files: the user writes only the math."""

    def test_forward_grad_and_combine(self):
        users = os.path.join(ROOT, "tests", "verify_impls", "protocol_users.py")
        for kind, args in (("forward", ["--gamma", "0.9", "--state"]), ("grad", ["--grad", "--gamma", "0.9"]),
                           ("combine", ["--combine", "--gamma", "0.9"])):
            with self.subTest(kind=kind):
                with tempfile.TemporaryDirectory() as tmp:
                    out = os.path.join(tmp, "report.json")
                    cmd = [HLA, "verify", "--op", "hla2", "--exec", f"{PY} {users} {kind}", "--json", out, "--d", "3",
                           "--dv", "2", "--quiet", *args] + ([] if kind == "combine" else ["--max-n", "40"])
                    code, r, text = run_with_report(cmd, out, 600)
                    self.assertEqual((code, r["verdict"]), (0, "computes"), text)


class GradientVerdicts(unittest.TestCase):
    def test_right_backward_computes(self):
        code, r, out = verify_grad("hla2", "--op", "hla2", "--gamma", "0.9", "--normalized", "--eps", "0.25",
                                   "--ridge", "0.5")
        self.assertEqual(code, 0, out)
        self.assertEqual(r["outputs"], {"o": "computes", "dq": "computes", "dk": "computes", "dv": "computes"})
        code, r, out = verify_grad("ahla", "--op", "ahla", "--gamma", "0.9", "--normalized", "--eps", "0.25")
        self.assertEqual(code, 0, out)

    # Each wrong backward is a test of its own, so that the parallel suite (scripts/test.sh) can spread them.
    WRONG_BACKWARDS = {
        "paper_decay_rule": ("hla2:paper-backward", ["--op", "hla2", "--gamma", "0.9"], ("dq", "dk", "dv"),
                             "backward:paper-decay-rule"),
        "normalizer_detached": ("hla2:detach-den", ["--op", "hla2", "--normalized", "--eps", "0.25"], ("dq", "dk"),
                                "backward:normalizer-detached"),
        "swap_dq_dk": ("hla2:swap-dq-dk", ["--op", "hla2"], ("dq", "dk"), "backward:swap-dq-dk"),
        "unmasked": ("hla2:unmasked-backward", ["--op", "hla2"], ("dq", "dk", "dv"), "backward:unmasked"),
        "no_decay": ("linear:no-decay-backward", ["--op", "linear", "--gamma", "0.9"], ("dq", "dk", "dv"),
                     "backward:no-decay"),
        "no_carry": ("hla2:no-carry-backward@16", ["--op", "hla2"], ("dq", "dk", "dv"), "backward:no-carry@w=16"),
    }

    def check_wrong_backward_is_named_per_output(self, which):
        name, args, differ, key = self.WRONG_BACKWARDS[which]
        code, r, out = verify_grad(name, *args)
        self.assertEqual((code, r["verdict"]), (1, "differs"), out)
        self.assertIn(", with gradients", out.splitlines()[0])
        self.assertEqual(r["outputs"]["o"], "computes", out)
        # forward and backward localized apart: the forward's groups all compute
        self.assertEqual(set(r["localization"].values()), {"computes"}, out)
        self.assertIn("differs", r["gradient_localization"].values(), out)
        for o in ("dq", "dk", "dv"):
            self.assertEqual(r["outputs"][o], "differs" if o in differ else "computes", (o, out))
        for o in differ:
            self.assertIn(key, gradient_keys(r, o), out)
        c = r["counterexample"]
        self.assertIn(c["gradient"]["output"], differ)
        self.assertIn("do", c)

    def test_wrong_backward_paper_decay_rule(self):
        self.check_wrong_backward_is_named_per_output("paper_decay_rule")

    def test_wrong_backward_normalizer_detached(self):
        self.check_wrong_backward_is_named_per_output("normalizer_detached")

    def test_wrong_backward_swap_dq_dk(self):
        self.check_wrong_backward_is_named_per_output("swap_dq_dk")

    def test_wrong_backward_unmasked(self):
        self.check_wrong_backward_is_named_per_output("unmasked")

    def test_wrong_backward_no_decay(self):
        self.check_wrong_backward_is_named_per_output("no_decay")

    def test_wrong_backward_no_carry(self):
        self.check_wrong_backward_is_named_per_output("no_carry")

    def test_wrong_backward_every_case_has_a_test(self):
        tested = {m[len("test_wrong_backward_"):] for m in dir(self) if m.startswith("test_wrong_backward_")}
        self.assertEqual(set(self.WRONG_BACKWARDS), tested - {"every_case_has_a_test"})

    def test_carry_detached_backward_is_named_per_output(self):
        # a chunked backward that carries the state forward but detaches it: named per output (dk is also the
        # gradient of a forward that restarts every w tokens)
        code, r, out = verify_grad("hla2:carry-detached-backward@16", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual(r["outputs"], {"o": "computes", "dq": "differs", "dk": "differs", "dv": "differs"}, out)
        for o in ("dq", "dk", "dv"):
            self.assertIn("backward:carry-detached@w=16", gradient_keys(r, o), out)

    def test_late_dv_is_named_per_output(self):
        code, r, out = verify_grad("ahla:dv-late", "--op", "ahla")
        self.assertEqual(r["outputs"], {"o": "computes", "dq": "computes", "dk": "computes", "dv": "differs"}, out)

    def test_lower_precision_and_protocol(self):
        code, r, out = verify_grad("hla2:float32", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual((code, r["verdict"]), (1, "lower-precision"), out)
        code, r, out = verify_grad("hla2:missing-dk", "--op", "hla2")
        self.assertEqual((code, r["verdict"]), (2, "error"), out)
        self.assertIn("dk.npy", json.dumps(r["findings"]))
        code, r, out = verify_grad("hla2", "--op", "hla3")
        self.assertEqual(code, 2, out)

    def test_backward_from_a_carried_state(self):
        code, r, out = verify_grad("hla2-serial", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(code, 0, out)
        self.assertEqual(r["outputs"]["dstate_in.S"], "computes", out)
        code, r, out = verify_grad("hla2-serial:dstate-wrong", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertEqual(r["outputs"]["dstate_in.S"], "differs", out)
        self.assertEqual(r["outputs"]["dq"], "computes", out)
        self.assertEqual(r["counterexample"]["gradient"]["output"], "dstate_in.S")
        # dstate_in is optional part by part: unwritten parts are not judged, written ones are
        code, r, out = verify_grad("hla2-serial:dstate-partial", "--op", "hla2", "--gamma", "0.9", "--state")
        self.assertEqual(code, 0, out)
        self.assertNotIn("dstate_in.m", r["outputs"], out)
        self.assertEqual(r["outputs"]["dstate_in.S"], "computes", out)
        code, r, out = verify_grad("hla2-serial:grad-ignores-state", "--op", "hla2", "--state")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertEqual(r["outputs"]["o"], "computes", out)

    def test_module(self):
        sys.path.insert(0, os.path.dirname(GRAD_IMPLS))
        import grad_impls
        import hla_harness
        opts = dict(max_n=64, d=4, dv=3, grad=True)
        r = hla_harness.verify(grad_impls.callable_for("hla2"), "hla2", gamma=0.9, **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(grad_impls.callable_for("hla2:paper-backward"), "hla2", gamma=0.9, **opts)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        self.assertIn("backward:paper-decay-rule", gradient_keys(r, "dk"))
        r = hla_harness.verify(lambda q, k, v, do, **o: grad_impls.run("hla2", "", q, k, v, do, 1.0, False, 0, 0)[:2],
                               "hla2", **opts)
        self.assertEqual(r["verdict"], "error", r["summary"])


COMBINE_IMPLS = os.path.join(ROOT, "tests", "verify_impls", "combine_impls.py")


def verify_combine(name, *args, timeout=600):
    """`hla verify --combine --exec combine_impls.py NAME`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [HLA, "verify", "--combine", "--exec", f"{PY} {COMBINE_IMPLS} {name}", "--json", out, "--quiet", *args]
        return run_with_report(cmd, out, timeout)


class CombineVerdicts(unittest.TestCase):
    def test_exact_combines_compute(self):
        for name, op, gamma in [("hla2", "hla2", "0.9"), ("ahla", "ahla", "0.9"), ("linear", "linear", "0.9"),
                                ("hla3", "hla3", "1"), ("hla2:no-rho", "hla2", "0.9")]:
            with self.subTest(name=name):
                code, r, out = verify_combine(name, "--op", op, "--gamma", gamma)
                self.assertEqual(code, 0, out)
                self.assertTrue(r["checks"]["operator"]["checked"], out)
                self.assertGreater(r["checks"]["associativity"]["cases"], 10)

    def test_the_papers_decayed_combines_are_caught_and_named(self):
        for name, op, claim in [("hla2:paper", "hla2", "hla2.monoid.masked-decay.assoc"),
                                ("ahla:paper", "ahla", "ahla.monoid-decay.assoc")]:
            with self.subTest(name=name):
                code, r, out = verify_combine(name, "--op", op, "--gamma", "0.9")
                self.assertEqual((code, r["verdict"]), (1, "differs"), out)
                self.assertGreater(r["checks"]["associativity"]["failed"], 0, out)
                self.assertEqual([m["claim"] for m in r["matches"]], [claim], out)
                c = r["counterexample"]
                self.assertEqual(c["check"], "associativity")
                self.assertEqual([len(c[x]["q"]) for x in "ABC"], [1, 1, 1], out)  # the smallest three segments

    def test_other_faults(self):
        code, r, out = verify_combine("hla2:no-cross", "--op", "hla2")
        self.assertEqual(r["verdict"], "differs", out)
        self.assertEqual(r["checks"]["associativity"]["failed"], 0, out)  # associative, but not the operator
        self.assertGreater(r["checks"]["operator"]["failed"], 0, out)
        code, r, out = verify_combine("hla2:bad-identity", "--op", "hla2")
        self.assertGreater(r["checks"]["identity"]["failed"], 0, out)
        code, r, out = verify_combine("hla2:float32", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual(r["verdict"], "lower-precision", out)

    def test_exact_groups_follow_the_options(self):
        # An undecayed scan (ρ ignored) is exact at γ = 1: asked at γ = 1 it gets no decayed exact group and
        # computes; asked at γ = 0.9 it differs.
        code, r, out = verify_combine("hla2:undecayed", "--op", "hla2", "--gamma", "1")
        self.assertEqual((code, r["verdict"]), (0, "computes"), out)
        code, r, out = verify_combine("hla2:undecayed", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual((code, r["verdict"]), (1, "differs"), out)

    def test_bad_combine_requests_are_refused(self):
        # options a summary does not depend on are refused, not ignored; so is a mapping that sends two of the
        # user's parts onto one of SPEC's
        for extra in (["--state"], ["--grad"], ["--normalized"], ["--precision", "bf16"]):
            with self.subTest(extra=extra):
                code, r, out = verify_combine("hla2", "--op", "hla2", "--gamma", "0.9", *extra)
                self.assertEqual(code, 2, out)
                self.assertIn(extra[0], out)
        with tempfile.TemporaryDirectory() as tmp:
            parts = os.path.join(tmp, "parts.json")
            with open(parts, "w") as f:
                json.dump({"S": "S", "S2": "S", "C": "C", "m": "m", "G": "G", "h": "h"}, f)
            code, r, out = verify_combine("hla2", "--op", "hla2", "--parts", parts)
            self.assertEqual(code, 2, out)
            self.assertIn("both map onto", out)
            # a declared part the command never writes is a protocol finding, not a wrong value
            with open(parts, "w") as f:
                json.dump({"S": "S", "C": "C", "m": "m", "G": "G", "hh": "h"}, f)
            code, r, out = verify_combine("hla2", "--op", "hla2", "--parts", parts)
            self.assertEqual((code, r["verdict"]), (2, "error"), out)
            self.assertIn("no part 'hh'", out)

    def test_own_part_names(self):
        code, r, out = verify_combine("hla2:renamed", "--op", "hla2", "--gamma", "0.9")
        self.assertEqual(code, 0, out)
        self.assertFalse(r["checks"]["operator"]["checked"], out)  # nothing maps onto SPEC's: self-consistency only
        with tempfile.TemporaryDirectory() as tmp:
            parts = os.path.join(tmp, "parts.json")
            with open(parts, "w") as f:
                json.dump({"keys2": "S", "qv": "C", "qsum": "m", "cross": "G", "cross1": "h", "decay": "rho"}, f)
            code, r, out = verify_combine("hla2:renamed", "--op", "hla2", "--gamma", "0.9", "--parts", parts)
            self.assertEqual(code, 0, out)
            self.assertTrue(r["checks"]["operator"]["checked"], out)
            with open(parts, "w") as f:
                json.dump({"keys2": "Q"}, f)
            code, r, out = verify_combine("hla2:renamed", "--op", "hla2", "--parts", parts)
            self.assertEqual(code, 2, out)

    def test_module(self):
        import combine_impls
        import hla_harness
        s, c = combine_impls.callables("hla2")
        self.assertEqual(hla_harness.verify_combine(s, c, "hla2", gamma=0.9, d=4, dv=3)["verdict"], "computes")
        s, c = combine_impls.callables("hla2:paper")
        r = hla_harness.verify_combine(s, c, "hla2", gamma=0.9, d=4, dv=3)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        # combine(a, b) needs no keywords (ρ travels in the parts); an operator without decay gets no γ keyword at all
        s, c = combine_impls.callables("hla2")
        r = hla_harness.verify_combine(s, lambda a, b: c(a, b), "hla2", gamma=0.9, d=4, dv=3)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        self.assertEqual(r["options"]["gamma"], "9/10")
        s, c = combine_impls.callables("hla3")
        r = hla_harness.verify_combine(lambda q, k, v: s(q, k, v), lambda a, b: c(a, b), "hla3", d=3, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        s, c = combine_impls.callables("hla2:renamed")
        r = hla_harness.verify_combine(s, c, "hla2", gamma=0.9, d=4, dv=3,
                                       parts={v: k for k, v in combine_impls.RENAMED.items()})
        self.assertEqual(r["verdict"], "computes", r["summary"])


class ExecProtocolErrors(unittest.TestCase):
    def expect_error(self, name, text, *extra):
        code, r, out = verify(name, "--op", "hla2", *extra)
        self.assertEqual(code, 2, out)
        self.assertEqual(r["verdict"], "error")
        self.assertIn(text, json.dumps(r["findings"]))
        return r

    def test_crash(self):
        self.expect_error("hla2:crash", "CUDA out of memory")

    def test_shape_hint_only_after_a_shape_finding(self):
        hint = "--fixed-d --d D --dv DV"
        r = self.expect_error("hla2:crash", "CUDA out of memory")
        self.assertNotIn(hint, r["summary"])
        r = self.expect_error("hla2-chunked", "NotImplementedError", "--state")
        self.assertNotIn(hint, r["summary"])
        r = self.expect_error("hla2:block16-d8", "need n % 16 == 0")
        self.assertIn(hint, r["summary"])
        self.assertIn("(1 round)", r["summary"])

    def test_hang_is_killed(self):
        r = self.expect_error("hla2:hang", "timed out", "--timeout", "2")
        self.assertLess(r["timings"]["implementation_seconds"], 30)

    def test_wrong_shape(self):
        r = self.expect_error("hla2:transpose", "shape")
        # one n = dv case passes by accident: it localizes nothing
        self.assertEqual(r["localization"]["base"], "incomplete")
        self.assertEqual(r["matches"], [])

    def test_skipped_cases(self):
        self.expect_error("hla2:skip-short", "missing o.npy")

    def test_wrong_dtype(self):
        self.expect_error("hla2:float32-out", "is float32, expected float64")

    def test_truncated_file(self):
        r = self.expect_error("hla2:truncated", "malformed o.npy")
        # the message names the case's file, not a temporary directory that is gone
        self.assertNotRegex(json.dumps(r["findings"]), r"/tmp|/dev/shm|hla-verify")


class CommandLine(unittest.TestCase):
    def run_hla(self, *args):
        return subprocess.run([HLA, *args], capture_output=True, text=True, timeout=120)

    def test_bad_input_exits_2(self):
        for args in (["verify", "--op", "softmax", "--exec", "true"],
                     ["verify", "--op", "hla2", "--gamma", "2", "--exec", "true"],
                     ["verify", "--op", "hla2", "--dtype", "float16", "--exec", "true"],
                     ["verify", "--op", "hla2"],
                     ["verify", "--op", "hla2", "--exec", "true", "--o", "x.npy"],
                     ["verify", "--op", "hla2", "--q", "/nonexistent.npy", "--k", "a", "--v", "b", "--o", "c"]):
            p = self.run_hla(*args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn("error", p.stderr.lower() + p.stdout.lower())

    def test_list_state(self):
        p = self.run_hla("verify", "--op", "hla2", "--list-state", "--d", "4", "--dv", "3")
        self.assertEqual(p.returncode, 0, p.stderr)
        for part in ("S", "C", "m", "G", "h"):
            self.assertIn(part, p.stdout)
        self.assertIn("(4, 3)", p.stdout)

    def test_file_mode(self):
        rng = np.random.default_rng(3)
        q, k, v = (rng.standard_normal((40, w)) for w in (4, 4, 2))
        with tempfile.TemporaryDirectory() as tmp:
            for name, x in (("q", q), ("k", k), ("v", v)):
                np.save(os.path.join(tmp, name + ".npy"), x)
            right = impls.hla2(q, k, v, 0.75, False, 0.0, 0.0)[0]
            wrong = impls.IMPLS["hla2-paper-decay"](q, k, v, 0.75, False, 0.0, 0.0)[0]
            args = (["verify", "--op", "hla2", "--gamma", "3/4"]
                    + [f"--{n}={os.path.join(tmp, n + '.npy')}" for n in "qkv"])
            np.save(os.path.join(tmp, "o.npy"), right)
            p = self.run_hla(*args, "--o", os.path.join(tmp, "o.npy"))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            np.save(os.path.join(tmp, "o.npy"), wrong)
            p = self.run_hla(*args, "--o", os.path.join(tmp, "o.npy"), "--json", os.path.join(tmp, "r.json"))
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            with open(os.path.join(tmp, "r.json")) as f:
                r = json.load(f)
            self.assertIn("hla2/serial/paper", keys(r))


class PythonModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import hla_harness
        cls.h = hla_harness

    def test_reference_precisions_agree(self):
        rng = np.random.default_rng(1)
        q, k, v = (rng.integers(-2, 3, (6, w)).astype(float) for w in (3, 3, 2))
        exact = self.h.reference("hla2", q, k, v, gamma="3/4", normalized=True, eps=0.5)
        for precision in ("mpfr", "float64"):
            other = self.h.reference("hla2", q, k, v, gamma=0.75, normalized=True, eps=0.5, precision=precision)
            np.testing.assert_allclose(other, exact, rtol=1e-12)
        np.testing.assert_allclose(impls.hla2(q, k, v, 0.75, True, 0.5, 0.0)[0], exact, rtol=1e-12)
        with self.assertRaises(ValueError):
            self.h.reference("hla2", q, k, v, gamma=2.0)

    def test_verify_callables(self):
        opts = dict(max_n=64, d=4, dv=3)
        r = self.h.verify(impls.callable_for("hla2"), "hla2", gamma=0.9, normalized=True, eps=1e-3, **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = self.h.verify(impls.callable_for("hla2-paper-decay"), "hla2", gamma=0.9, **opts)
        self.assertEqual(r["verdict"], "differs")
        self.assertIn("hla2/serial/paper", keys(r))
        r = self.h.verify(impls.callable_for("hla2", state=True), "hla2", gamma=0.9, state=True, **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = self.h.verify(impls.callable_for("hla2-float32-inside"), "hla2", gamma=0.99, **opts)
        self.assertEqual(r["verdict"], "lower-precision", r["summary"])
        r = self.h.verify(impls.callable_for("hla2-float32-inside"), "hla2", gamma=0.99, precision="fp32", **opts)
        self.assertEqual(r["verdict"], "computes", r["summary"])

    def test_keywords_follow_the_signature_and_tensors_are_taken(self):
        plain = impls.callable_for("hla2")

        def positional_only(q, k, v):  # plain hla2 needs no options
            return plain(q, k, v, gamma=1.0, normalized=False, eps=0.0, ridge=0.0)
        r = self.h.verify(positional_only, "hla2", max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        # A γ the function cannot take is an error, never a silently undecayed "differs" or "computes".
        r = self.h.verify(positional_only, "hla2", gamma=0.5, max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("takes no keyword 'gamma'", json.dumps(r["findings"]))

        def named(q, k, v, gamma):
            return plain(q, k, v, gamma=gamma, normalized=False, eps=0.0, ridge=0.0)
        r = self.h.verify(named, "hla2", gamma=0.5, max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        import torch

        def tensor_out(q, k, v, **o):
            return torch.from_numpy(plain(q, k, v, **o)).requires_grad_()
        r = self.h.verify(tensor_out, "hla2", gamma=0.5, max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = self.h.verify(lambda q, k, v, **o: "not an array", "hla2", max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("is a str, expected a NumPy array", json.dumps(r["findings"]))

    def test_exceptions_are_the_error_verdict(self):
        def boom(q, k, v, **o):
            raise RuntimeError("kernel launch failed")
        r = self.h.verify(boom, "hla2", max_n=16, d=2, dv=2)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("kernel launch failed", json.dumps(r["findings"]))
        r = self.h.verify(lambda q, k, v, **o: q, "hla2", max_n=16, d=2, dv=3)
        self.assertEqual(r["verdict"], "error")
        self.assertIn("shape", json.dumps(r["findings"]))


class TorchExamples(unittest.TestCase):
    """The PyTorch examples, as a user would run them: through the CLI and through the module."""

    def run_example(self, script, *args):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            cmd = [HLA, "verify", "--exec", f"{PY} {os.path.join(ROOT, 'examples', script)}", "--json", out, *QUICK,
                   *args]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            report = None
            if os.path.exists(out):
                with open(out) as f:
                    report = json.load(f)
            return p.returncode, report, p.stdout + p.stderr

    def test_examples_through_the_cli(self):
        for script, args in (("torch_hla2_serial.py", ["--op", "hla2", "--gamma", "0.99", "--normalized", "--eps",
                                                       "1e-6", "--state"]),
                             ("torch_hla2_chunked.py", ["--op", "hla2", "--gamma", "0.99", "--ridge", "0.5", "--dtype",
                                                        "float32"]),
                             ("torch_ahla.py", ["--op", "ahla", "--gamma", "0.9", "--state"])):
            code, r, out = self.run_example(script, *args)
            self.assertEqual(code, 0, script + "\n" + out)

    def test_examples_through_the_module(self):
        import hla_harness
        import torch_hla2_chunked
        r = hla_harness.verify(torch_hla2_chunked.hla2_chunked, "hla2", gamma=0.9, normalized=True, eps=1e-3,
                               max_n=300, d=8, dv=8)
        self.assertEqual(r["verdict"], "computes", r["summary"])


class FlaStyleOps(unittest.TestCase):
    """hla_harness.verify(fn, op, layout=...) on an op in fla's calling convention (examples/fla_style_hla2.py:
    [B, T, H, K] torch tensors, scale, normalize, a state tuple), verified without an adapter (issue 47)."""

    def test_fla_style_op_computes(self):
        import fla_style_hla2
        import hla_harness
        fn = fla_style_hla2.hla2_bthk
        for more in ({}, {"normalized": True, "eps": 1e-6, "ridge": 0.5}, {"state": True}):
            with self.subTest(**more):
                r = hla_harness.verify(fn, "hla2", layout="bthk", max_n=33, d=3, dv=2, **more)
                self.assertEqual(r["verdict"], "computes", r["summary"])

    def test_head_first_and_declared_scale(self):
        import fla_style_hla2
        import hla_harness

        def head_first(q, k, v, **kw):  # [B, H, T, K] in and out
            o, st = fla_style_hla2.hla2_bthk(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)
            return o.transpose(1, 2), st

        r = hla_harness.verify(head_first, "hla2", layout="bhtk", max_n=33, d=3, dv=2, scale=0.5)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        # called with its default scale K^-1/2 (scale not passed): 1/d x SPEC's, named
        r = hla_harness.verify(lambda q, k, v: fla_style_hla2.hla2_bthk(q, k, v), "hla2", layout="bthk", max_n=33,
                               d=3, dv=2)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        factor = [m for m in r["matches"] if m["key"] == "convention:output-factor"]
        self.assertTrue(factor and factor[0]["factor"] == "d^-1", r["summary"])
        self.assertIn("queries scaled by d^-1/2", r["summary"])
        with self.assertRaises(Exception):
            hla_harness.verify(fla_style_hla2.hla2_bthk, "hla2", layout="tbhk")

    def test_cases_packed_in_batch_and_heads(self):
        """A round's cases of one shape go into calls of B x H different cases (3 x 4 where there are enough), each
        judged; a fault of the op's batch or head indexing, wrong packed and right alone, is named."""
        import fla_style_hla2
        import hla_harness
        import torch
        op = fla_style_hla2.hla2_bthk
        calls = []

        def recorded(q, k, v, **kw):
            calls.append((q.shape[0], q.shape[2], q.clone()))
            return op(q, k, v, **kw)

        r = hla_harness.verify(recorded, "hla2", layout="bthk", max_n=33, d=3, dv=2, normalized=True, eps=0.25)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        full = [x for b, h, x in calls if (b, h) == (3, 4)]
        self.assertTrue(full, [(b, h) for b, h, _ in calls])
        # twelve different cases in one call: no two (b, h) have the same queries
        q = full[0].transpose(1, 2).reshape(12, -1)
        self.assertEqual(len({tuple(row.tolist()) for row in q}), 12)

        def heads_rolled(q, k, v, **kw):  # head h returns head h - 1's outputs
            o, st = op(q, k, v, **kw)
            return o.roll(1, dims=2), st

        def batch_offset(q, k, v, **kw):  # batch b >= 1 reads the keys of batch b - 1
            return op(q, torch.cat([k[:1], k[:-1]]), v, **kw)

        def fourth_head(q, k, v, **kw):  # head 3 reads head 2's keys
            if k.shape[2] > 3:
                k = k.clone()
                k[:, :, 3] = k[:, :, 2]
            return op(q, k, v, **kw)

        for fn, key, text in ((heads_rolled, "layout:heads-mixed", "heads mixed up"),
                              (batch_offset, "layout:batch-dependent", "wrong only at batches 1, 2"),
                              (fourth_head, "layout:head-dependent", "wrong only at head 3")):
            with self.subTest(fn.__name__):
                r = hla_harness.verify(fn, "hla2", layout="bthk", max_n=33, d=3, dv=2, state=True)
                self.assertEqual(r["verdict"], "differs", r["summary"])
                self.assertEqual(keys(r), [key], r["summary"])
                self.assertIn(text, r["summary"])

    def test_gqa(self):
        """GQA (gqa=2: q [B, T, 2H, K], k and v [B, T, H, ...]): each query head is a case of its own, its key/value
        head shared with the next query head's, judged against SPEC; key/value heads tiled where they are interleaved
        (query head h reading key/value head h % H, a common GQA bug) is named."""
        import fla_style_hla2
        import hla_harness
        shapes = set()

        def gqa(q, k, v, tiled=False, **kw):
            G = q.shape[2] // k.shape[2]
            shapes.add((q.shape[0], q.shape[2], k.shape[2], v.shape[2]))
            k, v = (x.repeat(1, 1, G, 1) if tiled else x.repeat_interleave(G, 2) for x in (k, v))
            return fla_style_hla2.hla2_bthk(q, k, v, **kw)

        def right(q, k, v, scale=None, normalize=False, eps=1e-6, initial_state=None, output_final_state=False):
            return gqa(q, k, v, scale=scale, normalize=normalize, eps=eps, initial_state=initial_state,
                       output_final_state=output_final_state)

        r = hla_harness.verify(right, "hla2", layout="bthk", gqa=2, max_n=33, d=3, dv=2, state=True, normalized=True,
                               eps=0.25)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        self.assertIn((2, 4, 2, 2), shapes)
        r = hla_harness.verify(functools.partial(gqa, tiled=True), "hla2", layout="bthk", gqa=2, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        self.assertEqual(keys(r), ["layout:kv-heads-mixed"], r["summary"])
        self.assertIn("key/value heads tiled (repeat)", r["summary"])
        with self.assertRaises(ValueError):
            hla_harness.verify(right, "hla2", gqa=2)  # gqa= goes with layout=

    def test_gradients_through_the_adapter(self):
        """grad=True with layout=: the op's autograd gradients of L = sum <do, o>, per case of a packed call (with GQA
        one backward per query head of a key/value head), held to the exact gradients; a backward that drops dk
        differs in dk alone."""
        import fla_style_hla2
        import hla_harness
        import torch
        op = fla_style_hla2.hla2_bthk

        def gqa(q, k, v, scale=None, ridge=0.0, initial_state=None, output_final_state=False):
            G = q.shape[2] // k.shape[2]
            return op(q, k.repeat_interleave(G, 2), v.repeat_interleave(G, 2), scale=scale, ridge=ridge,
                      initial_state=initial_state, output_final_state=output_final_state)

        class NoKeyGradient(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, g):
                return torch.zeros_like(g)

        for fn, more in ((op, {"normalized": True, "eps": 0.25}), (gqa, {"gqa": 2, "ridge": 0.5})):
            with self.subTest(**more):
                r = hla_harness.verify(fn, "hla2", layout="bthk", grad=True, max_n=16, d=3, dv=2, **more)
                self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(lambda q, k, v: op(q, NoKeyGradient.apply(k), v, scale=1.0), "hla2", layout="bthk",
                               grad=True, max_n=16, d=3, dv=2, shrink_rounds=1, diagnose=False)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        self.assertEqual(r["outputs"], {"o": "computes", "dq": "computes", "dk": "differs", "dv": "computes"})

    def test_command_line_adapter(self):
        """`hla verify --layout bthk --exec FILE.py:FUNCTION`: the module's adapter from the command line, with its
        options (--gqa, --scale), exit codes and --json report."""
        impls = os.path.join(ROOT, "tests", "verify_impls", "fla_impls.py")
        small = ["--max-n", "33", "--d", "3", "--dv", "2", "--python", PY]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "report.json")
            code, r, text = run_with_report([HLA, "verify", "--layout", "bthk", "--gqa", "2", "--normalized", "--eps",
                                             "1/4", "--exec", impls + ":gqa", "--json", out, *small], out, 300)
            self.assertEqual((code, r["verdict"]), (0, "computes"), text)
            self.assertEqual(r["command"], impls + ":gqa")
            os.remove(out)
            code, r, text = run_with_report([HLA, "verify", "--layout", "bthk", "--exec", impls + ":heads_rolled",
                                             "--json", out, *small], out, 300)
            self.assertEqual((code, r["verdict"]), (1, "differs"), text)
            self.assertIn("layout:heads-mixed", keys(r), text)
        for args in (["--layout", "bthk", "--exec", impls + ":nothing", *small],  # no such function
                     ["--layout", "bthk", "--exec", impls + ":gqa", "--keep", *small],
                     ["--scale", "2", "--exec", "true"]):  # --scale goes with --layout
            p = subprocess.run([HLA, "verify", *args], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)

    def test_gated_op_packed(self):
        """Gates (fla's log-gates g, [B, T, H]) and states packed per case: a gated linear attention in fla's
        convention computes; one that gives every head head 0's gates is named."""
        import hla_harness
        import torch

        def gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, head0_gates=False):
            B, T, H, K = q.shape
            S, z = initial_state or (q.new_zeros(B, H, K, v.shape[-1]), q.new_zeros(B, H, K))
            a = torch.exp(g[:, :, :1].expand(B, T, H) if head0_gates else g)
            o = []
            for t in range(T):
                S = a[:, t, :, None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
                z = a[:, t, :, None] * z + k[:, t]
                o.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
            return torch.stack(o, 1), ((S, z) if output_final_state else None)

        r = hla_harness.verify(gla, "linear", layout="bthk", gates=True, state=True, max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "computes", r["summary"])
        r = hla_harness.verify(functools.partial(gla, head0_gates=True), "linear", layout="bthk", gates=True,
                               max_n=33, d=3, dv=2)
        self.assertEqual(r["verdict"], "differs", r["summary"])
        self.assertIn("layout:head-dependent", keys(r), r["summary"])


if __name__ == "__main__":
    unittest.main()
