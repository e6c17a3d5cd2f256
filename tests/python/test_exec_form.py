"""`hla exec-form`: a registered form answering `hla verify --exec` through the protocol's files, as an outside
kernel would (the GPU forms' outside path, docs/gpu.md; here the CPU forms, which every machine has).

Run by scripts/test.sh with HLA_BUILD (the build folder) and PYTHONPATH=<build>/python.
"""
import os
import subprocess
import tempfile
import unittest

from test_verify import HLA, QUICK, run_with_report  # the build, the quick battery


def verify(*args):
    """(exit code, report or None, output) of `hla verify ARGS --json OUT`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        return run_with_report([HLA, "verify", *args, "--json", out], out, 600)


def exec_form(form):
    return f"{HLA} exec-form --form {form}"


class ExecForm(unittest.TestCase):
    def test_a_right_form_computes_with_gates_and_state(self):
        # the gated chunked form in float32, and the serial form carried through its own states (split halves)
        for args in (["--op", "hla2", "--gates", "--dtype", "float32", "--exec", exec_form("chunked")],
                     ["--op", "hla2", "--gamma", "0.9", "--state", "--exec", exec_form("serial")],
                     ["--op", "linear", "--gates", "--state", "--dtype", "float32", "--exec", exec_form("chunked")]):
            code, report, out = verify(*args, *QUICK)
            self.assertIsNotNone(report, out)
            self.assertEqual(report["verdict"], "computes", out)
            self.assertEqual(code, 0, out)

    def test_the_kept_process_answers_every_round(self):
        # the protocol's kept command: the first round from argv, answered on fd 3; later rounds from fd 4
        with tempfile.TemporaryDirectory() as tmp:
            one, two = os.path.join(tmp, "r1"), os.path.join(tmp, "r2")
            os.mkdir(one)
            os.mkdir(two)
            reply_r, reply_w = os.pipe()
            round_r, round_w = os.pipe()
            env = dict(os.environ, HLA_VERIFY_REPLY_FD=str(reply_w), HLA_VERIFY_ROUND_FD=str(round_r))
            p = subprocess.Popen([HLA, "exec-form", "--form", "serial", one], env=env, pass_fds=(reply_w, round_r))
            os.close(reply_w)
            os.close(round_r)
            with os.fdopen(reply_r) as replies, os.fdopen(round_w, "w") as rounds:
                self.assertEqual(replies.readline().strip(), one)
                rounds.write(two + "\n")
                rounds.flush()
                self.assertEqual(replies.readline().strip(), two)
            self.assertEqual(p.wait(timeout=60), 0)

    def test_gradients_of_a_cpu_form_are_refused_per_case(self):
        code, report, out = verify("--op", "hla2", "--gates", "--grad", "--exec", exec_form("chunked"), *QUICK)
        self.assertIsNotNone(report, out)
        self.assertEqual(report["verdict"], "error", out)
        self.assertNotEqual(code, 0, out)

    def test_bad_arguments_are_clear_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            for args, says in (([os.path.join(tmp, "missing")], "not a directory"),
                               (["--form", "nope", tmp], "no registered form")):
                argv = [HLA, "exec-form", *args] if args[0] == "--form" else [HLA, "exec-form", "--form", "chunked",
                                                                              *args]
                r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(says, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
