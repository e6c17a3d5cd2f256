"""`hla run --outputs-only` (Options::state = false): the same outputs as a run that also returns the final state,
through the CLI, for the forms that skip work without the state (hla2's chunked forms skip C, which the outputs
read only with ridge). tests/test_foundation.cpp holds every registered form to this bit for bit; here the flag is
checked to reach them.

Run by scripts/test.sh with HLA_BUILD (the build folder).
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_verify import HLA  # noqa: E402  (the same build)


class OutputsOnly(unittest.TestCase):
    def error_line(self, *args):
        p = subprocess.run([HLA, "run", *args], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        line = re.search(r"vs (MPFR-256 )?reference: .*", p.stdout)
        self.assertIsNotNone(line, p.stdout)
        return line.group(0)

    def test_outputs_unchanged_with_and_without_the_state(self):
        for form in ("chunked-fused", "chunked"):
            for scalar in ("float", "double", "rational"):
                for more in ([], ["--ridge", "1/2", "--gamma", "3/4"], ["--normalized", "--eps", "1/8"]):
                    with self.subTest(form=form, scalar=scalar, more=more):
                        n = "40" if scalar == "rational" else "300"
                        args = ["--op", "hla2", "--form", form, "--scalar", scalar, "--n", n, "--d", "4", "--dv",
                                "3", "--chunk", "8", "--threads", "2", *more]
                        with_state = self.error_line(*args)
                        self.assertEqual(self.error_line(*args, "--outputs-only"), with_state)
                        if scalar == "rational":
                            self.assertIn("exact agreement", with_state)


if __name__ == "__main__":
    unittest.main()
